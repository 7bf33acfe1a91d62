// The experiment config (format v1) as plain JS values, driven only by the engine's schema
// (`schema()` of the wasm module): no option of any layer type is named in this file, so the
// page follows the engine's schema (cpp/model/config.cpp, cpp/layers) without edits. Pure functions, no DOM: the Node tests import
// this module directly.

/**
 * @typedef {{name: string, type: 'bool'|'int'|'number'|'enum'|'layers'|'layer_lists', default?: any,
 *            default_note?: string, min?: number, max?: number, exclusive_min?: number,
 *            values?: string[], unit?: string, help: string, min_items?: number}} OptionSpec
 * @typedef {{version: number, fields: OptionSpec[],
 *            layer_types: {name: string, help: string, options: OptionSpec[]}[],
 *            limits: Record<string, number>}} Schema
 * @typedef {{type: string, [option: string]: any}} Layer
 * @typedef {{version?: number, seed?: number, dtype?: string,
 *            shape?: {batch?: number, tokens?: number, features?: number}, layers: Layer[]}} Config
 */

/** @param {Schema} schema @param {string} type */
export function layer_type(schema, type) {
  return schema.layer_types.find((t) => t.name === type) ?? null;
}

/** Top-level fields other than the layer list, with their dotted names ("shape.batch"). */
export function scalar_fields(schema) {
  return schema.fields.filter((f) => f.type !== 'layers');
}

/** @param {Config} config @param {string} dotted "seed" or "shape.batch" */
export function get_field(config, dotted) {
  let v = config;
  for (const part of dotted.split('.')) v = v == null ? undefined : v[part];
  return v;
}

function set_field(config, dotted, value) {
  const parts = dotted.split('.');
  let o = config;
  for (const p of parts.slice(0, -1)) {
    if (typeof o[p] !== 'object' || o[p] === null) o[p] = {};
    o = o[p];
  }
  o[parts[parts.length - 1]] = value;
}

/** The value an option has in a layer: its own, else the schema default (null: "the input width"). */
export function option_value(layer, spec) {
  return Object.prototype.hasOwnProperty.call(layer, spec.name) ? layer[spec.name] : spec.default ?? null;
}

/** A new layer of `type` with every option at its default; a residual gets a one-layer body, a
 * parallel two one-layer branches. */
export function new_layer(schema, type) {
  /** @type {Layer} */
  const layer = { type };
  for (const spec of layer_type(schema, type)?.options ?? []) {
    if (spec.type === 'layers') layer[spec.name] = [new_layer(schema, schema.layer_types[0].name)];
    if (spec.type === 'layer_lists') layer[spec.name] = [new_branch(schema), new_branch(schema)];
  }
  return layer;
}

/** A new branch of a parallel: one layer of the first type. */
export const new_branch = (schema) => [new_layer(schema, schema.layer_types[0].name)];

/**
 * A layer with only the values that differ from the schema defaults, keys in schema order
 * (type first). Unknown types and keys are kept as they are: the engine reports them with
 * their path, and the page must not hide a user's mistake by dropping it.
 * @param {Schema} schema @param {Layer} layer @returns {Layer}
 */
export function minimal_layer(schema, layer) {
  if (typeof layer !== 'object' || layer === null || Array.isArray(layer)) return layer;
  const info = layer_type(schema, layer.type);
  if (!info) return { ...layer };
  /** @type {Layer} */
  const out = { type: layer.type };
  for (const spec of info.options) {
    if (!Object.prototype.hasOwnProperty.call(layer, spec.name)) continue;
    const v = layer[spec.name];
    if (spec.type === 'layers') out[spec.name] = Array.isArray(v) ? v.map((l) => minimal_layer(schema, l)) : v;
    else if (spec.type === 'layer_lists') out[spec.name] = Array.isArray(v) ? v.map((list) => (Array.isArray(list) ? list.map((l) => minimal_layer(schema, l)) : list)) : v;
    else if (!(spec.default !== null && spec.default !== undefined && v === spec.default)) out[spec.name] = v;
  }
  for (const key of Object.keys(layer)) if (!(key in out) && key !== 'type' && !info.options.some((o) => o.name === key)) out[key] = layer[key];
  return out;
}

/**
 * The config as the editor shows it: every top-level field (defaults filled in), layers minimal.
 * @param {Schema} schema @param {Config} config @returns {Config}
 */
export function canonical_config(schema, config) {
  const out = {};
  for (const f of schema.fields) {
    if (f.type === 'layers') {
      const v = get_field(config, f.name);
      set_field(out, f.name, Array.isArray(v) ? v.map((l) => minimal_layer(schema, l)) : v);
    } else {
      const v = get_field(config, f.name);
      // A field whose default is "none" (shape.grid) stays absent, as the engine prints it.
      if ((v === undefined || v === null) && f.default === null) continue;
      set_field(out, f.name, v === undefined ? f.default : v);
    }
  }
  // The engine's one rule between fields: a grid sets the tokens it leaves out (H * W).
  const grid = get_field(out, 'shape.grid');
  if (Array.isArray(grid) && grid.length === 2 && grid.every(Number.isInteger) && get_field(config, 'shape.tokens') === undefined)
    set_field(out, 'shape.tokens', grid[0] * grid[1]);
  // Keys the schema does not know stay visible, so the engine can name them.
  for (const key of Object.keys(config)) if (!(key in out)) out[key] = config[key];
  return out;
}

/**
 * Only what differs from the defaults (what a share link carries): top-level fields equal to
 * their default and the version (it is in the link's prefix) are dropped; layers always stay.
 * @param {Schema} schema @param {Config} config
 */
export function minimal_config(schema, config) {
  const full = canonical_config(schema, config);
  const out = {};
  for (const f of schema.fields) {
    const v = get_field(full, f.name);
    if (f.name === 'version') continue;
    // With a grid, the tokens it implies go (H * W) and any others stay, the default included.
    const grid = get_field(full, 'shape.grid');
    if (f.name === 'shape.tokens' && Array.isArray(grid)) {
      if (v === grid[0] * grid[1]) continue;
    } else if (f.type !== 'layers' && (v === f.default || v === undefined)) continue;
    set_field(out, f.name, v);
  }
  for (const key of Object.keys(full)) if (!(key in out) && key !== 'version' && !schema.fields.some((f) => f.name.split('.')[0] === key)) out[key] = full[key];
  return out;
}

/** Structural equality of two JSON values (key order ignored). */
export function same_json(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same_json(a[k], b[k]));
}

/**
 * The config as text: one line per layer, residual bodies indented, like the presets. Much
 * shorter than JSON.stringify(_, null, 2) for deep stacks, and still plain JSON.
 * @param {Config} config
 */
export function format_config(config) {
  const pad = (n) => ' '.repeat(n);
  const inline = (v) => JSON.stringify(v).replace(/,"/g, ', "').replace(/":/g, '": ');
  const layers = (list, indent) => {
    if (!Array.isArray(list) || list.length === 0) return JSON.stringify(list);
    const lines = list.map((l) => {
      if (Array.isArray(l) && l.some((x) => x && typeof x === 'object')) return pad(indent) + layers(l, indent + 2); // a branch
      if (l && typeof l === 'object' && !Array.isArray(l)) {
        const nested = Object.entries(l).filter(([, v]) => Array.isArray(v) && v.some((x) => x && typeof x === 'object'));
        if (nested.length) {
          const flat = Object.entries(l).filter(([, v]) => !nested.some(([, n]) => n === v));
          const head = flat.map(([k, v]) => `${JSON.stringify(k)}: ${inline(v)}`).join(', ');
          const body = nested.map(([k, v]) => `${JSON.stringify(k)}: ${layers(v, indent + 2)}`).join(', ');
          return pad(indent) + '{' + (head ? head + ', ' : '') + body + '}';
        }
      }
      return pad(indent) + inline(l);
    });
    return '[\n' + lines.join(',\n') + '\n' + pad(indent - 1) + ']';
  };
  const entries = Object.entries(config).map(([k, v]) => {
    const text = k === 'layers' ? layers(v, 3) : inline(v);
    return ` ${JSON.stringify(k)}: ${text}`;
  });
  return '{\n' + entries.join(',\n') + '\n}\n';
}

/**
 * A JSON path in the engine's notation ("layers[2].body[0].num_heads") as a list of keys.
 * @returns {(string|number)[]}
 */
export function parse_path(path) {
  const out = [];
  const re = /([^.[\]]+)|\[(\d+)\]/g;
  let m;
  while ((m = re.exec(path))) out.push(m[2] !== undefined ? Number(m[2]) : m[1]);
  return out;
}

/** @param {(string|number)[]} keys */
export function format_path(keys) {
  return keys.map((k, i) => (typeof k === 'number' ? `[${k}]` : i ? `.${k}` : k)).join('');
}

/**
 * A path as the reader sees it everywhere on the page: the dotted state-dict form
 * ("layers.2.body.0.num_heads", as the parameter "layers.2.body.0.k_proj.bias").
 * @param {string|(string|number)[]} path the engine's JSON path or a list of keys
 */
export function dotted_path(path) {
  return (typeof path === 'string' ? parse_path(path) : path).join('.');
}

/** The value at a path, or undefined. */
export function get_path(root, path) {
  let v = root;
  for (const k of typeof path === 'string' ? parse_path(path) : path) v = v == null ? undefined : v[k];
  return v;
}

/**
 * The width of the activations after each layer, for the editor ("64 -> 256"). Mirrors the
 * one rule that changes widths (a layer option named out_features or out_channels) without
 * naming a type.
 * @param {Layer[]} layers @param {number} width @returns {{in: number, out: number}[]}
 */
export function layer_widths(layers, width) {
  const out = [];
  for (const l of Array.isArray(layers) ? layers : []) {
    const w_in = width;
    const w_out = l?.out_features ?? l?.out_channels;
    if (typeof w_out === 'number' && w_out > 0) width = w_out;
    out.push({ in: w_in, out: width });
  }
  return out;
}
