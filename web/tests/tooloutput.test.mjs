// Browser tests of live tool output (issue 17, point 3): a running bash card shows what
// the command printed while it still runs, Stop keeps those lines on the card (also
// after a reload), and a chatty command's card says its live output was capped.
//
// Commands wait on a file the test creates (`gate`), so "still running" is certain
// rather than a matter of timing.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, launch, openPage, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const WAIT_FOR_GATE = 'while [ ! -f gate ]; do sleep 0.01; done';

/** A server and a session whose rules let bash run without asking. */
async function bashSession(title) {
  const server = await startSpool();
  const { session } = await seed(server, { title });
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { permissions: [{ tool: 'bash', action: 'allow' }] });
  return { server, session };
}

test('a running bash card shows its first line live, and Stop keeps the lines, also after a reload', async (t) => {
  const { server, session } = await bashSession('Live output');
  t.after(() => server.stop());
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const command = `echo first line; echo second line >&2; ${WAIT_FOR_GATE}; echo never printed`;
  await send(page, `tool: bash ${JSON.stringify({ command })}`);

  const live = await page.waitForSelector('.tool-card.is-running .tool-live-pre');
  await page.waitForFunction(() => /second line/.test(document.querySelector('.tool-live-pre')?.textContent ?? ''));
  assert.equal(existsSync(join(server.project, 'gate')), false, 'the command is still waiting');
  assert.match(await live.textContent(), /first line\n/);
  assert.equal(await page.locator('.tool-card.is-running').count(), 1, 'the card still says it runs');
  await shot(page, 'tool-live-output');

  await page.click('#send[data-mode="stop"]');
  const stopped = await page.waitForSelector('.tool-card.is-error');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  const shown = async (view) => view.evaluate(() => document.querySelector('.tool-card.is-error [data-section="out"] .tool-pre')?.textContent ?? '');
  assert.match(await stopped.textContent(), /aborted before the tool finished/);
  assert.match(await shown(page), /first line\n/);
  assert.match(await shown(page), /second line\n/);
  assert.doesNotMatch(await shown(page), /never printed/);
  await shot(page, 'tool-output-after-stop');

  await page.reload();
  await page.waitForSelector('.tool-card.is-error [data-section="out"] .tool-pre');
  // (Two pipes: stdout's and stderr's lines may come in either order.)
  assert.match(await shown(page), /first line\n/, 'the printed lines survive a reload');
  assert.match(await shown(page), /second line\n/, 'the printed lines survive a reload');
  writeFileSync(join(server.project, 'gate'), '');
  assert.deepEqual(page.errors, []);
});

test('a chatty command\'s card shows the live output was capped', async (t) => {
  const { server, session } = await bashSession('Capped output');
  t.after(() => server.stop());
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { width: 390, height: 800 });
  // 300,000 bytes (past the 256 KiB cap), then it waits: the card is still running.
  const command = `head -c 300000 /dev/zero | tr '\\0' x; ${WAIT_FOR_GATE}; echo done`;
  await send(page, `tool: bash ${JSON.stringify({ command })}`);
  const marker = await page.waitForSelector('.tool-card.is-running .tool-truncated');
  assert.match(await marker.textContent(), /stopped at 256 KiB/);
  const shownLength = await page.evaluate(() => document.querySelector('.tool-live-pre').textContent.length);
  assert.equal(shownLength, 256 * 1024);
  // Bounded height: the card does not grow with the output.
  const height = await page.evaluate(() => document.querySelector('.tool-live-scroll').clientHeight);
  assert.ok(height <= 240, `the live output is ${height} px tall`);
  // It scrolls, and what is in view is its end: the newest output, not the first line.
  const view = await page.evaluate(() => {
    const scroller = document.querySelector('.tool-live-scroll');
    const pre = scroller.querySelector('pre');
    return { overflows: scroller.scrollHeight > scroller.clientHeight, gap: pre.getBoundingClientRect().bottom - scroller.getBoundingClientRect().bottom };
  });
  assert.ok(view.overflows, 'the output is taller than its box');
  assert.ok(Math.abs(view.gap) < 2, `the newest line is in view (${view.gap} px off)`);
  await shot(page, 'tool-live-output-capped-390');
  writeFileSync(join(server.project, 'gate'), '');
  await page.waitForSelector('.tool-card.is-success');
  assert.deepEqual(page.errors, []);
});
