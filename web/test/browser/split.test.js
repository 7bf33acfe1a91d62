// A large analysis split over the page's workers (engine-client.js, analysis/parts.cpp): the
// report the page shows and downloads is the one a single engine gives, but for its timings; a
// worker that fails or is replaced loses no answer. Real Chromium, real engine, built page.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

import { use_page, after_analysis } from '../support/page.js';
import { load_engine } from '../support/engine.js';

const env = use_page();

// A GPT-2-style block wide enough to be worth splitting (about 5 GFLOP of bias work).
const BLOCK = {
  version: 1, seed: 3, dtype: 'float32', shape: { batch: 2, tokens: 16, features: 256 },
  layers: [
    { type: 'residual', body: [{ type: 'layernorm' }, { type: 'attention', num_heads: 4, causal: true }] },
    { type: 'residual', body: [{ type: 'layernorm' }, { type: 'linear', out_features: 1024 }, { type: 'gelu', approximate: 'tanh' }, { type: 'linear', out_features: 256 }] },
    { type: 'layernorm' },
  ],
};

async function report_of(page) {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-json')]);
  return JSON.parse(await readFile(await download.path(), 'utf8'));
}

test('split: a large block analysed over two workers gives the report of one engine', async () => {
  const engine = await load_engine();
  const whole = engine.analyze(BLOCK);
  assert.equal(whole.ok, true);
  for (const workers of [2, 1]) {
    const { page, problems } = await env.open(`?workers=${workers}`);
    await after_analysis(page, () => page.fill('#config-json', JSON.stringify(BLOCK, null, 2)));
    assert.equal(await page.isHidden('#message'), true, await page.textContent('#message'));
    const report = await report_of(page);
    assert.equal(report.ok, true);
    // Two workers: one part beside part 0; one worker: no split.
    assert.equal(report.timing_ms.parts?.length, workers === 2 ? 1 : undefined, `workers=${workers}`);
    console.log(`workers=${workers}: ${report.biases.length} biases, parts ${JSON.stringify(report.timing_ms.parts?.map((p) => Math.round(p.total)))}, part 0 ${Math.round(report.timing_ms.total)} ms`);
    const a = structuredClone(report), b = structuredClone(whole);
    delete a.timing_ms;
    delete b.timing_ms;
    assert.deepEqual(a, b);
    assert.deepEqual(problems, []);
    await page.close();
  }
});

test('split: an edit while a split analysis runs supersedes it, and the page answers the edit', async () => {
  const { page, problems } = await env.open('?workers=2');
  await page.fill('#config-json', JSON.stringify(BLOCK, null, 2));
  // Wait until the helpers run (the progress bar says how many workers), then edit.
  await page.waitForFunction(() => /on 2 workers/.test(document.body.innerText), null, { timeout: 60000 });
  const small = structuredClone(BLOCK);
  small.shape.features = 32;
  small.layers[0].body[1].num_heads = 2;
  small.layers[1].body[1].out_features = 64;
  small.layers[1].body[3].out_features = 32;
  await after_analysis(page, () => page.fill('#config-json', JSON.stringify(small, null, 2)));
  await page.waitForFunction(() => !document.querySelector('.stale'), null, { timeout: 60000 });
  assert.equal(await page.isHidden('#message'), true, await page.textContent('#message'));
  const report = await report_of(page);
  assert.equal(report.config.shape.features, 32);
  assert.equal(report.timing_ms.parts, undefined, 'the small config is not split');
  assert.deepEqual(problems, []);
  await page.close();
});

test('split: a helper worker that fails hands the analysis to one worker, which answers it', async () => {
  const engine = await load_engine();
  const whole = engine.analyze(BLOCK);
  const { page, problems } = await env.open('?workers=2');
  // The next engine worker the page starts is the split's helper: its script throws at once, as
  // a worker that dies would. Every later one is served as usual.
  let started = 0;
  await page.route(/engine-worker[^/]*\.js$/, (route) => {
    if (++started === 1) return route.fulfill({ contentType: 'text/javascript', body: "throw new Error('a helper that died');" });
    return route.continue();
  });
  const steps = [];
  await page.exposeFunction('record_step', (text) => steps.push(text));
  await page.evaluate(() => {
    const text = document.getElementById('progress-text');
    new MutationObserver(() => window.record_step(text.textContent)).observe(text, { childList: true, characterData: true, subtree: true });
  });
  await after_analysis(page, () => page.fill('#config-json', JSON.stringify(BLOCK, null, 2)));
  assert.ok(started >= 2, `engine workers started after the first: ${started}`);
  assert.equal(await page.isHidden('#message'), true, await page.textContent('#message'));
  assert.ok(steps.some((s) => /, again on one worker \(a worker of the split failed: .*a helper that died/.test(s)), steps.join('\n'));
  const report = await report_of(page);
  assert.equal(report.timing_ms.parts, undefined, 'answered by one worker');
  const a = structuredClone(report), b = structuredClone(whole);
  delete a.timing_ms;
  delete b.timing_ms;
  assert.deepEqual(a, b);
  // The dead helper's own error is the only problem the page logs.
  assert.deepEqual(problems.filter((p) => !/a helper that died/.test(p)), []);
  await page.close();
});

test('workers: an export waiting behind an analysis goes on when an edit replaces the worker', async () => {
  const { page, problems } = await env.open('?workers=1');
  const saved = [];
  page.on('download', (d) => saved.push(d.suggestedFilename()));
  // A long analysis runs; the export queues behind it in the worker; an edit then supersedes the
  // analysis, which terminates that worker.
  await page.fill('#config-json', JSON.stringify(BLOCK, null, 2));
  await page.waitForFunction(() => document.documentElement.dataset.analyses !== undefined && !document.getElementById('progress').hidden, null, { timeout: 30000 });
  await page.click('#download-torch');
  await page.waitForFunction(() => /Writing the PyTorch/.test(document.getElementById('export-status').textContent));
  const small = structuredClone(BLOCK);
  small.shape.features = 32;
  small.layers[0].body[1].num_heads = 2;
  small.layers[1].body[1].out_features = 64;
  small.layers[1].body[3].out_features = 32;
  await page.fill('#config-json', JSON.stringify(small, null, 2));
  await page.waitForFunction(() => /^(Saved|Export failed)/.test(document.getElementById('export-status').textContent), null, { timeout: 60000 });
  const status = await page.textContent('#export-status');
  assert.match(status, /^Saved biaslab-custom-\w+\.py and/, status);
  for (let i = 0; i < 50 && saved.length < 2; ++i) await page.waitForTimeout(100);
  assert.deepEqual(saved.map((n) => n.replace(/^biaslab-custom-\w+/, 'x')).sort(), ['x.py', 'x.safetensors']);
  assert.deepEqual(problems, []);
  await page.close();
});
