// A bias row's detail panel, loaded on the first opening (a separate chunk): the reason, what
// the structural analysis found (stop rule, singular-value gap of the stacked Jacobian), the
// rank after each step of stacking inputs, and the bias's sweep curve alone.
//
// The rank history shows the few-tokens trap: one input of few tokens can leave many
// directions without effect that further inputs do reach (few-tokens-trap: 122 after one input,
// none after 22).
import { h } from './dom.js';
import { fmt_num, redundant_dims, bias_notes, bias_table } from './table-model.js';
import { render_sweep } from './sweep-plot.js';
import { term } from './glossary.js';

/**
 * @param {HTMLElement} root the panel
 * @param {object} report
 * @param {object} row one entry of report.biases
 * @returns {{destroy(): void}}
 */
export function render_bias_detail(root, report, row) {
  const st = row.structure ?? {};
  const n = row.size;
  const ranks = st.rank_history ?? [], inputs = st.inputs_history ?? [];
  const sigma = [];
  // Bounds rather than values when the rank came from a few tokens' rows or a Cholesky
  // certificate (structure.sigma_bounds): the kept one from below, the null one from above.
  const at_least = st.sigma_bounds ? 'at least ' : '', at_most = st.sigma_bounds ? 'at most ' : '';
  if (st.kept_sigma_min > 0) sigma.push(`smallest kept singular value ${at_least}${fmt_num(st.kept_sigma_min)}`);
  if (typeof st.null_sigma_max === 'number' && redundant_dims(row) !== '0') sigma.push(`largest null ${sigma.length ? 'one' : 'singular value'} ${at_most}${fmt_num(st.null_sigma_max)}`);
  if (st.kept_sigma_min > 0 && st.null_sigma_max > 0) sigma.push(`a gap of ${at_least}${fmt_num(st.kept_sigma_min / st.null_sigma_max)}x`);
  const plot = h('div', { class: 'plot detail-plot' });
  root.replaceChildren(
    h('h3', {}, 'Why ', h('code', {}, row.param)),
    h('p', {}, row.why ?? ''),
    bias_notes(row).map((note) => h('p', { class: `note note-${note.label.toLowerCase()}` }, h('strong', {}, `${note.label}: `), note.text)),
    // The table's columns a narrow container hides (all of them, short, in one list).
    h('dl', { class: 'detail-columns' }, bias_table(report).columns.filter((c) => !['param', 'verdict', 'why'].includes(c.key)).map((c) => h('div', {}, h('dt', {}, c.label), h('dd', {}, c.text(row))))),
    h('h3', {}, 'How its redundant directions were found'),
    h(
      'p',
      {},
      `${redundant_dims(row)} of ${n} directions redundant. `,
      st.stop_rule ? [term('stop_rule', 'Stop rule'), ': ', h('code', {}, st.stop_rule), st.stop_note ? ` (${st.stop_note}).` : '.'] : null,
    ),
    sigma.length ? h('p', {}, `Stacked Jacobian${st.jacobian_at ? ` (at the ${st.jacobian_at})` : ''}: ${sigma.join(', ')}.`) : null,
    ranks.length
      ? h(
          'div',
          { class: 'rank-history-wrap' },
          h(
            'table',
            { class: 'report-table rank-history' },
            h('caption', {}, 'Rank after each step of stacking inputs. Directions that look null after a few inputs may not be: only the last step counts.'),
            h('thead', {}, h('tr', {}, h('th', { scope: 'col', class: 'num' }, 'inputs stacked'), h('th', { scope: 'col', class: 'num' }, 'rank'), h('th', { scope: 'col', class: 'num' }, `null directions (${n} − rank)`))),
            h('tbody', {}, ranks.map((r, i) => h('tr', {}, h('td', { class: 'num' }, String(inputs[i] ?? '?')), h('td', { class: 'num' }, String(r)), h('td', { class: 'num' }, String(n - r))))),
          ),
        )
      : null,
    h('h3', {}, 'Its sweep'),
    plot,
  );
  const sweep = render_sweep(plot, report, { only: row.param });
  return { destroy: () => sweep?.destroy() };
}
