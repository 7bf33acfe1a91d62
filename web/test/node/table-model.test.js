// Tables, Markdown and CSV from a real report.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { load_engine } from '../support/engine.js';
import { report_tables, fmt_num, delta_vs_floor } from '../../src/table-model.js';
import { to_markdown, to_csv } from '../../src/table-export.js';

const engine = await load_engine();
const report = engine.analyze(engine.presets().find((p) => p.name === 'default').config);

test('tables: number formatting is short and never hides null', () => {
  assert.equal(fmt_num(4.440892098500626e-16), '4.4e-16');
  assert.equal(fmt_num(0.44778467579444786), '0.448');
  assert.equal(fmt_num(12345), '1.2e4');
  assert.equal(fmt_num(0), '0');
  assert.equal(fmt_num(null), 'n/a');
  assert.equal(delta_vs_floor(1e-16, 1e-15), 'below floor (0.1x)');
  assert.equal(delta_vs_floor(1, 1e-15), '1.0e15x floor');
});

test('tables: one row per bias, fold and probe of the report', () => {
  const [biases, folds, minimal, invariances] = report_tables(report);
  assert.equal(biases.rows.length, report.biases.length);
  assert.equal(folds.rows.length, report.folds.length);
  assert.equal(minimal.rows.length, report.minimal_model.folds_applied.length);
  assert.equal(invariances.rows.length, report.invariances.length);
});

test('tables: Markdown has a header, a rule and one line per row; pipes are escaped', () => {
  for (const t of report_tables(report)) {
    const md = to_markdown(t);
    const lines = md.trim().split('\n').filter((l) => l.startsWith('|'));
    assert.equal(lines.length, t.rows.length + 2, t.id);
    const cols = t.columns.length;
    for (const l of lines) assert.equal(l.split(/(?<!\\)\|/).length - 2, cols, `${t.id}: ${l}`);
  }
  const t = { id: 'x', title: 'X', columns: [{ key: 'a', label: 'A', text: (r) => r.a }], rows: [{ a: 'p|q\nr' }] };
  assert.match(to_markdown(t), /\| p\\\|q r \|/);
});

test('tables: CSV quotes commas, quotes and newlines and keeps full precision', () => {
  const t = { id: 'x', title: 'X', columns: [{ key: 'a', label: 'A, b', text: (r) => r.a }, { key: 'n', label: 'N', text: () => '', value: (r) => r.n }], rows: [{ a: 'say "hi"\nthere', n: 4.440892098500626e-16 }] };
  assert.equal(to_csv(t), '"A, b",N\r\n"say ""hi""\nthere",4.440892098500626e-16\r\n');
  const [biases] = report_tables(report);
  const csv = to_csv(biases);
  assert.ok(csv.includes(String(report.biases[0].max_abs_delta)), 'full-precision delta in CSV');
});
