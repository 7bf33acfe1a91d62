// A bias row's detail panel (issue 12): the reason, the singular-value gap of its stacked
// Jacobian, the rank history (the few-tokens trap made visible) and its sweep curve alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, bias_names, SHOTS } from '../support/page.js';

const env = use_page();
const row = (page, param) => page.locator('table.table-biases tbody tr', { has: page.locator('th', { hasText: param }) });

test('detail: a row ranked from a few tokens says its singular values are bounds', async () => {
  // gpt2-block ranks its biases before the MLP from the last token of each sample, then checks
  // the null space found on every token (the report's structure.token_rows): the detail gives
  // the kept singular value as a lower bound and the null one as an upper bound.
  const { page, problems } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'gpt2-block'));
  const toggle = row(page, 'layers.0.body.1.k_proj.bias').locator('button.row-toggle');
  await toggle.click();
  const panel = page.locator(`#${await toggle.getAttribute('aria-controls')}`);
  await panel.waitFor({ state: 'visible' });
  const text = await panel.innerText();
  assert.match(text, /largest null singular value at most \d/);
  assert.match(text, /ranked from the last 1 token\(s\) of each sample/);
  assert.deepEqual(problems, []);
});

test('detail: a bias row opens a panel with its reason, rank history, singular values and curve', async () => {
  const { page, problems } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'few-tokens-trap'));
  const names = await bias_names(page);
  const toggle = row(page, 'layers.0.q_proj.bias').locator('button.row-toggle');
  assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
  await toggle.focus();
  await page.keyboard.press('Enter');
  assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
  const panel = page.locator(`#${await toggle.getAttribute('aria-controls')}`);
  await panel.waitFor({ state: 'visible' });
  await panel.locator('.plot-canvas').waitFor();
  const text = await panel.innerText();
  assert.match(text, /query|q_proj|softmax|Why/i, 'the reason');
  // The trap: one input shows 122 null directions, 22 inputs show none.
  const history = await panel.locator('table.rank-history tbody tr').evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.innerText.trim())));
  assert.deepEqual(history, [['1', '6', '122'], ['22', '128', '0']]);
  assert.match(text, /full_rank/, 'the stop rule');
  assert.match(text, /smallest kept singular value 0\.012/);
  // The curve alone: this bias and the floor, in the colour it has in the main plot.
  const curves = await panel.locator('.plot-canvas').evaluate((el) => el.uplot.series.slice(1).map((s) => [s.label, s._stroke]));
  const main = await page.locator('#section-sweep .plot-canvas').evaluate((el) => el.uplot.series.slice(1).map((s) => [s.label, s._stroke]));
  assert.deepEqual(curves.map((c) => c[0]), ['layers.0.q_proj.bias', 'noise floor']);
  // Its floor was measured at the smallest size only: drawn as a point.
  assert.equal(await panel.locator('.plot-canvas').evaluate((el) => {
    const show = el.uplot.series[2].points.show;
    return typeof show === 'function' ? show(el.uplot, 2) : show;
  }), true);
  assert.equal(curves[0][1], main.find((c) => c[0] === 'layers.0.q_proj.bias')[1]);
  assert.deepEqual(await bias_names(page), names, 'the bias column still lists only the biases');
  await page.locator('#section-biases').screenshot({ path: resolve(SHOTS, 'bias-detail.png') });
  // Closing it again.
  await toggle.click();
  assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
  assert.equal(await panel.isVisible(), false);
  assert.deepEqual(problems, []);
  await page.close();
});

test('detail: an open panel stays open across a re-analysis of the same biases', async () => {
  const { page } = await env.open();
  const toggle = () => row(page, 'layers.0.body.1.k_proj.bias').locator('button.row-toggle');
  await toggle().click();
  await after_analysis(page, () => page.fill('[data-path="seed"]', '8'));
  assert.equal(await toggle().getAttribute('aria-expanded'), 'true');
  assert.match(await page.locator('.bias-detail').first().innerText(), /k_proj/);
  await page.close();
});
