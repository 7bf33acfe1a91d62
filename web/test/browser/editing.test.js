// Editing without losing anything (issue 12): typed text survives errors and analyses, the
// experiment has undo/redo and a reset, moved layers keep focus, paths are written one way,
// downloads are named after the experiment. Real Chromium, real engine, built page.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';

import { use_page, after_analysis, table_texts, bias_names, SHOTS } from '../support/page.js';
import { load_engine } from '../support/engine.js';
import { encode_link } from '../../src/share-codec.js';

const env = use_page();
const focused = (page) => page.evaluate(() => document.activeElement?.getAttribute('aria-label') ?? document.activeElement?.dataset.path ?? document.activeElement?.id ?? '');
const message = (page) => page.textContent('#message');
const NUM_HEADS = '[data-path="layers[0].body[1].num_heads"]';

test('editing: typing 3, waiting for the error, then 2 in num_heads gives 32', async () => {
  const { page, problems } = await env.open();
  await page.click(NUM_HEADS);
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('3'));
  assert.match(await message(page), /3 does not divide features 64/);
  assert.equal(await page.getAttribute(NUM_HEADS, 'aria-invalid'), 'true');
  assert.equal(await focused(page), 'layers[0].body[1].num_heads', 'the field kept focus');
  await after_analysis(page, () => page.keyboard.type('2'));
  assert.equal(await page.inputValue(NUM_HEADS), '32');
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok');
  assert.equal(await page.isHidden('#message'), true);
  assert.equal(await page.getAttribute(NUM_HEADS, 'aria-invalid'), null, 'the error mark went with the error');
  assert.equal(await page.$$eval('.inline-error', (l) => l.length), 0);
  // The browser's own undo inside the field still has the typing to undo.
  await page.keyboard.press('Control+Z');
  assert.notEqual(await page.inputValue(NUM_HEADS), '32', 'Ctrl+Z in the field undid the typing');
  assert.equal(await focused(page), 'layers[0].body[1].num_heads');
  assert.deepEqual(problems, []);
  await page.close();
});

test('editing: a top-level number box keeps its text across an error (6, pause, 4 gives 64)', async () => {
  const { page } = await env.open();
  const features = '[data-path="shape.features"]';
  await page.click(features);
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('6'));
  assert.match(await message(page), /does not divide features 6/);
  await after_analysis(page, () => page.keyboard.type('4'));
  assert.equal(await page.inputValue(features), '64');
  assert.equal(await page.isHidden('#message'), true);
  await page.close();
});

test('editing: the JSON text keeps its cursor across an engine error', async () => {
  const { page } = await env.open();
  await page.click('#config-json');
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('{"layers": [{"type": "attention", "num_heads": 3}]}'));
  assert.match(await message(page), /3 does not divide features 64/);
  for (let i = 0; i < 3; ++i) await page.keyboard.press('ArrowLeft');
  await after_analysis(page, () => page.keyboard.type('2'));
  assert.equal(await page.inputValue('#config-json'), '{"layers": [{"type": "attention", "num_heads": 32}]}');
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok');
  await page.close();
});

test('editing: undo and redo restore the previous experiments and their numbers', async () => {
  const { page } = await env.open();
  const undo = page.locator('#undo');
  const redo = page.locator('#redo');
  assert.equal(await undo.isDisabled(), true, 'nothing to undo on a fresh page');
  const step0 = { json: await page.inputValue('#config-json'), tables: await table_texts(page) };
  await after_analysis(page, () => page.uncheck('[data-path="layers[0].body[1].k_bias"]'));
  const step1 = { json: await page.inputValue('#config-json'), tables: await table_texts(page) };
  await after_analysis(page, () => page.selectOption('#preset', 'norm-zoo'));
  const step2 = { json: await page.inputValue('#config-json'), tables: await table_texts(page) };
  assert.notDeepEqual(step1.tables, step2.tables);

  await after_analysis(page, () => undo.click());
  assert.equal(await page.inputValue('#config-json'), step1.json);
  assert.deepEqual(await table_texts(page), step1.tables);
  assert.equal(await page.isChecked('[data-path="layers[0].body[1].k_bias"]'), false, 'the form follows');
  await after_analysis(page, () => page.keyboard.press('Control+Z')); // focus is on the Undo button
  assert.equal(await page.inputValue('#config-json'), step0.json);
  assert.deepEqual(await table_texts(page), step0.tables);
  assert.equal(await undo.isDisabled(), true);
  assert.equal(await page.inputValue('#preset'), 'default');

  await after_analysis(page, () => page.keyboard.press('Control+Shift+Z'));
  assert.deepEqual(await table_texts(page), step1.tables);
  await after_analysis(page, () => page.keyboard.press('Control+Y'));
  assert.equal(await page.inputValue('#config-json'), step2.json);
  assert.deepEqual(await table_texts(page), step2.tables);
  assert.equal(await page.inputValue('#preset'), 'norm-zoo');
  assert.equal(await redo.isDisabled(), true);
  // A new edit after an undo drops the redo branch.
  await after_analysis(page, () => undo.click());
  await after_analysis(page, () => page.check('[data-path="layers[0].body[1].k_bias"]'));
  assert.equal(await redo.isDisabled(), true);
  await page.close();
});

test('editing: typing in one box is one undo step, taken when the box is left', async () => {
  const { page } = await env.open();
  const seed = '[data-path="seed"]';
  const original = await page.inputValue(seed);
  await page.click(seed);
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('12345'));
  await page.keyboard.press('Tab');
  await after_analysis(page, () => page.click('#undo'));
  assert.equal(await page.inputValue(seed), original);
  await after_analysis(page, () => page.click('#redo'));
  assert.equal(await page.inputValue(seed), '12345');
  // Clicking Undo straight from the box (no Tab) also takes the typing as one step.
  await page.click(seed);
  await page.keyboard.press('Control+A');
  await page.keyboard.type('777');
  await after_analysis(page, () => page.click('#undo'));
  assert.equal(await page.inputValue(seed), '12345');
  await page.close();
});

test('editing: loading the minimal model can be undone, with its numbers', async () => {
  const { page } = await env.open();
  const json = await page.inputValue('#config-json');
  const tables = await table_texts(page);
  await after_analysis(page, () => page.click('#load-minimal'));
  assert.notEqual(await page.inputValue('#config-json'), json);
  assert.ok((await bias_names(page)).length < 6);
  await after_analysis(page, () => page.keyboard.press('Control+Z'));
  assert.equal(await page.inputValue('#config-json'), json);
  assert.deepEqual(await table_texts(page), tables);
  await page.close();
});

test('editing: Reset to preset brings the preset back, and undo brings the edits back', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'article1-linear-layernorm'));
  const preset_json = await page.inputValue('#config-json');
  const reset = page.locator('#reset');
  assert.equal(await reset.isDisabled(), true, 'nothing to reset');
  await after_analysis(page, () => page.click('[aria-label="Remove layers.0"]'));
  await after_analysis(page, () => page.fill('[data-path="seed"]', '99'));
  const edited = await page.inputValue('#config-json');
  assert.equal(await page.inputValue('#preset'), '', 'now a custom experiment');
  assert.match(await reset.getAttribute('title'), /Linear/);
  await after_analysis(page, () => reset.click());
  assert.equal(await page.inputValue('#config-json'), preset_json);
  assert.equal(await page.inputValue('#preset'), 'article1-linear-layernorm');
  await after_analysis(page, () => page.click('#undo'));
  assert.equal(await page.inputValue('#config-json'), edited);
  await page.close();
});

test('editing: the move buttons keep focus on the moved layer', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.click('.stack-editor > .layer-list-wrap > .add-row button'));
  await page.focus('[aria-label="Move layers.2 up"]');
  await after_analysis(page, () => page.keyboard.press('Enter'));
  assert.equal(await focused(page), 'Move layers.1 up');
  assert.equal(await page.inputValue('[data-path="layers[1].type"]'), 'linear', 'the new linear layer moved');
  // At the top its ↑ is disabled: focus goes to its ↓, still on the same layer.
  await after_analysis(page, () => page.keyboard.press('Enter'));
  assert.equal(await page.inputValue('[data-path="layers[0].type"]'), 'linear');
  assert.equal(await focused(page), 'Move layers.0 down');
  await after_analysis(page, () => page.keyboard.press('Enter'));
  assert.equal(await page.inputValue('[data-path="layers[1].type"]'), 'linear');
  assert.equal(await focused(page), 'Move layers.1 down');
  await page.close();
});

test('editing: errors name the parameter-style path and label the JSON path', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.fill(NUM_HEADS, '5'));
  const text = await message(page);
  assert.match(text, /layers\.0\.body\.1\.num_heads/);
  assert.match(text, /JSON path:? layers\[0\]\.body\[1\]\.num_heads/);
  const inline = await page.textContent('.inline-error');
  assert.match(inline, /layers\.0\.body\.1\.num_heads/);
  assert.match(inline, /JSON path:? layers\[0\]\.body\[1\]\.num_heads/);
  await page.screenshot({ path: resolve(SHOTS, 'editing-invalid.png') });
  await page.close();
});

test('editing: a residual body given as a string shows what is wrong with it', async () => {
  const schema = (await load_engine()).schema();
  const { page } = await env.open(encode_link(schema, { layers: [{ type: 'residual', body: 'linear' }] }));
  const text = await message(page);
  assert.match(text, /must be an array of layers, got "linear"/);
  assert.doesNotMatch(text, /empty array/);
  assert.match(await page.inputValue('#config-json'), /"body": "linear"/, 'the page did not rewrite the body');
  await page.close();
});

test('editing: downloads are named after the preset or the config', async () => {
  const { page } = await env.open();
  const name_of = async (selector) => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(selector)]);
    return download.suggestedFilename();
  };
  assert.equal(await name_of('#section-biases .exports button:has-text("Markdown")'), 'biaslab-default-biases.md');
  await after_analysis(page, () => page.selectOption('#preset', 'norm-zoo'));
  assert.equal(await name_of('#section-biases .exports button:has-text("Markdown")'), 'biaslab-norm-zoo-biases.md');
  assert.equal(await name_of('#section-folds .exports button:has-text("CSV")'), 'biaslab-norm-zoo-folds.csv');
  assert.equal(await name_of('#download-json'), 'biaslab-norm-zoo-report.json');
  assert.equal(await name_of('#download-png'), 'biaslab-norm-zoo-sweep.png');
  await after_analysis(page, () => page.fill('[data-path="seed"]', '4242'));
  await page.waitForFunction(() => location.hash.startsWith('#v1.'));
  await page.waitForTimeout(300); // the link follows edits after a short debounce
  const crc = (await page.evaluate(() => location.hash)).split('.')[1];
  assert.equal(await name_of('#section-biases .exports button:has-text("CSV")'), `biaslab-custom-${crc}-biases.csv`, 'the name carries the link checksum');
  await page.close();
});

test('editing: the PyTorch export names its files and reports next to its button', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'norm-zoo'));
  const files = [];
  page.on('download', (d) => files.push(d.suggestedFilename()));
  await page.click('#download-torch');
  await page.waitForFunction(() => /Saved/.test(document.getElementById('export-status')?.textContent ?? ''), null, { timeout: 60000 });
  for (let i = 0; i < 50 && files.length < 2; ++i) await page.waitForTimeout(100); // download events arrive after the page's status
  assert.deepEqual(files.sort(), ['biaslab-norm-zoo.py', 'biaslab-norm-zoo.safetensors']);
  assert.match(await page.textContent('#export-status'), /python3 biaslab-norm-zoo\.py biaslab-norm-zoo\.safetensors/);
  assert.equal(await page.textContent('#copy-status'), '', 'nothing in the header');
  const near = await page.evaluate(() => {
    const a = document.getElementById('download-torch').getBoundingClientRect();
    const b = document.getElementById('export-status').getBoundingClientRect();
    return Math.abs(a.top - b.top) < 200;
  });
  assert.ok(near, 'the status is next to the button');
  await page.locator('#report-export').screenshot({ path: resolve(SHOTS, 'export-status.png') });
  await page.close();
});

test('editing: Copy link warns when the experiment is invalid, and still copies it', async () => {
  const { page } = await env.open();
  await env.browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: env.server.url });
  await page.click('#copy-link');
  await page.waitForFunction(() => document.getElementById('copy-status').textContent !== ''); // the copy is async
  assert.equal(await page.textContent('#copy-status'), 'Link copied.');
  await after_analysis(page, () => page.fill(NUM_HEADS, '5'));
  await page.click('#copy-link');
  await page.waitForFunction(() => document.getElementById('copy-status').textContent !== 'Link copied.');
  const status = await page.textContent('#copy-status');
  assert.match(status, /Link copied/);
  assert.match(status, /invalid/);
  const link = await page.evaluate(() => navigator.clipboard.readText());
  const fresh = await env.browser.context.newPage();
  await fresh.goto(link);
  await fresh.waitForFunction(() => Number(document.documentElement.dataset.analyses ?? 0) >= 1);
  assert.equal(await fresh.inputValue(NUM_HEADS), '5', 'the link reproduces the invalid config');
  await fresh.close();
  await page.close();
});

test('editing: at 375 px the history buttons wrap below the preset instead of squeezing it', async () => {
  const { page } = await env.open('', { viewport: { width: 375, height: 812 }, color_scheme: 'dark' });
  const box = (sel) => page.locator(sel).boundingBox();
  const [select, undo, reset] = [await box('#preset'), await box('#undo'), await box('#reset')];
  assert.ok(select.width >= 150, `the preset list is ${select.width} px wide`);
  assert.ok(reset.x + reset.width <= 375, 'Reset to preset fits on screen');
  assert.ok(undo.y >= select.y + select.height - 1, 'the buttons are on a line of their own');
  await page.locator('#experiment').screenshot({ path: resolve(SHOTS, 'history-buttons-375-dark.png'), clip: undefined });
  await page.close();
});

test('editing: the layer width labels follow out_features and features while the box keeps focus', async () => {
  const { page } = await env.open();
  const width = (p) => page.textContent(`li[data-path="${p}"] > .layer-head > .layer-width`);
  const OUT = '[data-path="layers[1].out_features"]';
  assert.equal(await width('layers[1]'), '64');
  await page.click(OUT);
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('32'));
  assert.equal(await width('layers[1]'), '64 → 32', 'the label followed out_features');
  assert.equal(await focused(page), 'layers[1].out_features', 'the box kept focus');
  const FEATURES = '[data-path="shape.features"]';
  await page.click(FEATURES);
  await page.keyboard.press('Control+A');
  await after_analysis(page, () => page.keyboard.type('48'));
  assert.equal(await width('layers[0]'), '48');
  assert.equal(await width('layers[0].body[1]'), '48', 'labels inside a residual body follow too');
  assert.equal(await width('layers[1]'), '48 → 32');
  assert.equal(await focused(page), 'shape.features');
  assert.equal(await page.inputValue(FEATURES), '48');
  await page.close();
});

test('editing: the skip link moves to the results and keeps the experiment and its link', async () => {
  const { page } = await env.open();
  await after_analysis(page, () => page.uncheck('[data-path="layers[0].body[1].k_bias"]'));
  await page.waitForTimeout(400); // the link follows edits after 150 ms
  const [json, hash] = [await page.inputValue('#config-json'), await page.evaluate(() => location.hash)];
  await page.keyboard.press('Tab'); // wherever focus is, go back to the top of the page first
  await page.focus('.skip-link');
  await page.keyboard.press('Enter');
  await page.waitForTimeout(300); // a hashchange would have been handled by now
  assert.equal(await page.evaluate(() => document.activeElement.id), 'results');
  assert.equal(await page.isHidden('#link-notice'), true, 'no "link problem"');
  assert.equal(await page.inputValue('#config-json'), json, 'the experiment stayed');
  assert.equal(await page.evaluate(() => location.hash), hash);
  await page.close();
});

test('editing: the RoPE options are off until rope is on, then take a value', async () => {
  const { page, problems } = await env.open();
  const rotary = '[data-path="layers[0].body[1].rotary_dim"]';
  const rope = '[data-path="layers[0].body[1].rope"]';
  assert.equal(await page.isDisabled(rotary), true, 'rotary_dim is off while rope is off');
  assert.equal(await page.isDisabled('[data-path="layers[0].body[1].rope_style"]'), true);
  assert.match(await page.getAttribute(rotary, 'title'), /needs rope/);
  await after_analysis(page, () => page.check(rope));
  assert.equal(await page.isDisabled(rotary), false, 'rotary_dim is on with rope');
  await page.click(rotary);
  await after_analysis(page, () => page.keyboard.type('8'));
  assert.equal(await page.evaluate(() => document.documentElement.dataset.lastAnalysis), 'ok');
  assert.match(await page.inputValue('#config-json'), /"rotary_dim": 8/);
  assert.deepEqual(problems, []);
});

test('editing: an empty number box shows its whole default (the head dimension, self-attention), at 375 px too', async () => {
  for (const width of [1280, 375]) {
    const { page, problems } = await env.open();
    await page.setViewportSize({ width, height: 900 });
    // The text width of each placeholder in its box's font, against the box's room for text (its
    // content box less the spin buttons, about 1.2em).
    const fits = await page.evaluate(() =>
      ['rotary_dim', 'num_kv_heads', 'context_tokens'].map((o) => {
        const input = document.querySelector(`[data-path="layers[0].body[1].${o}"]`);
        const cs = getComputedStyle(input);
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
        const room = input.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 1.2 * parseFloat(cs.fontSize);
        return { o, text: input.placeholder, need: Math.ceil(ctx.measureText(input.placeholder).width), room: Math.floor(room), right: input.getBoundingClientRect().right };
      }),
    );
    for (const f of fits) {
      assert.ok(f.need <= f.room, `${width} px: ${f.o}'s placeholder "${f.text}" needs ${f.need} px, its box has ${f.room}`);
      assert.ok(f.right <= width, `${width} px: ${f.o}'s box ends at ${f.right}, past the viewport`);
    }
    assert.deepEqual(problems, []);
    await page.close();
  }
});

test('editing: a parallel block in the form: branches added, edited and removed, named as in the tables', async () => {
  const { page, problems } = await env.open();
  await after_analysis(page, () => page.selectOption('#preset', 'pythia-block'));
  const branches = page.locator('li.layer-parallel .layer-branch');
  assert.equal(await branches.count(), 2, 'pythia-block has two branches');
  assert.ok((await bias_names(page)).includes('layers.0.branches.1.3.bias'));
  // A third branch: one Linear, whose bias gets a row under its state-dict name.
  await after_analysis(page, () => page.click('li.layer-parallel button:has-text("+ Add branch")'));
  assert.equal(await branches.count(), 3);
  assert.ok((await bias_names(page)).includes('layers.0.branches.2.0.bias'), (await bias_names(page)).join(', '));
  // Its out_features typed in place: the engine names the branch that no longer ends at the width.
  const box = page.locator('[data-path="layers[0].branches[2][0].out_features"]');
  await box.fill('8');
  await page.locator('li.layer-parallel .inline-error').waitFor();
  const message = await page.locator('li.layer-parallel .inline-error').innerText();
  assert.match(message, /layers\.0\.branches\.2/);
  assert.match(message, /changes the width from 96 to 8/);
  assert.equal(await box.inputValue(), '8', 'the box keeps what was typed');
  // Removing the branch brings the preset back, and the menu names it again.
  await after_analysis(page, () => page.click('[data-focus="layers[0].branches[2]:remove-branch"]'));
  assert.equal(await branches.count(), 2);
  assert.equal(await page.locator('#preset').inputValue(), 'pythia-block');
  // A new parallel layer starts with two one-layer branches.
  await page.selectOption('[data-focus="layers:add-type"]', 'parallel');
  await after_analysis(page, () => page.click('[data-focus="layers:add"]'));
  assert.equal(await page.locator('li.layer-parallel').count(), 2);
  assert.equal(await page.locator('li.layer-parallel').nth(1).locator('.layer-branch').count(), 2);
  assert.deepEqual(problems, []);
});
