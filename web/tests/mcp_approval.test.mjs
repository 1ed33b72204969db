// Browser test of issue 38's "done means": a session uses server-everything's tools
// (over stdio, through the real binary's `[[mcp]]` config) from the web UI with
// approvals. With no rule of its own, the server's tool asks: the card names the server
// and the tool and shows every argument; Approve once runs it and its result shows in
// the call's card; a second call rejected never reaches the server.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, settled, shot, startSpoolWithEverything } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

test("an MCP server's tool asks with its server, tool and arguments; approved it runs, rejected it does not", async (t) => {
  // No rule of its own: the server's tools ask, as they do by default.
  const server = await startSpoolWithEverything(t, [], { allow: false });
  if (!server) return;
  const { session } = await seed(server, { title: 'MCP approvals' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);

  await send(page, 'tool: everything_echo {"message":"hello from the web"}');
  const card = await page.waitForSelector('.approval-card', { timeout: 30_000 });
  assert.equal(await card.$eval('.approval-tool', (e) => e.textContent), 'everything_echo');
  assert.equal(await card.$eval('.approval-change', (e) => e.textContent), 'everything › echo');
  assert.equal(await card.$eval('.approval-arg', (e) => e.textContent), '{"message":"hello from the web"}');
  assert.match(await card.$eval('.approval-reason', (e) => e.textContent), /MCP server "everything"/);
  await shot(page, 'mcp-approval-card');
  await page.click('.approval-card button[data-decision="once"]');
  await settled(page);
  const done = await page.waitForSelector('.tool-card.is-success');
  await done.$eval('summary', (s) => s.click());
  await page.waitForFunction(() => document.querySelector('.tool-card.is-success')?.textContent.includes('Echo: hello from the web'));

  await send(page, 'tool: everything_echo {"message":"not this one"}');
  await page.waitForSelector('.approval-card');
  await page.click('.approval-card button[data-decision="reject"]');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  const messages = await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`);
  const echoes = messages.messages.filter((m) => m.role === 'toolResult' && m.content[0]?.text?.startsWith('Echo:'));
  assert.deepEqual(echoes.map((m) => m.content[0].text), ['Echo: hello from the web'], 'the rejected call never ran');
  assert.deepEqual(page.errors, []);
});
