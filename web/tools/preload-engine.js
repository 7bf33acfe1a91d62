// Lets the browser fetch the engine while it is still parsing the page's script: a
// <link rel="preload" as="fetch"> for the .wasm, whose hashed name is known only once the
// bundle is written. engine-client.js fetches the same URL with fetch()'s defaults (CORS mode,
// same-origin credentials), which is what `crossorigin` makes the preload match.
/**
 * @param {{name: string}} options  the asset's original file name (biaslab.wasm)
 * @returns {import('vite').Plugin}
 */
export function preload_engine({ name }) {
  return {
    name: 'biaslab-preload-engine',
    apply: 'build',
    transformIndexHtml: {
      order: 'post',
      handler(html, ctx) {
        const asset = Object.values(ctx.bundle ?? {}).find((f) => f.type === 'asset' && (f.names ?? [f.name]).includes(name));
        if (!asset) throw new Error(`preload-engine: no asset named ${name} in the bundle`);
        return [{ tag: 'link', attrs: { rel: 'preload', href: `./${asset.fileName}`, as: 'fetch', type: 'application/wasm', crossorigin: '' }, injectTo: 'head' }];
      },
    },
  };
}
