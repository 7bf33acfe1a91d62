// The perturbation sweep on log-log axes: one line per bias (max |Δ output| against the size of
// a random perturbation), the noise floor dashed. Sixteen distinct colours, then dash patterns;
// the legend (ours, not uPlot's) draws each line's colour and dash, highlights a curve on hover,
// hides or shows it on click, and groups the moves inside the redundant directions in one entry.
import uPlot from 'uplot';

import { h, clear } from './dom.js';
import { is_undetermined } from './table-model.js';

// A qualitative palette of 16 hues that read on light and dark backgrounds (Okabe-Ito's first
// seven, then hues between them, avoiding the grey of the noise floor).
export const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#7B3FBF', '#C0392B', '#8C564B', '#B7950B', '#5E5CE6', '#E84393', '#6E8B3D', '#A04000', '#00A3A3', '#9B59B6'];
// When the colours run out, each further round of 16 curves gets the next dash pattern.
const DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3]];
const REDUNDANT_DASH = [1, 4];
const FLOOR_DASH = [5, 5];

const positive = (v) => (typeof v === 'number' && v > 0 ? v : null);

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/**
 * The uPlot data and series for a report's sweep (exported for tests). Each series carries
 * `group`: 'bias', 'redundant' (a move inside a bias's redundant directions) or 'floor'.
 */
export function sweep_series(report, { only = null } = {}) {
  const sweep = report.sweep;
  if (!sweep || !sweep.series?.length) return null;
  // `only`: one bias's curves, in the colour it has in the plot of all of them.
  const shown = sweep.series.filter((s) => only === null || s.param === only);
  if (!shown.length) return null;
  const data = [sweep.sizes.slice()];
  const series = [{ label: 'size' }];
  // An undetermined bias (a limit stopped its structural analysis) has no settled null space:
  // its legend says so, and a "redundant part" of it is only the null space found so far.
  const undetermined = new Set((report.biases ?? []).filter(is_undetermined).map((b) => b.param));
  sweep.series.forEach((s, i) => {
    if (!shown.includes(s)) return;
    const colour = COLOURS[i % COLOURS.length];
    const dash = DASHES[Math.floor(i / COLOURS.length) % DASHES.length];
    data.push(s.delta.map(positive));
    const open = undetermined.has(s.param);
    series.push({ label: open ? `${s.param} (undetermined)` : s.param, group: 'bias', param: s.param, stroke: colour, dash, width: 2, points: { show: true, size: 5, fill: colour } });
    if (s.delta_redundant) {
      data.push(s.delta_redundant.map(positive));
      series.push({ label: `${s.param} (${open ? 'null directions found so far' : 'redundant part'})`, group: 'redundant', param: s.param, stroke: colour, dash: REDUNDANT_DASH, width: 2, points: { show: true, size: 4, fill: colour } });
    }
  });
  // One floor line: the largest floor over all biases at each size (they differ only by rounding).
  const floor = sweep.sizes.map((_, j) => {
    let m = null;
    for (const s of shown) {
      const f = positive(s.noise_floor?.[j]);
      if (f !== null && (m === null || f > m)) m = f;
    }
    return m;
  });
  // No floor measured at any size (every change was more than a million times it): no line,
  // rather than a legend entry for a line that is not there.
  if (floor.some((f) => f !== null)) {
    data.push(floor);
    // A floor measured at one size only is a point: drawn as one (a line needs two).
    const isolated = floor.some((f, j) => f !== null && floor[j - 1] == null && floor[j + 1] == null);
    series.push({ label: 'noise floor', group: 'floor', stroke: 'FLOOR', dash: FLOOR_DASH, width: 2, points: { show: isolated, size: 6 } });
  }
  return { data, series, floor: floor.some((f) => f !== null) };
}

// Ticks, grid lines and labels at whole decades only, thinned to every k-th decade so that
// labels stay about `spacing` px apart (uPlot's default log splits also draw 2..9 x 10^e).
function decade_splits(px, spacing) {
  return (u, axis_index, min, max) => {
    const lo = Math.ceil(Math.log10(min) - 1e-9), hi = Math.floor(Math.log10(max) + 1e-9);
    const k = Math.max(1, Math.ceil((hi - lo + 1) / Math.max(1, px(u) / spacing)));
    const out = [];
    for (let e = lo; e <= hi; e++) if (e % k === 0) out.push(10 ** e);
    return out;
  };
}
const decade_values = (u, splits) => splits.map((v) => (v == null ? "" : `1e${Math.round(Math.log10(v))}`));

/** A short line in the series' colour and dash, as the legend's swatch; several colours (a
 * group's curves, up to four) share the line in equal parts. */
function swatch(strokes, dash) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('class', 'swatch');
  svg.setAttribute('width', '30');
  svg.setAttribute('height', '10');
  svg.setAttribute('aria-hidden', 'true');
  const list = strokes.slice(0, 4);
  const step = 28 / list.length;
  list.forEach((stroke, k) => {
    const line = document.createElementNS(NS, 'line');
    for (const [a, v] of Object.entries({ x1: 1 + k * step, y1: 5, x2: 1 + (k + 1) * step, y2: 5, stroke, 'stroke-width': 2, 'stroke-dasharray': dash.length ? dash.join(' ') : 'none' })) line.setAttribute(a, String(v));
    svg.append(line);
  });
  return svg;
}

/**
 * The plot in `root` (a canvas holder and the legend). uPlot is created from the first
 * ResizeObserver callback, which reports the width after the browser's own layout: reading
 * clientWidth here forced a layout in the middle of the first render (818 ms in one profile).
 * @param {HTMLElement} root
 * @param {object} report
 * @param {{only?: string}} [options] only: the curves of one bias (a row's detail panel)
 * @returns {{destroy(): void, png(): Promise<Blob|null>} | null}
 */
export function render_sweep(root, report, { only = null } = {}) {
  const spec = sweep_series(report, { only });
  if (!spec) return null;
  const fg = css('--fg'), grid = css('--grid'), muted = css('--muted');
  const series = spec.series.map((s) => (s.stroke === 'FLOOR' ? { ...s, stroke: muted, points: { ...s.points, fill: muted } } : s));
  const canvas_box = h('div', { class: 'plot-canvas', role: 'img', 'aria-label': 'Log-log plot of max |Δ output| against perturbation size, one line per bias, with the noise floor' });
  const legend = h('ul', { class: 'sweep-legend', 'aria-label': 'Curves (a button hides or shows its curve)' });
  clear(root, canvas_box, legend, spec.floor ? null : h('p', { class: 'caption' }, 'No noise floor is drawn: at every size the change is more than a million times the floor, where it is not measured.'), only ? null : h('p', { class: 'caption sweep-hint' }, 'Click a legend entry to hide or show its curves (again to bring them back); hover over one, or near a curve in the plot, to highlight it. Dotted lines move each bias only inside its redundant directions.'));

  // uPlot series index -> legend entry; the group entry covers every redundant-part series.
  const entries = new Map();
  let u = null;
  const redundant = series.map((s, i) => (s.group === 'redundant' ? i : -1)).filter((i) => i > 0);
  // A selected bias (picked in the stack picture) stays highlighted when the pointer leaves.
  let selected = null;
  const set_alpha = (hover) => {
    const keep = hover ?? selected;
    for (const [i, el] of entries) el.classList.toggle('focused', Boolean(keep?.includes(i)));
    if (!u) return;
    u.series.forEach((s, i) => i > 0 && (s.alpha = !keep || keep.includes(i) ? 1 : 0.2));
    u.redraw(false, false);
  };
  const toggle = (indices, button) => {
    if (!u) return;
    const show = !u.series[indices[0]].show;
    for (const i of indices) u.setSeries(i, { show });
    button.setAttribute('aria-pressed', String(show));
  };
  const entry = (indices, dash, label, extra_class = '') => {
    const button = h('button', { type: 'button', class: `legend-entry ${extra_class}`, 'aria-pressed': 'true', dataset: { series: indices.join(' ') } }, swatch([...new Set(indices.map((i) => series[i].stroke))], dash), h('span', { class: 'legend-label' }, label));
    button.addEventListener('click', () => toggle(indices, button));
    button.addEventListener('pointerenter', () => set_alpha(indices));
    button.addEventListener('pointerleave', () => set_alpha(null));
    button.addEventListener('focus', () => set_alpha(indices));
    button.addEventListener('blur', () => set_alpha(null));
    for (const i of indices) entries.set(i, button);
    return h('li', {}, button);
  };
  series.forEach((s, i) => s.group === 'bias' && legend.append(entry([i], s.dash, s.label)));
  if (redundant.length)
    legend.append(entry(redundant, REDUNDANT_DASH, `inside the redundant directions (${redundant.length} dotted curve${redundant.length === 1 ? '' : 's'}, each in its bias's colour)`, 'legend-group'));
  series.forEach((s, i) => s.group === 'floor' && legend.append(entry([i], s.dash, s.label, 'legend-floor')));

  const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, filter: (u, splits) => splits };
  const make = (width) => {
    const opts = {
      width,
      height: only ? 220 : width < 500 ? 260 : 340,
      scales: { x: { time: false, distr: 3, log: 10 }, y: { distr: 3, log: 10 } },
      axes: [
        { ...axis, label: 'perturbation size (RMS per entry)', labelSize: 26, splits: decade_splits((u) => u.width - 80, 56), values: decade_values },
        { ...axis, label: 'max |Δ output|', labelSize: 30, size: 56, splits: decade_splits((u) => u.height - 70, 30), values: decade_values },
      ],
      series: series.map(({ group, param, ...s }) => s),
      legend: { show: false },
      focus: { alpha: 0.2 },
      cursor: { points: { size: 6 }, focus: { prox: 16 } },
      hooks: {
        // Hovering near a curve in the plot highlights its legend entry too.
        setSeries: [(u, i) => { for (const [j, el] of entries) el.classList.toggle('focused', i !== null && j === i && u.series[i].show); }],
      },
    };
    u = new uPlot(opts, spec.data, canvas_box);
    canvas_box.uplot = u; // for tests and the console: the drawn series and their styles
  };
  const ro = new ResizeObserver(([e]) => {
    const w = Math.max(280, Math.floor(e.contentRect.width));
    if (!(e.contentRect.width > 0)) return; // not laid out (hidden): wait
    if (!u) {
      make(w);
      if (selected) set_alpha(null);
    } else if (Math.abs(w - u.width) > 2) u.setSize({ width: w, height: u.height });
  });
  ro.observe(root);
  return {
    destroy() {
      ro.disconnect();
      u?.destroy();
    },
    png: async () => (u ? plot_png(u, series, report) : null),
    /** Highlights one bias's curves (its own and its redundant part), or none. */
    select(param) {
      const mine = series.map((s, i) => (param && s.param === param ? i : -1)).filter((i) => i > 0);
      selected = mine.length ? mine : null;
      for (const [i, el] of entries) el.classList.toggle('selected', Boolean(selected?.includes(i)) && series[i].group === 'bias');
      set_alpha(null);
    },
  };
}

/** The plot canvas with a title and a drawn legend underneath (uPlot's legend is HTML). */
function plot_png(u, series, report) {
  const src = u.ctx.canvas;
  const dpr = src.width / u.width || 1;
  const line = 18, pad = 12;
  const entries = series.slice(1);
  const cols = Math.max(1, Math.floor(u.width / 300));
  const rows = Math.ceil(entries.length / cols);
  const title = 'biaslab: perturbation sweep';
  const sub = report.config ? `${report.config.dtype}, batch ${report.config.shape?.batch}, tokens ${report.config.shape?.tokens}, features ${report.config.shape?.features}, seed ${report.config.seed}` : '';
  const head = 2 * line + pad;
  const c = document.createElement('canvas');
  c.width = src.width;
  c.height = src.height + (head + rows * line + 2 * pad) * dpr;
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.fillStyle = css('--bg');
  g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = css('--fg');
  g.font = 'bold 14px system-ui, sans-serif';
  g.fillText(title, pad, pad + 12);
  g.font = '12px system-ui, sans-serif';
  g.fillText(sub, pad, pad + 12 + line);
  g.drawImage(src, 0, head, u.width, u.height);
  const colw = u.width / cols;
  entries.forEach((s, i) => {
    const x = pad + (i % cols) * colw, y = head + u.height + pad + Math.floor(i / cols) * line + 8;
    g.strokeStyle = s.stroke;
    g.lineWidth = 2;
    g.setLineDash(s.dash ?? []);
    g.beginPath();
    g.moveTo(x, y);
    g.lineTo(x + 28, y);
    g.stroke();
    g.setLineDash([]);
    g.fillStyle = css('--fg');
    g.fillText(s.label, x + 36, y + 4);
  });
  return new Promise((resolve) => c.toBlob(resolve, 'image/png'));
}
