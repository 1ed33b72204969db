// Browser test of issue 36's search point: a result's snippet shows the matched words
// marked, and opening the result shows the message that matched, even when it is far
// back in a long conversation (before the rounds the snapshot carries). The real `spool`
// binary and headless Debian Chromium, as in sessions.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** Runs `text` in a session through the API and waits until the run settled. */
async function answer(server, session, text) {
  const { runId } = await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text });
  for (;;) {
    const run = await api(server.url, 'GET', `/api/runs/${runId}`);
    if (run.status !== 'running') return run;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Whether message `index` of the open conversation is (partly) inside the visible timeline. */
const inView = (page, index) => page.evaluate((index) => {
  const row = document.querySelector(`#timeline .msg[data-index="${index}"]`);
  if (!row) return false;
  const r = row.getBoundingClientRect();
  const v = document.getElementById('timeline').getBoundingClientRect();
  return r.height > 0 && r.bottom > v.top && r.top < v.bottom;
}, index);

test('a search snippet marks the match, and opening the result shows the message far back in the conversation', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session: long } = await seed(server, { title: 'Long talk' });
  // The match is in the first round; seven long rounds follow, more than the snapshot
  // holds (three rounds) and far more than one screen.
  await answer(server, long, 'echo: remember the Pelicanberry protocol for later');
  for (let i = 0; i < 7; i++) await answer(server, long, 'stream: 150');
  const other = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Other' });
  await answer(server, other, 'echo: something else');

  const page = await openPage(browser, `${server.url}/#/s/${other.id}`);
  await page.waitForSelector('.msg.assistant');
  await page.fill('[data-testid="session-search"]', 'pelicanberry PROTOCOL');
  const hit = `.search-results li[data-session-id="${long.id}"]`;
  await page.waitForSelector(`${hit} .search-snippet mark`);
  const marks = await page.$$eval(`${hit} .search-snippet mark`, (els) => els.map((e) => e.textContent));
  assert.deepEqual(marks, ['Pelicanberry protocol'], 'the matched words, as written, in a <mark>');
  // The mark is inside the visible part of the snippet, not clipped away.
  const shown = await page.$eval(`${hit} .search-snippet`, (s) => {
    const m = s.querySelector('mark').getBoundingClientRect();
    const box = s.getBoundingClientRect();
    return m.width > 0 && m.top >= box.top - 1 && m.bottom <= box.bottom + 1 && m.right <= box.right + 1;
  });
  assert.ok(shown, 'the match can be seen in the snippet');
  await shot(page, 'search-marked');

  await page.click(`${hit} button`);
  await page.waitForFunction((id) => location.hash.startsWith(`#/s/${id}`), long.id);
  await page.waitForSelector('#timeline .msg[data-index="0"]');
  await page.waitForFunction(() => document.querySelector('#timeline .msg[data-index="0"]')?.classList.contains('found'));
  assert.ok(await inView(page, 0), 'the message that matched is on screen');
  assert.ok(!(await inView(page, 15)), 'not the end of the conversation');
  assert.match(await page.textContent('#timeline .msg[data-index="0"]'), /Pelicanberry protocol/);
  await shot(page, 'search-opened-at-match');
  assert.deepEqual(page.errors, []);
});
