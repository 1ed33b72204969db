// Browser test of issue 38's elicitation: an MCP server (server-everything, over stdio
// through the real binary's `[[mcp]]` config) asks the person for input while its tool
// call runs. The card names the server, shows its message and a form built from the
// fields' schema (text, yes/no, a choice, numbers with their defaults); a required field
// left empty is marked and nothing is sent; Submit answers it through the approval
// route, the run (never parked) goes on, and the server's result shows the fields.

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

test("a server's question shows a form from its schema; Submit answers it and the server gets the fields", async (t) => {
  // Its tools run without an approval of their own: only the question waits.
  const server = await startSpoolWithEverything(t);
  if (!server) return;
  const { session } = await seed(server, { title: 'Live ask' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const decisions = [];
  page.on('request', (r) => r.url().includes('/approvals/') && decisions.push(JSON.parse(r.postData())));
  await send(page, 'tool: everything_trigger-elicitation-request {}');

  const card = await page.waitForSelector('.live-ask-card', { timeout: 30_000 });
  assert.match(await card.$eval('.approval-head', (e) => e.textContent), /everything asks/);
  assert.equal(await card.$eval('.approval-change', (e) => e.textContent), 'Please provide inputs for the following fields:');
  // The run never parked: it is running, its call waiting for this answer.
  const detail = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  assert.equal(detail.state.activeRun.status, 'running');
  assert.equal(await page.textContent('#run-state'), 'Running');
  assert.equal(await page.textContent('.tool-card .tool-status'), 'Waiting for your answer');
  // Defaults are filled in; a choice is a select; yes/no is a checkbox.
  assert.equal(await card.$eval('[id$="-f-integer"]', (e) => e.value), '42');
  assert.equal(await card.$eval('[id$="-f-firstLine"]', (e) => e.value), 'It was a dark and stormy night.');
  assert.equal(await card.$eval('[id$="-f-check"]', (e) => e.type), 'checkbox');

  // The required name left empty: marked, focused, and nothing sent.
  await card.$eval('button[data-decision="fill"]', (b) => b.click());
  await page.waitForSelector('.live-ask-card [id$="-f-name"][aria-invalid="true"]');
  assert.equal(decisions.length, 0);

  await page.fill('.live-ask-card [id$="-f-name"]', 'Ada');
  await page.check('.live-ask-card [id$="-f-check"]');
  await page.selectOption('.live-ask-card [id$="-f-untitledSingleSelectEnum"]', { label: 'Joey' });
  await page.selectOption('.live-ask-card [id$="-f-legacyTitledEnum"]', { label: 'Dogs' });
  await shot(page, 'live-ask-card');
  await page.click('.live-ask-card button[data-decision="fill"]');
  await page.waitForSelector('.live-ask-card', { state: 'detached' });
  await settled(page);

  const fill = decisions[0].decision.fill;
  assert.equal(fill.name, 'Ada');
  assert.equal(fill.check, true);
  assert.equal(fill.integer, 42);
  assert.equal(fill.untitledSingleSelectEnum, 'Joey');
  assert.equal(fill.legacyTitledEnum, 'pet-2');
  assert.deepEqual(fill.untitledMultipleSelectEnum, ['Guitar']);
  const messages = await api(server.url, 'GET', `/api/sessions/${session.id}/messages`);
  const result = messages.messages.find((m) => m.role === 'toolResult');
  assert.equal(result.isError, false, result.content[0].text);
  assert.match(result.content[0].text, /- Name: Ada/);
  assert.match(result.content[0].text, /- Agreed to terms: true/);
  assert.deepEqual(page.errors, []);
});
