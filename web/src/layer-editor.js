// The layer-stack form, generated from the engine's schema: every top-level field, every layer
// type and every option of each type come from schema(); nothing here names a layer type or an
// option. Each control carries data-path in the engine's notation ("layers[0].body[1].eps"), so
// an engine error lands on the control it names; what the reader sees is the dotted
// state-dict name ("layers.0.body.1"), as in the tables.
//
// The form never changes the config itself: every control dispatches an edit (edits.js), such
// as {op: 'set_option', path: 'layers[0].body[1]', name: 'eps', value: 1e-6}, with how the page
// should take it (structural: rebuild the form; immediate: analyse and record now, not after a
// typing pause). The page rebuilds the form only for structural changes (a layer added, removed,
// moved, retyped; undo; a preset; JSON typed on the other side). Errors are marked on the
// existing controls (mark_editor_error), so a box being typed in keeps its text, caret and undo.
import { h, clear, next_id } from './dom.js';
import { scalar_fields, get_field, layer_type, option_value, layer_widths, format_path, dotted_path } from './experiment.js';

/**
 * @typedef {{action: {op: string, [k: string]: any}, structural: boolean, immediate: boolean, focus?: string}} Edit
 * @param {HTMLElement} root
 * @param {{schema: import('./experiment.js').Schema, config: any, on_edit: (e: Edit) => void}} props
 */
export function render_stack_editor(root, props) {
  const focus = pending_focus ?? document.activeElement?.closest?.('[data-focus]')?.dataset.focus;
  pending_focus = null;
  const { schema, config } = props;
  const edit = (e) => {
    if (e.focus) pending_focus = e.focus;
    props.on_edit(e);
  };
  clear(
    root,
    top_fields(schema, config, edit),
    h('h3', { class: 'stack-title' }, 'Layers'),
    Array.isArray(config.layers)
      ? layer_list(schema, config.layers, ['layers'], config.shape?.features ?? 64, edit)
      : h('p', { class: 'warn' }, 'The config has no layer list; fix it in the JSON.'),
  );
  if (focus) {
    let el = root.querySelector(`[data-focus="${CSS.escape(focus)}"]`);
    // A layer moved to an end has that end's arrow disabled: keep focus on the same layer.
    if (el?.disabled) el = el.closest('.layer-buttons')?.querySelector('button:not(:disabled)');
    el?.focus({ preventScroll: true });
  }
}

let pending_focus = null;

function top_fields(schema, config, edit) {
  const fields = scalar_fields(schema).filter((f) => f.name !== 'version' && !(f.type === 'int' && f.min === f.max));
  return h(
    'fieldset',
    { class: 'top-fields' },
    h('legend', {}, 'Input and precision'),
    fields.map((spec) =>
      control(spec, get_field(config, spec.name), spec.name, spec.name.replace(/^shape\./, ''), (value) => ({ op: 'set_field', name: spec.name, value }), edit),
    ),
  );
}

/** One input for one option or field. action(value) is the edit that stores a value
 * (undefined: back to the default). */
function control(spec, value, path, label_text, action, edit, disabled_note = null, gates = false) {
  const id = next_id('opt');
  const help = spec.help + (spec.default_note ? ` Default: ${spec.default_note}.` : spec.default !== undefined && spec.default !== null ? ` Default: ${spec.default}.` : '') + (disabled_note ? ` (Off: ${disabled_note}.)` : '');
  const common = { id, dataset: { path, focus: `${path}:value` }, title: help, 'aria-describedby': `${id}-help`, disabled: disabled_note ? true : null };
  const help_el = h('span', { id: `${id}-help`, class: 'visually-hidden' }, help);
  if (spec.type === 'bool') {
    const input = h('input', { ...common, type: 'checkbox', checked: value === true });
    input.addEventListener('change', () => {
      // A flag other options need (rope) rebuilds the form, so they turn on or off with it.
      edit({ action: action(input.checked === spec.default ? undefined : input.checked), structural: gates, immediate: true, focus: gates ? `${path}:value` : undefined });
    });
    return h('label', { class: 'opt opt-bool', for: id, title: help }, input, h('span', {}, label_text), help_el);
  }
  if (spec.type === 'enum') {
    const select = h('select', common, (spec.values ?? []).map((v) => h('option', { value: v, selected: v === value }, v)));
    select.addEventListener('change', () => {
      edit({ action: action(select.value === spec.default ? undefined : select.value), structural: false, immediate: true });
    });
    return h('label', { class: 'opt', for: id, title: help }, h('span', {}, label_text), select, help_el);
  }
  if (spec.type === 'grid') {
    // "H x W" (or "H, W", "H W"); empty: no grid. Text that is not two numbers goes to the engine
    // as typed, which names the field, and stays in the box.
    const shown = Array.isArray(value) ? value.join(' × ') : typeof value === 'string' ? value : '';
    const input = h('input', { ...common, type: 'text', inputmode: 'numeric', placeholder: 'none (H × W)', value: shown, size: 9 });
    input.addEventListener('input', () => {
      const text = input.value.trim();
      const m = /^(\d+)\s*(?:[x×*,]|\s)\s*(\d+)$/i.exec(text);
      const v = text === '' ? undefined : m ? [Number(m[1]), Number(m[2])] : text;
      edit({ action: action(v), structural: false, immediate: false });
      // The edit sets the tokens with the grid (edits.js); the tokens box shows them at once.
      const tokens = input.closest('fieldset')?.querySelector('[data-path="shape.tokens"]');
      if (tokens && Array.isArray(v)) tokens.value = String(v[0] * v[1]);
    });
    return h('label', { class: 'opt', for: id, title: help }, h('span', {}, label_text), input, help_el);
  }
  // int and number. An empty box means the default (out_features: the input width), which the
  // placeholder names; a long name ("the head dimension") widens the box rather than being cut.
  const placeholder = String(spec.default_note ?? (spec.default ?? ''));
  const input = h('input', {
    ...common,
    style: placeholder.length > 8 ? { width: `calc(${placeholder.length}ch + 2.5em)` } : null,
    type: 'number',
    inputmode: spec.type === 'int' ? 'numeric' : 'decimal',
    step: spec.type === 'int' ? '1' : 'any',
    min: spec.min ?? spec.exclusive_min,
    max: spec.max,
    placeholder,
    value: value === null || value === undefined ? '' : String(value),
  });
  input.addEventListener('input', () => {
    if (input.validity.badInput) return; // half-typed ("1e"): wait for the rest
    const text = input.value.trim();
    const v = text === '' ? undefined : Number(text);
    edit({ action: action(v === spec.default ? undefined : v), structural: false, immediate: false });
  });
  return h('label', { class: 'opt', for: id, title: help }, h('span', {}, label_text), input, help_el);
}

/** The layers of one list (the stack or a residual body), with their add control. */
function layer_list(schema, layers, path, width, edit) {
  const widths = layer_widths(layers, width);
  const list_path = format_path(path);
  return h(
    'div',
    { class: 'layer-list-wrap' },
    h(
      'ol',
      { class: 'layer-list', dataset: { path: list_path } },
      layers.map((layer, i) => layer_item(schema, layers, i, [...path, i], widths[i], edit)),
    ),
    add_control(schema, path, edit),
  );
}

function add_control(schema, path, edit) {
  const list_path = format_path(path);
  const id = next_id('add');
  const select = h(
    'select',
    { id, dataset: { focus: `${list_path}:add-type` }, 'aria-label': `Type of the layer to add to ${dotted_path(path)}` },
    schema.layer_types.map((t) => h('option', { value: t.name, title: t.help }, t.name)),
  );
  const button = h(
    'button',
    {
      type: 'button',
      class: 'add-layer',
      dataset: { focus: `${list_path}:add` },
      onclick: () => edit({ action: { op: 'add_layer', path: list_path, type: select.value }, structural: true, immediate: true, focus: `${list_path}:add` }),
    },
    '+ Add layer',
  );
  return h('div', { class: 'add-row' }, select, button);
}

function layer_item(schema, layers, i, path, width, edit) {
  const layer = layers[i];
  const p = format_path(path);
  const name = dotted_path(path); // what the reader sees: the state-dict prefix of its parameters
  const info = layer && typeof layer === 'object' ? layer_type(schema, layer.type) : null;
  const type_select = h(
    'select',
    { class: 'layer-type', dataset: { path: `${p}.type`, focus: `${p}:type` }, 'aria-label': `Type of ${name}` },
    info ? null : h('option', { value: '', selected: true }, String(layer?.type ?? '(none)')),
    schema.layer_types.map((t) => h('option', { value: t.name, selected: t.name === layer?.type, title: t.help }, t.name)),
  );
  type_select.addEventListener('change', () => edit({ action: { op: 'set_type', path: p, type: type_select.value }, structural: true, immediate: true, focus: `${p}:type` }));
  const move = (by, key) => {
    const np = format_path([...path.slice(0, -1), i + by]);
    edit({ action: { op: 'move_layer', path: p, by }, structural: true, immediate: true, focus: `${np}:${key}` });
  };
  const buttons = h(
    'span',
    { class: 'layer-buttons' },
    h('button', { type: 'button', class: 'icon', title: 'Move up', 'aria-label': `Move ${name} up`, disabled: i === 0, dataset: { focus: `${p}:up` }, onclick: () => move(-1, 'up') }, '↑'),
    h('button', { type: 'button', class: 'icon', title: 'Move down', 'aria-label': `Move ${name} down`, disabled: i === layers.length - 1, dataset: { focus: `${p}:down` }, onclick: () => move(1, 'down') }, '↓'),
    h(
      'button',
      {
        type: 'button',
        class: 'icon remove',
        title: 'Remove',
        'aria-label': `Remove ${name}`,
        dataset: { focus: `${p}:remove` },
        onclick: () => {
          // Focus moves to the layer that takes this one's place, else the list's add button.
          const left = layers.length - 1;
          const next = left ? format_path([...path.slice(0, -1), Math.min(i, left - 1)]) + ':remove' : `${format_path(path.slice(0, -1))}:add`;
          edit({ action: { op: 'remove_layer', path: p }, structural: true, immediate: true, focus: next });
        },
      },
      '✕',
    ),
  );
  const head = h(
    'div',
    { class: 'layer-head' },
    h('span', { class: 'layer-index', 'aria-hidden': 'true' }, String(i)),
    type_select,
    h('span', { class: 'layer-width', title: 'features in → out', dataset: { widthOf: p } }, width_text(width)),
    buttons,
  );
  const options = [];
  let body = null;
  for (const spec of info?.options ?? []) {
    if (spec.type === 'layer_lists') {
      body = branches_editor(schema, layer[spec.name], [...path, spec.name], spec, width?.in ?? 0, edit);
      continue;
    }
    if (spec.type === 'layers') {
      // Anything but a list stays as the reader wrote it (the engine names the problem); turning
      // it into [] here once made the engine report an empty list instead.
      const list = layer[spec.name];
      body = h(
        'div',
        { class: 'layer-body' },
        h('div', { class: 'layer-body-label' }, `${spec.name} — ${spec.help}`),
        Array.isArray(list)
          ? layer_list(schema, list, [...path, spec.name], width?.in ?? 0, edit)
          : h('p', { class: 'warn', dataset: { path: `${p}.${spec.name}` } }, `${spec.name} is not a list of layers; fix it in the JSON.`),
      );
      continue;
    }
    // An option that needs a flag (rotary_dim needs rope) is disabled while the flag is off and
    // the option holds its default; a value set anyway stays editable so it can be cleared.
    const flag = spec.requires ? info.options.find((o) => o.name === spec.requires) : null;
    const value = option_value(layer, spec);
    const inert = flag && option_value(layer, flag) !== true && (value === spec.default || value === null || value === undefined);
    const gates = (info?.options ?? []).some((o) => o.requires === spec.name);
    options.push(control(spec, value, `${p}.${spec.name}`, spec.name, (v) => ({ op: 'set_option', path: p, name: spec.name, value: v }), edit, inert ? `needs ${spec.requires}` : null, gates));
  }
  return h(
    'li',
    { class: `layer layer-${info ? layer.type : 'unknown'}`, dataset: { path: p }, title: info?.help },
    head,
    options.length ? h('div', { class: 'layer-options' }, options) : null,
    body,
  );
}

/** A parallel's branches: each a layer list of its own, with a button that removes the branch
 * (while more than one is left), and one that adds a branch. */
function branches_editor(schema, lists, path, spec, width, edit) {
  const p = format_path(path);
  const name = dotted_path(path);
  if (!Array.isArray(lists) || !lists.every(Array.isArray))
    return h('div', { class: 'layer-body' }, h('p', { class: 'warn', dataset: { path: p } }, `${spec.name} is not a list of layer lists; fix it in the JSON.`));
  const branch = (list, b) => {
    const bp = [...path, b];
    const remove = h(
      'button',
      {
        type: 'button',
        class: 'icon remove',
        title: 'Remove this branch',
        'aria-label': `Remove branch ${dotted_path(bp)}`,
        disabled: lists.length < 2,
        dataset: { focus: `${format_path(bp)}:remove-branch` },
        onclick: () => edit({ action: { op: 'remove_layer', path: format_path(bp) }, structural: true, immediate: true, focus: `${p}:add-branch` }),
      },
      '✕',
    );
    return h(
      'li',
      { class: 'layer-branch', dataset: { path: format_path(bp) } },
      h('div', { class: 'layer-body-label' }, h('span', {}, `branch ${b}`), ' ', remove),
      layer_list(schema, list, bp, width, edit),
    );
  };
  const add = h(
    'button',
    { type: 'button', class: 'add-layer', dataset: { focus: `${p}:add-branch` }, 'aria-label': `Add a branch to ${name}`, onclick: () => edit({ action: { op: 'add_branch', path: p }, structural: true, immediate: true, focus: `${p}:add-branch` }) },
    '+ Add branch',
  );
  return h(
    'div',
    { class: 'layer-body layer-branches' },
    h('div', { class: 'layer-body-label' }, `${spec.name} — ${spec.help}`),
    h('ol', { class: 'branch-list', dataset: { path: p } }, lists.map(branch)),
    h('div', { class: 'add-row' }, add),
  );
}

const width_text = (w) => (w && w.in !== w.out ? `${w.in} → ${w.out}` : w ? `${w.in}` : '');

/** JSON path of every layer -> its width label, walking lists and bodies as the form does. */
function width_labels(schema, layers, path, width, out = new Map()) {
  if (!Array.isArray(layers)) return out;
  const widths = layer_widths(layers, width);
  layers.forEach((layer, i) => {
    out.set(format_path([...path, i]), width_text(widths[i]));
    const info = layer && typeof layer === 'object' ? layer_type(schema, layer.type) : null;
    for (const spec of info?.options ?? []) {
      if (spec.type === 'layers') width_labels(schema, layer[spec.name], [...path, i, spec.name], widths[i]?.in ?? 0, out);
      if (spec.type === 'layer_lists' && Array.isArray(layer[spec.name]))
        layer[spec.name].forEach((list, b) => width_labels(schema, list, [...path, i, spec.name, b], widths[i]?.in ?? 0, out));
    }
  });
  return out;
}

/** Rewrites the width labels ("64 → 32") in place after an edit that did not rebuild the form
 * (out_features or features typed in a box that keeps its caret). */
export function refresh_layer_widths(root, schema, config) {
  const labels = width_labels(schema, config.layers, ['layers'], config.shape?.features ?? 64);
  for (const el of root.querySelectorAll('.layer-width[data-width-of]')) {
    const text = labels.get(el.dataset.widthOf) ?? '';
    if (el.textContent !== text) el.textContent = text;
  }
}

/** The place an error names: the dotted name the tables use, and the engine's JSON path when it
 * is written differently, each labelled. */
export function error_place(path) {
  const dotted = dotted_path(path);
  return dotted === path
    ? [h('code', { class: 'error-path' }, path)]
    : [h('code', { class: 'error-path' }, dotted), ' ', h('span', { class: 'json-path' }, '(JSON path: ', h('code', {}, path), ')')];
}

/** Marks the control (or the nearest enclosing layer) an engine error names, and repeats the
 * message there: on a phone the status box may be a screen away. Clears the previous marks
 * first, so it can run on a form the reader is typing in. */
export function mark_editor_error(root, path, message, error_id) {
  for (const el of root.querySelectorAll('.inline-error')) el.remove();
  for (const el of root.querySelectorAll('.has-error')) el.classList.remove('has-error');
  for (const el of root.querySelectorAll('[aria-invalid]')) {
    el.removeAttribute('aria-invalid');
    const ids = (el.getAttribute('aria-describedby') ?? '').split(' ').filter((id) => id && id !== error_id);
    el.setAttribute('aria-describedby', ids.join(' '));
  }
  if (!path) return;
  let target = null;
  for (let p = path; p && !target; p = p.replace(/(\.[^.[\]]+|\[\d+\])$/, '')) {
    target = root.querySelector(`[data-path="${CSS.escape(p)}"]`);
    if (p === p.replace(/(\.[^.[\]]+|\[\d+\])$/, '')) break;
  }
  if (!target) return;
  target.classList.add('has-error');
  if (message) {
    const holder = target.closest('li.layer') ?? target.closest('fieldset');
    holder?.append(h('p', { class: 'inline-error' }, h('span', { 'aria-hidden': 'true' }, '⚠ '), error_place(path), ': ', message));
  }
  if (target.matches('input, select')) {
    target.setAttribute('aria-invalid', 'true');
    if (error_id) target.setAttribute('aria-describedby', `${target.getAttribute('aria-describedby') ?? ''} ${error_id}`.trim());
  }
}
