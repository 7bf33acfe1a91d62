// A picture of the stack: layers top to bottom as the data flows, each a block with its shape
// (tokens x features in -> out); residual blocks as a branch beside their skip; every parameter
// a chip coloured by its verdict (the bias table's colours, marks and words; weights and gains,
// which have no verdict, neutral); folds as arrows from a parameter into the one that absorbs
// it. Plain DOM that wraps at any width, and one SVG layer for the arrows, drawn from a
// ResizeObserver callback (after the browser's layout: the render itself reads none).
import { h } from './dom.js';
import { stack_model, parameter_facts } from './stack-model.js';
import { VERDICT_TEXT, VERDICT_MARK, is_undetermined, redundant_dims } from './table-model.js';
const ROLE_TEXT = { weight: 'weight', bias: 'bias', gain: 'gain (scale)', shift: 'shift' };
const SVG = 'http://www.w3.org/2000/svg';

const verdict_of = (row) => (row ? (is_undetermined(row) ? 'undetermined' : row.verdict) : null);
// On an image grid the tokens are its positions: (H × W) × features.
const shape_text = (tokens, w, grid = null) => `${grid ? `(${grid[0]} × ${grid[1]})` : tokens} × ${w}`;

/**
 * @param {object} report
 * @param {{schema: object, on_select?: (param: string) => void}} options on_select: a bias chip was clicked
 * @returns {{section: HTMLElement, select(param: string | null): void, destroy(): void}}
 */
export function render_stack(report, { schema, on_select = () => {} }) {
  const model = stack_model(schema, report.config, report);
  const facts = parameter_facts(report);
  const chips = new Map(); // parameter name -> chip element
  const info = h('p', { class: 'stack-info', 'aria-live': 'polite' });

  const chip = (p) => {
    const f = facts.get(p.name) ?? { into: [], dropped: [], centred: [] };
    const v = verdict_of(f.row);
    const said = [
      p.name,
      v ? `${VERDICT_TEXT[v]} (${redundant_dims(f.row)} of ${f.row.size} directions redundant)` : p.created ? 'not in the model: a fold creates it' : `${ROLE_TEXT[p.role] ?? p.role}, no verdict (only biases are analysed)`,
      ...f.into.map((m) => `folds into ${m.to} (${m.fold.title})`),
      ...f.dropped.map((fold) => `dropped: ${fold.title}`),
      ...f.centred.map((fold) => `partly removed in place: ${fold.title}`),
    ].join('; ');
    const cls = ['stack-chip', `role-${p.role}`, v ? `badge verdict-${v}` : 'verdict-none', f.dropped.length ? 'dropped' : '', f.centred.length ? 'centred' : '', p.created ? 'created' : ''].filter(Boolean).join(' ');
    const body = [
      v ? h('span', { class: 'stack-mark', 'aria-hidden': 'true' }, VERDICT_MARK[v]) : null,
      h('span', { class: 'stack-local' }, p.local),
      f.dropped.length ? h('span', { class: 'stack-flag', 'aria-hidden': 'true' }, '✕') : null,
      f.centred.length ? h('span', { class: 'stack-flag', 'aria-hidden': 'true' }, '−part') : null,
    ];
    const el = f.row
      ? h('button', { type: 'button', class: cls, title: said, 'aria-label': said, 'aria-pressed': 'false', dataset: { param: p.name, verdict: v } }, body)
      : h('span', { class: cls, title: said, role: 'img', 'aria-label': said, dataset: { param: p.name } }, body);
    chips.set(p.name, el);
    return el;
  };

  const layer = (l) => {
    const own = l.shape.in === l.shape.out ? shape_text(model.tokens, l.shape.in, model.grid) : `${shape_text(model.tokens, l.shape.in, model.grid)} → ${shape_text(model.tokens, l.shape.out, model.grid)}`;
    const shape = l.context ? `${own}, keys and values from the context ${shape_text(l.context, model.features)}` : own;
    const head = h(
      'div',
      { class: 'stack-head', title: l.help },
      h('span', { class: 'stack-index', 'aria-hidden': 'true' }, String(l.index)),
      h('span', { class: 'stack-type' }, l.type),
      h('span', { class: 'stack-shape', title: 'tokens × features, in → out' }, shape),
    );
    const params = l.params.length ? h('div', { class: 'stack-params' }, l.params.map(chip)) : null;
    if (l.branches)
      return h(
        'li',
        { class: 'stack-layer stack-residual stack-parallel', dataset: { layer: l.name }, 'aria-label': `${l.name}: ${l.type}, ${shape}: x + the sum of its branches` },
        head,
        params,
        h(
          'div',
          { class: 'stack-branch' },
          h('div', { class: 'stack-skip', title: 'the skip connection carries x past the branches' }, h('span', {}, 'skip')),
          h('div', { class: 'stack-branches' }, l.branches.map((b, i) => h('ol', { class: 'stack-list stack-body', 'aria-label': `${l.name}.branches.${i}` }, b.map(layer)))),
        ),
        h('div', { class: 'stack-join', 'aria-hidden': 'true' }, `⊕ x + ${l.branches.map((_, i) => `branch ${i}(x)`).join(' + ')}`),
      );
    if (!l.body) return h('li', { class: 'stack-layer', dataset: { layer: l.name }, 'aria-label': `${l.name}: ${l.type}, ${shape}` }, head, params);
    return h(
      'li',
      { class: 'stack-layer stack-residual', dataset: { layer: l.name }, 'aria-label': `${l.name}: ${l.type}, ${shape}: x + body(x)` },
      head,
      params,
      h('div', { class: 'stack-branch' }, h('div', { class: 'stack-skip', title: 'the skip connection carries x past the body' }, h('span', {}, 'skip')), h('ol', { class: 'stack-list stack-body', 'aria-label': `${l.name}.body` }, l.body.map(layer))),
      h('div', { class: 'stack-join', 'aria-hidden': 'true' }, '⊕ x + body(x)'),
    );
  };

  const arrows = document.createElementNS(SVG, 'svg');
  arrows.setAttribute('class', 'stack-arrows');
  arrows.setAttribute('aria-hidden', 'true');
  const picture = h(
    'div',
    { class: 'stack-picture' },
    h('p', { class: 'stack-io' }, `input: batch ${model.batch} × ${shape_text(model.tokens, model.features, model.grid)}${model.context ? `; context: batch ${model.batch} × ${shape_text(model.context, model.features)} (each input draws its own)` : ''}`),
    h('ol', { class: 'stack-list', 'aria-label': 'Layers, input to output' }, model.layers.map(layer)),
    h('p', { class: 'stack-io' }, `output: ${shape_text(model.tokens, model.out, model.grid)}`),
    arrows,
  );
  const moves = [...facts].flatMap(([from, f]) => f.into.map((m) => ({ from, to: m.to, exact: m.fold.exact !== false })));
  const legend = h(
    'ul',
    { class: 'stack-legend', 'aria-label': 'Legend' },
    ['redundant', 'partly_redundant', 'effective', 'undetermined'].map((v) => h('li', {}, h('span', { class: `stack-chip badge verdict-${v}` }, h('span', { 'aria-hidden': 'true' }, VERDICT_MARK[v]), ' ', VERDICT_TEXT[v]))),
    h('li', {}, h('span', { class: 'stack-chip verdict-none' }, 'weight, gain: no verdict')),
    moves.length ? h('li', {}, h('span', { class: 'stack-legend-arrow', 'aria-hidden': 'true' }, '⟶'), ' a fold moves it into') : null,
    [...facts.values()].some((f) => f.dropped.length) ? h('li', {}, '✕ a fold drops it') : null,
    [...facts.values()].some((f) => f.centred.length) ? h('li', {}, '−part: a fold removes part of it in place (its mean, or what nothing reads)') : null,
  );
  const section = h(
    'section',
    { class: 'result-section', id: 'section-stack', 'aria-labelledby': 'stack-title' },
    h('div', { class: 'section-head' }, h('h2', { id: 'stack-title' }, 'The stack')),
    h('p', { class: 'caption' }, 'Each block is a layer with the shape of its activations (tokens × features); each chip is a parameter, coloured by its verdict. Click a bias for its row, its curve and its details.'),
    picture,
    legend,
    info,
  );

  let selected = null;
  const select = (param) => {
    if (selected) chips.get(selected)?.classList.remove('selected');
    for (const el of picture.querySelectorAll('button.stack-chip[aria-pressed="true"]')) el.setAttribute('aria-pressed', 'false');
    selected = param && chips.has(param) ? param : null;
    const el = selected && chips.get(selected);
    if (el) {
      el.classList.add('selected');
      if (el.matches('button')) el.setAttribute('aria-pressed', 'true');
    }
    info.textContent = el ? el.getAttribute('aria-label') : '';
    emphasise(selected);
  };
  // The arrows of the chip under the pointer, focused or selected stand out.
  const emphasise = (param) => {
    for (const p of arrows.querySelectorAll('path.stack-arrow')) p.classList.toggle('lit', Boolean(param) && (p.dataset.from === param || p.dataset.to === param));
  };
  const chip_at = (e) => e.target.closest?.('.stack-chip')?.dataset.param ?? null;
  picture.addEventListener('pointerover', (e) => emphasise(chip_at(e) ?? selected));
  picture.addEventListener('pointerleave', () => emphasise(selected));
  picture.addEventListener('focusin', (e) => emphasise(chip_at(e) ?? selected));
  picture.addEventListener('click', (e) => {
    const el = e.target.closest?.('button.stack-chip');
    if (!el) return;
    select(el.dataset.param);
    on_select(el.dataset.param);
  });

  // The arrows, from chip positions after layout; again whenever the picture's size changes.
  const draw = () => {
    const box = picture.getBoundingClientRect();
    if (!box.width) return;
    arrows.setAttribute('width', String(box.width));
    arrows.setAttribute('height', String(box.height));
    arrows.setAttribute('viewBox', `0 0 ${box.width} ${box.height}`);
    const defs = document.createElementNS(SVG, 'defs');
    const marker = document.createElementNS(SVG, 'marker');
    for (const [k, v] of Object.entries({ id: 'stack-arrowhead', viewBox: '0 0 8 8', refX: '7', refY: '4', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' })) marker.setAttribute(k, v);
    const tip = document.createElementNS(SVG, 'path');
    tip.setAttribute('d', 'M0,0 L8,4 L0,8 z');
    marker.append(tip);
    defs.append(marker);
    const paths = [];
    // From the source chip's edge facing the target to the target's facing edge, bending
    // through the gaps between rows; chips on one row get an arc above it.
    moves.forEach((m) => {
      const a = chips.get(m.from)?.getBoundingClientRect(), b = chips.get(m.to)?.getBoundingClientRect();
      if (!a?.width || !b?.width) return;
      const ax = a.left + a.width / 2 - box.left, bx = b.left + b.width / 2 - box.left;
      let d;
      if (Math.abs(a.top - b.top) < 4) {
        const y = a.top - box.top, lift = Math.min(18, 6 + Math.abs(bx - ax) / 12);
        d = `M${ax},${y} C${ax},${y - lift} ${bx},${y - lift} ${bx},${y - 1}`;
      } else {
        const down = b.top > a.top;
        const y1 = (down ? a.bottom : a.top) - box.top, y2 = (down ? b.top - 1 : b.bottom + 1) - box.top;
        const bend = Math.max(10, Math.abs(y2 - y1) / 2);
        d = `M${ax},${y1} C${ax},${y1 + (down ? bend : -bend)} ${bx},${y2 - (down ? bend : -bend)} ${bx},${y2}`;
      }
      const path = document.createElementNS(SVG, 'path');
      path.setAttribute('d', d);
      path.setAttribute('class', `stack-arrow${m.exact ? '' : ' inexact'}`);
      path.setAttribute('marker-end', 'url(#stack-arrowhead)');
      path.dataset.from = m.from;
      path.dataset.to = m.to;
      paths.push(path);
    });
    arrows.replaceChildren(defs, ...paths);
    emphasise(selected);
  };
  const ro = new ResizeObserver(draw);
  ro.observe(picture);
  return { section, select, destroy: () => ro.disconnect() };
}
