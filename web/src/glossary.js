// The page's vocabulary, written once: the glossary section lists these entries, and every
// column header and verdict badge links to one of them and shows its text as a tooltip (on
// hover and on keyboard focus). The texts follow README.md, "How the answers are computed".
import { h, clear } from './dom.js';

/** @typedef {{id: string, term: string, text: string}} Entry */

/** @type {{title: string, entries: Entry[]}[]} */
export const GLOSSARY = [
  {
    title: 'Verdicts',
    entries: [
      { id: 'redundant', term: 'redundant', text: 'Moving the bias by a random vector (RMS 1 per entry) changes the output by no more than the noise floor: within rounding, the bias does nothing, and it can be dropped or folded away.' },
      { id: 'partly_redundant', term: 'partly redundant', text: 'The random move changes the output beyond the noise floor, but a move inside the bias\'s redundant directions (the k of "k of n") stays below it: k directions do nothing, the other n − k matter.' },
      { id: 'effective', term: 'effective', text: 'The random move changes the output beyond the noise floor, and no move inside redundant directions was shown to stay below it: the bias matters.' },
      { id: 'undetermined', term: 'undetermined', text: 'A limit (4,096 inputs, or the compute budget per bias) stopped the structural analysis before its stop rule held. The row gives bounds, "min-max of n": at least min and at most max directions are redundant, because the rank found so far is only a lower bound on the true rank.' },
    ],
  },
  {
    title: 'Terms',
    entries: [
      { id: 'k_of_n', term: 'k of n (redundant dimension)', text: 'The bias has n entries; k is the dimension of its null space: the directions along which moving it leaves the output unchanged for every input. Computed as the nullity of the Jacobian of the output with respect to the bias, stacked over random inputs until a stop rule holds.' },
      { id: 'all_ones', term: 'all-ones', text: 'The direction (1, 1, …, 1): adding the same number to every entry of the bias. A LayerNorm, or anything else that subtracts each token\'s mean over features, removes exactly this direction.' },
      { id: 'wo_bv', term: 'W_O b_V along all-ones', text: 'A value bias b_V passes attention unchanged (each row of softmax weights sums to 1), so every token gains the same vector W_O b_V. Its part along all-ones cancels in the normalisation after it: one direction of b_V, the one W_O maps to all-ones, is redundant.' },
      { id: 'vs_floor', term: 'Δ vs floor', text: 'max |Δ out| divided by the noise floor. "below floor (0.3x)": the change is no larger than rounding can make it. "2.1e13x floor": that many times larger than rounding explains.' },
      { id: 'noise_floor', term: 'noise floor', text: 'How much rounding alone can change this comparison\'s output. The forward runs in the config\'s dtype and in the other precision; the rounding of each side comes from their difference (scaled by 2^-29 for float64), and the floor is 8 × (rounding of one side + rounding of the other). A change at or below it shows no effect.' },
      { id: 'fold', term: 'fold', text: 'A rewrite of the layer stack that removes parameters by absorbing them into a neighbour, e.g. a LayerNorm\'s gain and shift into the next Linear\'s weight and bias. Each fold is applied to a copy, run, and its output compared with the original\'s.' },
      { id: 'exact', term: 'exact', text: 'The rewritten stack\'s output differs from the original\'s by at most the noise floor: the rewrite changes nothing beyond rounding.' },
      { id: 'minimal_model', term: 'minimal model', text: 'The stack after applying exact folds and dropping redundant biases one after another, until none applies: fewer parameters, the same output to the noise floor. It can be loaded into the editor.' },
      { id: 'invariance', term: 'invariance', text: 'A transformation of one layer\'s actual input under which its output should not change (invariant) or should change the same way (equivariant), e.g. shifting each token by a constant before a LayerNorm. Checked against the noise floor.' },
      { id: 'stop_rule', term: 'stop rule', text: 'Why the structural analysis stopped stacking inputs: full_rank (the rank reached n), input_independent (nothing on the way treats tokens differently, so one input decides), no_gain (an input added no rank and nothing on the way is kinked), no_gain_kinked (after a ReLU: a long run of inputs added no rank and woke no new unit), budget (a limit ran out: undetermined).' },
    ],
  },
  {
    title: 'Columns',
    entries: [
      { id: 'bias', term: 'Bias', text: 'The bias as a PyTorch state-dict name: layers.0.body.1.k_proj.bias is the key projection\'s bias in the second layer of the first block\'s body.' },
      { id: 'verdict', term: 'Verdict', text: 'What perturbing the bias showed, checked against its structure: redundant, partly redundant, effective or undetermined (see Verdicts).' },
      { id: 'redundant_dim', term: 'Redundant (k of n)', text: 'How many of the bias\'s n directions change nothing (see k of n). Hover a value for the stop rule that settled it; an undetermined row shows bounds, min-max of n.' },
      { id: 'directions', term: 'Directions', text: 'Which directions are redundant, in words: all, none, all-ones, constant within each group, W_O b_V along all-ones, or a count found numerically.' },
      { id: 'bias_delta', term: 'max |Δ out| (Biases)', text: 'The largest change of any output entry when the bias moves by a random vector with RMS 1 per entry.' },
      { id: 'why', term: 'Why', text: 'The reason from the layer rules: which operation after the bias cancels it, or why nothing does; and notes when the measurement and the structure disagree.' },
      { id: 'absorbed_by', term: 'Absorbed by', text: 'The parameter a fold moves this bias into, or the folds that drop it; — when none applies.' },
      { id: 'rule', term: 'Rule', text: 'The fold rule\'s name and its identifier in the engine (cpp/core/folds.cpp).' },
      { id: 'formula', term: 'Formula', text: 'What the fold rewrites, as the identity it relies on.' },
      { id: 'where', term: 'Where', text: 'The layers the rule rewrites, by their state-dict names.' },
      { id: 'params_removed', term: 'Params removed', text: 'How many parameters the rewrite removes.' },
      { id: 'fold_delta', term: 'max |Δ out| (Folds)', text: 'The largest change of any output entry between the original stack and the rewritten one, on the same input.' },
      { id: 'step', term: 'Step', text: 'The order in which the minimal model applies its folds.' },
      { id: 'fold_applied', term: 'Fold applied', text: 'The identifier of the fold rule used at this step.' },
      { id: 'probe', term: 'Probe', text: 'The kind of layer checked and the transformation applied to its input.' },
      { id: 'layer', term: 'Layer', text: 'The layer whose input is transformed, by its state-dict name.' },
      { id: 'transform', term: 'Transform', text: 'The transformation, written on the layer\'s input x (P a permutation of tokens, c a constant, s a scale).' },
      { id: 'expected', term: 'Expected', text: 'What theory predicts for this layer: invariant (output unchanged), equivariant (output transformed the same way) or changes.' },
      { id: 'holds', term: 'Holds', text: 'Whether the output was unchanged (or equivariant) to the noise floor.' },
      { id: 'agrees', term: 'As expected', text: 'Whether the measurement matches the prediction.' },
      { id: 'invariance_delta', term: 'max |Δ| (Invariances)', text: 'The largest difference between the output for the transformed input and the output the invariance predicts.' },
      { id: 'note', term: 'Note', text: 'Why the probe turned out as it did, when that needs saying.' },
    ],
  },
];

/** id -> entry */
export const TERMS = Object.fromEntries(GLOSSARY.flatMap((s) => s.entries).map((e) => [e.id, e]));

// The term each table column explains (shared where the meaning is the same).
const COLUMN_TERMS = {
  biases: { param: 'bias', verdict: 'verdict', redundant: 'redundant_dim', directions: 'directions', max_abs_delta: 'bias_delta', noise_floor: 'noise_floor', vs_floor: 'vs_floor', why: 'why', absorbed_by: 'absorbed_by' },
  folds: { rule: 'rule', formula: 'formula', where: 'where', params_removed: 'params_removed', max_abs_delta: 'fold_delta', noise_floor: 'noise_floor', exact: 'exact' },
  minimal: { step: 'step', rule: 'fold_applied', where: 'where', params_removed: 'params_removed' },
  invariances: { probe: 'probe', layer: 'layer', transform: 'transform', expected: 'expected', holds: 'holds', agrees: 'agrees', max_abs_delta: 'invariance_delta', noise_floor: 'noise_floor', note: 'note' },
};

/** @returns {string | null} the glossary id for a column of a table */
export const column_term = (table_id, key) => COLUMN_TERMS[table_id]?.[key] ?? null;

const def_id = (id) => `g-${id}-def`;

/**
 * A link to a glossary entry around `content`; its text shows as a tooltip on hover and focus.
 * @param {string} id @param {any} content @param {string} [detail] a sentence about this instance, added to the tooltip
 */
export function term(id, content, detail = null) {
  return h('a', { class: 'term', href: `#g-${id}`, dataset: detail ? { term: id, detail } : { term: id }, 'aria-describedby': def_id(id) }, content);
}

/** The glossary section (a closed <details>, opened when a term link is followed). */
export function render_glossary(root) {
  clear(
    root,
    h(
      'details',
      { id: 'glossary-details' },
      h('summary', {}, h('h2', {}, 'Glossary')),
      GLOSSARY.map((s) =>
        h('div', { class: 'glossary-group' }, h('h3', {}, s.title), h('dl', {}, s.entries.map((e) => [h('dt', { id: `g-${e.id}`, tabindex: '-1' }, e.term), h('dd', { id: def_id(e.id) }, e.text)]))),
      ),
    ),
  );
}

/** Opens the glossary at an entry (a term link must not change the URL's fragment: it holds the
 * experiment). */
export function show_entry(id) {
  const details = document.getElementById('glossary-details');
  const dt = document.getElementById(`g-${id}`) ?? details;
  if (!details || !dt) return;
  details.open = true;
  dt.scrollIntoView({ block: 'center' });
  dt.focus({ preventScroll: true });
}

/** One tooltip for every term link: shown on hover and keyboard focus, hidden on leave, blur
 * and Escape. Placed below (or above) the link, inside the viewport. */
export function wire_term_tips() {
  const tip = h('div', { id: 'term-tip', class: 'term-tip', role: 'tooltip', hidden: true });
  document.body.append(tip);
  let current = null;
  const show = (el) => {
    const entry = TERMS[el.dataset.term];
    if (!entry) return;
    current = el;
    clear(tip, h('strong', {}, entry.term), ': ', entry.text, el.dataset.detail ? h('span', { class: 'term-tip-detail' }, el.dataset.detail) : null);
    tip.hidden = false;
    place(el);
  };
  // Measured only on hover, focus or scroll while a tooltip shows, never during a render.
  const place = (el) => {
    const r = el.getBoundingClientRect();
    const t = tip.getBoundingClientRect();
    const x = Math.max(8, Math.min(r.left, innerWidth - t.width - 8));
    const below = r.bottom + 6 + t.height <= innerHeight;
    tip.style.left = `${x}px`;
    tip.style.top = `${below ? r.bottom + 6 : Math.max(8, r.top - 6 - t.height)}px`;
  };
  const hide = (el) => {
    if (el && el !== current) return;
    current = null;
    tip.hidden = true;
  };
  document.addEventListener('pointerover', (e) => {
    const el = e.target.closest?.('.term');
    if (el) show(el);
  });
  document.addEventListener('pointerout', (e) => {
    const el = e.target.closest?.('.term');
    if (el && !el.contains(e.relatedTarget)) hide(el);
  });
  document.addEventListener('focusin', (e) => {
    if (e.target.matches?.('.term')) show(e.target);
  });
  document.addEventListener('focusout', (e) => {
    if (e.target.matches?.('.term')) hide(e.target);
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') hide();
  });
  document.addEventListener('click', (e) => {
    const el = e.target.closest?.('a.term, a[href="#glossary"]');
    if (!el) return;
    e.preventDefault();
    hide();
    show_entry(el.dataset.term);
  });
  // Scrolling (the page, or a table brought into view under the pointer) moves the tooltip along.
  addEventListener('scroll', () => current && place(current), { passive: true, capture: true });
}
