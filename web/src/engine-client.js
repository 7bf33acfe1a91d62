// The page's side of the engine: one Web Worker at a time, one analysis in flight.
//
// - A new analysis supersedes the running one: its worker is terminated (a synchronous wasm
//   call cannot be interrupted any other way without cross-origin isolation, which static
//   hosts rarely give) and a fresh worker is started from the already compiled module.
// - Every request carries an id; a message for any id but the current one is dropped, so a
//   stale result can never overwrite a newer one.
// - {ok:false} reports become EngineError {path, message}; superseded or cancelled runs reject
//   with CancelledError, which callers ignore.
// - A large analysis may split over several workers (the engine decides, from its work and its
//   memory bound, and posts 'split'): helper workers (engine-split.js), started from the same
//   compiled module, each run one part of the biases; the first worker runs part 0 and the rest
//   of the analysis, then merges the parts' answers into the report one engine would give.

export class EngineError extends Error {
  constructor({ path = '', message = 'unknown error' } = {}) {
    super(path ? `${path}: ${message}` : message);
    this.name = 'EngineError';
    this.path = path;
    this.detail = message;
  }
}

export class CancelledError extends Error {
  constructor(reason) {
    super(reason);
    this.name = 'CancelledError';
  }
}

async function compile_wasm(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not load ${url}: HTTP ${response.status}`);
  // compileStreaming needs the application/wasm type; some static hosts send another one.
  if (WebAssembly.compileStreaming && (response.headers.get('content-type') ?? '').startsWith('application/wasm'))
    return WebAssembly.compileStreaming(response);
  return WebAssembly.compile(await response.arrayBuffer());
}

export class EngineClient {
  /**
   * @param {{glue_url: string, wasm_url: string, full_glue_url?: string, full_wasm_url?: string,
   *          export_glue_url?: string, export_wasm_url?: string, make_worker: () => Worker,
   *          workers?: number}} options
   *   full_*: the engine with every kind's arithmetic (convolutions), fetched and compiled for the
   *   first config the first-load engine answers with needs_full_engine;
   *   export_*: the PyTorch export's module, fetched and compiled on the first export only;
   *   workers: how many workers one analysis may run at once (default: the cores, at most 4)
   */
  constructor({ glue_url, wasm_url, full_glue_url, full_wasm_url, export_glue_url, export_wasm_url, make_worker, workers }) {
    this.glue_url = glue_url;
    this.wasm_url = wasm_url;
    this.full_glue_url = full_glue_url;
    this.full_wasm_url = full_wasm_url;
    this.full_module = null; // Promise<WebAssembly.Module>, once a config needed it
    this.export_glue_url = export_glue_url;
    this.export_wasm_url = export_wasm_url;
    this.export_module = null; // Promise<WebAssembly.Module>, once an export was asked for
    this.make_worker = make_worker;
    this.workers = Math.min(16, Math.max(1, Math.floor(workers ?? Math.min(4, globalThis.navigator?.hardwareConcurrency ?? 1))));
    this.worker = null;
    this.module = null;
    this.next_id = 1;
    this.current = null; // {id, resolve, reject, on_progress, started}
    this.exports = new Map(); // id -> {resolve, reject}: PyTorch exports waiting for the worker
  }

  /** Compiles the module and starts the first worker; resolves with the engine's static data. */
  async start() {
    // The worker starts and loads the engine's script while the module compiles.
    const compiled = compile_wasm(this.wasm_url).then((module) => {
      performance.mark('biaslab:engine-compiled');
      return (this.module = module);
    });
    const ready = await this.#spawn(compiled);
    performance.mark('biaslab:engine-ready');
    return { version: ready.version, schema: JSON.parse(ready.schema) };
  }

  /**
   * A new worker. `compiled` resolves with the module while it compiles (first start); a
   * replacement gets the module at once, so its init arrives before any analyze message.
   */
  #spawn(compiled = null) {
    const worker = this.make_worker();
    this.worker = worker;
    worker.postMessage({ type: 'load', glue_url: this.glue_url });
    return new Promise((resolve, reject) => {
      worker.onmessage = (event) => {
        const msg = event.data;
        if (msg.type === 'ready') resolve(msg);
        else this.#on_message(worker, msg, reject);
      };
      worker.onerror = (event) => {
        event.preventDefault?.();
        const err = new Error(`the engine worker failed: ${event.message ?? 'unknown error'}`);
        reject(err);
        this.#fail(worker, err);
      };
      const init = (wasm_module) => worker.postMessage({ type: 'init', glue_url: this.glue_url, wasm_module });
      if (!compiled) init(this.module);
      else
        compiled.then(init, (err) => {
          reject(err);
          this.#fail(worker, err);
        });
    });
  }

  #on_message(worker, msg, reject_ready) {
    if (worker !== this.worker) return;
    if (msg.type === 'fatal') {
      const err = new Error(msg.message);
      reject_ready(err);
      this.#fail(worker, err);
      return;
    }
    if (msg.type === 'exported') {
      const waiting = this.exports.get(msg.id);
      this.exports.delete(msg.id);
      if (!waiting) return;
      const bundle = JSON.parse(msg.bundle);
      if (bundle.ok) waiting.resolve(bundle);
      else waiting.reject(new EngineError(bundle.error));
      return;
    }
    const cur = this.current;
    if (!cur || msg.id !== cur.id) return; // stale: a superseded request
    if (msg.type === 'progress') {
      if (cur.split) cur.split.then((split) => split?.progress(0, msg.step, msg.fraction));
      else cur.on_progress?.(msg.step, msg.fraction);
    } else if (msg.type === 'split' && !cur.split)
      // The engine split the analysis and runs part 0: engine-split.js (fetched on the first
      // split) starts a worker for each other part.
      cur.split = import('./engine-split.js').then(
        ({ Split }) => (this.current === cur ? new Split(this, cur, msg.count) : null),
        (err) => this._fail_split(cur, new Error(`could not load the split analysis: ${err.message ?? err}`)),
      );
    else if (msg.type === 'result') {
      let report;
      try {
        report = JSON.parse(msg.report);
      } catch (e) {
        this.#finish(cur);
        cur.reject(new Error(`the engine returned unreadable JSON: ${e.message}`));
        return;
      }
      if (report.ok && report.pending) {
        // Part 0: the merge waits for the other parts.
        (cur.split ?? Promise.resolve(null)).then((split) => {
          if (this.current !== cur) return;
          if (split) split.first(msg.report);
          else {
            this.#finish(cur);
            cur.reject(new Error('the engine split the analysis, and no worker ran the other parts'));
          }
        });
        return;
      }
      this.#finish(cur);
      const round_trip_ms = performance.now() - cur.started;
      if (report.ok) cur.resolve({ report, ms: cur.split ? round_trip_ms : msg.ms, round_trip_ms });
      else if (report.needs_full_engine && !cur.full && this.full_wasm_url) this.#run_full(cur);
      else cur.reject(new EngineError(report.error));
    }
  }

  // The request is over (answered, failed or superseded): its helpers go.
  #finish(cur) {
    if (this.current === cur) this.current = null;
    cur.split?.then((split) => split?.terminate());
  }

  // A split analysis's helpers (engine-split.js): fails request `cur` with `err`, the first
  // worker (busy with part 0) replaced.
  _fail_split(cur, err) {
    if (this.current !== cur) return;
    this.#replace_worker();
    this.#finish(cur);
    cur.reject(err);
  }

  // The worker is unusable: fail the running request and start a replacement for the next.
  #fail(worker, err) {
    if (worker !== this.worker) return;
    worker.terminate();
    this.worker = null;
    const cur = this.current;
    if (cur) this.#finish(cur);
    cur?.reject(err);
    this.#drop_exports(err);
  }

  #drop_exports(err) {
    for (const { reject } of this.exports.values()) reject(err);
    this.exports.clear();
  }

  #replace_worker() {
    this.#drop_exports(new CancelledError('the engine was restarted'));
    this.worker?.terminate();
    this.worker = null;
    this.#spawn().catch(() => {});
  }

  // The same request again, on the engine with the convolutions' arithmetic (fetched and compiled
  // once; a worker that replaces this one instantiates it again when it needs it).
  #run_full(cur) {
    cur.full = true;
    this.current = cur; // still running: a newer analysis supersedes it as any other
    if (!this.full_module) {
      this.full_module = compile_wasm(this.full_wasm_url);
      this.full_module.catch(() => (this.full_module = null)); // a failed fetch may be retried
    }
    cur.on_progress?.('loading the full engine', 0);
    this.full_module.then(
      (wasm_module) => {
        if (this.current !== cur || !this.worker) return; // superseded meanwhile
        cur.full_engine = { glue_url: this.full_glue_url, wasm_module };
        this.worker.postMessage({ type: 'analyze', id: cur.id, config: cur.config, full: cur.full_engine, workers: this.workers });
      },
      (err) => {
        if (this.current !== cur) return;
        this.current = null;
        cur.reject(new Error(`could not load the full engine: ${err.message ?? err}`));
      },
    );
  }

  /** True while an analysis is running. */
  get busy() {
    return this.current !== null;
  }

  /**
   * Analyses a config (JSON text). Resolves {report, ms}; rejects EngineError for invalid
   * configs, CancelledError when superseded or cancelled.
   * @param {string} config_text
   * @param {{on_progress?: (step: string, fraction: number) => void}} [options]
   */
  analyze(config_text, { on_progress } = {}) {
    if (this.current) this.#abort('superseded by a newer analysis');
    if (!this.worker) this.#spawn().catch(() => {});
    const id = this.next_id++;
    return new Promise((resolve, reject) => {
      this.current = { id, resolve, reject, on_progress, started: performance.now(), config: config_text, full: false };
      this.worker.postMessage({ type: 'analyze', id, config: config_text, workers: this.workers });
    });
  }

  /**
   * The experiment as a PyTorch script plus its weights: resolves {script, weights_base64};
   * rejects EngineError for an invalid config, CancelledError if the worker is replaced first.
   * @param {string} config_text
   * @param {string} [title]
   */
  export_torch(config_text, title = '') {
    const id = this.next_id++;
    if (!this.export_module) {
      this.export_module = compile_wasm(this.export_wasm_url);
      this.export_module.catch(() => (this.export_module = null)); // a failed fetch may be retried
    }
    return new Promise((resolve, reject) => {
      this.exports.set(id, { resolve, reject });
      this.export_module.then(
        (wasm_module) => {
          if (!this.exports.has(id)) return; // dropped meanwhile (the worker was replaced)
          if (!this.worker) this.#spawn().catch(() => {});
          this.worker.postMessage({ type: 'export', id, config: config_text, title, glue_url: this.export_glue_url, wasm_module });
        },
        (err) => {
          this.exports.delete(id);
          reject(new Error(`could not load the PyTorch export: ${err.message ?? err}`));
        },
      );
    });
  }

  /** Stops the running analysis, if any; its promise rejects with CancelledError(reason). */
  cancel(reason = 'cancelled') {
    if (this.current) this.#abort(reason);
  }

  #abort(reason) {
    const cur = this.current;
    this.#finish(cur);
    this.#replace_worker();
    cur.reject(new CancelledError(reason));
  }
}
