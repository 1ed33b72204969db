// Files in prompts from the web composer (issue 42): an image pasted into the box uploads
// at once and shows as a chip with its thumbnail; sending it with a text puts it in the
// prompt's `parts`, the scripted model says it received those very bytes, and the user
// message shows the image, in this tab and in another tab on the same session. Files
// dropped on the conversation do the same; a file another client sends (the OpenCode
// SDK's way, a data URL) shows in every open tab as it arrives; a chip's × deletes its
// upload; a model without vision is named on an image's chip before anything is sent.

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

/**
 * Pastes a PNG drawn on a canvas into the prompt, as a clipboard paste of a file does;
 * its name, size and SHA-256 (hex).
 */
function pasteImage(page) {
  return page.evaluate(async () => {
    const canvas = document.createElement('canvas');
    canvas.width = 96;
    canvas.height = 64;
    const g = canvas.getContext('2d');
    g.fillStyle = '#4f46e5';
    g.fillRect(0, 0, 96, 64);
    g.fillStyle = '#fbbf24';
    g.fillRect(24, 16, 48, 32);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
    const file = new File([blob], 'shot.png', { type: 'image/png' });
    const digest = await crypto.subtle.digest('SHA-256', await blob.arrayBuffer());
    const sha256 = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
    const data = new DataTransfer();
    data.items.add(file);
    const paste = new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true });
    document.querySelector('#prompt').dispatchEvent(paste);
    return { name: file.name, size: file.size, sha256 };
  });
}

/** True once the user message's thumbnail has loaded its image from the server. */
const thumbnailLoaded = (page, width = 96) =>
  page.waitForFunction((width) => {
    const img = document.querySelector('.msg.user .msg-file-image img');
    return img && img.complete && img.naturalWidth === width && img.getAttribute('src').startsWith('/api/attachments/');
  }, width);

/** The scripted model's line for a file it received whole. */
const received = (f, type) => `Received ${f.name} (${type}, ${f.size} bytes, sha256 ${f.sha256.slice(0, 8)}…, bytes match)`;

test('a pasted image uploads, reaches the scripted model and shows as a thumbnail in every tab', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const url = `${server.url}/#/s/${session.id}`;
  const page = await openPage(browser, url);
  const other = await openPage(browser, url);
  await page.waitForSelector('.conn.is-live');

  const file = await pasteImage(page);
  // The chip: a thumbnail of the local file, the name and the size, once uploaded.
  await page.waitForSelector('.attachment-chip[data-status="ready"]');
  await page.waitForFunction(() => document.querySelector('.attachment-chip img.attachment-thumb')?.naturalWidth === 96);
  const chip = await page.evaluate(() => {
    const el = document.querySelector('.attachment-chip');
    return {
      thumb: el.querySelector('img.attachment-thumb')?.getAttribute('src') ?? '',
      name: el.querySelector('.attachment-name').textContent,
      remove: el.querySelector('button.attachment-remove').getAttribute('aria-label'),
    };
  });
  assert.match(chip.thumb, /^blob:/);
  assert.equal(chip.name, 'shot.png');
  assert.equal(chip.remove, 'Remove shot.png');
  await shot(page, 'attachments-chip');

  await send(page, 'describe');
  await settled(page);
  const answer = await page.evaluate(() => document.querySelector('.msg.assistant .text')?.textContent ?? '');
  assert.ok(
    answer.includes(`Received shot.png (image/png, ${file.size} bytes, sha256 ${file.sha256.slice(0, 8)}…, bytes match)`),
    `the model's answer names the file and its hash: ${answer}`,
  );
  // Sent: the chip is gone, and the message shows the image and the text.
  assert.equal(await page.locator('.attachment-chip').count(), 0);
  assert.equal(await page.locator('.msg.user .bubble').first().textContent(), 'describe');
  await thumbnailLoaded(page);
  await thumbnailLoaded(other);
  await shot(page, 'attachments-sent');
  await shot(other, 'attachments-other-tab');
  assert.deepEqual([...page.errors, ...other.errors], []);
});

test('an upload the server refuses shows its reason on the chip, and the chip comes off', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.setInputFiles('#file-picker', { name: 'tool.exe', mimeType: 'application/octet-stream', buffer: Buffer.from([0x4d, 0x5a, 0x90, 0x00, 0xff, 0xfe]) });
  await page.waitForSelector('.attachment-chip[data-status="failed"] [role="alert"]');
  assert.ok((await page.locator('.attachment-chip [role="alert"]').textContent()).length > 0);
  assert.equal(await page.locator('.attachment-chip img').count(), 0);
  await page.click('button[aria-label="Remove tool.exe"]');
  await page.waitForSelector('#attachments', { state: 'hidden' });
  assert.deepEqual(page.errors, []);
});

/**
 * Drags a text file and a PNG over the conversation and drops them there, as a person
 * dropping two files from their file manager does: dragenter, dragover, then drop, each
 * with the same DataTransfer. Stops after the dragover when `drop` is false. The files'
 * names, sizes and SHA-256s.
 */
function dropFiles(page, { drop = true } = {}) {
  return page.evaluate(async (drop) => {
    const canvas = document.createElement('canvas');
    canvas.width = 40;
    canvas.height = 30;
    canvas.getContext('2d').fillRect(5, 5, 20, 10);
    const png = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
    const files = [
      new File(['line one\nline two\n'], 'notes.txt', { type: 'text/plain' }),
      new File([png], 'dot.png', { type: 'image/png' }),
    ];
    const data = new DataTransfer();
    for (const f of files) data.items.add(f);
    window.dragged = data; // for a dragleave of the same drag
    const target = document.querySelector('#timeline .rows');
    for (const type of ['dragenter', 'dragover']) {
      target.dispatchEvent(new DragEvent(type, { dataTransfer: data, bubbles: true, cancelable: true }));
    }
    if (drop) target.dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
    const hex = async (f) => [...new Uint8Array(await crypto.subtle.digest('SHA-256', await f.arrayBuffer()))]
      .map((b) => b.toString(16).padStart(2, '0')).join('');
    return Promise.all(files.map(async (f) => ({ name: f.name, size: f.size, sha256: await hex(f) })));
  }, drop);
}

test('files dropped on the conversation become chips, and the model gets both', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');

  // While dragged over, the composer shows where they go; leaving takes that away.
  await dropFiles(page, { drop: false });
  assert.ok(await page.locator('#composer.is-dropping').isVisible(), 'the composer shows the drop target');
  await shot(page, 'attachments-dragging');
  await page.evaluate(() => document.querySelector('#timeline .rows').dispatchEvent(
    new DragEvent('dragleave', { dataTransfer: window.dragged, bubbles: true, cancelable: true })));
  await page.waitForSelector('#composer:not(.is-dropping)');

  const [text, image] = await dropFiles(page);
  await page.waitForFunction(() => document.querySelectorAll('.attachment-chip[data-status="ready"]').length === 2);
  assert.equal(await page.locator('#composer.is-dropping').count(), 0, 'the drop highlight is gone');
  assert.deepEqual(await page.locator('.attachment-chip .attachment-name').allTextContents(), ['notes.txt', 'dot.png']);
  assert.equal(await page.locator('.attachment-chip img.attachment-thumb').count(), 1, 'the image alone has a thumbnail');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'prompt', 'the prompt has the focus, to say what they are for');

  await send(page, 'compare');
  await settled(page);
  const answer = await page.evaluate(() => document.querySelector('.msg.assistant .text')?.textContent ?? '');
  assert.ok(answer.includes(received(text, 'text/plain')), `the model got the text file: ${answer}`);
  assert.ok(answer.includes(received(image, 'image/png')), `the model got the image: ${answer}`);
  assert.equal(await page.locator('.attachment-chip').count(), 0);
  assert.deepEqual(await page.locator('.msg.user .msg-file .attachment-name').allTextContents(), ['notes.txt']);
  await thumbnailLoaded(page, 40);
  assert.deepEqual(page.errors, []);
});

test('an image another client sends shows as a thumbnail in every open tab, live and after a reload', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const url = `${server.url}/#/s/${session.id}`;
  const page = await openPage(browser, url);
  const other = await openPage(browser, url);
  await page.waitForSelector('.conn.is-live');
  await other.waitForSelector('.conn.is-live');

  // A PNG as an SDK client sends it: OpenCode's file part, a data URL, from outside the
  // browser (this process), on the OpenCode-compatible route.
  const dataUrl = await page.evaluate(() => {
    const canvas = document.createElement('canvas');
    canvas.width = 72;
    canvas.height = 48;
    canvas.getContext('2d').fillRect(8, 8, 56, 32);
    return canvas.toDataURL('image/png');
  });
  const res = await fetch(`${server.url}/session/${session.id}/prompt_async`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      parts: [
        { type: 'file', mime: 'image/png', filename: 'from-sdk.png', url: dataUrl },
        { type: 'text', text: 'echo: seen' },
      ],
    }),
  });
  assert.equal(res.status, 204, await res.text());

  // Both tabs show it as it arrives: no reload, no action of theirs.
  for (const tab of [page, other]) {
    await settled(tab);
    await thumbnailLoaded(tab, 72);
    assert.equal(await tab.locator('.msg.user .msg-file-image img').getAttribute('alt'), 'from-sdk.png');
    assert.match(await tab.locator('.msg.assistant .text').first().textContent(), /Received from-sdk\.png \(image\/png, \d+ bytes, sha256 [0-9a-f]{8}…, bytes match\)/);
  }
  await shot(other, 'attachments-from-another-client');
  // And from the stored history, after a reload.
  await other.reload();
  await other.waitForSelector('.conn.is-live');
  await thumbnailLoaded(other, 72);
  assert.deepEqual([...page.errors, ...other.errors], []);
});

test("a chip's × deletes its upload from the server and gives the focus back", async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  const uploaded = page.waitForResponse((r) => r.url().includes('/api/uploads') && r.request().method() === 'POST');
  await page.setInputFiles('#file-picker', [
    { name: 'first.txt', mimeType: 'text/plain', buffer: Buffer.from('one\n') },
    { name: 'second.txt', mimeType: 'text/plain', buffer: Buffer.from('two\n') },
  ]);
  const first = await (await uploaded).json();
  await page.waitForFunction(() => document.querySelectorAll('.attachment-chip[data-status="ready"]').length === 2);
  assert.equal((await fetch(server.url + first.url)).status, 200, 'stored while its chip is there');

  const deleted = page.waitForResponse((r) => r.request().method() === 'DELETE');
  await page.click(`button[aria-label="Remove ${first.name}"]`);
  const answer = await deleted;
  assert.equal(new URL(answer.url()).pathname, `/api/uploads/${first.id}`);
  assert.equal(answer.status(), 204);
  assert.equal((await fetch(server.url + first.url)).status, 404, 'the removed upload is gone from the server');
  // The focus moves to the chip that is left, then to the prompt once none is.
  const other = first.name === 'first.txt' ? 'second.txt' : 'first.txt';
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), `Remove ${other}`);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#attachments', { state: 'hidden' });
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'prompt');
  assert.deepEqual(page.errors, []);
});

test('an image for a model without vision says so on its chip, and sending shows the refusal', async (t) => {
  const server = await startSpool({ extra: ['--model', 'scripted:text-only'] });
  t.after(() => server.stop());
  const models = await api(server.url, 'GET', '/api/models');
  assert.equal(models.models.find((m) => m.name === 'scripted:text-only')?.inputs?.images, false, JSON.stringify(models));
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');

  await pasteImage(page);
  const warning = page.locator('.attachment-chip.is-unreadable [role="status"]');
  await warning.waitFor();
  assert.equal(await warning.textContent(), 'scripted:text-only does not read images: pick a model that does, or remove it');
  await shot(page, 'attachments-unreadable');

  await send(page, 'look');
  await page.waitForSelector('#hint.is-error');
  assert.match(await page.textContent('#hint'), /does not read images/);
  assert.equal(await page.locator('.attachment-chip').count(), 1, 'the chip stays, to remove or to send with another model');
  assert.equal(await page.inputValue('#prompt'), 'look', 'the text stays too');
  assert.equal(await page.locator('.msg.user').count(), 0, 'nothing was sent');
  await shot(page, 'attachments-unreadable-refused');

  // Another model that reads images: the warning goes, and the same prompt goes through.
  assert.ok(models.models.some((m) => m.name === 'scripted' && m.inputs.images), JSON.stringify(models));
  await page.selectOption('#model', 'scripted');
  await page.waitForSelector('.attachment-chip[data-status="ready"]:not(.is-unreadable)');
  assert.equal(await page.locator('.attachment-chip [role="status"]').count(), 0);
  await page.waitForSelector('#hint:not(.is-error)');
  await page.press('#prompt', 'Enter');
  await settled(page);
  assert.match(await page.locator('.msg.assistant .text').first().textContent(), /Received shot\.png \(image\/png/);
  assert.deepEqual(page.errors, []);
});

test('a prompt with a file sent while a run goes waits in the queue with its file, then the model gets it', async (t) => {
  const server = await startSpool({ delayMs: 2 });
  t.after(() => server.stop());
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'stream: 100000');
  await page.waitForSelector('.msg.assistant.is-draft');

  await page.setInputFiles('#file-picker', { name: 'later.log', mimeType: 'text/plain', buffer: Buffer.from('for later\n') });
  await page.waitForSelector('.attachment-chip[data-status="ready"]');
  await page.fill('#prompt', 'echo: queued');
  await page.press('#prompt', 'Enter');
  // Queued, not refused: the chip goes, and the queue's row shows the file by its text.
  const row = page.locator('.queue .queued');
  await row.waitFor();
  assert.deepEqual(await row.locator('.msg-file .attachment-name').allTextContents(), ['later.log']);
  assert.equal(await row.locator('.queued-text').textContent(), 'echo: queued');
  assert.equal(await page.locator('.attachment-chip').count(), 0);
  assert.equal(await page.locator('#hint.is-error').count(), 0, await page.textContent('#hint'));
  await shot(page, 'attachments-queued');

  // Stop pauses the queue; Resume runs the queued prompt, with its file.
  await page.click('#send[data-mode="stop"]');
  await page.click('.queue .queue-resume');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant:not(.is-draft) .text')]
    .some((el) => el.textContent.includes('Received later.log')));
  const answer = await page.evaluate(() => [...document.querySelectorAll('.msg.assistant .text')].at(-1).textContent);
  assert.match(answer, /^Received later\.log \(text\/plain, 10 bytes, sha256 [0-9a-f]{8}…, bytes match\)/);
  assert.deepEqual(await page.locator('.msg.user').last().locator('.msg-file .attachment-name').allTextContents(), ['later.log']);
  assert.deepEqual(page.errors, []);
});

test('sending waits for an upload on its way and says so; text pasted with a picture of itself stays text', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server);
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');

  // A spreadsheet's copied cells: their text, and an image of them. The text is what was meant.
  await page.evaluate(() => {
    const data = new DataTransfer();
    data.setData('text/plain', 'a\tb\n1\t2');
    data.items.add(new File([new Uint8Array([0x89, 0x50, 0x4e, 0x47])], 'image.png', { type: 'image/png' }));
    document.querySelector('#prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
  });
  assert.equal(await page.locator('.attachment-chip').count(), 0, 'no chip for a text paste');

  // An upload held on its way: Enter sends nothing yet, and the hint says why.
  let release;
  const held = new Promise((resolve) => (release = resolve));
  await page.route('**/api/uploads?*', async (route) => {
    await held;
    await route.continue();
  });
  await page.setInputFiles('#file-picker', { name: 'slow.txt', mimeType: 'text/plain', buffer: Buffer.from('slow\n') });
  await page.waitForSelector('.attachment-chip[data-status="uploading"]');
  await page.fill('#prompt', 'echo: done');
  await page.press('#prompt', 'Enter');
  assert.equal(await page.textContent('#hint'), 'Uploading your files: you can send once they are up.');
  assert.equal(await page.inputValue('#prompt'), 'echo: done', 'nothing was sent');
  assert.ok(await page.locator('#send').isDisabled());
  release();
  await page.waitForSelector('.attachment-chip[data-status="ready"]');
  await page.press('#prompt', 'Enter');
  await settled(page);
  assert.match(await page.locator('.msg.assistant .text').first().textContent(), /^Received slow\.txt/);
  assert.equal(await page.locator('.msg.user').count(), 1);
  assert.deepEqual(page.errors, []);
});
