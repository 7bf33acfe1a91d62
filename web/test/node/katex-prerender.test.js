// The build-time typesetting (tools/katex-prerender.js): every formula a report can carry is
// typeset, the CSS keeps what those formulas need, and the built page has no KaTeX code.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';

import { engine_formulas, render_formulas, trim_katex_css } from '../../tools/katex-prerender.js';
import { WEB, WASM_DIR, load_engine } from '../support/engine.js';

const require = createRequire(import.meta.url);
const katex = require('katex');

test('katex-prerender: every fold rule of the engine typesets, and reports use only those', async () => {
  const formulas = await engine_formulas(WASM_DIR);
  assert.ok(formulas.length >= 10, `${formulas.length} rules`);
  const html = render_formulas(katex, formulas);
  for (const tex of formulas) assert.match(html[tex], /class="katex"/, tex);
  const engine = await load_engine();
  for (const p of engine.presets()) {
    for (const f of engine.analyze(p.config).folds ?? []) assert.ok(formulas.includes(f.formula), `${p.name}: ${f.formula}`);
  }
});

test('katex-prerender: a formula KaTeX cannot read fails the build', () => {
  assert.throws(() => render_formulas(katex, ['\\frac{1}{']), /KaTeX parse error/);
});

test('katex-prerender: the CSS keeps the used rules and woff2 faces of the used families', async () => {
  const css = readFileSync(require.resolve('katex/dist/katex.min.css'), 'utf8');
  const html = Object.values(render_formulas(katex, await engine_formulas(WASM_DIR))).join('');
  const { css: out, families } = trim_katex_css(css, html);
  assert.ok(out.length < css.length / 3, `${out.length} of ${css.length} bytes kept`);
  assert.ok(families.includes('KaTeX_Main') && families.includes('KaTeX_Math'), families.join(', '));
  assert.ok(!families.includes('KaTeX_Fraktur'), 'no unused family');
  assert.match(out, /\.katex\{/);
  assert.match(out, /\.katex \.mathnormal\{/);
  assert.doesNotMatch(out, /katex-display/, 'display math is not used');
  // \bar b needs the rule that gives accent bodies no width; its class sits inside :not().
  assert.match(out, /\.accent-body:not\(\.accent-full\)\{width:0\}/);
  const urls = [...out.matchAll(/url\(([^)]*)\)/g)].map((m) => m[1]);
  assert.ok(urls.length >= families.length);
  for (const u of urls) assert.match(u, /\.woff2$/);
  // A face per (family, weight, style) that KaTeX ships for the kept families.
  assert.equal((out.match(/@font-face/g) ?? []).length, urls.length);
});

test('katex-prerender: the built page carries no KaTeX JavaScript', { skip: !existsSync(resolve(WEB, 'dist/assets')) && 'no web/dist' }, () => {
  const js = readdirSync(resolve(WEB, 'dist/assets')).filter((f) => f.endsWith('.js'));
  assert.ok(js.length);
  for (const f of js) {
    const text = readFileSync(resolve(WEB, 'dist/assets', f), 'utf8');
    assert.doesNotMatch(text, /KaTeX parse error|renderToString/, f);
  }
});
