// Browser tests of the block being written (issue 36): the real `spool` binary and
// headless Debian Chromium. While an answer streams, its open block is rendered in the
// page (markdown_local.js), so a list, a table or a fence never shows as raw Markdown,
// and the page's rendering matches the server's, so nothing jumps when that arrives.
//
//   1. an answer streamed word by word never shows `**`, a `|` row, a fence or a list
//      marker as text, at any change of the page; lists, tables and code take shape as
//      they grow; the end is the same page as the answer loaded afresh
//   2. the page renders the same elements as the server for the Markdown answers use
//   3. every prefix of a hostile draft renders nothing active (no script, img, handler
//      or javascript: link), and no raw syntax of the open block
//   4. a plan card renders its Markdown, and an accepted plan stays readable in the
//      conversation, after a reload too

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

const ANSWER = [
  'Intro with **bold 1** and *it* and `inline code`.',
  '',
  '- item **1**',
  '- item 2 with ~~old~~ new',
  '- item 3',
  '',
  '| name | qty |',
  '|------|----:|',
  '| pear | 12 |',
  '| fig | 3 |',
  '',
  '```rust',
  'fn main() {',
  '    println!("hi");',
  '}',
  '```',
  '',
  '## Done',
  '',
  'See [the docs](https://example.org/docs).',
].join('\n');

/** The answer's committed text with the server's HTML in place. */
async function serverRendered(page) {
  await settled(page);
  return page.waitForSelector('.msg.assistant:last-of-type .text > .md:only-child:not(.is-local)');
}

test('the block being written renders as Markdown while it streams, never as raw syntax', async (t) => {
  // A pause between words long enough for the page to paint each one.
  const server = await startSpool({ delayMs: 40 });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Streaming Markdown' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  // Every change to the answer: what a reader sees (code blocks aside, whose text is
  // code), and what shape the last, open part has.
  await page.evaluate(() => {
    window.states = [];
    window.rebuilt = 0; // finished blocks' server HTML taken out while the answer streamed
    window.firstItems = new Set(); // the open block's first list item, as elements
    new MutationObserver((records) => {
      for (const r of records) {
        if (!r.target.closest?.('.msg.assistant.is-draft')) continue;
        for (const n of r.removedNodes) if (n.matches?.('.md:not(.is-local)')) window.rebuilt++;
      }
      const text = [...document.querySelectorAll('.msg.assistant .text')].at(-1);
      if (!text) return;
      // The text as lines: each block element on its own line, code and buttons aside.
      const lines = (node) => {
        if (node.nodeType === Node.TEXT_NODE) return node.data;
        if (['PRE', 'BUTTON'].includes(node.tagName)) return '\n';
        const inner = [...node.childNodes].map(lines).join('');
        return getComputedStyle(node).display === 'inline' ? inner : `\n${inner}\n`;
      };
      const seen = lines(text);
      const item = text.lastElementChild?.querySelector('ul > li');
      if (item && text.closest('.is-draft')) window.firstItems.add(item);
      window.states.push({
        draft: Boolean(text.closest('.is-draft')),
        seen,
        lists: text.querySelectorAll('ul > li').length,
        rows: text.querySelectorAll('tbody tr').length,
        code: text.querySelector('pre code')?.textContent ?? null,
        strong: text.querySelectorAll('strong').length,
        server: text.querySelectorAll('.md:not(.is-local)').length,
      });
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
  });
  await send(page, `echo: ${ANSWER}`);
  // Caught while it streams, the code fence open.
  await page.waitForFunction(() => document.querySelector('.msg.assistant.is-draft .text')?.textContent.includes('println'));
  await shot(page, 'streaming-markdown');
  await serverRendered(page);
  const states = await page.evaluate(() => window.states);
  assert.ok(states.some((s) => s.draft && s.server > 0), 'finished blocks had their server HTML while the answer streamed');
  assert.equal(await page.evaluate(() => window.rebuilt), 0, 'a finished block keeps its elements while the answer streams');
  assert.equal(await page.evaluate(() => window.firstItems.size), 1, 'the open list kept its first item while the next ones came');
  const drafts = states.filter((s) => s.draft);
  assert.ok(drafts.length > 15, `${drafts.length} changes seen while streaming`);
  for (const s of states) {
    const raw = s.seen.split('\n').filter((line) => /\*\*|```|^\s*\||^\s*[-*+] |^\s*#{1,6} |^\s*~~|\]\(/.test(line));
    assert.deepEqual(raw, [], `raw Markdown on the page:\n${s.seen}`);
  }
  // A list, a table and code showed as such before they were complete (how many steps
  // the page painted depends on the machine: at least these).
  assert.ok(drafts.some((s) => s.lists > 0 && s.lists < 3), 'a list while its items came');
  assert.ok(drafts.some((s) => s.rows > 0 && s.rows < 2), 'a table while its rows came');
  const code = [...new Set(drafts.map((s) => s.code).filter((c) => c !== null))];
  const full = 'fn main() {\n    println!("hi");\n}';
  assert.ok(code.some((c) => c !== full) && code.every((c) => full.startsWith(c)), `code as it grew: ${JSON.stringify(code)}`);
  assert.ok(drafts.some((s) => s.strong > 0 && s.lists === 0), 'bold before the list was');

  // The end is the same page as the answer loaded afresh.
  const streamed = await page.$eval('.msg.assistant:last-of-type .text', (el) => el.innerHTML);
  const fresh = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await serverRendered(fresh);
  assert.equal(await fresh.$eval('.msg.assistant:last-of-type .text', (el) => el.innerHTML), streamed);
  assert.deepEqual([...page.errors, ...fresh.errors], []);
});

/**
 * The Markdown answers use, each rendered by the page and by the server. The server's
 * whitespace between elements and its highlighting spans aside, the same elements.
 */
const SAMPLES = [
  '# Title\n\nSome *italic*, **bold**, ***both***, ~~gone~~, `code` and a\\*star.',
  'Setext\n===\n\nand\n---',
  '- one\n- two\n  - nested\n  - more\n- three',
  '1. first\n\n2. second\n\n   more of second',
  '3. three\n4. four',
  '- [x] done\n- [ ] todo',
  '| a | b | c |\n|:--|:-:|--:|\n| 1 | **2** | 3 |\n| 4 |',
  '```python\nprint("x")\n\nprint(1)\n```\nafter',
  '> quoted *words*\n> more\n\n---\n\n* * *',
  '[site](https://example.org/x), [rel](#here), [bad](javascript:alert(1)) and <https://a.example/b>',
  'line one  \nline two\\\nline three\nsoft',
  'snake_case_name and 2 * 3 and a_b_ and **x*',
  '&amp; &lt;b&gt; <b>raw</b> <img src=x onerror=alert(1)>',
];

test('the page renders the same elements as the server for the Markdown answers use', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const page = await openPage(browser, `${server.url}/`);
  const { html } = await api(server.url, 'POST', '/api/markdown', { texts: SAMPLES });
  const pairs = await page.evaluate(async ({ samples, html }) => {
    const { renderLocal } = await import('/ui/js/markdown_local.js');
    const shape = (root) => {
      const out = [];
      const walk = (node) => {
        for (const child of node.childNodes) {
          if (child.nodeType === Node.TEXT_NODE) {
            const text = child.data.replace(/\s+/g, ' ').trim();
            if (text) out.push(text);
          } else if (child.tagName === 'SPAN') {
            walk(child); // a highlighted token
          } else if (child.tagName === 'CODE' && child.parentNode.tagName === 'PRE') {
            out.push('<code>', child.textContent, '</code>'); // code is compared as it is
          } else {
            const attrs = ['href', 'target', 'rel', 'class', 'start', 'type', 'checked', 'disabled', 'data-lang']
              .filter((a) => child.hasAttribute(a))
              .map((a) => `${a}=${child.getAttribute(a)}`);
            out.push(`<${child.tagName.toLowerCase()}${attrs.length ? ` ${attrs.join(' ')}` : ''}>`);
            walk(child);
            out.push(`</${child.tagName.toLowerCase()}>`);
          }
        }
      };
      root.normalize(); // adjacent text nodes are one text
      walk(root);
      // Text split differently into nodes is the same text.
      return out.reduce((acc, t) => (!t.startsWith('<') && acc.length && !acc.at(-1).startsWith('<') ? [...acc.slice(0, -1), `${acc.at(-1)} ${t}`] : [...acc, t]), []);
    };
    return samples.map((text, i) => {
      const server = document.createElement('div');
      server.innerHTML = html[i];
      const local = document.createElement('div');
      local.append(...renderLocal(text));
      return { text, server: shape(server), local: shape(local) };
    });
  }, { samples: SAMPLES, html });
  for (const { text, server: expected, local } of pairs) assert.deepEqual(local, expected, `for ${JSON.stringify(text)}`);
  assert.deepEqual(page.errors, []);
});

test('every prefix of a draft renders nothing active and no raw syntax of its open block', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const page = await openPage(browser, `${server.url}/`);
  const hostile = [
    'Look: <img src=x onerror="window.pwned=1"> and <script>window.pwned=2</script>',
    '- [click](javascript:window.pwned=3) **now**',
    '- ![pic](javascript:window.pwned=4) and [ok](https://example.org/ok)',
    '',
    '| a | <b onmouseover="window.pwned=5">b</b> |',
    '|---|---|',
    '| [x](JAVASCRIPT:window.pwned=6) | y |',
    '',
    '```html',
    '<script>window.pwned=7</script>',
    '```',
  ].join('\n');
  const found = await page.evaluate(async (text) => {
    const { renderLocal } = await import('/ui/js/markdown_local.js');
    const problems = [];
    for (let n = 1; n <= text.length; n++) {
      const box = document.createElement('div');
      box.append(...renderLocal(text.slice(0, n), true));
      document.body.append(box);
      for (const el of box.querySelectorAll('*')) {
        const bad = ['SCRIPT', 'IMG', 'IFRAME', 'B', 'STYLE'].includes(el.tagName)
          || [...el.attributes].some((a) => a.name.startsWith('on') || a.name === 'style' || (a.name === 'href' && !/^https:/.test(a.value)));
        if (bad) problems.push(`${n}: ${el.outerHTML}`);
      }
      const copy = box.cloneNode(true);
      for (const pre of copy.querySelectorAll('pre')) pre.remove();
      document.body.append(copy);
      for (const line of copy.innerText.split('\n')) {
        if (/\*\*|```|^\s*\||^\s*[-*+] |\]\(/.test(line)) problems.push(`${n}: raw ${JSON.stringify(line)}`);
      }
      box.remove();
      copy.remove();
    }
    return { problems, pwned: window.pwned ?? null };
  }, hostile);
  assert.deepEqual(found.problems, []);
  assert.equal(found.pwned, null);
  assert.deepEqual(page.errors, []);
});

test('a plan card renders its Markdown, and the accepted plan stays readable in the conversation', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Plan' });
  await api(server.url, 'PATCH', `/api/sessions/${session.id}`, { mode: 'plan' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const plan = '## Steps\n\n1. Add `notes.txt`\n2. Test **it**\n\n| file | why |\n|---|---|\n| notes.txt | the notes |';
  await send(page, `tool: exit_plan ${JSON.stringify({ plan })}`);
  const card = await page.waitForSelector('.plan-card');
  // What the plan's text shows (inside a card or the accepted plan).
  // (A repaint may build the section anew around the same text: look it up each time.)
  const shown = (where) => page.$eval(`${where} .text`, (e) => ({
    h2: [...e.querySelectorAll('h2')].map((n) => n.textContent),
    li: [...e.querySelectorAll('ol > li')].map((n) => n.textContent),
    strong: [...e.querySelectorAll('strong')].map((n) => n.textContent),
    td: [...e.querySelectorAll('td')].map((n) => n.textContent),
    raw: /##|\*\*|\|---/.test(e.textContent),
  }));
  const expected = { h2: ['Steps'], li: ['Add notes.txt', 'Test it'], strong: ['it'], td: ['notes.txt', 'the notes'], raw: false };
  await card.waitForSelector('.text');
  assert.deepEqual(await shown('.plan-card'), expected);
  await shot(page, 'plan-card-markdown');
  await page.click('.plan-card button[data-decision="once"]');
  await page.waitForSelector('.plan-card', { state: 'detached' });
  await settled(page);
  const accepted = await page.waitForSelector('.plan-accepted');
  assert.ok(await accepted.isVisible(), 'the accepted plan is in view, not folded away');
  assert.deepEqual(await shown('.plan-accepted'), expected);
  await shot(page, 'plan-accepted');
  await page.reload();
  await page.waitForSelector('.plan-accepted .md');
  assert.deepEqual(await shown('.plan-accepted'), expected);
  assert.deepEqual(page.errors, []);
});
