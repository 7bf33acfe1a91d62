// Speed and size figures of the built page in headless Chromium, for the README. Not a test:
// it prints Markdown tables and exits 0 whether or not the goals are met.
//
//   node bench/browser-bench.mjs [--loads N] [--edits N] [--big N] [--native PATH] [--dist DIR]
//                                [--config FILE [--runs N] [--workers N,M,...]]
//
// - load:  navigation start to the bias table painted, cold (nothing cached), median of N loads
// - edit:  a checkbox on the default preset (an immediate edit; number boxes add a 300 ms typing
//          debounce by design) to the updated table painted, median of N edits (N <= 30: each
//          edit a new experiment, never one the page's report cache answers)
// - config: a config of one's own (--config), N runs; with --workers, one page per count
//          (?workers=N: at most that many workers per analysis), their runs alternated
// - big:   the article2-key-bias preset (each run with a seed of its own, never a cached
//          report) analysed in the page's worker, and natively
//          (build/biaslab_bench --preset article2-key-bias --repeat 1) alternately, N of each,
//          so both see the same machine load; the ratio is native ms / wasm ms
// - size:  the response bodies the server sent for one cold load, gzip (as GitHub Pages serves),
//          with raw and brotli for comparison
//
// Needs web/dist (npm run build), /usr/bin/chromium (or CHROMIUM_PATH) and, for the native
// figure, a native build. The ratio compares the same SIMD width (wasm's 128 bits) when that
// build is for the x86-64 baseline (SSE2), not for this CPU as the default build is:
// cmake -S . -B build-baseline -DBIASLAB_NATIVE_ARCH=OFF && cmake --build build-baseline -j2
// --target biaslab_bench, then --native ../build-baseline/biaslab_bench.
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

import { launch, CHROMIUM } from '../test/support/browser.js';
import { compressed_sizes, kind, size_markdown } from './sizes.mjs';

const WEB = fileURLToPath(new URL('..', import.meta.url));
const opts = { loads: 7, edits: 21, big: 5, native: resolve(WEB, '../build/biaslab_bench'), dist: resolve(WEB, 'dist'), config: '', runs: 1, workers: '' };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const key = argv[i].replace(/^--/, '');
  if (!(key in opts)) {
    console.error('usage: node bench/browser-bench.mjs [--loads N] [--edits N] [--big N] [--native PATH] [--dist DIR] [--config FILE [--runs N] [--workers N,M,...]]');
    process.exit(2);
  }
  opts[key] = typeof opts[key] === 'number' ? Number(argv[++i]) : key === 'workers' ? argv[++i] : resolve(argv[++i]);
}

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.woff2': 'font/woff2',
  '.woff': 'font/woff',
  '.ttf': 'font/ttf',
};

/** A static server that gzips what it sends (level 9, cached) and counts the bytes per path. */
async function serve_gzip(root) {
  const base = resolve(root);
  const cache = new Map();
  const log = [];
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    let file = normalize(join(base, path));
    if (file !== base && !file.startsWith(base + sep)) return res.writeHead(403).end();
    try {
      if ((await stat(file)).isDirectory()) file = join(file, 'index.html');
      if (!cache.has(file)) {
        const raw = await readFile(file);
        cache.set(file, { raw, gzip: gzipSync(raw, { level: 9 }) });
      }
      const { raw, gzip } = cache.get(file);
      const use_gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '');
      const body = use_gzip ? gzip : raw;
      res.writeHead(200, {
        'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
        'cache-control': 'no-store',
        ...(use_gzip ? { 'content-encoding': 'gzip', vary: 'accept-encoding' } : {}),
        'content-length': body.length,
      });
      res.end(body);
      log.push({ path: file.slice(base.length + 1), sent: body.length, gzip: use_gzip });
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${server.address().port}/`, log, close: () => new Promise((ok) => { server.closeAllConnections?.(); server.close(ok); }) };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (ms) => (!Number.isFinite(ms) ? 'n/a' : ms >= 100 ? Math.round(ms).toString() : ms.toFixed(1));
const spread = (xs) => `${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}`;

// Marks, in the page's own clock (performance.now(): 0 is navigation start), when the bias
// table first appears and when the frame that shows it has been produced.
const INIT = () => {
  window.__bench = {};
  const obs = new MutationObserver(() => {
    if (!document.querySelector('table.table-biases')) return;
    obs.disconnect();
    window.__bench.table_in_dom = performance.now();
    requestAnimationFrame(() => setTimeout(() => (window.__bench.table_painted = performance.now()), 0));
  });
  obs.observe(document, { childList: true, subtree: true });
};

/** Runs `action` in the page and resolves after the next analysis is shown and painted. */
const TIMED_EDIT = async ({ kind, selector, value }) => {
  const done = new Promise((ok) => document.addEventListener('biaslab:analysed', (e) => ok(e.detail.ok), { once: true }));
  const el = document.querySelector(selector);
  const t0 = performance.now();
  if (kind === 'click') el.click();
  else {
    el.value = value;
    // A number box answers typing ('input', then a typing delay); a select answers 'change'.
    el.dispatchEvent(new Event(kind === 'type' ? 'input' : 'change', { bubbles: true }));
  }
  const ok = await done;
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const worker = /\((\d+) ms in the worker\)/.exec(document.getElementById('summary')?.textContent ?? '');
  return { ok, ms: performance.now() - t0, worker_ms: worker ? Number(worker[1]) : NaN };
};

/** The largest peak resident memory (VmHWM, bytes) of this machine's Chromium renderer processes. */
function renderer_peak() {
  let peak = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--type=renderer')) continue;
      const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (kb) peak = Math.max(peak, Number(kb[1]) * 1024);
    } catch {
      // (the process ended meanwhile)
    }
  }
  return peak;
}

function native_ms() {
  const out = execFileSync(opts.native, ['--preset', 'article2-key-bias', '--repeat', '1'], { encoding: 'utf8' });
  const row = out.split('\n').find((l) => l.startsWith('| article2-key-bias'));
  return Number(row.split('|')[2]);
}

if (!existsSync(resolve(opts.dist, 'index.html'))) throw new Error(`${opts.dist} is missing: run npm run build`);
const have_native = existsSync(opts.native);
const server = await serve_gzip(opts.dist);
const browser = await launch();
const chromium_version = browser.context.browser()?.version() ?? CHROMIUM;

async function open_page() {
  const page = await browser.context.newPage();
  const cdp = await browser.context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  await page.addInitScript(INIT);
  return page;
}

async function wait_analysed(page, n = 1) {
  await page.waitForFunction((n) => Number(document.documentElement.dataset.analyses ?? 0) >= n, n, { timeout: 120000 });
}

try {
  // 1. Cold loads; the first one also gives the transferred bytes.
  const loads = [];
  let served = null;
  for (let i = 0; i < opts.loads; i++) {
    const page = await open_page();
    server.log.length = 0;
    await page.goto(server.url);
    await wait_analysed(page);
    await page.waitForFunction(() => window.__bench.table_painted !== undefined);
    await page.waitForTimeout(200); // late requests (fonts) land in the log too
    const t = await page.evaluate(() => ({
      ...window.__bench,
      ...Object.fromEntries(performance.getEntriesByType('mark').filter((m) => m.name.startsWith('biaslab:')).map((m) => [m.name.slice(8), m.startTime])),
      wasm_end: performance.getEntriesByType('resource').find((e) => e.name.endsWith('.wasm'))?.responseEnd,
      dom_content_loaded: performance.getEntriesByType('navigation')[0]?.domContentLoadedEventEnd,
    }));
    loads.push(t);
    if (!served) served = [...server.log];
    await page.close();
  }

  // 2. Edits on the default preset.
  const page = await open_page();
  await page.goto(server.url);
  await wait_analysed(page);
  const edits = [];
  // Each edit one checkbox, walking a Gray code over five of the attention layer's options: 32
  // experiments, none repeated within 31 edits, so the page's report cache (the last 16, for
  // undo) never answers and every edit is a real analysis.
  const boxes = ['q_bias', 'k_bias', 'v_bias', 'o_bias', 'causal'].map((o) => `[data-path="layers[0].body[1].${o}"]`);
  for (let i = 0; i < opts.edits + 1; i++) {
    await page.waitForTimeout(100);
    const bit = Math.log2(((i + 1) & -(i + 1)));
    const r = await page.evaluate(TIMED_EDIT, { kind: 'click', selector: boxes[bit % boxes.length] });
    if (!r.ok) throw new Error('an edit failed');
    if (i > 0) edits.push(r); // the first edit warms up
  }

  // 3. The 1024-wide preset in the worker, alternating with the native build.
  const big = [];
  const native = [];
  for (let i = 0; i < opts.big; i++) {
    if (have_native) native.push(native_ms());
    // The page answers an experiment it has analysed before from its report cache (the last
    // 16, for undo): the preset is analysed once, and each timed run is the preset with a seed
    // of its own, a new experiment. (The native run keeps the preset's seed: the same sizes and
    // stopping rules, other random draws.)
    if (!(await page.evaluate(TIMED_EDIT, { kind: 'select', selector: '#preset', value: 'article2-key-bias' })).ok)
      throw new Error('article2-key-bias failed in the page');
    const r = await page.evaluate(TIMED_EDIT, { kind: 'type', selector: '[data-path="seed"]', value: String(1000 + i) });
    if (!r.ok) throw new Error('article2-key-bias with a new seed failed in the page');
    big.push(r);
    await page.evaluate(TIMED_EDIT, { kind: 'select', selector: '#preset', value: 'default' });
  }
  await page.close();

  // 4. A config of one's own (--config FILE: a config's JSON text, e.g. a block at a model's real
  // width), typed into the page's JSON box: each run with a seed of its own (a new experiment),
  // timed in the worker and to the painted table, with the peak resident memory of Chromium's
  // renderer processes (the page's worker and its wasm memory live in one of them).
  const mine = [];
  if (opts.config) {
    const base = JSON.parse(await readFile(opts.config, 'utf8'));
    // One page per worker count ('': the page's default), each run a new seed, the counts alternated.
    const counts = opts.workers ? opts.workers.split(',').map(Number) : [''];
    const pages = [];
    for (const w of counts) {
      const page = await open_page();
      await page.goto(server.url + (w === '' ? '' : `?workers=${w}`));
      await wait_analysed(page);
      pages.push(page);
    }
    for (let i = 0; i < opts.runs; i++)
      for (const [j, page] of pages.entries()) {
        const text = JSON.stringify({ ...base, seed: 3000 + i });
        const r = await page.evaluate(TIMED_EDIT, { kind: 'type', selector: '#config-json', value: text });
        if (!r.ok) throw new Error(`${opts.config} failed in the page: ${await page.textContent('#message')}`);
        mine.push({ ...r, peak: renderer_peak(), workers: counts[j] });
      }
    for (const page of pages) await page.close();
  }

  // Tables.
  const first_table = loads.map((l) => l.table_painted);
  const edit_ms = edits.map((e) => e.ms);
  const big_worker = big.map((b) => b.worker_ms);
  const big_page = big.map((b) => b.ms);
  const sent_gzip = served.reduce((a, r) => a + r.sent, 0);
  const files = [];
  for (const r of served) {
    if (files.some((f) => f.file === r.path)) continue;
    files.push({ file: r.path, ...compressed_sizes(await readFile(resolve(opts.dist, r.path))) });
  }
  const budget = files.filter((f) => ['wasm', 'loader', 'js'].includes(kind(f.file))).reduce((a, f) => a + f.gzip, 0);
  const ratio = have_native ? median(native) / median(big_worker) : NaN;
  const yes = (ok) => (ok ? 'met' : '**not met**');

  console.log(`\nChromium ${chromium_version}, Node ${process.version}; medians (range)\n`);
  console.log('| measure | result | goal | |');
  console.log('|---|---|---|---|');
  console.log(`| load to first table (cold, ${loads.length} loads) | ${fmt(median(first_table))} ms (${spread(first_table)}); engine fetched at ${fmt(median(loads.map((l) => l.wasm_end)))} ms | < 1000 ms | ${yes(median(first_table) < 1000)} |`);
  const phase = (key) => fmt(median(loads.map((l) => l[key] ?? NaN)));
  // (a page built before the boot marks existed has none)
  if (loads[0].boot !== undefined) console.log(`| … of which: script running, engine compiled, worker ready, first analysis done, table painted | ${['boot', 'engine-compiled', 'engine-ready', 'first-analysis', 'table_painted'].map(phase).join(' → ')} ms | | |`);
  console.log(`| edit to updated table, default preset (${edits.length} edits) | ${fmt(median(edit_ms))} ms (${spread(edit_ms)}); ${fmt(median(edits.map((e) => e.worker_ms)))} ms of it in the engine | < 50 ms | ${yes(median(edit_ms) < 50)} |`);
  if (big.length) console.log(`| article2-key-bias in the page's worker (${big.length} runs) | ${fmt(median(big_worker))} ms in the worker (${spread(big_worker)}); ${fmt(median(big_page))} ms from the typed seed to the painted table (the number box's 300 ms typing delay included) | | |`);
  if (have_native && big.length) {
    console.log(`| article2-key-bias native, alternating with the above (${native.length} runs) | ${fmt(median(native))} ms (${spread(native)}) | | |`);
    console.log(`| wasm speed / native speed | ${ratio.toFixed(2)}x | >= 0.7x | ${yes(ratio >= 0.7)} |`);
  } else if (big.length) {
    console.log(`| native | (no ${opts.native}: build it to get the ratio) | | |`);
  }
  for (const w of [...new Set(mine.map((m) => m.workers))]) {
    const runs = mine.filter((m) => m.workers === w);
    const ms = runs.map((m) => m.worker_ms);
    const where = w === '' ? "the page's worker" : `the page, at most ${w} worker${w === 1 ? '' : 's'}`;
    console.log(`| ${opts.config.split('/').pop()} in ${where} (${runs.length} run${runs.length === 1 ? '' : 's'}) | ${fmt(median(ms))} ms (${spread(ms)}); ${fmt(median(runs.map((m) => m.ms)))} ms from the typed config to the painted table (a 300 ms typing delay included); peak resident memory of the renderers so far (all pages) ${(Math.max(...runs.map((m) => m.peak)) / 1048576).toFixed(0)} MB | | |`);
  }
  console.log(`| transferred, one cold load (gzip, ${served.length} responses) | ${(sent_gzip / 1024).toFixed(1)} KB in all; wasm + JS ${(budget / 1024).toFixed(1)} KB | wasm + JS < 320 KB | ${yes(budget < 320 * 1024)} |`);
  console.log('\nFiles of one cold load (gzip level 9 as served, brotli quality 11 for comparison):\n');
  console.log(size_markdown(files));
} finally {
  await browser.close();
  await server.close();
}
