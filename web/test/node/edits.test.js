// The experiment's reducer (src/edits.js): every edit the page dispatches, applied to a copy;
// edits that do not apply leave the config alone; undo, redo and typing recorded as one step.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { load_engine } from '../support/engine.js';
import { apply_edit, create_store, dispatch, can_undo, can_redo, HISTORY_STEPS } from '../../src/edits.js';

const engine = await load_engine();
const schema = engine.schema();
const engine_preset = (name) => engine.presets().find((p) => p.name === name).config;
const base = () => ({ version: 1, seed: 7, shape: { batch: 2, tokens: 16, features: 64 }, layers: [{ type: 'residual', body: [{ type: 'layernorm' }, { type: 'attention' }] }, { type: 'linear', out_features: 64 }] });
const frozen = (o) => {
  Object.freeze(o);
  for (const v of Object.values(o)) if (typeof v === 'object' && v !== null) frozen(v);
  return o;
};

test('edits: each op changes a copy, never the config it was given', () => {
  const c = frozen(base());
  const cases = [
    [{ op: 'add_layer', path: 'layers', type: 'gelu' }, (n) => assert.deepEqual(n.layers.at(-1), { type: 'gelu' })],
    [{ op: 'add_layer', path: 'layers[0].body', type: 'residual' }, (n) => assert.deepEqual(n.layers[0].body[2], { type: 'residual', body: [{ type: schema.layer_types[0].name }] })],
    [{ op: 'remove_layer', path: 'layers[0].body[0]' }, (n) => assert.deepEqual(n.layers[0].body, [{ type: 'attention' }])],
    [{ op: 'move_layer', path: 'layers[1]', by: -1 }, (n) => assert.deepEqual(n.layers.map((l) => l.type), ['linear', 'residual'])],
    [{ op: 'move_layer', path: 'layers[0].body[0]', by: 1 }, (n) => assert.deepEqual(n.layers[0].body.map((l) => l.type), ['attention', 'layernorm'])],
    [{ op: 'set_type', path: 'layers[1]', type: 'relu' }, (n) => assert.deepEqual(n.layers[1], { type: 'relu' })],
    [{ op: 'set_option', path: 'layers[0].body[1]', name: 'num_heads', value: 8 }, (n) => assert.equal(n.layers[0].body[1].num_heads, 8)],
    [{ op: 'set_option', path: 'layers[1]', name: 'out_features', value: undefined }, (n) => assert.deepEqual(n.layers[1], { type: 'linear' })],
    [{ op: 'set_field', name: 'shape.batch', value: 4 }, (n) => assert.equal(n.shape.batch, 4)],
    [{ op: 'set_field', name: 'seed', value: undefined }, (n) => assert.equal('seed' in n, false)],
    // A grid sets written tokens with it (the engine would refuse a grid that disagrees with them).
    [{ op: 'set_field', name: 'shape.grid', value: [3, 5] }, (n) => assert.deepEqual(n.shape, { batch: 2, tokens: 15, features: 64, grid: [3, 5] })],
    [{ op: 'set_field', name: 'shape.grid', value: '3x' }, (n) => assert.deepEqual(n.shape, { batch: 2, tokens: 16, features: 64, grid: '3x' })],
    [{ op: 'load', config: { layers: [{ type: 'relu' }] } }, (n) => assert.deepEqual(n, { layers: [{ type: 'relu' }] })],
  ];
  for (const [edit, check] of cases) {
    const next = apply_edit(schema, c, edit);
    assert.notEqual(next, c, edit.op);
    check(next);
    assert.deepEqual(c, base(), `${edit.op} left the original alone`);
  }
  // A loaded config is a copy too: editing it later cannot reach back into a preset's object.
  const preset = { layers: [{ type: 'relu' }] };
  apply_edit(schema, apply_edit(schema, c, { op: 'load', config: preset }), { op: 'set_option', path: 'layers[0]', name: 'x', value: 1 }).layers[0].x = 2;
  assert.deepEqual(preset, { layers: [{ type: 'relu' }] });
});

test('edits: an edit that does not apply returns the same config, and never throws', () => {
  const c = frozen(base());
  for (const edit of [
    null, 7, 'add_layer', {}, { op: 'nope' },
    { op: 'add_layer', path: 'layers[1]', type: 'gelu' }, // not a list
    { op: 'add_layer', path: 'layers', type: 'no-such-type' },
    { op: 'add_layer', path: 'layers[9].body', type: 'gelu' },
    { op: 'remove_layer', path: 'layers[5]' },
    { op: 'remove_layer', path: 'layers' },
    { op: 'remove_layer' },
    { op: 'move_layer', path: 'layers[0]', by: -1 }, // past the top
    { op: 'move_layer', path: 'layers[1]', by: 1 }, // past the end
    { op: 'move_layer', path: 'layers[0]', by: 0.5 },
    { op: 'set_type', path: 'layers[0]', type: 'bogus' },
    { op: 'set_option', path: 'layers[0]', name: 'type', value: 'relu' }, // the type has its own op
    { op: 'set_option', path: 'layers[7]', name: 'bias', value: false },
    { op: 'set_field', name: 'layers', value: [] },
    { op: 'set_field', name: 'no.such', value: 1 },
    { op: 'load', config: 'not an object' },
    { op: 'load', config: [] },
  ])
    assert.equal(apply_edit(schema, c, edit), c, JSON.stringify(edit));
  // A config that is not an object (JSON typed as a number) takes only a load.
  assert.equal(apply_edit(schema, 3, { op: 'add_layer', path: 'layers', type: 'relu' }), 3);
  // A residual body that is not a list stays as written.
  const odd = frozen({ layers: [{ type: 'residual', body: 'x' }] });
  assert.equal(apply_edit(schema, odd, { op: 'add_layer', path: 'layers[0].body', type: 'relu' }), odd);
});

test('edits: dispatch records each edit as one undo step; undo and redo walk the steps back and forth', () => {
  let s = create_store(base());
  assert.equal(can_undo(s), false);
  s = dispatch(schema, s, { op: 'add_layer', path: 'layers', type: 'gelu' });
  s = dispatch(schema, s, { op: 'set_type', path: 'layers[2]', type: 'relu' });
  assert.equal(s.history.past.length, 2);
  assert.equal(can_undo(s), true);
  s = dispatch(schema, s, { op: 'undo' });
  assert.deepEqual(s.config.layers.at(-1), { type: 'gelu' });
  assert.equal(can_redo(s), true);
  s = dispatch(schema, s, { op: 'undo' });
  assert.deepEqual(s.config, base());
  assert.equal(dispatch(schema, s, { op: 'undo' }), s, 'nothing more to undo');
  s = dispatch(schema, s, { op: 'redo' });
  assert.deepEqual(s.config.layers.at(-1), { type: 'gelu' });
  // A new edit drops the redo steps.
  s = dispatch(schema, s, { op: 'set_field', name: 'seed', value: 3 });
  assert.equal(can_redo(s), false);
  // An edit that changes nothing is not a step.
  assert.equal(dispatch(schema, s, { op: 'move_layer', path: 'layers[0]', by: -1 }), s);
  const same = dispatch(schema, s, { op: 'set_field', name: 'seed', value: 3 });
  assert.equal(same.history.past.length, s.history.past.length);
});

test('edits: typing (record: false) is one step, recorded when the box is left or before an undo', () => {
  let s = create_store(base());
  for (const v of [3, 32]) s = dispatch(schema, s, { op: 'set_option', path: 'layers[0].body[1]', name: 'num_heads', value: v }, { record: false });
  assert.equal(s.history.past.length, 0);
  assert.equal(can_undo(s), true, 'typing not yet recorded can be undone');
  s = dispatch(schema, s, { op: 'record' });
  assert.equal(s.history.past.length, 1);
  assert.equal(JSON.parse(s.history.present).layers[0].body[1].num_heads, 32);
  // Undo right after typing records it first, so the typing is what goes.
  s = dispatch(schema, s, { op: 'set_field', name: 'shape.tokens', value: 8 }, { record: false });
  s = dispatch(schema, s, { op: 'undo' });
  assert.equal(s.config.shape.tokens, 16);
  assert.equal(s.config.layers[0].body[1].num_heads, 32);
  s = dispatch(schema, s, { op: 'redo' });
  assert.equal(s.config.shape.tokens, 8);
});

test(`edits: the history keeps the last ${HISTORY_STEPS} steps`, () => {
  let s = create_store(base());
  for (let i = 1; i <= HISTORY_STEPS + 20; i++) s = dispatch(schema, s, { op: 'set_field', name: 'seed', value: i });
  assert.equal(s.history.past.length, HISTORY_STEPS);
  assert.equal(JSON.parse(s.history.past[0]).seed, 20);
});

test('edits: a parallel block starts with two branches; branches are added and removed as lists', () => {
  const first = schema.layer_types[0].name;
  const c = frozen({ version: 1, layers: [{ type: 'parallel', branches: [[{ type: 'relu' }], [{ type: 'gelu' }, { type: 'linear' }]] }] });
  assert.deepEqual(apply_edit(schema, c, { op: 'add_layer', path: 'layers', type: 'parallel' }).layers[1], { type: 'parallel', branches: [[{ type: first }], [{ type: first }]] });
  assert.deepEqual(apply_edit(schema, c, { op: 'add_branch', path: 'layers[0].branches' }).layers[0].branches.at(-1), [{ type: first }]);
  assert.deepEqual(apply_edit(schema, c, { op: 'remove_layer', path: 'layers[0].branches[0]' }).layers[0].branches, [[{ type: 'gelu' }, { type: 'linear' }]]);
  assert.deepEqual(apply_edit(schema, c, { op: 'add_layer', path: 'layers[0].branches[1]', type: 'tanh' }).layers[0].branches[1].at(-1), { type: 'tanh' });
  assert.deepEqual(apply_edit(schema, c, { op: 'move_layer', path: 'layers[0].branches[1][1]', by: -1 }).layers[0].branches[1].map((l) => l.type), ['linear', 'gelu']);
  // A branch is not a layer list to add a branch to, and a layer list is not a list of branches.
  assert.equal(apply_edit(schema, c, { op: 'add_branch', path: 'layers[0].branches[0]' }), c);
  assert.equal(apply_edit(schema, c, { op: 'add_branch', path: 'layers' }), c);
});

test('edits: the editor text of a parallel block puts one layer per line inside each branch and reads back', async () => {
  const { format_config, canonical_config } = await import('../../src/experiment.js');
  const config = canonical_config(schema, JSON.parse(engine_preset('pythia-block')));
  const text = format_config(config);
  assert.deepEqual(JSON.parse(text), config);
  const attention_line = text.split('\n').find((l) => l.includes('"attention"'));
  assert.ok(attention_line && !attention_line.includes('"layernorm"'), `one layer per line:\n${text}`);
});
