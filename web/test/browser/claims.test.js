// The presets and the articles' claims (issue 12): each preset's description links to the claims
// it checks; the panel lists the four articles with their claims and loads the presets that check
// each one; and every number a preset's sentence quotes is one the page shows.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';

const env = use_page();

test('claims: a preset links to its claims; the panel opens at one, lists the articles, and loads a preset', async () => {
  const { page, problems } = await env.open();
  const hash = await page.evaluate(() => location.hash);
  // (the links come with the preset's description, which may render after the page opens)
  await page.locator('#claim a.claim-link').first().waitFor();
  const links = await page.locator('#claim a.claim-link').allTextContents();
  assert.deepEqual(links, ['1.1', '1.4', '2.1', '2.2', '3.2', '4.1']);
  assert.equal(await page.locator('#claims-details').getAttribute('open'), null, 'closed at first');
  await page.click('#claim a.claim-link:text-is("4.1")');
  assert.notEqual(await page.locator('#claims-details').getAttribute('open'), null, 'a link opens the panel');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'claim-4-1');
  assert.equal(await page.evaluate(() => location.hash), hash, 'the link keeps the experiment in the URL');
  const articles = await page.locator('.source-article').evaluateAll((as) => as.map((a) => ({ title: a.querySelector('h3 [lang="zh"]')?.textContent, meta: a.querySelector('.article-meta').textContent, claims: a.querySelectorAll('.claim-list > li').length })));
  assert.equal(articles.length, 4);
  assert.ok(articles.every((a) => a.title && a.claims > 0), JSON.stringify(articles));
  assert.match(articles[0].meta, /by 朱梦/);
  assert.match(articles[3].meta, /by 采石工/);
  assert.match(articles[1].meta, /no author named/);
  await page.locator('#claims').screenshot({ path: resolve(SHOTS, 'claims.png') });
  // A preset button loads it (one undoable step).
  await after_analysis(page, () => page.click('#claim-4-1 button[data-preset="article4-layernorm-linear"]'));
  assert.equal(await page.inputValue('#preset'), 'article4-layernorm-linear');
  assert.deepEqual(await page.locator('#claim a.claim-link').allTextContents(), ['4.1']);
  await after_analysis(page, () => page.click('#undo'));
  assert.equal(await page.inputValue('#preset'), 'default');
  assert.deepEqual(problems, []);
  await page.close();
});

test('claims: an embed shows neither the panel nor the links', async () => {
  const { page } = await env.open('?embed=1', { viewport: { width: 700, height: 900 } });
  assert.equal(await page.locator('#claims').isVisible(), false);
  assert.equal(await page.locator('#claim').isVisible(), false);
  await page.close();
});

/** Every number on the page: its text (every bias's details open, every column shown) and the editor's boxes. */
const shown_numbers = (page) =>
  page.evaluate(async () => {
    for (const b of document.querySelectorAll('button.more-columns[aria-pressed="false"]')) b.click();
    for (const b of document.querySelectorAll('button.row-toggle[aria-expanded="false"]')) b.click();
    await new Promise((r) => setTimeout(r, 300)); // the detail panel's module
    const text = document.getElementById('app').innerText + ' ' + [...document.querySelectorAll('#stack-editor input')].map((i) => i.value || i.placeholder).join(' ');
    return (text.match(/\d+(?:\.\d+)?(?:e[-+]?\d+)?/g) ?? []).map(Number);
  });

test('claims: every number a preset sentence quotes is on the page (an order of magnitude "near" one within 3x)', async () => {
  const { page, problems } = await env.open();
  const presets = await page.$$eval('#preset option', (os) => os.map((o) => o.value).filter(Boolean));
  for (const name of presets) {
    if ((await page.inputValue('#preset')) !== name) await after_analysis(page, () => page.selectOption('#preset', name));
    const sentence = await page.locator('#claim').evaluate((el) => el.firstChild.textContent);
    const quoted = (sentence.match(/\d+(?:\.\d+)?(?:e[-+]?\d+)?/g) ?? []).map(Number);
    const seen = await shown_numbers(page);
    // A quoted mean difference must be the bias table's mean, not any number of that size.
    const means = await page.$$eval('table.table-biases td.col-mean_abs_delta', (tds) => tds.map((td) => Number(td.textContent)));
    for (const [, q] of sentence.matchAll(/mean \|delta\| near (\S+?)\)/g)) assert.ok(means.some((v) => v / Number(q) <= 3 && Number(q) / v <= 3), `${name}: quotes a mean |delta| near ${q}; the table shows ${means}`);
    for (const q of quoted) {
      const near = new RegExp(`near ${String(q).replace('.', '\\.')}|about ${q}`).test(sentence) || (q > 0 && q < 1e-3);
      const ok = near ? seen.some((v) => v > 0 && v / q <= 3 && q / v <= 3) : seen.includes(q);
      assert.ok(ok, `${name}: "${sentence}" quotes ${q}, which the page does not show`);
    }
  }
  assert.deepEqual(problems, []);
  await page.close();
});
