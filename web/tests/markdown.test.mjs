// Browser tests of Markdown answers (issue 17, point 1): the real `spool` binary and
// headless Debian Chromium. The scripted model's `echo:` answers with exactly the text
// after it (line breaks included), so each test has the model answer given Markdown.
//
//   1. headings, lists, links, tables, quotes, italics and task lists render as elements
//   2. a hostile answer (img onerror, javascript: links, script, raw HTML) does nothing
//      and shows its raw HTML as text
//   3. a code block is highlighted; its copy button copies the code, and the answer's
//      copy button copies the Markdown source (the real clipboard)
//   4. a streaming answer renders its finished blocks while it streams (the open block
//      rendered by the page: streaming_markdown.test.mjs), with a few batched requests
//      rather than one per delta
//   5. an answer over the server's 256 KiB shows whole, as plain text in chunks
//   6. (no browser) the block splitter: blank lines outside fences, resumed per delta
//   7. a table's column alignment shows (classes from the server, no inline styles)
//   8. a loose list (items apart by blank lines) is one list at every step of its stream

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, seed, send, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** The last answer once it is committed and its Markdown HTML is on the page. */
async function renderedAnswer(page) {
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'));
  return page.waitForSelector('.msg.assistant:last-of-type .text > .md:only-child:not(.is-local)');
}

const RICH = [
  '# Release notes',
  '',
  'Some *italic* words, **bold** ones, ~~struck~~ and `inline code`.',
  '',
  '## Steps',
  '',
  '1. first step',
  '2. second step',
  '',
  '- apples',
  '- pears',
  '',
  '> quoted wisdom',
  '',
  '| name | value |',
  '|------|-------|',
  '| a    | 1     |',
  '| b    | 2     |',
  '',
  '- [x] done thing',
  '- [ ] open thing',
  '',
  'See [the docs](https://example.org/docs) or [a section](#steps).',
].join('\n');

test('an answer in Markdown renders headings, lists, links, tables, quotes and italics as elements', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Markdown' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, `echo: ${RICH}`);
  const md = await renderedAnswer(page);
  const seen = await md.evaluate((el) => {
    const text = (sel) => [...el.querySelectorAll(sel)].map((n) => n.textContent.trim());
    const link = el.querySelector('a[href^="https:"]');
    return {
      h1: text('h1'), h2: text('h2'), em: text('em'), strong: text('strong'), del: text('del'), code: text('p code'),
      ol: text('ol > li'), ul: text('ul > li'), quote: text('blockquote'), th: text('th'), td: text('td'),
      checked: [...el.querySelectorAll('input[type=checkbox]')].map((c) => c.checked && c.disabled),
      link: link && { text: link.textContent, href: link.getAttribute('href'), target: link.target, rel: link.rel },
      local: el.querySelector('a[href="#steps"]')?.textContent,
      raw: el.textContent.includes('**') || el.textContent.includes('| name'),
    };
  });
  assert.deepEqual(seen.h1, ['Release notes']);
  assert.deepEqual(seen.h2, ['Steps']);
  assert.deepEqual(seen.em, ['italic']);
  assert.deepEqual(seen.strong, ['bold']);
  assert.deepEqual(seen.del, ['struck']);
  assert.deepEqual(seen.code, ['inline code']);
  assert.deepEqual(seen.ol, ['first step', 'second step']);
  assert.deepEqual(seen.ul.slice(0, 2), ['apples', 'pears']);
  assert.deepEqual(seen.quote, ['quoted wisdom']);
  assert.deepEqual(seen.th, ['name', 'value']);
  assert.deepEqual(seen.td, ['a', '1', 'b', '2']);
  assert.deepEqual(seen.checked, [true, false]);
  assert.deepEqual(seen.link, { text: 'the docs', href: 'https://example.org/docs', target: '_blank', rel: 'noopener noreferrer nofollow' });
  assert.equal(seen.local, 'a section');
  assert.equal(seen.raw, false, 'no Markdown syntax left as text');
  await shot(page, 'markdown-answer');
  await page.setViewportSize({ width: 390, height: 820 });
  await shot(page, 'markdown-answer-390');
  assert.deepEqual(page.errors, []);
});

test('a hostile answer runs nothing: img onerror, javascript: links and raw HTML show as text', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Hostile' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const hostile = [
    'Look: <img src=x onerror="window.pwned=1"> here.',
    '',
    '[click me](javascript:window.pwned=1) and [me too](JAVASCRIPT:window.pwned=2)',
    '',
    '<a href="javascript:window.pwned=3">raw link</a> <b onmouseover="window.pwned=4">bold?</b>',
    '',
    '<script>window.pwned=5</script>',
    '',
    '![pic](javascript:window.pwned=6)',
  ].join('\n');
  await send(page, `echo: ${hostile}`);
  const md = await renderedAnswer(page);
  // Whatever looks clickable is clicked, and hovered.
  for (const handle of await page.$$('.msg.assistant .md a, .msg.assistant .md b, .msg.assistant .md img')) {
    await handle.hover();
    await handle.click({ modifiers: [] }).catch(() => {});
  }
  for (const label of ['click me', 'me too', 'raw link', 'bold?', 'pic']) {
    await page.getByText(label, { exact: false }).first().click();
  }
  const seen = await md.evaluate((el) => ({
    pwned: window.pwned,
    elements: [...el.querySelectorAll('img, script, b, a, iframe, [onerror], [onmouseover]')].map((n) => n.outerHTML),
    text: el.textContent,
  }));
  assert.equal(seen.pwned, undefined);
  assert.deepEqual(seen.elements, [], 'no active element made it to the page');
  for (const raw of ['<img src=x onerror="window.pwned=1">', '<a href="javascript:window.pwned=3">raw link</a>', '<script>window.pwned=5</script>']) {
    assert.ok(seen.text.includes(raw), `${raw} is shown as text in: ${seen.text}`);
  }
  assert.ok(seen.text.includes('click me') && seen.text.includes('pic'), 'refused links keep their text');
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.deepEqual(page.errors, []);
});

test('a code block is highlighted, and the copy buttons copy the code and the whole answer', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Code' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  const code = 'fn main() {\n    // greet\n    println!("hi <there>");\n}';
  const answer = `Here is the program:\n\n\`\`\`rust\n${code}\n\`\`\`\n\nRun it with **cargo run**.`;
  await send(page, `echo: ${answer}`);
  const md = await renderedAnswer(page);
  const classes = await md.evaluate((el) => [...el.querySelectorAll('pre.code[data-lang=rust] span')].map((s) => s.className).join(' '));
  assert.match(classes, /\bhl-storage\b/, 'fn is a keyword (storage.type.function)');
  assert.match(classes, /\bhl-comment\b/, 'the comment is one');
  assert.match(classes, /\bhl-string\b/, 'the string is one');
  const colour = await md.evaluate((el) => {
    const keyword = [...el.querySelectorAll('span')].find((s) => s.textContent === 'fn');
    return [getComputedStyle(keyword).color, getComputedStyle(el.querySelector('pre.code')).color];
  });
  assert.notEqual(colour[0], colour[1], 'the theme colours keywords');

  await page.click('.msg.assistant .code-wrap .copy-btn');
  await page.waitForSelector('.msg.assistant .code-wrap .copy-btn.is-copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), code);

  await page.click('.msg.assistant .msg-actions .copy-btn');
  await page.waitForSelector('.msg.assistant .msg-actions .copy-btn.is-copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), answer);
  await shot(page, 'markdown-code');
  assert.deepEqual(page.errors, []);
});

test('a streaming answer renders its finished blocks as it streams, in a few batched requests', async (t) => {
  const server = await startSpool({ delayMs: 4 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Streaming Markdown' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const requests = [];
  page.on('request', (r) => r.url().endsWith('/api/markdown') && requests.push(JSON.parse(r.postData()).texts));
  const paragraph = (n) => Array.from({ length: 60 }, (_, i) => `word${n}_${i}`).join(' ');
  const blocks = Array.from({ length: 12 }, (_, n) => `## Part ${n}\n\n${paragraph(n)}`);
  const answer = blocks.join('\n\n');
  await send(page, `echo: ${answer}`);
  // While the answer streams, a finished block is already the server's heading, and the
  // block still being written is the page's rendering.
  await page.waitForSelector('.msg.assistant.is-draft .md:not(.is-local) h2');
  const during = await page.evaluate(() => {
    const draft = document.querySelector('.msg.assistant.is-draft .text');
    return draft && { headings: draft.querySelectorAll('.md:not(.is-local) h2').length, open: draft.lastElementChild.matches('.md.is-local') };
  });
  assert.ok(during, 'still streaming');
  assert.ok(during.headings >= 1);
  assert.equal(during.open, true, 'the page renders the open block');
  const md = await renderedAnswer(page);
  assert.equal(await md.evaluate((el) => el.querySelectorAll('h2').length), 12);
  assert.equal(await md.evaluate((el) => el.textContent.includes('##')), false);
  // ≈ 1,500 deltas; the blocks went in batches, each text asked for once.
  const texts = requests.flat();
  assert.ok(requests.length <= 26, `${requests.length} requests`);
  assert.equal(new Set(texts).size, texts.length, 'no text asked for twice');
  assert.ok(texts.includes(answer), 'the committed answer is rendered whole');
  assert.ok(texts.every((t) => t === answer || answer.includes(t.trimEnd())), 'the others are blocks of it');
  assert.deepEqual(page.errors, []);
});

test('an answer too long for the server shows whole as plain text, in chunks', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Long' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  // ≈ 290 KB of words on one line: over the 256 KiB a text may have, and cut at spaces.
  await send(page, 'stream: 40000');
  // Idle and draft-less is also the page before the run starts: wait for the answer first.
  await page.waitForSelector('.msg.assistant');
  await page.waitForFunction(() => document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'));
  const seen = await page.evaluate(() => {
    const text = [...document.querySelectorAll('.msg.assistant .text')].at(-1);
    return { text: text.textContent, chunks: text.querySelectorAll('.plain.open > .chunk').length, md: text.querySelectorAll('.md').length };
  });
  assert.equal(seen.text, Array.from({ length: 40000 }, (_, i) => `w${i + 1}`).join(' '));
  assert.ok(seen.chunks > 10, `${seen.chunks} chunks`);
  assert.equal(seen.md, 0);
  assert.deepEqual(page.errors, []);
});

test('blocks split at blank lines outside fenced code, and a draft is read on from where it was', async () => {
  const { BlockSplitter, splitBlocks, grewFrom } = await import('../app/js/markdown.js');
  assert.deepEqual(splitBlocks('# a\n\npara\nmore\n\n\n```js\nx\n\ny\n```\n\nlast'), {
    done: ['# a\n', 'para\nmore\n', '```js\nx\n\ny\n```\n'],
    open: 'last',
  });
  assert.deepEqual(splitBlocks('a\n\n~~~~\nopen\n\n~~~\nstill'), { done: ['a\n'], open: '~~~~\nopen\n\n~~~\nstill' });
  assert.deepEqual(splitBlocks('``` not a fence ` \n\nb'), { done: ['``` not a fence ` \n'], open: 'b' });
  const splitter = new BlockSplitter();
  let text = '';
  const seen = [];
  for (const delta of ['# a', '\n', '\npa', 'ra\n\nb', ' c\n', '\n']) seen.push(splitter.split((text += delta)).done.length);
  assert.deepEqual(seen, [0, 0, 1, 2, 2, 3]);
  assert.deepEqual(splitter.split('other\n\nx'), { done: ['other\n'], open: 'x' }, 'a different text starts over');
  // A loose list stays one block: a blank line in it waits for the next line to decide.
  assert.deepEqual(splitBlocks('1. a\n\n2. b\n\n   more of b\n\n- c\n\nafter\n\nend'), {
    done: ['1. a\n\n2. b\n\n   more of b\n\n- c\n', 'after\n'],
    open: 'end',
  });
  assert.deepEqual(splitBlocks('- a\n\n'), { done: [], open: '- a\n\n' }, 'undecided: the list is still open');
  assert.deepEqual(splitBlocks('- a\n\n1'), { done: [], open: '- a\n\n1' }, '"1" may become "1." yet');
  assert.deepEqual(splitBlocks('- a\n\nTh'), { done: ['- a\n'], open: 'Th' }, 'a paragraph has begun: the list is over');
  assert.deepEqual(splitBlocks('- a\n\n```\nx\n```\n\n'), { done: ['- a\n', '```\nx\n```\n'], open: '' });
  assert.equal(grewFrom('abc def', 'abc'), true);
  assert.equal(grewFrom('abX def', 'abc'), false);
  assert.equal(grewFrom('ab', 'abc'), false);
});

test('a table keeps its column alignment', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Aligned table' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'echo: | item | qty | note |\n|:-----|----:|:----:|\n| pear | 12 | ripe |\n| fig | 3 | dry |');
  const md = await renderedAnswer(page);
  const aligned = await md.evaluate((el) =>
    [...el.querySelectorAll('tr')].map((tr) => [...tr.children].map((c) => getComputedStyle(c).textAlign)));
  assert.deepEqual(aligned, [
    ['left', 'right', 'center'],
    ['left', 'right', 'center'],
    ['left', 'right', 'center'],
  ]);
  assert.equal(await md.evaluate((el) => el.querySelector('[style]')), null, 'no inline style (the CSP forbids them)');
  assert.deepEqual(page.errors, []);
});

test('a loose list stays one list while it streams', async (t) => {
  const server = await startSpool({ delayMs: 4 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Loose list' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  // Every change to the answer while it streams: how many lists it shows and how many
  // items are in them.
  await page.evaluate(() => {
    window.listSteps = [];
    new MutationObserver(() => {
      const text = [...document.querySelectorAll('.msg.assistant .text')].at(-1);
      if (!text) return;
      const lists = text.querySelectorAll('ol, ul');
      window.listSteps.push({ lists: lists.length, items: text.querySelectorAll('li').length, draft: Boolean(text.closest('.is-draft')) });
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
  });
  const items = Array.from({ length: 5 }, (_, i) => `${i + 1}. step ${i + 1} ${Array.from({ length: 12 }, (_, w) => `word${w}`).join(' ')}`);
  // A long paragraph after the list, so the draft shows the finished list for a while.
  const after = Array.from({ length: 300 }, (_, w) => `after${w}`).join(' ');
  await send(page, `echo: Before the list.\n\n${items.join('\n\n')}\n\n${after}`);
  await page.waitForSelector('.msg.assistant.is-draft .md ol');
  const md = await renderedAnswer(page);
  assert.equal(await md.evaluate((el) => el.querySelectorAll('ol').length), 1);
  assert.equal(await md.evaluate((el) => el.querySelectorAll('ol > li').length), 5);
  const steps = await page.evaluate(() => window.listSteps);
  const drafts = steps.filter((s) => s.draft);
  assert.ok(drafts.length > 20, `${drafts.length} steps seen while streaming`);
  assert.deepEqual(steps.filter((s) => s.lists > 1), [], 'never more than one list');
  // Once the paragraph after it began, the draft showed the whole list as one.
  assert.ok(drafts.some((s) => s.lists === 1 && s.items === 5), 'the finished list rendered while the answer streamed');
  assert.deepEqual(page.errors, []);
});
