// The layer stack as the picture draws it (stack-picture.js): each layer with its shape and its
// parameters, each parameter with its verdict from the report and the folds that move it. Pure;
// no DOM (the Node tests import it).
//
// Shapes: tokens x features per sequence (the batch is drawn once, at the input). A layer's
// output width is its out_features or out_channels when it has one, else its input width
// (layer_widths).
//
// Parameters: the report's `layers` lists every parameter each layer declares (name, role,
// shape), from the engine's own declarations (cpp/layers/<kind>.cpp, params()); buffers (BatchNorm's
// running statistics) are left out, as in the report's parameter count. Names the report carries
// elsewhere (a fold's target that did not exist yet) are drawn too, so the picture never hides a
// parameter the tables show.
import { layer_type, layer_widths } from './experiment.js';

/** @typedef {'weight'|'bias'|'gain'|'shift'} Role */
/** @typedef {{name: string, local: string, role: Role, size: number, created?: boolean}} Param */

/**
 * The parameters of each layer of the report, by layer name (buffers left out).
 * @param {object | null} report
 * @returns {Map<string, Param[]>}
 */
function declared_parameters(report) {
  const by_layer = new Map();
  for (const layer of Array.isArray(report?.layers) ? report.layers : []) {
    const params = (layer.params ?? [])
      .filter((p) => p.role !== 'buffer')
      .map((p) => ({ name: p.name, local: p.name.slice(layer.name.length + 1), role: p.role, size: (p.shape ?? []).reduce((n, d) => n * d, 1) }));
    by_layer.set(layer.name, params);
  }
  return by_layer;
}

/**
 * @typedef {{name: string, index: number, type: string, help: string, shape: {in: number, out: number},
 *            params: Param[], body: LayerNode[] | null, branches: LayerNode[][] | null}} LayerNode
 */

/**
 * The config's layers as a tree of nodes with widths and the parameters the report's `layers`
 * declares; every other name the report carries (fold targets) sits in its layer too.
 * @returns {{context: number, tokens: number, grid: number[] | null, batch: number, features: number, out: number, layers: LayerNode[], params: Map<string, Param>}}
 */
export function stack_model(schema, config, report = null) {
  const params = new Map();
  const declared = declared_parameters(report);
  const build = (list, prefix, width) => {
    if (!Array.isArray(list)) return [];
    const widths = layer_widths(list, width);
    return list.map((layer, i) => {
      const name = `${prefix}.${i}`;
      const shape = widths[i];
      const info = layer && typeof layer === 'object' ? layer_type(schema, layer.type) : null;
      const own = declared.get(name) ?? [];
      for (const p of own) params.set(p.name, p);
      const body_spec = info?.options.find((o) => o.type === 'layers');
      const branch_spec = info?.options.find((o) => o.type === 'layer_lists');
      const lists = branch_spec && Array.isArray(layer[branch_spec.name]) ? layer[branch_spec.name] : null;
      return {
        name,
        index: i,
        type: String(layer?.type ?? '?'),
        help: info?.help ?? '',
        shape,
        // cross-attention: the tokens of the context its keys and values read
        context: Number.isInteger(layer?.context_tokens) && layer.context_tokens > 0 ? layer.context_tokens : 0,
        params: own,
        body: body_spec ? build(layer[body_spec.name], `${name}.${body_spec.name}`, shape.in) : null,
        branches: lists ? lists.map((list, b) => build(list, `${name}.${branch_spec.name}.${b}`, shape.in)) : null,
      };
    });
  };
  const features = config?.shape?.features ?? 64;
  const layers = build(config?.layers, 'layers', features);
  // Names in the report that no layer declares (a fold's new target): into the deepest layer
  // whose name prefixes them.
  const named = [...(report?.biases ?? []).map((b) => b.param), ...(report?.folds ?? []).flatMap((f) => (f.moves ?? []).flatMap((m) => [m.from, m.to]))];
  const rows = new Set((report?.biases ?? []).map((b) => b.param));
  for (const name of named) {
    if (typeof name !== 'string' || params.has(name)) continue;
    const owner = deepest_layer(layers, name);
    if (!owner) continue;
    // created: only a fold's target (the value bias folds into an output bias that was off).
    const p = { name, local: name.slice(owner.name.length + 1), role: /(^|\.)bias$/.test(name) ? 'bias' : 'weight', size: 0, created: !rows.has(name) };
    owner.params.push(p);
    params.set(name, p);
  }
  const last = layer_widths(Array.isArray(config?.layers) ? config.layers : [], features).at(-1);
  const grid = config?.shape?.grid;
  const context = (list) => (Array.isArray(list) ? list : []).reduce((t, l) => t || l.context || (l.body && context(l.body)) || (l.branches ?? []).reduce((u, b) => u || context(b), 0), 0);
  return { context: context(layers), tokens: config?.shape?.tokens ?? 0, grid: Array.isArray(grid) && grid.length === 2 ? grid : null, batch: config?.shape?.batch ?? 0, features, out: last?.out ?? features, layers, params };
}

function deepest_layer(layers, name) {
  for (const l of layers) {
    if (!name.startsWith(`${l.name}.`)) continue;
    return (l.body && deepest_layer(l.body, name)) || (l.branches ?? []).reduce((found, b) => found || deepest_layer(b, name), null) || l;
  }
  return null;
}

/**
 * What the report says about each parameter: the bias row (verdict) and the folds that move it.
 * @returns {Map<string, {row?: object, into: {to: string, fold: object}[], dropped: object[], centred: object[]}>}
 */
export function parameter_facts(report) {
  const facts = new Map();
  const get = (name) => {
    if (!facts.has(name)) facts.set(name, { row: undefined, into: [], dropped: [], centred: [] });
    return facts.get(name);
  };
  for (const row of report?.biases ?? []) get(row.param).row = row;
  for (const fold of report?.folds ?? [])
    for (const m of fold.moves ?? []) {
      if (typeof m.from !== 'string') continue;
      if (m.to === null || m.to === undefined) get(m.from).dropped.push(fold);
      else if (m.to === m.from) get(m.from).centred.push(fold);
      else get(m.from).into.push({ to: m.to, fold });
    }
  return facts;
}
