// Sizes of the built page as a static host would send them: raw, gzip (level 9, what
// precompressing hosts use; GitHub Pages compresses with gzip) and brotli (quality 11).
//
//   node bench/sizes.mjs [dist]          every file of web/dist, one Markdown row each
//
// Fonts are summed into one row (a browser fetches only the faces a page uses; the browser
// benchmark lists the ones it did fetch). `wasm + JS` is the budget: the engine, its
// loader and the page's scripts, compressed. The PyTorch export's module is listed apart: the
// page fetches it only when asked for an export.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, gzipSync, constants } from 'node:zlib';

export function compressed_sizes(bytes) {
  return {
    raw: bytes.length,
    gzip: gzipSync(bytes, { level: 9 }).length,
    brotli: brotliCompressSync(bytes, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length },
    }).length,
  };
}

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

export function kind(file) {
  // The PyTorch export's module: fetched when the user asks for an export, never on load.
  if (/biaslab-export[^/]*\.(wasm|js)$/.test(file)) return 'on demand';
  // The engine with the convolutions' arithmetic: fetched for the first config with a convolution.
  if (/biaslab-full[^/]*\.(wasm|js)$/.test(file)) return 'on demand';
  // A bias row's detail panel: fetched when a row is first opened.
  if (/bias-detail[^/]*\.js$/.test(file)) return 'on demand';
  // The glossary's texts: fetched on the first tooltip or opening, or at idle after the tables.
  if (/glossary-text[^/]*\.js$/.test(file)) return 'on demand';
  // The sweep plot (uPlot): fetched when a plot is first drawn (after the first result on the
  // full page; never by an embed without the sweep).
  if (/sweep-plot[^/]*\.js$/.test(file)) return 'on demand';
  // The stack picture: fetched when the first picture is drawn (after the first result). The
  // articles' claims panel: fetched once the engine has started.
  if (/stack-picture[^/]*\.js$/.test(file)) return 'on demand';
  if (/claims[^/]*\.js$/.test(file)) return 'on demand';
  // A split analysis's helper workers: fetched when the engine first splits an analysis.
  if (/engine-split[^/]*\.js$/.test(file)) return 'on demand';
  // A table as Markdown or CSV: fetched on the first download.
  if (/table-export[^/]*\.js$/.test(file)) return 'on demand';
  // The full engine's and the PyTorch export's page code: fetched on the first config with a
  // convolution, or the first export.
  if (/engine-modules[^/]*\.js$|torch-download[^/]*\.js$/.test(file)) return 'on demand';
  // What an embed (?embed=1) adds: fetched by embedded pages only.
  if (/\/embed-[^/]*\.js$|^embed-[^/]*\.js$/.test(file)) return 'on demand';
  // Every preset's sentence and config (the menu and the default experiment are in the page's
  // script): fetched once the engine has started, or when a preset is chosen before that.
  if (/_presets[^/]*\.js$/.test(file)) return 'on demand';
  // The fold rules' typeset formulas: fetched as the page starts; only the folds table shows them.
  if (/formulas[^/]*\.js$/.test(file)) return 'on demand';
  if (/\.wasm$/.test(file)) return 'wasm';
  if (/biaslab-[^/]*\.js$|\/biaslab\.js$/.test(file)) return 'loader';
  if (/\.m?js$/.test(file)) return 'js';
  if (/\.css$/.test(file)) return 'css';
  if (/\.(woff2?|ttf)$/.test(file)) return 'font';
  return 'other';
}

const kb = (n) => (n / 1024).toFixed(1);

/**
 * @param {{file: string, raw: number, gzip: number, brotli: number}[]} rows
 * @returns {string} a Markdown table with totals
 */
export function size_markdown(rows) {
  const sum = (list) => list.reduce((a, r) => ({ raw: a.raw + r.raw, gzip: a.gzip + r.gzip, brotli: a.brotli + r.brotli }), { raw: 0, gzip: 0, brotli: 0 });
  const line = (label, r) => `| ${label} | ${kb(r.raw)} | ${kb(r.gzip)} | ${kb(r.brotli)} |`;
  const fonts = rows.filter((r) => kind(r.file) === 'font');
  const others = rows.filter((r) => kind(r.file) !== 'font');
  const out = ['| file | raw KB | gzip KB | brotli KB |', '|---|---:|---:|---:|'];
  for (const r of others) out.push(line(`${r.file} (${kind(r.file)})`, r));
  if (fonts.length) out.push(line(`fonts: ${fonts.length} files`, sum(fonts)));
  out.push(line('**wasm + JS** (engine, loader, page scripts)', sum(rows.filter((r) => ['wasm', 'loader', 'js'].includes(kind(r.file))))));
  out.push(line('**total of a load** (all but the on-demand files)', sum(rows.filter((r) => kind(r.file) !== 'on demand'))));
  const later = rows.filter((r) => kind(r.file) === 'on demand');
  const torch = later.filter((r) => /biaslab-export/.test(r.file));
  if (torch.length) out.push(line('PyTorch export, fetched on the first export (module + loader)', sum(torch)));
  const full = later.filter((r) => /biaslab-full/.test(r.file));
  if (full.length) out.push(line('engine with convolutions, fetched for the first config that has one (module + loader)', sum(full)));
  const detail = later.filter((r) => /bias-detail/.test(r.file));
  if (detail.length) out.push(line('bias detail panel, fetched when a row is first opened', sum(detail)));
  const sweep = later.filter((r) => /sweep-plot/.test(r.file));
  if (sweep.length) out.push(line('sweep plot (uPlot), fetched when the first plot is drawn', sum(sweep)));
  const gloss = later.filter((r) => /glossary-text/.test(r.file));
  if (gloss.length) out.push(line('glossary texts, fetched on the first tooltip or at idle', sum(gloss)));
  const stack = later.filter((r) => /stack-picture/.test(r.file));
  if (stack.length) out.push(line('stack picture, fetched when the first picture is drawn', sum(stack)));
  const claims = later.filter((r) => /claims/.test(r.file));
  if (claims.length) out.push(line("the articles' claims, fetched once the engine has started", sum(claims)));
  const presets = later.filter((r) => /_presets/.test(r.file));
  if (presets.length) out.push(line("every preset's sentence and config, fetched once the engine has started", sum(presets)));
  const formulas = later.filter((r) => /formulas/.test(r.file));
  if (formulas.length) out.push(line("the fold rules' typeset formulas, fetched as the page starts (the folds table)", sum(formulas)));
  return out.join('\n');
}

export function dist_sizes(dist) {
  return walk(dist)
    .sort()
    .map((path) => ({ file: relative(dist, path), ...compressed_sizes(readFileSync(path)) }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dist = resolve(process.argv[2] ?? fileURLToPath(new URL('../dist', import.meta.url)));
  console.log(size_markdown(dist_sizes(dist)));
}
