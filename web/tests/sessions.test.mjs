// Browser tests of issue 17 points 6 and 7: each answer's model, tokens and cost (and
// the session's totals) as the run records have them, before and after a reload; the
// sidebar's session search; sessions grouped by date; titles that read like titles.
// The real `spool` binary and headless Debian Chromium, as in ui.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, launch, openPage, seed, shot, startSpool } from './helpers.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

async function send(page, text) {
  await page.waitForSelector('.conn.is-live');
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

/** Waits until `n` answers are settled and the page is idle. */
async function answered(page, n) {
  await page.waitForFunction(
    (n) => document.querySelectorAll('[data-testid="answer-usage"]').length === n
      && document.querySelector('#run-state')?.textContent === 'Idle' && !document.querySelector('.is-draft'),
    n);
}

const usageLines = (page) => page.$$eval('[data-testid="answer-usage"]', (els) => els.map((e) => e.textContent));
const fmt = (n) => n.toLocaleString('en-US');
const tokens = (u) => `${fmt(u.input)} in · ${fmt(u.output)} out`;

/** Sends two scripted prompts and returns the session's run records. */
async function twoAnswers(server, page, session) {
  await send(page, 'echo: the first answer has six words');
  await answered(page, 1);
  await send(page, 'echo: second');
  await answered(page, 2);
  const runs = await api(server.url, 'GET', `/api/sessions/${session.id}/runs`);
  assert.equal(runs.length, 2);
  return runs;
}

test('each answer shows its model and tokens as the run records have them, and the session its totals', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Usage' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const runs = await twoAnswers(server, page, session);

  const expected = runs.map((r) => `scripted · ${tokens(r.usage)} · no price set`);
  assert.deepEqual(await usageLines(page), expected, 'no price for the scripted model: tokens, and no $0.00');
  const total = { input: runs[0].usage.input + runs[1].usage.input, output: runs[0].usage.output + runs[1].usage.output };
  const header = `2 answers · ${tokens(total)} · no price set`;
  await page.waitForFunction((want) => document.querySelector('[data-testid="session-usage"]')?.textContent === want, header);
  assert.ok(await page.isVisible('[data-testid="session-usage"]'));
  await shot(page, 'usage-desktop');

  // A reload rebuilds both from the history and the runs, not from what streamed.
  await page.reload();
  await answered(page, 2);
  assert.deepEqual(await usageLines(page), expected);
  await page.waitForFunction((want) => document.querySelector('[data-testid="session-usage"]')?.textContent === want, header);
  assert.deepEqual(page.errors, []);

  // At phone width the header has no room for the totals; each answer keeps its line.
  const phone = await openPage(browser, `${server.url}/#/s/${session.id}`, { width: 390, height: 800 });
  await answered(phone, 2);
  assert.deepEqual(await usageLines(phone), expected);
  await shot(phone, 'usage-mobile');
  assert.deepEqual(phone.errors, []);
});

test('with a configured price each answer and the session show the cost', async (t) => {
  const dir = (await import('node:fs')).mkdtempSync(join((await import('node:os')).tmpdir(), 'spool-price-'));
  const config = join(dir, 'spool.toml');
  // US dollars per million tokens: big enough that a few scripted tokens cost cents.
  writeFileSync(config, '[prices.scripted]\ninput = 1000\noutput = 3000\n');
  const server = await startSpool({ extra: ['--config', config] });
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Priced' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  const runs = await twoAnswers(server, page, session);
  for (const r of runs) assert.ok(r.usage.cost > 0, `the run record has a cost: ${JSON.stringify(r.usage)}`);

  const money = (c) => `$${c < 1 ? c.toFixed(4) : c.toFixed(2)}`;
  assert.deepEqual(await usageLines(page), runs.map((r) => `scripted · ${tokens(r.usage)} · ${money(r.usage.cost)}`));
  const sum = runs[0].usage.cost + runs[1].usage.cost;
  await page.waitForFunction((want) => document.querySelector('[data-testid="session-usage"]')?.textContent.endsWith(want), money(sum));
  assert.deepEqual(page.errors, []);
});

/** Runs `text` in a session through the API and waits until the run settled. */
async function answer(server, session, text) {
  const { runId } = await api(server.url, 'POST', `/api/sessions/${session.id}/prompt`, { text });
  for (;;) {
    const run = await api(server.url, 'GET', `/api/runs/${runId}`);
    if (run.status !== 'running') return run;
    await new Promise((r) => setTimeout(r, 20));
  }
}

const resultTitles = (page) => page.$$eval('.search-results li[data-session-id] .search-title', (els) => els.map((e) => e.textContent));

test('the sidebar search finds sessions by title and message text, opens one with Enter, clears with Esc', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project, session: first } = await seed(server, { title: 'Parser work' });
  await answer(server, first, 'echo: the tokenizer drops a Semicolon');
  const second = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Semicolon rules' });
  const third = await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: 'Unrelated' });
  await answer(server, third, 'echo: nothing to see');

  const page = await openPage(browser, `${server.url}/`);
  await page.waitForSelector(`.session[data-session-id="${third.id}"]`);
  await page.fill('[data-testid="session-search"]', 'semicolon');
  await page.waitForSelector('.search-results li[data-session-id]');
  assert.deepEqual(await resultTitles(page), ['Semicolon rules', 'Parser work'], 'newest activity first; the unrelated one is not there');
  const snippet = await page.textContent(`.search-results li[data-session-id="${first.id}"] .search-snippet`);
  assert.match(snippet, /tokenizer drops a Semicolon/, 'the message match shows where it matched');
  assert.ok(await page.isHidden('#projects'), 'results take the project list’s place');
  await shot(page, 'search-desktop');

  // Arrow down to the second result, Enter opens it and the box empties.
  await page.press('[data-testid="session-search"]', 'ArrowDown');
  await page.press('[data-testid="session-search"]', 'Enter');
  await page.waitForFunction((id) => location.hash === `#/s/${id}`, first.id);
  await page.waitForSelector('#title:text("Parser work")');
  assert.equal(await page.inputValue('[data-testid="session-search"]'), '');
  assert.ok(await page.isVisible('#projects'));

  // No match says so; Esc clears it and the projects come back.
  await page.fill('[data-testid="session-search"]', 'zzz-nowhere');
  await page.waitForSelector('.search-results .search-empty');
  assert.match(await page.textContent('.search-results'), /No session mentions “zzz-nowhere”/);
  await page.press('[data-testid="session-search"]', 'Escape');
  await page.waitForSelector('#projects', { state: 'visible' });
  assert.equal(await page.inputValue('[data-testid="session-search"]'), '');

  // A click on a result opens it too.
  await page.fill('[data-testid="session-search"]', 'RULES');
  await page.click(`.search-results li[data-session-id="${second.id}"] button`);
  await page.waitForFunction((id) => location.hash === `#/s/${id}`, second.id);
  assert.deepEqual(page.errors, []);
});

test('the sidebar search pages with More results', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project } = await seed(server, { title: 'Pelican 0' });
  for (let i = 1; i < 23; i++) await api(server.url, 'POST', '/api/sessions', { projectId: project.id, title: `Pelican ${i}` });
  const page = await openPage(browser, `${server.url}/`);
  await page.fill('[data-testid="session-search"]', 'pelican');
  await page.waitForSelector('.search-more');
  assert.equal((await resultTitles(page)).length, 20, 'one page of 20');
  await page.click('.search-more');
  await page.waitForFunction(() => document.querySelectorAll('.search-results li[data-session-id]').length === 23);
  assert.ok(await page.isHidden('.search-more'), 'no more pages after the last');
  const titles = await resultTitles(page);
  assert.equal(new Set(titles).size, 23, 'no session twice across pages');
  assert.equal(titles[0], 'Pelican 22');
  assert.deepEqual(page.errors, []);
});

test('sessions are grouped Today, Yesterday, Previous 7 days and Older, and move as the days pass', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { session } = await seed(server, { title: 'Dated' });
  const page = await openPage(browser, `${server.url}/`, { clock: true });
  const groupOf = () => page.evaluate((id) => {
    let el = document.querySelector(`.session[data-session-id="${id}"]`);
    while (el && !el.classList.contains('date-group')) el = el.previousElementSibling;
    return el?.dataset.group ?? null;
  }, session.id);
  await page.waitForSelector(`.session[data-session-id="${session.id}"]`);
  assert.equal(await groupOf(), 'Today');
  await shot(page, 'groups-desktop');
  // The page's clock moves on; the sidebar regroups when it next repaints (its minute
  // tick, or a list refresh after the jump).
  for (const [days, group] of [[1, 'Yesterday'], [4, 'Previous 7 days'], [30, 'Older']]) {
    await page.clock.setSystemTime(session.updatedAt + days * 86_400_000);
    await page.clock.runFor(61_000);
    await page.waitForFunction(([id, group]) => {
      let el = document.querySelector(`.session[data-session-id="${id}"]`);
      while (el && !el.classList.contains('date-group')) el = el.previousElementSibling;
      return el?.dataset.group === group;
    }, [session.id, group]);
  }
  assert.deepEqual(page.errors, []);
});

test('a scripted session is titled like a title, not with the prompt’s JSON', async (t) => {
  const server = await startSpool();
  t.after(() => server.stop());
  const { project } = await seed(server, { title: 'Seed' });
  const session = await api(server.url, 'POST', '/api/sessions', { projectId: project.id });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await send(page, 'tool: read {"path":"README.md"}');
  await page.waitForSelector(`.session[data-session-id="${session.id}"] .session-title:text-is("Read README.md")`);
  assert.equal(await page.textContent('#title'), 'Read README.md');
  assert.deepEqual(page.errors, []);
});
