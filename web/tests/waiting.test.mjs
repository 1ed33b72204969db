// Browser tests of issue 36's "a session waiting for a person must look different" and
// "mobile (390×844)": a session parked at an approval shows so in its sidebar row (by its
// name, not by colour alone) and in the tab title while another session is open, and —
// once the person turned notifications on — one browser notification says so, which
// opens that session; deciding clears it all. On a phone the header title keeps its
// words, the composer shows no Shift+Enter hint, and the todo list stays small.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const bash = (command) => `tool: bash ${JSON.stringify({ command })}`;

/**
 * window.Notification as a spy: records every notification shown (`window.notes`) and
 * every permission request (`window.asked`); permission starts undecided, as in a
 * browser the person has not answered yet, and the request grants it.
 */
function spyOnNotifications() {
  window.notes = [];
  window.asked = 0;
  class Spy {
    static permission = 'default';
    static requestPermission() {
      window.asked++;
      Spy.permission = 'granted';
      return Promise.resolve('granted');
    }
    constructor(title, options = {}) {
      Object.assign(this, { title, ...options, closed: false });
      window.notes.push(this);
    }
    close() {
      this.closed = true;
    }
  }
  window.Notification = Spy;
}

/** A page in a context of its own; `setup(context)` runs before the page loads. */
async function pageIn(options, url, setup = async () => {}) {
  const context = await browser.newContext({ colorScheme: 'light', ...options });
  await setup(context);
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  await page.goto(url);
  return page;
}

/** Rejects the session's one pending approval through the API. */
async function decide(server, sessionId) {
  const detail = await api(server.url, 'GET', `/api/sessions/${sessionId}`);
  const [approval] = detail.state.pendingApprovals;
  await api(server.url, 'POST', `/api/sessions/${sessionId}/approvals/${approval.id}`, { decision: 'reject' });
}

test('a session waiting for a person shows in the sidebar, the tab title and one notification', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session: open } = await seed(server, { title: 'Open here' });
  const unnoticed = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Asked unnoticed' });
  const asks = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Asks for rm' });
  const page = await pageIn({ viewport: { width: 1280, height: 820 } }, `${server.url}/#/s/${open.id}`, async (context) => {
    await context.grantPermissions(['notifications'], { origin: server.url });
    await context.addInitScript(spyOnNotifications);
  });
  await page.waitForSelector('.conn.is-live');
  const row = (title) => page.getByRole('link', { name: new RegExp(`^${title}`) });
  const waitingRow = (title) => page.getByRole('link', { name: `${title} — Needs you` });
  await row('Asked unnoticed').waitFor();
  assert.equal(await page.title(), 'Open here · Spool');

  // Parked before the person turned notifications on: the row and the title say so, and
  // no notification is shown.
  await api(server.url, 'POST', `/api/sessions/${unnoticed.id}/prompt`, { text: bash('rm -f y') });
  await waitingRow('Asked unnoticed').waitFor();
  await page.waitForFunction(() => document.title === '(1) ● Needs you — Asked unnoticed');
  assert.equal(await page.evaluate(() => window.notes.length), 0, 'no notification without the person asking for them');
  // Its mark is an icon and words, not a colour.
  assert.equal(await waitingRow('Asked unnoticed').locator('.session-flag').textContent(), '— Needs you');

  const toggle = page.getByRole('button', { name: 'Notify me when a session needs me' });
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false');
  await toggle.click();
  await page.waitForFunction(() => document.querySelector('#notify')?.getAttribute('aria-pressed') === 'true');
  assert.equal(await page.evaluate(() => window.asked), 1, 'the click asked the browser');

  // Another session parks while this one is open: one notification, for it.
  await api(server.url, 'POST', `/api/sessions/${asks.id}/prompt`, { text: bash('rm -f x') });
  await waitingRow('Asks for rm').waitFor();
  await page.waitForFunction(() => document.title === '(2) ● Needs you — Asks for rm');
  const notes = await page.evaluate(() => window.notes.map((n) => ({ title: n.title, body: n.body, tag: n.tag })));
  assert.equal(notes.length, 1, JSON.stringify(notes));
  assert.equal(notes[0].title, 'Asks for rm needs you');
  assert.equal(notes[0].tag, `spool-waiting-${asks.id}`);
  assert.equal(await row('Open here').getAttribute('aria-current'), 'page');
  await shot(page, 'sidebar-waiting');

  // Clicking the notification opens that session, where its card waits.
  await page.evaluate(() => window.notes[0].onclick());
  await page.waitForFunction((id) => location.hash === `#/s/${id}`, asks.id);
  await page.waitForSelector('.approval-card');
  assert.equal(await page.evaluate(() => window.notes[0].closed), true);

  // Decided: its row and the title no longer say it waits; the other one still does.
  await decide(server, asks.id);
  await page.getByRole('link', { name: 'Asks for rm', exact: true }).waitFor();
  await page.waitForFunction(() => document.title === '(1) ● Needs you — Asked unnoticed');
  await decide(server, unnoticed.id);
  await page.waitForFunction(() => document.title === 'Asks for rm · Spool');
  assert.equal(await page.locator('.session-flag').count(), 0);
  assert.equal(await page.evaluate(() => window.notes.length), 1, 'one notification in all');
  assert.deepEqual(page.errors, []);
});

test('on a phone the title keeps its words, no Shift+Enter hint shows and the todo list stays small', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Refactor the parser' });
  const height = 844;
  const page = await pageIn({ viewport: { width: 390, height }, isMobile: true, hasTouch: true }, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.waitForFunction(() => document.querySelector('#title').textContent === 'Refactor the parser');
  // The header's title shows at least its first word, not one letter and an ellipsis.
  const title = await page.$eval('#title', (el) => {
    const range = document.createRange();
    range.setStart(el.firstChild, 0);
    range.setEnd(el.firstChild, 'Refactor'.length);
    return { shown: el.clientWidth, word: range.getBoundingClientRect().width };
  });
  assert.ok(title.shown >= title.word, `the title has ${title.shown} px, its first word needs ${title.word}`);
  assert.equal(await page.$eval('#hint', (el) => el.textContent.includes('Shift+Enter')), false, 'no Shift+Enter on a touch screen');

  const todos = Array.from({ length: 8 }, (_, i) => ({ content: `Step ${i + 1} of the refactor`, status: i < 2 ? 'completed' : i === 2 ? 'in_progress' : 'pending' }));
  await send(page, `tool: todo_write ${JSON.stringify({ todos })}`);
  const panel = page.locator('#todos');
  await panel.waitFor();
  const folded = (await panel.boundingBox()).height;
  assert.ok(folded <= height * 0.2, `the todo panel takes ${folded} px of ${height}`);
  assert.match(await panel.locator('summary').textContent(), /2 of 8 done.*Step 3 of the refactor/);
  await shot(page, 'mobile-session');

  // Opened, it shows the list, still leaving the conversation most of the screen.
  await panel.locator('summary').click();
  await panel.getByText('Step 8 of the refactor').waitFor();
  const opened = (await panel.boundingBox()).height;
  assert.ok(opened > folded && opened <= height * 0.4, `opened, the todo panel takes ${opened} px of ${height}`);
  await shot(page, 'mobile-todos-open');
  assert.deepEqual(page.errors, []);
});

test('on a phone the sessions list keeps a waiting session\'s name readable: a row shows its actions only when it is the open one', async (t) => {
  // Without hover, every row showed rename, archive and delete at once; beside "Needs
  // you" that left a title of four letters ("Echo …").
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session: waiting } = await seed(server, { title: 'Refactor the parser' });
  await api(server.url, 'POST', `/api/sessions/${waiting.id}/prompt`, { text: bash('git status --short') });
  const open = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Notes' });
  const page = await pageIn({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true }, `${server.url}/#/s/${open.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.click('#menu');
  const row = page.locator(`.session[data-session-id="${waiting.id}"]`);
  await row.locator('.session-flag').waitFor();
  const title = await row.locator('.session-title').evaluate((el) => {
    const range = document.createRange();
    range.setStart(el.firstChild, 0);
    range.setEnd(el.firstChild, 'Refactor the'.length);
    return { shown: el.clientWidth, words: range.getBoundingClientRect().width };
  });
  assert.ok(title.shown >= title.words, `the waiting row's title has ${title.shown} px, "Refactor the" needs ${title.words}`);
  assert.equal(await row.locator('.row-actions').isVisible(), false, 'another session\'s row keeps its actions folded');
  assert.equal(await page.locator(`.session[data-session-id="${open.id}"] .row-actions`).isVisible(), true, 'the open session\'s row shows its actions');
  await page.waitForFunction(() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0); // slid in
  await shot(page, 'mobile-sessions');
  assert.deepEqual(page.errors, []);
});
