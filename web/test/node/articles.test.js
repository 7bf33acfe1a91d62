// The articles' claims (src/articles.js) name only presets the engine has, every claim is
// checked by at least one preset, and every preset but the trap checks some claim.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { load_engine } from '../support/engine.js';
import { ARTICLES, claims_of } from '../../src/articles.js';

const engine = await load_engine();
const presets = engine.presets().map((p) => p.name);

test('articles: four articles, each claim with its own id and presets that exist', () => {
  assert.equal(ARTICLES.length, 4);
  const ids = ARTICLES.flatMap((a) => a.claims.map((c) => c.id));
  assert.equal(new Set(ids).size, ids.length);
  for (const a of ARTICLES)
    for (const c of a.claims) {
      assert.ok(c.presets.length > 0, c.id);
      for (const p of c.presets) assert.ok(presets.includes(p), `${c.id} names ${p}, which is not a preset`);
      assert.ok(c.id.startsWith(`${a.n}.`), c.id);
    }
});

test('articles: every preset links to a claim, except the few-tokens trap (the theory\'s, not an article\'s)', () => {
  for (const p of presets) assert.equal(claims_of(p).length > 0, p !== 'few-tokens-trap', p);
});
