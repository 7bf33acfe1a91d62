// How the analysis's cost grows with width and with tokens: time and peak memory of four stacks
// (an attention key bias, a bias before LayerNorm, a bias before GELU + Linear, a GPT-2 block),
// natively and in the engine's wasm under Node, with the exponents fitted to them.
//
//   node bench/growth.mjs [--native PATH] [--wasm DIR] [--quick] [--repeat N]
//
// Every point is a fresh process (cold): `biaslab analyze` under /usr/bin/time (Debian's `time`
// package; without it the native peak memory is n/a), and a Node process that loads the wasm
// module and analyses the config twice (the second run is the warm figure). The wasm peak is the
// module's memory at the end (wasm memory only grows). Medians over --repeat fresh processes
// (default 1: the biggest points take tens of seconds). --quick stops at 512 features.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const WEB = fileURLToPath(new URL('..', import.meta.url));
const opts = { native: resolve(WEB, '../build/biaslab'), wasm: resolve(WEB, '../build-wasm/cpp/wasm'), quick: false, repeat: 1 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const key = argv[i].replace(/^--/, '');
  if (!(key in opts)) {
    console.error('usage: node bench/growth.mjs [--native PATH] [--wasm DIR] [--quick] [--repeat N]');
    process.exit(2);
  }
  if (typeof opts[key] === 'boolean') opts[key] = true;
  else opts[key] = typeof opts[key] === 'number' ? Number(argv[++i]) : resolve(argv[++i]);
}

// The stacks, float32 as the models are trained, one sample (the block: two, as gpt2-block).
// Heads are 64 wide; the bias measured is the only one where the stack has others.
const STACKS = {
  'key bias': {
    param: 'layers.0.k_proj.bias',
    config: (w, t) => ({ batch: 1, tokens: t, features: w, layers: [{ type: 'attention', num_heads: w / 64, q_bias: false, k_bias: true, v_bias: false, o_bias: false }] }),
  },
  'bias before LayerNorm': {
    param: 'layers.0.bias',
    config: (w, t) => ({ batch: 1, tokens: t, features: w, layers: [{ type: 'linear', out_features: w }, { type: 'layernorm', elementwise_affine: false }] }),
  },
  'bias before GELU + Linear': {
    param: 'layers.0.bias',
    config: (w, t) => ({ batch: 1, tokens: t, features: w, layers: [{ type: 'linear', out_features: 4 * w }, { type: 'gelu' }, { type: 'linear', out_features: w, bias: false }] }),
  },
  'GPT-2 block (every bias)': {
    param: null,
    config: (w, t) => ({
      batch: 2,
      tokens: t,
      features: w,
      layers: [
        { type: 'residual', body: [{ type: 'layernorm', eps: 1e-5 }, { type: 'attention', num_heads: w / 64, causal: true }] },
        { type: 'residual', body: [{ type: 'layernorm', eps: 1e-5 }, { type: 'linear', out_features: 4 * w }, { type: 'gelu', approximate: 'tanh' }, { type: 'linear', out_features: w }] },
        { type: 'layernorm', eps: 1e-5 },
      ],
    }),
  },
};

const WIDTHS = {
  'key bias': [128, 256, 512, 1024, 2048],
  'bias before LayerNorm': [128, 256, 512, 1024, 2048],
  'bias before GELU + Linear': [128, 256, 512, 768, 1024],
  'GPT-2 block (every bias)': [128, 256, 512, 768],
};
const TOKENS = [8, 16, 32, 64];
const TOKENS_WIDTH = 256;

function config_text({ batch, tokens, features, layers }) {
  return JSON.stringify({ version: 1, seed: 5, dtype: 'float32', shape: { batch, tokens, features }, layers });
}

// The Node side of a wasm point: a fresh process, two analyses (cold, then warm).
const WASM_RUNNER = `
const { readFileSync } = require('node:fs');
const { performance } = require('node:perf_hooks');
const [dir, file] = process.argv.slice(1);
const create = require(dir + '/biaslab-node.js');
create({ wasmBinary: readFileSync(dir + '/biaslab-node.wasm') }).then((m) => {
  const text = readFileSync(file, 'utf8');
  const times = [];
  let r;
  for (let i = 0; i < 2; i++) {
    const t0 = performance.now();
    r = JSON.parse(m.analyze(text));
    times.push(performance.now() - t0);
    if (!r.ok) break;
  }
  process.stdout.write(JSON.stringify({ ok: r.ok, error: r.error, cold: times[0], warm: times[1], heap: m.HEAPU8.length, timing: r.timing_ms }));
});
`;

const tmp = mkdtempSync(join(tmpdir(), 'biaslab-growth-'));
const have_time = existsSync('/usr/bin/time');
const median = (xs) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};

function native_point(file, param) {
  const runs = [];
  for (let i = 0; i < opts.repeat; i++) {
    const cmd = have_time ? ['/usr/bin/time', ['-f', 'GROWTH %e %M', opts.native, 'analyze', file, '--format', 'json']] : [opts.native, ['analyze', file, '--format', 'json']];
    const t0 = performance.now();
    const p = spawnSync(cmd[0], cmd[1], { encoding: 'utf8', maxBuffer: 1 << 28 });
    const wall = performance.now() - t0;
    let report = null;
    try {
      report = JSON.parse(p.stdout);
    } catch {
      return { error: (p.stderr || p.stdout).trim().split('\n')[0] };
    }
    if (!report.ok) return { error: report.error?.message ?? 'refused' };
    const m = /GROWTH ([\d.]+) (\d+)/.exec(p.stderr ?? '');
    runs.push({ ms: wall, rss: m ? Number(m[2]) * 1024 : NaN, structure: param ? report.timing_ms.structure_per_bias[param] : report.timing_ms.biases });
  }
  return { ms: median(runs.map((r) => r.ms)), rss: median(runs.map((r) => r.rss)), structure: median(runs.map((r) => r.structure)) };
}

function wasm_point(file, param) {
  const runs = [];
  for (let i = 0; i < opts.repeat; i++) {
    const p = spawnSync(process.execPath, ['-e', WASM_RUNNER, opts.wasm, file], { encoding: 'utf8', maxBuffer: 1 << 28 });
    let r;
    try {
      r = JSON.parse(p.stdout);
    } catch {
      return { error: (p.stderr || 'no output').trim().split('\n').slice(-1)[0] };
    }
    if (!r.ok) return { error: r.error?.message ?? 'refused' };
    runs.push({ cold: r.cold, warm: r.warm, heap: r.heap, structure: param ? r.timing.structure_per_bias[param] : r.timing.biases });
  }
  return { cold: median(runs.map((r) => r.cold)), warm: median(runs.map((r) => r.warm)), heap: median(runs.map((r) => r.heap)), structure: median(runs.map((r) => r.structure)) };
}

// Least-squares slope of log(y) against log(x) over the last three points that have a value:
// the exponent where the largest sizes dominate.
function exponent(xs, ys) {
  const pts = xs.map((x, i) => [Math.log(x), Math.log(ys[i])]).filter(([, y]) => Number.isFinite(y)).slice(-3);
  if (pts.length < 2) return NaN;
  const mx = pts.reduce((a, [x]) => a + x, 0) / pts.length, my = pts.reduce((a, [, y]) => a + y, 0) / pts.length;
  let sxy = 0, sxx = 0;
  for (const [x, y] of pts) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  return sxy / sxx;
}

const fmt_ms = (ms) => (!Number.isFinite(ms) ? 'n/a' : ms >= 10000 ? `${(ms / 1000).toFixed(1)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms >= 100 ? 0 : 1)} ms`);
const fmt_mb = (b) => (!Number.isFinite(b) ? 'n/a' : `${Math.round(b / 1048576)} MB`);
const fmt_k = (k) => (Number.isFinite(k) ? k.toFixed(2) : 'n/a');

function sweep(name, axis, values) {
  const stack = STACKS[name];
  const rows = [];
  for (const v of values) {
    const [w, t] = axis === 'width' ? [v, 16] : [TOKENS_WIDTH, v];
    const file = join(tmp, `${name.replace(/\W+/g, '-')}-${w}-${t}.json`);
    writeFileSync(file, config_text(stack.config(w, t)));
    const native = native_point(file, stack.param);
    const wasm = wasm_point(file, stack.param);
    rows.push({ v, native, wasm });
    process.stderr.write(`${name}, ${axis} ${v}: native ${fmt_ms(native.ms)}, wasm ${fmt_ms(wasm.cold)}\n`);
  }
  return rows;
}

function table(name, axis, rows) {
  const head = axis === 'width' ? 'features (16 tokens)' : `tokens (${TOKENS_WIDTH} features)`;
  const out = [`**${name}**, against ${axis}:`, '', `| ${head} | native, cold | ${STACKS[name].param ? 'its structure' : 'the biases'} | native peak RSS | wasm, cold | wasm, warm | wasm memory |`, '|---:|---:|---:|---:|---:|---:|---:|'];
  for (const { v, native, wasm } of rows) {
    if (native.error && wasm.error) {
      out.push(`| ${v} | refused: ${native.error} | | | | | |`);
      continue;
    }
    out.push(`| ${v} | ${native.error ? 'refused' : fmt_ms(native.ms)} | ${fmt_ms(native.structure)} | ${fmt_mb(native.rss)} | ${wasm.error ? `refused: ${wasm.error}` : fmt_ms(wasm.cold)} | ${fmt_ms(wasm.warm)} | ${fmt_mb(wasm.heap)} |`);
  }
  const xs = rows.map((r) => r.v);
  const k = (f) => fmt_k(exponent(xs, rows.map(f)));
  out.push(`| exponent (last 3 points) | ${k((r) => r.native.ms)} | ${k((r) => r.native.structure)} | ${k((r) => r.native.rss)} | ${k((r) => r.wasm.cold)} | ${k((r) => r.wasm.warm)} | ${k((r) => r.wasm.heap)} |`);
  return out.join('\n');
}

try {
  if (!existsSync(opts.native)) throw new Error(`${opts.native} is missing: build it (scripts/build.sh)`);
  if (!existsSync(join(opts.wasm, 'biaslab-node.wasm'))) throw new Error(`${opts.wasm} has no biaslab-node.wasm: scripts/build-web.sh wasm`);
  const load = () => execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ');
  const cpu = execFileSync('sh', ['-c', "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], { encoding: 'utf8' }).trim();
  const load_before = load();
  const tables = [];
  for (const name of Object.keys(STACKS)) {
    const widths = opts.quick ? WIDTHS[name].filter((w) => w <= 512) : WIDTHS[name];
    tables.push(table(name, 'width', sweep(name, 'width', widths)));
    tables.push(table(name, 'tokens', sweep(name, 'tokens', TOKENS)));
  }
  console.log(`${cpu}, Node ${process.version}; load average ${load_before} before, ${load()} after; ${opts.repeat} fresh process(es) a point\n`);
  console.log(tables.join('\n\n'));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
