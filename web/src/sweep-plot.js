// The perturbation sweep on log-log axes: one line per bias (max |Δ output| against the size of
// a random perturbation), the noise floor dashed. Lines differ in dash pattern as well as colour,
// so the plot reads without colour; the legend names every line.
import uPlot from 'uplot';

import { is_undetermined } from './table-model.js';

// Okabe-Ito-like colours, readable on light and dark backgrounds.
const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#A6761D', '#8E8E8E'];
const DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3]];

const positive = (v) => (typeof v === 'number' && v > 0 ? v : null);

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/** The uPlot data and series for a report's sweep (exported for tests). */
export function sweep_series(report) {
  const sweep = report.sweep;
  if (!sweep || !sweep.series?.length) return null;
  const data = [sweep.sizes.slice()];
  const series = [{ label: 'size' }];
  // An undetermined bias (a limit stopped its structural analysis) has no settled null space:
  // its legend says so, and a "redundant part" of it is only the null space found so far.
  const undetermined = new Set((report.biases ?? []).filter(is_undetermined).map((b) => b.param));
  sweep.series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    // colour and dash pattern together stay distinct for the first 32 biases
    const dash = DASHES[(i + Math.floor(i / COLOURS.length)) % DASHES.length];
    data.push(s.delta.map(positive));
    const open = undetermined.has(s.param);
    series.push({ label: open ? `${s.param} (undetermined)` : s.param, stroke: colour, dash, width: 2, points: { show: true, size: 5, fill: colour } });
    if (s.delta_redundant) {
      data.push(s.delta_redundant.map(positive));
      series.push({ label: `${s.param} (${open ? 'null directions found so far' : 'redundant part'})`, stroke: colour, dash: [1, 4], width: 2, points: { show: true, size: 4, fill: colour } });
    }
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
  data.push(floor);
  series.push({ label: 'noise floor', stroke: 'FLOOR', dash: [5, 5], width: 2, points: { show: false } });
  return { data, series };
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

/**
 * @param {HTMLElement} root
 * @param {object} report
 * @returns {{destroy(): void, png(): Promise<Blob>} | null}
 */
export function render_sweep(root, report) {
  const spec = sweep_series(report);
  if (!spec) return null;
  const fg = css('--fg'), grid = css('--grid'), muted = css('--muted');
  const series = spec.series.map((s) => (s.stroke === 'FLOOR' ? { ...s, stroke: muted } : s));
  // filter: keep every split (uPlot's log filter would blank labels our splits already thinned).
  const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, filter: (u, splits) => splits };
  const width = () => Math.max(280, root.clientWidth || 600);
  const opts = {
    width: width(),
    height: root.clientWidth < 500 ? 260 : 340,
    scales: { x: { time: false, distr: 3, log: 10 }, y: { distr: 3, log: 10 } },
    axes: [
      { ...axis, label: 'perturbation size (RMS per entry)', labelSize: 26, splits: decade_splits((u) => u.width - 80, 56), values: decade_values },
      { ...axis, label: 'max |Δ output|', labelSize: 30, size: 56, splits: decade_splits((u) => u.height - 70, 30), values: decade_values },
    ],
    series,
    legend: { show: true, live: false },
    cursor: { points: { size: 6 } },
  };
  const u = new uPlot(opts, spec.data, root);
  const ro = new ResizeObserver(() => {
    const w = width();
    if (Math.abs(w - u.width) > 2) u.setSize({ width: w, height: u.height });
  });
  ro.observe(root);
  return {
    destroy() {
      ro.disconnect();
      u.destroy();
    },
    png: () => plot_png(u, series, report),
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
