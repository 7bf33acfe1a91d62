// The report as tables, plot and formulas. Table contents come from table-model.js (shared with
// the Markdown and CSV exports); this file only decides how a few cells look on the page.
// The formulas are typeset at build time (tools/katex-prerender.js): {latex: html}, in their own
// module, fetched as the page starts but outside the first load: only the folds table shows them,
// and a formula drawn before they land, or before the page's first paint, is filled in after.
let FORMULAS = null;
// A failed fetch leaves every formula as its LaTeX source.
const formulas_loaded = import('virtual:formulas').then((m) => (FORMULAS = m.default), () => (FORMULAS = {}));

import { h, clear, download } from './dom.js';
import { bias_table, fold_table, minimal_table, invariance_table, fmt_int, VERDICT_TEXT, VERDICT_MARK, is_undetermined, redundant_dims, undetermined_reason, bias_notes } from './table-model.js';
import { term, column_term } from './glossary.js';


/** A dotted parameter or layer name that may wrap only after its dots: each part ("q_proj.")
 * is unbreakable, with a break opportunity after it. */
function name(text) {
  const parts = String(text).split(/(?<=\.)/);
  return h('code', { class: 'name' }, parts.map((p, i) => [h('span', { class: 'name-part' }, p), i < parts.length - 1 ? h('wbr') : null]));
}

function names(list) {
  return (list ?? []).map((w, i) => [i ? ', ' : '', name(w)]);
}

/** A verdict as a badge that links to its glossary entry (tooltip on hover and focus); `detail`
 * adds this row's own reason to the tooltip. */
function verdict_badge(v, detail = null) {
  return term(v, h('span', { class: `badge verdict-${v}` }, h('span', { 'aria-hidden': 'true' }, VERDICT_MARK[v] ?? '?'), '\u00a0', VERDICT_TEXT[v] ?? v), detail);
}

// Direction words that are glossary terms.
const DIRECTION_TERMS = { 'all-ones': 'all_ones', 'W_O b_V along all-ones': 'wo_bv' };

function yes_no_badge(ok, yes = 'yes', no = 'no') {
  return h('span', { class: `badge ${ok ? 'good' : 'bad'}` }, h('span', { 'aria-hidden': 'true' }, ok ? '✓' : '✗'), ' ', ok ? yes : no);
}

// The first layout of the typeset formulas (KaTeX's HTML and its MathML) takes hundreds of
// milliseconds in Chromium, in one Layout that the first paint of the tables would wait for. So
// the page's first tables go without them: formulas land a frame after the first paint.
let first_paint = null;
const after_first_paint = () =>
  (first_paint ??= new Promise((ok) => requestAnimationFrame(() => setTimeout(() => ok((first_paint = true)), 0))));

/** A fold rule's formula; the raw LaTeX if the build did not typeset it. */
function formula(tex) {
  if (!FORMULAS || first_paint !== true) {
    const waiting = h('span', { class: 'formula' });
    Promise.all([formulas_loaded, after_first_paint()]).then(() => waiting.replaceWith(formula(tex)));
    return waiting;
  }
  const html = Object.hasOwn(FORMULAS, tex) ? FORMULAS[tex] : null;
  if (html === null) return h('code', { class: 'formula formula-tex', title: 'LaTeX' }, tex);
  const el = h('span', { class: 'formula' });
  el.innerHTML = html; // KaTeX's output for our own rule table, made at build time
  return el;
}

// Cells that are more than text on the page; everything else is column.text(row).
const CELLS = {
  biases: {
    // Opens the row's detail panel (toggle_detail, below).
    param: (r) => h('button', { type: 'button', class: 'row-toggle', 'aria-expanded': 'false', title: 'Details: the reason, the rank history and this bias\'s curve', dataset: { param: r.param } }, name(r.param)),
    verdict: (r) => (is_undetermined(r) ? verdict_badge('undetermined', undetermined_reason(r)) : verdict_badge(r.verdict)),
    redundant: (r) =>
      is_undetermined(r)
        ? h('span', { class: 'bounds', title: `at least ${r.redundant_dim_min ?? '?'} and at most ${r.redundant_dim_max ?? '?'} of ${r.size} directions are redundant; the analysis stopped before it could say how many` }, `${redundant_dims(r)} of ${r.size}`)
        : h('span', { title: r.structure?.stop_note ?? null }, `${redundant_dims(r)} of ${r.size}`),
    directions: (r) => (DIRECTION_TERMS[r.directions] ? term(DIRECTION_TERMS[r.directions], r.directions) : r.directions),
    why: (r) => [r.why, bias_notes(r).map((n) => h('div', { class: `note note-${n.label.toLowerCase()}` }, h('strong', {}, `${n.label}: `), n.text))],
    absorbed_by: (r) => (r.absorbed_by ? name(r.absorbed_by) : r.folds?.length ? `dropped (${r.folds.join(', ')})` : '—'),
  },
  folds: {
    rule: (r) => [r.title, h('br'), h('code', { class: 'muted' }, r.rule)],
    formula: (r) => formula(r.formula),
    where: (r) => names(r.where),
    exact: (r) => yes_no_badge(r.exact, 'exact', 'not exact'),
  },
  minimal: {
    where: (r) => names(r.where),
    rule: (r) => h('code', {}, r.rule),
  },
  invariances: {
    layer: (r) => name(r.layer),
    holds: (r) => yes_no_badge(r.holds),
    agrees: (r) => yes_no_badge(r.agrees),
  },
};

// The columns a table shows in a narrow container (under 1100 px: a blog column, the desktop's
// results column, a phone); the others appear with "All columns" (kept across re-analyses),
// and a bias row's detail panel lists them too.
const KEY_COLUMNS = {
  biases: ['param', 'verdict', 'redundant', 'max_abs_delta'],
  folds: ['rule', 'formula', 'exact'],
  minimal: ['step', 'rule', 'where'],
  invariances: ['probe', 'layer', 'holds', 'agrees'],
};
const all_columns = new Set();

// A table's Markdown or CSV download (table-export.js, fetched on the first one).
function save_table(table, stem, ext) {
  import('./table-export.js').then(({ to_markdown, to_csv }) =>
    ext === 'md' ? download(`${stem}-${table.id}.md`, to_markdown(table), 'text/markdown') : download(`${stem}-${table.id}.csv`, to_csv(table), 'text/csv'),
  );
}

function table_section(table, file_stem, extra_head = null, extra_body = null) {
  const title_id = `table-${table.id}-title`;
  const cells = CELLS[table.id] ?? {};
  const keep = KEY_COLUMNS[table.id];
  const opt = (c) => (keep && !keep.includes(c.key) ? 'col-extra' : '');
  const hidden = keep ? table.columns.filter((c) => !keep.includes(c.key)).length : 0;
  const more = hidden && table.rows.length
    ? h('button', {
        type: 'button',
        class: 'small more-columns',
        'aria-pressed': String(all_columns.has(table.id)),
        title: `Show the ${hidden} other column${hidden === 1 ? '' : 's'} (the table then scrolls sideways)`,
        onclick: (e) => {
          const on = !all_columns.has(table.id);
          if (on) all_columns.add(table.id);
          else all_columns.delete(table.id);
          e.currentTarget.setAttribute('aria-pressed', String(on));
          e.currentTarget.closest('.result-section').classList.toggle('all-columns', on);
        },
      }, `All columns (+${hidden})`)
    : null;
  const exports = h(
    'span',
    { class: 'exports' },
    more,
    h('button', { type: 'button', class: 'small', 'aria-label': `Download the ${table.title} table as Markdown`, onclick: () => save_table(table, file_stem(), 'md') }, 'Markdown'),
    h('button', { type: 'button', class: 'small', 'aria-label': `Download the ${table.title} table as CSV`, onclick: () => save_table(table, file_stem(), 'csv') }, 'CSV'),
  );
  const body = table.rows.length
    ? h(
        'div',
        { class: `table-wrap table-${table.id}-wrap`, role: 'region', 'aria-labelledby': title_id, tabindex: '0' },
        h(
          'table',
          { class: `report-table table-${table.id}`, dataset: { table: table.id } },
          h('thead', {}, h('tr', {}, table.columns.map((c) => h('th', { scope: 'col', class: [c.numeric ? 'num' : '', opt(c)].join(' ').trim() || null }, column_term(table.id, c.key) ? term(column_term(table.id, c.key), c.label) : c.label)))),
          h(
            'tbody',
            {},
            table.rows.map((r) =>
              h('tr', {}, table.columns.map((c, i) => h(i === 0 ? 'th' : 'td', { scope: i === 0 ? 'row' : null, class: [c.numeric ? 'num' : '', `col-${c.key}`, opt(c)].join(' ').trim(), dataset: { col: c.key } }, cells[c.key] ? cells[c.key](r) : c.text(r)))),
            ),
          ),
        ),
      )
    : h('p', { class: 'muted' }, 'None for this experiment.');
  return h(
    'section',
    { class: `result-section${all_columns.has(table.id) ? ' all-columns' : ''}`, id: `section-${table.id}`, 'aria-labelledby': title_id },
    h('div', { class: 'section-head' }, h('h2', { id: title_id }, table.title), exports),
    table.caption ? h('p', { class: 'caption' }, table.caption) : null,
    extra_head,
    more ? h('p', { class: 'caption scroll-hint' }, 'All columns: the table scrolls sideways →') : null,
    body,
    extra_body,
  );
}

const gb = (b) => `${(b / 1e9).toFixed(2)} GB`;

function summary(report, ms) {
  const s = report.summary ?? {};
  const parts = [
    `${s.biases} bias${s.biases === 1 ? '' : 'es'}: ${s.redundant} redundant, ${s.partly_redundant} partly redundant, ${s.effective} effective${s.undetermined > 0 ? `, ${s.undetermined} undetermined` : ''}`,
    `${s.exact_folds} of ${s.folds} folds exact`,
    `${fmt_int(s.parameters)} parameters`,
  ];
  if (report.minimal_model) parts.push(`minimal model ${fmt_int(report.minimal_model.params_after)}`);
  const timing = report.timing_ms?.total;
  if (timing !== undefined) parts.push(`analysed in ${Math.round(timing)} ms${ms ? ` (${Math.round(ms)} ms in the worker)` : ''}`);
  // The memory bound, where it is a noticeable share of the engine's budget.
  const mem = report.work?.memory;
  if (mem?.budget > 0 && mem.bound > mem.budget / 100) parts.push(`memory at least ${gb(mem.bound)} of ${gb(mem.budget)}`);
  return h('p', { class: 'summary', id: 'summary' }, parts.join(' · '));
}

let plot = null;
let stack = null;
/** Open detail panels, by parameter name: they stay open across re-analyses. */
const open_details = new Set();
let detail_handles = [];

/** Opens or closes a bias row's detail panel: a row under it, made (and its module loaded) on
 * the first opening. */
function toggle_detail(button, report, open = button.getAttribute('aria-expanded') !== 'true') {
  const param = button.dataset.param;
  const tr = button.closest('tr');
  let detail = tr.nextElementSibling?.classList.contains('detail-row') ? tr.nextElementSibling : null;
  button.setAttribute('aria-expanded', String(open));
  if (open) open_details.add(param);
  else open_details.delete(param);
  if (!open) {
    if (detail) detail.hidden = true;
    return;
  }
  if (detail) {
    detail.hidden = false;
    return;
  }
  const id = `detail-${[...tr.parentElement.children].indexOf(tr)}`;
  const panel = h('div', { class: 'bias-detail', id, role: 'region', 'aria-label': `Details of ${param}` }, h('p', { class: 'muted' }, 'Loading…'));
  detail = h('tr', { class: 'detail-row' }, h('td', { colspan: String(tr.children.length) }, panel));
  tr.after(detail);
  button.setAttribute('aria-controls', id);
  const row = report.biases.find((b) => b.param === param);
  import('./bias-detail.js').then(({ render_bias_detail }) => {
    if (panel.isConnected) detail_handles.push(render_bias_detail(panel, report, row));
  });
}

/**
 * @param {HTMLElement} root
 * @param {object} report
 * @param {{ms?: number, on_load_minimal?: (config: object) => void, embed?: boolean,
 *          file_stem?: () => string}} options file_stem: downloads are named `${file_stem()}-biases.md`
 */
export function render_results(root, report, { ms, on_load_minimal, embed = false, file_stem = () => 'biaslab', show = null, param = null, schema = null } = {}) {
  plot?.destroy();
  plot = null;
  stack?.destroy();
  stack = null;
  for (const d of detail_handles) d.destroy();
  detail_handles = [];
  const plot_root = h('div', { class: 'plot' });
  const plot_section = h(
    'section',
    { class: 'result-section', id: 'section-sweep', 'aria-labelledby': 'sweep-title' },
    h(
      'div',
      { class: 'section-head' },
      h('h2', { id: 'sweep-title' }, 'Perturbation sweep'),
      h('span', { class: 'exports' }, h('button', { type: 'button', class: 'small', id: 'download-png', onclick: async () => { const png = await plot?.png(); if (png) download(`${file_stem()}-sweep.png`, png); } }, 'PNG')),
    ),
    h('p', { class: 'caption' }, report.sweep?.direction ? `Direction: ${report.sweep.direction}. Points below the noise floor are rounding; the floor is measured wherever a change comes within a million times of it.` : ''),
    plot_root,
  );
  const minimal = report.minimal_model;
  const load_minimal =
    minimal && on_load_minimal && !embed
      ? h('p', {}, h('button', { type: 'button', id: 'load-minimal', onclick: () => on_load_minimal(minimal.config) }, 'Load the minimal model into the editor'))
      : null;
  const noise = report.noise
    ? h('p', { class: 'caption' }, `Noise floor (${report.noise.dtype}): ${report.noise.method}.`)
    : null;
  if (schema && (!show || show.has('stack'))) stack = lazy_stack(report, { schema, on_select: (p) => select_param(root, report, p) });
  clear(
    root,
    summary(report, ms),
    table_section(bias_table(report), file_stem, null, noise),
    stack?.section,
    plot_section,
    table_section(fold_table(report), file_stem),
    table_section(minimal_table(report), file_stem, null, load_minimal),
    table_section(invariance_table(report), file_stem),
    show?.has('card') ? card_section(report, param) : null,
  );
  // An embed's `show=`: the chosen sections only (folds brings the minimal model along).
  if (show) {
    const keep = new Set([...show, ...(show.has('folds') ? ['minimal'] : [])]);
    for (const id of ['biases', 'sweep', 'folds', 'minimal', 'invariances']) root.querySelector(`#section-${id}`)?.toggleAttribute('hidden', !keep.has(id));
  }
  if (!show || show.has('sweep')) plot = lazy_sweep(plot_root, report);
  const biases = root.querySelector('#section-biases');
  biases?.addEventListener('click', (e) => {
    const button = e.target.closest('button.row-toggle');
    if (!button) return;
    toggle_detail(button, report);
    if (button.getAttribute('aria-expanded') === 'true') stack?.select(button.dataset.param);
  });
  for (const param of [...open_details]) if (!report.biases?.some((b) => b.param === param)) open_details.delete(param);
  for (const button of biases?.querySelectorAll('button.row-toggle') ?? []) if (open_details.has(button.dataset.param)) toggle_detail(button, report, true);
}

/** A parameter picked in the stack picture: its bias row selected, scrolled to and opened (as a
 * click on its name does), and its curve highlighted in the sweep. */
function select_param(root, report, param) {
  for (const tr of root.querySelectorAll('table.table-biases tr.selected')) {
    tr.classList.remove('selected');
    tr.removeAttribute('aria-current');
  }
  plot?.select(param);
  const button = [...root.querySelectorAll('table.table-biases button.row-toggle')].find((b) => b.dataset.param === param);
  if (!button) return;
  const tr = button.closest('tr');
  tr.classList.add('selected');
  tr.setAttribute('aria-current', 'true');
  toggle_detail(button, report, true);
  if (!button.closest('[hidden]')) {
    tr.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
    button.focus({ preventScroll: true });
  }
}

/** The stack picture, its module fetched when a picture is first drawn (as the sweep plot's), so
 * it stays out of the first load: the section's heading at once, the picture when the module
 * arrives, in its place. Same handle as render_stack's. */
function lazy_stack(report, options) {
  let handle = null;
  let dead = false;
  let selected = null;
  const placeholder = h(
    'section',
    { class: 'result-section', id: 'section-stack', 'aria-labelledby': 'stack-title', 'aria-busy': 'true' },
    h('div', { class: 'section-head' }, h('h2', { id: 'stack-title' }, 'The stack')),
  );
  import('./stack-picture.js').then(({ render_stack }) => {
    if (dead) return;
    handle = render_stack(report, options);
    placeholder.replaceWith(handle.section);
    if (selected) handle.select(selected);
  });
  return {
    section: placeholder,
    destroy() {
      dead = true;
      handle?.destroy();
    },
    select(param) {
      selected = param;
      handle?.select(param);
    },
  };
}

/** The sweep plot, its module (uPlot, about 22 KB gzip) fetched when a plot is first drawn, so
 * it stays out of the first load and an embed without the sweep never fetches it. Same handle as
 * render_sweep's. */
function lazy_sweep(root, report, options) {
  let handle = null;
  let dead = false;
  let selected = null;
  import('./sweep-plot.js').then(({ render_sweep }) => {
    if (dead) return;
    handle = render_sweep(root, report, options);
    if (selected) handle?.select(selected);
  });
  return {
    destroy() {
      dead = true;
      handle?.destroy();
    },
    png: async () => (handle ? handle.png() : null),
    select(param) {
      selected = param;
      handle?.select(param);
    },
  };
}

let card_plot = null;
/** `card` (embeds): one bias at a glance: its verdict, why, and its curve alone. */
function card_section(report, param) {
  card_plot?.destroy();
  const row = report.biases?.find((b) => b.param === param) ?? report.biases?.[0];
  if (!row) return h('section', { class: 'result-section', id: 'section-card' }, h('p', { class: 'muted' }, 'This experiment has no bias.'));
  const plot_root = h('div', { class: 'plot detail-plot' });
  const section = h(
    'section',
    { class: 'result-section card', id: 'section-card', 'aria-labelledby': 'card-title' },
    h('h2', { id: 'card-title' }, h('code', {}, row.param), ' ', CELLS.biases.verdict(row)),
    h('p', {}, `${redundant_dims(row)} of ${row.size} directions redundant. `, row.why ?? ''),
    bias_notes(row).map((n) => h('p', { class: `note note-${n.label.toLowerCase()}` }, h('strong', {}, `${n.label}: `), n.text)),
    plot_root,
  );
  card_plot = lazy_sweep(plot_root, report, { only: row.param });
  return section;
}

/** Re-draws the plot (its colours come from CSS, which changes with the theme). */
export function refresh_plot(root, report) {
  const plot_root = root.querySelector('.plot');
  if (!plot_root || !report) return;
  plot?.destroy();
  plot_root.replaceChildren();
  plot = lazy_sweep(plot_root, report);
}
