// Browser test of issue 36's usage point: a run stopped mid-answer used tokens, and its
// usage line says how many (estimated, marked "≈"), not `0 in · 0 out`. The real `spool`
// binary and headless Debian Chromium, as in sessions.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

test('a stopped answer shows the tokens it used, marked as an estimate', async (t) => {
  const server = await startSpool({ delayMs: 10 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Stopped usage' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 3000'); // 30 s: it cannot end by itself before the click
  await page.waitForFunction(() => /\bw20\b/.test(document.querySelector('.msg.assistant.is-draft .text')?.textContent ?? ''));
  await page.click('#send[data-mode="stop"]');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'));

  const [run] = await api(server.url, 'GET', `/api/sessions/${session.id}/runs`);
  assert.equal(run.status, 'cancelled');
  assert.ok(run.usage.output > 0 && run.usage.estimated, JSON.stringify(run.usage));
  const fmt = (n) => n.toLocaleString('en-US');
  const want = `scripted · ≈${fmt(run.usage.input)} in · ≈${fmt(run.usage.output)} out · no price set`;
  for (const view of [page, await openPage(browser, `${server.url}/#/s/${session.id}`)]) {
    await view.waitForFunction((want) => document.querySelector('[data-testid="answer-usage"]')?.textContent === want, want);
    await view.waitForFunction(() => document.querySelector('[data-testid="session-usage"]')?.textContent.startsWith('1 answer · ≈'));
    assert.doesNotMatch(await view.textContent('[data-testid="answer-usage"]'), /\b0 out\b/);
    if (view === page) await shot(page, 'usage-stopped');
    assert.deepEqual(view.errors, []);
  }
});
