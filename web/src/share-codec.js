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

// Bounds on what a link may make the page do (each found by the property tests,
// test/node/share-codec.property.test.js). lz-string's output can grow quadratically with its
// input (a 7.8k-character payload unpacks to 9 M characters), so long links are refused before
// unpacking. A large experiment (72 layers, every option off its default, random 17-digit eps
// values, residuals nested 8 deep) makes a link of 2.8k characters and 7k of JSON.
export const MAX_LINK_LENGTH = 8192;
export const MAX_TEXT_LENGTH = 1 << 18;
// JSON nesting: the schema allows residual nesting 8 (about 20 levels of JSON). The page walks
// configs recursively: in Node, a link 2,000 residuals deep overflowed the stack after decoding.
export const MAX_JSON_DEPTH = 64;

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
  let h = (hash ?? '').replace(/^#/, '');
  if (h === '') return { config: null };
  if (h.length > MAX_LINK_LENGTH)
    throw new LinkError(`This link is ${h.length} characters long; this page opens links of up to ${MAX_LINK_LENGTH} characters, which every real experiment fits in, so it was damaged or made by hand.`);
  // Mail and chat programs may percent-encode a link's "$" and "+"; lz-string's alphabet has no
  // "%", so decoding is unambiguous.
  if (h.includes('%')) {
    try {
      h = decodeURIComponent(h);
    } catch {
      throw new LinkError('This link is damaged: it has a broken %-escape.');
    }
  }
  const m = /^v(\d+)\.(.*)$/s.exec(h);
  if (!m) throw new LinkError('This link does not hold a biaslab experiment (it may have been cut off or edited).');
  if (`v${m[1]}` !== LINK_VERSION) {
    // Only a plain number above ours is a newer format; "v0", "v01" were never made.
    const newer = /^[1-9]\d{0,5}$/.test(m[1]) && Number(m[1]) > Number(LINK_VERSION.slice(1));
    throw new LinkError(
      newer
        ? `This link was made by a newer version of biaslab (link format v${m[1]}); this page reads ${LINK_VERSION}.`
        : 'This link does not hold a biaslab experiment (its format is unknown; it may have been edited).',
    );
  }
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
  if (text && text.length > MAX_TEXT_LENGTH)
    throw new LinkError('This link is damaged: it unpacks to far more text than any experiment.');
  if (!text || crc32(text).toString(36) !== crc)
    throw new LinkError('This link is damaged or incomplete (its checksum does not match): it was probably cut off when it was copied.');
  if (json_depth(text) > MAX_JSON_DEPTH)
    throw new LinkError(`This link is damaged: its experiment is nested more than ${MAX_JSON_DEPTH} levels deep.`);
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

/** The deepest nesting of objects and arrays in JSON text (a scan, so any depth is safe). */
function json_depth(text) {
  let depth = 0, max = 0, in_string = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (in_string) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) in_string = false;
    } else if (c === 0x22) in_string = true;
    else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}
