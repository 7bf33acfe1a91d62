// The experiment in the URL fragment: "#v1.<crc>.<payload>".
//   v1       the link format (bumped if the encoding changes; the config carries its own
//            format version, which is 1 and therefore omitted)
//   crc      CRC-32 of the JSON text, base 36: a truncated or edited link fails loudly instead
//            of loading a different experiment
//   payload  lz-string's URI-safe compression of the minimal config (only values that differ
//            from the schema defaults, see experiment.js)
// Pure: no DOM, no location; the Node tests import it.
import LZString from 'lz-string';

import { minimal_config } from './experiment.js';

export const LINK_VERSION = 'v1';

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 (IEEE) of a string's UTF-8 bytes. */
export function crc32(text) {
  let c = 0xffffffff;
  for (const byte of new TextEncoder().encode(text)) c = CRC_TABLE[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/**
 * The fragment (with "#") for a config.
 * @param {import('./experiment.js').Schema} schema @param {import('./experiment.js').Config} config
 */
export function encode_link(schema, config) {
  const text = JSON.stringify(minimal_config(schema, config));
  return `#${LINK_VERSION}.${crc32(text).toString(36)}.${LZString.compressToEncodedURIComponent(text)}`;
}

export class LinkError extends Error {
  constructor(message) {
    super(message);
    this.name = 'LinkError';
  }
}

/**
 * The config a fragment carries: {config} for a good link, {config: null} for none (empty
 * fragment, or one that is not ours), or throws LinkError with a sentence for the reader.
 * @param {string} hash location.hash, with or without "#"
 * @returns {{config: object|null}}
 */
export function decode_link(hash) {
  const h = (hash ?? '').replace(/^#/, '');
  if (h === '') return { config: null };
  const m = /^v(\d+)\.(.*)$/s.exec(h);
  if (!m) throw new LinkError('This link does not hold a biaslab experiment (it may have been cut off or edited).');
  if (`v${m[1]}` !== LINK_VERSION)
    throw new LinkError(`This link was made by a newer version of biaslab (link format v${m[1]}); this page reads ${LINK_VERSION}.`);
  const rest = m[2];
  const dot = rest.indexOf('.');
  if (dot < 0) throw new LinkError('This link is incomplete: it was probably cut off when it was copied.');
  const crc = rest.slice(0, dot), payload = rest.slice(dot + 1);
  if (!/^[0-9a-z]{1,7}$/.test(crc) || payload === '')
    throw new LinkError('This link is incomplete: it was probably cut off when it was copied.');
  let text = null;
  try {
    text = LZString.decompressFromEncodedURIComponent(payload);
  } catch {
    text = null;
  }
  if (!text || crc32(text).toString(36) !== crc)
    throw new LinkError('This link is damaged or incomplete (its checksum does not match): it was probably cut off when it was copied.');
  let config;
  try {
    config = JSON.parse(text);
  } catch {
    throw new LinkError('This link is damaged: its experiment is not valid JSON.');
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw new LinkError('This link is damaged: it does not hold an experiment.');
  return { config: { version: 1, ...config } };
}
