// Tables in a narrow column (issue 12): in a 600-700 px blog column or a phone, every table fits
// its container with its key columns; the rest are one "All columns" press away (then the table
// scrolls sideways, and says so) or in a bias row's detail panel; rows have no tall blank gaps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';

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

test('tables: at 375 px bias names break only after their dots, and the bias table fits with long names and "partly redundant"', async () => {
  const { page, problems } = await env.open('', { viewport: { width: 375, height: 812 } });
  for (const preset of ['default', 'postnorm-transformer', 'norm-zoo', 'article2-all-biases']) {
    if (preset !== 'default') await after_analysis(page, () => page.selectOption('#preset', preset));
    const r = await page.evaluate(() => {
      const wrap = document.querySelector('.table-biases-wrap');
      const names = [...wrap.querySelectorAll('tbody th .row-toggle code')];
      return {
        client: wrap.clientWidth,
        scroll: wrap.scrollWidth,
        page: document.documentElement.scrollWidth,
        // Every place the name goes to a new line, character by character: only right after a
        // dot ("layers.0.|body.1.|q_proj.|bias"), never inside a part ("q_pro|j.bias").
        breaks: names.map((c) => {
          const chars = [];
          const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
          for (let n = walk.nextNode(); n; n = walk.nextNode())
            for (let i = 0; i < n.length; i++) {
              const range = document.createRange();
              range.setStart(n, i);
              range.setEnd(n, i + 1);
              const rect = range.getClientRects()[0];
              if (rect) chars.push([n.data[i], rect.top]);
            }
          return { name: c.textContent, at: chars.map((ch, i) => (i && ch[1] > chars[i - 1][1] + 2 ? i : -1)).filter((i) => i > 0).map((i) => [chars[i - 1][0], chars.slice(0, i).map((x) => x[0]).join('')]) };
        }),
      };
    });
    for (const b of r.breaks) for (const [before, head] of b.at) assert.equal(before, '.', `${preset}: ${b.name} breaks after "${head}"`);
    if (preset !== 'norm-zoo') assert.ok(r.breaks.some((b) => b.at.length), `${preset}: long names wrap (after their dots)`);
    assert.ok(r.scroll <= r.client + 1, `${preset}: the bias table is ${r.scroll} px wide in ${r.client} px`);
    assert.ok(r.page <= 375, `${preset}: the page is ${r.page} px wide`);
  }
  await page.locator('#section-biases').screenshot({ path: resolve(SHOTS, 'tables-375-long-names.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('tables: "All columns" shows every column with a visible scroll cue; the detail panel has the hidden ones', async () => {
  const { page, problems } = await env.open('?embed=1', { viewport: { width: 700, height: 900 } });
  const section = page.locator('#section-biases');
  const more = section.locator('button.more-columns');
  assert.equal(await more.getAttribute('aria-pressed'), 'false');
  await more.click();
  assert.equal(await more.getAttribute('aria-pressed'), 'true');
  const t = (await tables(page)).find((x) => x.table === 'biases');
  assert.equal(t.headers.length, 10, t.headers.join(' | '));
  assert.ok(t.scroll > t.client, 'all ten columns scroll sideways in 700 px');
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
  for (const word of ['Directions', 'mean |Δ out|', 'Noise floor', 'Δ vs floor', 'Absorbed by']) assert.ok(text.includes(word), `the panel names ${word}`);
  await page.locator('#results').screenshot({ path: resolve(SHOTS, 'tables-700-embed.png') });
  assert.deepEqual(problems, []);
  await page.close();
});
