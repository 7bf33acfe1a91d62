// The wasm module as the page uses it: JSON in, JSON out, every preset analysable.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { fresh_module, load_engine } from '../support/engine.js';
import { canonical_config, minimal_config } from '../../src/experiment.js';

const engine = await load_engine();
const presets = engine.presets();
const schema = engine.schema();

test('engine: reports a version and a schema with layer types', () => {
  assert.match(engine.version(), /^\d+\.\d+\.\d+/);
  assert.ok(schema.layer_types.length >= 5, `layer types: ${schema.layer_types.length}`);
  assert.ok(schema.fields.some((f) => f.name === 'layers'));
});

test('engine: lists presets, each with a name, title, claim and config', () => {
  assert.ok(presets.length > 0);
  assert.ok(presets.some((p) => p.name === 'default'), 'the page opens on the "default" preset');
  for (const p of presets) for (const key of ['name', 'title', 'claim', 'config']) assert.ok(p[key], `${p.name}: ${key}`);
});

for (const preset of presets) {
  test(`engine: preset ${preset.name} analyses ok, with a row for every bias it declares`, () => {
    const t0 = performance.now();
    const r = engine.analyze(preset.config);
    const ms = performance.now() - t0;
    assert.equal(r.ok, true, JSON.stringify(r.error));
    // Every bias-like parameter the layers declare has its row (a bias-free block, as Llama's, has none).
    const declared = [];
    const walk = (layers) => { for (const l of layers) { for (const p of l.params) if (p.role === 'bias' || p.role === 'shift') declared.push(p.name); walk(l.body ?? []); } };
    walk(r.layers);
    assert.deepEqual(r.biases.map((b) => b.param).sort(), declared.sort());
    // Llama and Qwen3 blocks have no biases at all; every other preset has some.
    if (!['llama-block', 'qwen3-block'].includes(preset.name)) assert.ok(r.biases.length > 0, 'no biases');
    for (const b of r.biases) assert.ok(['redundant', 'partly_redundant', 'effective'].includes(b.verdict), b.verdict);
    assert.equal(r.summary.biases, r.biases.length);
    console.log(`${preset.name}: ${r.biases.length} biases, ${r.folds.length} folds, ${ms.toFixed(0)} ms`);
  });
}

/** A copy without wall-clock fields (`ms`, e.g. a bias's structure solve time), which differ run to run. */
function without_timings(value) {
  if (Array.isArray(value)) return value.map(without_timings);
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).filter(([k]) => k !== 'ms').map(([k, v]) => [k, without_timings(v)]));
  return value;
}

test('engine: a config with defaults dropped (what a link carries) gives the same report', () => {
  // The page shares only non-default values; the engine must read them back to the same numbers.
  for (const preset of presets.filter((p) => !p.name.startsWith('article2'))) {
    const full = engine.analyze(preset.config);
    const short = engine.analyze({ version: 1, ...minimal_config(schema, JSON.parse(preset.config)) });
    assert.equal(short.ok, true, `${preset.name}: ${JSON.stringify(short.error)}`);
    assert.deepEqual(without_timings(short.biases), without_timings(full.biases), preset.name);
    assert.deepEqual(short.config, full.config, preset.name);
  }
});

test('engine: the page\'s canonical form of each preset is what the engine prints', () => {
  for (const preset of presets) {
    const mine = canonical_config(schema, JSON.parse(preset.config));
    const r = engine.analyze({ ...JSON.parse(preset.config), layers: [{ type: 'relu' }] });
    assert.equal(r.ok, true);
    // Top-level values agree with the engine's config_to_json (layers checked above).
    for (const key of ['version', 'seed', 'dtype']) assert.deepEqual(mine[key], r.config[key], `${preset.name}.${key}`);
    assert.deepEqual(mine.shape, r.config.shape, `${preset.name}.shape`);
  }
});

test('engine: an invalid config gives {ok:false} with the JSON path', () => {
  const r = engine.analyze({ version: 1, layers: [{ type: 'linear' }, { type: 'attention', num_heads: 5 }] });
  assert.equal(r.ok, false);
  assert.equal(r.error.path, 'layers[1].num_heads');
  assert.match(r.error.message, /does not divide/);
  const bad = engine.analyze('{"layers": [');
  assert.equal(bad.ok, false);
  assert.match(bad.error.message, /invalid JSON/);
});

test('engine: the memory bound stays below what the module held, and the budget is the module\'s 2 GB', async () => {
  // A wide MLP's first bias takes its 3072 x 3072 Gram matrix from its layers' factors: the bound
  // (170 MB) is the parameters' three copies and that matrix. The module's memory only grows, so
  // after one analysis in a fresh module it is at least the most the analysis held at once.
  // A gated FFN's gate bias holds its Gram matrix and the factor it keeps for the up bias (2 x
  // 2048 x 2048, 67 MB) beside the parameters; a stack of Linears is bound by the folds' copies.
  const configs = {
    'wide MLP': { version: 1, shape: { batch: 32, tokens: 1, features: 768 }, layers: [{ type: 'linear', out_features: 3072 }, { type: 'gelu' }, { type: 'linear', out_features: 768 }, { type: 'layernorm' }] },
    'gated FFN': { version: 1, shape: { batch: 32, tokens: 1, features: 256 }, layers: [{ type: 'glu', hidden: 2048, bias: true }, { type: 'rmsnorm' }] },
    'Linears': { version: 1, shape: { batch: 2, tokens: 4, features: 1024 }, layers: [{ type: 'layernorm' }, { type: 'linear' }, { type: 'gelu' }, { type: 'linear' }, { type: 'gelu' }, { type: 'linear' }] },
  };
  for (const [name, config] of Object.entries(configs)) {
    const m = await fresh_module();
    const r = JSON.parse(m.analyze(JSON.stringify(config)));
    assert.equal(r.ok, true, JSON.stringify(r.error));
    const { bound, budget, stage } = r.work.memory;
    const held = m.HEAPU8.length;
    console.log(`${name}: bound ${(bound / 1e6).toFixed(1)} MB (${stage}), module memory ${(held / 1e6).toFixed(1)} MB`);
    assert.equal(budget, 2 ** 31);
    assert.ok(bound > 40e6 && bound <= held, `${name}: bound ${bound} against ${held} bytes held`);
  }
});

test('engine: progress is reported and cancellation stops the analysis', () => {
  const steps = [];
  const done = engine.analyze_with(presets[0].config, { progress: (step, f) => steps.push([step, f]) });
  assert.equal(done.ok, true);
  assert.ok(steps.length > 2, `progress calls: ${steps.length}`);
  assert.deepEqual(steps.at(-1), ['done', 1]);
  for (let i = 1; i < steps.length; ++i) assert.ok(steps[i][1] >= steps[i - 1][1], `progress went back: ${JSON.stringify(steps.slice(i - 1, i + 1))}`);
  let calls = 0;
  const stopped = engine.analyze_with(presets[0].config, { cancelled: () => ++calls > 2 });
  assert.equal(stopped.ok, false);
  assert.equal(stopped.error.message, 'cancelled');
});

test('engine: a syntax error at a character the parser cuts is a report, not an exception', () => {
  // 'é' is two bytes in UTF-8; the parser stops at the first and quotes it, alone. The report's
  // message escapes it (a JSON text must be UTF-8), where the module used to throw.
  for (const text of ['é', '{"layers": [{"type": "linear"}], "x": é}']) {
    const r = JSON.parse(engine.module.analyze(text));
    assert.equal(r.ok, false);
    assert.match(r.error.message, /^invalid JSON at line 1, column \d+: .*\\xC3/, r.error.message);
  }
});

// A GPT-2-style block wide enough to be worth splitting (analysis/parts.cpp), narrow enough for a test.
const BLOCK = JSON.stringify({
  version: 1, seed: 3, dtype: 'float32', shape: { batch: 2, tokens: 16, features: 256 },
  layers: [
    { type: 'residual', body: [{ type: 'layernorm' }, { type: 'attention', num_heads: 4, causal: true }] },
    { type: 'residual', body: [{ type: 'layernorm' }, { type: 'linear', out_features: 1024 }, { type: 'gelu', approximate: 'tanh' }, { type: 'linear', out_features: 256 }] },
    { type: 'layernorm' },
  ],
});

test('engine: a large analysis split over workers merges into the report of one engine', () => {
  const m = engine.module;
  const counts = [];
  const first_text = m.analyzeWithCallbacks(BLOCK, { workers: 3, split: (count) => counts.push(count) });
  const first = JSON.parse(first_text);
  assert.equal(first.ok, true, JSON.stringify(first.error));
  assert.equal(counts.length, 1, 'split is called once');
  const count = counts[0];
  assert.ok(count >= 2 && count <= 3, `parts: ${count}`);
  assert.equal(first.pending.count, count);
  const parts = [];
  for (let k = 1; k < count; k++) parts.push(m.analyzeWithCallbacks(BLOCK, { part: k, parts: count }));
  for (const p of parts) assert.ok(JSON.parse(p).part.biases.length > 0, 'every part has biases');
  const merged = JSON.parse(m.mergeParts(first_text, `[${parts.join(',')}]`));
  assert.equal(merged.ok, true, JSON.stringify(merged.error));
  assert.equal(merged.pending, undefined);
  assert.equal(merged.timing_ms.parts.length, count - 1);
  const whole = engine.analyze(BLOCK);
  for (const r of [merged, whole]) delete r.timing_ms;
  assert.deepEqual(merged, whole);
  // Parts of another config do not merge.
  const other = JSON.parse(BLOCK);
  other.seed = 4;
  const foreign = m.analyzeWithCallbacks(JSON.stringify(other), { part: 1, parts: count });
  const refused = JSON.parse(m.mergeParts(first_text, `[${[foreign, ...parts.slice(1)].join(',')}]`));
  assert.equal(refused.ok, false);
  assert.match(refused.error.message, /do not belong together/);
  // One worker, or a small config: no split.
  const alone = [];
  assert.equal(JSON.parse(m.analyzeWithCallbacks(BLOCK, { workers: 1, split: (c) => alone.push(c) })).pending, undefined);
  assert.equal(JSON.parse(m.analyzeWithCallbacks(presets[0].config, { workers: 4, split: (c) => alone.push(c) })).pending, undefined);
  assert.deepEqual(alone, []);
});
