// The stack picture (issue 12): every layer a block with its shape, every parameter a chip in
// the colour of its verdict in the bias table, folds as arrows; a click on a bias selects its
// row, opens its details and highlights its curve. Legible at 375 px, in dark mode and in a
// 700 px embed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';

const env = use_page();

// The picture's module is fetched on demand: wait for the picture itself, not only the analysis.
const picture = (page) => page.locator('#section-stack .stack-picture').waitFor({ state: 'attached' });

/** Each bias row's verdict and badge colours, and each chip's, by parameter. */
const colours = (page) =>
  picture(page).then(() => page.evaluate(() => {
    const style = (el) => (el ? [getComputedStyle(el).backgroundColor, getComputedStyle(el).color] : null);
    const rows = [...document.querySelectorAll('table.table-biases > tbody > tr:not(.detail-row)')].map((tr) => ({
      param: tr.querySelector('button.row-toggle').dataset.param,
      verdict: tr.querySelector('.col-verdict .badge').className.match(/verdict-(\w+)/)[1],
      style: style(tr.querySelector('.col-verdict .badge')),
    }));
    const chips = [...document.querySelectorAll('#section-stack .stack-chip[data-param]')].map((c) => ({
      param: c.dataset.param,
      verdict: c.dataset.verdict ?? null,
      style: style(c),
      word: c.getAttribute('aria-label'),
    }));
    return { rows, chips, neutral: getComputedStyle(document.documentElement).getPropertyValue('--bg-soft').trim() };
  }));

for (const preset of ['default', 'postnorm-transformer', 'norm-zoo', 'causal-decoder-layer', 'article2-all-biases', 'pythia-block', 'vit-block', 'whisper-decoder-block']) {
  test(`stack: ${preset}: every bias chip has its row's verdict and colours; every other parameter is neutral`, async () => {
    const { page, problems } = await env.open();
    if (preset !== 'default') await after_analysis(page, () => page.selectOption('#preset', preset));
    const { rows, chips } = await colours(page);
    assert.ok(rows.length > 0);
    const by_param = new Map(chips.map((c) => [c.param, c]));
    for (const r of rows) {
      const c = by_param.get(r.param);
      assert.ok(c, `${preset}: no chip for ${r.param}`);
      assert.equal(c.verdict, r.verdict, `${preset}: ${r.param}`);
      assert.deepEqual(c.style, r.style, `${preset}: ${r.param} is drawn in other colours than its table badge`);
      assert.ok(c.word.includes(r.verdict.replace('_', ' ')), `${preset}: ${r.param}'s label says its verdict: ${c.word}`);
    }
    const others = chips.filter((c) => !rows.some((r) => r.param === c.param));
    assert.ok(others.length > 0, 'weights and gains are drawn');
    const neutral = await page.evaluate(() => {
      const probe = document.createElement('span');
      probe.style.background = 'var(--bg-soft)';
      document.body.append(probe);
      const bg = getComputedStyle(probe).backgroundColor;
      probe.remove();
      return bg;
    });
    for (const c of others) {
      assert.equal(c.verdict, null, c.param);
      assert.equal(c.style[0], neutral, `${c.param} is neutral`);
    }
    assert.deepEqual(problems, []);
    await page.close();
  });
}

test('stack: whisper-decoder-block draws the context its cross-attention reads', async () => {
  const { page, problems } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'whisper-decoder-block'));
  const s = page.locator('#section-stack');
  await picture(page);
  const shapes = await s.locator('.stack-layer').evaluateAll((ls) => Object.fromEntries(ls.map((l) => [l.dataset.layer, l.querySelector(':scope > .stack-head .stack-shape').textContent])));
  assert.equal(shapes['layers.0.body.1'], '8 × 96', 'self-attention reads its input');
  assert.equal(shapes['layers.1.body.1'], '8 × 96, keys and values from the context 12 × 96');
  const io = await s.locator('.stack-io').first().textContent();
  assert.equal(io, 'input: batch 2 × 8 × 96; context: batch 2 × 12 × 96 (each input draws its own)');
  assert.deepEqual(problems, []);
  await page.close();
});

test('stack: the default preset\'s shapes, residual branch and fold arrows', async () => {
  const { page } = await env.open();
  const s = page.locator('#section-stack');
  await picture(page);
  const layers = await s.locator('.stack-layer').evaluateAll((ls) => ls.map((l) => [l.dataset.layer, l.querySelector(':scope > .stack-head .stack-type').textContent, l.querySelector(':scope > .stack-head .stack-shape').textContent]));
  assert.deepEqual(layers, [
    ['layers.0', 'residual', '16 × 64'],
    ['layers.0.body.0', 'layernorm', '16 × 64'],
    ['layers.0.body.1', 'attention', '16 × 64'],
    ['layers.1', 'linear', '16 × 64'],
  ]);
  assert.equal(await s.locator('.stack-residual .stack-skip').count(), 1, 'the residual body is drawn beside its skip');
  await s.locator('path.stack-arrow').first().waitFor({ state: 'attached' });
  const arrows = await s.locator('path.stack-arrow').evaluateAll((ps) => ps.map((p) => `${p.dataset.from} -> ${p.dataset.to}`));
  assert.deepEqual(arrows.sort(), [
    'layers.0.body.0.bias -> layers.0.body.1.k_proj.bias',
    'layers.0.body.0.bias -> layers.0.body.1.q_proj.bias',
    'layers.0.body.0.bias -> layers.0.body.1.v_proj.bias',
    'layers.0.body.0.weight -> layers.0.body.1.k_proj.weight',
    'layers.0.body.0.weight -> layers.0.body.1.q_proj.weight',
    'layers.0.body.0.weight -> layers.0.body.1.v_proj.weight',
    'layers.0.body.1.v_proj.bias -> layers.0.body.1.o_proj.bias',
  ]);
  assert.match(await s.locator('[data-param="layers.0.body.1.k_proj.bias"]').getAttribute('aria-label'), /dropped: Drop the key bias/);
  // A wider linear shows its in and out shape.
  await after_analysis(page, async () => {
    await page.fill('[data-path="layers[1].out_features"]', '32');
  });
  assert.equal(await s.locator('[data-layer="layers.1"] .stack-shape').textContent(), '16 × 64 → 16 × 32');
  await page.close();
});

test('stack: clicking a bias selects its table row, opens its details and highlights its curve', async () => {
  const { page, problems } = await env.open();
  const param = 'layers.0.body.1.v_proj.bias';
  await page.locator('#section-sweep .legend-entry').first().waitFor();
  await page.click(`#section-stack button.stack-chip[data-param="${param}"]`);
  const row = page.locator('table.table-biases tr.selected');
  assert.equal(await row.count(), 1);
  assert.equal(await row.locator('button.row-toggle').getAttribute('data-param'), param);
  assert.equal(await row.getAttribute('aria-current'), 'true');
  assert.equal(await row.locator('button.row-toggle').getAttribute('aria-expanded'), 'true', 'the row\'s details are open');
  await page.locator('.bias-detail').filter({ hasText: param }).locator('.plot-canvas').waitFor();
  assert.equal(await page.locator(`#section-stack button.stack-chip[data-param="${param}"]`).getAttribute('aria-pressed'), 'true');
  const lit = await page.locator('#section-sweep .legend-entry.selected .legend-label').allTextContents();
  assert.deepEqual(lit, [param], 'the sweep highlights its curve');
  const alpha = await page.locator('#section-sweep .plot-canvas').evaluate((el, p) => el.uplot.series.slice(1).map((s) => [s.label, s.alpha ?? 1]), param);
  for (const [label, a] of alpha) assert.equal(a, label.startsWith(param) ? 1 : 0.2, label);
  assert.match(await page.locator('#section-stack .stack-info').textContent(), /folds into layers\.0\.body\.1\.o_proj\.bias/);
  // Another bias moves the selection.
  await page.click('#section-stack button.stack-chip[data-param="layers.1.bias"]');
  assert.equal(await page.locator('table.table-biases tr.selected button.row-toggle').getAttribute('data-param'), 'layers.1.bias');
  assert.deepEqual(problems, []);
  await page.close();
});

for (const [label, path, opts] of [
  ['desktop', '', { viewport: { width: 1280, height: 900 } }],
  ['375', '', { viewport: { width: 375, height: 812 } }],
  ['dark', '', { viewport: { width: 1280, height: 900 }, color_scheme: 'dark' }],
  ['embed-700', '?embed=1&show=stack', { viewport: { width: 700, height: 900 } }],
]) {
  test(`stack: legible at ${label}: nothing overflows, every chip inside the picture`, async () => {
    const { page, problems } = await env.open(path, opts);
    await page.evaluate(() => document.fonts.ready);
    await picture(page);
    const width = opts.viewport.width;
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= width, 'the page does not scroll sideways');
    const out = await page.evaluate(() => {
      const pic = document.querySelector('.stack-picture').getBoundingClientRect();
      return [...document.querySelectorAll('.stack-chip')].filter((c) => c.closest('.stack-picture')).map((c) => c.getBoundingClientRect()).filter((r) => r.left < pic.left - 1 || r.right > pic.right + 1).length;
    });
    assert.equal(out, 0, 'chips stay inside the picture');
    await page.locator('#section-stack path.stack-arrow').first().waitFor({ state: 'attached' });
    await page.click('#section-stack button.stack-chip[data-param="layers.0.body.1.k_proj.bias"]');
    await page.locator('#section-stack').screenshot({ path: resolve(SHOTS, `stack-${label}.png`) });
    assert.deepEqual(problems, []);
    await page.close();
  });
}
