// The share link: round trip, and every way a link can be broken.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { load_engine } from '../support/engine.js';
import { canonical_config, minimal_config } from '../../src/experiment.js';
import { decode_link, encode_link, crc32, LinkError, LINK_VERSION } from '../../src/share-codec.js';

const engine = await load_engine();
const schema = engine.schema();
const presets = engine.presets();

test('share: crc32 matches the IEEE check value', () => {
  assert.equal(crc32('123456789'), 0xcbf43926);
  assert.equal(crc32(''), 0);
});

test('share: every preset survives encode -> decode', () => {
  for (const p of presets) {
    const config = canonical_config(schema, JSON.parse(p.config));
    const hash = encode_link(schema, config);
    assert.match(hash, new RegExp(`^#${LINK_VERSION}\\.[0-9a-z]+\\.[A-Za-z0-9+$-]+$`));
    const back = decode_link(hash).config;
    assert.deepEqual(canonical_config(schema, back), config, p.name);
  }
});

test('share: a link carries only values that differ from the defaults', () => {
  const config = canonical_config(schema, { layers: [{ type: 'linear' }, { type: 'layernorm', eps: 1e-5 }] });
  assert.deepEqual(minimal_config(schema, config), { layers: [{ type: 'linear' }, { type: 'layernorm' }] });
  const custom = canonical_config(schema, { seed: 3, shape: { batch: 2, tokens: 8 }, layers: [{ type: 'attention', num_heads: 2, causal: true }] });
  assert.deepEqual(minimal_config(schema, custom), { seed: 3, shape: { tokens: 8 }, layers: [{ type: 'attention', num_heads: 2, causal: true }] });
});

test('share: big seeds (up to 2^53) and unicode survive', () => {
  const config = canonical_config(schema, { seed: 2 ** 53, layers: [{ type: 'relu' }], note: 'ünïcødé ✓' });
  assert.deepEqual(decode_link(encode_link(schema, config)).config.seed, 2 ** 53);
  assert.equal(decode_link(encode_link(schema, config)).config.note, 'ünïcødé ✓');
});

test('share: an empty fragment means no experiment (the default opens)', () => {
  assert.deepEqual(decode_link(''), { config: null });
  assert.deepEqual(decode_link('#'), { config: null });
});

test('share: every truncation of a link is refused or gives the very same experiment', () => {
  // lz-string's last character may hold only padding bits, so cutting it can leave the text
  // intact; anything else must fail the checksum instead of loading another experiment.
  const config = canonical_config(schema, JSON.parse(presets.find((p) => p.name === 'norm-zoo').config));
  const hash = encode_link(schema, config);
  let refused = 0, same = 0;
  for (let n = 2; n < hash.length; n++) {
    let got;
    try {
      got = decode_link(hash.slice(0, n)).config;
    } catch (e) {
      assert.ok(e instanceof LinkError, `length ${n}: ${e}`);
      refused++;
      continue;
    }
    assert.deepEqual(canonical_config(schema, got), config, `prefix of length ${n} loaded another experiment`);
    same++;
  }
  assert.ok(refused >= hash.length - 4, `refused ${refused} of ${hash.length - 2}`);
  console.log(`${hash.length}-character link: ${refused} truncations refused, ${same} decode to the same experiment`);
});

test('share: garbage, edited and foreign links give a LinkError with a sentence', () => {
  const good = encode_link(schema, canonical_config(schema, JSON.parse(presets[0].config)));
  const edited = good.slice(0, -3) + (good.endsWith('A') ? 'B' : 'A') + good.slice(-2);
  for (const hash of ['#garbage', '#v1.', '#v1.abc', '#v1.zz.', '#v1.0.NoWorky', '#v1.1a2b.%%%', '#v1.!!.abc', edited, '#section-biases']) {
    assert.throws(() => decode_link(hash), (e) => e instanceof LinkError && e.message.length > 20, hash);
  }
  assert.throws(() => decode_link('#v9.abc.def'), /newer version/);
});

test('share: a link to JSON that is not an experiment is refused', () => {
  const LZ = (t) => import('lz-string').then((m) => m.default.compressToEncodedURIComponent(t));
  return Promise.all(['[1,2]', '"x"', 'null'].map(async (text) => {
    const hash = `#v1.${crc32(text).toString(36)}.${await LZ(text)}`;
    assert.throws(() => decode_link(hash), LinkError, text);
  }));
});
