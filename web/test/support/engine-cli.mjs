#!/usr/bin/env node
// The page's engine (the Node build of the wasm module) behind the few CLI commands that
// tests/golden/golden.py uses, so that the golden reports check the engine the page runs as well
// as the native one (scripts/test.sh):
//
//   engine-cli.mjs presets
//   engine-cli.mjs analyze --preset NAME|- --format json --memory-budget 2.147483648
//
// Output and exit status as `biaslab` gives them: the JSON report on stdout, 0 for a report,
// 2 for an error the config caused, 1 for an internal one. The wasm engine's memory budget is its
// heap's limit (2 GB), the one golden.py asks for; any other budget is refused, not ignored.
import { readFileSync } from 'node:fs';

import { fresh_module } from './engine.js';

const PAGE_BUDGET_GB = '2.147483648';

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(2);
}

const [command, ...args] = process.argv.slice(2);
const m = await fresh_module();
if (command === 'presets' && args.length === 0) {
  for (const p of JSON.parse(m.presets())) process.stdout.write(`${p.name}\n`);
  process.exit(0);
}
if (command !== 'analyze') fail(`engine-cli: unknown command '${command}' (presets, analyze)`);

let config = null;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--preset') {
    const name = args[++i];
    const p = JSON.parse(m.presets()).find((q) => q.name === name);
    if (!p) fail(`unknown preset '${name}'`);
    config = p.config;
  } else if (a === '--format') {
    if (args[++i] !== 'json') fail('engine-cli writes --format json only');
  } else if (a === '--memory-budget') {
    if (args[++i] !== PAGE_BUDGET_GB) fail(`the wasm engine's budget is its heap's ${PAGE_BUDGET_GB} GB`);
  } else if (a === '-') {
    config = readFileSync(0, 'utf8');
  } else {
    fail(`engine-cli: unknown argument '${a}'`);
  }
}
if (config === null) fail('analyze needs --preset NAME or - (the config on standard input)');

const text = m.analyze(config);
process.stdout.write(`${text}\n`);
const report = JSON.parse(text);
if (report.ok) process.exit(0);
// As the CLI: a config error names a path or is a parse error; anything else is internal.
process.exit((report.error?.message ?? '').startsWith('internal error') ? 1 : 2);
