// Many tabs of one browser (issue 17's blocker): a browser gives a host six HTTP/1.1
// connections, and each tab used to hold two EventSource streams, so the fourth tab never
// loaded. Now every tab's streams share one WebSocket held by a SharedWorker (or, where
// a tab cannot share, one socket of its own). These tests open ten tabs of one browser
// profile on ten sessions and stream in the tenth, count the sockets the server saw, and
// check that a tab closing takes its streams with it while the others keep streaming.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, lastAnswer, launch, seed, send, settled, shot, startProxy, startSpool, storedAnswer, until, words } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** Ten sessions of one project, and a browser profile (one context) with a tab on each. */
async function tenTabs(base, server, { transport = null } = {}) {
  const { project, session } = await seed(server, { title: 'Tab 1' });
  const sessions = [session];
  while (sessions.length < 10) {
    sessions.push(await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: `Tab ${sessions.length + 1}` }));
  }
  const context = await browser.newContext({ viewport: { width: 1100, height: 760 }, colorScheme: 'light' });
  if (transport) await context.addInitScript((t) => localStorage.setItem('spool.transport', t), transport);
  const pages = [];
  for (const s of sessions) {
    const page = await context.newPage();
    page.errors = [];
    page.on('pageerror', (e) => page.errors.push(e));
    // Each tab must load and go live before the next opens: a tab stuck behind the
    // connection limit fails here, at its own number.
    try {
      await page.goto(`${base}/#/s/${s.id}`, { timeout: 10_000 });
      await page.waitForSelector('.conn.is-live', { timeout: 10_000 });
    } catch (e) {
      throw new Error(`tab ${pages.length + 1} of 10 did not load and go live: ${e.message.split('\n')[0]}`);
    }
    pages.push(page);
  }
  return { context, pages, sessions, project };
}

test('ten tabs of one browser on ten sessions all load, share one socket, and the tenth streams', async (t) => {
  const server = await startSpool({ delayMs: 5 });
  const proxy = await startProxy(server.url);
  t.after(async () => {
    await proxy.close();
    await server.stop();
  });
  const { context, pages, sessions } = await tenTabs(proxy.url, server);
  const tenth = pages[9];
  await send(tenth, 'stream: 80');
  await settled(tenth);
  assert.equal(await lastAnswer(tenth), words(80));
  assert.equal(await lastAnswer(tenth), await storedAnswer(server.url, sessions[9].id));
  // The first tab still follows its own session live over the same socket.
  await send(pages[0], 'echo: still here');
  await settled(pages[0]);
  assert.equal(await lastAnswer(pages[0]), 'still here');
  assert.equal(proxy.sockets, 1, 'every tab shares one socket');
  assert.equal(new Set(proxy.streams.map((s) => s.split('?')[0])).size, 10, 'one session stream per tab');
  await shot(tenth, 'tabs-tenth');
  for (const p of pages) assert.deepEqual(p.errors, []);
  await context.close();
});

test('a closed tab takes its streams along; the other tabs keep streaming', async (t) => {
  const server = await startSpool({ delayMs: 5 });
  t.after(() => server.stop());
  const { context, pages } = await tenTabs(server.url, server);
  const open = await streamsOf(server);
  assert.equal(open, 10, 'one session stream per tab');
  await pages[3].close();
  // The worker learns of the closed tab through the tab's lock and closes its streams.
  await until(async () => (await streamsOf(server)) === open - 1, 10_000, 'the closed tab\'s stream to end');
  await send(pages[9], 'stream: 30');
  await settled(pages[9]);
  assert.equal(await lastAnswer(pages[9]), words(30));
  await context.close();
});

test('without SharedWorker each tab holds one socket, and ten tabs still load and stream', async (t) => {
  const server = await startSpool({ delayMs: 5 });
  const proxy = await startProxy(server.url);
  t.after(async () => {
    await proxy.close();
    await server.stop();
  });
  const { context, pages, sessions } = await tenTabs(proxy.url, server, { transport: 'tab' });
  await send(pages[9], 'stream: 40');
  await settled(pages[9]);
  assert.equal(await lastAnswer(pages[9]), await storedAnswer(server.url, sessions[9].id));
  assert.equal(proxy.sockets, 10, 'one socket per tab');
  // A cut socket comes back with its cursor, as an EventSource did.
  const before = proxy.streams.length;
  proxy.cut();
  await until(() => proxy.streams.length >= before + 10, 10_000, 'every tab to reopen its stream');
  assert.ok(proxy.streams.slice(before).every((s) => /cursor=stm_[^&]+:\d+/.test(s)), 'reopened with cursors');
  await send(pages[4], 'echo: after the cut');
  await settled(pages[4]);
  assert.equal(await lastAnswer(pages[4]), 'after the cut');
  await context.close();
});

/** The open session streams the server counts (its `/metrics`). */
async function streamsOf(server) {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('spool_open_connections{kind="session_stream"} '));
  return line ? Number(line.split(' ')[1]) : NaN;
}
