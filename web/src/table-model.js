// Report (format 1) -> tables of plain values. One description per table serves the page, the
// Markdown export and the CSV export, so the three cannot disagree. Pure; no DOM.
//
// A column: {key, label, text(row) -> string shown and written to Markdown,
//            value(row) -> what CSV gets (raw numbers at full precision; defaults to text),
//            numeric?: right-aligned}

/** Short scientific notation for deltas and floors: 4.4e-16, 0.448, 1.2e+3; null -> "n/a". */
export function fmt_num(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return 'n/a';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e4) return v.toExponential(1).replace('e+', 'e');
  return String(Number(v.toPrecision(3)));
}

export function fmt_int(v) {
  return v === null || v === undefined ? 'n/a' : Number(v).toLocaleString('en-US');
}

/** How a delta compares with its noise floor, as words (the page never relies on colour). */
export function delta_vs_floor(delta, floor) {
  if (delta === null || delta === undefined) return 'not finite';
  if (!(floor > 0)) return fmt_num(delta);
  const r = delta / floor;
  return r <= 1 ? `below floor (${fmt_num(r)}x)` : `${fmt_num(r)}x floor`;
}

// Symbols keep the verdicts apart without colour: ○ nothing of it matters, ◐ part of it, ● all of
// it, ? not settled (a limit stopped the structural analysis).
export const VERDICT_MARK = { redundant: '○', partly_redundant: '◐', effective: '●', undetermined: '?' };

export const VERDICT_TEXT = {
  redundant: 'redundant',
  partly_redundant: 'partly redundant',
  effective: 'effective',
  undetermined: 'undetermined',
};

/**
 * A row whose structural analysis a limit stopped before its stopping rule held: its redundant
 * dimension is only bounded (redundant_dim null, redundant_dim_min..redundant_dim_max).
 */
export function is_undetermined(row) {
  return row.verdict === 'undetermined' || typeof row.redundant_dim !== 'number';
}

const int_or_unknown = (v) => (typeof v === 'number' ? String(v) : '?');

/** "k" for a determined row, the bounds "min-max" for an undetermined one: never one number. */
export function redundant_dims(row) {
  return is_undetermined(row) ? `${int_or_unknown(row.redundant_dim_min)}-${int_or_unknown(row.redundant_dim_max)}` : String(row.redundant_dim);
}

/** Why an undetermined row has no single answer (the engine's sentence, or a generic one). */
export function undetermined_reason(row) {
  return row.undetermined_reason ?? 'a limit stopped the structural analysis before its stopping rule held';
}

/** What an undetermined row's "min-max of n" means, in a sentence (null without both bounds). */
export function bounds_text(row) {
  const lo = row.redundant_dim_min, hi = row.redundant_dim_max;
  if (typeof lo !== 'number' || typeof hi !== 'number') return null;
  return `at least ${lo} and at most ${hi} of the ${row.size} directions are redundant: the rank found, ${row.size - hi}, is a lower bound on the true rank`;
}

/** The notes a bias row carries, as sentences: why it is undetermined, and the engine's note. */
export function bias_notes(row) {
  const notes = [];
  if (is_undetermined(row)) {
    notes.push({ label: 'Undetermined', text: undetermined_reason(row) });
    if (bounds_text(row)) notes.push({ label: 'Bounds', text: bounds_text(row) });
  }
  if (row.note) notes.push({ label: 'Note', text: row.note });
  return notes;
}

const yes_no = (b) => (b ? 'yes' : 'no');

/** @typedef {{key: string, label: string, text: (r: any) => string, value?: (r: any) => any, numeric?: boolean}} Column */
/** @typedef {{id: string, title: string, columns: Column[], rows: any[], caption?: string}} Table */

/** @returns {Table} */
export function bias_table(report) {
  return {
    id: 'biases',
    title: 'Biases',
    caption:
      'Each bias perturbed by a random direction of unit RMS; redundant directions from the Jacobian.' +
      ((report.biases ?? []).some(is_undetermined)
        ? ' An undetermined bias hit a limit of the structural analysis before its answer was settled: its redundant column gives the bounds proven so far (min-max).'
        : ''),
    rows: report.biases ?? [],
    columns: [
      { key: 'param', label: 'Bias', text: (r) => r.param },
      { key: 'verdict', label: 'Verdict', text: (r) => (is_undetermined(r) ? VERDICT_TEXT.undetermined : VERDICT_TEXT[r.verdict] ?? r.verdict) },
      { key: 'redundant', label: 'Redundant', text: (r) => `${redundant_dims(r)} of ${r.size}`, value: (r) => `${redundant_dims(r)}/${r.size}` },
      { key: 'directions', label: 'Directions', text: (r) => r.directions },
      { key: 'max_abs_delta', label: 'max |Δ out|', text: (r) => fmt_num(r.max_abs_delta), value: (r) => r.max_abs_delta, numeric: true },
      { key: 'mean_abs_delta', label: 'mean |Δ out|', text: (r) => fmt_num(r.mean_abs_delta), value: (r) => r.mean_abs_delta, numeric: true },
      { key: 'noise_floor', label: 'Noise floor', text: (r) => fmt_num(r.noise_floor), value: (r) => r.noise_floor, numeric: true },
      { key: 'vs_floor', label: 'Δ vs floor', text: (r) => delta_vs_floor(r.max_abs_delta, r.noise_floor), value: (r) => (r.max_abs_delta ?? NaN) / r.noise_floor },
      { key: 'why', label: 'Why', text: (r) => [r.why, ...bias_notes(r).map((n) => `${n.label}: ${n.text}`)].join('. ') },
      {
        key: 'absorbed_by',
        label: 'Absorbed by',
        text: (r) => r.absorbed_by ?? (r.folds?.length ? `dropped (${r.folds.join(', ')})` : '—'),
        value: (r) => r.absorbed_by ?? (r.folds?.length ? `dropped (${r.folds.join(', ')})` : ''),
      },
    ],
  };
}

/** @returns {Table} */
export function fold_table(report) {
  return {
    id: 'folds',
    title: 'Folds',
    caption: 'Rewrites that remove parameters, each checked against the original output.',
    rows: report.folds ?? [],
    columns: [
      { key: 'rule', label: 'Rule', text: (r) => `${r.title} (${r.rule})`, value: (r) => r.rule },
      { key: 'formula', label: 'Formula', text: (r) => `$${r.formula}$`, value: (r) => r.formula },
      { key: 'where', label: 'Where', text: (r) => (r.where ?? []).join(', ') },
      { key: 'params_removed', label: 'Params removed', text: (r) => fmt_int(r.params_removed), value: (r) => r.params_removed, numeric: true },
      { key: 'max_abs_delta', label: 'max |Δ out|', text: (r) => fmt_num(r.max_abs_delta), value: (r) => r.max_abs_delta, numeric: true },
      { key: 'noise_floor', label: 'Noise floor', text: (r) => fmt_num(r.noise_floor), value: (r) => r.noise_floor, numeric: true },
      { key: 'exact', label: 'Exact', text: (r) => yes_no(r.exact), value: (r) => r.exact },
    ],
  };
}

/** @returns {Table} */
export function minimal_table(report) {
  const m = report.minimal_model ?? {};
  return {
    id: 'minimal',
    title: 'Minimal model',
    caption: m.params_before !== undefined
      ? `${fmt_int(m.params_before)} parameters before, ${fmt_int(m.params_after)} after (${fmt_int(m.params_before - m.params_after)} removed); output max |Δ| ${fmt_num(m.max_abs_delta)}, noise floor ${fmt_num(m.noise_floor)}, ${m.exact ? 'exact' : 'not exact'}.`
      : 'Not computed.',
    rows: (m.folds_applied ?? []).map((f, i) => ({ step: i + 1, ...f })),
    columns: [
      { key: 'step', label: 'Step', text: (r) => String(r.step), value: (r) => r.step, numeric: true },
      { key: 'rule', label: 'Fold applied', text: (r) => r.rule },
      { key: 'where', label: 'Where', text: (r) => (r.where ?? []).join(', ') },
      { key: 'params_removed', label: 'Params removed', text: (r) => fmt_int(r.params_removed), value: (r) => r.params_removed, numeric: true },
    ],
  };
}

/** @returns {Table} */
export function invariance_table(report) {
  return {
    id: 'invariances',
    title: 'Invariances',
    caption: 'Each probe transforms one layer\'s actual input and compares with the noise floor.',
    rows: report.invariances ?? [],
    columns: [
      { key: 'probe', label: 'Probe', text: (r) => r.probe },
      { key: 'layer', label: 'Layer', text: (r) => r.layer },
      { key: 'transform', label: 'Transform', text: (r) => r.transform },
      { key: 'expected', label: 'Expected', text: (r) => r.expected },
      { key: 'holds', label: 'Holds', text: (r) => yes_no(r.holds), value: (r) => r.holds },
      { key: 'agrees', label: 'As expected', text: (r) => yes_no(r.agrees), value: (r) => r.agrees },
      { key: 'max_abs_delta', label: 'max |Δ|', text: (r) => fmt_num(r.max_abs_delta), value: (r) => r.max_abs_delta, numeric: true },
      { key: 'noise_floor', label: 'Noise floor', text: (r) => fmt_num(r.noise_floor), value: (r) => r.noise_floor, numeric: true },
      { key: 'note', label: 'Note', text: (r) => r.note ?? '' },
    ],
  };
}

export function report_tables(report) {
  return [bias_table(report), fold_table(report), minimal_table(report), invariance_table(report)];
}
