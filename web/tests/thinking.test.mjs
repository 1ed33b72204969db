// Browser test of issue 36's thinking point (seed 001: "Thinking remains in events and
// snapshots but is hidden from the conversation"): a model's reasoning is not shown in
// the conversation, neither while it streams nor after, and the answer's "Show thinking"
// unfolds it on demand. The scripted model thinks with `think: THOUGHT | ANSWER`. The
// real `spool` binary and headless Debian Chromium, as in ui.test.mjs.

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

const THOUGHT = 'weighing whether the pelican fits in the suitcase before saying anything at all';
const ANSWER = 'It fits if you fold the wings.';

/** The answers' text as a person sees it (hidden elements leave it out); the prompt
 *  itself holds the thought too, so only the assistant's rows count. */
const shownText = (page) => page.evaluate(() => [...document.querySelectorAll('#timeline .msg.assistant')].map((m) => m.innerText).join('\n'));

test('thinking is hidden from the conversation while it streams and after, and Show thinking unfolds it', async (t) => {
  // Paced, so the page sees the model thinking before it answers.
  const server = await startSpool({ delayMs: 40 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Thinking' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);

  await send(page, `think: ${THOUGHT} | ${ANSWER}`);
  await page.waitForSelector('.thinking-status', { state: 'visible' });
  assert.match(await page.textContent('.thinking-status'), /Thinking…/);
  assert.ok(!(await shownText(page)).includes('pelican'), 'no reasoning in the conversation while it streams');
  await shot(page, 'thinking-streaming');
  await settled(page);

  const text = await shownText(page);
  assert.ok(text.includes(ANSWER), text);
  assert.ok(!text.includes('pelican'), `the reasoning is not in the conversation: ${text}`);
  assert.ok(await page.isHidden('[data-testid="thinking"]'));
  const toggle = page.getByRole('button', { name: 'Show thinking' });
  assert.ok(await toggle.isVisible(), 'the answer offers its thinking');
  await shot(page, 'thinking-hidden');

  await toggle.click();
  await page.waitForSelector('[data-testid="thinking"]', { state: 'visible' });
  assert.equal(await page.textContent('[data-testid="thinking"]'), THOUGHT);
  assert.ok((await shownText(page)).includes('pelican fits in the suitcase'));
  assert.equal(await page.getByRole('button', { name: 'Hide thinking' }).getAttribute('aria-expanded'), 'true');
  await shot(page, 'thinking-shown');
  await page.getByRole('button', { name: 'Hide thinking' }).click();
  await page.waitForSelector('[data-testid="thinking"]', { state: 'hidden' });

  // The events and the history keep it: a reload (from the snapshot) hides it again and
  // offers it again.
  const history = await api(server.url, 'GET', `/api/sessions/${session.id}/messages`);
  const stored = history.messages.find((m) => m.role === 'assistant');
  assert.deepEqual(stored.content.map((c) => c.type), ['thinking', 'text']);
  await page.reload();
  await page.waitForSelector('.msg.assistant:not(.is-draft)');
  assert.ok(!(await shownText(page)).includes('pelican'));
  await page.getByRole('button', { name: 'Show thinking' }).click();
  await page.waitForSelector('[data-testid="thinking"]', { state: 'visible' });
  assert.deepEqual(page.errors, []);
});
