// Property tests of the share-link decoder (fast-check): a link is text anyone can paste, so for
// every input decode_link must return {config: null} (no experiment), {config: {...}} (a plain
// JSON object, format version filled in), or throw a LinkError with a sentence; never another
// exception, never a hang. Valid links must come back as the experiment that made them, and an
// edited link either fails or gives that very experiment.
//
// Every counterexample fast-check found became an explicit case in the last tests of this file.
// FC_SEED=<n> (and FC_PATH=<path>) replays a run; FC_RUNS=<n> changes the number of runs per property.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import LZString from 'lz-string';

import { load_engine } from '../support/engine.js';
import { canonical_config, minimal_config, same_json, format_config } from '../../src/experiment.js';
import { decode_link, encode_link, crc32, LinkError, LINK_VERSION, MAX_LINK_LENGTH, MAX_JSON_DEPTH } from '../../src/share-codec.js';

const engine = await load_engine();
const schema = engine.schema();

const RUNS = Number(process.env.FC_RUNS ?? 2000);
const SETTINGS = { numRuns: RUNS, includeErrorInReport: true, ...(process.env.FC_SEED ? { seed: Number(process.env.FC_SEED), path: process.env.FC_PATH } : {}) };
// A hang, not a slow moment: decodes here take well under 1 ms, but on this shared 2-core machine
// a GC pause or a busy neighbour stretched one to over 250 ms (a stress run of 20,000 cases).
const SLOW_MS = 1000;

// ------------------------------------------------------------------------------------------------
// The contract, checked on every outcome

/** Decodes `hash` and checks the outcome against the contract; returns it for further checks. */
function decode_checked(hash) {
  const t0 = performance.now();
  let out, error = null;
  try {
    out = decode_link(hash);
  } catch (e) {
    error = e;
  }
  const ms = performance.now() - t0;
  assert.ok(ms < SLOW_MS, `decoding took ${ms.toFixed(0)} ms: ${JSON.stringify(hash).slice(0, 200)}`);
  if (error) {
    if (!(error instanceof LinkError)) throw new Error(`not a LinkError: ${error?.stack ?? error}\nhash: ${JSON.stringify(hash)}`);
    assert.ok(typeof error.message === 'string' && error.message.length > 20 && /[.)]$/.test(error.message), `no sentence: ${error.message}`);
    return { error };
  }
  assert.ok(out && typeof out === 'object' && Object.keys(out).length === 1 && 'config' in out, `odd result ${JSON.stringify(out)}`);
  const { config } = out;
  if (config === null) return { config };
  assert.equal(Object.getPrototypeOf(config), Object.prototype, 'a plain object');
  // Version 1 is filled in; a payload that names its own version keeps it, like any other
  // invalid value, so that the engine names the problem (fast-check's first counterexample,
  // {"version": {}}, is this case: the decoder is right, the first draft of this check was not).
  assert.ok(Object.hasOwn(config, 'version'));
  // Plain JSON: it survives a JSON round trip unchanged (no functions, prototypes, cycles).
  assert.ok(same_json(JSON.parse(JSON.stringify(config)), config), 'not plain JSON');
  // What the page does with it next (main.js: config_from_link, then the editor and the link).
  const shown = canonical_config(schema, config);
  format_config(shown);
  JSON.stringify(minimal_config(schema, shown));
  return { config };
}

// ------------------------------------------------------------------------------------------------
// Arbitraries

const URI_SAFE = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-$';
const uri_safe_char = fc.constantFrom(...URI_SAFE);
const payload = fc.string({ unit: uri_safe_char, maxLength: 400 });
const crc_field = fc.oneof(fc.string({ unit: fc.constantFrom(...'0123456789abcdefghijklmnopqrstuvwxyz'), minLength: 1, maxLength: 8 }), fc.string({ maxLength: 9 }));
// Any UTF-16 code unit, lone surrogates included (what a URL fragment can hold after decoding).
const utf16_char = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
const any_text = fc.oneof(
  fc.string({ maxLength: 300 }),
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: utf16_char, maxLength: 300 }),
  fc.webFragments(),
);
const prefix = fc.constantFrom('', '#', `#${LINK_VERSION}.`, `${LINK_VERSION}.`, '#v0.', '#v2.', '#v01.', '#v1e3.', '#V1.', '##v1.', '#v99999999999999999999.');

/** Bytes as the text a URL can carry them in. */
const bytes_as_text = fc.uint8Array({ maxLength: 400 }).chain((b) =>
  fc.constantFrom(
    String.fromCharCode(...b), // latin1
    new TextDecoder().decode(b), // UTF-8 with replacement characters
    [...b].map((x) => `%${x.toString(16).padStart(2, '0')}`).join(''), // percent-encoded
    Buffer.from(b).toString('base64url'),
    Buffer.from(b).toString('base64'),
  ),
);

/** A value for one schema option: valid, and usually near its limits or default. */
function option_value(spec) {
  switch (spec.type) {
    case 'bool':
      return fc.boolean();
    case 'enum':
      return fc.constantFrom(...spec.values);
    case 'int': {
      const min = spec.min ?? 0, max = spec.max ?? Number.MAX_SAFE_INTEGER;
      const edges = [min, max, ...(Number.isInteger(spec.default) ? [spec.default] : [])];
      return fc.oneof(fc.constantFrom(...edges), max - min < 2 ** 31 ? fc.integer({ min, max }) : fc.maxSafeNat().map((n) => min + (n % (max - min + 1))));
    }
    case 'number': {
      const lo = spec.exclusive_min ?? spec.min ?? 0;
      return fc.double({ min: lo, max: spec.max ?? 1e6, minExcluded: spec.exclusive_min !== undefined, noNaN: true, noDefaultInfinity: true });
    }
    case 'grid': {
      const side = fc.integer({ min: spec.min ?? 1, max: 32 });
      return fc.option(fc.tuple(side, side), { nil: null });
    }
    default:
      throw new Error(`no generator for option type ${spec.type}`);
  }
}

/** Random layers of the engine's schema; residual bodies and parallel branches nest up to `depth`. */
function layers_of(depth) {
  const nested = (o) => o.type === 'layers' || o.type === 'layer_lists';
  const kinds = schema.layer_types.map((t) => {
    const opts = {};
    for (const o of t.options) {
      if (o.type === 'layers') {
        if (depth > 0) opts[o.name] = layers_of(depth - 1).filter((l) => l.length >= (o.min_items ?? 1));
      } else if (o.type === 'layer_lists') {
        if (depth > 0) opts[o.name] = fc.array(layers_of(depth - 1), { minLength: o.min_items ?? 1, maxLength: 3 });
      } else opts[o.name] = option_value(o);
    }
    const required = t.options.filter(nested).map((o) => o.name);
    if (required.some((n) => !(n in opts))) return null; // a residual or parallel at the depth limit
    return fc.record(opts, { requiredKeys: required }).map((o) => ({ type: t.name, ...o }));
  }).filter(Boolean);
  return fc.array(fc.oneof(...kinds), { minLength: 1, maxLength: depth > 1 ? 6 : 3 });
}

/** A config the engine accepts field by field (whether the stack fits its limits is not the point). */
const valid_config = fc.record(
  Object.fromEntries(
    schema.fields.filter((f) => f.type !== 'layers' && f.name !== 'version' && !f.name.includes('.')).map((f) => [f.name, option_value(f)]),
  ),
  { requiredKeys: [] },
).chain((top) => {
  const shape_fields = schema.fields.filter((f) => f.name.startsWith('shape.'));
  return fc.tuple(
    fc.record(Object.fromEntries(shape_fields.map((f) => [f.name.slice(6), option_value(f)])), { requiredKeys: [] }),
    layers_of(2),
  ).map(([shape, layers]) => ({ ...top, ...(Object.keys(shape).length ? { shape } : {}), layers }));
});

// Keys that name things in JS or in a config, beside random ones.
const key = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'layers', 'type', 'body', 'version', 'shape'));

/** Anything JSON an edited config text can hold: unknown keys and odd values stay in a link. */
const odd_config = fc
  .tuple(valid_config, fc.dictionary(key.filter((k) => k !== '__proto__'), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }))
  .map(([c, extra]) => ({ ...extra, ...c }));

/** JSON text of any shape, including keys like "__proto__" that JSON.parse makes own keys. */
const any_json_text = fc.oneof(
  fc.json({ maxDepth: 4 }),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.tuple(fc.dictionary(key, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }), fc.array(key, { maxLength: 3 })).map(([o, extra]) =>
    // JSON.stringify would drop an own "__proto__" key's meaning; write the keys as text.
    `{${[...extra.map((k) => `${JSON.stringify(k)}: {}`), ...Object.entries(o).map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`)].join(', ')}}`,
  ),
);

/** A link to exactly `text`, with the right checksum: what a hand-made link looks like. */
const link_to = (text) => `#${LINK_VERSION}.${crc32(text).toString(36)}.${LZString.compressToEncodedURIComponent(text)}`;

/** What a link to `config` must decode to: the minimal config as JSON carries it, version 1. */
const expected = (config) => ({ version: 1, ...JSON.parse(JSON.stringify(minimal_config(schema, config))) });

// Edits a link may suffer on its way (chat apps, mail, hand edits).
const mutation = fc.oneof(
  fc.record({ kind: fc.constant('replace'), at: fc.nat(), ch: fc.oneof(uri_safe_char, utf16_char) }),
  fc.record({ kind: fc.constant('insert'), at: fc.nat(), text: fc.oneof(fc.string({ unit: uri_safe_char, minLength: 1, maxLength: 4 }), fc.string({ minLength: 1, maxLength: 4 })) }),
  fc.record({ kind: fc.constant('delete'), at: fc.nat(), n: fc.integer({ min: 1, max: 5 }) }),
  fc.record({ kind: fc.constant('swap'), at: fc.nat() }),
  fc.record({ kind: fc.constant('truncate'), at: fc.nat() }),
  fc.record({ kind: fc.constant('repeat'), at: fc.nat(), n: fc.integer({ min: 1, max: 40 }) }),
  fc.record({ kind: fc.constant('percent_encode'), at: fc.nat() }),
  fc.record({ kind: fc.constant('case'), at: fc.nat() }),
);

function mutate(hash, m) {
  const i = hash.length ? m.at % hash.length : 0;
  switch (m.kind) {
    case 'replace': return hash.slice(0, i) + m.ch + hash.slice(i + 1);
    case 'insert': return hash.slice(0, i) + m.text + hash.slice(i);
    case 'delete': return hash.slice(0, i) + hash.slice(i + m.n);
    case 'swap': return hash.slice(0, i) + (hash[i + 1] ?? '') + (hash[i] ?? '') + hash.slice(i + 2);
    case 'truncate': return hash.slice(0, i);
    case 'repeat': return hash.slice(0, i) + hash.slice(i, i + m.n).repeat(2) + hash.slice(i + m.n);
    // As a mail program would: ASCII punctuation as %XX, other characters left alone
    // (encodeURIComponent throws on a lone surrogate, which an earlier edit may have put in).
    case 'percent_encode': return hash.slice(0, i) + hash.slice(i).replace(/[^A-Za-z0-9\u0080-\uffff]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
    case 'case': return hash.slice(0, i) + (hash[i] === hash[i]?.toUpperCase() ? hash[i]?.toLowerCase() : hash[i]?.toUpperCase()) + hash.slice(i + 1);
  }
  throw new Error(m.kind);
}

// ------------------------------------------------------------------------------------------------
// Properties

test('share property: random text never breaks the contract', { timeout: 60000 }, () => {
  fc.assert(fc.property(prefix, any_text, (p, t) => void decode_checked(p + t)), SETTINGS);
});

test('share property: random bytes, as link text or as a payload, never break the contract', { timeout: 60000 }, () => {
  fc.assert(fc.property(prefix, bytes_as_text, (p, t) => void decode_checked(p + t)), SETTINGS);
  fc.assert(fc.property(crc_field, fc.oneof(payload, bytes_as_text), (crc, body) => void decode_checked(`#${LINK_VERSION}.${crc}.${body}`)), SETTINGS);
});

test('share property: a well-formed link to random text or JSON decodes to an object or a LinkError', { timeout: 60000 }, () => {
  // The checksum matches here, so the decoder's checks after it (JSON, object) are exercised.
  const text = fc.oneof(fc.string({ unit: utf16_char, maxLength: 200 }), any_json_text);
  fc.assert(
    fc.property(text, (t) => {
      const out = decode_checked(link_to(t));
      if ('config' in out) assert.ok(same_json(out.config, { version: 1, ...JSON.parse(t) }), t);
    }),
    SETTINGS,
  );
});

test('share property: random valid configs survive encode -> decode', { timeout: 60000 }, () => {
  fc.assert(
    fc.property(valid_config, (config) => {
      const hash = encode_link(schema, config);
      assert.match(hash, new RegExp(`^#${LINK_VERSION}\\.[0-9a-z]+\\.[A-Za-z0-9+$-]+$`));
      const { config: back } = decode_checked(hash);
      assert.deepEqual(back, expected(config));
      assert.deepEqual(canonical_config(schema, back), canonical_config(schema, { version: 1, ...JSON.parse(JSON.stringify(config)) }));
    }),
    SETTINGS,
  );
});

test('share property: configs with unknown keys and odd values survive encode -> decode', { timeout: 60000 }, () => {
  fc.assert(fc.property(odd_config, (config) => assert.deepEqual(decode_checked(encode_link(schema, config)).config, expected(config))), SETTINGS);
});

test('share property: an edited link is refused or gives the very same experiment', { timeout: 60000 }, () => {
  fc.assert(
    fc.property(valid_config, fc.array(mutation, { minLength: 1, maxLength: 3 }), (config, edits) => {
      const hash = edits.reduce(mutate, encode_link(schema, config));
      const out = decode_checked(hash);
      // A different experiment would need a CRC-32 collision (2^-32 per edit).
      if (out.config) assert.deepEqual(out.config, expected(config), `edited link ${hash} gave another experiment`);
    }),
    SETTINGS,
  );
});

// ------------------------------------------------------------------------------------------------
// What fast-check found, kept as explicit cases

test('share property: only a plain number above ours is called a newer link format', { timeout: 60000 }, () => {
  const digits = fc.oneof(fc.nat(300).map(String), fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 1, maxLength: 25 }));
  fc.assert(
    fc.property(digits, payload, (d, body) => {
      const { error } = decode_checked(`#v${d}.0.${body}`);
      if (d === '1') return; // ours: fails later, on the checksum
      assert.ok(error, d);
      const newer = /^[1-9]\d*$/.test(d) && Number(d) > 1 && d.length <= 6;
      assert.equal(/newer version/.test(error.message), newer, `v${d}: ${error.message}`);
    }),
    SETTINGS,
  );
});

test('share property: percent-encoding a link on its way does not change what it opens', { timeout: 60000 }, () => {
  fc.assert(
    fc.property(valid_config, fc.constantFrom('all', 'specials'), (config, how) => {
      const hash = encode_link(schema, config);
      const encoded = how === 'all' ? `#${encodeURIComponent(hash.slice(1)).replace(/[$+.-]/g, (c) => `%${c.charCodeAt(0).toString(16)}`)}` : hash.replace(/[$+]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
      assert.deepEqual(decode_checked(encoded).config, expected(config));
    }),
    { ...SETTINGS, numRuns: Math.ceil(RUNS / 4) },
  );
});

test('share property: nesting of any depth is refused or handled, never a stack overflow', { timeout: 60000 }, () => {
  // Nested residual bodies, arrays or objects: around the depth limit, and up to 3,000 levels
  // (2,000 were enough to overflow the page's recursion; deeper ones only take longer to pack).
  const depth = fc.oneof(fc.integer({ min: 1, max: 2 * MAX_JSON_DEPTH }), fc.integer({ min: 1, max: 3000 }));
  const nested = fc.tuple(depth, fc.constantFrom('residual', 'array', 'object')).map(([n, kind]) => {
    const [open, close] = { residual: ['{"type":"residual","body":[', ']}'], array: ['[', ']'], object: ['{"a":', '}'] }[kind];
    // levels: the config object and its layer list, then 2 per residual (object, body) + relu, or 1 each
    const levels = 2 + (kind === 'residual' ? 2 * n + 1 : n);
    return { levels, text: `{"layers":[${open.repeat(n)}${kind === 'residual' ? '{"type":"relu"}' : '1'}${close.repeat(n)}]}` };
  });
  fc.assert(
    fc.property(nested, ({ levels, text }) => {
      const hash = link_to(text);
      const out = decode_checked(hash);
      if (hash.length - 1 > MAX_LINK_LENGTH) assert.match(out.error.message, /characters long/);
      else assert.equal('config' in out, levels <= MAX_JSON_DEPTH, `${levels} levels`);
    }),
    { ...SETTINGS, numRuns: Math.ceil(RUNS / 4) },
  );
});

// ------------------------------------------------------------------------------------------------
// What fast-check found, kept as explicit cases (each failed before the fix in share-codec.js)

test('share found: a link 5,000 residuals deep was decoded and then overflowed the page\'s stack', () => {
  let layer = '{"type":"relu"}';
  for (let i = 0; i < 5000; i++) layer = `{"type":"residual","body":[${layer}]}`;
  const hash = link_to(`{"layers":[${layer}]}`);
  assert.ok(hash.length < MAX_LINK_LENGTH, `${hash.length} characters`);
  // Before: decode_link returned it, and canonical_config threw RangeError (not a LinkError),
  // which main.js rethrows: the page did not start.
  assert.throws(() => decode_link(hash), (e) => e instanceof LinkError && /nested more than 64 levels/.test(e.message));
  // The deepest config the schema allows (residual nesting 8) still opens.
  layer = '{"type":"relu"}';
  for (let i = 0; i < 8; i++) layer = `{"type":"residual","body":[${layer}]}`;
  assert.equal(decode_checked(link_to(`{"layers":[${layer}]}`)).config.layers[0].type, 'residual');
});

test('share found: "v0" and "v01" links were called newer than this page', () => {
  for (const hash of ['#v0.a.b', '#v01.a.b', '#v00000000000000000000002.a.b']) {
    assert.throws(() => decode_link(hash), (e) => e instanceof LinkError && !/newer/.test(e.message) && /does not hold a biaslab experiment/.test(e.message), hash);
  }
  assert.throws(() => decode_link('#v2.a.b'), /newer version of biaslab \(link format v2\)/);
});

test('share found: a short link could unpack to millions of characters (lz-string grows quadratically)', () => {
  // 'a' x 300,000 packs into about 1,100 characters; real experiments unpack to under 8k.
  const text = 'a'.repeat(300000);
  const hash = link_to(text);
  assert.ok(hash.length < 1500, `${hash.length}`);
  const t0 = performance.now();
  assert.throws(() => decode_link(hash), (e) => e instanceof LinkError && /far more text/.test(e.message));
  const long = `#${LINK_VERSION}.0.${'A'.repeat(MAX_LINK_LENGTH)}`;
  assert.throws(() => decode_link(long), (e) => e instanceof LinkError && /characters long/.test(e.message));
  console.log(`inflating link refused in ${(performance.now() - t0).toFixed(1)} ms`);
});

test('share found: a link whose "$" was percent-encoded on the way failed its checksum', () => {
  const config = canonical_config(schema, { seed: 3, layers: [{ type: 'attention', num_heads: 2 }, { type: 'layernorm' }] });
  const hash = encode_link(schema, config);
  const mangled = hash.replace(/\$/g, '%24').replace(/\+/g, '%2B');
  assert.deepEqual(canonical_config(schema, decode_link(mangled).config), config);
  assert.throws(() => decode_link('#v1.abc.%E0%A4%A'), (e) => e instanceof LinkError && /%-escape/.test(e.message));
});
