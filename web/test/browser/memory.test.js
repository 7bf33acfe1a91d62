// The page's memory budget (issue 11): stated in the footer, and the analysis's bound shown beside
// a large config's results. (No config within the schema's limits has a bound over the page's
// budget, so the refusal itself is tested natively: tests/test_memory.cpp, tests/cli_test.cmake.)
// Real Chromium, real engine, built page.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { use_page, after_analysis } from '../support/page.js';

const env = use_page();

// 1.05 M parameters: a bound of 25 MB (the folds': 24 bytes a parameter; before them 12 bytes a
// parameter and the first bias's 1024 x 1024 Gram matrix, 21 MB), over 1% of the budget.
const MLP = JSON.stringify({
  version: 1, shape: { batch: 2, tokens: 4, features: 512 },
  layers: [{ type: 'linear', out_features: 1024 }, { type: 'gelu' }, { type: 'linear', out_features: 512 }, { type: 'layernorm' }],
});

test('memory: the footer states the budget, and a large config\'s summary its bound', async () => {
  const { page, problems } = await env.open();
  assert.match(await page.textContent('.site-footer'), /at most 2\.15 GB of memory/);
  assert.doesNotMatch(await page.textContent('#summary'), /memory/, 'a small config\'s bound is left out');
  await after_analysis(page, () => page.fill('#config-json', MLP));
  assert.equal(await page.isHidden('#message'), true, await page.textContent('#message'));
  assert.match(await page.textContent('#summary'), /memory at least 0\.03 GB of 2\.15 GB/);
  assert.deepEqual(problems, []);
  await page.close();
});
