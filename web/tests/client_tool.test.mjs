// Browser test of client-side tools (issue 40): a call of a tool the prompt declared
// waits for the client that declared it, not for the person, so its card says so and
// offers only Cancel (no Approve or Always); the run goes on when that client posts the
// result, and Cancel stops it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { api, launch, openPage, seed, settled, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const locating = {
  text: 'tool: get_location {"precise": true}',
  tools: [{ name: 'get_location', description: 'Where the person is, from the browser' }],
};

/** The session's one pending approval, once the run parked at it. */
async function parked(server, sessionId) {
  for (;;) {
    const detail = await api(server.url, 'GET', `/api/sessions/${sessionId}`);
    const [approval] = detail.state.pendingApprovals ?? [];
    if (approval) return approval;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a client tool call waits for its client: the card says so, offers Cancel, and goes when the result comes', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Client tools' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');

  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, locating);
  const card = page.locator('.client-call-card');
  await card.waitFor();
  assert.equal(await card.locator('.approval-head').textContent(), 'Waiting for the client to run get_location');
  assert.match(await card.textContent(), /Where the person is, from the browser/);
  assert.match(await card.locator('.approval-arg').textContent(), /"precise": true/);
  const buttons = await card.locator('button').allTextContents();
  assert.deepEqual(buttons.map((b) => b.replace(/N$/, '').trim()), ['Cancel'], 'nothing to approve');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Waiting for the client to run get_location');
  assert.match(await page.locator('.tool-card[data-call-id] .tool-status').textContent(), /Waiting for the client to run get_location/);
  // The client is asked, not the person: no "Needs you" in the sidebar or the tab title.
  assert.equal(await page.locator('.session-flag').count(), 0, 'the sidebar says nobody needs the person');
  assert.doesNotMatch(await page.title(), /Needs you/);
  await shot(page, 'client-tool-waiting');

  // The client posts its result: the card goes and the answer reads it.
  const approval = await parked(server, session.id);
  await api(server.url, 'POST', `/api/tool-calls/${approval.id}/result`, { output: 'Lisbon' });
  await settled(page);
  assert.equal(await card.count(), 0);
  await page.waitForFunction(() => document.querySelector('.tool-card')?.dataset.status === 'success');

  // Cancel on the next one stops its run; no result is asked of anyone any more.
  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, locating);
  await card.waitFor();
  await card.getByRole('button', { name: 'Cancel' }).click();
  await page.waitForFunction(() => !document.querySelector('.client-call-card') && document.querySelector('#run-state')?.textContent === 'Idle');
  const runs = await api(server.url, 'GET', `/api/sessions/${session.id}/runs`);
  assert.deepEqual(runs.map((r) => r.status), ['completed', 'cancelled']);
  assert.deepEqual(page.errors, []);
});
