// Browser test of "Always allow" on a command's approval card (issue 36): the card offers
// the choices the server computed from the parsed command (this exact command, then
// prefix patterns such as `git status *`), never all of bash; the choice is reachable by
// keyboard, and the one chosen is what the decision sends and what later runs unasked.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, send, shot, startSpool, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const bash = (command) => `tool: bash ${JSON.stringify({ command })}`;

test('a command card offers the exact command and its prefixes, and the chosen one is sent', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Always' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const sent = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().includes('/approvals/')) sent.push(JSON.parse(r.postData() ?? '{}'));
  });

  await send(page, bash('git status --short'));
  const card = await page.waitForSelector('.approval-card');
  const labels = await card.$$eval('.approval-always-option', (ls) => ls.map((l) => l.textContent.trim()));
  assert.deepEqual(labels, ['This exact command', 'Commands matching git status *', 'Commands matching git *']);
  assert.equal(await card.$eval('.approval-always input:checked', (r) => r.closest('label').textContent.trim()), 'This exact command');
  // Its name: the label without the key it shows (the key is its aria-keyshortcuts).
  assert.equal(await page.getByRole('button', { name: 'Always allow', exact: true }).getAttribute('data-decision'), 'always');
  await shot(page, 'approval-always-choices');

  // By keyboard: focus the group's checked radio, move down one, Tab to the button.
  await card.$eval('.approval-always input:checked', (r) => r.focus());
  await page.keyboard.press('ArrowDown');
  assert.equal(await card.$eval('.approval-always input:checked', (r) => r.closest('label').textContent.trim()), 'Commands matching git status *');
  let tabs = 0;
  while (!(await page.evaluate(() => document.activeElement?.dataset?.decision === 'always'))) {
    assert.ok(++tabs < 5, 'the Always allow button is a few Tab presses from the choice');
    await page.keyboard.press('Tab');
  }
  await page.keyboard.press('Enter');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  assert.equal(sent.length, 1, JSON.stringify(sent));
  assert.equal(sent[0].decision, 'always');
  assert.deepEqual(sent[0].patterns, ['git status *']);
  const rules = async () => (await api(server.url, 'GET', `/api/sessions/${session.id}`)).state.session.permissions;
  await until(async () => (await rules()).length === 1, 15_000, 'the rule');
  assert.deepEqual(await rules(), [{ tool: 'bash', pattern: 'git status *', action: 'allow' }]);

  // The rule covers `git status …`, not another program.
  const idle = () => page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  await idle();
  await send(page, bash('git status'));
  await idle();
  assert.equal(await page.locator('.approval-card').count(), 0, 'git status ran without asking');
  await send(page, bash('rm -rf x'));
  const asked = await page.waitForSelector('.approval-card');
  assert.equal(await asked.$eval('.approval-always-option', (l) => l.textContent.trim()), 'This exact command');
  assert.deepEqual(page.errors, []);
});

test('a card for a tool that is not a command keeps one Always allow for the tool', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Always write' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: write {"path":"a.txt","content":"x"}');
  const card = await page.waitForSelector('.approval-card');
  assert.equal(await card.$('.approval-always'), null);
  assert.equal(await page.getByRole('button', { name: 'Always allow write', exact: true }).getAttribute('data-decision'), 'always');
});
