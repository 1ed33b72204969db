// Browser tests of issue 41's Web Push: the bell subscribes this browser, an approval
// reaches a push service encrypted and signed, the service worker shows it with Approve
// and Deny, and Approve decides it exactly once; the one-decision page (/d#t=…) does the
// same from a link.
//
// The parts are real where a test can reach them: the server encrypts and signs each
// push to a local RFC 8030 push service (push_service.mjs), which checks the VAPID JWT
// and decrypts the body with node:crypto, independently of the server's crates; its
// plaintext goes into the real service worker through DevTools'
// `ServiceWorker.deliverPushMessage`, as a browser's push service would hand it over.
// Two things no automation can do stand in for the browser: Debian's Chromium has no
// push service (its `subscribe()` rejects, which the first test checks the page copes
// with), so the second test gives the page a subscription at the local service; and no
// protocol clicks a notification, so the test calls the worker's click handler
// (`self.spoolHandleClick`) with the notification's own data, as the click would.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FULL_CHROMIUM, api, launch, seed, settled, shot, startSpool, until } from './helpers.mjs';
import { startPushService } from './push_service.mjs';

let browser;
before(async () => {
  // The headless shell refuses notification permission whatever is granted.
  browser = await launch({ executablePath: FULL_CHROMIUM });
});
after(async () => {
  await browser?.close();
});

const bash = (command) => `tool: bash ${JSON.stringify({ command })}`;
const BELL = 'Notify me when a session needs me';

/** `spool serve` that pushes to a loopback push service, at once and whoever watches. */
async function startWithPush(t) {
  const conf = mkdtempSync(join(tmpdir(), 'spool-push-conf-'));
  t.after(() => rmSync(conf, { recursive: true, force: true }));
  writeFileSync(join(conf, 'config.toml'), ['[push]', 'allow_insecure_endpoints = true', 'when = "always"', ''].join('\n'));
  const server = await startSpool({ extra: ['--config', join(conf, 'config.toml')] });
  t.after(() => server.stop());
  return server;
}

/**
 * Stands in for a browser's push service in the page (an init script): `subscribe()`
 * hands out the local push service's `subscription` and records the options it was
 * called with (`window.pushCalls`), as Chrome's or Firefox's would hand out theirs; the
 * browser keeps it across reloads (here in sessionStorage) until `unsubscribe()`.
 */
function stubPushService(subscription) {
  const KEPT = 'test.subscribed';
  window.pushCalls = [];
  const made = () => ({
    endpoint: subscription.endpoint,
    expirationTime: null,
    toJSON: () => subscription,
    unsubscribe: async () => {
      window.pushCalls.push('unsubscribe');
      sessionStorage.removeItem(KEPT);
      return true;
    },
  });
  PushManager.prototype.subscribe = async function (options) {
    const key = btoa(String.fromCharCode(...new Uint8Array(options.applicationServerKey)));
    window.pushCalls.push({ userVisibleOnly: options.userVisibleOnly, key });
    sessionStorage.setItem(KEPT, '1');
    return made();
  };
  PushManager.prototype.getSubscription = async function () {
    return sessionStorage.getItem(KEPT) ? made() : null;
  };
}

/**
 * A page at `url` in a context allowed to notify, with a DevTools session that keeps the
 * service-worker registrations' ids (`registrations`: scope → id) for deliverPushMessage.
 */
async function notifyingPage(server, url, { subscription = null } = {}) {
  const context = await browser.newContext({ colorScheme: 'light', viewport: { width: 1280, height: 820 } });
  await context.grantPermissions(['notifications'], { origin: server.url });
  if (subscription) await context.addInitScript(stubPushService, subscription);
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  const cdp = await context.newCDPSession(page);
  const registrations = new Map();
  cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => {
    for (const r of e.registrations) if (!r.isDeleted) registrations.set(r.scopeURL, r.registrationId);
  });
  await cdp.send('ServiceWorker.enable');
  await page.goto(url);
  return { context, page, cdp, registrations };
}

/** The session once its run is over and nothing waits: no active run, no pending approval. */
async function idle(server, sessionId) {
  return until(async () => {
    const detail = await api(server.url, 'GET', `/api/sessions/${sessionId}`);
    return !detail.state.activeRun && detail.state.pendingApprovals.length === 0 && detail;
  }, 15_000, 'the run to be over');
}

async function bashResults(server, sessionId) {
  const { messages } = await api(server.url, 'GET', `/api/sessions/${sessionId}/messages?limit=500`);
  return messages.filter((m) => m.role === 'toolResult' && m.toolName === 'bash');
}

test('without a push service the bell keeps the page’s own notifications and says so', async (t) => {
  const server = await startWithPush(t);
  const { session } = await seed(server, { title: 'Bell' });
  const { page } = await notifyingPage(server, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.getByRole('button', { name: BELL }).click();
  // Debian's Chromium: the worker registers, then subscribe() rejects.
  await page.waitForFunction(() => !document.querySelector('#toast').hidden);
  assert.equal(await page.textContent('#toast'), 'This browser has no push service, so Spool notifies you only while one of its tabs is open.');
  await page.waitForFunction(() => document.querySelector('#notify').getAttribute('aria-pressed') === 'true');
  assert.equal(await page.getAttribute('#notify', 'title'), 'Notifications are on while a Spool tab is open: click to turn them off');
  assert.equal(await page.evaluate(() => localStorage.getItem('spool.push')), null);
  assert.equal(await page.evaluate(async () => (await navigator.serviceWorker.getRegistration('/'))?.scope), `${server.url}/`);
  const mine = await api(server.url, 'GET', '/api/push/subscriptions');
  assert.deepEqual(mine.subscriptions, [], 'the server holds no subscription for this browser');
  assert.deepEqual(page.errors, []);
});

test('an approval reaches the push service encrypted and signed; Approve on its notification decides once', async (t) => {
  const service = await startPushService();
  t.after(() => service.close());
  const server = await startWithPush(t);
  const { session } = await seed(server, { title: 'Say hi' });
  const subscription = service.subscribe();
  const { context, page, cdp, registrations } = await notifyingPage(server, `${server.url}/#/s/${session.id}`, { subscription });
  await page.waitForSelector('.conn.is-live');

  // The bell subscribes with the server's key and registers the subscription.
  await page.getByRole('button', { name: BELL }).click();
  await page.waitForFunction(() => document.querySelector('#notify').dataset.push === 'true');
  assert.equal(await page.getAttribute('#notify', 'title'), 'Notifications are on, also with no Spool tab open: click to turn them off');
  const { publicKey } = await api(server.url, 'GET', '/api/push/key');
  assert.deepEqual(await page.evaluate(() => window.pushCalls), [{ userVisibleOnly: true, key: Buffer.from(publicKey, 'base64url').toString('base64') }]);
  const saved = JSON.parse(await page.evaluate(() => localStorage.getItem('spool.push')));
  assert.equal(saved.endpoint, subscription.endpoint);

  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text: bash('echo hi') });
  const ask = await service.next((m) => m.json.kind === 'approval');
  const { state } = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  const [approval] = state.pendingApprovals;
  assert.equal(ask.json.approvalId, approval.id);
  assert.equal(ask.json.sessionId, session.id);
  assert.equal(ask.json.url, `/#/s/${session.id}`);
  assert.match(`${ask.json.title} ${ask.json.body}`, /bash|echo hi/);
  assert.ok(ask.json.token, 'an approval carries a decision token');
  assert.equal(ask.vapid.k, publicKey, 'signed with the key browsers subscribe with');
  assert.equal(ask.headers.urgency, 'high');

  // The push service hands the plaintext to the worker, which shows the approval.
  const registrationId = await until(() => registrations.get(`${server.url}/`), 10_000, 'the worker’s registration');
  const worker = context.serviceWorkers()[0] ?? (await context.waitForEvent('serviceworker'));
  await cdp.send('ServiceWorker.deliverPushMessage', { origin: server.url, registrationId, data: ask.text });
  const tag = `spool-approval-${approval.id}`;
  const shown = () =>
    worker.evaluate(
      (tag) => self.registration.getNotifications({ tag }).then((all) => all.map((n) => ({ title: n.title, body: n.body, actions: n.actions.map((a) => a.title), requireInteraction: n.requireInteraction, data: n.data, at: n.timestamp }))),
      tag,
    );
  const note = await until(async () => (await shown()).find((n) => n.data?.token), 10_000, 'the notification');
  assert.equal(note.title, ask.json.title);
  assert.equal(note.body, ask.json.body);
  assert.deepEqual(note.actions, ['Approve', 'Deny']);
  assert.equal(note.requireInteraction, true);
  assert.equal(note.data.url, `/#/s/${session.id}`);

  // Approve, as a click on the button would: the run goes on, the call runs once.
  const approved = await worker.evaluate((data) => self.spoolHandleClick('approve', data), note.data);
  assert.equal(approved.title, 'Approved — the run goes on');
  await settled(page);
  await idle(server, session.id);
  const results = await bashResults(server, session.id);
  assert.equal(results.length, 1, JSON.stringify(results));
  assert.match(results[0].content[0].text, /hi/);
  assert.deepEqual((await shown()).map((n) => n.title), ['Approved — the run goes on']);
  await shot(page, 'push-approved');

  // The server tells every device it was decided; here, where the tap was, the
  // notification keeps saying what the tap did.
  const resolved = await service.next((m) => m.json.kind === 'resolved' && m.json.approvalId === approval.id);
  assert.equal(resolved.json.token, undefined, 'a resolved push carries no token');
  const [before] = await shown();
  await cdp.send('ServiceWorker.deliverPushMessage', { origin: server.url, registrationId, data: resolved.text });
  const [after] = await until(async () => {
    const now = await shown();
    return now.length === 1 && now[0].at > before.at && now;
  }, 5_000, 'the resolved push shown');
  assert.equal(after.title, 'Approved — the run goes on');

  // A second tap on the same notification (another device's, or a replay) changes nothing.
  const again = await worker.evaluate((data) => self.spoolHandleClick('approve', data), note.data);
  assert.equal(again.title, 'Already decided');
  assert.equal(again.status, 409);
  assert.deepEqual((await shown()).map((n) => n.title), ['Already decided']);
  assert.equal((await bashResults(server, session.id)).length, 1);
  assert.deepEqual(service.problems, []);
  assert.deepEqual(page.errors, []);

  // Off: the server forgets the subscription and the browser drops it.
  const subscriptions = async () => (await api(server.url, 'GET', '/api/push/subscriptions')).subscriptions;
  await page.getByRole('button', { name: BELL }).click();
  await page.waitForFunction(() => document.querySelector('#notify').getAttribute('aria-pressed') === 'false');
  assert.equal(await page.evaluate(() => window.pushCalls.at(-1)), 'unsubscribe');
  assert.deepEqual(await subscriptions(), []);

  // On again, then the server drops it (as a logout does): the next load falls back.
  await page.getByRole('button', { name: BELL }).click();
  await page.waitForFunction(() => document.querySelector('#notify').dataset.push === 'true');
  const [back] = await subscriptions();
  assert.equal(back.id, JSON.parse(await page.evaluate(() => localStorage.getItem('spool.push'))).id);
  await api(server.url, 'DELETE', `/api/push/subscriptions/${back.id}`);
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#notify')?.dataset.push === 'false' && window.pushCalls.at(-1) === 'unsubscribe');
  assert.equal(await page.getAttribute('#notify', 'aria-pressed'), 'true', 'the page’s own notifications stay on');
  assert.deepEqual(page.errors, []);
});

test('Deny on a notification rejects the call: it never runs, and the run goes on', async (t) => {
  const service = await startPushService();
  t.after(() => service.close());
  const server = await startWithPush(t);
  const { session } = await seed(server, { title: 'Say no' });
  const { context, page, cdp, registrations } = await notifyingPage(server, `${server.url}/#/s/${session.id}`, { subscription: service.subscribe() });
  await page.waitForSelector('.conn.is-live');
  await page.getByRole('button', { name: BELL }).click();
  await page.waitForFunction(() => document.querySelector('#notify').dataset.push === 'true');
  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text: bash('touch denied.txt') });
  const ask = await service.next((m) => m.json.kind === 'approval');
  const registrationId = await until(() => registrations.get(`${server.url}/`), 10_000, 'the worker’s registration');
  const worker = context.serviceWorkers()[0] ?? (await context.waitForEvent('serviceworker'));
  await cdp.send('ServiceWorker.deliverPushMessage', { origin: server.url, registrationId, data: ask.text });
  const data = await until(
    () => worker.evaluate(async (tag) => (await self.registration.getNotifications({ tag }))[0]?.data, `spool-approval-${ask.json.approvalId}`),
    10_000,
    'the notification',
  );
  const denied = await worker.evaluate((data) => self.spoolHandleClick('deny', data), data);
  assert.equal(denied.title, 'Denied — the run goes on without it');
  const detail = await idle(server, session.id);
  assert.equal(detail.state.lastApproval.decision, 'reject');
  assert.equal(detail.state.lastApproval.via, 'push', 'the session records how it was decided');
  const [result] = await bashResults(server, session.id);
  assert.equal(result.isError, true, 'the model is told the call was denied');
  assert.equal(existsSync(join(server.project, 'denied.txt')), false, 'the command never ran');
  assert.deepEqual(page.errors, []);
});

test('the decision page /d#t=… shows the approval, decides only on a press, and only once', async (t) => {
  const service = await startPushService();
  t.after(() => service.close());
  const server = await startWithPush(t);
  const { session } = await seed(server, { title: 'From a link' });
  // The subscription registered as a browser's page would (the route the bell calls).
  await api(server.url, 'POST', '/api/push/subscriptions', service.subscribe());
  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text: bash('echo hi') });
  const ask = await service.next((m) => m.json.kind === 'approval');

  const context = await browser.newContext({ colorScheme: 'light', viewport: { width: 390, height: 844 } });
  t.after(() => context.close());
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  await page.goto(`${server.url}/d#t=${ask.json.token}`);
  await page.getByRole('button', { name: 'Approve' }).waitFor();
  assert.match(await page.textContent('#decide-status'), /nothing is decided until you press one/);
  assert.match(await page.textContent('#decide-card'), /bash|echo hi/);
  assert.equal(await page.getAttribute('#decide-open', 'href'), `/#/s/${session.id}`);
  // Loading the page decided nothing.
  const waiting = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  assert.equal(waiting.state.pendingApprovals.length, 1);
  await shot(page, 'decide-page');

  await page.getByRole('button', { name: 'Approve' }).click();
  await page.waitForFunction(() => document.querySelector('#decide-status').textContent === 'Approved — the run goes on.');
  await idle(server, session.id);
  assert.equal((await bashResults(server, session.id)).length, 1);

  // The same link again: it was used.
  await page.reload();
  await page.waitForFunction(() => /Already decided/.test(document.querySelector('#decide-status').textContent));
  assert.equal(await page.getByRole('button', { name: 'Approve' }).isVisible(), false);
  assert.equal((await bashResults(server, session.id)).length, 1);
  assert.deepEqual(page.errors, []);
});
