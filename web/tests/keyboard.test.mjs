// Browser tests of the keyboard (issue 17, point 4): every test drives the real
// keyboard (page.keyboard) in headless Debian Chromium against the real binary.
//
//   * opening or creating a session (Alt+N) puts the cursor in the prompt
//   * Esc stops a run; with a dialog open, Esc closes the dialog and the run goes on;
//     Esc in another field (and the focus in it, across repaints) stays that field's
//   * `/` focuses the prompt when not typing; `?` lists the shortcuts, Esc closes it
//   * the first Tab stop is "Skip to conversation"
//   * session rows are one Tab stop each; their actions are reached with the arrows
//   * approvals (issue 36): a new card takes the focus unless the person is typing;
//     y / a / n decide it, 1-9 pick a question's option, Alt+A jumps to the waiting
//     card; after a decision the focus lands on the next card, else the prompt
//   * a card that took the focus by itself holds its keys a moment: letters typed into
//     the empty prompt as it came stay in the prompt, a y pressed at once decides nothing

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, launch, openPage, seed, send, settled, shot, startSpool, until } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const focused = (page) =>
  page.evaluate(() => {
    const el = document.activeElement;
    return el?.id || el?.getAttribute('aria-label') || el?.className || el?.tagName;
  });

test('opening a session puts the cursor in the prompt, and Alt+N starts a new session there too', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'First' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.waitForFunction(() => document.activeElement?.id === 'prompt');
  await page.keyboard.type('echo: typed at once');
  assert.equal(await page.inputValue('#prompt'), 'echo: typed at once');

  await page.keyboard.press('Alt+N');
  await page.waitForFunction((old) => /^#\/s\/ses_/.test(location.hash) && !location.hash.includes(old), session.id);
  const created = await page.evaluate(() => location.hash.slice(4));
  await page.waitForSelector(`.session.is-active[data-session-id="${created}"]`);
  await page.waitForFunction(() => document.activeElement?.id === 'prompt');
  assert.equal(await page.inputValue('#prompt'), '', 'the new session has its own, empty prompt');
  const sessions = await api(server.url, 'GET', `/api/projects/${session.projectId}/sessions`);
  assert.ok(sessions.some((s) => s.id === created), 'created in the open session\'s project');
  assert.deepEqual(page.errors, []);
});

test('Esc stops the run, and the run says Stopped after', async (t) => {
  const server = await startSpool({ delayMs: 10 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Esc' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 3000'); // 30 s: it cannot end by itself during the test
  await page.waitForFunction(() => /\bw5\b/.test(document.querySelector('.msg.assistant.is-draft .text')?.textContent ?? ''));
  assert.equal(await focused(page), 'prompt', 'the cursor is still in the prompt after sending');
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  const ending = await page.waitForSelector('.timing.ended.cancelled');
  assert.match(await ending.textContent(), /^Stopped after/);
  assert.deepEqual(page.errors, []);
});

test('with a dialog open, Esc closes the dialog and the run goes on; the next Esc stops it', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Dialog' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  // A run parked at an approval goes on until someone decides or stops it.
  await send(page, 'tool: bash {"command":"echo never"}');
  await page.waitForSelector('.approval-card');
  await page.click('#add-project');
  await page.waitForSelector('#project-dialog[open]');
  await page.keyboard.press('Escape');
  await page.waitForSelector('#project-dialog:not([open])', { state: 'attached' });
  assert.equal(await page.textContent('#run-state'), 'Waiting for approval', 'closing the dialog did not stop the run');
  await page.keyboard.press('Escape'); // focus is back on the page
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  assert.deepEqual(page.errors, []);
});

test('Esc in another field is that field\'s: in an approval\'s message box it does not stop the run', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Rename' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: bash {"command":"echo never"}');
  await page.waitForSelector('.approval-card');
  await page.focus('.approval-message');
  await page.keyboard.type('wait');
  await page.keyboard.press('Escape');
  assert.equal(await page.textContent('#run-state'), 'Waiting for approval');
  assert.equal(await page.inputValue('.approval-message'), 'wait');
  assert.deepEqual(page.errors, []);
});

test('typing an approval message keeps the focus while the run\'s clock ticks', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Ticks' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { clock: true });
  await send(page, 'tool: bash {"command":"echo never"}');
  await page.waitForSelector('.approval-card');
  await page.focus('.approval-message');
  await page.keyboard.type('only ');
  // The timeline repaints every second while a run goes ("Working for N s").
  await page.clock.runFor(3000);
  await page.keyboard.type('once');
  assert.equal(await page.inputValue('.approval-message'), 'only once', 'no keystroke went elsewhere');
  assert.equal(await focused(page), 'Message with your decision');
  assert.deepEqual(page.errors, []);
});

test('/ focuses the prompt when not typing; ? lists the shortcuts and Esc closes the list', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Keys' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.focus('.session-link');
  await page.keyboard.press('/');
  assert.equal(await focused(page), 'prompt');
  assert.equal(await page.inputValue('#prompt'), '', 'the slash was not typed');
  await page.keyboard.press('/'); // in the prompt it is a character
  await page.keyboard.press('?');
  assert.equal(await page.inputValue('#prompt'), '/?');
  assert.equal(await page.isVisible('#keys-dialog'), false, 'typing ? in the prompt opens nothing');

  await page.focus('.session-link');
  await page.keyboard.press('?');
  await page.waitForSelector('#keys-dialog[open]');
  const listed = await page.$$eval('#keys-dialog dt', (dts) => dts.map((d) => d.textContent));
  for (const keys of ['/', 'Alt+N', 'Esc', '?']) assert.ok(listed.includes(keys), `the overlay lists ${keys}: ${listed}`);
  await shot(page, 'keyboard-shortcuts');
  await page.keyboard.press('Escape');
  await page.waitForSelector('#keys-dialog:not([open])', { state: 'attached' });
  assert.deepEqual(page.errors, []);
});

test('the first Tab stop is "Skip to conversation", and it moves focus to the conversation', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  await seed(server, { title: 'Skip' });
  const page = await openPage(browser, `${server.url}/`);
  await page.waitForSelector('.session-link');
  const onScreen = () => page.$eval('#skip', (a) => a.getBoundingClientRect().bottom > 0);
  assert.equal(await onScreen(), false, 'out of sight until focused');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to conversation');
  await page.waitForFunction(() => document.querySelector('#skip').getBoundingClientRect().top >= 0);
  await page.keyboard.press('Enter');
  assert.equal(await focused(page), 'timeline');
  assert.equal(await page.evaluate(() => location.hash), '', 'the router did not follow the link');
  assert.deepEqual(page.errors, []);
});

test('session rows are one Tab stop each; arrows reach their actions, F2 renames, Delete deletes', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project } = await seed(server, { title: 'One' });
  for (const title of ['Two', 'Three']) await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title });
  const page = await openPage(browser, `${server.url}/`);
  await page.waitForFunction(() => document.querySelectorAll('.session-link').length === 3);
  const titles = await page.$$eval('.session-link', (as) => as.map((a) => a.title));
  // Tab from the list's first session: the next stop is the next session, not its buttons.
  await page.focus('.session-link');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.title), titles[1]);
  await page.keyboard.press('Shift+Tab');
  assert.equal(await page.evaluate(() => document.activeElement.title), titles[0]);
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  assert.equal(await page.evaluate(() => document.activeElement.title), titles[2]);
  await page.keyboard.press('ArrowUp');
  assert.equal(await page.evaluate(() => document.activeElement.title), titles[1]);
  await page.keyboard.press('ArrowRight');
  assert.equal(await focused(page), `Rename ${titles[1]}`);
  assert.ok(await page.isVisible(`button[aria-label="Rename ${titles[1]}"]`), 'the focused action shows');
  await page.keyboard.press('ArrowRight');
  assert.equal(await focused(page), `Archive ${titles[1]}`);
  await page.keyboard.press('Escape');
  assert.equal(await page.evaluate(() => document.activeElement.title), titles[1]);

  await page.keyboard.press('F2');
  await page.waitForSelector('.rename-input');
  assert.equal(await focused(page), 'New name');
  await page.keyboard.press('Control+A');
  await page.keyboard.type('Renamed');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.session-link[title="Renamed"]');

  await page.focus('.session-link[title="Renamed"]');
  await page.keyboard.press('Delete'); // the confirm() is accepted by openPage
  await page.waitForFunction(() => document.querySelectorAll('.session-link').length === 2);
  assert.equal(await page.locator('.session-link[title="Renamed"]').count(), 0);
  assert.deepEqual(page.errors, []);
});

/** True when the focus is on the waiting approval card or inside it (not in one of its text boxes). */
const onCard = (page) => page.evaluate(() => {
  const el = document.activeElement;
  return Boolean(el?.closest('.approval-card')) && !el.matches('input[type="text"], textarea');
});
const promptFocused = (page) => page.waitForFunction(() => document.activeElement?.id === 'prompt');
/** Waits until `selector`'s card holds its keys no more (a card that took the focus by itself waits a moment). */
const armed = (page, selector = '.approval-card') => page.waitForSelector(`${selector}:not([data-keys="held"])`);

test('an approval is reached and decided by keyboard alone: the card takes the focus, y approves, the prompt has it back', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Keyboard approval' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const decisions = [];
  page.on('request', (r) => r.url().includes('/approvals/') && decisions.push(JSON.parse(r.postData())));
  await page.waitForSelector('.conn.is-live');
  await promptFocused(page);
  await page.keyboard.type('tool: write {"path":"made.txt","content":"by keyboard"}');
  await page.keyboard.press('Enter');
  const card = await page.waitForSelector('.approval-card');
  await page.waitForFunction(() => document.activeElement?.closest('.approval-card'), null, { timeout: 5000 });
  assert.ok(await onCard(page), 'the new card has the focus (the prompt was empty: nobody was typing)');
  // A screen reader entering it hears what it asks about, not only "Approval needed: write".
  assert.match(await card.evaluate((c) => document.getElementById(c.getAttribute('aria-describedby'))?.textContent), /made\.txt/);
  // The round's clock says the run waits for the person, not that it is working.
  assert.match(await page.textContent('.timing'), /^Waiting for approval · \d/);
  // The card sits right under the call it asks about, the round's clock below it.
  assert.deepEqual(await card.evaluate((c) => [!!c.previousElementSibling?.querySelector('.tool-card.is-waiting'), !!c.nextElementSibling?.matches('.timing')]), [true, true]);

  // Each decision button shows its key and names it for assistive technology.
  const keys = await card.$$eval('button[aria-keyshortcuts]', (bs) => bs.map((b) => [b.dataset.decision, b.getAttribute('aria-keyshortcuts'), b.querySelector('kbd')?.textContent]));
  assert.deepEqual(keys, [['once', 'y', 'Y'], ['always', 'a', 'A'], ['reject', 'n', 'N']]);
  await armed(page);
  await shot(page, 'approval-keyboard');

  // In the card's message box the keys are letters.
  await card.$eval('.approval-message', (m) => m.focus());
  await page.keyboard.type('any note');
  assert.equal(await page.inputValue('.approval-message'), 'any note');
  assert.deepEqual(decisions, [], 'typing y, a or n in the message box decides nothing');
  await page.keyboard.press('Shift+Tab'); // out of the box, still on the card
  assert.ok(await onCard(page));

  await page.keyboard.press('y');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  assert.deepEqual(decisions.map((d) => [d.decision, d.message]), [['once', 'any note']]);
  await settled(page);
  assert.equal(readFileSync(join(server.project, 'made.txt'), 'utf8'), 'by keyboard', 'the write ran');
  await page.waitForSelector('.tool-card.is-success');
  assert.equal(await focused(page), 'prompt', 'with no other card waiting, the focus is back in the prompt');
  assert.deepEqual(page.errors, []);
});

test('Alt+A jumps to the waiting card from the prompt; after y the next run\'s card takes the focus, and n rejects it', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Two approvals' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await promptFocused(page);
  await page.keyboard.type('tool: write {"path":"first.txt","content":"1"}');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.approval-card');
  await page.waitForFunction(() => document.activeElement?.closest('.approval-card'));
  await armed(page);

  // Back to the prompt to queue the next prompt: the card keeps waiting, and while the
  // person types it does not take the focus back.
  await page.keyboard.press('/');
  assert.equal(await focused(page), 'prompt');
  await page.keyboard.type('tool: write {"path":"second.txt","content":"2"}');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.queued');
  assert.equal(await focused(page), 'prompt');

  await page.keyboard.press('Alt+A');
  assert.ok(await onCard(page), 'Alt+A reached the waiting card');
  await page.keyboard.press('y');
  await until(() => existsSync(join(server.project, 'first.txt')), 15_000, 'the first write');
  // The queued prompt runs and asks: its card takes the focus from the empty prompt.
  await page.waitForFunction(() => document.activeElement?.closest('.approval-card')?.textContent.includes('second.txt'));
  await armed(page);
  await page.keyboard.press('n');
  await page.waitForSelector('.timing.ended[data-code="approval_rejected"]');
  assert.equal(existsSync(join(server.project, 'second.txt')), false, 'the rejected write did not run');
  await promptFocused(page);
  assert.deepEqual(page.errors, []);
});

test('a ("always") allows the command as offered, and number keys answer a question', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Always and questions' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: bash {"command":"rm x"}');
  await page.waitForSelector('.approval-card');
  await page.waitForFunction(() => document.activeElement?.closest('.approval-card'));
  await armed(page);
  await page.keyboard.press('a');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  await settled(page);
  assert.deepEqual((await api(server.url, 'GET', `/api/sessions/${session.id}`)).state.session.permissions,
    [{ tool: 'bash', pattern: 'rm x', action: 'allow' }], 'always allowed this exact command (the checked option)');
  await page.waitForSelector('.tool-card.is-error'); // it ran: there is no x to remove

  await promptFocused(page);
  await page.keyboard.type('tool: question {"question":"Which colour?","options":[{"label":"red"},{"label":"blue"}]}');
  await page.keyboard.press('Enter');
  const card = await page.waitForSelector('.question-card');
  await page.waitForFunction(() => document.activeElement?.closest('.question-card'));
  const options = await card.$$eval('.question-options button', (bs) => bs.map((b) => [b.getAttribute('aria-keyshortcuts'), b.querySelector('kbd')?.textContent]));
  assert.deepEqual(options, [['1', '1'], ['2', '2']]);
  // A question waits for an answer, not an approval: the call's card and the run's state say so.
  assert.equal(await page.textContent('.tool-card.is-waiting .tool-status'), 'Waiting for your answer');
  assert.equal(await page.textContent('#run-state'), 'Waiting for your answer');
  await armed(page);
  await shot(page, 'question-keyboard');
  await page.keyboard.press('2');
  await page.waitForSelector('.question-card', { state: 'detached' });
  await settled(page);
  const messages = await api(server.url, 'GET', `/api/sessions/${session.id}/messages`);
  assert.equal(messages.messages.filter((m) => m.role === 'toolResult').at(-1).content[0].text, 'The person answered: blue');
  await promptFocused(page);
  assert.deepEqual(page.errors, []);
});

test('a card that comes just as the person starts typing in the empty prompt decides nothing: the letters stay in the prompt', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Typing as it comes' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { clock: true });
  const decisions = [];
  page.on('request', (r) => r.url().includes('/approvals/') && decisions.push(JSON.parse(r.postData())));
  await page.waitForSelector('.conn.is-live');
  await promptFocused(page);
  // Time stands still from here, so the first letter surely comes within the card's
  // first moment; the page paints (animation frames) only as the test lets time pass.
  await page.clock.pauseAt(await page.evaluate(() => Date.now() + 1000));
  // A run started elsewhere (another tab, a script) parks at an approval; this prompt
  // stays empty and focused, and the person is about to type in it.
  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text: 'tool: bash {"command":"echo never"}' });
  await until(async () => {
    await page.clock.runFor(20);
    return page.$('.approval-card');
  }, 15_000, 'the approval card');
  await page.keyboard.type('no thanks');
  assert.equal(await page.inputValue('#prompt'), 'no thanks', 'every letter is in the prompt');
  assert.equal(await focused(page), 'prompt');
  await page.clock.runFor(100);
  assert.deepEqual(decisions, [], 'the n decided nothing');
  assert.equal(await page.locator('.approval-card').count(), 1, 'the approval still waits');
  const { state } = await api(server.url, 'GET', `/api/sessions/${session.id}`);
  assert.equal(state.pendingApprovals.length, 1, 'the server still waits for the decision');

  // Once that prompt is sent (queued behind the run), the card takes the focus again,
  // and after its moment its keys work.
  await page.clock.resume();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.closest('.approval-card'));
  assert.equal(await page.inputValue('#prompt'), '');
  await armed(page);
  await page.keyboard.press('n');
  await page.waitForSelector('.timing.ended[data-code="approval_rejected"]');
  assert.deepEqual(decisions.map((d) => d.decision), ['reject']);
  assert.deepEqual(page.errors, []);
});

test('a plan card that took the focus by itself drops a y pressed at once; after its moment y accepts and the run carries the plan out', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Plan by keyboard' });
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { mode: 'plan' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`, { clock: true });
  const decisions = [];
  page.on('request', (r) => r.url().includes('/approvals/') && decisions.push(JSON.parse(r.postData())));
  await page.waitForSelector('#plan-mode[aria-pressed="true"]');
  await page.focus('#timeline'); // reading the conversation, not typing
  await page.clock.pauseAt(await page.evaluate(() => Date.now() + 1000));
  await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text: 'tool: exit_plan {"plan":"1. Add notes.txt\\n2. Test it"}' });
  const card = await until(async () => {
    await page.clock.runFor(20);
    return page.$('.plan-card');
  }, 15_000, 'the plan card');
  assert.ok(await page.evaluate(() => document.activeElement?.matches('.plan-card')), 'the plan card took the focus');
  assert.equal(await page.textContent('.tool-card.is-waiting .tool-status'), 'Waiting for your review', 'a plan waits for a review');
  assert.equal(await page.textContent('#run-state'), 'Waiting for your review');
  const keys = await card.$$eval('button[aria-keyshortcuts]', (bs) => bs.map((b) => [b.dataset.decision, b.getAttribute('aria-keyshortcuts')]));
  assert.deepEqual(keys, [['once', 'y'], ['reject', 'n']]);
  await shot(page, 'plan-card-held');
  // Pressed as the card came (the person had not read it): nothing happens.
  await page.keyboard.press('y');
  await page.clock.runFor(100);
  assert.deepEqual(decisions, []);
  assert.equal(await page.locator('.plan-card').count(), 1, 'the plan still waits');

  await page.clock.resume();
  await armed(page, '.plan-card');
  await shot(page, 'plan-card-keyboard');
  await page.keyboard.press('y');
  await page.waitForSelector('.plan-card', { state: 'detached' });
  await settled(page);
  assert.deepEqual(decisions.map((d) => d.decision), ['once']);
  await page.waitForSelector('#plan-mode[aria-pressed="false"]');
  assert.equal((await api(server.url, 'GET', `/api/sessions/${session.id}`)).mode, 'agent', 'accepting switched to agent mode');
  assert.equal(await page.locator('.timing.ended[data-code="approval_rejected"]').count(), 0);
  assert.equal(await page.inputValue('#prompt'), '', 'no y was typed anywhere');
  await promptFocused(page);
  assert.deepEqual(page.errors, []);
});
