import { EngineError } from './engine-client.js';

// The helpers of one split analysis (engine-client.js): fetched on the first analysis the engine
// splits, so that the first load does not carry it. The engine decided the count and runs part
// 0 in the first worker; each other part gets a helper worker, started from the module the
// first worker runs. When part 0's report and every other part are in, the first worker merges
// them into the report. Each helper is terminated as soon as its part is in (a wasm memory
// never shrinks), or by terminate().

export class Split {
  /**
   * @param {import('./engine-client.js').EngineClient} client
   * @param {object} cur  the client's request: {id, config, full_engine?, on_progress?, reject}
   * @param {number} count  the parts, part 0 included
   */
  constructor(client, cur, count) {
    Object.assign(this, { client, cur, first_report: null, step: '' });
    this.parts = new Array(count).fill(null);
    this.fractions = new Array(count).fill(0);
    this.helpers = [];
    const fail = (err) => client._fail_split(cur, err);
    for (let k = 1; k < count; k++) {
      const helper = client.make_worker();
      this.helpers.push(helper);
      helper.onmessage = ({ data: msg }) => {
        if (msg.id !== cur.id || !this.helpers.includes(helper)) return;
        if (msg.type === 'progress') this.progress(k, '', msg.fraction);
        else if (msg.type === 'fatal') fail(new Error(msg.message));
        else if (msg.type === 'result') {
          let answer;
          try {
            answer = JSON.parse(msg.report);
          } catch (e) {
            fail(new Error(`the engine returned unreadable JSON: ${e.message}`));
            return;
          }
          if (!answer.ok) {
            fail(new EngineError(answer.error));
            return;
          }
          this.parts[k] = msg.report;
          helper.terminate(); // its memory goes back at once
          this.helpers[k - 1] = null;
          this.progress(k, '', 1);
          this.#merge_when_ready();
        }
      };
      helper.onerror = (event) => {
        event.preventDefault?.();
        fail(new Error(`an engine worker failed: ${event.message ?? 'unknown error'}`));
      };
      // The helper runs the module the first worker runs (the full engine, or the first one).
      const message = { type: 'analyze', id: cur.id, config: cur.config, part: k, parts: count };
      if (cur.full_engine) helper.postMessage({ ...message, full: cur.full_engine });
      else {
        helper.postMessage({ type: 'init', glue_url: client.glue_url, wasm_module: client.module });
        helper.postMessage(message);
      }
    }
  }

  /** Progress of part k: the first worker's step, and the parts' mean fraction. */
  progress(k, step, fraction) {
    this.fractions[k] = fraction;
    if (k === 0) this.step = step;
    const mean = this.fractions.reduce((a, b) => a + b, 0) / this.fractions.length;
    this.cur.on_progress?.(`${this.step}, on ${this.fractions.length} workers`, mean);
  }

  /** Part 0's report (with its pending section). */
  first(report) {
    this.first_report = report;
    this.#merge_when_ready();
  }

  // Once part 0's report and every other part are in, the first worker merges them.
  #merge_when_ready() {
    const { client, cur } = this;
    if (!this.first_report || this.parts.slice(1).some((p) => p === null) || client.current !== cur) return;
    const message = { type: 'analyze', id: cur.id, config: this.first_report, merge: this.parts.slice(1) };
    client.worker.postMessage(cur.full_engine ? { ...message, full: cur.full_engine } : message);
  }

  terminate() {
    for (const helper of this.helpers) helper?.terminate();
    this.helpers = [];
  }
}
