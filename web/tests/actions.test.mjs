// Browser tests of issue 17's points 5 and 8: what a person can do with a message after
// the fact (Regenerate and Edit, which make versions of a turn since issue 39 — see
// branches.test.mjs —, Retry a failed run, each message's time) and the
// permissions panel (an "Always allow" listed, undone, and asked about again). The real
// `spool` binary and headless Debian Chromium, as in ui.test.mjs; a failed run comes
// from a tiny provider stub that refuses every model call with a 400.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, launch, openPage, seed, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

async function send(page, text) {
  await page.waitForSelector('.conn.is-live');
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

/** Waits until the page shows `n` finished answers and the run is idle. */
async function answers(page, n) {
  await page.waitForFunction((n) =>
    document.querySelectorAll('.msg.assistant:not(.is-draft)').length === n &&
    document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'), n);
}

const history = async (server, session) => (await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`)).messages;
const texts = (m) => m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

/** Records the prompt POSTs a page sends. */
function prompts(page) {
  const sent = [];
  page.on('request', (r) => r.method() === 'POST' && r.url().endsWith('/prompt') && sent.push(JSON.parse(r.postData())));
  return sent;
}

test('Regenerate answers the same prompt again in place; the first answer stays as a version', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Regenerate' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const sent = prompts(page);
  await send(page, 'echo: the same words');
  await answers(page, 1);
  assert.equal(await page.locator('[data-action="regenerate"]').count(), 1, 'Regenerate is on the last answer only');
  await page.hover('.msg.assistant');
  await shot(page, 'message-actions');
  await page.dblclick('.msg.assistant [data-action="regenerate"]');
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await answers(page, 1);
  const stored = await history(server, session);
  assert.deepEqual(stored.map(texts), ['echo: the same words', 'the same words'], 'the turn ran again in place of the first');
  assert.equal(sent.length, 2, 'the double click sent one prompt');
  assert.notEqual(sent[0].requestId, sent[1].requestId, 'Regenerate is a new command, not a repeat of the first send');
  assert.equal(sent[1].at, 0, 'in place of the prompt at 0');
  assert.equal(sent[1].regenerate, true);
  assert.equal(sent[1].queue, undefined, 'not appended');
  assert.equal(await page.locator('[data-action="regenerate"]').count(), 1);
  assert.deepEqual(page.errors, []);
});

test('an edited message runs in place of the first, which stays as a version', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Edit' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: first try');
  await answers(page, 1);
  // By keyboard: the Edit button takes focus (it shows then) and Enter opens the box.
  await page.focus('.msg.user [data-action="edit"]');
  await page.keyboard.press('Enter');
  const box = await page.waitForSelector('.msg.user .edit-box');
  assert.equal(await box.inputValue(), 'echo: first try', 'the box holds the message text');
  assert.ok(await page.evaluate(() => document.activeElement?.classList.contains('edit-box')), 'the box has focus');
  assert.match(await page.textContent('.msg.user .edit-note'), /earlier version/);
  // Escape leaves the message as it was.
  await page.keyboard.press('Escape');
  await page.waitForSelector('.msg.user .edit-box', { state: 'detached' });
  await page.click('.msg.user [data-action="edit"]');
  await page.fill('.msg.user .edit-box', 'echo: second');
  // A change from elsewhere (a rename: a session.state frame repaints every row) must not
  // take the box, its focus or the caret away from the person typing.
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { title: 'Renamed meanwhile' });
  await page.waitForFunction(() => document.querySelector('#title')?.textContent === 'Renamed meanwhile');
  assert.ok(await page.evaluate(() => document.activeElement?.classList.contains('edit-box')), 'the box kept focus');
  await page.keyboard.type(' try');
  assert.equal(await page.inputValue('.msg.user .edit-box'), 'echo: second try');
  await shot(page, 'message-edit');
  await page.click('.msg.user .editing button.primary');
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await answers(page, 1);
  const stored = await history(server, session);
  assert.deepEqual(stored.map(texts), ['echo: second try', 'second try'], 'the path holds the edit and its answer');
  const shown = await page.$$eval('.msg.assistant .text', (els) => els.map((e) => e.textContent));
  assert.deepEqual(shown, ['second try'], 'the first answer is a version away, not on the page');
  assert.equal(await page.locator('.edit-box').count(), 0, 'the edit box closed after sending');
  assert.deepEqual(page.errors, []);
});

/** A model provider that refuses every call with a 400, counting the calls. */
async function refusingProvider() {
  const calls = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      calls.push(body);
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'the stub refuses every request', type: 'invalid_request_error' } }));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { calls, url: `http://127.0.0.1:${server.address().port}/v1`, close: () => new Promise((r) => server.close(r)) };
}

test('a failed run has Retry, and Retry runs the prompt again', async (t) => {
  const provider = await refusingProvider();
  t.after(() => provider.close());
  const config = join(mkdtempSync(join(tmpdir(), 'spool-cfg-')), 'config.toml');
  writeFileSync(config, `models = ["ollama:stub"]\n[env]\nOLLAMA_BASE_URL = "${provider.url}"\n`);
  const server = await startSpool({ extra: ['--config', config] });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Retry' });
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { model: 'ollama:stub' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: try me');
  const ending = await page.waitForSelector('.timing.ended.failed');
  assert.match(await ending.textContent(), /^Failed after/);
  const asked = provider.calls.length;
  assert.ok(asked >= 1, 'the model was asked');
  await shot(page, 'failed-run-retry');
  await page.setViewportSize({ width: 390, height: 800 });
  await shot(page, 'failed-run-retry-390');
  await page.setViewportSize({ width: 1280, height: 820 });
  // The person fixes the cause (back to the scripted model), then retries.
  const models = await api(server.url, 'GET', '/api/models');
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { model: models.default });
  await page.click('.timing.ended.failed [data-action="retry"]');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')].some((e) => e.textContent === 'try me'));
  await answers(page, await page.locator('.msg.assistant:not(.is-draft)').count());
  const stored = await history(server, session);
  assert.deepEqual(stored.filter((m) => m.role === 'user').map(texts), ['echo: try me', 'echo: try me'], 'the same prompt ran again');
  assert.equal(texts(stored.at(-1)), 'try me', 'and answered this time');
  assert.equal(provider.calls.length, asked, 'the retry went to the model now chosen');
  assert.equal(await page.locator('.timing.ended.failed').count(), 1, 'the failed run stays in the history');
  assert.deepEqual(page.errors, []);
});

test('messages show their time, the full date on hover', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Times' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: what time is it');
  await answers(page, 1);
  const stored = await history(server, session);
  const hhmm = (ts) => {
    const d = new Date(ts);
    return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  };
  for (const [sel, m] of [['.msg.user', stored.find((x) => x.role === 'user')], ['.msg.assistant', stored.find((x) => x.role === 'assistant')]]) {
    const time = await page.waitForSelector(`${sel} time.msg-time`);
    assert.equal(await time.textContent(), hhmm(m.timestamp), `${sel} shows its stored time`);
    assert.equal(await time.getAttribute('datetime'), new Date(m.timestamp).toISOString());
    assert.match(await time.getAttribute('title'), new RegExp(String(new Date(m.timestamp).getFullYear())), 'the title has the full date');
  }
  // Opened five hours later, the times are still the stored ones, not the page's now.
  const context = await browser.newContext({ viewport: { width: 1280, height: 820 } });
  t.after(() => context.close());
  const later = await context.newPage();
  await later.clock.install({ time: Date.now() + 5 * 3600_000 });
  await later.goto(`${server.url}/#/s/${session.id}`);
  await later.waitForSelector('.msg.user time.msg-time');
  assert.equal(await later.textContent('.msg.user time.msg-time'), hhmm(stored.find((x) => x.role === 'user').timestamp));
  assert.deepEqual(page.errors, []);
});

test('"Always allow" shows in the permissions panel of every tab; Undo removes it and the next call asks again', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Rules' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const other = await openPage(browser, `${server.url}/#/s/${session.id}`);
  // The other tab has the panel open before the rule exists: it must follow live.
  await other.waitForSelector('.conn.is-live');
  await other.click('#permissions');
  await other.waitForSelector('.rules-dialog .own .rules-empty');
  const call = 'tool: bash {"command":"echo hi"}';
  await send(page, call);
  await page.click('.approval-card button[data-decision="always"]');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  await answers(page, 2);
  await other.waitForSelector('.rules-dialog .own .rule[data-tool="bash"][data-action="allow"]');
  await page.click('#permissions');
  const rule = await page.waitForSelector('.rules-dialog .own .rule[data-tool="bash"]');
  // "Always" on a command allows that exact command (not all of bash).
  assert.match(await rule.textContent(), /bash.*echo hi.*Allowed/);
  assert.match(await rule.textContent(), /Always allow/);
  // The server's rules are listed too, read-only: its default still asks for bash.
  await page.waitForSelector('.rules-dialog .server .rule[data-tool="bash"][data-action="ask"]');
  assert.equal(await page.locator('.rules-dialog .server .rule-remove').count(), 0, 'no Undo on the server\'s rules');
  await shot(page, 'permissions-panel');
  await page.setViewportSize({ width: 390, height: 800 });
  await shot(page, 'permissions-panel-390');
  await page.setViewportSize({ width: 1280, height: 820 });
  // Allowed now: the same call runs without asking.
  await page.click('.rules-dialog .dialog-actions button');
  await send(page, call);
  await answers(page, 4);
  assert.equal(await page.locator('.approval-card').count(), 0, 'no approval while the rule is there');
  await page.click('#permissions');
  await page.click('.rules-dialog .rule-remove');
  await page.waitForSelector('.rules-dialog .own .rules-empty');
  await other.waitForSelector('.rules-dialog .own .rules-empty');
  assert.deepEqual((await api(server.url, 'GET', `/api/sessions/${session.id}`)).state.session.permissions, []);
  await page.keyboard.press('Escape');
  await page.waitForSelector('.rules-dialog', { state: 'hidden' });
  await send(page, call);
  await page.waitForSelector('.approval-card');
  assert.deepEqual(page.errors, []);
  assert.deepEqual(other.errors, []);
});

test('Undo removes exactly its rule: one added at the same moment stays, and a list that moved under it is refused', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Undo races' });
  const path = `/api/sessions/${session.id}`;
  const setRules = (permissions) => api(server.url, 'PATCH', path, { permissions });
  const stored = async () => (await api(server.url, 'GET', path)).state.session.permissions;
  await setRules([{ tool: 'bash', action: 'allow' }]);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.click('#permissions');
  await page.waitForSelector('.rules-dialog .own .rule[data-tool="bash"]');
  // Another tab's "Always allow" lands while this Undo is on its way: the request waits
  // here until the other rule is stored, then goes on.
  let meanwhile = [{ tool: 'bash', action: 'allow' }, { tool: 'write', action: 'allow' }];
  const deletes = [];
  await page.route(`**${path}/permissions/**`, async (route) => {
    deletes.push(new URL(route.request().url()).pathname + new URL(route.request().url()).search);
    if (meanwhile) await setRules(meanwhile);
    await route.continue();
  });
  await page.click('.rules-dialog .own .rule[data-tool="bash"] .rule-remove');
  await page.waitForFunction(() => [...document.querySelectorAll('.rules-dialog .own .rule')].map((r) => r.dataset.tool).join() === 'write');
  assert.deepEqual(await stored(), [{ tool: 'write', action: 'allow' }], 'the rule added meanwhile is kept');
  assert.deepEqual(deletes, [`${path}/permissions/0?tool=bash&action=allow`]);
  // Now the list moves under the Undo (a rule goes in front of the one shown): the
  // server refuses, nothing is removed, and the panel says why.
  meanwhile = [{ tool: 'read', action: 'deny' }, { tool: 'write', action: 'allow' }];
  await page.click('.rules-dialog .own .rule[data-tool="write"] .rule-remove');
  await page.waitForSelector('.rules-dialog .own .form-error');
  assert.match(await page.textContent('.rules-dialog .own .form-error'), /The rules changed meanwhile; nothing was removed/);
  assert.deepEqual(await stored(), meanwhile);
  await page.waitForFunction(() => [...document.querySelectorAll('.rules-dialog .own .rule')].map((r) => r.dataset.tool).join() === 'read,write');
  // On the list as it is now, Undo removes the rule.
  meanwhile = null;
  await page.click('.rules-dialog .own .rule[data-tool="write"] .rule-remove');
  await page.waitForFunction(() => [...document.querySelectorAll('.rules-dialog .own .rule')].map((r) => r.dataset.tool).join() === 'read');
  assert.deepEqual(await stored(), [{ tool: 'read', action: 'deny' }]);
  assert.deepEqual(page.errors, []);
});

test('the last answer\'s footer keeps Copy beside its time; Regenerate, shown on hover, comes after it', async (t) => {
  // Regenerate is there only while the pointer is on the answer, yet takes its place:
  // before Copy it left a hole between the time and Copy.
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Footer' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.fill('#prompt', 'echo: hello');
  await page.press('#prompt', 'Enter');
  await page.waitForSelector('.msg.assistant:not(.is-draft) .msg-actions [data-action="regenerate"]');
  await page.mouse.move(5, 5); // the pointer away from the answer
  const footer = page.locator('.msg.assistant:not(.is-draft) .msg-actions').last();
  const [time, copy] = await Promise.all([footer.locator('.msg-time').boundingBox(), footer.locator('button:has-text("Copy")').boundingBox()]);
  assert.ok(copy.x - (time.x + time.width) < 24, `Copy is ${Math.round(copy.x - time.x - time.width)} px after the time`);
  const order = await footer.evaluate((f) => [...f.children].map((c) => c.dataset.action ?? c.textContent.trim()));
  assert.equal(order.at(-1), 'regenerate', `Regenerate comes last: ${order}`);
  assert.deepEqual(page.errors, []);
});
