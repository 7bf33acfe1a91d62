#!/usr/bin/env node
// The page's engine (the Node build of the wasm module) behind the few CLI commands that
// tests/golden/golden.py uses, so that the golden reports check the engine the page runs as well
// as the native one (scripts/test.sh). Output, messages and exit statuses are `biaslab`'s: the
// JSON report on stdout, 0 for a report, 2 for an error the config or the arguments caused, 1 for
// an internal one. The wasm engine's memory budget is its heap's limit (2 GB), the one golden.py
// asks for; any other budget is refused, not ignored.
import { readFileSync } from 'node:fs';

import { fresh_module } from './engine.js';

const PAGE_BUDGET_GB = '2.147483648';
const USAGE = `usage:
  engine-cli.mjs presets
  engine-cli.mjs analyze FILE|-|--preset NAME --format json --memory-budget ${PAGE_BUDGET_GB}
`;

/** The reason to stop, with the exit status and what goes to stderr. */
class Exit {
  constructor(status, message) {
    this.status = status;
    this.message = message;
  }
}

const usage_error = (message) => new Exit(2, `error: ${message}\n\n${USAGE}`);

/** Node writes to a pipe asynchronously once it is full: exit only when stdout has taken it all.
 * A reader that closed the pipe first gets the status a shell gives a CLI killed by SIGPIPE. */
function finish(status, out = '', err = '') {
  if (err) process.stderr.write(err);
  process.stdout.on('error', () => {}); // (the write's callback has it)
  process.stdout.write(out, (e) => process.exit(e ? (e.code === 'EPIPE' ? 141 : 1) : status));
}

function parse_analyze(args) {
  let preset = null, file = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--preset') {
      if (i + 1 >= args.length) throw usage_error('--preset needs a name (see `biaslab presets`)');
      preset = args[++i];
    } else if (a === '--format') {
      if (args[++i] !== 'json') throw usage_error('engine-cli writes --format json only');
    } else if (a === '--memory-budget') {
      if (Number(args[++i]) !== Number(PAGE_BUDGET_GB)) throw usage_error(`the wasm engine's memory budget is its heap's, ${PAGE_BUDGET_GB} GB`);
    } else if (a.startsWith('-') && a !== '-') {
      throw usage_error(`unknown option ${a}`);
    } else if (file === null) {
      file = a;
    } else {
      throw usage_error('analyze takes one config file');
    }
  }
  if (preset !== null && file !== null) throw usage_error('give a config file or --preset, not both');
  if (preset === null && file === null) throw usage_error('analyze needs a config file, - for standard input, or --preset NAME');
  return { preset, file };
}

async function main([command, ...args]) {
  if (command === 'presets') {
    if (args.length) throw usage_error('presets takes no arguments');
    const m = await fresh_module();
    return [0, JSON.parse(m.presets()).map((p) => `${p.name}\n`).join('')];
  }
  if (command !== 'analyze') throw usage_error(`unknown command '${command ?? ''}'`);
  const { preset, file } = parse_analyze(args);
  let config = null;
  if (file !== null) {
    try {
      config = readFileSync(file === '-' ? 0 : file, 'utf8');
    } catch {
      throw new Exit(2, `error: cannot read ${file}\n`);
    }
  }
  const m = await fresh_module();
  if (preset !== null) {
    const p = JSON.parse(m.presets()).find((q) => q.name === preset);
    if (!p) throw usage_error(`unknown preset '${preset}' (see \`biaslab presets\`)`);
    config = p.config;
  }
  const text = m.analyze(config);
  const report = JSON.parse(text);
  // As the CLI: a config error names a path or is a parse error; anything else is internal.
  const status = report.ok ? 0 : (report.error?.message ?? '').startsWith('internal error') ? 1 : 2;
  return [status, `${text}\n`];
}

try {
  const [status, out] = await main(process.argv.slice(2));
  finish(status, out);
} catch (e) {
  if (e instanceof Exit) finish(e.status, '', e.message);
  else finish(1, '', `internal error: ${e?.message ?? e}\n`);
}
