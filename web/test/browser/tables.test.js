// Tables in a narrow column (issue 12): in a 600-700 px blog column or a phone, every table fits
// its container with its key columns; the rest are one "All columns" press away (then the table
// scrolls sideways, and says so) or in a bias row's detail panel; rows have no tall blank gaps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, SHOTS } from '../support/page.js';

const env = use_page();

/** [{table, client, scroll, tallest row, visible headers}] */
const tables = (page) =>
  page.$$eval('.table-wrap', (ws) =>
    ws.map((w) => ({
      table: w.querySelector('table').dataset.table,
      client: w.clientWidth,
      scroll: w.scrollWidth,
      tallest: Math.max(...[...w.querySelectorAll(':scope > table > tbody > tr:not(.detail-row)')].map((r) => r.getBoundingClientRect().height)),
      headers: [...w.querySelectorAll('thead th')].filter((th) => th.getBoundingClientRect().width > 0).map((th) => th.innerText.trim()),
    })),
  );

for (const [label, path, width] of [['a 700 px embed', '?embed=1', 700], ['375 px', '', 375], ['1280 px', '', 1280]]) {
  test(`tables: at ${label} no table overflows its container, and rows stay short`, async () => {
    const { page, problems } = await env.open(path, { viewport: { width, height: 900 } });
    const list = await tables(page);
    assert.equal(list.length, 4);
    for (const t of list) {
      assert.ok(t.scroll <= t.client + 1, `${t.table}: ${t.scroll} px of content in ${t.client} px`);
      assert.ok(t.tallest <= 130, `${t.table}: a row ${t.tallest} px tall`);
    }
    assert.deepEqual(list.find((t) => t.table === 'biases').headers, ['Bias', 'Verdict', 'Redundant', 'max |Δ out|']);
    assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), true, 'the page does not scroll sideways');
    assert.deepEqual(problems, []);
    await page.close();
  });
}

test('tables: "All columns" shows every column with a visible scroll cue; the detail panel has the hidden ones', async () => {
  const { page, problems } = await env.open('?embed=1', { viewport: { width: 700, height: 900 } });
  const section = page.locator('#section-biases');
  const more = section.locator('button.more-columns');
  assert.equal(await more.getAttribute('aria-pressed'), 'false');
  await more.click();
  assert.equal(await more.getAttribute('aria-pressed'), 'true');
  const t = (await tables(page)).find((x) => x.table === 'biases');
  assert.equal(t.headers.length, 9, t.headers.join(' | '));
  assert.ok(t.scroll > t.client, 'all nine columns scroll sideways in 700 px');
  assert.equal(await section.locator('.scroll-hint').isVisible(), true, 'a visible cue says the table scrolls');
  await section.screenshot({ path: resolve(SHOTS, 'tables-700-all-columns.png') });
  await more.click();
  assert.equal((await tables(page)).find((x) => x.table === 'biases').headers.length, 4);
  assert.equal(await section.locator('.scroll-hint').isVisible(), false);
  // The hidden columns of a row are in its detail panel.
  await section.locator('button.row-toggle').first().click();
  const panel = section.locator('.bias-detail');
  await panel.locator('.plot-canvas').waitFor();
  const text = await panel.innerText();
  for (const word of ['Directions', 'Noise floor', 'Δ vs floor', 'Absorbed by']) assert.ok(text.includes(word), `the panel names ${word}`);
  await page.locator('#results').screenshot({ path: resolve(SHOTS, 'tables-700-embed.png') });
  assert.deepEqual(problems, []);
  await page.close();
});
