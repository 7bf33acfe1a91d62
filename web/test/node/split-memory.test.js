// How much the engines of one split analysis may hold at once, from the device's memory.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { EngineClient, split_memory_for } from '../../src/engine-client.js';

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

test('split memory: the client sends it with every analysis it lets split', () => {
  for (const [option, expected] of [[undefined, split_memory_for(globalThis.navigator?.deviceMemory)], [3 * GiB, 3 * GiB]]) {
    const sent = [];
    const worker = { postMessage: (m) => sent.push(m), terminate: () => {} };
    const client = new EngineClient({ glue_url: 'glue.js', wasm_url: 'engine.wasm', make_worker: () => worker, workers: 2, split_memory: option });
    client.analyze('{}').catch(() => {});
    const analyze = sent.find((m) => m.type === 'analyze');
    assert.equal(analyze.workers, 2);
    assert.equal(analyze.split_memory, expected, `option ${option}`);
    client.cancel('test over');
  }
});
