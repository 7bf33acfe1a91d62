// The presets, read at build time from the Node build of the engine, so that the page's engine
// carries none of their text (about 4 KB gzip of the first load). Two virtual modules:
//   virtual:preset-index  export default [{name, title}]  (the preset menu), and
//                         export const first = {name, title, claim, config}  (the default
//                         experiment, which the first analysis needs)
//   virtual:presets       export default [{name, title, claim, config}]  (every preset; the page
//                         imports it at start, outside the first load, like the articles' claims)
import { node_engine } from './node-engine.js';

export function presets_module({ wasm_dir }) {
  let list = null;
  const presets = async () => {
    if (!list) {
      const m = await node_engine(wasm_dir);
      if (typeof m.presets !== 'function') throw new Error(`the engine in ${wasm_dir} has no presets(): rebuild it (scripts/build-web.sh wasm)`);
      list = JSON.parse(m.presets());
    }
    return list;
  };
  const ids = { 'virtual:preset-index': '\0preset-index', 'virtual:presets': '\0presets' };
  return {
    name: 'biaslab-presets',
    resolveId: (id) => ids[id],
    async load(id) {
      if (id === ids['virtual:preset-index']) {
        const all = await presets();
        const first = all.find((p) => p.name === 'default') ?? all[0];
        return `export default ${JSON.stringify(all.map(({ name, title }) => ({ name, title })))};\nexport const first = ${JSON.stringify(first)};\n`;
      }
      if (id === ids['virtual:presets']) return `export default ${JSON.stringify(await presets())};\n`;
      return null;
    },
  };
}
