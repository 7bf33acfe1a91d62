// Typesets the page's formulas at build time, so the page ships KaTeX's CSS and the fonts its
// formulas use, but none of KaTeX's JavaScript (about 90 KB of the bundle, gzip).
//
// Every formula the page shows comes from the engine's fold-rule table (the `formula` field of a
// report's fold rows is a rule's LaTeX string, verbatim). The Node build of the engine lists the
// rules (`foldRules()`), so the set here is complete by construction; results.js still shows
// the raw LaTeX for a string it does not find (e.g. a page built against an older engine).
//
// Two virtual modules:
//   virtual:formulas    export default {latex: html}   (KaTeX HTML + MathML, for screen readers)
//   virtual:katex.css   KaTeX's CSS cut down to the rules these formulas use, and @font-face
//                       rules for the font families they need, woff2 only (every browser that
//                       runs the engine's wasm exceptions reads woff2).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';

import { node_engine } from './node-engine.js';

const require = createRequire(import.meta.url);

/** The fold rules' LaTeX strings, from the Node build of the engine in `wasm_dir`. */
export async function engine_formulas(wasm_dir) {
  const m = await node_engine(wasm_dir);
  if (typeof m.foldRules !== 'function') throw new Error(`the engine in ${wasm_dir} has no foldRules(): rebuild it (scripts/build-web.sh wasm)`);
  return JSON.parse(m.foldRules()).map((r) => r.formula);
}

/** {latex: html}; throws on a formula KaTeX cannot typeset, so a bad rule fails the build. */
export function render_formulas(katex, formulas) {
  const out = {};
  for (const tex of formulas) {
    out[tex] = katex.renderToString(tex, { throwOnError: true, displayMode: false, output: 'htmlAndMathml', strict: 'error' });
  }
  return out;
}

/** Splits "a,b:not(c,d)" at the top-level commas. */
function split_selectors(text) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(' || c === '[') depth++;
    else if (c === ')' || c === ']') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

/**
 * KaTeX's CSS, keeping only the selectors whose classes all occur in `html` and the
 * @font-face rules of the families the kept rules name (woff2 sources only).
 * @returns {{css: string, families: string[]}}
 */
export function trim_katex_css(css, html) {
  const used = new Set();
  for (const m of html.matchAll(/class="([^"]*)"/g)) for (const c of m[1].split(/\s+/)) if (c) used.add(c);
  const rules = [];
  const faces = [];
  // KaTeX's stylesheet is flat: no @media, no nesting, no braces inside values.
  for (const m of css.replace(/\/\*[\s\S]*?\*\//g, '').matchAll(/([^{}]+)\{([^{}]*)\}/g)) {
    const head = m[1].trim();
    const body = m[2];
    if (head === '@font-face') {
      faces.push(body);
      continue;
    }
    if (head.startsWith('@')) throw new Error(`katex-prerender: unexpected at-rule ${head} in KaTeX's CSS`);
    // A selector stays if the formulas use all of its classes; a class inside :not() is
    // not needed for a match (.accent-body:not(.accent-full) matches every accent body).
    const needs = (sel) => [...sel.replace(/:not\([^()]*\)/g, '').matchAll(/\.(-?[_a-zA-Z][-_a-zA-Z0-9]*)/g)].map((c) => c[1]);
    const keep = split_selectors(head).filter((sel) => needs(sel).every((c) => used.has(c)));
    if (keep.length) rules.push(`${keep.join(',')}{${body}}`);
  }
  const families = new Set();
  for (const r of rules) for (const f of r.matchAll(/KaTeX_[A-Za-z0-9]+/g)) families.add(f[0]);
  const kept_faces = faces
    .filter((f) => families.has(/font-family:\s*([^;]+)/.exec(f)?.[1].trim()))
    .map((f) => f.replace(/src:[^;}]*/, (src) => `src:${/url\([^)]*\.woff2\)\s*format\("woff2"\)/.exec(src)[0]}`))
    .map((f) => `@font-face{${f}}`);
  return { css: kept_faces.join('') + rules.join(''), families: [...families].sort() };
}

/**
 * @param {{wasm_dir: string}} options
 * @returns {import('vite').Plugin}
 */
export function katex_prerender({ wasm_dir }) {
  const katex_dist = dirname(require.resolve('katex/dist/katex.min.css'));
  // A path next to KaTeX's own CSS, so that its relative font URLs resolve to the package.
  const css_id = resolve(katex_dist, 'katex.biaslab-trimmed.css');
  let rendered = null;
  const formulas = () =>
    (rendered ??= engine_formulas(wasm_dir).then((list) => render_formulas(require('katex'), list)));
  return {
    name: 'biaslab-katex-prerender',
    resolveId(source) {
      if (source === 'virtual:formulas') return '\0virtual:formulas';
      if (source === 'virtual:katex.css') return css_id;
      return null;
    },
    async load(id) {
      if (id === '\0virtual:formulas') return `export default ${JSON.stringify(await formulas())};`;
      if (id === css_id) {
        const html = Object.values(await formulas()).join('');
        return trim_katex_css(readFileSync(resolve(katex_dist, 'katex.min.css'), 'utf8'), html).css;
      }
      return null;
    },
  };
}
