// Browser test of a guardrail's card (issue 41): a run that reached its tool-call limit
// parks at a "Limit reached" card asking whether to go on; Continue lets it run on.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch, openPage, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

test('a run at its tool-call limit asks on a Limit reached card and goes on after Continue', async (t) => {
  const conf = mkdtempSync(join(tmpdir(), 'spool-guard-'));
  writeFileSync(join(conf, 'config.toml'), '[guardrails]\nrun_tool_calls = 1\n');
  const server = await startSpool({ extra: ['--config', join(conf, 'config.toml')] });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Guarded' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);

  await send(page, 'tool: read {"path":"README.md"}\ntool: read {"path":"README.md"}');
  const card = await page.waitForSelector('.guardrail-card');
  assert.equal(await card.$eval('.approval-head strong', (e) => e.textContent), 'Limit reached');
  assert.equal(
    await card.$eval('.approval-change', (e) => e.textContent),
    'This run has made 1 tool call (limit 1 tool call). Continue?',
  );
  const buttons = await card.$$eval('button[data-decision]', (bs) => bs.map((b) => [b.dataset.decision, b.textContent.trim()]));
  assert.deepEqual(buttons, [['once', 'ContinueY'], ['always', 'Continue for this runA'], ['reject', 'Stop the runN']]);
  await shot(page, 'guardrail-card');
  // The call it stopped before waits on it, not shown running.
  const statuses = await page.$$eval('.tool-status', (ss) => ss.map((s) => s.textContent));
  assert.deepEqual(statuses, ['Done', 'Waiting for approval']);

  await page.getByRole('button', { name: 'Continue', exact: true }).click();
  await page.waitForSelector('.guardrail-card', { state: 'detached' });
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  assert.deepEqual(page.errors, []);
});
