// Browser tests of "see what a tool will change" (issue 17, point 2): the real `spool`
// binary with its scripted model, headless Debian Chromium. An edit's approval card
// shows the removed and added lines with the file's line numbers; the finished card
// shows the same diff; a person edits a write's content before approving and the file
// on disk holds what they wrote; invalid edits are refused; a huge change is cut with a
// note. Screenshots of the approval card, desktop and 390 px.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { launch, openPage, seed, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const TEN = Array.from({ length: 10 }, (_, i) => `line ${i + 1}\n`).join('');

async function send(page, text) {
  await page.waitForSelector('.conn.is-live');
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

/** Puts `text` into the field at `selector` as a paste does: one input event. */
const paste = (page, selector, text) =>
  page.$eval(selector, (field, value) => {
    field.focus();
    field.value = value;
    field.dispatchEvent(new InputEvent('input', { bubbles: true, inputType: 'insertFromPaste' }));
  }, text);

/** The diff rows under `root` as a person reads them: old number, new number, sign, text. */
const rows = (page, root) =>
  page.$$eval(`${root} .diff-table tr`, (trs) =>
    trs.map((tr) => (tr.classList.contains('diff-skip') ? tr.textContent : [...tr.children].map((td) => td.textContent).join('|'))));

test('the approval card shows the diff', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  writeFileSync(join(server.project, 'notes.txt'), TEN);
  const { session } = await seed(server, { title: 'Diffs' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: edit {"path":"notes.txt","oldString":"line 6\\n","newString":"line six\\nline 6.5\\n"}');
  await page.waitForSelector('.approval-card .diff-table');
  assert.deepEqual(await rows(page, '.approval-card'), [
    '⋯ 2 unchanged lines',
    '3|3| |line 3',
    '4|4| |line 4',
    '5|5| |line 5',
    '6||−|line 6',
    '|6|+|line six',
    '|7|+|line 6.5',
    '7|8| |line 7',
    '8|9| |line 8',
    '9|10| |line 9',
  ]);
  assert.equal(await page.textContent('.approval-card .diff-stats'), '+2 −1');
  await shot(page, 'approval-diff');
  await page.setViewportSize({ width: 390, height: 820 });
  const fits = await page.$eval('.approval-card', (card) => card.scrollWidth <= card.clientWidth + 1);
  assert.ok(fits, 'the diff fits a phone-width card');
  await shot(page, 'approval-diff-390');
  assert.deepEqual(page.errors, []);
});

test('a finished edit card shows its diff', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  writeFileSync(join(server.project, 'notes.txt'), TEN);
  const { session } = await seed(server, { title: 'Finished diff' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: edit {"path":"notes.txt","oldString":"line 6\\n","newString":"line six\\n"}');
  await page.click('.approval-card button[data-decision="once"]');
  await page.waitForSelector('.tool-card.is-success .tool-diff .diff-table');
  assert.equal(readFileSync(join(server.project, 'notes.txt'), 'utf8'), TEN.replace('line 6\n', 'line six\n'));
  const live = await rows(page, '.tool-card.is-success .tool-diff');
  assert.ok(live.includes('6||−|line 6') && live.includes('|6|+|line six'), live.join('\n'));
  // After a reload the card shows the diff the server kept with the result, the same.
  await page.reload();
  await page.waitForSelector('.tool-card.is-success .tool-diff .diff-table');
  const reloaded = await rows(page, '.tool-card.is-success .tool-diff');
  assert.deepEqual(reloaded, live);
  await shot(page, 'tool-card-diff');
  assert.deepEqual(page.errors, []);
});

test('edited arguments are what the tool wrote', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  writeFileSync(join(server.project, 'notes.txt'), 'keep\nold\n');
  const { session } = await seed(server, { title: 'Edit before approving' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const decisions = [];
  page.on('request', (r) => r.url().includes('/approvals/') && decisions.push(JSON.parse(r.postData())));
  await send(page, 'tool: write {"path":"notes.txt","content":"keep\\nfrom the model\\n"}');
  await page.waitForSelector('.approval-card .diff-table');
  assert.deepEqual(await rows(page, '.approval-card'), ['1|1| |keep', '2||−|old', '|2|+|from the model']);
  await page.click('.approval-card .approval-edit-open');
  assert.ok(await page.isHidden('.approval-card button[data-decision="once"]'), 'Approve once (the model\'s content) is out of reach while editing');
  await page.fill('.approval-card textarea[data-field="content"]', 'keep\nwritten by a person\nand a third line\n');
  // The diff follows the edit, still against the file on disk.
  await page.waitForFunction(() => document.querySelector('.approval-card .diff-table')?.textContent.includes('written by a person'));
  assert.deepEqual(await rows(page, '.approval-card'), ['1|1| |keep', '2||−|old', '|2|+|written by a person', '|3|+|and a third line']);
  await shot(page, 'approval-edit');
  await page.click('.approval-card button:has-text("Approve with changes")');
  await page.waitForSelector('.approval-card', { state: 'detached' });
  await page.waitForSelector('.tool-card.is-success');
  assert.equal(readFileSync(join(server.project, 'notes.txt'), 'utf8'), 'keep\nwritten by a person\nand a third line\n');
  assert.deepEqual(decisions.map((d) => d.decision), [{ fill: { path: 'notes.txt', content: 'keep\nwritten by a person\nand a third line\n' } }]);
  // The finished card shows what was written, against the file as it was.
  await page.waitForSelector('.tool-card.is-success .tool-diff .diff-table');
  assert.ok((await rows(page, '.tool-card.is-success .tool-diff')).includes('|2|+|written by a person'));
  assert.deepEqual(page.errors, []);
});

test('invalid edited arguments are refused before anything is sent', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Bad edit' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: bash {"command":"echo hi"}');
  await page.click('.approval-card .approval-edit-open');
  await page.fill('.approval-card textarea[data-field="command"]', '   ');
  // The card checks the edit on its next animation frame (one redraw per frame, however
  // many input events), so the test waits for that frame instead of reading at once.
  await page.waitForFunction(() => document.querySelector('.approval-card .approval-edit-error')?.textContent !== '');
  assert.equal(await page.textContent('.approval-card .approval-edit-error'), 'The command cannot be empty.');
  assert.ok(await page.isDisabled('.approval-card button:has-text("Approve with changes")'));
  await page.fill('.approval-card textarea[data-field="command"]', 'echo edited > out.txt');
  await page.waitForSelector('.approval-card button:has-text("Approve with changes"):enabled');
  await page.click('.approval-card button:has-text("Approve with changes")');
  await page.waitForSelector('.tool-card.is-success');
  assert.equal(readFileSync(join(server.project, 'out.txt'), 'utf8'), 'edited\n');
  assert.deepEqual(page.errors, []);
});

test('a huge change is cut with a note saying how much is left out', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Huge write' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const content = Array.from({ length: 1000 }, (_, i) => `row ${i + 1}`).join('\n') + '\n';
  await send(page, `tool: write ${JSON.stringify({ path: 'big.txt', content })}`);
  // The server cut its preview (400 lines of diff): the card says so.
  await page.waitForSelector('.approval-card .diff-table');
  assert.match(await page.textContent('.approval-card .diff-more'), /^… 601 more lines of the diff not shown/);
  assert.equal(await page.$$eval('.approval-card .diff-table tr', (trs) => trs.length), 399);
  // Edited, the page's own diff (against no file yet) draws at most 400 rows.
  await page.click('.approval-card .approval-edit-open');
  // Pasted, as a person would put 1,000 lines there: one input event. (Playwright's
  // fill types a multi-line text line by line in this Chromium, two input events a
  // line, which took over 30 s here.)
  await paste(page, '.approval-card textarea[data-field="content"]', `${content}row 1001\n`);
  await page.waitForFunction(() => document.querySelector('.approval-card .diff-more')?.textContent === '601 more lines not shown');
  assert.equal(await page.$$eval('.approval-card .diff-table tr', (trs) => trs.length), 400);
  assert.equal(await page.textContent('.approval-card .diff-stats'), '+1001 −0');
  await page.click('.approval-card button:has-text("Approve with changes")');
  await page.waitForSelector('.tool-card.is-success');
  assert.equal(readFileSync(join(server.project, 'big.txt'), 'utf8'), `${content}row 1001\n`);
  assert.deepEqual(page.errors, []);
});

test('a card approved with changes shows the edited change, also after a reload', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  writeFileSync(join(server.project, 'notes.txt'), 'a\nb\n');
  const { session } = await seed(server, { title: 'Edited edit' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: edit {"path":"notes.txt","oldString":"b","newString":"model"}');
  await page.click('.approval-card .approval-edit-open');
  await page.fill('.approval-card textarea[data-field="newString"]', 'person');
  // The edit's strings, numbered from where "b" is in the file (line 2); a snippet has
  // no end-of-file newline mark.
  await page.waitForFunction(() => document.querySelector('.approval-card .diff-table')?.textContent.includes('person'));
  assert.deepEqual(await rows(page, '.approval-card'), ['2||−|b', '|2|+|person']);
  await page.click('.approval-card button:has-text("Approve with changes")');
  await page.waitForSelector('.tool-card.is-success .tool-diff');
  assert.equal(readFileSync(join(server.project, 'notes.txt'), 'utf8'), 'a\nperson\n');
  // The finished card shows what the edit did to the file, numbered as in the file.
  const done = ['1|1| |a', '2||−|b', '|2|+|person'];
  assert.deepEqual(await rows(page, '.tool-card.is-success .tool-diff'), done);
  await page.reload();
  await page.waitForSelector('.tool-card.is-success .tool-diff');
  assert.deepEqual(await rows(page, '.tool-card.is-success .tool-diff'), done, 'the stored result keeps the diff of the edited call');
  assert.deepEqual(page.errors, []);
});

test('after a reload, the finished write card still shows the diff', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  writeFileSync(join(server.project, 'notes.txt'), TEN);
  const { session } = await seed(server, { title: 'Overwrite' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, `tool: write ${JSON.stringify({ path: 'notes.txt', content: TEN.replace('line 5\n', 'line five\n') })}`);
  await page.click('.approval-card button[data-decision="once"]');
  await page.waitForSelector('.tool-card.is-success .tool-diff .diff-table');
  const want = ['⋯ 1 unchanged line', '2|2| |line 2', '3|3| |line 3', '4|4| |line 4', '5||−|line 5', '|5|+|line five', '6|6| |line 6', '7|7| |line 7', '8|8| |line 8'];
  assert.deepEqual(await rows(page, '.tool-card.is-success .tool-diff'), want);
  // A fresh tab never saw the approval's preview and the file holds only the new text:
  // what the card shows comes from the result the server stored.
  await page.reload();
  await page.waitForSelector('.tool-card.is-success .tool-diff .diff-table');
  assert.deepEqual(await rows(page, '.tool-card.is-success .tool-diff'), want);
  assert.equal(await page.textContent('.tool-card.is-success .diff-stats'), '+1 −1');
  assert.deepEqual(page.errors, []);
});
