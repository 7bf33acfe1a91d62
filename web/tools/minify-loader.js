// Minifies the engine's Emscripten loader (biaslab.js), which the page imports as a plain asset
// (?url) and vite would otherwise copy verbatim: Emscripten 3.1.6 strips whitespace but keeps
// every local name unless it runs the Closure compiler, which Debian does not ship.
//
// esbuild renames locals only: the loader's global (createBiaslab or createBiaslabExport, for
// importScripts in the worker) and every property name (Module["analyze"], ...) stay. The tests
// run the minified loaders.
// The file name's hash is that of the unminified loader: it still changes with every engine.
import { transformWithEsbuild } from 'vite';

/**
 * @param {{names: string[]}} options  asset names to minify (e.g. ['biaslab.js'])
 * @returns {import('vite').Plugin}
 */
export function minify_loader({ names }) {
  return {
    name: 'biaslab-minify-loader',
    apply: 'build',
    async generateBundle(_, bundle) {
      for (const file of Object.values(bundle)) {
        if (file.type !== 'asset' || !(file.names ?? [file.name]).some((n) => names.includes(n))) continue;
        const code = typeof file.source === 'string' ? file.source : new TextDecoder().decode(file.source);
        const out = await transformWithEsbuild(code, file.fileName, { minify: true, target: 'es2020', legalComments: 'none' });
        file.source = out.code;
      }
    },
  };
}
