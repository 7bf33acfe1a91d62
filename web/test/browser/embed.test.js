// Embeds for blogs (issue 12): `show=` picks the sections (any subset of biases, folds, sweep,
// invariances, card), `card` is one parameter (`param=`): its verdict, why and its curve;
// `theme=light|dark|auto`; the snippet builder picks both. Tested the way articles are published:
// a Hugo site built here with docs/embed.md's shortcode, served with web/dist, at 700 px.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, mkdir, writeFile, readFile, symlink, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { use_page, DIST, SHOTS } from '../support/page.js';
import { serve } from '../support/static-server.js';
import { WEB, load_engine } from '../support/engine.js';
import { encode_link } from '../../src/share-codec.js';

const env = use_page();
const SECTIONS = ['biases', 'folds', 'minimal', 'sweep', 'invariances', 'card'];
const visible = (page) => page.evaluate((ids) => ids.filter((id) => { const el = document.getElementById(`section-${id}`); return el && el.offsetParent !== null; }), SECTIONS);
const K_PROJ = 'layers.0.body.1.k_proj.bias';

for (const [show, expected] of [['biases', ['biases']], ['folds', ['folds', 'minimal']], ['sweep', ['sweep']], ['invariances', ['invariances']], ['card', ['card']], ['biases,sweep', ['biases', 'sweep']]]) {
  test(`embed: show=${show} shows only ${expected.join(' and ')}`, async () => {
    const { page, problems } = await env.open(`?embed=1&show=${show}&param=${K_PROJ}`, { viewport: { width: 700, height: 900 } });
    assert.deepEqual(await visible(page), expected);
    if (show === 'card') {
      const card = page.locator('#section-card');
      const text = await card.innerText();
      assert.match(text, new RegExp(K_PROJ.replace(/\./g, '\\.')));
      assert.match(text, /redundant/);
      assert.match(text, /softmax/i, 'the card says why');
      await card.locator('.plot-canvas').waitFor();
      const labels = await card.locator('.plot-canvas').evaluate((el) => el.uplot.series.slice(1).map((s) => s.label));
      assert.ok(labels.every((l) => l.includes('k_proj') || /floor/.test(l)), labels.join(', '));
      await page.screenshot({ path: resolve(SHOTS, 'embed-card-700.png'), fullPage: true });
    }
    assert.deepEqual(problems, []);
    await page.close();
  });
}

/** The embed in an iframe of a host page that records its height messages; resolves once the
 * iframe has analysed and its last message matches its content. */
async function host_embed(query, width = 700) {
  const page = await env.browser.context.newPage();
  await page.setViewportSize({ width, height: 900 });
  await page.setContent(`<!doctype html><body style="margin:0"><iframe class="biaslab-embed" src="${env.server.url}?${query.replace(/&/g, '&amp;')}" style="width:100%;border:0" height="900"></iframe><script>window.heights = []; addEventListener('message', (e) => { if (e.data?.type === 'biaslab:height') { heights.push(e.data.height); document.querySelector('iframe').style.height = e.data.height + 'px'; } });</script></body>`);
  const frame = await (await page.waitForSelector('iframe')).contentFrame();
  await frame.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1, null, { timeout: 60000 });
  await settled(page, frame);
  return { page, frame };
}

/** Waits until the last height the embed posted is its content's height (the host page is
 * cross-origin to the embed, so each side is asked on its own). */
async function settled(page, frame) {
  for (let i = 0; i < 200; i++) {
    const posted = await page.evaluate(() => heights.at(-1));
    const app = await frame.evaluate(() => document.getElementById('app').getBoundingClientRect().height);
    if (posted !== undefined && Math.abs(posted - app) <= 1) return posted;
    await page.waitForTimeout(100);
  }
  throw new Error('the embed never posted its content height');
}

const ONLY = { biases: ['biases'], folds: ['folds', 'minimal'], stack: ['stack'], sweep: ['sweep'], invariances: ['invariances'], card: ['card'] };
test('embed: each section alone shows just that section under one title line, and posts a height that fits it', async () => {
  const full = await host_embed('embed=1');
  const full_height = await full.page.evaluate(() => heights.at(-1));
  await full.page.close();
  for (const [show, expected] of Object.entries(ONLY)) {
    const { page, frame } = await host_embed(`embed=1&show=${show}`);
    if (show === 'sweep' || show === 'card') await frame.locator('.plot-canvas').first().waitFor();
    if (show === 'stack') await frame.locator('path.stack-arrow').first().waitFor({ state: 'attached' });
    await settled(page, frame);
    const seen = await frame.evaluate(() => {
      const on = (el) => Boolean(el && el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden');
      return {
        sections: [...document.querySelectorAll('.result-section')].filter(on).map((el) => el.id.replace('section-', '')),
        others: ['.site-header', '#experiment-title', '#summary', '#glossary', '#report-export', '#embed-experiment details', '#embed-experiment .claim', '#editor-grid', '.site-footer'].filter((sel) => on(document.querySelector(sel))),
        title: document.querySelector('.embed-title')?.innerText ?? '',
        link: on(document.querySelector('.embed-title #open-full')),
        app: document.getElementById('app').getBoundingClientRect().height,
        overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
      };
    });
    const height = await page.evaluate(() => heights.at(-1));
    assert.deepEqual(seen.sections, expected, `show=${show}`);
    assert.deepEqual(seen.others, [], `show=${show} shows only its section`);
    assert.match(seen.title, /^biaslab: Pre-norm attention block · float64/, `show=${show}: the title line`);
    assert.ok(seen.link, `show=${show}: the link to the full page ends the title line`);
    assert.ok(Math.abs(height - seen.app) <= 1, `show=${show}: posted ${height}, content ${seen.app}`);
    assert.ok(height > 100 && height < full_height - 200, `show=${show}: height ${height} (all sections: ${full_height})`);
    assert.equal(seen.overflow, 0, `show=${show}: no sideways scroll`);
    if (show === 'stack') await page.screenshot({ path: resolve(SHOTS, 'embed-stack-700.png'), fullPage: true });
    console.log(`show=${show}: height ${height} (all: ${full_height})`);
    await page.close();
  }
});

test('embed: theme=dark and theme=light fix the colours, theme=auto follows the reader', async () => {
  for (const [theme, want] of [['dark', 'dark'], ['light', 'light'], ['auto', null]]) {
    const { page } = await env.open(`?embed=1&theme=${theme}`, { viewport: { width: 700, height: 900 } });
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme ?? null), want, theme);
    await page.close();
  }
});

test('embed: the snippet builder picks the sections, the parameter and the theme', async () => {
  const { page, problems } = await env.open();
  await page.click('#copy-embed');
  const builder = page.locator('#embed-builder');
  assert.equal(await builder.isVisible(), true);
  await builder.locator('input[value="folds"]').uncheck();
  await builder.locator('input[value="invariances"]').uncheck();
  await builder.locator('input[value="card"]').check();
  await builder.locator('select[name="param"]').selectOption(K_PROJ);
  await builder.locator('select[name="embed-theme"]').selectOption('dark');
  const snippet = await builder.locator('textarea').inputValue();
  assert.match(snippet, /^<iframe class="biaslab-embed" src="[^"]*\?embed=1&amp;show=biases%2Cstack%2Csweep%2Ccard&amp;param=layers\.0\.body\.1\.k_proj\.bias&amp;theme=dark#v1\./);
  assert.deepEqual(problems, []);
  await page.close();
});

test('embed: in a Hugo post at 700 px the iframe sizes itself, shows the chosen sections and nothing overflows', async () => {
  const site = await mkdtemp(join(tmpdir(), 'biaslab-hugo-'));
  try {
    // The shortcode exactly as docs/embed.md gives it.
    const doc = await readFile(resolve(WEB, '../docs/embed.md'), 'utf8');
    const shortcode = doc.match(/Save as `layouts\/shortcodes\/biaslab\.html`[\s\S]*?```go-html-template\n([\s\S]*?)```/)[1];
    await mkdir(join(site, 'layouts/shortcodes'), { recursive: true });
    await mkdir(join(site, 'layouts/_default'), { recursive: true });
    await mkdir(join(site, 'content/posts'), { recursive: true });
    await writeFile(join(site, 'layouts/shortcodes/biaslab.html'), shortcode);
    await writeFile(join(site, 'hugo.toml'), "baseURL = 'http://localhost/'\ntitle = 'A blog'\ndisableKinds = ['taxonomy', 'term', 'RSS', 'sitemap']\n");
    await writeFile(join(site, 'layouts/_default/single.html'), '<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>{{ .Title }}</title><style>body{margin:0;font-family:serif}article{max-width:700px;margin:0 auto}</style></head><body><article><h1>{{ .Title }}</h1>{{ .Content }}</article></body></html>');
    await writeFile(join(site, 'layouts/_default/list.html'), '<!doctype html><html><body>{{ range .Pages }}<a href="{{ .RelPermalink }}">{{ .Title }}</a>{{ end }}</body></html>');
    // The link the snippet builder would give (the default experiment: its fragment is optional).
    await writeFile(join(site, 'content/posts/keys.md'), `---\ntitle: "The key bias does nothing"\n---\n\nSoftmax ignores a shift shared by all keys.\n\n{{< biaslab src="/biaslab/?embed=1&show=biases,card&param=${K_PROJ}&theme=light" title="Key bias" >}}\n\nAnd the folds:\n\n{{< biaslab src="/biaslab/?embed=1&show=folds" title="Folds" >}}\n\nThe whole stack:\n\n{{< biaslab src="/biaslab/?embed=1&show=stack&theme=dark" title="Stack" >}}\n\nThe end.\n`);
    execFileSync('hugo', ['--quiet', '-s', site, '-d', join(site, 'public')], { stdio: 'pipe' });
    await symlink(DIST, join(site, 'public/biaslab'));
    const server = await serve(join(site, 'public'));
    try {
      const page = await env.browser.context.newPage();
      await page.setViewportSize({ width: 700, height: 900 });
      await page.goto(`${server.url}posts/keys/`);
      const frames = page.locator('iframe.biaslab-embed');
      assert.equal(await frames.count(), 3);
      // Each iframe grows to its content (the height message), from the 900 px it starts with.
      for (let i = 0; i < 3; i++) {
        await frames.nth(i).scrollIntoViewIfNeeded();
        await page.waitForFunction((i) => {
          const f = document.querySelectorAll('iframe.biaslab-embed')[i];
          const d = f.contentDocument;
          if (!d || Number(d.documentElement.dataset.analyses ?? 0) < 1 || !f.style.height) return false;
          return Math.abs(f.getBoundingClientRect().height - d.getElementById('app').getBoundingClientRect().height) <= 2;
        }, i, { timeout: 60000 });
      }
      const inner = await Promise.all([0, 1, 2].map((i) => frames.nth(i).evaluate((f) => {
        const d = f.contentDocument;
        return {
          height: f.getBoundingClientRect().height,
          sections: ['biases', 'folds', 'minimal', 'stack', 'sweep', 'invariances', 'card'].filter((id) => d.getElementById(`section-${id}`)?.offsetParent),
          overflow: d.documentElement.scrollWidth - d.documentElement.clientWidth,
          tables: [...d.querySelectorAll('.table-wrap')].filter((w) => w.offsetParent).map((w) => w.scrollWidth - w.clientWidth),
          theme: d.documentElement.dataset.theme ?? null,
        };
      })));
      assert.deepEqual(inner[0].sections, ['biases', 'card']);
      assert.deepEqual(inner[1].sections, ['folds', 'minimal']);
      assert.deepEqual(inner[2].sections, ['stack']);
      assert.equal(inner[2].theme, 'dark');
      assert.equal(inner[0].theme, 'light');
      for (const x of inner) {
        assert.ok(x.height !== 900 && x.height > 200, `iframe height ${x.height}`);
        assert.equal(x.overflow, 0, 'the embedded page does not scroll sideways');
        assert.ok(x.tables.every((d) => d <= 1), `a table overflows: ${x.tables}`);
      }
      assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), true, 'the post does not scroll sideways');
      await frames.nth(0).locator('xpath=..').evaluate(() => scrollTo(0, 0));
      await page.screenshot({ path: resolve(SHOTS, 'embed-hugo-700.png'), fullPage: true });
      await page.close();
    } finally {
      await server.close();
    }
  } finally {
    await rm(site, { recursive: true, force: true });
  }
});

test('embed: the title names the preset a link carries, once every preset has landed', async () => {
  // The presets' sentences and configs are fetched after the engine starts; the embed's title
  // is drawn before that and must be drawn again when they land.
  const engine = await load_engine();
  const zoo = engine.presets().find((p) => p.name === 'norm-zoo');
  const { page, problems } = await env.open(`?embed=1${encode_link(engine.schema(), JSON.parse(zoo.config))}`, { viewport: { width: 700, height: 900 } });
  await page.waitForFunction((title) => document.querySelector('.embed-title')?.innerText.includes(title), zoo.title);
  assert.deepEqual(problems, []);
  await page.close();
});
