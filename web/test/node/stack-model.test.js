// The stack picture's model (src/stack-model.js) against the engine: the parameters it draws
// (from the report's `layers`) must give the engine's parameter count and contain every name the
// report carries, for every preset and a grid of options; folds and verdicts land on the right
// names.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { load_engine } from '../support/engine.js';
import { stack_model, parameter_facts } from '../../src/stack-model.js';

const engine = await load_engine();
const schema = engine.schema();

function check(config, label) {
  const report = engine.analyze(config);
  assert.equal(report.ok, true, `${label}: ${JSON.stringify(report.error)}`);
  // The declared parameters alone (no bias rows or folds to add names from).
  const model = stack_model(schema, report.config, { layers: report.layers });
  const total = [...model.params.values()].reduce((n, p) => n + p.size, 0);
  assert.equal(total, report.summary.parameters, `${label}: the picture counts ${total} parameters, the engine ${report.summary.parameters}`);
  // A fold's target may be new (the value bias moves into an output bias that was off), so only
  // the biases and what folds move are checked.
  const names = [...report.biases.map((b) => b.param), ...report.folds.flatMap((f) => f.moves.map((m) => m.from))];
  for (const n of names) assert.ok(model.params.has(n), `${label}: the report names ${n}, the picture does not`);
  return { report, model };
}

test('stack model: every preset\'s parameters, as the engine counts and names them', () => {
  for (const p of engine.presets()) check(JSON.parse(p.config), p.name);
});

test('stack model: every layer option that adds or removes a parameter', () => {
  const shape = { batch: 2, tokens: 4, features: 8 };
  const stacks = [
    [{ type: 'linear', out_features: 12, bias: false }, { type: 'layernorm', bias: false }, { type: 'linear', out_features: 8 }],
    [{ type: 'layernorm', elementwise_affine: false }, { type: 'rmsnorm' }, { type: 'rmsnorm', elementwise_affine: false }],
    [{ type: 'batchnorm', affine: false }, { type: 'batchnorm', mode: 'eval' }, { type: 'groupnorm', num_groups: 2, affine: false }, { type: 'groupnorm' }],
    [{ type: 'instancenorm' }, { type: 'instancenorm', affine: true }, { type: 'softmax' }, { type: 'relu' }, { type: 'gelu' }, { type: 'silu' }, { type: 'tanh' }],
    [{ type: 'attention', num_heads: 2, q_bias: false, o_bias: false }, { type: 'attention', k_bias: false, v_bias: false, causal: true }],
    [{ type: 'residual', body: [{ type: 'linear', out_features: 16 }, { type: 'relu' }, { type: 'linear', out_features: 8 }, { type: 'residual', body: [{ type: 'rmsnorm' }] }] }],
  ];
  stacks.forEach((layers, i) => check({ version: 1, seed: 1, shape, layers }, `stack ${i}`));
  // The value bias folds into an output bias the layer does not have: drawn as one the fold creates.
  const { report } = check({ version: 1, seed: 1, shape, layers: stacks[4] }, 'stack 4');
  const p = stack_model(schema, report.config, report).params.get('layers.0.o_proj.bias');
  assert.deepEqual([p.role, p.created], ['bias', true]);
});

test('stack model: shapes follow out_features; residual bodies nest with the skip\'s width', () => {
  const config = { shape: { batch: 2, tokens: 16, features: 64 }, layers: [{ type: 'residual', body: [{ type: 'layernorm' }, { type: 'linear', out_features: 256 }, { type: 'gelu' }, { type: 'linear', out_features: 64 }] }, { type: 'linear', out_features: 32 }] };
  const m = stack_model(schema, config, engine.analyze({ version: 1, ...config }));
  assert.deepEqual(m.layers.map((l) => [l.name, l.shape.in, l.shape.out]), [['layers.0', 64, 64], ['layers.1', 64, 32]]);
  assert.deepEqual(m.layers[0].body.map((l) => [l.name, l.type, l.shape.in, l.shape.out]), [
    ['layers.0.body.0', 'layernorm', 64, 64],
    ['layers.0.body.1', 'linear', 64, 256],
    ['layers.0.body.2', 'gelu', 256, 256],
    ['layers.0.body.3', 'linear', 256, 64],
  ]);
  assert.deepEqual(m.layers[0].body[0].params.map((p) => [p.local, p.role]), [['weight', 'gain'], ['bias', 'shift']]);
  assert.equal(m.out, 32);
  assert.equal(m.tokens, 16);
});

test('stack model: convolutions on a grid: out_channels sets the width; weights count (out, in / groups, k, k)', () => {
  const config = { shape: { batch: 1, features: 8, grid: [3, 4] }, layers: [{ type: 'conv2d', out_channels: 4, groups: 2 }, { type: 'conv1d', kernel_size: 5 }] };
  const m = stack_model(schema, config, engine.analyze({ version: 1, ...config }));
  assert.deepEqual(m.layers.map((l) => [l.name, l.shape.in, l.shape.out]), [['layers.0', 8, 4], ['layers.1', 4, 4]]);
  assert.deepEqual(m.layers[0].params.map((p) => [p.local, p.size]), [['weight', 4 * 4 * 3 * 3], ['bias', 4]]);
  assert.deepEqual(m.layers[1].params.map((p) => [p.local, p.size]), [['weight', 4 * 4 * 5], ['bias', 4]]);
  assert.deepEqual(m.grid, [3, 4]);
  assert.equal(m.out, 4);
});

test('stack model: folds become moves into their target, drops and centrings; verdicts from the rows', () => {
  const { report } = check(JSON.parse(engine.presets().find((p) => p.name === 'default').config), 'default');
  const facts = parameter_facts(report);
  assert.equal(facts.get('layers.0.body.1.k_proj.bias').row.verdict, 'redundant');
  assert.equal(facts.get('layers.0.body.1.k_proj.bias').dropped[0].rule, 'drop_key_bias');
  assert.deepEqual(facts.get('layers.0.body.1.v_proj.bias').into.map((m) => m.to), ['layers.0.body.1.o_proj.bias']);
  assert.deepEqual(facts.get('layers.0.body.0.weight').into.map((m) => m.to), ['layers.0.body.1.q_proj.weight', 'layers.0.body.1.k_proj.weight', 'layers.0.body.1.v_proj.weight']);
  assert.equal(facts.get('layers.0.body.0.weight').row, undefined, 'a gain has no verdict');
});

test('stack model: names no layer declares still land in their layer; bad configs give an empty stack', () => {
  const report = { biases: [{ param: 'layers.0.extra.bias', verdict: 'effective' }], folds: [] };
  const m = stack_model(schema, { shape: { features: 4 }, layers: [{ type: 'relu' }] }, report);
  assert.deepEqual(m.layers[0].params.map((p) => [p.local, p.role]), [['extra.bias', 'bias']]);
  for (const bad of [null, {}, { layers: 'x' }, { layers: [null, 3, { type: 'nope' }, { type: 'residual', body: 'x' }] }]) {
    const s = stack_model(schema, bad);
    assert.ok(Array.isArray(s.layers));
  }
});
