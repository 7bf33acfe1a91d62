// A report with an undetermined bias (a limit stopped its structural analysis): the tables, the
// Markdown and CSV exports and the sweep legend show its bounds and reason, never one number.
// Hand-made, so it needs no engine build.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { bias_table, redundant_dims, is_undetermined, bias_notes } from '../../src/table-model.js';
import { to_markdown, to_csv } from '../../src/table-export.js';
import { sweep_series } from '../../src/sweep-plot.js';

const REASON =
  'the structural budget (2 GFLOP) ran out while the rank was still rising: 64 inputs stacked, rank 64 of 96; more inputs could raise it further';

const report = {
  ok: true,
  format: 1,
  config: { version: 1, seed: 1, dtype: 'float64', shape: { batch: 1, tokens: 2, features: 96 }, layers: [{ type: 'attention', num_heads: 1 }] },
  summary: { parameters: 37248, biases: 3, redundant: 1, partly_redundant: 0, effective: 1, undetermined: 1, folds: 0, exact_folds: 0 },
  biases: [
    {
      param: 'layers.0.q_proj.bias', size: 96,
      redundant_dim: null, redundant_dim_min: 0, redundant_dim_max: 32,
      verdict: 'undetermined', undetermined_reason: REASON,
      max_abs_delta: 0.731, mean_abs_delta: 0.2, rel_delta: 0.5, noise_floor: 3.1e-15,
      consistent: null, why: 'the structural analysis stopped at a limit', directions: 'undetermined', absorbed_by: null,
      structure: { samples: 64, rank_history: [2, 4, 64], stop_rule: 'budget', stop_note: 'the budget ran out' },
    },
    {
      param: 'layers.0.k_proj.bias', size: 96,
      redundant_dim: 96, redundant_dim_min: 96, redundant_dim_max: 96, verdict: 'redundant',
      max_abs_delta: 4.4e-16, mean_abs_delta: 1e-16, rel_delta: 1e-16, noise_floor: 3.1e-15,
      consistent: true, why: 'softmax is shift invariant', directions: 'all', absorbed_by: null,
      structure: { samples: 2, rank_history: [0, 0], stop_rule: 'no_gain', stop_note: 'no gain' },
    },
    {
      param: 'layers.0.v_proj.bias', size: 96,
      redundant_dim: 0, redundant_dim_min: 0, redundant_dim_max: 0, verdict: 'effective',
      max_abs_delta: 1.5, mean_abs_delta: 0.5, rel_delta: 0.9, noise_floor: 3.1e-15,
      consistent: false, note: 'a made-up note', why: 'adds to every token', directions: 'none', absorbed_by: 'layers.0.o_proj.bias',
      structure: { samples: 2, rank_history: [96, 96], stop_rule: 'full_rank', stop_note: 'full rank' },
    },
  ],
  folds: [],
  sweep: {
    sizes: [1e-8, 1, 100],
    series: [
      { param: 'layers.0.q_proj.bias', delta: [7e-9, 0.731, 73], noise_floor: [3e-15, 3e-15, null], delta_redundant: [1e-16, 1e-16, 1e-14], noise_floor_redundant: [3e-15, 3e-15, 3e-13] },
      { param: 'layers.0.k_proj.bias', delta: [1e-16, 4.4e-16, 1e-14], noise_floor: [3e-15, 3e-15, 3e-13] },
      { param: 'layers.0.v_proj.bias', delta: [1.5e-8, 1.5, 150], noise_floor: [3e-15, 3e-15, null] },
    ],
  },
};

const cell = (table, row, key) => {
  const col = table.columns.find((c) => c.key === key);
  return { text: col.text(table.rows[row]), value: (col.value ?? col.text)(table.rows[row]) };
};

// The row explains its bounds in words too (issue 12).
const BOUNDS = 'Bounds: at least 0 and at most 32 of the 96 directions are redundant: the rank found, 64, is a lower bound on the true rank';

test('undetermined: the table model gives bounds, the verdict and the reason', () => {
  const t = bias_table(report);
  assert.equal(cell(t, 0, 'redundant').text, '0-32 of 96');
  assert.equal(cell(t, 0, 'redundant').value, '0-32/96');
  assert.equal(cell(t, 0, 'verdict').text, 'undetermined');
  assert.equal(cell(t, 0, 'why').text, `the structural analysis stopped at a limit. Undetermined: ${REASON}. ${BOUNDS}`);
  assert.equal(cell(t, 0, 'max_abs_delta').text, '0.731', 'the measured perturbation is still shown');
  assert.equal(cell(t, 1, 'redundant').text, '96 of 96');
  assert.equal(cell(t, 1, 'verdict').text, 'redundant');
  assert.equal(cell(t, 2, 'why').text, 'adds to every token. Note: a made-up note');
  assert.match(t.caption, /undetermined bias hit a limit .* bounds proven so far \(min-max\)/);
});

test('undetermined: a row with redundant_dim null is undetermined even without bounds or verdict', () => {
  const bare = { param: 'x', size: 8, redundant_dim: null };
  assert.equal(is_undetermined(bare), true);
  assert.equal(redundant_dims(bare), '?-?');
  assert.deepEqual(bias_notes(bare).map((n) => n.label), ['Undetermined']);
  assert.equal(is_undetermined(report.biases[2]), false);
  assert.equal(redundant_dims(report.biases[2]), '0');
  // Older reports (no bounds, no undetermined count) read as before.
  const old = { param: 'y', size: 8, redundant_dim: 1, verdict: 'partly_redundant' };
  assert.equal(redundant_dims(old), '1');
  assert.equal(bias_table({ biases: [old] }).caption.includes('undetermined'), false);
});

test('undetermined: the Markdown export shows the bounds and the reason in its row', () => {
  const md = to_markdown(bias_table(report));
  const q = md.split('\n').find((l) => l.startsWith('| layers.0.q_proj.bias '));
  assert.equal(
    q,
    `| layers.0.q_proj.bias | undetermined | 0-32 of 96 | undetermined | 0.731 | 0.2 | 3.1e-15 | 2.4e14x floor | the structural analysis stopped at a limit. Undetermined: ${REASON}. ${BOUNDS} | — |`,
  );
  assert.match(md, /\| layers\.0\.k_proj\.bias \| redundant \| 96 of 96 \|/);
  assert.doesNotMatch(md, /null of 96|undefined/);
});

test('undetermined: the CSV export keeps the bounds and the reason, and the raw numbers', () => {
  const csv = to_csv(bias_table(report));
  const lines = csv.split('\r\n');
  assert.equal(lines[0], 'Bias,Verdict,Redundant,Directions,max |Δ out|,mean |Δ out|,Noise floor,Δ vs floor,Why,Absorbed by');
  assert.equal(lines[1], `layers.0.q_proj.bias,undetermined,0-32/96,undetermined,0.731,0.2,3.1e-15,${0.731 / 3.1e-15},"the structural analysis stopped at a limit. Undetermined: ${REASON}. ${BOUNDS}",`);
  assert.match(lines[2], /^layers\.0\.k_proj\.bias,redundant,96\/96,all,/);
});

test('undetermined: the sweep legend marks the bias and its provisional null part', () => {
  const { series, data } = sweep_series(report);
  const labels = series.map((s) => s.label);
  assert.deepEqual(labels, [
    'size',
    'layers.0.q_proj.bias (undetermined)',
    'layers.0.q_proj.bias (null directions found so far)',
    'layers.0.k_proj.bias',
    'layers.0.v_proj.bias',
    'noise floor',
  ]);
  assert.equal(data.length, series.length);
});
