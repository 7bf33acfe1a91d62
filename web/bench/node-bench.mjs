// Compares engine builds on size and on analysis speed in Node, in one run: every build
// analyses each preset once per round, rounds interleave the builds (so a busy machine slows
// all of them alike), and the table gives medians.
//
//   node bench/node-bench.mjs [--rounds N] [--preset NAME]... DIR...
//
// DIR holds biaslab.js/.wasm (the page's build) and biaslab-node.js/.wasm (timed here), e.g.
// build-wasm/cpp/wasm or build-wasm-variants/<name>/cpp/wasm (bench/wasm-variants.sh).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';

import { compressed_sizes } from './sizes.mjs';

const args = process.argv.slice(2);
let rounds = 5;
const presets = [];
const dirs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--rounds') rounds = Number(args[++i]);
  else if (args[i] === '--preset') presets.push(args[++i]);
  else dirs.push(resolve(args[i]));
}
if (!dirs.length) {
  console.error('usage: node bench/node-bench.mjs [--rounds N] [--preset NAME]... DIR...');
  process.exit(2);
}
if (!presets.length) presets.push('default', 'article2-key-bias');

const label = (dir) => (basename(dir) === 'wasm' ? basename(dirname(dirname(dir))) : basename(dir));
const require = createRequire(import.meta.url);
process.setMaxListeners(0); // every Emscripten Node module adds its own process listeners
const builds = [];
for (const dir of dirs) {
  const create = require(resolve(dir, 'biaslab-node.js'));
  const m = await create({ wasmBinary: readFileSync(resolve(dir, 'biaslab-node.wasm')) });
  const configs = Object.fromEntries(JSON.parse(m.presets()).map((p) => [p.name, p.config]));
  for (const p of presets) {
    // warm-up, and a check that the build works
    const report = JSON.parse(m.analyze(configs[p]));
    if (!report.ok) throw new Error(`${label(dir)} ${p}: ${JSON.stringify(report.error)}`);
  }
  builds.push({
    dir,
    name: label(dir),
    m,
    configs,
    times: Object.fromEntries(presets.map((p) => [p, []])),
    wasm: compressed_sizes(readFileSync(resolve(dir, 'biaslab.wasm'))),
    loader: compressed_sizes(readFileSync(resolve(dir, 'biaslab.js'))),
  });
}

for (let r = 0; r < rounds; r++) {
  for (const b of builds) {
    for (const p of presets) {
      const t0 = performance.now();
      b.m.analyze(b.configs[p]);
      b.times[p].push(performance.now() - t0);
    }
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const kb = (n) => (n / 1024).toFixed(1);
const base = builds[0];
console.log(`Node ${process.version}, ${rounds} rounds, medians in ms; ratios against ${base.name}`);
console.log(
  `| build | wasm KB raw / gzip / brotli | loader KB gzip | ${presets.map((p) => `${p} ms`).join(' | ')} |`,
);
console.log(`|---|---:|---:|${presets.map(() => '---:').join('|')}|`);
for (const b of builds) {
  const cells = presets.map((p) => {
    const t = median(b.times[p]);
    return b === base ? t.toFixed(1) : `${t.toFixed(1)} (${(t / median(base.times[p])).toFixed(2)}x)`;
  });
  console.log(`| ${b.name} | ${kb(b.wasm.raw)} / ${kb(b.wasm.gzip)} / ${kb(b.wasm.brotli)} | ${kb(b.loader.gzip)} | ${cells.join(' | ')} |`);
}
