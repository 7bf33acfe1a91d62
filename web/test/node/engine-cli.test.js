// test/support/engine-cli.mjs, the page's engine behind the CLI commands that tests/golden/golden.py
// uses: its output must be the whole report, and its exit statuses and messages the CLI's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../support/engine-cli.mjs', import.meta.url));
const BUDGET = ['--format', 'json', '--memory-budget', '2.147483648'];

function run(args, { input, stdin, env } = {}) {
  const done = spawnSync(process.execPath, [CLI, ...args], {
    input, stdio: [stdin ?? 'pipe', 'pipe', 'pipe'], env: { ...process.env, ...env },
    encoding: 'utf8', maxBuffer: 1 << 28,
  });
  return { status: done.status, stdout: done.stdout, stderr: done.stderr };
}

// 64 layers, the most a stack may have: its report (about 210 KB) is well over the 64 KiB a pipe
// holds.
function long_stack() {
  const layers = [];
  for (let i = 0; i < 32; i++) layers.push({ type: 'linear' }, { type: 'layernorm' });
  return JSON.stringify({ version: 1, seed: 1, dtype: 'float64', shape: { batch: 2, tokens: 4, features: 8 }, layers });
}

/** Runs the wrapper with its output into a pipe (Node's own child pipes are socket pairs) that is
 * read only a second after it starts, as a slow reader would: what the wrapper has not written
 * when it exits is lost. */
function run_slow_reader(args, input, dir) {
  const status = join(dir, 'status');
  // (The reader takes one byte first, so the pipe is open and full before the wrapper is done.)
  const script = '{ "$0" "$@"; echo $? > "$STATUS"; } | { dd bs=1 count=1 2>/dev/null; sleep 1; cat; }';
  const done = spawnSync('/bin/sh', ['-c', script, process.execPath, CLI, ...args], {
    input, env: { ...process.env, STATUS: status }, encoding: 'utf8', maxBuffer: 1 << 28, timeout: 120000,
  });
  return { status: Number(readFileSync(status, 'utf8')), stdout: done.stdout, stderr: done.stderr };
}

test('engine-cli: a report larger than a pipe holds arrives whole, however slowly it is read', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'engine-cli-'));
  t.after(() => rmSync(dir, { recursive: true }));
  const r = run_slow_reader(['analyze', '-', ...BUDGET], long_stack(), dir);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(r.stdout.length > 3 * 65536, `${r.stdout.length} characters`);
  const report = JSON.parse(r.stdout);
  assert.equal(report.ok, true);
  assert.equal(report.biases.length, 64);
});

test('engine-cli: the page\'s budget written another way is the same budget', () => {
  const r = run(['analyze', '--preset', 'article1-linear-layernorm', '--format', 'json', '--memory-budget', '2.147483648e0']);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).ok, true);
});

test('engine-cli: a reader that closes the pipe early gets the status of SIGPIPE, not a success', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'engine-cli-'));
  t.after(() => rmSync(dir, { recursive: true }));
  const status = join(dir, 'status');
  spawnSync('/bin/sh', ['-c', '{ "$0" "$@"; echo $? > "$STATUS"; } | head -c 100 > /dev/null', process.execPath, CLI,
    'analyze', '-', ...BUDGET], { input: long_stack(), env: { ...process.env, STATUS: status }, timeout: 120000 });
  assert.equal(Number(readFileSync(status, 'utf8')), 141);
});

test('engine-cli: a config error is a report on stdout and exit 2', () => {
  const r = run(['analyze', '-', ...BUDGET], { input: '{"version": 1, "layers": [{"type": "lineer"}]}' });
  assert.equal(r.status, 2, r.stderr);
  const report = JSON.parse(r.stdout);
  assert.equal(report.ok, false);
  assert.equal(report.error.path, 'layers[0].type');
});

test('engine-cli: standard input that cannot be read is exit 2, as the CLI says it', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'engine-cli-'));
  t.after(() => rmSync(dir, { recursive: true }));
  const fd = openSync(dir, 'r'); // a directory: reading it fails (EISDIR)
  try {
    const r = run(['analyze', '-', ...BUDGET], { stdin: fd });
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr, 'error: cannot read -\n');
    assert.equal(r.stdout, '');
  } finally {
    closeSync(fd);
  }
});

test('engine-cli: a failure inside the wrapper is an internal error and exit 1', () => {
  const r = run(['presets'], { env: { BIASLAB_WASM_DIR: '/nonexistent/biaslab-wasm' } });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^internal error: .*biaslab-node\.js is missing/);
});

test('engine-cli: arguments it does not take are usage errors, exit 2', () => {
  const cases = {
    'a preset and -': [['analyze', '--preset', 'default', '-', ...BUDGET], /give a config file or --preset, not both/],
    '--preset without a name': [['analyze', ...BUDGET, '--preset'], /--preset needs a name/],
    'an unknown preset': [['analyze', '--preset', 'nope', ...BUDGET], /unknown preset 'nope'/],
    'no config': [['analyze', ...BUDGET], /analyze needs a config file, - for standard input, or --preset NAME/],
    'two configs': [['analyze', '-', '-', ...BUDGET], /analyze takes one config file/],
    'another budget': [['analyze', '--preset', 'default', '--format', 'json', '--memory-budget', '1'], /budget/],
    'another format': [['analyze', '--preset', 'default', '--format', 'table'], /--format json only/],
    'presets with an argument': [['presets', 'extra'], /presets takes no arguments/],
    'an unknown command': [['version'], /unknown command 'version'/],
    'an unknown option': [['analyze', '-x', ...BUDGET], /unknown option -x/],
  };
  for (const [what, [args, message]] of Object.entries(cases)) {
    const r = run(args, { input: '' });
    assert.equal(r.status, 2, `${what}: exit ${r.status}, ${r.stderr}`);
    assert.match(r.stderr, message, what);
    assert.match(r.stderr, /usage:\n {2}engine-cli\.mjs presets\n {2}engine-cli\.mjs analyze FILE\|-\|--preset NAME/, what);
    assert.equal(r.stdout, '', what);
  }
});

test('engine-cli: presets lists the names the engine has', () => {
  const r = run(['presets']);
  assert.equal(r.status, 0, r.stderr);
  const names = r.stdout.trim().split('\n');
  assert.ok(names.includes('default') && names.includes('gpt2-block'), names.join(' '));
});

test('engine-cli: a preset by name and its config in a file give the same report', (t) => {
  const by_name = run(['analyze', '--preset', 'article1-linear-layernorm', ...BUDGET]);
  assert.equal(by_name.status, 0, by_name.stderr);
  const dir = mkdtempSync(join(tmpdir(), 'engine-cli-'));
  t.after(() => rmSync(dir, { recursive: true }));
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify(JSON.parse(by_name.stdout).config));
  const by_file = run(['analyze', file, ...BUDGET]);
  assert.equal(by_file.status, 0, by_file.stderr);
  const [a, b] = [by_name, by_file].map((r) => JSON.parse(r.stdout));
  assert.deepEqual(b.biases.map((x) => [x.param, x.verdict, x.redundant_dim]),
    a.biases.map((x) => [x.param, x.verdict, x.redundant_dim]));
  assert.equal(a.biases.length, 2);
  const missing = run(['analyze', join(dir, 'absent.json'), ...BUDGET]);
  assert.equal(missing.status, 2);
  assert.equal(missing.stderr, `error: cannot read ${join(dir, 'absent.json')}\n`);
});
