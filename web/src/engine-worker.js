// The engine's thread: a classic Web Worker (Emscripten 3.1.6 finds its environment through
// importScripts). The page compiles the .wasm once and hands every worker the compiled
// WebAssembly.Module, so replacing a worker to cancel a long analysis costs only instantiation.
//
// Messages in:  {type:'load', glue_url}  (optional, first: load the engine's script while the
//                page still compiles the module)
//               {type:'init', glue_url, wasm_module}   {type:'analyze', id, config, full?}
//                (full: {glue_url, wasm_module} of the engine with the convolutions' arithmetic,
//                sent again for a config the first-load engine answered with needs_full_engine)
//               {type:'export', id, config, title, glue_url, wasm_module}  (the PyTorch export's
//                module: a second, smaller engine that the page fetches on the first export)
//               analyze also takes workers (the engines the page can run at once: a large
//                analysis may split over them, and says so with a 'split' message first) or
//                part and parts (this worker runs that part of a split analysis)
//                or merge (the other parts' answers, JSON texts: config is then part 0's report,
//                and the answer the split analysis's report)
// Messages out: {type:'ready', version, schema}  (schema: JSON text; the presets are page modules)
//               {type:'progress', id, step, fraction}
//               {type:'split', id, count}               (the analysis runs as part 0 of count)
//               {type:'result', id, report, ms}         (report: JSON text)
//               {type:'exported', id, bundle}           (bundle: JSON text)
//               {type:'fatal', id?, message}            (the module is unusable; replace the worker)

let engine = null;
let full = null; // the engine with every kind's arithmetic, started on the first message that needs it
let exporter = null; // the export module, started on the first export message
let script = null; // {error} once importScripts has run

self.onmessage = (event) => {
  const msg = event.data;
  if (msg.type === 'load') load_script(msg.glue_url);
  else if (msg.type === 'init') engine = boot(msg);
  else if (msg.type === 'analyze') run(msg);
  else if (msg.type === 'export') export_torch(msg);
};

function load_script(glue_url) {
  if (script) return script;
  try {
    importScripts(glue_url); // defines createBiaslab (MODULARIZE, EXPORT_NAME)
    script = { error: null };
  } catch (e) {
    script = { error: e };
  }
  return script;
}

// An Emscripten factory instantiated from an already compiled module; rejects if that fails.
function instantiate(factory, wasm_module) {
  return new Promise((resolve, reject) => {
    factory({
      instantiateWasm(imports, receive) {
        WebAssembly.instantiate(wasm_module, imports).then((instance) => receive(instance, wasm_module), reject);
        return {};
      },
      print: () => {},
      printErr: (text) => console.warn('[biaslab engine]', text),
    }).then(resolve, reject);
  });
}

function boot({ glue_url, wasm_module }) {
  const { error } = load_script(glue_url);
  if (error) {
    self.postMessage({ type: 'fatal', message: `could not load the engine script: ${error}` });
    return Promise.reject(error);
  }
  return instantiate(self.createBiaslab, wasm_module).then(
    (m) => {
      // boot_ms: since this worker started (its performance.now() origin), for the page's timings.
      self.postMessage({ type: 'ready', version: m.version(), schema: m.schema(), boot_ms: performance.now() });
      return m;
    },
    (e) => {
      self.postMessage({ type: 'fatal', message: `could not start the engine: ${e}` });
      throw e;
    },
  );
}

// The export module: its failures answer the export only (the analyses go on).
function boot_export({ glue_url, wasm_module }) {
  importScripts(glue_url); // defines createBiaslabExport
  const started = instantiate(self.createBiaslabExport, wasm_module);
  started.catch(() => (exporter = null)); // the next export tries again
  return started;
}

// The engine with convolutions: loaded like the export module, answered like the first engine.
function boot_full({ glue_url, wasm_module }) {
  importScripts(glue_url); // defines createBiaslabFull
  const started = instantiate(self.createBiaslabFull, wasm_module);
  started.catch(() => (full = null));
  return started;
}

async function run({ id, config, full: full_engine, workers, part, parts, merge }) {
  let m;
  try {
    m = full_engine ? await (full ??= boot_full(full_engine)) : await engine;
  } catch (e) {
    self.postMessage({ type: 'fatal', id, message: `the engine did not start: ${e}` });
    return;
  }
  // Progress arrives between the engine's steps; posting more often than every 40 ms only
  // floods the page.
  let last = -Infinity;
  const progress = (step, fraction) => {
    const now = performance.now();
    if (now - last < 40 && fraction < 1) return;
    last = now;
    self.postMessage({ type: 'progress', id, step, fraction });
  };
  const callbacks = { progress };
  if (workers > 1) Object.assign(callbacks, { workers, split: (count) => self.postMessage({ type: 'split', id, count }) });
  if (parts > 1) Object.assign(callbacks, { part, parts });
  const t0 = performance.now();
  try {
    const report = merge ? m.mergeParts(config, `[${merge.join(',')}]`) : m.analyzeWithCallbacks(config, callbacks);
    self.postMessage({ type: 'result', id, report, ms: performance.now() - t0 });
  } catch (e) {
    // Only an abort (e.g. memory exhausted) gets here; the C++ side reports all else as JSON.
    self.postMessage({ type: 'fatal', id, message: `the engine stopped: ${e && e.message ? e.message : e}` });
  }
}

// The exported PyTorch script and weights: one engine call, answered with its own id (an export
// never supersedes an analysis, it waits for the worker like any message).
async function export_torch(msg) {
  const { id, config, title } = msg;
  try {
    exporter ??= boot_export(msg);
    const m = await exporter;
    self.postMessage({ type: 'exported', id, bundle: m.exportTorch(config, title ?? '') });
  } catch (e) {
    self.postMessage({ type: 'exported', id, bundle: JSON.stringify({ ok: false, error: { path: '', message: `the engine stopped: ${e && e.message ? e.message : e}` } }) });
  }
}
