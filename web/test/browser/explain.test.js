// Explanations (issue 12): every column header and every verdict has a tooltip, reachable by
// mouse and keyboard, and a glossary entry on the page; the glossary covers the page's terms.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';

const env = use_page();
const norm = (s) => s.replace(/\s+/g, ' ').trim().toLowerCase();
const tip = (page) => page.evaluate(() => {
  const t = document.getElementById('term-tip');
  return t && !t.hidden ? t.textContent : '';
});
/** The glossary: [{id, term, text}] read from the page (its texts arrive on demand or at idle). */
const glossary = async (page) => {
  await page.waitForFunction(() => document.querySelectorAll('#glossary dt').length > 0);
  return page.$$eval('#glossary dt', (dts) => dts.map((dt) => ({ id: dt.id, term: dt.textContent.trim(), text: dt.nextElementSibling?.textContent.trim() ?? '' })));
};

test('explain: every column header of every table has a tooltip and a glossary entry that names it', async () => {
  const { page, problems } = await env.open();
  const entries = await glossary(page);
  assert.ok(entries.length > 0, 'the page has a glossary');
  for (const b of await page.locator('button.more-columns').all()) await b.click(); // every column
  const headers = await page.$$eval('#results-body table thead th', (ths) => ths.map((th, i) => ({ i, text: th.innerText.trim(), table: th.closest('table').dataset.table, term: th.querySelector('.term')?.dataset.term ?? null })));
  assert.ok(headers.length >= 25, `${headers.length} headers`);
  for (const hd of headers) {
    assert.ok(hd.term, `${hd.table}: "${hd.text}" has no term link`);
    const entry = entries.find((e) => e.id === `g-${hd.term}`);
    assert.ok(entry, `${hd.table}: "${hd.text}" points at a missing glossary entry ${hd.term}`);
    assert.ok(norm(entry.term).includes(norm(hd.text)), `the glossary entry "${entry.term}" does not name the header "${hd.text}"`);
    assert.ok(entry.text.length > 20, `the entry for "${hd.text}" says something`);
  }
  // Hover and keyboard focus both show the entry's text.
  const links = page.locator('#results-body table thead th .term');
  for (const i of [0, 2, 7]) {
    const link = links.nth(i);
    await link.hover();
    const id = await link.getAttribute('data-term');
    const text = entries.find((e) => e.id === `g-${id}`).text;
    assert.ok(norm(await tip(page)).includes(norm(text)), `hover over ${id} shows its text, not "${await tip(page)}"`);
    await page.mouse.move(1, 1);
    assert.equal(await tip(page), '', 'leaving hides the tooltip');
  }
  // 7: Δ vs floor (after max and mean |Δ out| and the noise floor)
  await links.nth(7).focus();
  assert.match(await tip(page), /Δ vs floor/, 'keyboard focus shows the tooltip');
  assert.equal(await links.nth(7).evaluate((el) => document.getElementById(el.getAttribute('aria-describedby'))?.textContent.length > 20), true, 'screen readers get the text');
  await page.keyboard.press('Escape');
  assert.equal(await tip(page), '');
  // Following the link opens the glossary at the entry and leaves the experiment's link alone.
  const hash = await page.evaluate(() => location.hash);
  await links.nth(7).press('Enter');
  await page.waitForFunction(() => document.activeElement.id === 'g-vs_floor');
  assert.equal(await page.evaluate(() => document.getElementById('glossary-details').open), true);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'g-vs_floor');
  assert.equal(await page.evaluate(() => location.hash), hash);
  assert.equal(await page.isHidden('#link-notice'), true);
  await page.locator('#glossary').screenshot({ path: resolve(SHOTS, 'glossary.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('explain: every verdict shown has a tooltip and its glossary entry', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'postnorm-transformer'));
  const entries = await glossary(page);
  const verdicts = await page.$$eval('table.table-biases .col-verdict', (cells) => cells.map((c) => ({ text: c.innerText.replace(/^[○◐●?]\s*/, '').trim(), term: c.querySelector('.term')?.dataset.term ?? null })));
  assert.ok(verdicts.some((v) => v.text === 'partly redundant') && verdicts.some((v) => v.text === 'redundant') && verdicts.some((v) => v.text === 'effective'));
  for (const v of verdicts) {
    const entry = entries.find((e) => e.id === `g-${v.term}`);
    assert.ok(entry, `verdict "${v.text}" has no glossary link`);
    assert.equal(entry.term, v.text);
  }
  const badge = page.locator('table.table-biases .col-verdict .term', { hasText: 'partly redundant' }).first();
  await badge.hover();
  assert.match(await tip(page), /partly redundant: .*k directions do nothing/);
  // Direction words that are terms link to their entries too.
  const dirs = await page.$$eval('table.table-biases .col-directions .term', (l) => l.map((a) => a.dataset.term));
  assert.ok(dirs.includes('wo_bv') && dirs.includes('all_ones'), dirs.join());
  await page.screenshot({ path: resolve(SHOTS, 'verdict-tooltip.png') });
  await page.close();
});

test('explain: the glossary defines the page\'s terms', async () => {
  const { page } = await env.open();
  const terms = (await glossary(page)).map((e) => e.term);
  for (const t of ['k of n', 'redundant', 'partly redundant', 'effective', 'undetermined', 'all-ones', 'W_O b_V along all-ones', 'Δ vs floor', 'noise floor', 'fold', 'exact', 'minimal model', 'invariance', 'stop rule'])
    assert.ok(terms.some((x) => x === t || x.startsWith(`${t} `)), `no glossary entry for "${t}"`);
  await page.close();
});
