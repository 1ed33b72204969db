// Presence in the web UI: the session's header counts who has it open ("2 views · 2 can
// answer"), from the server's `session.presence` frames; a tab that is hidden tells the
// server, which then counts its view as not looked at; a second tab closing lowers the
// count; and a session that waits for an approval while no view anywhere can answer it
// says so in the sidebar of a tab that has another session open.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, seed, shot, startSpool, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const chip = (page) => page.evaluate(() => {
  const el = document.getElementById('presence');
  return el && !el.hidden ? el.textContent : null;
});

/** Makes the page hidden or shown as the browser would tell it (the headless shell has no window to hide). */
const setVisible = (page, visible) => page.evaluate((visible) => {
  Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (visible ? 'visible' : 'hidden') });
  Object.defineProperty(document, 'hidden', { configurable: true, get: () => !visible });
  document.dispatchEvent(new Event('visibilitychange'));
}, visible);

test('the header counts the views, a hidden tab is not visible, and a closed one leaves the count', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Watched' });
  const presence = () => api(server.url, 'GET', `/api/sessions/${session.id}/presence`);
  const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  t.after(() => context.close());
  const first = await context.newPage();
  await first.goto(`${server.url}/#/s/${session.id}`);
  await first.waitForSelector('.conn.is-live');
  await until(async () => (await chip(first)) === '1 view · 1 can answer', 15_000, 'the chip of one tab');

  const second = await context.newPage();
  await second.goto(`${server.url}/#/s/${session.id}`);
  await second.waitForSelector('.conn.is-live');
  await until(async () => (await chip(first)) === '2 views · 2 can answer', 15_000, 'the chip of two tabs');
  const both = await presence();
  assert.deepEqual([both.viewers, both.answerers, both.visible], [2, 2, 2]);
  assert.deepEqual(both.clients, { web: 2 });
  await shot(first, 'presence-two-tabs');

  await setVisible(second, false);
  await until(async () => (await presence()).visible === 1, 15_000, 'the hidden tab to stop counting as visible');
  assert.equal((await presence()).answerers, 2, 'hidden, still able to answer');
  await setVisible(second, true);
  await until(async () => (await presence()).visible === 2, 15_000, 'the tab shown again');

  await second.close();
  await until(async () => (await chip(first)) === '1 view · 1 can answer', 15_000, 'the chip after the second tab closed');
  assert.deepEqual((await presence()).clients, { web: 1 });
});

test('a waiting session nobody can answer says so, until a tab opens it', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session: open } = await seed(server, { title: 'Open here' });
  const waiting = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Waits' });
  const prompt = { text: 'tool: write {"path":"a.txt","content":"x"}' };
  await api(server.url, 'POST', `/api/sessions/${waiting.id}/prompt`, prompt);
  await until(async () => (await api(server.url, 'GET', `/api/sessions/${waiting.id}`)).state.pendingApprovals.length === 1, 15_000, 'the approval');

  const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  t.after(() => context.close());
  const page = await context.newPage();
  await page.goto(`${server.url}/#/s/${open.id}`);
  await page.waitForSelector('.conn.is-live');
  const row = `[data-session-id="${waiting.id}"] [data-testid="nobody-can-answer"]`;
  await page.waitForSelector(row, { timeout: 15_000 });
  assert.equal(await page.textContent(row), 'Nobody can answer this right now');
  await shot(page, 'presence-nobody-can-answer');

  // A second tab opens the waiting session: someone can answer it now.
  const other = await context.newPage();
  await other.goto(`${server.url}/#/s/${waiting.id}`);
  await other.waitForSelector('.approval-card');
  await page.waitForSelector(row, { state: 'detached', timeout: 15_000 });
});
