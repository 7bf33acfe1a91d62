// The sweep plot (issue 12): distinct colours for many curves, legend swatches drawn with each
// curve's colour and dash, highlight on hover, the redundant-direction curves grouped in one
// legend entry, the hide/show behaviour stated, and no layout read at the first render.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';

import { use_page, after_analysis, SHOTS } from '../support/page.js';
import { load_engine } from '../support/engine.js';
import { encode_link } from '../../src/share-codec.js';

const env = use_page();

// 15 Linear layers, each with its bias: 15 effective curves.
const FIFTEEN = { version: 1, seed: 3, dtype: 'float64', shape: { batch: 2, tokens: 4, features: 8 }, layers: Array.from({ length: 15 }, () => ({ type: 'linear' })) };

/** uPlot's drawn series (index, label, resolved colour, dash) and the legend's entries. */
const plot_state = (page) => page.evaluate(() => {
  const u = document.querySelector('.plot-canvas').uplot;
  const series = u.series.slice(1).map((s, j) => ({ i: j + 1, label: s.label, stroke: s._stroke ?? s.stroke(u, j + 1), dash: (s.dash ?? []).join(' ') || 'none', show: s.show, alpha: s.alpha ?? 1 }));
  const legend = [...document.querySelectorAll('.sweep-legend .legend-entry')].map((b) => {
    const lines = [...b.querySelectorAll('svg line')];
    return { series: b.dataset.series.split(' ').map(Number), label: b.innerText.trim(), strokes: lines.map((l) => l.getAttribute('stroke').toLowerCase()), dashes: [...new Set(lines.map((l) => l.getAttribute('stroke-dasharray')))], pressed: b.getAttribute('aria-pressed'), focused: b.classList.contains('focused') };
  });
  return { series, legend };
});
const wait_plot = (page) => page.waitForFunction(() => document.querySelector('.plot-canvas')?.uplot);

test('sweep: 15 curves get 15 distinct colours, and every legend swatch has its curve\'s colour and dash', async () => {
  const schema = (await load_engine()).schema();
  const { page, problems } = await env.open(encode_link(schema, FIFTEEN));
  await wait_plot(page);
  const { series, legend } = await plot_state(page);
  const biases = series.filter((s) => /^layers\.\d+\.bias$/.test(s.label));
  assert.equal(biases.length, 15);
  assert.equal(new Set(biases.map((s) => s.stroke.toLowerCase())).size, 15, biases.map((s) => s.stroke).join());
  for (const e of legend) {
    const drawn = series.filter((x) => e.series.includes(x.i));
    // A single curve's swatch is its colour; a group's shows its curves' colours (up to four).
    const colours = [...new Set(drawn.map((s) => s.stroke.toLowerCase()))];
    assert.deepEqual(e.strokes, colours.slice(0, 4), `swatch colours of ${e.label}`);
    assert.deepEqual(e.dashes, [...new Set(drawn.map((s) => s.dash))], `swatch dash of ${e.label}`);
    if (e.series.length === 1) assert.equal(e.label, drawn[0].label);
  }
  assert.ok(legend.some((e) => e.label === 'noise floor' && e.dashes[0] === '5 5'));
  await page.locator('#section-sweep').screenshot({ path: resolve(SHOTS, 'sweep-15.png') });
  assert.deepEqual(problems, []);
  await page.close();
});

test('sweep: hover highlights a curve, a click hides and shows it, the redundant parts are one legend group', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'postnorm-transformer'));
  await wait_plot(page);
  let { series, legend } = await plot_state(page);
  const parts = series.filter((s) => /redundant part/.test(s.label));
  assert.ok(parts.length >= 3, `${parts.length} redundant-part curves`);
  const groups = legend.filter((e) => e.series.length > 1);
  assert.equal(groups.length, 1, 'one legend entry for all redundant-part curves');
  assert.deepEqual(groups[0].series.sort(), parts.map((s) => s.i).sort());
  assert.equal(legend.filter((e) => e.series.some((i) => parts.some((p) => p.i === i))).length, 1, 'no separate entries for them');
  assert.match(await page.textContent('#section-sweep'), /Click a legend entry to hide or show/);

  // Hover over a legend entry: its curve stays, the others fade.
  const first = page.locator('.sweep-legend .legend-entry').first();
  await first.hover();
  ({ series, legend } = await plot_state(page));
  const target = legend[0].series[0];
  assert.equal(series.find((s) => s.i === target).alpha, 1);
  assert.ok(series.filter((s) => s.i !== target).every((s) => s.alpha < 1), 'the other curves fade');
  assert.equal(legend[0].focused, true);
  await page.mouse.move(1, 1);
  ({ series } = await plot_state(page));
  assert.ok(series.every((s) => s.alpha === 1), 'leaving restores them');

  // Click: hidden and marked; again: shown.
  await first.click();
  ({ series, legend } = await plot_state(page));
  assert.equal(series.find((s) => s.i === target).show, false);
  assert.equal(legend[0].pressed, 'false');
  await first.click();
  ({ series } = await plot_state(page));
  assert.equal(series.find((s) => s.i === target).show, true);
  // The group entry hides every redundant-part curve at once.
  await page.locator('.sweep-legend .legend-group').click();
  ({ series } = await plot_state(page));
  assert.ok(series.filter((s) => /redundant part/.test(s.label)).every((s) => !s.show));
  assert.ok(series.filter((s) => !/redundant part/.test(s.label)).every((s) => s.show));
  await page.locator('.sweep-legend .legend-group').click();

  // Hovering near a curve in the plot highlights its legend entry.
  const over = await page.locator('.plot-canvas .u-over').boundingBox();
  let found = false;
  for (let fx = 0.1; fx < 1 && !found; fx += 0.1)
    for (let fy = 0.05; fy < 1 && !found; fy += 0.05) {
      await page.mouse.move(over.x + fx * over.width, over.y + fy * over.height);
      found = (await plot_state(page)).legend.some((e) => e.focused);
    }
  assert.ok(found, 'some position over the plot highlights a legend entry');
  await page.locator('#section-sweep').screenshot({ path: resolve(SHOTS, 'sweep-hover.png') });
  await page.close();
});

test('sweep: the first render reads no layout from the plot (a ResizeObserver sizes it)', async () => {
  const page = await env.browser.context.newPage();
  await page.addInitScript(() => {
    window.plot_layout_reads = [];
    for (const prop of ['clientWidth', 'clientHeight', 'offsetWidth', 'offsetHeight']) {
      const d = Object.getOwnPropertyDescriptor(Element.prototype, prop) ?? Object.getOwnPropertyDescriptor(HTMLElement.prototype, prop);
      const owner = Object.getOwnPropertyDescriptor(Element.prototype, prop) ? Element.prototype : HTMLElement.prototype;
      Object.defineProperty(owner, prop, { configurable: true, get() { if (this.classList?.contains('plot') || this.classList?.contains('plot-canvas')) window.plot_layout_reads.push(prop); return d.get.call(this); } });
    }
  });
  await page.goto(env.server.url);
  await page.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1);
  await wait_plot(page);
  assert.deepEqual(await page.evaluate(() => window.plot_layout_reads), []);
  const width = await page.evaluate(() => document.querySelector('.plot-canvas').uplot.width);
  assert.ok(width > 300, `the plot is ${width} px wide`);
  await page.close();
});
