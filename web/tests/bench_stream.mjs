// The streaming smoothness measurement behind issue 17's "worst frame" number: the page
// shows one session while the scripted model streams an N-delta answer as fast as the
// server sends it (no delay), and Chromium's Long Animation Frames API reports every
// frame that took over 50 ms. Prints the worst frame, how many long frames there were,
// and the longest gap between two animation frames, so a change to how answers render
// can be measured before and after with the same command:
//
//   SPOOL_BIN=target/debug/spool node web/tests/bench_stream.mjs [deltas=200000]
//
// Not part of `npm test`: it is a measurement (a number to compare), not a check.

import { launch, openPage, seed, startSpool } from './helpers.mjs';

const deltas = Number(process.argv[2] ?? 200_000);
const server = await startSpool({ delayMs: 0 });
const browser = await launch();
try {
  const { session } = await seed(server, { title: 'Bench' });
  const page = await openPage(browser, `${server.url}/#/s/${session.id}`);
  await page.waitForSelector('.conn.is-live');
  await page.evaluate(() => {
    window.longFrames = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.longFrames.push(e.duration);
    }).observe({ type: 'long-animation-frame' });
    window.maxGap = 0;
    let last = performance.now();
    const tick = (now) => {
      window.maxGap = Math.max(window.maxGap, now - last);
      last = now;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  // BENCH_PROFILE=1: also print where the page's main thread spent its time.
  const cdp = process.env.BENCH_PROFILE ? await page.context().newCDPSession(page) : null;
  if (cdp) {
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.start');
  }
  const started = Date.now();
  await page.fill('#prompt', `stream: ${deltas}`);
  await page.press('#prompt', 'Enter');
  const lastWord = `w${deltas}`;
  await page.waitForFunction(
    (w) => !document.querySelector('.is-draft') && document.querySelector('#run-state')?.textContent === 'Idle'
      && ([...document.querySelectorAll('.msg.assistant .text')].at(-1)?.textContent ?? '').endsWith(w),
    lastWord, { timeout: 600_000, polling: 250 },
  );
  // The frames after the answer settled (a rendered answer's swap) count too.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  await page.waitForTimeout(1000);
  const { longFrames, maxGap } = await page.evaluate(() => ({ longFrames: window.longFrames, maxGap: window.maxGap }));
  if (cdp) console.log(topFunctions((await cdp.send('Profiler.stop')).profile));
  const worst = Math.max(0, ...longFrames);
  const total = longFrames.reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({
    deltas,
    seconds: (Date.now() - started) / 1000,
    worstFrameMs: Math.round(worst),
    longFrames: longFrames.length,
    longFramesTotalMs: Math.round(total),
    maxAnimationFrameGapMs: Math.round(maxGap),
  }));
} finally {
  await browser.close();
  await server.stop();
}

/** The 15 functions with the most self time in a CPU profile, as lines of text. */
function topFunctions(profile) {
  const self = new Map();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  profile.samples.forEach((id, i) => {
    const { functionName, url, lineNumber } = byId.get(id).callFrame;
    const key = `${functionName || '(anonymous)'} ${url.split('/').pop()}:${lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  return [...self].sort((a, b) => b[1] - a[1]).slice(0, 15).map(([k, ms]) => `${Math.round(ms).toString().padStart(7)} ms  ${k}`).join('\n');
}
