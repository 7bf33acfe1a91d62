// Results at a glance (issue 12): on a desktop screen the summary and the bias table sit next to
// the editor; results that no longer match the experiment are marked while a newer analysis
// runs; a first visit gets a short, dismissible "how to read this". Real Chromium, real engine.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';

const env = use_page();
/** Reloads and waits for the first analysis of the new document (its counter starts again). */
async function reload(page) {
  await page.reload();
  await page.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1, null, { timeout: 60000 });
}
const box = (page, sel) => page.locator(sel).first().boundingBox();
const busy = (page) => page.evaluate(() => {
  const r = document.getElementById('results');
  const label = document.getElementById('results-state');
  return { aria: r.getAttribute('aria-busy'), stale: r.classList.contains('stale'), label: label && !label.hidden ? label.textContent : '' };
});

test('glance: at 1280x900 the summary and the first bias row are in view, beside the editor', async () => {
  const { page, problems } = await env.open('', { viewport: { width: 1280, height: 900 } });
  const editor = await box(page, '#stack-editor');
  for (const sel of ['#summary', 'table.table-biases tbody tr']) {
    const b = await box(page, sel);
    assert.ok(b && b.y >= 0 && b.y + b.height <= 900, `${sel} is at y ${b?.y}..${b && b.y + b.height}, outside the 900 px viewport`);
    assert.ok(b.x >= editor.x + editor.width, `${sel} starts at x ${b.x}, not right of the editor (ends at ${editor.x + editor.width})`);
  }
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth), 1280, 'no horizontal scroll');
  await page.screenshot({ path: resolve(SHOTS, 'glance-desktop.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('glance: at 375 px the results follow the editor in one column', async () => {
  const { page } = await env.open('', { viewport: { width: 375, height: 812 } });
  const editor = await box(page, '#stack-editor');
  const summary = await box(page, '#summary');
  assert.ok(summary.y > editor.y + editor.height, 'the summary comes after the editor');
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 375);
  await page.close();
});

test('glance: stale results are marked for the whole of a slow analysis, and a second edit keeps the mark', async () => {
  const { page } = await env.open();
  assert.deepEqual(await busy(page), { aria: 'false', stale: false, label: '' }, 'a finished analysis is not busy');
  await page.selectOption('#preset', 'article2-key-bias'); // about 0.7 s in the worker
  let b = await busy(page);
  assert.equal(b.aria, 'true', 'aria-busy from the first moment of the run');
  assert.ok(b.stale, 'the old results are marked stale');
  assert.match(b.label, /updating/i);
  // Still marked once the progress bar shows, i.e. well into the run.
  await page.waitForSelector('#progress:not([hidden])', { timeout: 10000 });
  assert.equal((await busy(page)).aria, 'true');
  // The old tables are dimmed (waits for the transition, asserts no duration).
  await page.waitForFunction(() => Number(getComputedStyle(document.getElementById('results-body')).opacity) < 0.7);
  await page.screenshot({ path: resolve(SHOTS, 'glance-updating.png') });
  // A second edit during the run: still marked until the newer analysis answers.
  await after_analysis(page, async () => {
    await page.fill('[data-path="seed"]', '8');
    const mid = await busy(page);
    assert.equal(mid.aria, 'true', 'busy while the edited experiment waits for its analysis');
    assert.match(mid.label, /updating/i);
  });
  b = await busy(page);
  assert.deepEqual(b, { aria: 'false', stale: false, label: '' }, `after the last analysis: ${JSON.stringify(b)}`);
  await page.waitForFunction(() => Number(getComputedStyle(document.getElementById('results-body')).opacity) === 1);
  await page.close();
});

test('glance: a first visit explains how to read the results; dismissing it is remembered; embeds never show it', async () => {
  const { page } = await env.open();
  await page.evaluate(() => localStorage.clear());
  await reload(page);
  const intro = page.locator('#how-to-read');
  assert.equal(await intro.isVisible(), true, 'shown on a first visit');
  assert.match(await intro.innerText(), /redundant/i);
  assert.equal(await page.locator('dialog[open], [aria-modal="true"]').count(), 0, 'not a modal: the page stays usable');
  // It does not push the results out of view at 1280x900.
  const row = await box(page, 'table.table-biases tbody tr');
  assert.ok(row.y + row.height <= 900, 'the first bias row is still in view with the intro shown');
  await page.screenshot({ path: resolve(SHOTS, 'glance-first-visit.png') });
  await page.click('#how-to-read button:has-text("Got it")');
  assert.equal(await intro.isVisible(), false);
  await reload(page);
  assert.equal(await intro.isVisible(), false, 'remembered after a reload');
  await page.evaluate(() => localStorage.clear());
  await page.close();
  const embed = await env.open('?embed=1', { viewport: { width: 700, height: 900 } });
  assert.equal(await embed.page.locator('#how-to-read').isVisible(), false, 'never in an embed');
  const [experiment, summary] = [await box(embed.page, '#experiment'), await box(embed.page, '#summary')];
  assert.ok(summary.y > experiment.y + experiment.height - 1, 'an embed keeps one column');
  await embed.page.screenshot({ path: resolve(SHOTS, 'embed-700.png'), fullPage: true });
  await embed.page.close();
});
