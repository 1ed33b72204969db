// Accessibility scan of the workspace (issue 36): axe-core, injected into the real page,
// checks it against WCAG 2.0, 2.1 and 2.2 levels A and AA in each state a person meets —
// the first screen, a conversation with a tool call, the todo list, a turn's versions and
// the undo preview, an approval card
// (a file's diff; a command's "always" choices), a question card — in the light and the
// dark theme. No violation of impact serious or critical may remain; the others are
// printed, so a run shows what is left.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { launch, openPage, seed, send, settled, shot, startSpool } from './helpers.mjs';

// Evaluated through the DevTools protocol: the page's Content-Security-Policy (scripts
// from its own origin only) refuses an added <script> tag, and it stays as served.
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'];

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

/** axe's violations on the page as it is, in both themes: [{state, theme, id, impact, help, targets}]. */
async function scan(page, state) {
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE);
  const found = [];
  for (const theme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: theme });
    const violations = await page.evaluate((tags) => window.axe.run(document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] }).then((r) => r.violations), TAGS);
    for (const v of violations) {
      found.push({ state, theme, id: v.id, impact: v.impact, help: v.help, targets: v.nodes.slice(0, 4).map((n) => `${n.target.join(' ')}${n.any[0]?.message ? ` (${n.any[0].message})` : ''}`) });
    }
  }
  await page.emulateMedia({ colorScheme: 'light' });
  return found;
}

const describe = (vs) => vs.map((v) => `${v.state} [${v.theme}] ${v.impact} ${v.id}: ${v.help}\n    ${v.targets.join('\n    ')}`).join('\n');

test('axe finds no serious or critical WCAG 2.2 AA violation in any state of the workspace, light or dark', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const found = [];
  const page = await openPage(browser, `${server.url}/`);
  await page.waitForSelector('.empty-chat.home');
  found.push(...(await scan(page, 'first screen')));

  const { session } = await seed(server, { title: 'Accessible' });
  await page.goto(`${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.waitForSelector('.empty-chat');
  found.push(...(await scan(page, 'an empty session')));

  await send(page, 'echo: Hello, **world**');
  await settled(page);
  await send(page, 'tool: list {}');
  await settled(page);
  await page.waitForSelector('.tool-card.is-success');
  await send(page, 'tool: todo_write {"todos":[{"content":"Read the code","status":"completed"},{"content":"Write the test","status":"in_progress","priority":"high"},{"content":"Fix it","status":"pending"}]}');
  await settled(page);
  await page.waitForSelector('#todos:not([hidden])');
  found.push(...(await scan(page, 'a conversation with a tool call and the todo list')));

  // Issue 39: a regenerated turn shows its versions (‹ 2/2 ›), and "Undo to here" its preview.
  await page.hover('.msg.assistant >> nth=-1');
  await page.click('.msg.assistant [data-action="regenerate"]');
  await page.waitForSelector('.msg.user [aria-label="Version 2 of 2"]');
  await settled(page);
  await page.hover('.msg.user >> nth=0');
  await page.click('.msg.user >> nth=0 >> [data-action="undo"]');
  await page.waitForSelector('dialog.undo-dialog[open]');
  found.push(...(await scan(page, 'a turn with two versions and the undo preview')));
  await page.keyboard.press('Escape');
  await page.waitForSelector('dialog.undo-dialog', { state: 'detached' });

  await send(page, 'tool: write {"path":"README.md","content":"# Demo project\\n\\nChanged.\\n"}');
  await page.waitForSelector('.approval-card .diff-table');
  found.push(...(await scan(page, 'a file change waiting for approval')));
  await shot(page, 'a11y-approval');
  await page.click('.approval-card button[data-decision="reject"]');
  await page.waitForSelector('.approval-card', { state: 'detached' });

  await send(page, 'tool: bash {"command":"git status --short"}');
  await page.waitForSelector('.approval-card .approval-always');
  found.push(...(await scan(page, 'a command waiting for approval')));
  await page.click('.approval-card button[data-decision="reject"]');
  await page.waitForSelector('.approval-card', { state: 'detached' });

  await send(page, 'tool: question {"question":"Which colour?","options":[{"label":"red","description":"warm"},{"label":"blue"}]}');
  await page.waitForSelector('.question-card');
  found.push(...(await scan(page, 'a question')));
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot(page, 'a11y-question-dark');
  await page.emulateMedia({ colorScheme: 'light' });

  const serious = found.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  const rest = found.filter((v) => !serious.includes(v));
  if (rest.length) t.diagnostic(`axe, below serious:\n${describe(rest)}`);
  assert.equal(serious.length, 0, `axe found:\n${describe(serious)}`);
  assert.deepEqual(page.errors, []);
});
