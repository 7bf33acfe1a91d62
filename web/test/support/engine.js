// Loads the Node build of the wasm module (biaslab-node.js, made by scripts/build-web.sh).
// Emscripten 3.1.6 would try fetch() for the .wasm under Node 18+, so the bytes are passed in.
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const WEB = fileURLToPath(new URL('../..', import.meta.url));
export const WASM_DIR = process.env.BIASLAB_WASM_DIR ?? resolve(WEB, '../build-wasm/cpp/wasm');

let engine = null;

/** A new instance of the Node module, with its own memory (32 MB at the start, growing to 2 GB),
 * for tests that read how far it grew. */
export async function fresh_module() {
  const js = resolve(WASM_DIR, 'biaslab-node.js');
  if (!existsSync(js)) throw new Error(`${js} is missing: run scripts/build-web.sh wasm first`);
  const create = createRequire(import.meta.url)(js);
  return create({ wasmBinary: readFileSync(resolve(WASM_DIR, 'biaslab-node.wasm')) });
}

export async function load_engine() {
  if (engine) return engine;
  const js = resolve(WASM_DIR, 'biaslab-node.js');
  if (!existsSync(js)) throw new Error(`${js} is missing: run scripts/build-web.sh wasm first`);
  const create = createRequire(import.meta.url)(js);
  const m = await create({ wasmBinary: readFileSync(resolve(WASM_DIR, 'biaslab-node.wasm')) });
  engine = {
    module: m,
    version: () => m.version(),
    schema: () => JSON.parse(m.schema()),
    presets: () => JSON.parse(m.presets()),
    analyze: (config) => JSON.parse(m.analyze(typeof config === 'string' ? config : JSON.stringify(config))),
    analyze_with: (config, callbacks) => JSON.parse(m.analyzeWithCallbacks(config, callbacks)),
  };
  return engine;
}
