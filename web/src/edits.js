// Edits to the experiment as data, and the one reducer that applies them and keeps the undo
// history. Views never change the config in place: they dispatch an edit such as
//
//   {op: 'add_layer', path: 'layers[0].body', type: 'linear'}     append to a layer list
//   {op: 'add_branch', path: 'layers[0].branches'}                 append a one-layer branch
//   {op: 'remove_layer', path: 'layers[0].branches[1]'}            (also) remove a branch
//   {op: 'remove_layer', path: 'layers[2]'}
//   {op: 'move_layer', path: 'layers[2]', by: -1}                  up (-1) or down (+1)
//   {op: 'set_type', path: 'layers[2]', type: 'gelu'}              a new layer of that type
//   {op: 'set_option', path: 'layers[2]', name: 'eps', value: 1e-6}  undefined: the default
//   {op: 'set_field', name: 'shape.batch', value: 4}               a top-level field
//   {op: 'load', config}                                           preset, link, JSON, minimal model
//
// and main.js hands it to dispatch(). Paths are the engine's JSON paths, as the form's
// data-path attributes. An edit that does not apply (unknown op, a path to nothing, a move past
// an end) leaves the config as it is: bad input never throws. Pure; no DOM (test/node/edits.test.js).
import { new_layer, new_branch, parse_path, get_path } from './experiment.js';

export const HISTORY_STEPS = 200; // undo steps kept

const is_object = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const key = (config) => JSON.stringify(config);

/**
 * The config after one edit: a new object (the input is never changed), or the input itself when
 * the edit does not apply.
 * @param {import('./experiment.js').Schema} schema
 * @param {object} config
 * @param {{op: string, [k: string]: any}} edit
 */
export function apply_edit(schema, config, edit) {
  if (!is_object(edit)) return config;
  if (edit.op === 'load') return is_object(edit.config) ? structuredClone(edit.config) : config;
  if (!is_object(config)) return config;
  const next = structuredClone(config);
  return change(schema, next, edit) ? next : config;
}

/** Applies `edit` to `config` (a copy) in place; false when it does not apply. */
function change(schema, config, edit) {
  const known = (type) => schema.layer_types.some((t) => t.name === type);
  switch (edit.op) {
    case 'set_field': {
      const parts = String(edit.name ?? '').split('.');
      if (!parts[0] || !schema.fields.some((f) => f.name === edit.name && f.type !== 'layers')) return false;
      let o = config;
      for (const p of parts.slice(0, -1)) o = is_object(o[p]) ? o[p] : (o[p] = {});
      set_or_delete(o, parts.at(-1), edit.value);
      // A grid [H, W] sets the tokens: written tokens follow it, so they never disagree.
      const g = edit.value;
      if (edit.name === 'shape.grid' && Array.isArray(g) && g.length === 2 && g.every((n) => Number.isInteger(n) && n > 0) && 'tokens' in o)
        o.tokens = g[0] * g[1];
      return true;
    }
    case 'add_layer': {
      const list = get_path(config, edit.path);
      if (!Array.isArray(list) || !known(edit.type)) return false;
      list.push(new_layer(schema, edit.type));
      return true;
    }
    case 'add_branch': {
      const lists = get_path(config, edit.path);
      if (!Array.isArray(lists) || !lists.every(Array.isArray)) return false;
      lists.push(new_branch(schema));
      return true;
    }
  }
  // The rest name one layer: its list and its index.
  const keys = typeof edit.path === 'string' ? parse_path(edit.path) : [];
  const i = keys.at(-1);
  const list = typeof i === 'number' ? get_path(config, keys.slice(0, -1)) : undefined;
  if (!Array.isArray(list) || i < 0 || i >= list.length) return false;
  switch (edit.op) {
    case 'remove_layer':
      list.splice(i, 1);
      return true;
    case 'move_layer': {
      const j = i + edit.by;
      if (!Number.isInteger(edit.by) || j < 0 || j >= list.length || j === i) return false;
      [list[i], list[j]] = [list[j], list[i]];
      return true;
    }
    case 'set_type':
      if (!known(edit.type)) return false;
      list[i] = new_layer(schema, edit.type);
      return true;
    case 'set_option':
      if (!is_object(list[i]) || typeof edit.name !== 'string' || !edit.name || edit.name === 'type') return false;
      set_or_delete(list[i], edit.name, edit.value);
      return true;
    default:
      return false;
  }
}

function set_or_delete(o, name, value) {
  if (value === undefined) delete o[name];
  else o[name] = value;
}

/**
 * The experiment with its history: `present` is the config text of the last recorded step.
 * @typedef {{config: object, history: {past: string[], present: string, future: string[]}}} Store
 */

/** @returns {Store} */
export function create_store(config) {
  return { config, history: { past: [], present: key(config), future: [] } };
}

/**
 * The one way the experiment changes. `record: false` (typing in a box) leaves the step to be
 * recorded later ({op: 'record'}, when the box is left), so a run of typing is one undo step.
 * Besides the edits above, the reducer takes {op: 'record'}, {op: 'undo'} and {op: 'redo'}.
 * @param {import('./experiment.js').Schema} schema
 * @param {Store} store
 * @param {{op: string, [k: string]: any}} action
 * @param {{record?: boolean}} [options]
 * @returns {Store} a new store, or `store` itself when nothing changed
 */
export function dispatch(schema, store, action, { record = true } = {}) {
  switch (action?.op) {
    case 'record':
      return record_step(store);
    case 'undo':
      return step(record_step(store), 'past', 'future');
    case 'redo':
      return step(record_step(store), 'future', 'past');
  }
  const config = apply_edit(schema, store.config, action);
  if (config === store.config) return store;
  const next = { config, history: store.history };
  return record ? record_step(next) : next;
}

/** The experiment as it is now becomes an undo step, if it changed since the last one. */
function record_step(store) {
  const h = store.history;
  const now = key(store.config);
  if (now === h.present) return store;
  return { config: store.config, history: { past: [...h.past, h.present].slice(-HISTORY_STEPS), present: now, future: [] } };
}

/** Undo (from past to future) or redo (from future to past). */
function step(store, from, to) {
  const h = store.history;
  if (!h[from].length) return store;
  const present = h[from].at(-1);
  return {
    config: JSON.parse(present),
    history: { ...h, [from]: h[from].slice(0, -1), [to]: [...h[to], h.present], present },
  };
}

/** Whether there is anything to undo (typing not yet recorded counts) or redo. */
export const can_undo = (store) => store.history.past.length > 0 || key(store.config) !== store.history.present;
export const can_redo = (store) => store.history.future.length > 0;
