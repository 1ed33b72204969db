// A web page must not be able to drive a local Spool (issue 13), tried the way it
// happens: a hostile page served from another origin (another port on 127.0.0.1) makes
// headless Chromium send everything a page can send without a CORS preflight — fetch
// with a `text/plain` body, `no-cors` requests, a form POST whose text/plain body is
// JSON, a bodiless POST — and opens a WebSocket. A page can read none of the answers,
// so the test asks Spool's API afterwards: nothing was created, changed, decided or
// run. A second test rebinds a DNS name to 127.0.0.1 (Chromium's host resolver rules)
// and loads Spool under it: the page's own origin, so it could read everything, and
// Spool refuses it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { api, CHROMIUM, launch, seed, startSpool, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** Serves `html` at `/` on another port of 127.0.0.1: another origin. */
async function hostileSite(html) {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => new Promise((r) => server.close(r)) };
}

/** The page's script: every attempt, then `window.done` with what the page could see. */
function attack({ spool, sessionId, approvalId, directory, elsewhere }) {
  const prompt = (text) => JSON.stringify({ parts: [{ type: 'text', text }] });
  return `<!doctype html><meta charset="utf-8"><title>not Spool</title>
<iframe name="sink"></iframe>
<script>
const spool = ${JSON.stringify(spool)};
const q = encodeURIComponent(${JSON.stringify(directory)});
const elsewhere = encodeURIComponent(${JSON.stringify(elsewhere)});
const seen = { fetch: [], ws: 'pending' };
const attempt = (path, init) =>
  fetch(spool + path, init).then((r) => seen.fetch.push([path, r.type, r.status]), (e) => seen.fetch.push([path, 'error', String(e)]));
const forms = [
  // The classic: a text/plain form whose body is JSON.
  ['/api/sessions/${sessionId}/prompt', '{"text":"echo: pwned by a form","x":"', '"}'],
  ['/session?directory=' + elsewhere, '{"title":"pwned","x":"', '"}'],
  ['/api/projects', '{"path":"/","x":"', '"}'],
];
function submit([action, name, value]) {
  return new Promise((done) => {
    const sink = document.createElement('iframe');
    sink.name = 'f' + Math.random().toString(36).slice(2);
    sink.onload = () => done();
    document.body.append(sink);
    const form = document.createElement('form');
    form.method = 'POST';
    form.enctype = 'text/plain';
    form.action = spool + action;
    form.target = sink.name;
    const input = document.createElement('input');
    input.name = name;
    input.value = value;
    form.append(input);
    document.body.append(form);
    form.submit();
  });
}
(async () => {
  await Promise.all([
    attempt('/session?directory=' + q, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{"title":"pwned"}' }),
    attempt('/session?directory=' + elsewhere, { method: 'POST', mode: 'no-cors', body: '{}' }),
    attempt('/session/${sessionId}/prompt_async', { method: 'POST', mode: 'no-cors', body: ${JSON.stringify(prompt('echo: pwned by fetch'))} }),
    attempt('/session/${sessionId}/message', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: ${JSON.stringify(prompt('echo: pwned'))} }),
    attempt('/api/sessions/${sessionId}/prompt', { method: 'POST', mode: 'no-cors', body: '{"text":"echo: pwned"}' }),
    attempt('/api/projects', { method: 'POST', mode: 'no-cors', body: '{"path":"/"}' }),
    attempt('/permission/${approvalId}/reply', { method: 'POST', mode: 'no-cors', body: '{"reply":"always"}' }),
    attempt('/session/${sessionId}/permissions/${approvalId}', { method: 'POST', mode: 'no-cors', body: '{"response":"once"}' }),
    attempt('/api/sessions/${sessionId}/approvals/${approvalId}', { method: 'POST', mode: 'no-cors', body: '{"decision":"once"}' }),
    // Bodiless: a simple request even with no content type at all.
    attempt('/session/${sessionId}/abort', { method: 'POST', mode: 'no-cors' }),
    attempt('/api/sessions/${sessionId}/abort', { method: 'POST', mode: 'no-cors' }),
    ...forms.map(submit),
    new Promise((done) => {
      const ws = new WebSocket(spool.replace('http', 'ws') + '/api/ws');
      ws.onopen = () => { seen.ws = 'open'; ws.close(); done(); };
      ws.onerror = () => { seen.ws = 'refused'; done(); };
    }),
  ]);
  window.done = seen;
})();
</script>`;
}

test('a page on another origin cannot create, prompt, decide or abort anything', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session } = await seed(server, { title: 'Mine' });
  const elsewhere = join(server.dir, 'elsewhere');
  mkdirSync(elsewhere);
  // A run waiting at an approval: the page tries to approve it and to abort it.
  const { runId } = await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, {
    text: 'tool: write {"path": "owned.txt", "content": "x"}',
  });
  const approval = await until(async () => {
    const detail = await api(server.url, 'GET', `/api/sessions/${session.id}`);
    return detail.state.pendingApprovals[0];
  }, 15_000, 'the approval');
  const before = await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`);

  const site = await hostileSite(
    attack({ spool: server.url, sessionId: session.id, approvalId: approval.id, directory: server.project, elsewhere }),
  );
  t.after(() => site.close());
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(site.url);
  const seen = await page.waitForFunction(() => window.done, null, { timeout: 15_000 }).then((h) => h.jsonValue());
  await context.close();

  assert.equal(seen.ws, 'refused', 'the WebSocket opened');
  // The page could send, but it could not read a single answer.
  assert.equal(seen.fetch.length, 11);
  for (const [path, type] of seen.fetch) assert.ok(type === 'opaque' || type === 'error', `${path}: ${type}`);

  const projects = await api(server.url, 'GET', '/api/projects');
  assert.deepEqual(projects.map((p) => p.id), [project.id], 'no project was registered');
  const sessions = await api(server.url, 'GET', `/api/projects/${project.id}/sessions`);
  assert.deepEqual(sessions.map((s) => s.id), [session.id], 'no session was created');
  const detail = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  assert.equal(detail.title, 'Mine');
  assert.deepEqual(detail.state.pendingApprovals.map((a) => a.id), [approval.id], 'the approval is still pending');
  const run = await api(server.url, 'GET', `/api/runs/${runId}`);
  assert.equal(run.status, 'interrupted', 'the run was neither aborted nor resumed');
  const after = await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`);
  assert.deepEqual(after, before, 'no prompt reached the session');
  assert.ok(!JSON.stringify(after).includes('pwned'));
});

test('a page that rebinds its DNS name to 127.0.0.1 is refused by Spool', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  await seed(server, { title: 'Mine' });
  const port = new URL(server.url).port;
  // What a rebinding attack achieves: the attacker's name resolving to this machine.
  const rebound = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--host-resolver-rules=MAP rebind.attacker.test 127.0.0.1'],
  });
  t.after(() => rebound.close());
  const page = await rebound.newPage();
  const res = await page.goto(`http://rebind.attacker.test:${port}/`);
  assert.equal(res.status(), 403);
  // Same origin as far as the browser knows: it could read everything, if Spool answered.
  const answers = await page.evaluate(async () => {
    const read = async (path, init) => {
      const r = await fetch(path, init);
      return [r.status, (await r.json()).error?.code];
    };
    return [
      await read('/api/projects'),
      await read('/api/projects', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"path":"/"}' }),
      await read('/session?directory=%2F'),
    ];
  });
  assert.deepEqual(answers, [[403, 'bad_host'], [403, 'bad_host'], [403, 'bad_host']]);
  const ws = await page.evaluate(
    () =>
      new Promise((done) => {
        const socket = new WebSocket(`ws://${location.host}/api/ws`);
        socket.onopen = () => done('open');
        socket.onerror = () => done('refused');
      }),
  );
  assert.equal(ws, 'refused');
  const projects = await api(server.url, 'GET', '/api/projects');
  assert.equal(projects.length, 1, 'no project was registered');
});
