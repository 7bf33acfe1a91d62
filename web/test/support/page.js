// Shared setup for the browser test files: the built page served from 127.0.0.1, one Chromium,
// and helpers that wait on the page's analysis counter (data-analyses on <html>), never on time.
import { before, after } from 'node:test';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';

import { serve } from './static-server.js';
import { launch, watch } from './browser.js';
import { WEB } from './engine.js';

export const DIST = resolve(WEB, 'dist');
export const SHOTS = resolve(WEB, 'test/screenshots');

/** Registers before/after hooks; the returned object is filled in once they ran. */
export function use_page() {
  const env = { server: null, browser: null };
  before(async () => {
    if (!existsSync(resolve(DIST, 'index.html'))) throw new Error(`${DIST} is missing: run npm run build (or scripts/build-web.sh)`);
    await mkdir(SHOTS, { recursive: true });
    env.server = await serve(DIST);
    env.browser = await launch();
  });
  after(async () => {
    await env.browser?.close();
    await env.server?.close();
  });
  /** Opens a page (path relative to the server) and waits for its first analysis. */
  env.open = async (path = '', { viewport, color_scheme, timeout = 60000 } = {}) => {
    const page = await env.browser.context.newPage();
    if (viewport) await page.setViewportSize(viewport);
    if (color_scheme) await page.emulateMedia({ colorScheme: color_scheme });
    const problems = watch(page, env.server.url);
    await page.goto(env.server.url + path);
    await page.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1, null, { timeout });
    return { page, problems };
  };
  return env;
}

export const analyses = (page) => page.evaluate(() => Number(document.documentElement.dataset.analyses ?? 0));

/** Runs `action`, then waits until the page has finished one more analysis. */
export async function after_analysis(page, action) {
  const n = await analyses(page);
  await action();
  await page.waitForFunction((n) => Number(document.documentElement.dataset.analyses ?? 0) > n, n, { timeout: 60000 });
}

export const table_texts = (page) => page.$$eval('#results-body table', (ts) => ts.map((t) => t.innerText));
export const bias_names = (page) => page.$$eval('table.table-biases > tbody > tr > th', (ths) => ths.map((th) => th.innerText.trim()));
