// The web UI served over HTTPS (`spool serve --tls-cert --tls-key`, issue 17's blocker):
// over HTTP/1.1 a browser opens at most six connections per host and every tab holds a
// long-lived session stream, so the seventh tab's page never loads. Over TLS the browser
// and server agree on HTTP/2 and every tab's requests share one connection. The test
// opens ten tabs of one browser on ten sessions, each on the EventSource transport, and
// streams an answer in the tenth. It also opens a `wss://` socket from a page, as the
// UI's shared socket does (its URL comes from `location.protocol`).
//
// The certificate is self-signed, made here with `openssl`; Chromium is started with
// `--ignore-certificate-errors`, as a person on a LAN who clicked past the warning.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'playwright-core';
import { launch, shot, startSpool } from './helpers.mjs';

const TABS = 10;

let browser;
let certDir;
let server;
let api;
before(async () => {
  certDir = mkdtempSync(join(tmpdir(), 'spool-tls-'));
  const [cert, key] = [join(certDir, 'cert.pem'), join(certDir, 'key.pem')];
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
  ], { stdio: 'ignore' });
  // A small delay per delta: the answer streams while the other tabs hold their streams.
  server = await startSpool({ delayMs: 5, extra: ['--tls-cert', cert, '--tls-key', key] });
  // The test's own API calls: Node's fetch would refuse the self-signed certificate.
  api = await request.newContext({ baseURL: server.url, ignoreHTTPSErrors: true });
  browser = await launch({ ignoreCertificateErrors: true });
});
after(async () => {
  await browser?.close();
  await api?.dispose();
  await server?.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

async function post(path, body) {
  const res = await api.post(path, { data: body });
  assert.ok(res.ok(), `POST ${path} → ${res.status()} ${await res.text()}`);
  return res.json();
}

test('over HTTPS ten tabs of one browser load, each on its own session stream, and the tenth streams an answer', async () => {
  assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const project = await post('/api/projects', { path: server.project, name: 'demo' });
  const sessions = [];
  for (let i = 1; i <= TABS; i++) sessions.push(await post('/api/sessions', { projectId: project.id, title: `Tab ${i}` }));

  const context = await browser.newContext({ viewport: { width: 1100, height: 760 }, colorScheme: 'light' });
  // Each tab its own EventSource (not the shared socket): the case HTTP/2 is for.
  await context.addInitScript(() => localStorage.setItem('spool.transport', 'sse'));
  const pages = [];
  for (const session of sessions) {
    const page = await context.newPage();
    page.errors = [];
    page.on('pageerror', (e) => page.errors.push(e));
    await page.goto(`${server.url}/#/s/${session.id}`);
    // Live: the page loaded and its session stream is open. Over HTTP/1.1 the seventh
    // tab would wait here for ever.
    await page.waitForSelector('.conn.is-live');
    pages.push(page);
  }
  for (const page of pages) {
    assert.equal(await page.evaluate(() => performance.getEntriesByType('navigation')[0].nextHopProtocol), 'h2');
    assert.equal(await page.locator('.conn.is-live').count(), 1, 'every tab is still live');
  }

  const tenth = pages.at(-1);
  await tenth.fill('#prompt', 'echo: the tenth tab streams over HTTP/2');
  await tenth.press('#prompt', 'Enter');
  await tenth.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && document.querySelector('.msg.assistant:not(.is-draft)'));
  const answer = await tenth.evaluate(() => [...document.querySelectorAll('.msg.assistant .text')].at(-1)?.textContent ?? '');
  assert.equal(answer, 'the tenth tab streams over HTTP/2');
  await shot(tenth, 'tls-tenth-tab');

  // A `wss://` socket from the page's own origin opens and answers a subscribe.
  const reply = await tenth.evaluate((channel) => new Promise((resolve, reject) => {
    const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/ws`);
    ws.onopen = () => ws.send(JSON.stringify({ type: 'subscribe', channels: [channel] }));
    ws.onmessage = (e) => {
      const message = JSON.parse(e.data);
      if (message.type === 'subscribed') {
        ws.close();
        resolve(message.data.channels);
      }
    };
    ws.onerror = () => reject(new Error('the wss:// socket failed'));
  }), sessions.at(-1).id);
  assert.deepEqual(reply, [sessions.at(-1).id]);

  for (const page of pages) assert.deepEqual(page.errors, []);
  await context.close();
});
