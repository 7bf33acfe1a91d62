// The perturbation sweep on log-log axes: one line per bias (max |Δ output| against the size of
// a random perturbation), the noise floor dashed. Lines differ in dash pattern as well as colour,
// so the plot reads without colour; the legend names every line and shows its pattern.
//
// Drawn on a canvas by hand: a static log-log line plot is about 200 lines, and a charting
// library was half of the page's JavaScript (uPlot: 23 KB gzip).
import { h } from './dom.js';

// Okabe-Ito-like colours, readable on light and dark backgrounds.
const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#A6761D', '#8E8E8E'];
const DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3]];
const FONT = '12px system-ui, sans-serif';
const TITLE_FONT = 'bold 12px system-ui, sans-serif';
const X_TITLE = 'perturbation size (RMS per entry)';
const Y_TITLE = 'max |Δ output|';

const positive = (v) => (typeof v === 'number' && v > 0 && Number.isFinite(v) ? v : null);

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/**
 * The lines of a report's sweep: x values, then one entry per line with its style.
 * @returns {{sizes: number[], lines: {label: string, values: (number|null)[], colour: string, dash: number[], points: number}[]} | null}
 */
export function sweep_lines(report) {
  const sweep = report.sweep;
  if (!sweep || !sweep.series?.length) return null;
  const lines = [];
  sweep.series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    // colour and dash pattern together stay distinct for the first 32 biases
    const dash = DASHES[(i + Math.floor(i / COLOURS.length)) % DASHES.length];
    lines.push({ label: s.param, values: s.delta.map(positive), colour, dash, points: 2.5 });
    if (s.delta_redundant)
      lines.push({ label: `${s.param} (redundant part)`, values: s.delta_redundant.map(positive), colour, dash: [1, 4], points: 2 });
  });
  // One floor line: the largest floor over all biases at each size (they differ only by rounding).
  const floor = sweep.sizes.map((_, j) => {
    let m = null;
    for (const s of sweep.series) {
      const f = positive(s.noise_floor?.[j]);
      if (f !== null && (m === null || f > m)) m = f;
    }
    return m;
  });
  lines.push({ label: 'noise floor', values: floor, colour: 'FLOOR', dash: [5, 5], points: 0 });
  return { sizes: sweep.sizes.map(positive), lines };
}

/** Whole decades from lo to hi (exponents), every k-th so that labels stay `spacing` px apart. */
export function decade_ticks(lo, hi, px, spacing) {
  const k = Math.max(1, Math.ceil((hi - lo + 1) / Math.max(1, px / spacing)));
  const out = [];
  for (let e = Math.ceil(lo - 1e-9); e <= Math.floor(hi + 1e-9); e++) if (e % k === 0) out.push(e);
  return out;
}

function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (v !== null) {
    const l = Math.log10(v);
    if (l < lo) lo = l;
    if (l > hi) hi = l;
  }
  return lo <= hi ? [lo, hi] : [0, 1];
}

/** Draws the plot into a 2D context of css size w x h. */
function draw(g, spec, w, h_, colours) {
  const m = { left: 62, right: 14, top: 10, bottom: 46 };
  const pw = w - m.left - m.right, ph = h_ - m.top - m.bottom;
  let [x0, x1] = extent(spec.sizes);
  if (x1 - x0 < 1e-9) [x0, x1] = [x0 - 0.5, x1 + 0.5];
  let [y0, y1] = extent(spec.lines.flatMap((l) => l.values));
  // y spans whole decades, so the top and bottom grid lines frame the data
  [y0, y1] = [Math.floor(y0), Math.max(Math.ceil(y1), Math.floor(y0) + 1)];
  const X = (v) => m.left + ((Math.log10(v) - x0) / (x1 - x0)) * pw;
  const Y = (v) => m.top + (1 - (Math.log10(v) - y0) / (y1 - y0)) * ph;

  g.clearRect(0, 0, w, h_);
  g.font = FONT;
  g.lineWidth = 1;
  g.strokeStyle = colours.grid;
  g.fillStyle = colours.fg;
  // grid and tick labels
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (const e of decade_ticks(x0, x1, pw, 56)) {
    const x = Math.round(X(10 ** e)) + 0.5;
    g.beginPath();
    g.moveTo(x, m.top);
    g.lineTo(x, m.top + ph + 4);
    g.stroke();
    g.fillText(`1e${e}`, x, m.top + ph + 7);
  }
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (const e of decade_ticks(y0, y1, ph, 30)) {
    const y = Math.round(Y(10 ** e)) + 0.5;
    g.beginPath();
    g.moveTo(m.left - 4, y);
    g.lineTo(m.left + pw, y);
    g.stroke();
    g.fillText(`1e${e}`, m.left - 7, y);
  }
  // axis titles
  g.font = TITLE_FONT;
  g.textAlign = 'center';
  g.textBaseline = 'bottom';
  g.fillText(X_TITLE, m.left + pw / 2, h_ - 4);
  g.save();
  g.translate(12, m.top + ph / 2);
  g.rotate(-Math.PI / 2);
  g.textBaseline = 'middle';
  g.fillText(Y_TITLE, 0, 0);
  g.restore();
  // lines, then their points; a missing value breaks the line
  g.save();
  g.beginPath();
  g.rect(m.left - 4, m.top - 4, pw + 8, ph + 8);
  g.clip();
  g.lineWidth = 2;
  g.lineJoin = 'round';
  for (const line of spec.lines) {
    const colour = line.colour === 'FLOOR' ? colours.muted : line.colour;
    g.strokeStyle = colour;
    g.fillStyle = colour;
    g.setLineDash(line.dash);
    g.beginPath();
    let open = false;
    line.values.forEach((v, j) => {
      const s = spec.sizes[j];
      if (v === null || s === null) return void (open = false);
      if (open) g.lineTo(X(s), Y(v));
      else g.moveTo(X(s), Y(v));
      open = true;
    });
    g.stroke();
    g.setLineDash([]);
    if (line.points)
      line.values.forEach((v, j) => {
        if (v === null || spec.sizes[j] === null) return;
        g.beginPath();
        g.arc(X(spec.sizes[j]), Y(v), line.points, 0, 2 * Math.PI);
        g.fill();
      });
  }
  g.restore();
}

/** A legend swatch: the line's colour and dash pattern. */
function swatch(line, colours) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', '28');
  svg.setAttribute('height', '10');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(ns, 'line');
  for (const [k, v] of Object.entries({ x1: 1, y1: 5, x2: 27, y2: 5, 'stroke-width': 2, stroke: line.colour === 'FLOOR' ? colours.muted : line.colour }))
    path.setAttribute(k, String(v));
  if (line.dash.length) path.setAttribute('stroke-dasharray', line.dash.join(' '));
  svg.append(path);
  return svg;
}

/**
 * @param {HTMLElement} root
 * @param {object} report
 * @returns {{destroy(): void, png(): Promise<Blob>} | null}
 */
export function render_sweep(root, report) {
  const spec = sweep_lines(report);
  if (!spec) return null;
  const colours = { fg: css('--fg'), grid: css('--grid'), muted: css('--muted'), bg: css('--bg') };
  const canvas = h('canvas', { class: 'plot-canvas' });
  const legend = h(
    'ul',
    { class: 'plot-legend' },
    spec.lines.map((line) => h('li', {}, swatch(line, colours), h('span', {}, line.label))),
  );
  root.append(canvas, legend);
  const size = { w: 0, h: 0 };
  const redraw = () => {
    const w = Math.max(280, root.clientWidth || 600);
    const h_ = root.clientWidth < 500 ? 260 : 340;
    if (Math.abs(w - size.w) <= 2 && h_ === size.h) return;
    Object.assign(size, { w, h: h_ });
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h_ * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h_}px`;
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    draw(g, spec, w, h_, colours);
  };
  redraw();
  const ro = new ResizeObserver(redraw);
  ro.observe(root);
  return {
    destroy() {
      ro.disconnect();
      canvas.remove();
      legend.remove();
    },
    png: () => plot_png(canvas, size, spec, colours, report),
  };
}

/** The plot with a title above and the legend drawn underneath. */
function plot_png(src, size, spec, colours, report) {
  const dpr = src.width / size.w || 1;
  const line = 18, pad = 12;
  const cols = Math.max(1, Math.floor(size.w / 300));
  const rows = Math.ceil(spec.lines.length / cols);
  const title = 'biaslab: perturbation sweep';
  const sub = report.config ? `${report.config.dtype}, batch ${report.config.shape?.batch}, tokens ${report.config.shape?.tokens}, features ${report.config.shape?.features}, seed ${report.config.seed}` : '';
  const head = 2 * line + pad;
  const c = document.createElement('canvas');
  c.width = src.width;
  c.height = src.height + (head + rows * line + 2 * pad) * dpr;
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.fillStyle = colours.bg;
  g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = colours.fg;
  g.font = 'bold 14px system-ui, sans-serif';
  g.fillText(title, pad, pad + 12);
  g.font = FONT;
  g.fillText(sub, pad, pad + 12 + line);
  g.drawImage(src, 0, head, size.w, size.h);
  const colw = size.w / cols;
  spec.lines.forEach((s, i) => {
    const x = pad + (i % cols) * colw, y = head + size.h + pad + Math.floor(i / cols) * line + 8;
    g.strokeStyle = s.colour === 'FLOOR' ? colours.muted : s.colour;
    g.lineWidth = 2;
    g.setLineDash(s.dash);
    g.beginPath();
    g.moveTo(x, y);
    g.lineTo(x + 28, y);
    g.stroke();
    g.setLineDash([]);
    g.fillStyle = colours.fg;
    g.fillText(s.label, x + 36, y + 4);
  });
  return new Promise((resolve) => c.toBlob(resolve, 'image/png'));
}
