// Headless Chromium through playwright-core, with the flags this machine needs (toolchain.md):
// no sandbox, no GPU, and nothing that talks to the network on its own.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export async function launch() {
  const profile = await mkdtemp(join(tmpdir(), 'biaslab-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 900 },
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Records console errors, page errors and failed or non-local requests of a page.
 * @param {import('playwright-core').Page} page
 */
export function watch(page, allowed_origin) {
  const problems = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()} (${req.failure()?.errorText})`));
  page.on('response', (res) => {
    if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`);
  });
  page.on('request', (req) => {
    const url = req.url();
    if (!url.startsWith(allowed_origin) && !url.startsWith('data:') && !url.startsWith('blob:'))
      problems.push(`request to another host: ${url}`);
  });
  return problems;
}
