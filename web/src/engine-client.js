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
//   of the analysis, then merges the parts' answers into the report one engine would give. If a
//   worker of a split fails (most likely its memory: the engines of a split run at once), the
//   analysis runs again on one worker, once.

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

export async function compile_wasm(url) {
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
    this.exports = new Map(); // id -> {resolve, reject, message?}: PyTorch exports waiting for the worker
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
      else {
        Object.assign(cur, { step: msg.step, fraction: msg.fraction }); // (where a split starts from)
        cur.on_progress?.(msg.step + (cur.unsplit ?? ''), msg.fraction);
      }
    } else if (msg.type === 'split' && !cur.split && !cur.unsplit) {
      // The engine split the analysis and runs part 0: engine-split.js (fetched on the first
      // split) starts a worker for each other part.
      const split = import('./engine-split.js').then(
        ({ Split }) => (this.current === cur && cur.split === split ? new Split(this, cur, msg.count) : null),
        (err) => cur.split === split && this._split_failed(cur, new Error(`could not load the split analysis: ${err.message ?? err}`)),
      );
      cur.split = split;
    } else if (msg.type === 'result') {
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
        const pending = cur.split;
        (pending ?? Promise.resolve(null)).then((split) => {
          if (this.current !== cur || cur.split !== pending) return; // (or run again unsplit meanwhile)
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
      else if (report.needs_full_engine && !cur.full && this.full_wasm_url) {
        // The same request again, on the engine with the convolutions' arithmetic
        // (engine-modules.js); still running, a newer analysis supersedes it as any other.
        Object.assign(cur, { full: true, split: null });
        this.current = cur;
        import('./engine-modules.js').then(
          (m) => m.run_full(this, cur),
          (err) => {
            if (this.current !== cur) return;
            this.current = null;
            cur.reject(new Error(`could not load the full engine: ${err.message ?? err}`));
          },
        );
      } else cur.reject(new EngineError(report.error));
    }
  }

  // The request is over (answered, failed or superseded): its helpers go.
  #finish(cur) {
    if (this.current === cur) this.current = null;
    cur.split?.then((split) => split?.terminate());
  }

  // A worker of split analysis `cur` failed (a helper: engine-split.js; or the first worker).
  // The engines of a split run at once, so one engine may well fit where they did not: the
  // analysis runs again on one worker, the first one replaced, and never splits again (a
  // failure then is the analysis's own). Late news from the abandoned split is dropped.
  _split_failed(cur, err) {
    if (this.current !== cur || !cur.split) return;
    cur.split.then((s) => s?.terminate());
    this.#replace_worker();
    // (unsplit: what the progress line says from now on)
    Object.assign(cur, { split: null, unsplit: `, again on one worker (a worker of the split failed: ${err.message})` });
    cur.on_progress?.(`analysing${cur.unsplit}`, 0);
    const message = { type: 'analyze', id: cur.id, config: cur.config, workers: 1 };
    this.worker.postMessage(cur.full_engine ? { ...message, full: cur.full_engine } : message);
  }

  // The worker is unusable: fail the running request (a split one runs again on one worker); the
  // next request starts a new worker.
  #fail(worker, err) {
    if (worker !== this.worker) return;
    if (this.current?.split) {
      this._split_failed(this.current, err);
      return;
    }
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

  // (an export posted to the old worker goes to the new one: an edit or a Cancel stops the
  // analysis, not the export)
  #replace_worker() {
    this.worker?.terminate();
    this.#spawn().catch(() => {});
    for (const { message } of this.exports.values()) if (message) this.worker.postMessage(message);
  }

  /** The worker, a new one if the last was dropped (engine-modules.js too). */
  _worker() {
    if (!this.worker) this.#spawn().catch(() => {});
    return this.worker;
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
    const id = this.next_id++;
    return new Promise((resolve, reject) => {
      this.current = { id, resolve, reject, on_progress, started: performance.now(), config: config_text, full: false };
      this._worker().postMessage({ type: 'analyze', id, config: config_text, workers: this.workers });
    });
  }

  /**
   * The experiment as a PyTorch script plus its weights: resolves {script, weights_base64};
   * rejects EngineError for an invalid config, or the worker's error if it fails (a worker
   * replaced by an edit or a Cancel hands the export to the next).
   * @param {string} config_text
   * @param {string} [title]
   */
  export_torch(config_text, title = '') {
    // engine-modules.js (fetched on the first export) fetches and compiles the export's module.
    return import('./engine-modules.js').then(
      (m) => m.export_torch(this, config_text, title),
      (err) => Promise.reject(new Error(`could not load the PyTorch export: ${err.message ?? err}`)),
    );
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
