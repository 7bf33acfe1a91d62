// The page builds into one static folder (web/dist) that any host can serve as-is: relative
// asset URLs (base './'), no request to another host, the wasm module bundled as an asset.
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

import { katex_prerender } from './tools/katex-prerender.js';
import { minify_loader } from './tools/minify-loader.js';
import { preload_engine } from './tools/preload-engine.js';
import { presets_module } from './tools/presets-module.js';

const here = fileURLToPath(new URL('.', import.meta.url));
// scripts/build-web.sh sets BIASLAB_WASM_DIR; the default is the emcmake build directory.
const wasm_dir = process.env.BIASLAB_WASM_DIR ?? resolve(here, '../build-wasm/cpp/wasm');

export default defineConfig({
  base: './',
  resolve: { alias: { '@wasm': wasm_dir } },
  plugins: [
    katex_prerender({ wasm_dir }), // formulas typeset here: no KaTeX JS in the page
    presets_module({ wasm_dir }), // the presets as page modules: none of their text in the page's engine
    minify_loader({ names: ['biaslab.js', 'biaslab-full.js', 'biaslab-export.js'] }),
    preload_engine({ name: 'biaslab.wasm' }),
  ],
  server: { fs: { allow: [here, wasm_dir] } },
  worker: { format: 'iife' }, // a classic worker: Emscripten 3.1.6 detects workers by importScripts
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    assetsInlineLimit: 0, // fonts and the engine as files, cacheable, never data: URLs
    chunkSizeWarningLimit: 600,
  },
});
