// Browser tests of issue 36's first screen: a newcomer adds a project and lands in a
// new session of it, ready to type; a workspace with projects but no session offers to
// start one (not "Pick a session" from an empty list); and the scripted model, on the
// binary's defaults, visibly streams its answer. The real `spool` binary and headless
// Debian Chromium, as in ui.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, settled, shot, startSpool, words } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

test('adding a project opens a session in it, and the scripted model streams on the default settings', async (t) => {
  const server = await startSpool({ delayMs: null });
  t.after(() => server.stop());
  const page = await openPage(browser, `${server.url}/`);
  await page.waitForSelector('.empty-chat.home');
  await page.click('.empty-chat.home button:has-text("Add a project")');
  await page.fill('#project-form input[name="path"]', server.project);
  await page.press('#project-form input[name="path"]', 'Enter');
  await page.waitForFunction(() => /^#\/s\/ses_/.test(location.hash), null, { timeout: 10_000 });
  await page.waitForSelector('.conn.is-live');
  assert.equal(await page.isVisible('#prompt'), true, 'the prompt is there to type in');
  // "Added …" says so without covering the prompt or the status line under it.
  const covers = await page.waitForFunction(() => {
    const toast = document.querySelector('.toast');
    if (!toast || toast.hidden) return null;
    const a = toast.getBoundingClientRect();
    return ['#composer', '#run-state'].filter((sel) => {
      const b = document.querySelector(sel).getBoundingClientRect();
      return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    });
  });
  assert.deepEqual(await covers.jsonValue(), [], 'the toast covers none of these');
  const sessions = await api(server.url, 'GET', `/api/projects/${(await api(server.url, 'GET', '/api/projects'))[0].id}/sessions`);
  assert.equal(sessions.length, 1, 'one session, the one opened');
  assert.equal(await page.evaluate(() => location.hash), `#/s/${sessions[0].id}`);

  // On the binary's default pause, an answer is seen part-way: streaming, not a jump.
  await page.fill('#prompt', 'stream: 100');
  await page.press('#prompt', 'Enter');
  await page.waitForFunction(() => {
    const draft = document.querySelector('.msg.assistant.is-draft .text')?.textContent ?? '';
    const n = draft.trim() ? draft.trim().split(/\s+/).length : 0;
    return n >= 2 && n < 100;
  }, null, { timeout: 10_000 });
  await settled(page);
  assert.equal(await page.evaluate(() => [...document.querySelectorAll('.msg.assistant .text')].at(-1).textContent), words(100));
  assert.deepEqual(page.errors, []);
});

test('with projects but no session, the first screen offers to start one', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const project = await api(server.url, 'POST', '/api/projects', { path: server.project, name: 'demo' });
  const page = await openPage(browser, `${server.url}/`);
  await page.waitForSelector('.empty-chat.home h2:text("Start your first session")');
  const text = await page.textContent('.empty-chat.home');
  assert.doesNotMatch(text, /Pick a session/, 'nothing to pick');
  await shot(page, 'first-screen-no-sessions');
  await page.click('.empty-chat.home button:has-text("New session in demo")');
  await page.waitForFunction(() => /^#\/s\/ses_/.test(location.hash));
  const sessions = await api(server.url, 'GET', `/api/projects/${project.id}/sessions`);
  assert.equal(sessions.length, 1);

  // Once there is a session, the first screen points at the list.
  await page.goto(`${server.url}/`);
  await page.waitForSelector(`.session[data-session-id="${sessions[0].id}"]`);
  await page.waitForSelector('.empty-chat.home h2:text("Welcome to Spool")');
  assert.match(await page.textContent('.empty-chat.home'), /Pick a session/);
  assert.deepEqual(page.errors, []);
});

test('on a phone the first screen points to the menu for the sessions, not to a list "on the left" it does not show', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  await seed(server, { title: 'Earlier work' });
  const page = await openPage(browser, `${server.url}/`, { width: 390, height: 844 });
  await page.waitForSelector(`.session[data-session-id]`, { state: 'attached' });
  await page.waitForSelector('.empty-chat.home h2:text("Welcome to Spool")');
  const text = await page.textContent('.empty-chat.home');
  assert.doesNotMatch(text, /on the left/, 'the sidebar is folded away on a phone');
  assert.match(text, /from the menu/);
  assert.deepEqual(page.errors, []);
});
