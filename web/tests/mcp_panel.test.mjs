// Browser test of issue 38's MCP part of the Rules panel: the real binary with two
// `[[mcp]]` servers in its config, server-everything over stdio and one whose command
// exits at once. The panel lists both idle before any turn; after the session's first
// turn everything is ready with its tools and the other failed with the reason. Its
// switch turns everything off for this session: the next turn is not offered its tools
// (a call to one is an unknown tool), and on again, a call runs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, settled, shot, startSpoolWithEverything, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** The session's tool results: [tool, text, isError]. */
async function results(server, session) {
  const page = await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`);
  return page.messages.filter((m) => m.role === 'toolResult').map((m) => [m.toolName, m.content[0]?.text, m.isError]);
}

/** Waits until the session holds `n` tool results and the page shows the run over. */
async function idleWith(page, server, session, n) {
  await until(async () => (await results(server, session)).length === n, 15_000, `${n} tool results`);
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'));
}

test('the Rules panel lists MCP servers with state, tools and reason, and its switch decides what the next turn is offered', async (t) => {
  // Allowed without asking: only the switch decides whether a call runs.
  const server = await startSpoolWithEverything(t, ['[[mcp]]', 'name = "broken"', 'command = "/bin/false"']);
  if (!server) return;
  const { session } = await seed(server, { title: 'MCP' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');

  await page.click('#permissions');
  const row = (name) => `.rules-dialog .mcp-server[data-server="${name}"]`;
  await page.waitForSelector(`${row('everything')}[data-state="idle"]`);
  await page.waitForSelector(`${row('broken')}[data-state="idle"]`);
  assert.equal(await page.isChecked(`${row('everything')} input[role="switch"]`), true, 'offered by default');
  await page.keyboard.press('Escape');

  // A turn starts both for this session: one comes up, the other fails.
  await send(page, 'hello');
  await settled(page);
  await page.click('#permissions');
  await page.waitForSelector(`${row('everything')}[data-state="ready"]`);
  const tools = await page.textContent(`${row('everything')} .mcp-tools`);
  assert.match(tools, /everything_echo/);
  await page.waitForSelector(`${row('broken')}[data-state="failed"] .mcp-reason`);
  assert.match(await page.textContent(`${row('broken')} .mcp-reason`), /exit/, 'the reason is shown');
  await page.locator(row('broken')).scrollIntoViewIfNeeded();
  await shot(page, 'rules-panel-mcp');

  // Off for this session: the next turn is not offered its tools.
  await page.click(`${row('everything')} input[role="switch"]`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.disabled === false && !document.querySelector(sel).checked,
    `${row('everything')} input[role="switch"]`);
  const listed = await api(server.url, 'GET', `/api/mcp?session=${session.id}`);
  assert.deepEqual(listed.find((s) => s.name === 'everything').session, { enabled: false, by_default: true, choice: false });
  await page.keyboard.press('Escape');
  await send(page, 'tool: everything_echo {"message":"hi"}');
  await idleWith(page, server, session, 1);
  assert.deepEqual(await results(server, session), [['everything_echo', 'unknown tool "everything_echo"', true]]);

  // On again: a call runs.
  await page.click('#permissions');
  await page.click(`${row('everything')} input[role="switch"]`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.disabled === false && document.querySelector(sel).checked,
    `${row('everything')} input[role="switch"]`);
  await page.keyboard.press('Escape');
  await send(page, 'tool: everything_echo {"message":"again"}');
  await idleWith(page, server, session, 2);
  assert.deepEqual((await results(server, session))[1], ['everything_echo', 'Echo: again', false]);
  assert.deepEqual(page.errors, []);
});

// A server given up on (five failures in a row take a minute of backoff, so the list is
// the server's answer for such a server, served to the page by Playwright) shows "Try
// again"; clicking it posts the retry, and the row shows what the server answers.
test('a server given up on offers Try again, which asks the server to try it again', async (t) => {
  const server = await startSpoolWithEverything(t, ['[[mcp]]', 'name = "broken"', 'command = "/bin/false"']);
  if (!server) return;
  const { session } = await seed(server, { title: 'MCP retry' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  const givenUp = {
    name: 'broken', transport: 'stdio', target: '/bin/false', state: 'failed', tools: [], connections: 0,
    reason: 'initialize failed: the server exited (exit status: 1); given up after 5 failures in a row',
    session: { enabled: true, by_default: true },
  };
  let retried = false;
  await page.route('**/api/mcp?*', async (route) => {
    const real = await (await route.fetch()).json();
    const list = real.map((s) => (s.name === 'broken' && !retried ? givenUp : s));
    await route.fulfill({ json: list });
  });
  const posts = [];
  page.on('request', (r) => r.url().endsWith('/api/mcp/broken/retry') && posts.push(r.method()));
  await page.click('#permissions');
  const row = '.rules-dialog .mcp-server[data-server="broken"]';
  await page.waitForSelector(`${row}[data-state="failed"] .mcp-retry`);
  assert.match(await page.textContent(`${row} .mcp-reason`), /Given up after failing again and again/);
  retried = true;
  await page.click(`${row} .mcp-retry`);
  await page.waitForSelector(`${row}[data-state="idle"]`);
  assert.deepEqual(posts, ['POST']);
  assert.equal(await page.locator(`${row} .mcp-retry`).count(), 0);
  assert.deepEqual(page.errors, []);
});
