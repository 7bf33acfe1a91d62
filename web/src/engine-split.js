import { EngineError } from './engine-client.js';

// The helpers of one split analysis (engine-client.js): fetched on the first analysis the engine
// splits, so that the first load does not carry it. The engine decided the count and runs part
// 0 in the first worker; each other part gets a helper worker, started from the module the
// first worker runs. When part 0's report and every other part are in, the first worker merges
// them into the report. Each helper is terminated as soon as its part is in (a wasm memory
// never shrinks), or by terminate(). A helper that fails hands the analysis back to the client,
// which runs it again on one worker.

export class Split {
  /**
   * @param {import('./engine-client.js').EngineClient} client
   * @param {object} cur  the client's request: {id, config, full_engine?, on_progress?, reject,
   *   step?, fraction?} (step, fraction: the first worker's last progress)
   * @param {number} count  the parts, part 0 included
   */
  constructor(client, cur, count) {
    // Progress goes on from where the first worker's was (its step, and its fraction as part 0's).
    Object.assign(this, { client, cur, first_report: null, step: cur.step || 'analysing', shown: cur.fraction ?? 0 });
    this.parts = new Array(count).fill(null);
    this.fractions = new Array(count).fill(0);
    this.fractions[0] = this.shown;
    this.helpers = [];
    // (a helper terminated already, or a split given up, has no say)
    const fail = (helper, err) => this.helpers.includes(helper) && client._split_failed(cur, err);
    for (let k = 1; k < count; k++) {
      const helper = client.make_worker();
      this.helpers.push(helper);
      helper.onmessage = ({ data: msg }) => {
        if (msg.id !== cur.id || !this.helpers.includes(helper)) return;
        if (msg.type === 'progress') this.progress(k, '', msg.fraction);
        else if (msg.type === 'fatal') fail(helper, new Error(msg.message));
        else if (msg.type === 'result') {
          let answer;
          try {
            answer = JSON.parse(msg.report);
          } catch (e) {
            fail(helper, new Error(`the engine returned unreadable JSON: ${e.message}`));
            return;
          }
          if (!answer.ok) {
            fail(helper, new EngineError(answer.error));
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
        fail(helper, new Error(`an engine worker failed: ${event.message ?? 'unknown error'}`));
      };
      // The helper runs the module the first worker runs (the full engine, or the first one).
      const message = { type: 'analyze', id: cur.id, config: cur.config, part: k, parts: count };
      if (cur.full_engine) helper.postMessage({ ...message, full: cur.full_engine });
      else {
        helper.postMessage({ type: 'init', glue_url: client.glue_url, wasm_module: client.module });
        helper.postMessage(message);
      }
    }
    this.progress(0, '', this.shown);
  }

  /**
   * Progress of part k: the first worker's step, and the parts' mean fraction (never going back:
   * the helpers start at 0 when part 0 is already on its way).
   */
  progress(k, step, fraction) {
    this.fractions[k] = fraction;
    if (k === 0 && step) this.step = step;
    const mean = this.fractions.reduce((a, b) => a + b, 0) / this.fractions.length;
    this.shown = Math.max(this.shown, mean);
    this.cur.on_progress?.(`${this.step}, on ${this.fractions.length} workers`, this.shown);
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
