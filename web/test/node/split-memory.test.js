// How much the engines of one split analysis may hold at once, from the device's memory.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { split_memory_for } from '../../src/engine-client.js';

const GiB = 1024 ** 3;

test('split memory: half the device memory, between one engine\'s 2 GiB and 4 GiB', () => {
  assert.equal(split_memory_for(8), 4 * GiB); // Chromium's most: 8 GB or more
  assert.equal(split_memory_for(6), 3 * GiB);
  assert.equal(split_memory_for(4), 2 * GiB);
  assert.equal(split_memory_for(0.5), 2 * GiB); // never below one engine's budget
  assert.equal(split_memory_for(64), 4 * GiB);
});

test('split memory: 2 GiB where the browser does not tell', () => {
  for (const unknown of [undefined, null, 0, -1, NaN, 'x']) assert.equal(split_memory_for(unknown), 2 * GiB, String(unknown));
});
