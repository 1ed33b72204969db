// Files in prompts from the web composer (issue 42): an image pasted into the box uploads
// at once and shows as a chip with its thumbnail; sending it with a text puts it in the
// prompt's `parts`, the scripted model says it received those very bytes, and the user
// message shows the image, in this tab and in another tab on the same session.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, seed, send, settled, shot, startSpool } from './helpers.mjs';

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
const thumbnailLoaded = (page) =>
  page.waitForFunction(() => {
    const img = document.querySelector('.msg.user .msg-file-image img');
    return img && img.complete && img.naturalWidth === 96 && img.getAttribute('src').startsWith('/api/attachments/');
  });

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
