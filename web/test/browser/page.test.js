// The built page (web/dist) in headless Chromium, served from 127.0.0.1 by the test itself.
// Screenshots go to web/test/screenshots/ (gitignored) for a human to look at.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';

import { serve } from '../support/static-server.js';
import { launch, watch } from '../support/browser.js';
import { WEB, load_engine } from '../support/engine.js';
import { encode_link } from '../../src/share-codec.js';

const DIST = resolve(WEB, 'dist');
const SHOTS = resolve(WEB, 'test/screenshots');

// The host page uses the listener exactly as docs/embed.md gives it, so the docs are tested too.
async function host_page(src) {
  const doc = await readFile(resolve(WEB, '../docs/embed.md'), 'utf8');
  const listener = [...doc.matchAll(/```html\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes("addEventListener('message'"));
  assert.ok(listener, 'docs/embed.md has the host-page listener');
  return `<!doctype html><html><head><meta charset="utf-8"><title>host</title><link rel="icon" href="data:,"></head><body>
<h1>A blog post</h1>
<iframe class="biaslab-embed" src="${src.replace(/&/g, '&amp;')}" title="biaslab experiment" style="width:100%;border:0" height="200"></iframe>
<script>
  window.heights = [];
  window.addEventListener('message', (event) => { if (event.data && event.data.type === 'biaslab:height') window.heights.push(event.data.height); });
</script>
${listener}</body></html>`;
}

let server, browser;

before(async () => {
  if (!existsSync(resolve(DIST, 'index.html'))) throw new Error(`${DIST} is missing: run npm run build (or scripts/build-web.sh)`);
  await mkdir(SHOTS, { recursive: true });
  server = await serve(DIST);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Opens a page and waits for its first analysis; returns the page and its problem list. */
async function open(url, { viewport, color_scheme, timeout = 60000 } = {}) {
  const page = await browser.context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  if (color_scheme) await page.emulateMedia({ colorScheme: color_scheme });
  const problems = watch(page, server.url);
  await page.goto(url);
  await page.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1, null, { timeout });
  return { page, problems };
}

const analyses = (page) => page.evaluate(() => Number(document.documentElement.dataset.analyses ?? 0));

/** Runs `action`, then waits until the page has finished one more analysis. */
async function after_analysis(page, action) {
  const n = await analyses(page);
  await action();
  await page.waitForFunction((n) => Number(document.documentElement.dataset.analyses ?? 0) > n, n, { timeout: 60000 });
}

const table_texts = (page) => page.$$eval('#results-body table', (ts) => ts.map((t) => t.innerText));
const bias_names = (page) => page.$$eval('table.table-biases > tbody > tr > th', (ths) => ths.map((th) => th.innerText.trim()));

test('page: loads with no console error, no failed request and nothing from another host', async () => {
  const t0 = Date.now();
  const { page, problems } = await open(server.url);
  const ms = Date.now() - t0;
  await page.waitForTimeout(300); // late errors (fonts, plot) would show up here
  assert.deepEqual(problems, []);
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok');
  console.log(`first results ${ms} ms after navigation; requests: ${server.requests.length}`);
  await page.close();
});

// The typeset formulas are a module of their own, fetched as the page starts: a formula drawn
// before it lands is an empty placeholder until then.
const formulas_in = (page) => page.waitForFunction(() => [...document.querySelectorAll('.formula')].every((el) => el.childNodes.length > 0));

test('page: the default experiment renders all tables, formulas and the plot', async () => {
  const { page } = await open(server.url);
  assert.equal(await page.inputValue('#preset'), 'default');
  const names = await bias_names(page);
  assert.equal(names.length, 6, names.join(', '));
  assert.ok(names.includes('layers.0.body.1.k_proj.bias'));
  const k_row = await page.$eval('table.table-biases tbody tr:nth-child(3)', (tr) => tr.innerText);
  assert.match(k_row, /redundant/);
  assert.match(k_row, /64 of 64/);
  for (const id of ['folds', 'minimal', 'invariances']) assert.ok(await page.$(`table.table-${id} tbody tr`), id);
  await formulas_in(page);
  assert.ok((await page.$$('table.table-folds .katex')).length >= 3, 'KaTeX formulas');
  assert.ok(await page.$('#section-sweep canvas'), 'sweep plot');
  assert.match(await page.textContent('#summary'), /1 redundant/);
  await page.close();
});

test('page: editing a layer updates the tables and the link without adding history entries', async () => {
  const { page } = await open(server.url);
  const history_before = await page.evaluate(() => history.length);
  await after_analysis(page, () => page.uncheck('[data-path="layers[0].body[1].k_bias"]'));
  const names = await bias_names(page);
  assert.equal(names.length, 5);
  assert.ok(!names.includes('layers.0.body.1.k_proj.bias'));
  assert.match(await page.inputValue('#config-json'), /"k_bias": false/);
  await page.waitForFunction(() => location.hash.startsWith('#v1.'));
  // Add a layer, then move it up: both are edits, none may push a history entry.
  await after_analysis(page, () => page.click('.stack-editor > .layer-list-wrap > .add-row button'));
  assert.equal((await bias_names(page)).length, 6, 'the new linear layer brings a bias');
  await after_analysis(page, () => page.click('[aria-label="Move layers.2 up"]'));
  assert.equal(await page.evaluate(() => history.length), history_before);
  // The minimal model is one click away from the editor.
  await after_analysis(page, () => page.click('#load-minimal'));
  const minimal = JSON.parse(await page.inputValue('#config-json'));
  assert.equal(minimal.layers[0].body[0].elementwise_affine, false, 'the LayerNorm affine was folded away');
  assert.ok((await bias_names(page)).length < 6);
  assert.equal(await page.evaluate(() => history.length), history_before);
  await page.close();
});

// One stack on which every fold rule of the engine applies, so every formula is on screen.
const EVERY_RULE = {
  shape: { batch: 2, tokens: 4, features: 16, grid: [2, 2] },
  layers: [
    { type: 'parallel', branches: [[{ type: 'linear' }], [{ type: 'relu' }, { type: 'linear' }]] },
    { type: 'layernorm' }, { type: 'linear' }, { type: 'rmsnorm' }, { type: 'linear' },
    { type: 'batchnorm', mode: 'eval' }, { type: 'linear' }, { type: 'attention', num_heads: 2 },
    { type: 'linear' }, { type: 'batchnorm' }, { type: 'linear' }, { type: 'layernorm' },
    { type: 'linear' }, { type: 'linear' }, { type: 'layernorm', bias: false },
    { type: 'attention', num_heads: 2, rope: true, rotary_dim: 4 },
    { type: 'residual', body: [{ type: 'layernorm' }, { type: 'linear' }] }, { type: 'layernorm' },
    { type: 'conv2d' }, { type: 'batchnorm', mode: 'eval' }, { type: 'relu' }, { type: 'batchnorm', mode: 'eval' }, { type: 'conv1d' },
  ],
};

test('page: every formula is typeset at build time and draws only with fonts it loaded', async () => {
  const engine = await load_engine();
  const rules = JSON.parse(engine.module.foldRules());
  const { page, problems } = await open(server.url + encode_link(engine.schema(), EVERY_RULE));
  const shown = await page.$$eval('table.table-folds tbody tr', (trs) => trs.map((tr) => tr.querySelector('.col-rule code').textContent));
  assert.deepEqual([...new Set(shown)].sort(), rules.map((r) => r.id).sort(), 'the stack shows every rule');
  await formulas_in(page);
  assert.equal(await page.$$eval('.formula-tex', (l) => l.length), 0, 'no formula fell back to raw LaTeX');
  assert.equal(await page.$$eval('table.table-folds .formula .katex .katex-mathml math', (l) => l.length), shown.length, 'MathML for screen readers');
  await page.evaluate(() => document.fonts.ready);
  // Every glyph's face must be one the page declared and loaded: a missing @font-face would
  // fall back to a system serif without any error.
  const faces = await page.evaluate(() => {
    const norm = (w) => ({ normal: '400', bold: '700' })[w] ?? String(w);
    const loaded = [...document.fonts].filter((f) => f.status === 'loaded').map((f) => `${f.family.replace(/"/g, '')} ${norm(f.weight)} ${f.style}`);
    const needed = new Set();
    for (const el of document.querySelectorAll('.katex-html *')) {
      if (![...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim())) continue;
      const cs = getComputedStyle(el);
      const family = cs.fontFamily.split(',')[0].trim().replace(/"/g, '');
      needed.add(`${family} ${norm(cs.fontWeight)} ${cs.fontStyle}`);
    }
    return { loaded, needed: [...needed] };
  });
  for (const face of faces.needed) assert.ok(faces.loaded.includes(face), `${face} is drawn but not loaded (loaded: ${faces.loaded.join('; ')})`);
  assert.ok(faces.needed.some((f) => f.startsWith('KaTeX_Math')), faces.needed.join('; '));
  await page.locator('#section-folds').screenshot({ path: resolve(SHOTS, 'formulas.png') });
  assert.deepEqual(problems, []);
  console.log(`KaTeX faces drawn: ${faces.needed.join('; ')}`);
  await page.close();
});

// Issue 8: two tokens into one 1024-wide head. The query bias gains about one rank per input, so
// settling it would take ~1024 inputs, beyond the structural budget: the engine answers
// "undetermined" with bounds and a reason instead of a number.
const UNDETERMINED = { version: 1, seed: 1, dtype: 'float64', shape: { batch: 1, tokens: 2, features: 1024 }, layers: [{ type: 'attention', num_heads: 1 }] };

test('page: an undetermined bias shows its bounds, a verdict style of its own and the reason', async () => {
  const schema = (await load_engine()).schema();
  const { page, problems } = await open(server.url + encode_link(schema, UNDETERMINED), { timeout: 240000 });
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok');
  const row = (param) => page.locator('table.table-biases tbody tr', { has: page.locator('th', { hasText: param }) });
  const q = row('layers.0.q_proj.bias');
  const bounds = (await q.locator('.col-redundant').innerText()).trim();
  assert.match(bounds, /^\d+-\d+ of 1024$/, 'bounds, not one number');
  const badge = q.locator('.col-verdict .badge');
  assert.equal((await badge.innerText()).trim(), '?\u00a0undetermined');
  const reason = await q.locator('.col-verdict .term').getAttribute('data-detail');
  assert.match(reason, /budget/, 'the reason in the verdict\'s tooltip');
  assert.match(await q.locator('.col-why').innerText(), /Undetermined: .*budget/, 'the reason in the row');
  // The bounds explained in the row itself, not only in a tooltip.
  const [lo, hi] = bounds.split(' ')[0].split('-');
  assert.match(await q.locator('.col-why').innerText(), new RegExp(`Bounds: at least ${lo} and at most ${hi} of the 1024 directions are redundant: the rank found, ${1024 - Number(hi)}, is a lower bound`));
  assert.match(await q.locator('.col-redundant [title]').getAttribute('title'), /at least \d+ and at most \d+ of 1024/);
  // Its own look: neither the colours of "redundant" (k_proj) nor of "effective" (o_proj).
  const look = (locator) => locator.locator('.col-verdict .badge').evaluate((el) => {
    const cs = getComputedStyle(el);
    return { bg: cs.backgroundColor, fg: cs.color, border: `${cs.borderTopStyle} ${cs.borderTopColor}` };
  });
  const [undetermined, redundant, effective] = [await look(q), await look(row('layers.0.k_proj.bias')), await look(row('layers.0.o_proj.bias'))];
  // The mark and the word are held together by a no-break space.
  assert.equal((await row('layers.0.k_proj.bias').locator('.col-verdict').innerText()).trim(), '○\u00a0redundant');
  assert.equal((await row('layers.0.o_proj.bias').locator('.col-verdict').innerText()).trim(), '●\u00a0effective');
  for (const other of [redundant, effective]) {
    assert.notEqual(undetermined.bg, other.bg);
    assert.notEqual(undetermined.fg, other.fg);
  }
  assert.match(undetermined.border, /^dashed /);
  assert.match(await page.textContent('#summary'), /1 redundant, 0 partly redundant, 2 effective, 1 undetermined/);
  // The exports carry the same bounds and the reason.
  const saved = async (selector) => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(selector)]);
    return readFile(await download.path(), 'utf8');
  };
  const md = await saved('#section-biases .exports button:has-text("Markdown")');
  assert.ok(md.includes(`| layers.0.q_proj.bias | undetermined | ${bounds} | undetermined |`), md);
  assert.match(md, /Undetermined: [^|]*budget/);
  const csv = await saved('#section-biases .exports button:has-text("CSV")');
  assert.ok(csv.includes(`layers.0.q_proj.bias,undetermined,${bounds.replace(' of ', '/')},undetermined,`), csv);
  // The sweep legend names it as undetermined.
  assert.match(await page.locator('#section-sweep .sweep-legend').innerText(), /layers\.0\.q_proj\.bias \(undetermined\)/);
  await page.locator('#section-biases').screenshot({ path: resolve(SHOTS, 'undetermined.png') });
  assert.deepEqual(problems, []);
  console.log(`undetermined row: ${bounds}; ${reason}`);
  await page.close();
});

// The first-load engine has no token rows: a Jacobian its own every-row estimate puts over the
// limit (512 directions x 264 tokens x width 512, 66 M entries) must go to the engine that has
// them (2 tokens' rows here), not be refused by the first.
test('page: a config that only token rows fit is handed to the engine that has them', async () => {
  const engine = await load_engine();
  const config = { version: 1, seed: 3, dtype: 'float32', shape: { batch: 1, tokens: 264, features: 512 }, layers: [{ type: 'linear', out_features: 512 }, { type: 'layernorm', elementwise_affine: false }] };
  const { page, problems } = await open(server.url + encode_link(engine.schema(), config));
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok', await page.textContent('#message'));
  const requested = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name).filter((n) => /biaslab-full/.test(n)));
  assert.equal(requested.filter((n) => n.endsWith('.wasm')).length, 1, `the full engine's module: ${requested.join(', ')}`);
  const row = await page.$eval('table.table-biases > tbody > tr', (tr) => tr.innerText);
  assert.match(row, /1 of 512/);
  assert.deepEqual(problems, []);
  await page.close();
});

test('page: a convolution loads the engine that has it, on an image grid the form edits', async () => {
  const engine = await load_engine();
  const config = JSON.parse(engine.presets().find((p) => p.name === 'resnet-basic-block').config);
  const { page, problems } = await open(server.url + encode_link(engine.schema(), config));
  // The first-load engine hands the config on; the answer comes from the one with convolutions.
  const requested = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name).filter((n) => /biaslab-full/.test(n)));
  // (the page fetches and compiles the module; its loader is the worker's importScripts)
  assert.equal(requested.filter((n) => n.endsWith('.wasm')).length, 1, `the full engine's module: ${requested.join(', ')}`);
  assert.deepEqual(await bias_names(page), ['layers.0.body.0.bias', 'layers.0.body.1.bias', 'layers.0.body.3.bias', 'layers.0.body.4.bias']);
  const first = await page.$eval('table.table-biases > tbody > tr', (tr) => tr.innerText);
  assert.match(first, /64 of 64/);
  // The grid field shows H × W; typing another grid sets the tokens with it.
  assert.equal(await page.inputValue('[data-path="shape.grid"]'), '8 × 8');
  await after_analysis(page, () => page.fill('[data-path="shape.grid"]', '4x6'));
  assert.equal(await page.inputValue('[data-path="shape.tokens"]'), '24');
  assert.equal(await page.isHidden('#message'), true);
  // Text that is not a grid stays in the box, and the engine names the field.
  await after_analysis(page, () => page.fill('[data-path="shape.grid"]', '4x'));
  assert.match(await page.textContent('#message'), /shape\.grid/);
  assert.equal(await page.inputValue('[data-path="shape.grid"]'), '4x');
  await after_analysis(page, () => page.fill('[data-path="shape.grid"]', '3 × 3'));
  assert.equal(await page.isHidden('#message'), true);
  assert.deepEqual(problems, []);
  await page.close();
});

test('page: an invalid edit names its JSON path and keeps the last good results', async () => {
  const { page } = await open(server.url);
  const before_tables = await table_texts(page);
  await after_analysis(page, () => page.fill('[data-path="layers[0].body[1].num_heads"]', '5'));
  const message = await page.textContent('#message');
  assert.match(message, /layers\[0\]\.body\[1\]\.num_heads/);
  assert.match(message, /does not divide/);
  assert.equal(await page.getAttribute('[data-path="layers[0].body[1].num_heads"]', 'aria-invalid'), 'true');
  assert.deepEqual(await table_texts(page), before_tables, 'last good results kept');
  assert.ok(await page.$('#results.stale'));
  await page.screenshot({ path: resolve(SHOTS, 'invalid-edit.png') });
  // Undoing the edit brings back the experiment the tables show: no message, not stale.
  await after_analysis(page, () => page.fill('[data-path="layers[0].body[1].num_heads"]', '4'));
  assert.equal(await page.isHidden('#message'), true);
  assert.equal(await page.$('#results.stale'), null);
  await after_analysis(page, () => page.fill('[data-path="layers[0].body[1].num_heads"]', '5'));
  // Broken JSON in the text editor: a message with line and column, results still kept.
  await page.fill('#config-json', '{"layers": [ {"type": "linear"} ');
  await page.waitForFunction(() => /line \d+, column \d+|JSON/.test(document.getElementById('message').textContent));
  assert.deepEqual(await table_texts(page), before_tables);
  // Fix it: the message goes, fresh results come.
  await after_analysis(page, () => page.fill('#config-json', '{"layers": [{"type": "linear"}, {"type": "batchnorm"}]}'));
  assert.equal(await page.isHidden('#message'), true);
  assert.deepEqual(await bias_names(page), ['layers.0.bias', 'layers.1.bias']);
  await page.close();
});

test('page: a share link opened in a fresh page gives identical numbers', async () => {
  const { page } = await open(server.url);
  await after_analysis(page, () => page.selectOption('#preset', 'norm-zoo'));
  await after_analysis(page, () => page.fill('[data-path="seed"]', '12345'));
  await page.waitForFunction(() => location.hash.startsWith('#v1.'));
  await page.waitForTimeout(300); // the link follows edits after a short debounce
  const url = await page.evaluate(() => location.href);
  const tables = await table_texts(page);
  const config = await page.inputValue('#config-json');
  await page.close();

  const fresh = await browser.context.newPage();
  const problems = watch(fresh, server.url);
  await fresh.goto(url);
  await fresh.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1, null, { timeout: 60000 });
  assert.deepEqual(await table_texts(fresh), tables);
  assert.equal(await fresh.inputValue('#config-json'), config);
  assert.deepEqual(problems, []);
  console.log(`share link length: ${url.length} characters`);
  await fresh.close();
});

test('page: corrupted and truncated links show a message and the default experiment', async () => {
  const { page } = await open(server.url);
  await after_analysis(page, () => page.selectOption('#preset', 'postnorm-transformer'));
  await page.waitForTimeout(300);
  const good = await page.evaluate(() => location.hash);
  await page.close();
  for (const hash of ['#v1.abc.!!garbage!!', good.slice(0, Math.floor(good.length / 2)), '#v7.x.y']) {
    const { page: p } = await open(server.url + hash);
    const message = await p.textContent('#link-notice');
    assert.match(message, /Link problem/, hash);
    assert.match(message, /default experiment/);
    assert.equal(await p.inputValue('#preset'), 'default');
    assert.equal((await bias_names(p)).length, 6);
    await p.close();
  }
});

test('page: a good link to an invalid experiment opens it and names the problem', async () => {
  // Not a broken link: the reader should see the experiment and what is wrong with it.
  const schema = (await load_engine()).schema();
  const hash = encode_link(schema, { layers: [{ type: 'attention', num_heads: 7 }] });
  const { page } = await open(server.url + hash);
  assert.equal(await page.isHidden('#link-notice'), true);
  assert.match(await page.textContent('#message'), /layers\.0\.num_heads \(JSON path: layers\[0\]\.num_heads\): 7 does not divide features 64/);
  assert.equal(await page.inputValue('[data-path="layers[0].num_heads"]'), '7');
  assert.match(await page.textContent('.inline-error'), /does not divide/);
  await page.close();
});

test('page: a long analysis shows progress and can be cancelled; the last results stay', async () => {
  const { page } = await open(server.url);
  const before_tables = await table_texts(page);
  await page.selectOption('#preset', 'article2-all-biases');
  await page.waitForSelector('#progress:not([hidden])', { timeout: 5000 });
  assert.match(await page.textContent('#progress-text'), /%/);
  // The page stays responsive while the worker computes.
  const t0 = Date.now();
  await page.evaluate(() => new Promise((ok) => setTimeout(ok, 50)));
  assert.ok(Date.now() - t0 < 1000, 'main thread blocked');
  await page.click('#cancel');
  await page.waitForSelector('#progress[hidden]', { state: 'attached' });
  assert.match(await page.textContent('#message'), /Analysis cancelled/);
  assert.ok(await page.$('#results.stale'), 'the old results are marked as not matching the experiment');
  assert.deepEqual(await table_texts(page), before_tables);
  // Any edit (or "Run it anyway") clears the notice and analyses again.
  await after_analysis(page, () => page.selectOption('#preset', 'article1-linear-batchnorm'));
  assert.equal(await page.isHidden('#message'), true);
  assert.equal(await page.$('#results.stale'), null);
  await page.close();
});

test('page: a stale result never overwrites a newer one', async () => {
  const { page } = await open(server.url);
  await page.selectOption('#preset', 'article2-all-biases'); // seconds of work
  await page.waitForTimeout(200);
  await after_analysis(page, () => page.selectOption('#preset', 'article1-qk-softmax'));
  await page.waitForTimeout(1500);
  assert.deepEqual(await bias_names(page), ['layers.0.q_proj.bias', 'layers.0.k_proj.bias']);
  assert.equal(await page.inputValue('#preset'), 'article1-qk-softmax');
  await page.close();
});

test('page: embed mode shows experiment and results, posts its height, keeps its URL', async () => {
  const { page } = await open(server.url);
  await after_analysis(page, () => page.selectOption('#preset', 'article1-linear-layernorm'));
  await page.waitForTimeout(300);
  const hash = await page.evaluate(() => location.hash);
  await page.close();

  const src = `${server.url}?embed=1${hash}`;
  server.routes['/host.html'] = await host_page(src);
  const host = await browser.context.newPage();
  const problems = watch(host, server.url);
  await host.goto(`${server.url}host.html`);
  await host.waitForFunction(() => window.heights.length > 0 && window.heights.at(-1) > 400, null, { timeout: 60000 });
  const frame = host.frames().find((f) => f.url().includes('embed=1'));
  await frame.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1);
  await host.waitForTimeout(500);
  const heights = await host.evaluate(() => window.heights);
  const content = await frame.evaluate(() => Math.ceil(document.getElementById('app').getBoundingClientRect().height));
  assert.equal(heights.at(-1), content, `posted ${heights.join(', ')}`);
  const frame_height = await host.$eval('iframe.biaslab-embed', (f) => f.getBoundingClientRect().height);
  assert.equal(Math.round(frame_height), content, 'the documented listener sized the iframe');
  assert.equal(frame.url(), src, 'the embed rewrote its own URL');
  assert.equal(await frame.isHidden('#editor-grid'), true);
  assert.equal(await frame.isHidden('#copy-link'), true);
  const open_link = await frame.getAttribute('#open-full', 'href');
  assert.ok(open_link.startsWith(server.url) && !open_link.includes('embed=1') && open_link.includes(hash), open_link);
  assert.ok(await frame.$('table.table-biases'));
  assert.deepEqual(problems, []);
  await host.screenshot({ path: resolve(SHOTS, 'embed-host.png'), fullPage: true });
  console.log(`embed heights posted: ${heights.join(', ')}`);
  await host.close();
});

test('page: tables export as Markdown and CSV, the report as JSON, the plot as PNG', async () => {
  const { page } = await open(server.url);
  const saved = async (selector) => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(selector)]);
    return { name: download.suggestedFilename(), text: await readFile(await download.path(), 'utf8') };
  };
  const md = await saved('#section-biases .exports button:has-text("Markdown")');
  assert.equal(md.name, 'biaslab-default-biases.md');
  assert.match(md.text, /^### Biases/);
  assert.match(md.text, /\| layers\.0\.body\.1\.k_proj\.bias \| redundant \| 64 of 64 \|/);
  const csv = await saved('#section-folds .exports button:has-text("CSV")');
  assert.equal(csv.name, 'biaslab-default-folds.csv');
  assert.match(csv.text, /^Rule,Formula,Where/);
  const json = await saved('#download-json');
  assert.equal(JSON.parse(json.text).ok, true);
  const [png] = await Promise.all([page.waitForEvent('download'), page.click('#download-png')]);
  const bytes = await readFile(await png.path());
  assert.equal(bytes.subarray(1, 4).toString(), 'PNG');
  await page.close();
});

test('page: the experiment downloads as a PyTorch script and its safetensors weights', async () => {
  const { page } = await open(server.url);
  const files = {};
  page.on('download', async (d) => { files[d.suggestedFilename()] = await readFile(await d.path()); });
  await page.click('#download-torch');
  await page.waitForFunction(() => document.querySelector('#download-torch') && !document.querySelector('#download-torch').disabled);
  for (let i = 0; i < 50 && Object.keys(files).length < 2; ++i) await page.waitForTimeout(100);
  const script = files['biaslab-default.py'];
  const weights = files['biaslab-default.safetensors'];
  assert.ok(script, 'the script was downloaded');
  assert.ok(weights, 'the weights were downloaded');
  assert.match(script.toString('utf8'), /^#!\/usr\/bin\/env python3/);
  assert.match(script.toString('utf8'), /import torch/);
  // The title names the preset, and the script says its deltas are its own draws.
  assert.match(script.toString('utf8'), /^"""default \(Pre-norm attention block\): a biaslab experiment/m);
  assert.match(script.toString('utf8'), /draws its own random directions/);
  // safetensors: 8-byte little-endian header length, then a JSON header naming every tensor.
  const n = Number(weights.readBigUInt64LE(0));
  const header = JSON.parse(weights.subarray(8, 8 + n).toString('utf8'));
  assert.deepEqual(header['layers.0.body.1.k_proj.bias'].shape, [64]);
  assert.deepEqual(header.input.shape, [2, 16, 64]);
  const end = Math.max(...Object.entries(header).filter(([k]) => k !== '__metadata__').map(([, t]) => t.data_offsets[1]));
  assert.equal(weights.length, 8 + n + end, 'the file is exactly header + data');
  await page.close();
});

test('page: a module fetched on demand that does not arrive is said, and the page goes on', async () => {
  // As when the site was updated after this page loaded: the table export's and the PyTorch
  // export's code are no longer on the server.
  const { page, problems } = await open(server.url);
  await page.route(/(table-export|torch-download)-[^/]*\.js$/, (route) => route.fulfill({ status: 404, body: 'gone' }));
  await page.click('#section-biases .exports button:has-text("Markdown")');
  await page.waitForSelector('#message:not([hidden])');
  const text = await page.textContent('#message');
  assert.match(text, /Part of the page did not load \(.*table-export.*\): reload the page\./);
  // The PyTorch export's button says the same; the tables and the editor still work.
  await page.click('#download-torch');
  await page.waitForFunction(() => /torch-download/.test(document.getElementById('message').textContent));
  assert.equal(await page.isDisabled('#download-torch'), false);
  const n = await analyses(page);
  const json = await page.inputValue('#config-json');
  assert.match(json, /"seed": \d+/);
  await page.fill('#config-json', json.replace(/"seed": \d+/, '"seed": 12345'));
  await page.waitForFunction((n) => Number(document.documentElement.dataset.analyses ?? 0) > n, n, { timeout: 60000 });
  assert.ok(await page.$('table.table-biases'));
  // The only problems logged are the two missing files (their 404s, as the console says them).
  assert.deepEqual(problems.filter((p) => !/table-export|torch-download|status of 404/.test(p)), []);
  await page.close();
});

test('page: keyboard only: skip link first, a layer can be added with Enter', async () => {
  const { page } = await open(server.url);
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.className), 'skip-link');
  const add = page.locator('.stack-editor > .layer-list-wrap > .add-row button');
  await add.focus();
  await after_analysis(page, () => page.keyboard.press('Enter'));
  assert.equal(await page.$$eval('.stack-editor > .layer-list-wrap > ol > li', (l) => l.length), 3);
  assert.equal(await page.evaluate(() => document.activeElement.textContent), '+ Add layer', 'focus stays on the button');
  await page.close();
});

test('page: screenshots at desktop width, 375 px and in dark mode', async () => {
  const desktop = await open(server.url);
  await desktop.page.waitForTimeout(300);
  await desktop.page.screenshot({ path: resolve(SHOTS, 'desktop.png'), fullPage: true });
  await desktop.page.close();

  const mobile = await open(server.url, { viewport: { width: 375, height: 812 } });
  await mobile.page.waitForTimeout(300);
  const overflow = await mobile.page.evaluate(() => document.documentElement.scrollWidth);
  await mobile.page.screenshot({ path: resolve(SHOTS, 'mobile-375.png'), fullPage: true });
  assert.ok(overflow <= 375, `the page is ${overflow} px wide at 375 px`);
  await mobile.page.close();

  const dark = await open(server.url, { color_scheme: 'dark' });
  await dark.page.waitForTimeout(300);
  const bg = await dark.page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.notEqual(bg, 'rgb(255, 255, 255)');
  await dark.page.screenshot({ path: resolve(SHOTS, 'dark.png'), fullPage: true });
  // The override beats the system setting.
  await dark.page.selectOption('#theme', 'light');
  assert.equal(await dark.page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(255, 255, 255)');
  await dark.page.selectOption('#theme', 'system');
  await dark.page.close();

  const dark_mobile = await open(server.url, { viewport: { width: 375, height: 812 }, color_scheme: 'dark' });
  await dark_mobile.page.waitForTimeout(300);
  await dark_mobile.page.screenshot({ path: resolve(SHOTS, 'dark-mobile-375.png'), fullPage: true });
  await dark_mobile.page.close();
});
