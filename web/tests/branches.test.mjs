// Browser tests of issue 39's web UI: an edited prompt makes a second version of its turn
// (‹ 2/2 › under it, the first answer one click away), and "Undo to here" previews the
// files it will put back, shows a file changed since with its diff and leaves it alone,
// and Redo brings everything back. The real `spool` binary and headless Chromium, as in
// actions.test.mjs; the files are the server's temp project, read from disk.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, launch, openPage, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** Waits until the page shows `n` answered turns and the run is idle. */
async function answers(page, n) {
  await page.waitForFunction((n) =>
    [...document.querySelectorAll('.timing')].filter((t) => t.textContent.startsWith('Answered')).length === n &&
    document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'), n);
}

const history = async (server, session) => (await api(server.url, 'GET', `/api/sessions/${session.id}/messages?limit=500`)).messages;
const texts = (m) => m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const shown = (page) => page.$$eval('.msg.assistant .text', (els) => els.map((e) => e.textContent));
const prompts = (page) => page.$$eval('.msg.user .bubble', (els) => els.map((e) => e.textContent));

/** Both themes: `name` light, `name-dark` dark. */
async function shots(page, name) {
  await shot(page, name);
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot(page, `${name}-dark`);
  await page.emulateMedia({ colorScheme: 'light' });
}

/** A session whose tools may write without a card: what is tested here is what comes after. */
async function writingSession(server, title) {
  const { session } = await seed(server, { title });
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { permissions: [{ tool: 'write', action: 'allow' }] });
  return session;
}

const write = (path, content) => `tool: write ${JSON.stringify({ path, content })}`;

test('an edit shows 2 of 2 and switching shows the first answer', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Versions' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const sent = [];
  page.on('request', (r) => r.method() === 'POST' && r.url().endsWith('/prompt') && sent.push(JSON.parse(r.postData())));
  await send(page, 'echo: first try');
  await answers(page, 1);
  assert.equal(await page.locator('.versions').count(), 0, 'one version: no switcher');
  await page.click('.msg.user [data-action="edit"]');
  assert.match(await page.textContent('.msg.user .edit-note'), /in place of this message/);
  await page.fill('.msg.user .edit-box', 'echo: second try');
  await page.click('.msg.user .editing button.primary');
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await answers(page, 1);
  assert.deepEqual(await shown(page), ['second try'], 'the edited turn replaced the first one on the page');
  assert.deepEqual(await prompts(page), ['echo: second try']);
  assert.deepEqual(sent.at(-1), { text: 'echo: second try', requestId: sent.at(-1).requestId, at: 0 }, 'the edit was sent in place of message 0');
  const stored = await history(server, session);
  assert.deepEqual(stored.map((m) => [m.role, texts(m)]), [['user', 'echo: second try'], ['assistant', 'second try']], 'the path holds only the edit');
  assert.equal(await page.textContent('.versions .version-at'), '2/2');
  assert.ok(await page.isDisabled('.versions button[aria-label="Next version"]'), 'no version after the last');
  await page.hover('.msg.user');
  await shots(page, 'versions');
  await page.setViewportSize({ width: 390, height: 800 });
  await page.waitForFunction(() => getComputedStyle(document.querySelector('#sidebar')).visibility === 'hidden'); // the drawer slid away
  await shot(page, 'versions-390');
  await page.setViewportSize({ width: 1280, height: 820 });

  // By keyboard: the previous version's button takes the focus and Enter switches.
  await page.focus('.versions button[aria-label="Previous version"]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.msg.user [aria-label="Version 1 of 2"]');
  await page.waitForFunction(() => document.querySelector('.msg.assistant .text')?.textContent === 'first try');
  assert.deepEqual(await shown(page), ['first try']);
  assert.deepEqual(await prompts(page), ['echo: first try']);
  assert.deepEqual((await history(server, session)).map(texts), ['echo: first try', 'first try'], 'the first version is the path again');

  // The next prompt follows the version shown: the model sees only that path.
  await send(page, 'echo: and then');
  await answers(page, 2);
  assert.deepEqual((await history(server, session)).map(texts), ['echo: first try', 'first try', 'echo: and then', 'and then']);
  assert.equal(await page.getAttribute('.msg.user >> nth=0 >> .versions', 'aria-label'), 'Version 1 of 2', 'the switcher stays on the first prompt');
  assert.deepEqual(page.errors, []);
});

test('regenerate makes a second version of the answer', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Regenerate' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: the same words');
  await answers(page, 1);
  await page.hover('.msg.assistant');
  await page.click('.msg.assistant [data-action="regenerate"]');
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await answers(page, 1);
  const stored = await history(server, session);
  assert.deepEqual(stored.map(texts), ['echo: the same words', 'the same words'], 'one turn on the path, answered again');
  await page.click('.versions button[aria-label="Previous version"]');
  await page.waitForSelector('.msg.user [aria-label="Version 1 of 2"]');
  assert.deepEqual(page.errors, []);
});

test('undo to here previews the files and redo restores them', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const notes = join(server.project, 'notes.txt');
  const made = join(server.project, 'made.txt');
  writeFileSync(notes, 'before\n');
  const session = await writingSession(server, 'Undo');
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: hello');
  await answers(page, 1);
  await send(page, write('notes.txt', 'after\n'));
  await answers(page, 2);
  await send(page, write('made.txt', 'new file\n'));
  await answers(page, 3);
  assert.equal(await page.locator('.tool-card.is-success').count(), 2, 'both writes ran');
  assert.equal(readFileSync(notes, 'utf8'), 'after\n');
  assert.ok(existsSync(made));

  // Undo to the first write's prompt: a preview first, nothing changed yet.
  const target = page.locator('.msg.user', { hasText: 'notes.txt' });
  await target.hover();
  await target.locator('[data-action="undo"]').click();
  const dialog = await page.waitForSelector('dialog.undo-dialog[open]');
  const files = await page.$$eval('.undo-dialog .undo-file', (els) => els.map((e) => `${e.dataset.path}:${e.dataset.action}`));
  assert.deepEqual(files.sort(), ['made.txt:delete', 'notes.txt:write']);
  assert.match(await dialog.textContent(), /deleted \(the agent created it\)/);
  assert.equal(readFileSync(notes, 'utf8'), 'after\n', 'the preview changed nothing');
  assert.ok(await page.evaluate(() => document.activeElement?.dataset.action === 'confirm-undo'), 'the focus is on Undo to here');
  await shots(page, 'undo-preview');
  // Esc cancels, and nothing happened.
  await page.keyboard.press('Escape');
  await page.waitForSelector('dialog.undo-dialog', { state: 'detached' });
  assert.equal(await page.locator('.msg.user').count(), 3);
  assert.ok(await target.locator('[data-action="undo"]').evaluate((b) => b === document.activeElement), 'the focus is back on Undo to here');

  // By keyboard all the way: Enter opens the preview again, Enter confirms.
  await page.keyboard.press('Enter');
  await page.waitForSelector('dialog.undo-dialog[open]');
  await page.keyboard.press('Enter');
  await page.waitForSelector('dialog.undo-dialog', { state: 'detached' });
  await page.waitForSelector('.undo-banner [data-action="redo"]');
  assert.equal(readFileSync(notes, 'utf8'), 'before\n', 'notes.txt is as it was before the turn');
  assert.ok(!existsSync(made), 'the file the agent created is gone');
  await page.waitForFunction(() => document.querySelectorAll('.msg.user').length === 1);
  assert.deepEqual(await prompts(page), ['echo: hello']);
  assert.match(await page.textContent('.undo-banner'), /Undone to here · 1 file restored, 1 file deleted/);
  assert.equal(await page.inputValue('#prompt'), write('notes.txt', 'after\n'), 'the undone prompt is back in the box');
  await shots(page, 'undo-banner');

  // A reload still knows the undo can be taken back.
  await page.reload();
  await page.waitForSelector('.undo-banner [data-action="redo"]');
  await page.click('.undo-banner [data-action="redo"]');
  await page.waitForSelector('.undo-banner', { state: 'detached' });
  await page.waitForFunction(() => document.querySelectorAll('.msg.user').length === 3);
  assert.equal(readFileSync(notes, 'utf8'), 'after\n', 'Redo wrote the agent\'s version back');
  assert.equal(readFileSync(made, 'utf8'), 'new file\n');
  assert.deepEqual((await history(server, session)).filter((m) => m.role === 'user').map(texts), ['echo: hello', write('notes.txt', 'after\n'), write('made.txt', 'new file\n')]);
  assert.deepEqual(page.errors, []);
});

test('a conflict is shown with its diff', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const notes = join(server.project, 'notes.txt');
  const other = join(server.project, 'other.txt');
  writeFileSync(notes, 'one\ntwo\n');
  writeFileSync(other, 'old\n');
  const session = await writingSession(server, 'Conflict');
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, write('notes.txt', 'one\nthe agent\n'));
  await answers(page, 1);
  await send(page, write('other.txt', 'new\n'));
  await answers(page, 2);
  // The person changes the file after the agent did.
  writeFileSync(notes, 'one\nmine\n');
  await page.locator('.msg.user').first().hover();
  await page.locator('.msg.user').first().locator('[data-action="undo"]').click();
  const conflict = await page.waitForSelector('.undo-dialog .undo-conflict[data-path="notes.txt"]');
  const rows = await conflict.$$eval('.diff-row', (trs) => trs.map((tr) => `${tr.querySelector('.diff-sign').textContent}${tr.querySelector('.diff-code').textContent}`));
  assert.ok(rows.includes('−mine'), `the diff shows the person's line: ${rows}`);
  assert.ok(rows.includes('+two'), `and what undo would have written: ${rows}`);
  assert.deepEqual(await page.$$eval('.undo-dialog .undo-file', (els) => els.map((e) => e.dataset.path)), ['other.txt'], 'the other file is still restored');
  await shots(page, 'undo-conflict');
  await page.click('.undo-dialog [data-action="confirm-undo"]');
  await page.waitForSelector('.undo-banner');
  assert.equal(readFileSync(notes, 'utf8'), 'one\nmine\n', 'the changed file was left alone');
  assert.equal(readFileSync(other, 'utf8'), 'old\n', 'the other file went back');
  assert.deepEqual(page.errors, []);
});

test('an edit opened while a run goes waits for it, then sends in place', async (t) => {
  const server = await startSpool({ delayMs: 20 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Busy edit' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 150');
  await page.waitForSelector('.msg.assistant.is-draft');
  await page.click('.msg.user [data-action="edit"]');
  await page.fill('.msg.user .edit-box', 'echo: instead');
  const submit = page.locator('.msg.user .editing button.primary');
  assert.ok(await submit.isDisabled(), 'Send waits while the run goes');
  assert.match(await page.textContent('.msg.user .edit-note'), /once it has finished/);
  assert.equal(await page.locator('.msg.user [data-action="undo"]').count(), 0, 'no Undo while a run goes');
  // The run ends under the open box: it stays (with its text and focus) and Send works.
  await page.focus('.msg.user .edit-box');
  await page.waitForFunction(() => !document.querySelector('.msg.user .editing button.primary')?.disabled, null, { timeout: 30_000 });
  assert.equal(await page.inputValue('.msg.user .edit-box'), 'echo: instead');
  assert.ok(await page.evaluate(() => document.activeElement?.classList.contains('edit-box')), 'the box kept the focus');
  assert.match(await page.textContent('.msg.user .edit-note'), /in place of this message/);
  await submit.click();
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await answers(page, 1);
  assert.deepEqual((await history(server, session)).map(texts), ['echo: instead', 'instead']);
  assert.deepEqual(page.errors, []);
});
