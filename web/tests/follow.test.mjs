// Browser tests of issue 36's workspace points: the conversation keeps following new
// output with every panel open (a todo list above the composer shrank the timeline and
// the answer streamed on below the fold), "Jump to latest" brings a reader who scrolled
// up back to the live end, and a queued prompt's ✕ takes an ordinary pointer click while
// a run streams (the queue box was rebuilt on every paint, so the button under the
// pointer was replaced between mouse down and up). Stop leaves the queue paused, with
// Resume. The real `spool` binary and headless Debian Chromium, as in ui.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, settled, shot, startSpool, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/**
 * How far the last conversation row's bottom is below the timeline's visible bottom
 * (positive: hidden below the fold), and whether the Jump control shows.
 */
const fold = (page) =>
  page.evaluate(() => {
    const timeline = document.querySelector('#timeline');
    const rows = [...timeline.querySelectorAll('.rows > .msg')];
    const last = rows.at(-1);
    const jump = document.querySelector('.jump-latest');
    return {
      below: Math.round(last.getBoundingClientRect().bottom - timeline.getBoundingClientRect().bottom),
      jump: !!jump && !jump.hidden && jump.offsetParent !== null,
      words: last.textContent.split(' ').length,
    };
  });

const todos = Array.from({ length: 12 }, (_, i) => ({ content: `Step ${i + 1} of the plan`, status: i === 0 ? 'in_progress' : 'pending' }));

test('the conversation follows a long stream with the todo list and every panel open; Jump to latest brings a reader back', async (t) => {
  const server = await startSpool({ delayMs: 3 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Follow' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { width: 1280, height: 760 });

  // A todo list (the panel above the composer), an open tool card and a long reply before it.
  await send(page, `tool: todo_write ${JSON.stringify({ todos })}`);
  await page.waitForSelector('#todos .todo.is-in_progress');
  await settled(page);
  await send(page, 'tool: list {}');
  await settled(page);
  await page.click('.msg .tool-card summary >> nth=-1');
  assert.equal(await page.locator('#todos details').getAttribute('open'), '', 'the todo panel is open');

  // A long answer: every sample while it streams, and the end, show its bottom.
  await send(page, 'stream: 2500');
  await page.waitForSelector('.msg.assistant.is-draft');
  for (let i = 0; i < 8; i++) {
    await page.waitForTimeout(150);
    const f = await fold(page);
    assert.ok(f.below <= 1, `sample ${i}: the streaming answer's bottom is ${f.below} px below the fold`);
  }
  // A prompt queued behind the run opens the queue box too.
  await page.fill('#prompt', 'echo: later');
  await page.press('#prompt', 'Enter');
  await page.waitForSelector('.queue .queued', { timeout: 10_000 });

  // The reader scrolls up: the view stays where they put it and offers the way back.
  await page.mouse.move(700, 300);
  await page.mouse.wheel(0, -1500);
  await until(async () => (await fold(page)).jump, 5000, 'the jump control');
  const away = await fold(page);
  assert.ok(away.below > 200, `scrolled up, the end is out of view (${away.below} px)`);
  await page.waitForTimeout(300);
  assert.ok((await fold(page)).below > away.below - 5, 'new output does not pull the reader down');
  await shot(page, 'follow-jump');
  await page.click('.jump-latest');
  await until(async () => (await fold(page)).below <= 1, 3000, 'back at the bottom');
  assert.equal((await fold(page)).jump, false, 'at the bottom the control hides');
  // And it follows again while the answer keeps streaming.
  for (let i = 0; i < 4; i++) {
    await page.waitForTimeout(150);
    const f = await fold(page);
    assert.ok(f.below <= 1, `after the jump, sample ${i}: ${f.below} px below`);
  }
  await page.waitForFunction(() => !document.querySelector('.is-draft') && document.querySelector('#run-state')?.textContent === 'Idle', null, { timeout: 60_000 });
  const end = await fold(page);
  assert.ok(end.below <= 1, `the last answer's bottom after the run: ${end.below} px below`);
  assert.deepEqual(page.errors, []);
});

test('a queued prompt\'s ✕ takes an ordinary click while a run streams, 5 of 5; Stop pauses the queue until Resume', async (t) => {
  const server = await startSpool({ delayMs: 2 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Queue' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 100000');
  await page.waitForSelector('.msg.assistant.is-draft');
  const texts = ['echo: one', 'echo: two', 'echo: three', 'echo: four', 'echo: five', 'echo: six', 'echo: kept'];
  for (const text of texts) {
    await page.fill('#prompt', text);
    await page.press('#prompt', 'Enter');
    // The composer takes the next prompt once this one's POST is answered (it empties).
    await page.waitForFunction(() => document.querySelector('#prompt').value === '', null, { timeout: 10_000 });
  }
  await page.waitForFunction((n) => document.querySelectorAll('.queue .queued').length === n, texts.length);

  const queued = () => page.$$eval('.queue .queued-text', (els) => els.map((e) => e.textContent));
  let removed = 0;
  for (let i = 0; i < 5; i++) {
    const before = await queued();
    // A person's click: the pointer moves onto the first queued prompt's ✕, presses,
    // and lets go a moment later (the time is the point: the box was rebuilt about 39
    // times a second, so the button pressed was gone by the release).
    const box = await page.locator('.queue .queued').first().locator('.queued-remove').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.waitForTimeout(80);
    await page.mouse.up();
    const gone = await until(async () => (await queued()).length === before.length - 1, 10_000, 'the prompt to go').catch(() => false);
    if (gone) removed++;
    else break;
  }
  assert.equal(removed, 5, `clicks that removed their prompt, of 5`);
  assert.deepEqual(await queued(), ['echo: six', 'echo: kept']);

  // Stop ends the run; the queue waits, paused, and says so.
  await page.click('#send');
  await page.waitForSelector('.queue .queue-resume');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  // Resume sits on the title's line, beside what it is about, not wrapped below it.
  const [title, resume] = await Promise.all([page.locator('.queue-count').boundingBox(), page.locator('.queue-resume').boundingBox()]);
  assert.ok(resume.y < title.y + title.height, `Resume's top ${resume.y} is below the title's line (${title.y}–${title.y + title.height})`);
  await shot(page, 'queue-paused');
  const detail = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  assert.equal(detail.state.status, 'idle', 'nothing started after Stop');
  assert.equal(detail.state.queue.length, 2);
  await page.click('.queue .queue-resume');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant:not(.is-draft) .text')].at(-1)?.textContent === 'kept', null, { timeout: 30_000 });
  assert.equal(await page.locator('.queue').count(), 0, 'the queue ran out');
  assert.deepEqual(page.errors, []);
});

test('typing a prompt of several lines while an answer streams keeps the view following', async (t) => {
  // The composer grows with its text; measuring that grew the timeline for a moment, the
  // browser pulled its scroll position up to fit, and that looked like the reader
  // scrolling up: after a few keystrokes the answer streamed on below the fold.
  const server = await startSpool({ delayMs: 3 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Typing' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { width: 1280, height: 760 });
  await send(page, 'stream: 3000');
  await page.waitForSelector('.msg.assistant.is-draft');
  await page.waitForFunction(() => {
    const timeline = document.querySelector('#timeline');
    return timeline.scrollHeight > timeline.clientHeight + 200;
  });
  await page.click('#prompt');
  for (const line of ['first line of the next prompt', 'second line', 'third line', 'fourth']) {
    if (line !== 'first line of the next prompt') await page.keyboard.press('Shift+Enter');
    await page.keyboard.type(line, { delay: 5 });
  }
  for (let i = 0; i < 4; i++) {
    await page.waitForTimeout(150);
    const f = await fold(page);
    assert.ok(f.below <= 1, `sample ${i} after typing: the streaming answer's bottom is ${f.below} px below the fold`);
    assert.equal(f.jump, false, 'no Jump to latest: the reader never scrolled');
  }
  assert.deepEqual(page.errors, []);
});
