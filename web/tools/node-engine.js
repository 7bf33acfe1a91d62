// The Node build of the engine (biaslab-node.js in `wasm_dir`, made by scripts/build-web.sh
// wasm), for what the page's build reads from it: the fold rules' formulas (katex-prerender.js)
// and the presets (presets-module.js). One instance per directory.
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';

const require = createRequire(import.meta.url);
const loaded = new Map();

/** The instantiated module; rejects with how to build it when it is missing. */
export function node_engine(wasm_dir) {
  if (!loaded.has(wasm_dir)) {
    const js = resolve(wasm_dir, 'biaslab-node.js');
    if (!existsSync(js)) throw new Error(`${js} is missing: run scripts/build-web.sh wasm first`);
    loaded.set(wasm_dir, require(js)({ wasmBinary: readFileSync(resolve(wasm_dir, 'biaslab-node.wasm')) }));
  }
  return loaded.get(wasm_dir);
}
