// Shared pieces of the browser tests: start the real `spool` binary on a free port with a
// temp data dir and project, a TCP proxy that can cut or refuse the page's connections,
// headless Debian Chromium through playwright-core, small API calls and screenshots.
//
// Every wait is bounded (by the test's waitFor* timeouts or by `until`); nothing sleeps
// except where a test is about time.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const SHOTS = join(ROOT, 'target/ui-screenshots');
const BIN = process.env.SPOOL_BIN ? resolve(process.env.SPOOL_BIN) : join(ROOT, 'target/debug/spool');
// Debian's Chromium headless shell (package chromium-headless-shell, the same Blink and
// V8 as the chromium package, without the full browser around them) when installed: what
// Playwright itself runs headless by default, and here it took half the CPU of the full
// browser in headless mode (the suite: 144 s and 220 CPU-seconds instead of 225 s and
// 405, same machine, same hour). /usr/bin/chromium otherwise.
const SHELL = '/usr/bin/chromium-headless-shell';
export const CHROMIUM = process.env.CHROMIUM_BIN ?? (existsSync(SHELL) ? SHELL : '/usr/bin/chromium');
// The full browser: the headless shell refuses notification permission whatever is
// granted, so service-worker notifications need this one.
export const FULL_CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';

/**
 * Starts `spool serve`; resolves once its first stdout line names the address. With
 * `tokenFor`, first creates a token for that user (auth is then on) and returns it;
 * `env` adds to the server's environment (a provider's base URL, say; a function gets
 * the server's temp dir, which holds `project/`).
 */
export async function startSpool({ delayMs = 0, extra = [], env = {}, tokenFor = null, reuse = null } = {}) {
  // `reuse`: the directory of a server that was crashed, to start again on its data.
  const dir = reuse ?? mkdtempSync(join(tmpdir(), 'spool-ui-'));
  const project = join(dir, 'project');
  if (!reuse) {
    mkdirSync(project);
    writeFileSync(join(project, 'README.md'), '# Demo project\n\nA directory the agent works in.\n');
  }
  const token = tokenFor
    ? execFileSync(BIN, ['token', 'create', '--user', tokenFor, '--data-dir', join(dir, 'data')], { encoding: 'utf8' }).trim()
    : null;
  // With tokens, projects may only be registered under a project root.
  const roots = tokenFor ? ['--workspace-root', project] : [];
  // `delayMs: null` leaves the binary's default pause (what a newcomer gets).
  const delay = delayMs === null ? [] : ['--scripted-delay-ms', String(delayMs)];
  const args = ['serve', '--addr', '127.0.0.1:0', '--data-dir', join(dir, 'data'), ...delay, ...roots, ...extra];
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: 'warn', ...(typeof env === 'function' ? env(dir) : env) } });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const url = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`spool did not start in 20 s: ${stderr}`)), 20_000);
    child.stdout.on('data', (d) => {
      out += d;
      // `https://` when started with `--tls-cert`/`--tls-key`.
      const m = out.match(/listening on (https?:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    child.on('exit', (code) => fail(new Error(`spool exited with ${code}: ${stderr}`)));
  });
  return {
    url,
    dir,
    project,
    token,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', r)));
      rmSync(dir, { recursive: true, force: true });
    },
    /** SIGKILL, keeping the directory (start again with `reuse: server.dir`). */
    async crash() {
      child.kill('SIGKILL');
      await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', r)));
    },
  };
}

/** server-everything's entry point, as `npm ci` in tests/mcp installs it (scripts/test sets the variable). */
export const EVERYTHING =
  process.env.SPOOL_TEST_MCP_EVERYTHING ?? join(ROOT, 'tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js');

/**
 * Starts `spool serve` with a config.toml whose `[[mcp]]` server `everything` is
 * server-everything over stdio, its tools allowed without asking (unless `allow` is false:
 * then they ask, as by default), then `more` lines; stopped, its config removed, when
 * test `t` ends. Without server-everything installed, skips `t` and returns null (fails under CI).
 */
export async function startSpoolWithEverything(t, more = [], { allow = true } = {}) {
  if (!existsSync(EVERYTHING)) {
    // Under CI a missing server is a broken setup, as for the Rust tests: scripts/test installs it.
    const ci = process.env.CI && process.env.CI !== 'false';
    assert.ok(!ci, `server-everything is missing at ${EVERYTHING} under CI: scripts/test runs npm ci in tests/mcp`);
    t.skip('server-everything is not installed (npm ci in tests/mcp)');
    return null;
  }
  const conf = mkdtempSync(join(tmpdir(), 'spool-mcp-conf-'));
  t.after(() => rmSync(conf, { recursive: true, force: true }));
  const config = [
    ...(allow ? ['[[permission]]', 'tool = "everything_*"', 'action = "allow"'] : []),
    '[[mcp]]',
    'name = "everything"',
    'command = "node"',
    `args = [${JSON.stringify(EVERYTHING)}, "stdio"]`,
    ...more,
  ].join('\n');
  writeFileSync(join(conf, 'config.toml'), `${config}\n`);
  const server = await startSpool({ extra: ['--config', join(conf, 'config.toml')] });
  t.after(() => server.stop());
  return server;
}

/**
 * Reads the text frames a browser sends on a WebSocket (masked, possibly split across
 * TCP chunks), so the proxy can count the streams a page opens over `/api/streams` the
 * way it counts EventSource requests.
 */
class ClientFrames {
  constructor(onText) {
    this.onText = onText;
    this.buf = Buffer.alloc(0);
  }

  push(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return;
      const opcode = b[0] & 0x0f;
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        len = Number(b.readBigUInt64BE(2));
        at = 10;
      }
      const masked = (b[1] & 0x80) !== 0;
      const end = at + (masked ? 4 : 0) + len;
      if (b.length < end) return;
      const payload = Buffer.from(b.subarray(end - len, end));
      if (masked) for (let i = 0; i < len; i++) payload[i] ^= b[at + (i % 4)];
      this.buf = b.subarray(end);
      if (opcode === 1) {
        try {
          this.onText(payload.toString('utf8'));
        } catch {
          // not one of ours; the server answers it
        }
      }
    }
  }
}

/**
 * A TCP proxy in front of the server. `cut()` drops every open session stream (the
 * page sees the connection end mid-answer); `down()` also refuses new connections until
 * `up()`. Counts the session streams it saw opened, and their requested cursors, whether
 * as EventSource requests or as opens on a `/api/streams` socket.
 */
export async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const sockets = new Set();
  const streams = [];
  let socketsSeen = 0;
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) return client.destroy();
    const upstream = net.connect(Number(port), hostname);
    const pair = { client, upstream, stream: false };
    sockets.add(pair);
    let frames = null; // a `/api/streams` socket's client frames, read for their opens
    client.on('data', (chunk) => {
      if (frames) frames.push(chunk);
      else {
        const head = chunk.toString('latin1', 0, Math.min(chunk.length, 512));
        const m = head.match(/^GET (\/api\/sessions\/[^/ ]+\/events[^ ]*) HTTP/);
        if (m) {
          pair.stream = true;
          streams.push(decodeURIComponent(m[1]));
        } else if (/^GET \/api\/streams[ ?]/.test(head)) {
          pair.stream = true;
          socketsSeen++;
          frames = new ClientFrames((text) => {
            const open = JSON.parse(text);
            if (open.op !== 'open' || !open.session) return;
            const cursor = open.cursor ? `&cursor=${open.cursor}` : '';
            streams.push(`/api/sessions/${open.session}/events?approvals=${open.approvals ? 1 : 0}${cursor}`);
          });
          const end = chunk.indexOf('\r\n\r\n');
          if (end >= 0) frames.push(chunk.subarray(end + 4));
        }
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => client.write(chunk));
    const close = () => {
      sockets.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const cut = (all = false) => {
    for (const p of [...sockets]) if (all || p.stream) {
      p.client.destroy();
      p.upstream.destroy();
    }
  };
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    streams,
    /** How many `/api/streams` sockets were opened through the proxy. */
    get sockets() {
      return socketsSeen;
    },
    cut,
    down() {
      refusing = true;
      cut(true);
    },
    up() {
      refusing = false;
    },
    close: () => new Promise((r) => {
      cut(true);
      server.close(r);
    }),
  };
}

/**
 * Headless Chromium. `ignoreCertificateErrors`: accept any TLS certificate (the TLS
 * test's self-signed one), as a person who clicked past the warning would.
 * `executablePath`: another build (the push test needs the full browser, `FULL_CHROMIUM`).
 */
export async function launch({ ignoreCertificateErrors = false, executablePath = CHROMIUM } = {}) {
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
  if (ignoreCertificateErrors) args.push('--ignore-certificate-errors');
  const browser = await chromium.launch({ executablePath, args });
  const newContext = browser.newContext.bind(browser);
  browser.newContext = async (options) => {
    const context = await newContext(options);
    const newPage = context.newPage.bind(context);
    context.newPage = async () => pollOnAnInterval(await newPage());
    context.on('page', pollOnAnInterval);
    return context;
  };
  return browser;
}

/**
 * Makes `page.waitForFunction` check its condition every 50 ms unless told otherwise.
 * Playwright's default checks on every animation frame, which keeps Chromium painting
 * 60 frames a second for as long as a test waits: measured here, 0.1-0.25 CPU-seconds
 * for each second of waiting, against 0.03 on an interval, on a 2-core machine where
 * the browser suite is short of CPU. The conditions waited for here (an answer settled,
 * a card shown) hold until the next change, so an interval sees them just the same.
 */
function pollOnAnInterval(page) {
  if (!page.pollsOnAnInterval) {
    const waitForFunction = page.waitForFunction.bind(page);
    page.waitForFunction = (fn, arg, options = {}) => waitForFunction(fn, arg, { polling: 50, ...options });
    page.pollsOnAnInterval = true;
  }
  return page;
}

/**
 * A page at `url` that fails the test on any uncaught page error. With `clock`, the
 * page runs on Playwright's controllable clock (installed before its scripts load;
 * time flows until the test pauses it).
 */
export async function openPage(browser, url, { width = 1280, height = 820, clock = false } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, colorScheme: 'light' });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  page.on('dialog', (d) => d.accept());
  if (clock) await page.clock.install();
  await page.goto(url);
  return page;
}

export async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
}

export async function api(base, method, path, body, token) {
  const headers = body ? { 'content-type': 'application/json' } : {};
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(base + path, {
    method,
    headers,
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path} → ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A project over the server's temp project dir, and one session in it. */
export async function seed(server, { title } = {}) {
  const project = await api(server.url, 'POST', '/api/projects', { path: server.project, name: 'demo' });
  const session = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title });
  return { project, session };
}

/** The stored text of the session's last assistant message. */
export async function storedAnswer(base, sessionId) {
  const page = await api(base, 'GET', `/api/sessions/${sessionId}/messages?limit=500`);
  const last = page.messages.filter((m) => m.role === 'assistant').at(-1);
  return last.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
}

/** Polls `check` until it returns a truthy value, or throws after `ms`. */
export async function until(check, ms = 15_000, what = 'a condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The scripted model's `stream: n` answer: `w1 w2 … wn`. */
export const words = (n) => Array.from({ length: n }, (_, i) => `w${i + 1}`).join(' ');

/** The text of the page's last answer. */
export const lastAnswer = (page) =>
  page.evaluate(() => [...document.querySelectorAll('.msg.assistant .text')].at(-1)?.textContent ?? '');

/** Types a prompt and sends it, once the page is live. */
export async function send(page, text) {
  await page.waitForSelector('.conn.is-live');
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

/** Waits for the answer to be committed and the run to be over. */
export async function settled(page) {
  await page.waitForSelector('.msg.assistant:not(.is-draft)');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'));
}
