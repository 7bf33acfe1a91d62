// The page: wires the engine (a Web Worker), the editors, the results and the share link.
// All state lives in `state`; each view is redrawn from it by one function.
import 'virtual:katex.css'; // KaTeX's CSS, cut to the pre-typeset formulas (tools/katex-prerender.js)
import 'uplot/dist/uPlot.min.css';
import './style.css';

import glue_url from '@wasm/biaslab.js?url';
import wasm_url from '@wasm/biaslab.wasm?url';
import export_glue_url from '@wasm/biaslab-export.js?url';
import export_wasm_url from '@wasm/biaslab-export.wasm?url';

import { EngineClient, EngineError, CancelledError } from './engine-client.js';
import { canonical_config, format_config, same_json } from './experiment.js';
import { decode_link, encode_link, LinkError } from './share-codec.js';
import { render_stack_editor } from './layer-editor.js';
import { render_results, refresh_plot } from './results.js';
import { h, clear, copy_text, download } from './dom.js';
import { start_embed } from './embed.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const EMBED = params.get('embed') === '1';
const PROGRESS_DELAY_MS = 150; // analyses shorter than this never show a progress bar
const TYPING_DELAY_MS = 300; // debounce for number boxes and the JSON text

const state = {
  schema: null,
  presets: [],
  version: '',
  /** The experiment being edited (may be invalid for the engine). */
  config: null,
  /** @type {{source: 'json'|'engine'|'link'|'fatal', path?: string, message: string} | null} */
  error: null,
  /** A message about the link that opened the page (shown above the default experiment). */
  link_notice: null,
  /** Set when the reader cancelled: the results shown belong to an earlier experiment. */
  cancelled: false,
  /** The last good report and the config text it answers. */
  report: null,
  report_text: '',
  report_ms: 0,
  /** The config text of the analysis in flight or last asked for. */
  requested_text: '',
};

let engine = null;
let analysis_timer = null;
let progress_timer = null;
let hash_timer = null;

// ---------------------------------------------------------------------------------------------
// Boot

async function boot() {
  performance.mark('biaslab:boot');
  apply_theme_choice();
  if (EMBED) document.documentElement.classList.add('embed');
  engine = new EngineClient({
    glue_url: new URL(glue_url, location.href).href,
    wasm_url: new URL(wasm_url, location.href).href,
    export_glue_url: new URL(export_glue_url, location.href).href,
    export_wasm_url: new URL(export_wasm_url, location.href).href,
    make_worker: () => new Worker(new URL('./engine-worker.js', import.meta.url), { type: 'classic', name: 'biaslab-engine' }),
  });
  let info;
  try {
    info = await engine.start();
  } catch (e) {
    state.error = { source: 'fatal', message: `The engine could not start in this browser: ${e.message ?? e}` };
    render_message();
    clear($('stack-editor'), h('p', { class: 'warn' }, 'The engine is not available.'));
    return;
  }
  state.schema = info.schema;
  state.presets = info.presets;
  state.version = info.version;
  $('version').textContent = info.version;

  state.config = config_from_link(location.hash);
  render_presets();
  render_all_inputs();
  wire_controls();
  if (EMBED) start_embed({ open_url: () => full_url() });
  analyze_soon(true);
}

function default_config() {
  const preset = state.presets.find((p) => p.name === 'default') ?? state.presets[0];
  return canonical_config(state.schema, JSON.parse(preset.config));
}

/** The config a link carries; a broken link leaves a notice and gives the default experiment. */
function config_from_link(hash) {
  state.link_notice = null;
  try {
    const { config } = decode_link(hash);
    return config ? canonical_config(state.schema, config) : default_config();
  } catch (e) {
    if (!(e instanceof LinkError)) throw e;
    state.link_notice = `${e.message} Showing the default experiment instead.`;
    return default_config();
  }
}

// ---------------------------------------------------------------------------------------------
// Rendering

function config_text() {
  return format_config(canonical_config(state.schema, state.config));
}

function render_presets() {
  const select = $('preset');
  const current = matching_preset();
  clear(
    select,
    h('option', { value: '', selected: !current }, 'Custom experiment'),
    state.presets.map((p) => h('option', { value: p.name, selected: current?.name === p.name }, p.title)),
  );
  select.disabled = false;
  $('claim').textContent = current ? current.claim : 'Your own layer stack: edit it on the left or in the JSON.';
}

// Each preset's canonical config, made once: every edit compares the experiment with all of them.
// Read-only; loading a preset makes a fresh copy to edit.
const canonical_presets = new WeakMap();
function canonical_preset(preset) {
  if (!canonical_presets.has(preset)) canonical_presets.set(preset, canonical_config(state.schema, JSON.parse(preset.config)));
  return canonical_presets.get(preset);
}

function matching_preset() {
  const mine = canonical_config(state.schema, state.config);
  return state.presets.find((p) => same_json(canonical_preset(p), mine)) ?? null;
}

let marked_error;
const error_key = () => (state.error?.source === 'engine' ? `${state.error.path}\n${state.error.message}` : '');
/** Redraws the form only when the engine error it shows has changed (keeps typing smooth). */
function sync_editor_error() {
  if (error_key() !== marked_error) render_editor();
}

function render_editor() {
  marked_error = error_key();
  render_stack_editor($('stack-editor'), {
    schema: state.schema,
    config: state.config,
    error_path: state.error?.source === 'engine' ? state.error.path : undefined,
    error_message: state.error?.source === 'engine' ? state.error.message : undefined,
    error_id: 'message',
    on_edit: on_form_edit,
  });
}

/** Everything that shows the config: form, JSON text (unless the user is typing there), presets. */
function render_all_inputs({ keep_text = false } = {}) {
  if (!keep_text) $('config-json').value = config_text();
  render_editor();
  render_presets();
  if (EMBED) render_embed_experiment();
}

function render_message() {
  const box = $('message');
  const parts = [];
  // A broken link is the first thing to say, so it sits above the experiment.
  const notice = $('link-notice');
  clear(
    notice,
    state.link_notice
      ? h('p', {}, h('strong', {}, 'Link problem: '), state.link_notice, ' ', h('button', { type: 'button', class: 'small', onclick: () => { state.link_notice = null; render_message(); } }, 'Dismiss'))
      : null,
  );
  notice.hidden = !state.link_notice;
  if (state.cancelled && !state.error)
    parts.push(
      h(
        'p',
        { class: 'cancel-notice' },
        h('strong', {}, 'Analysis cancelled. '),
        state.report ? 'The results below are for the last finished analysis, not for the experiment above. ' : '',
        h('button', { type: 'button', class: 'small', id: 'run-again', onclick: () => analyze_soon(true) }, 'Run it anyway'),
      ),
    );
  const e = state.error;
  if (e) {
    const where = e.path ? [h('code', { class: 'error-path' }, e.path), ': '] : e.source === 'json' ? 'JSON: ' : '';
    parts.push(
      h(
        'p',
        { class: 'error-text' },
        h('strong', {}, e.source === 'fatal' ? 'Engine error. ' : 'Invalid experiment. '),
        where,
        e.message.replace(/([^.])$/, '$1.'),
        state.report ? h('span', { class: 'muted' }, ' The results below are for the last valid experiment.') : null,
      ),
    );
  }
  clear(box, parts);
  box.hidden = parts.length === 0;
  $('results').classList.toggle('stale', Boolean(state.report && ((e && e.source !== 'fatal') || state.cancelled)));
}

function render_report() {
  if (!state.report) return;
  render_results($('results-body'), state.report, {
    ms: state.report_ms,
    embed: EMBED,
    on_load_minimal: (config) => {
      state.config = canonical_config(state.schema, config);
      after_edit({ structural: true, immediate: true });
      $('stack-editor').scrollIntoView({ behavior: 'smooth', block: 'start' });
    },
  });
  $('report-export').hidden = false;
}

function render_embed_experiment() {
  const preset = matching_preset();
  const c = canonical_config(state.schema, state.config);
  const layer_count = (list) => (Array.isArray(list) ? list.reduce((n, l) => n + 1 + (Array.isArray(l?.body) ? layer_count(l.body) : 0), 0) : 0);
  clear(
    $('embed-experiment'),
    h('p', { class: 'embed-title' }, h('strong', {}, preset ? preset.title : 'Custom experiment'), ` · ${c.dtype}, batch ${c.shape?.batch}, tokens ${c.shape?.tokens}, features ${c.shape?.features}, seed ${c.seed}, ${layer_count(c.layers)} layers`),
    preset ? h('p', { class: 'claim' }, preset.claim) : null,
    h('details', {}, h('summary', {}, 'Config (JSON)'), h('pre', { class: 'config-pre' }, config_text())),
  );
  $('open-full').href = full_url();
}

// ---------------------------------------------------------------------------------------------
// Edits

function on_form_edit(edit) {
  after_edit(edit);
}

/** After any change of state.config made by the page (form, preset, minimal model, link). */
function after_edit({ structural, immediate }) {
  if (state.error?.source === 'json') state.error = null;
  $('config-json').value = config_text();
  if (structural) render_editor();
  render_presets();
  update_link();
  analyze_soon(immediate);
}

function on_json_input() {
  const text = $('config-json').value;
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    state.error = { source: 'json', message: json_error_message(text, e) };
    render_message();
    return;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    state.error = { source: 'json', message: 'the config must be a JSON object, {"layers": [...]}' };
    render_message();
    return;
  }
  if (state.error?.source === 'json') state.error = null;
  state.config = parsed;
  render_editor();
  render_presets();
  render_message();
  update_link();
  analyze_soon(true);
}

/** "Unexpected token } in JSON at position 42" -> with line and column. */
function json_error_message(text, e) {
  const m = /position (\d+)/.exec(e.message);
  if (!m) return e.message;
  const pos = Number(m[1]);
  const before = text.slice(0, pos);
  const line = before.split('\n').length;
  const column = pos - before.lastIndexOf('\n');
  return `${e.message.replace(/ in JSON at position \d+.*$/, '')} at line ${line}, column ${column}`;
}

function load_preset(name) {
  const preset = state.presets.find((p) => p.name === name);
  if (!preset) return;
  state.error = null;
  state.config = canonical_config(state.schema, JSON.parse(preset.config));
  render_message();
  after_edit({ structural: true, immediate: true });
}

// ---------------------------------------------------------------------------------------------
// Analysis

let analysis_queued = false;
function analyze_soon(immediate) {
  clearTimeout(analysis_timer);
  if (!immediate) {
    analysis_timer = setTimeout(run_analysis, TYPING_DELAY_MS);
    return;
  }
  // At the end of this task, not in a later one: a timeout, even of 0 ms, let the browser draw
  // a frame first, which kept the engine waiting 10-20 ms after every click. Several edits in
  // one task still make one analysis.
  if (analysis_queued) return;
  analysis_queued = true;
  queueMicrotask(() => {
    analysis_queued = false;
    run_analysis();
  });
}

async function run_analysis() {
  const text = JSON.stringify(state.config);
  if (text === state.report_text && state.report) {
    // Back to the experiment the tables already show (e.g. an invalid edit undone): nothing to run.
    if (engine.busy) engine.cancel('not needed any more');
    done_progress();
    state.requested_text = text;
    state.cancelled = false;
    if (state.error && state.error.source !== 'json') state.error = null;
    render_message();
    sync_editor_error();
    mark_analysed(true);
    return;
  }
  if (text === state.requested_text && engine.busy) return;
  state.requested_text = text;
  if (state.cancelled) {
    state.cancelled = false;
    render_message();
  }
  clearTimeout(progress_timer);
  progress_timer = setTimeout(() => show_progress(true), PROGRESS_DELAY_MS);
  let result;
  try {
    result = await engine.analyze(text, { on_progress: set_progress });
  } catch (e) {
    if (e instanceof CancelledError) {
      if (e.message === 'cancelled') {
        done_progress();
        state.requested_text = '';
        state.cancelled = true;
        render_message();
      }
      return; // superseded: the newer request owns the progress bar
    }
    done_progress();
    state.error = e instanceof EngineError ? { source: 'engine', path: e.path, message: e.detail } : { source: 'fatal', message: String(e.message ?? e) };
    if (!(e instanceof EngineError)) state.requested_text = '';
    render_message();
    sync_editor_error();
    mark_analysed(false);
    return;
  }
  done_progress();
  if (text !== JSON.stringify(state.config)) return; // the config moved on meanwhile
  state.report = result.report;
  state.report_text = text;
  state.report_ms = result.ms;
  document.documentElement.dataset.roundTripMs = String(Math.round(result.round_trip_ms));
  if (state.error && state.error.source !== 'json') state.error = null;
  render_message();
  sync_editor_error();
  render_report();
  mark_analysed(true);
}

// A counter on <html> that tests (and anyone scripting the page) can wait on; the first
// analysis also leaves a performance mark (bench/browser-bench.mjs reads the boot phases).
function mark_analysed(ok) {
  const root = document.documentElement.dataset;
  if (!root.analyses) performance.mark('biaslab:first-analysis');
  root.analyses = String(Number(root.analyses ?? 0) + 1);
  root.lastAnalysis = ok ? 'ok' : 'error';
  document.dispatchEvent(new CustomEvent('biaslab:analysed', { detail: { ok } }));
}

function set_progress(step, fraction) {
  $('progress-bar').value = fraction;
  $('progress-text').textContent = `${step} (${Math.round(fraction * 100)}%)`;
}

function show_progress(on) {
  $('progress').hidden = !on;
  document.documentElement.classList.toggle('busy', on);
}

function done_progress() {
  clearTimeout(progress_timer);
  show_progress(false);
  $('progress-bar').value = 0;
  $('progress-text').textContent = '';
}

// ---------------------------------------------------------------------------------------------
// Links, sharing, theme

function share_hash() {
  return encode_link(state.schema, state.config);
}

function full_url() {
  const url = new URL(location.href);
  url.searchParams.delete('embed');
  url.hash = share_hash();
  return url.href;
}

function embed_url() {
  const url = new URL(location.href);
  url.searchParams.set('embed', '1');
  url.hash = share_hash();
  return url.href;
}

/** Keeps the address bar on the current experiment without adding history entries. */
function update_link() {
  if (EMBED) return; // an embedded page never rewrites its own URL
  clearTimeout(hash_timer);
  hash_timer = setTimeout(() => {
    const hash = share_hash();
    if (location.hash !== hash) history.replaceState(history.state, '', hash);
  }, 150);
}

function flash_status(text) {
  const el = $('copy-status');
  el.textContent = text;
  clearTimeout(flash_status.timer);
  flash_status.timer = setTimeout(() => (el.textContent = ''), 4000);
}

function embed_snippet() {
  const title = matching_preset()?.title ?? 'custom experiment';
  // class="biaslab-embed" is what the host-page listener in docs/embed.md looks for.
  return `<iframe class="biaslab-embed" src="${embed_url().replace(/&/g, '&amp;')}" title="biaslab: ${title.replace(/&/g, '&amp;').replace(/"/g, '&quot;')}" style="width:100%;border:0" height="900" loading="lazy"></iframe>`;
}

function apply_theme_choice() {
  const select = $('theme');
  let choice = 'system';
  try {
    choice = params.get('theme') || localStorage.getItem('biaslab-theme') || 'system';
  } catch {
    /* storage blocked: follow the system */
  }
  select.value = ['light', 'dark'].includes(choice) ? choice : 'system';
  set_theme(select.value, false);
}

function set_theme(choice, save = true) {
  if (choice === 'light' || choice === 'dark') document.documentElement.dataset.theme = choice;
  else delete document.documentElement.dataset.theme;
  if (save) {
    try {
      if (choice === 'system') localStorage.removeItem('biaslab-theme');
      else localStorage.setItem('biaslab-theme', choice);
    } catch {
      /* not saved; the choice still applies to this page */
    }
  }
  refresh_plot($('results-body'), state.report);
}

function wire_controls() {
  $('preset').addEventListener('change', (e) => e.target.value && load_preset(e.target.value));
  let json_timer = null;
  $('config-json').addEventListener('input', () => {
    clearTimeout(json_timer);
    json_timer = setTimeout(on_json_input, TYPING_DELAY_MS);
  });
  $('cancel').addEventListener('click', () => engine.cancel());
  $('copy-link').addEventListener('click', async () => {
    const ok = await copy_text(full_url());
    flash_status(ok ? 'Link copied.' : 'Copy failed: copy the address bar instead.');
  });
  $('copy-embed').addEventListener('click', async () => {
    const ok = await copy_text(embed_snippet());
    flash_status(ok ? 'Embed snippet copied (see docs/embed.md for the height listener).' : 'Copy failed.');
  });
  $('theme').addEventListener('change', (e) => set_theme(e.target.value));
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => refresh_plot($('results-body'), state.report));
  $('download-json').addEventListener('click', () => state.report && download('biaslab-report.json', JSON.stringify(state.report, null, 2) + '\n', 'application/json'));
  $('download-torch').addEventListener('click', async () => {
    const button = $('download-torch');
    button.disabled = true;
    flash_status('Writing the PyTorch script and weights…');
    try {
      const bundle = await engine.export_torch(config_text());
      download('biaslab-experiment.py', bundle.script, 'text/x-python');
      const bytes = Uint8Array.from(atob(bundle.weights_base64), (c) => c.charCodeAt(0));
      download('biaslab-experiment.safetensors', new Blob([bytes], { type: 'application/octet-stream' }));
      flash_status('Saved biaslab-experiment.py and biaslab-experiment.safetensors: run python3 biaslab-experiment.py biaslab-experiment.safetensors');
    } catch (e) {
      flash_status(`Export failed: ${e.message}`);
    } finally {
      button.disabled = false;
    }
  });
  // A pasted link in the same tab: load it (replaceState never fires this, so no loop).
  window.addEventListener('hashchange', () => {
    state.config = config_from_link(location.hash);
    state.error = null;
    render_message();
    render_all_inputs();
    analyze_soon(true);
  });
  render_message();
}

boot();
