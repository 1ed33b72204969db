// Browser test of steering (issue 40): while a run streams, typing offers "Send now"
// beside the queue; the text goes into the running run, shows in the conversation as
// the person's message where the run took it, and the same run answers it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, settled, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const userTexts = (page) =>
  page.evaluate(() => [...document.querySelectorAll('.msg.user')].map((m) => m.textContent.trim()));

test('"Send now" while a run streams puts the message into that run, and the run answers it', async (t) => {
  const server = await startSpool({ delayMs: 10 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Steer' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 150');
  await page.waitForFunction(() => /\bw5\b/.test(document.querySelector('.msg.assistant.is-draft .text')?.textContent ?? ''));

  assert.equal(await page.isVisible('#steer'), false, 'nothing typed: no "Send now"');
  await page.fill('#prompt', 'echo: steered in');
  await page.waitForSelector('#steer:not([hidden])');
  await shot(page, 'steer-offered');
  await page.click('#steer');
  await page.waitForFunction(() => document.querySelector('#prompt').value === '');

  // The run takes it after its model call, and goes on to answer it.
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.user')].some((m) => m.textContent.includes('echo: steered in')));
  await settled(page);
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .text')].at(-1)?.textContent.includes('steered in'));
  const users = await userTexts(page);
  assert.equal(users.length, 2, `the prompt and the steer: ${users}`);
  assert.ok(users[1].includes('echo: steered in'), users.join(' | '));

  const stored = await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=50`);
  assert.deepEqual(stored.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
  const runs = new Set(stored.messages.map((m) => m.runId).filter(Boolean));
  assert.ok(runs.size <= 1, `one run answered both: ${[...runs]}`);
  assert.equal(await page.isVisible('#steer'), false, 'no run: no "Send now"');
  assert.deepEqual(page.errors, []);
});
