// The page's vocabulary, written once: the glossary section lists these entries, and every
// column header and verdict badge links to one of them and shows its text as a tooltip (on
// hover and on keyboard focus). The texts follow README.md, "How the answers are computed";
// they live in glossary-text.js, fetched on demand (first tooltip, first opening, or at idle
// after the first tables), which keeps them out of the first load.
import { h, clear } from './dom.js';

/** id -> entry, once the texts are loaded */
let TERMS = null;
let loading = null;
/** Loads the texts (once) and fills the glossary section. @returns {Promise<void>} */
export function load_glossary() {
  loading ??= import('./glossary-text.js').then(({ GLOSSARY }) => {
    TERMS = Object.fromEntries(GLOSSARY.flatMap((s) => s.entries).map((e) => [e.id, e]));
    const body = document.getElementById('glossary-entries');
    if (body)
      body.replaceChildren(
        ...GLOSSARY.map((s) =>
          h('div', { class: 'glossary-group' }, h('h3', {}, s.title), h('dl', {}, s.entries.map((e) => [h('dt', { id: `g-${e.id}`, tabindex: '-1' }, e.term), h('dd', { id: def_id(e.id) }, e.text)]))),
        ),
      );
  });
  return loading;
}

/** Fetches the texts when the browser is idle (after the first results are drawn). */
export function prefetch_glossary() {
  if (loading) return;
  if ('requestIdleCallback' in window) requestIdleCallback(() => load_glossary(), { timeout: 3000 });
  else setTimeout(load_glossary, 200);
}

// The term each table column explains (shared where the meaning is the same).
const COLUMN_TERMS = {
  biases: { param: 'bias', verdict: 'verdict', redundant: 'redundant_dim', directions: 'directions', max_abs_delta: 'bias_delta', mean_abs_delta: 'bias_mean_delta', noise_floor: 'noise_floor', vs_floor: 'vs_floor', why: 'why', absorbed_by: 'absorbed_by' },
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

/** The glossary section (a closed <details>, opened when a term link is followed); its entries
 * arrive with the texts (load_glossary), at the latest when it is opened. */
export function render_glossary(root) {
  const details = h('details', { id: 'glossary-details' }, h('summary', {}, h('h2', {}, 'Glossary')), h('div', { id: 'glossary-entries' }, h('p', { class: 'muted' }, 'Loading…')));
  details.addEventListener('toggle', () => details.open && load_glossary());
  clear(root, details);
}

/** Opens the glossary at an entry (a term link must not change the URL's fragment: it holds the
 * experiment). */
export async function show_entry(id) {
  await load_glossary();
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
    current = el;
    if (!TERMS) {
      load_glossary().then(() => current === el && show(el));
      return;
    }
    const entry = TERMS[el.dataset.term];
    if (!entry) return;
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
