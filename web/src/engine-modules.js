import { compile_wasm } from './engine-client.js';

// The engine's other two modules, on the page's side of engine-client.js: the engine with every
// kind's arithmetic (convolutions), for a config the first-load engine answers with
// needs_full_engine, and the PyTorch export's engine. This code is fetched with the first need
// of either, the modules themselves on the first need of each, so neither is in the first load.

// The module at `url`, fetched and compiled once per client (kept under client[key]); a failed
// fetch may be tried again.
function compiled(client, key, url) {
  if (!client[key]) {
    client[key] = compile_wasm(url);
    client[key].catch(() => (client[key] = null));
  }
  return client[key];
}

/** Request `cur` again, on the full engine (a worker that replaces this one instantiates it again
 * when it needs it). */
export function run_full(client, cur) {
  if (client.current !== cur) return; // superseded meanwhile
  cur.on_progress?.('loading the full engine', 0);
  compiled(client, 'full_module', client.full_wasm_url).then(
    (wasm_module) => {
      if (client.current !== cur) return;
      cur.full_engine = { glue_url: client.full_glue_url, wasm_module };
      const workers = cur.unsplit ? 1 : client.workers;
      client._worker().postMessage({ type: 'analyze', id: cur.id, config: cur.config, full: cur.full_engine, workers });
    },
    (err) => {
      if (client.current !== cur) return;
      client.current = null;
      cur.reject(new Error(`could not load the full engine: ${err.message ?? err}`));
    },
  );
}

/**
 * The experiment as a PyTorch script plus its weights (EngineClient.export_torch): resolves
 * {script, weights_base64}; rejects EngineError for an invalid config, or the worker's error if
 * it fails. Answered with its own id: an export never supersedes an analysis, it waits for the
 * worker like any message (and follows it to the worker that replaces it).
 */
export function export_torch(client, config_text, title) {
  const id = client.next_id++;
  const module = compiled(client, 'export_module', client.export_wasm_url);
  return new Promise((resolve, reject) => {
    client.exports.set(id, { resolve, reject });
    module.then(
      (wasm_module) => {
        const waiting = client.exports.get(id);
        if (!waiting) return; // dropped meanwhile (the worker failed)
        // (kept: a worker that replaces this one gets it again)
        waiting.message = { type: 'export', id, config: config_text, title, glue_url: client.export_glue_url, wasm_module };
        client._worker().postMessage(waiting.message);
      },
      (err) => {
        client.exports.delete(id);
        reject(new Error(`could not load the PyTorch export: ${err.message ?? err}`));
      },
    );
  });
}
