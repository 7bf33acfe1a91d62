// The page: wires the engine (a Web Worker), the editors, the results and the share link.
// All state lives in `state`. Handlers change it and call render(), the one render path: it
// compares each view with what it showed last (`shown`) and redraws only what changed, so the
// form is rebuilt only when its structure changed and never under a box being typed in.
import 'virtual:katex.css'; // KaTeX's CSS, cut to the pre-typeset formulas (tools/katex-prerender.js)
import 'uplot/dist/uPlot.min.css';
import './style.css';

import glue_url from '@wasm/biaslab.js?url';
import wasm_url from '@wasm/biaslab.wasm?url';
import full_glue_url from '@wasm/biaslab-full.js?url';
import full_wasm_url from '@wasm/biaslab-full.wasm?url';
import export_glue_url from '@wasm/biaslab-export.js?url';
import export_wasm_url from '@wasm/biaslab-export.wasm?url';

import { EngineClient, EngineError, CancelledError } from './engine-client.js';
import { canonical_config, format_config, same_json, minimal_config } from './experiment.js';
import { create_store, dispatch, can_undo, can_redo } from './edits.js';
import { decode_link, encode_link, LinkError, crc32 } from './share-codec.js';
import { render_stack_editor, mark_editor_error, error_place, refresh_layer_widths } from './layer-editor.js';
import { render_results, refresh_plot } from './results.js';
import { h, clear, copy_text, download } from './dom.js';
import { render_glossary, wire_term_tips, prefetch_glossary } from './glossary.js';
// The preset menu and the default experiment; every preset's sentence and config come in their
// own module, fetched at start but outside the first load (tools/presets-module.js).
import preset_index, { first as first_preset } from 'virtual:preset-index';

let presets_module = null;
// The experiment the page opened with (a link's, else the default): once every preset has
// landed, Reset goes back to the preset it came from even if it was edited meanwhile.
let opened_with = null;

/** Resolves once state.presets holds every preset; a failed fetch is said and tried again on
 * the next call. */
function every_preset() {
  presets_module ??= import('virtual:presets');
  return presets_module.then(
    (m) => {
      if (state.presets.every((p) => p.config)) return;
      state.presets = m.default;
      preset_match.key = null;
      const mine = opened_with && canonical_config(state.schema, opened_with);
      const origin = mine && state.presets.find((p) => same_json(canonical_preset(p), mine));
      if (origin && state.base_preset === 'default') state.base_preset = origin.name;
      shown.presets = null;
      shown.embed = null; // an embed's title names its preset
      note_preset();
      render();
    },
    (e) => {
      presets_module = null;
      flash_status('header', `The presets could not be loaded (${e?.message ?? e}); choosing one tries again.`);
      throw e;
    },
  );
}

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const EMBED = params.get('embed') === '1';
// An embed's sections (docs/embed.md): any of these, comma-separated; none given: all but card.
const EMBED_SECTIONS = ['biases', 'folds', 'stack', 'sweep', 'invariances', 'card'];
const DEFAULT_SECTIONS = EMBED_SECTIONS.filter((s) => s !== 'card');
// Unknown names are ignored; none known left: the default, never an empty page.
const SHOW = ((asked) => (asked.size ? asked : null))(new Set(EMBED ? (params.get('show') ?? '').split(',').filter((s) => EMBED_SECTIONS.includes(s)) : []));
// workers=N: at most N workers for one analysis (a large one splits over them); unset: the
// cores, at most 4. For comparing timings; the reports are the same.
const WORKERS = Number(params.get('workers')) || undefined;
const PROGRESS_DELAY_MS = 150; // analyses shorter than this never show a progress bar
const TYPING_DELAY_MS = 300; // debounce for number boxes and the JSON text
const STATUS_MS = 4000; // how long a "Link copied." or export notice stays
const CACHED_REPORTS = 16; // recent reports kept for undo/redo

const state = {
  schema: null,
  presets: [],
  version: '',
  /** The experiment being edited (may be invalid for the engine). Changed only through
   * apply(): an edit (edits.js) handed to the reducer, which also keeps `history`. */
  config: null,
  /** @type {{source: 'json'|'engine'|'link'|'fatal', path?: string, message: string} | null} */
  error: null,
  /** A message about the link that opened the page (shown above the default experiment). */
  link_notice: null,
  /** A module fetched on demand that did not arrive: why (its part of the page stays unfinished). */
  missing: null,
  /** Set when the reader cancelled: the results shown belong to an earlier experiment. */
  cancelled: false,
  /** The last good report and the config text it answers. */
  report: null,
  report_text: '',
  report_ms: 0,
  /** The config text of the analysis in flight or last asked for. */
  requested_text: '',
  /** An analysis is due or running for the experiment on screen (from the edit to its answer):
   * the results shown are then stale, and say so. */
  pending: false,
  /** The first-visit "how to read this" (dismissed once, remembered in localStorage). */
  intro: false,
  /** Recent good reports by config text (JSON.stringify(config)), oldest first: undo and redo
   * show the numbers of an experiment seen before without running it again. */
  reports: new Map(),
  /** Experiment-level undo, as config texts (edits.js). `present` is the last recorded step;
   * typing in a box is recorded when the box is left (its `change` event), every other edit at once. */
  history: null,
  /** The preset "Reset to preset" goes back to: the last one loaded or matched. */
  base_preset: 'default',
  /** Short notices beside the control that caused them (cleared after STATUS_MS). */
  status: { header: '', export: '' },
};

let engine = null;
/** Pending timeouts (cleared and replaced, never more than one of each), and whether an
 * analysis is queued for the end of the current task. */
const timers = { analysis: null, progress: null, hash: null, json: null, status: {}, queued: false };
/** What each view shows now; render() compares it with `state`. */
const shown = { form: null, form_error: null, widths: null, json: null, presets: null, embed: null, link: null, message: null, report: null };

// ---------------------------------------------------------------------------------------------
// Boot

async function boot() {
  performance.mark('biaslab:boot');
  // A module fetched on demand (a table's export, a plot, the glossary...) that does not arrive,
  // because the network went away or the site changed since this page loaded: said once, here.
  addEventListener('unhandledrejection', ({ reason }) => {
    if (!/imported module|module script/i.test(reason?.message)) return;
    state.missing = reason.message;
    render();
  });
  apply_theme_choice();
  if (EMBED) document.documentElement.classList.add('embed');
  // show=: the chosen sections only, under one compact title line (style.css, .embed-only).
  if (SHOW) document.documentElement.classList.add('embed-only');
  render_glossary($('glossary'));
  wire_term_tips();
  engine = new EngineClient({
    glue_url: new URL(glue_url, location.href).href,
    wasm_url: new URL(wasm_url, location.href).href,
    full_glue_url: new URL(full_glue_url, location.href).href,
    full_wasm_url: new URL(full_wasm_url, location.href).href,
    export_glue_url: new URL(export_glue_url, location.href).href,
    export_wasm_url: new URL(export_wasm_url, location.href).href,
    make_worker: () => new Worker(new URL('./engine-worker.js', import.meta.url), { type: 'classic', name: 'biaslab-engine' }),
    workers: WORKERS,
  });
  let info;
  try {
    info = await engine.start();
  } catch (e) {
    state.error = { source: 'fatal', message: `The engine could not start in this browser: ${e.message ?? e}` };
    render();
    clear($('stack-editor'), h('p', { class: 'warn' }, 'The engine is not available.'));
    return;
  }
  state.schema = info.schema;
  // Until every preset has landed, only the default has its sentence and config.
  state.presets = preset_index.map((p) => (p.name === first_preset.name ? first_preset : p));
  state.version = info.version;
  $('version').textContent = info.version;
  // The articles' claims (their panel and a preset's links to them) come in their own module,
  // fetched now but outside the first load's budget; the preset line gains its links when it lands.
  import('./claims.js').then((m) => {
    claims = m;
    if (!EMBED) m.render_claims($('claims'), { presets: state.presets, on_load: load_preset });
    shown.presets = null;
    render();
  });

  Object.assign(state, create_store(config_from_link(location.hash)));
  opened_with = state.config;
  every_preset().catch(() => {});
  state.intro = !EMBED && !stored('biaslab-intro-seen');
  note_preset();
  wire_controls();
  render();
  if (EMBED) import('./embed.js').then(({ start_embed }) => start_embed({ open_url: () => full_url() }));
  analyze_soon(true);
}

function default_config() {
  return canonical_config(state.schema, JSON.parse(first_preset.config));
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

/** The experiment as the page compares, caches and records it. */
const config_key = () => JSON.stringify(state.config);

function config_text() {
  return format_config(canonical_config(state.schema, state.config));
}

/** The one render path: every handler changes `state`, then calls this. */
function render() {
  render_message();
  render_status();
  render_results_state();
  if (!state.schema) return;
  const key = config_key();
  if (shown.form !== key) {
    render_stack_editor($('stack-editor'), { schema: state.schema, config: state.config, on_edit: on_form_edit });
    shown.form = key;
    shown.form_error = null;
    shown.widths = key;
  }
  if (shown.widths !== key) {
    refresh_layer_widths($('stack-editor'), state.schema, state.config);
    shown.widths = key;
  }
  const e = state.error?.source === 'engine' ? state.error : null;
  const error_key = e ? `${e.path}\n${e.message}` : '';
  if (shown.form_error !== error_key) {
    // Marked on the controls in place: a rebuild here lost the caret of the box being typed in.
    mark_editor_error($('stack-editor'), e?.path, e?.message, 'message');
    shown.form_error = error_key;
  }
  if (shown.json !== key) {
    $('config-json').value = config_text();
    shown.json = key;
  }
  if (shown.presets !== key) {
    render_presets();
    shown.presets = key;
  }
  if (EMBED && shown.embed !== key) {
    render_embed_experiment();
    shown.embed = key;
  }
  if (shown.link !== key) {
    update_link();
    shown.link = key;
  }
  if (shown.report !== state.report) {
    render_report();
    shown.report = state.report;
  }
  render_history();
}

/** The claims module (claims.js) once it has loaded. */
let claims = null;

function render_presets() {
  const select = $('preset');
  const current = matching_preset();
  clear(
    select,
    h('option', { value: '', selected: !current }, 'Custom experiment'),
    state.presets.map((p) => h('option', { value: p.name, selected: current?.name === p.name }, p.title)),
  );
  select.disabled = false;
  clear($('claim'), current ? [current.claim, claims?.claim_links(current.name)] : 'Your own layer stack: edit it on the left or in the JSON.');
}

function render_history() {
  // Typing not yet recorded counts: leaving the box for the button records it first.
  $('undo').disabled = !can_undo(state);
  $('redo').disabled = !can_redo(state);
  const base = state.presets.find((p) => p.name === state.base_preset);
  const reset = $('reset');
  reset.disabled = !base || matching_preset() === base;
  reset.title = base ? `Back to the preset "${base.title}" as it was loaded (Undo brings your edits back).` : '';
}

// Each preset's canonical config, made once: every edit compares the experiment with all of them.
// Read-only; loading a preset makes a fresh copy to edit.
const canonical_presets = new WeakMap();
function canonical_preset(preset) {
  if (!canonical_presets.has(preset)) canonical_presets.set(preset, canonical_config(state.schema, JSON.parse(preset.config)));
  return canonical_presets.get(preset);
}

const preset_match = { key: null, preset: null };
function matching_preset() {
  const key = config_key();
  if (preset_match.key !== key) {
    const mine = canonical_config(state.schema, state.config);
    preset_match.key = key;
    preset_match.preset = state.presets.find((p) => p.config && same_json(canonical_preset(p), mine)) ?? null;
  }
  return preset_match.preset;
}

/** An experiment equal to a preset makes that preset the one "Reset to preset" goes back to. */
function note_preset() {
  const p = matching_preset();
  if (p) state.base_preset = p.name;
}

/** Downloads are named after the preset, else "custom-" and the share link's checksum. */
function file_stem(config = state.config) {
  const c = config === state.config ? matching_preset() : null;
  if (c) return `biaslab-${c.name}`;
  return `biaslab-custom-${crc32(JSON.stringify(minimal_config(state.schema, config))).toString(36)}`;
}

function render_message() {
  const box = $('message');
  const e = state.error;
  const key = JSON.stringify([state.link_notice, state.missing, state.cancelled, e, Boolean(state.report)]);
  if (shown.message === key) return; // unchanged: keep its buttons (and their focus)
  shown.message = key;
  const parts = [];
  // A broken link is the first thing to say, so it sits above the experiment.
  const notice = $('link-notice');
  clear(
    notice,
    state.link_notice
      ? h('p', {}, h('strong', {}, 'Link problem: '), state.link_notice, ' ', h('button', { type: 'button', class: 'small', onclick: () => { state.link_notice = null; render(); } }, 'Dismiss'))
      : null,
  );
  notice.hidden = !state.link_notice;
  if (state.cancelled && !e)
    parts.push(
      h(
        'p',
        { class: 'cancel-notice' },
        h('strong', {}, 'Analysis cancelled. '),
        state.report ? 'The results below are for the last finished analysis, not for the experiment above. ' : '',
        h('button', { type: 'button', class: 'small', id: 'run-again', onclick: () => analyze_soon(true) }, 'Run it anyway'),
      ),
    );
  if (e) {
    const where = e.path ? [error_place(e.path), ': '] : e.source === 'json' ? 'JSON: ' : '';
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
  if (state.missing) parts.push(h('p', { class: 'error-text' }, `Part of the page did not load (${state.missing}): reload the page.`));
  clear(box, parts);
  box.hidden = parts.length === 0;
}

/** Results that do not answer the experiment on screen are dimmed; while a newer analysis is
 * due or running they also say "Updating…" and carry aria-busy. The dimming waits a moment in
 * CSS (transition-delay), so a 30 ms analysis does not flash. */
function render_results_state() {
  const e = state.error;
  const busy = Boolean(state.report && state.pending);
  const stale = Boolean(state.report && (busy || (e && e.source !== 'fatal') || state.cancelled));
  const results = $('results');
  results.classList.toggle('stale', stale);
  results.classList.toggle('updating', busy);
  results.setAttribute('aria-busy', String(busy));
  $('results-state').hidden = !busy;
  $('how-to-read').hidden = !state.intro;
}

function render_status() {
  $('copy-status').textContent = state.status.header;
  $('export-status').textContent = state.status.export;
}

function render_report() {
  if (!state.report) return;
  const report_config = JSON.parse(state.report_text);
  render_results($('results-body'), state.report, {
    ms: state.report_ms,
    embed: EMBED,
    show: SHOW,
    param: params.get('param'),
    schema: state.schema,
    // Named after the experiment the tables answer, which may lag behind the editor.
    file_stem: () => (state.report_text === config_key() ? file_stem() : file_stem(report_config)),
    on_load_minimal: (config) => {
      apply({ op: 'load', config: canonical_config(state.schema, config) });
      after_edit();
      $('stack-editor').scrollIntoView({ behavior: 'smooth', block: 'start' });
    },
  });
  $('report-export').hidden = false;
  prefetch_glossary(); // its texts, once the first tables are drawn
}

function render_embed_experiment() {
  const preset = matching_preset();
  const c = canonical_config(state.schema, state.config);
  const layer_count = (list) =>
    Array.isArray(list) ? list.reduce((n, l) => n + 1 + layer_count(l?.body) + (Array.isArray(l?.branches) ? l.branches.reduce((k, b) => k + layer_count(b), 0) : 0), 0) : 0;
  const title = h('p', { class: 'embed-title' }, SHOW ? 'biaslab: ' : null, h('strong', {}, preset ? preset.title : 'Custom experiment'), ` · ${c.dtype}, batch ${c.shape?.batch}, tokens ${c.shape?.tokens}, features ${c.shape?.features}, seed ${c.seed}, ${layer_count(c.layers)} layers`);
  clear(
    $('embed-experiment'),
    title,
    SHOW ? null : [preset ? h('p', { class: 'claim' }, preset.claim) : null, h('details', {}, h('summary', {}, 'Config (JSON)'), h('pre', { class: 'config-pre' }, config_text()))],
  );
  // With show=, the link to the full page ends the title line (a redraw moves it to the new one:
  // it is held here, since the old title leaves the document with it).
  open_full ??= $('open-full');
  if (SHOW) title.append(' ', open_full);
  open_full.href = full_url();
}
let open_full = null;

// ---------------------------------------------------------------------------------------------
// Edits and history

/** The one way the page changes the experiment: an edit (edits.js: add_layer, remove_layer,
 * move_layer, set_type, set_option, set_field, load; or record, undo, redo) through the reducer,
 * which also records undo steps. `record: false` leaves typing to be recorded when its box is
 * left. @returns {boolean} whether the experiment changed */
function apply(action, { record = true } = {}) {
  const next = dispatch(state.schema, state, action, { record });
  const changed = next.config !== state.config;
  state.config = next.config;
  state.history = next.history;
  return changed;
}

/** An edit dispatched by the form. Typing in a number box (immediate: false) is neither rebuilt
 * nor recorded here: the box already shows it, and its change event records it. */
function on_form_edit({ action, structural, immediate }) {
  if (!apply(action, { record: immediate })) return;
  if (!structural) shown.form = config_key();
  after_edit({ immediate });
}

/** After any change of state.config made by the page (form, preset, minimal model, link). */
function after_edit({ immediate = true } = {}) {
  if (state.error?.source === 'json') state.error = null;
  note_preset();
  render();
  analyze_soon(immediate);
}

/** One undo step: the experiment as it is now, if it changed since the last step. */
const record = () => apply({ op: 'record' });

/** Undo or redo; typing not recorded yet is the step to undo. */
function step_history(op) {
  flush_json();
  if (!apply({ op })) return;
  if (state.error?.source === 'json') state.error = null;
  note_preset();
  render();
  analyze_soon(true);
}
const undo = () => step_history('undo');
const redo = () => step_history('redo');

/** Ctrl+Z / Ctrl+Shift+Z / Ctrl+Y outside text boxes; inside one the browser undoes typing. */
function on_history_key(event) {
  if (!(event.ctrlKey || event.metaKey) || event.altKey) return;
  const key = event.key.toLowerCase();
  const is_redo = (key === 'z' && event.shiftKey) || (key === 'y' && !event.shiftKey);
  if (key !== 'z' && !is_redo) return;
  const t = event.target;
  if (t instanceof HTMLTextAreaElement || (t instanceof HTMLInputElement && !['checkbox', 'radio', 'button'].includes(t.type)) || t?.isContentEditable) return;
  event.preventDefault();
  if (is_redo) redo();
  else undo();
}

function on_json_input() {
  clearTimeout(timers.json);
  timers.json = null;
  const text = $('config-json').value;
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    state.error = { source: 'json', message: json_error_message(text, e) };
    render();
    return;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    state.error = { source: 'json', message: 'the config must be a JSON object, {"layers": [...]}' };
    render();
    return;
  }
  if (state.error?.source === 'json') state.error = null;
  apply({ op: 'load', config: parsed }, { record: false }); // recorded when the box is left
  shown.json = config_key(); // the text stays as typed
  note_preset();
  render();
  analyze_soon(true);
}

/** Applies JSON typing still waiting for its debounce (before undo, or when the box is left). */
function flush_json() {
  if (timers.json !== null) on_json_input();
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
  if (!preset.config) {
    // Chosen before every preset has landed: loaded when they do, unless the experiment has
    // changed meanwhile (an edit, undo or another link is the newer wish).
    const asked = config_key();
    every_preset().then(() => config_key() === asked && load_preset(name), () => {});
    return;
  }
  state.error = null;
  apply({ op: 'load', config: canonical_config(state.schema, JSON.parse(preset.config)) });
  after_edit();
}

// ---------------------------------------------------------------------------------------------
// Analysis

function analyze_soon(immediate) {
  clearTimeout(timers.analysis);
  if (!state.pending) {
    state.pending = true;
    render_results_state();
  }
  if (!immediate) {
    timers.analysis = setTimeout(run_analysis, TYPING_DELAY_MS);
    return;
  }
  // At the end of this task, not in a later one: a timeout, even of 0 ms, let the browser draw
  // a frame first, which kept the engine waiting 10-20 ms after every click. Several edits in
  // one task still make one analysis.
  if (timers.queued) return;
  timers.queued = true;
  queueMicrotask(() => {
    timers.queued = false;
    run_analysis();
  });
}

async function run_analysis() {
  const text = config_key();
  const cached = state.reports.get(text);
  if (cached) {
    // An experiment analysed before (an invalid edit undone, undo, redo): nothing to run.
    if (engine.busy) engine.cancel('not needed any more');
    done_progress();
    state.pending = false;
    state.requested_text = text;
    state.cancelled = false;
    if (state.error && state.error.source !== 'json') state.error = null;
    show_report(text, cached);
    render();
    mark_analysed(true);
    return;
  }
  if (text === state.requested_text && engine.busy) return;
  state.requested_text = text;
  if (state.cancelled) {
    state.cancelled = false;
    render();
  }
  clearTimeout(timers.progress);
  timers.progress = setTimeout(() => show_progress(true), PROGRESS_DELAY_MS);
  let result;
  try {
    result = await engine.analyze(text, { on_progress: set_progress });
  } catch (e) {
    if (e instanceof CancelledError) {
      if (e.message === 'cancelled') {
        done_progress();
        state.pending = false;
        state.requested_text = '';
        state.cancelled = true;
        render();
      }
      return; // superseded: the newer request owns the progress bar
    }
    done_progress();
    state.pending = false;
    state.error = e instanceof EngineError ? { source: 'engine', path: e.path, message: e.detail } : { source: 'fatal', message: String(e.message ?? e) };
    if (!(e instanceof EngineError)) state.requested_text = '';
    render();
    mark_analysed(false);
    return;
  }
  done_progress();
  if (text !== config_key()) return; // the config moved on meanwhile
  state.pending = false;
  const entry = { report: result.report, ms: result.ms };
  state.reports.set(text, entry);
  if (state.reports.size > CACHED_REPORTS) state.reports.delete(state.reports.keys().next().value);
  show_report(text, entry);
  document.documentElement.dataset.roundTripMs = String(Math.round(result.round_trip_ms));
  if (state.error && state.error.source !== 'json') state.error = null;
  render();
  mark_analysed(true);
}

function show_report(text, { report, ms }) {
  state.reports.delete(text); // most recently shown last: the first to go is the oldest
  state.reports.set(text, { report, ms });
  state.report = report;
  state.report_text = text;
  state.report_ms = ms;
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
  clearTimeout(timers.progress);
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

/** The snippet builder's choices: sections, the card's parameter, theme. */
const embed_choice = { show: [...DEFAULT_SECTIONS], param: '', theme: 'auto' };

function embed_url() {
  const url = new URL(location.href);
  url.search = '';
  url.searchParams.set('embed', '1');
  const show = EMBED_SECTIONS.filter((s) => embed_choice.show.includes(s));
  if (show.join() !== DEFAULT_SECTIONS.join()) url.searchParams.set('show', show.join(','));
  if (show.includes('card') && embed_choice.param) url.searchParams.set('param', embed_choice.param);
  if (embed_choice.theme !== 'auto') url.searchParams.set('theme', embed_choice.theme);
  url.hash = share_hash();
  return url.href;
}

/** Keeps the address bar on the current experiment without adding history entries. */
function update_link() {
  if (EMBED) return; // an embedded page never rewrites its own URL
  clearTimeout(timers.hash);
  timers.hash = setTimeout(() => {
    const hash = share_hash();
    if (location.hash !== hash) history.replaceState(history.state, '', hash);
  }, 150);
}

/** A notice in the status beside the control that caused it: 'header' (copy buttons) or 'export'. */
function flash_status(where, text) {
  state.status[where] = text;
  clearTimeout(timers.status[where]);
  timers.status[where] = setTimeout(() => {
    state.status[where] = '';
    render_status();
  }, STATUS_MS);
  render_status();
}

/** What a copied link or snippet carries when the experiment is not a valid one. */
function invalid_note() {
  const e = state.error;
  if (e?.source === 'engine') return ' The experiment is invalid: the link reproduces the invalid config, with its error.';
  if (e?.source === 'json') return ' The JSON text does not parse: the link carries the last config that did.';
  return '';
}

/** The snippet builder under the header's buttons: sections, the card's bias, theme, and the
 * snippet itself (copied on every change of choice by the Copy button). */
function open_embed_builder() {
  let box = $('embed-builder');
  if (!box) {
    box = h('div', { id: 'embed-builder', class: 'embed-builder', role: 'group', 'aria-label': 'Embed snippet' });
    $('copy-embed').closest('div, nav, header').after(box);
  }
  const text = h('textarea', { readonly: true, rows: 3, 'aria-label': 'Embed snippet' });
  const update = () => (text.value = embed_snippet());
  const params_list = (state.report?.biases ?? []).map((b) => b.param);
  if (!embed_choice.param) embed_choice.param = params_list[0] ?? '';
  const check = (s) => h('label', {}, h('input', { type: 'checkbox', value: s, checked: embed_choice.show.includes(s), onchange: (e) => { embed_choice.show = e.target.checked ? [...embed_choice.show, s] : embed_choice.show.filter((x) => x !== s); update(); } }), ` ${s}`);
  clear(
    box,
    h('fieldset', {}, h('legend', {}, 'Sections'), EMBED_SECTIONS.map(check)),
    h('label', {}, 'Card bias ', h('select', { name: 'param', onchange: (e) => { embed_choice.param = e.target.value; update(); } }, params_list.map((p) => h('option', { value: p, selected: p === embed_choice.param }, p)))),
    h('label', {}, ' Theme ', h('select', { name: 'embed-theme', onchange: (e) => { embed_choice.theme = e.target.value; update(); } }, ['auto', 'light', 'dark'].map((t) => h('option', { value: t, selected: t === embed_choice.theme }, t)))),
    text,
    h('button', { type: 'button', class: 'small', onclick: async () => flash_status('header', (await copy_text(embed_snippet())) ? 'Embed snippet copied.' : 'Copy failed.') }, 'Copy'),
    h('button', { type: 'button', class: 'small', onclick: () => box.remove() }, 'Close'),
  );
  update();
}

function embed_snippet() {
  const title = matching_preset()?.title ?? 'custom experiment';
  // class="biaslab-embed" is what the host-page listener in docs/embed.md looks for.
  return `<iframe class="biaslab-embed" src="${embed_url().replace(/&/g, '&amp;')}" title="biaslab: ${title.replace(/&/g, '&amp;').replace(/"/g, '&quot;')}" style="width:100%;border:0" height="900" loading="lazy"></iframe>`;
}

/** localStorage, which a browser may block: then nothing is remembered. */
function stored(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

function store(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    /* not remembered; it still applies to this page */
  }
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
  const json = $('config-json');
  json.addEventListener('input', () => {
    clearTimeout(timers.json);
    timers.json = setTimeout(on_json_input, TYPING_DELAY_MS);
  });
  // Leaving a text box (or Enter in a number box) ends a run of typing: one undo step.
  const end_typing = () => {
    flush_json();
    record();
    render_history();
  };
  json.addEventListener('change', end_typing);
  $('stack-editor').addEventListener('change', end_typing);
  // Typing not recorded yet enables Undo (the button records it when the box is left).
  $('stack-editor').addEventListener('input', () => render_history());
  json.addEventListener('input', () => render_history());
  $('undo').addEventListener('click', undo);
  $('redo').addEventListener('click', redo);
  $('reset').addEventListener('click', () => load_preset(state.base_preset));
  document.addEventListener('keydown', on_history_key);
  $('cancel').addEventListener('click', () => engine.cancel());
  $('how-to-read-dismiss').addEventListener('click', () => {
    state.intro = false;
    store('biaslab-intro-seen', '1');
    render();
    $('results').focus({ preventScroll: true });
  });
  $('copy-link').addEventListener('click', async () => {
    const ok = await copy_text(full_url());
    flash_status('header', ok ? `Link copied.${invalid_note()}` : 'Copy failed: copy the address bar instead.');
  });
  $('copy-embed').addEventListener('click', async () => {
    open_embed_builder();
    const ok = await copy_text(embed_snippet());
    flash_status('header', ok ? `Embed snippet copied (see docs/embed.md for the height listener).${invalid_note()}` : 'Copy failed.');
  });
  $('theme').addEventListener('change', (e) => set_theme(e.target.value));
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => refresh_plot($('results-body'), state.report));
  $('download-json').addEventListener('click', () => {
    if (!state.report) return;
    const stem = state.report_text === config_key() ? file_stem() : file_stem(JSON.parse(state.report_text));
    download(`${stem}-report.json`, JSON.stringify(state.report, null, 2) + '\n', 'application/json');
  });
  $('download-torch').addEventListener('click', () => {
    // The script's title names the preset the experiment matches, as the CLI's does.
    const preset = matching_preset();
    const job = { engine, button: $('download-torch'), config_text: config_text(), stem: file_stem(), title: preset ? `${preset.name} (${preset.title})` : '', say: (text) => flash_status('export', text) };
    job.button.disabled = true; // (from the click on: the module may take a moment)
    import('./torch-download.js').then(
      (m) => m.download_torch(job),
      (err) => {
        job.button.disabled = false;
        throw err; // (said by the missing-module notice)
      },
    );
  });
  // In-page links (the skip link) move focus without touching the fragment: it holds the
  // experiment, and "#results" there read as a broken link that replaced the experiment.
  document.addEventListener('click', (e) => {
    const a = e.target.closest?.('a[href^="#"]:not(.term)');
    const target = a && document.getElementById(a.getAttribute('href').slice(1));
    if (!target || e.defaultPrevented) return;
    e.preventDefault();
    target.scrollIntoView({ block: 'start' });
    target.focus({ preventScroll: true });
  });
  // A pasted link in the same tab: load it (replaceState never fires this, so no loop).
  window.addEventListener('hashchange', () => {
    apply({ op: 'load', config: config_from_link(location.hash) });
    state.error = null;
    after_edit();
  });
}

boot();
