// Line diffs for the cards of tools that change files (issue 17, point 2): what a `write`
// or `edit` will change, shown old → new with both files' line numbers, long runs of
// unchanged lines folded. Two sources: the unified diff the server puts in an approval's
// `preview` (computed against the file on disk, so its numbers are the file's), and a
// diff computed here when the person edits the arguments or a finished `edit` card shows
// its strings. The algorithm is Myers' O(ND) line diff, bounded: past MAX_EDITS edits
// it stops looking for the smallest diff and shows the rest as removed-then-added,
// which is still a correct diff. Pure functions first (tested in Node), DOM last.

import { h } from './dom.js';

/** Unchanged lines kept around each change; longer runs fold into one "N unchanged" row. */
export const CONTEXT = 3;
/** Rows drawn at most; the rest is a "N more lines" note (a card is not a file viewer). */
export const MAX_ROWS = 400;
/** Edits Myers looks for before giving up on minimality (bounds time and memory). */
const MAX_EDITS = 1000;

/**
 * `text` as lines, each with its own terminator, so a change of the last line's newline
 * is a change: "a\nb" → ["a\n", "b"].
 */
export function splitLines(text) {
  if (!text) return [];
  const lines = text.split('\n').map((l) => `${l}\n`);
  if (text.endsWith('\n')) lines.pop();
  else lines[lines.length - 1] = lines[lines.length - 1].slice(0, -1);
  return lines;
}

/**
 * The rows of a diff of `oldText` against `newText`: `{type: 'ctx'|'del'|'add', text,
 * old, new, eol}` — `old`/`new` are 1-based line numbers (absent on the side a line is
 * not in), `eol` false for a last line without a newline. Removals come before the
 * additions that replace them. `firstOld`/`firstNew` number from a later line (a snippet
 * of a file).
 */
export function diffLines(oldText, newText, { firstOld = 1, firstNew = 1 } = {}) {
  const a = splitLines(oldText);
  const b = splitLines(newText);
  // Common ends need no search, and most edits touch a small middle.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const ops = [];
  for (let i = 0; i < start; i++) ops.push(['ctx', i, i]);
  for (const op of middle(a, b, start, endA, start, endB)) ops.push(op);
  for (let i = endA, j = endB; i < a.length; i++, j++) ops.push(['ctx', i, j]);
  return removalsFirst(ops).map(([type, i, j]) => {
    const line = type === 'add' ? b[j] : a[i];
    const row = { type, text: line.endsWith('\n') ? line.slice(0, -1) : line, eol: line.endsWith('\n') };
    if (type !== 'add') row.old = firstOld + i;
    if (type !== 'del') row.new = firstNew + j;
    return row;
  });
}

/** Within each run of changed lines, the removed ones first: reads as "this became that". */
function removalsFirst(ops) {
  const out = [];
  let run = [];
  const flush = () => {
    out.push(...run.filter((o) => o[0] === 'del'), ...run.filter((o) => o[0] === 'add'));
    run = [];
  };
  for (const op of ops) {
    if (op[0] === 'ctx') {
      flush();
      out.push(op);
    } else run.push(op);
  }
  flush();
  return out;
}

/** Myers' greedy forward search over a[a0..a1) × b[b0..b1), then a walk back. */
function middle(a, b, a0, a1, b0, b1) {
  const n = a1 - a0;
  const m = b1 - b0;
  const plain = () => [
    ...Array.from({ length: n }, (_, k) => ['del', a0 + k, b0]),
    ...Array.from({ length: m }, (_, k) => ['add', a0 + n, b0 + k]),
  ];
  if (n === 0 || m === 0) return plain();
  const max = Math.min(n + m, MAX_EDITS);
  const offset = max + 1;
  let v = new Int32Array(2 * max + 3);
  const trace = [];
  for (let d = 0; d <= max; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      const down = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1]);
      let x = down ? v[offset + k + 1] : v[offset + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[a0 + x] === b[b0 + y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) return walkBack(trace, offset, d, n, m, a0, b0);
    }
  }
  // Too different to search further: all removed, then all added.
  return plain();
}

function walkBack(trace, offset, last, n, m, a0, b0) {
  const ops = [];
  let x = n;
  let y = m;
  for (let d = last; d > 0; d--) {
    const v = trace[d];
    const k = x - y;
    const down = k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1]);
    const prevK = down ? k + 1 : k - 1;
    const prevX = v[offset + prevK];
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      x--;
      y--;
      ops.push(['ctx', a0 + x, b0 + y]);
    }
    if (down) ops.push(['add', a0 + x, b0 + --y]);
    else ops.push(['del', a0 + --x, b0 + y]);
  }
  while (x > 0 && y > 0) {
    x--;
    y--;
    ops.push(['ctx', a0 + x, b0 + y]);
  }
  return ops.reverse();
}

/**
 * Rows as shown: changes with CONTEXT unchanged lines around them; each longer run of
 * unchanged lines becomes `{type: 'skip', count}`. No change at all is `[]`.
 */
export function fold(rows, context = CONTEXT) {
  if (!rows.some((r) => r.type !== 'ctx')) return [];
  const keep = rows.map(() => false);
  rows.forEach((r, i) => {
    if (r.type === 'ctx') return;
    for (let j = Math.max(0, i - context); j <= Math.min(rows.length - 1, i + context); j++) keep[j] = true;
  });
  const out = [];
  let skipped = 0;
  rows.forEach((r, i) => {
    if (keep[i]) {
      if (skipped) out.push({ type: 'skip', count: skipped });
      skipped = 0;
      out.push(r);
    } else skipped++;
  });
  if (skipped) out.push({ type: 'skip', count: skipped });
  return out;
}

/**
 * The rows of a unified diff as the server writes an approval's `preview` (see
 * crates/tools/src/inspect.rs), numbered from its hunk headers; the unchanged lines
 * before and between hunks are `skip` rows. `null` when `text` is not a diff (the call would fail, or a binary file):
 * show it as text. `cut` is the server's "… N more lines" note when it cut the diff.
 */
export function parseUnified(text) {
  if (typeof text !== 'string' || !text.startsWith('--- ')) return null;
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const rows = [];
  let cut = null;
  let oldNo = 0;
  let newNo = 0;
  for (const line of lines.slice(2)) {
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      const [o, n] = [Number(hunk[1]), Number(hunk[2])];
      // An empty side is numbered from the line before it ("-0,0").
      const from = Math.max(o, 1);
      if (rows.length === 0 && from > 1) rows.push({ type: 'skip', count: from - 1 });
      else if (rows.length > 0 && from > oldNo) rows.push({ type: 'skip', count: from - oldNo });
      oldNo = from;
      newNo = Math.max(n, 1);
      continue;
    }
    if (line.startsWith('\\')) {
      const last = rows.at(-1);
      if (last) last.eol = false;
      continue;
    }
    if (line.startsWith('… ')) {
      cut = line;
      continue;
    }
    const sign = line[0];
    const body = line.slice(1);
    if (sign === ' ') rows.push({ type: 'ctx', text: body, old: oldNo++, new: newNo++, eol: true });
    else if (sign === '-') rows.push({ type: 'del', text: body, old: oldNo++, eol: true });
    else if (sign === '+') rows.push({ type: 'add', text: body, new: newNo++, eol: true });
  }
  return { rows, cut };
}

/**
 * The file a `write` found, rebuilt from the content it was asked to write and the
 * server's diff of that: lines between hunks are the new file's, which `content` holds.
 * `null` when the diff is cut or is not one (there is nothing exact to rebuild from).
 */
export function oldFromPreview(preview, content) {
  if (typeof preview === 'string' && preview.startsWith('--- ') && preview.split('\n', 1)[0].endsWith('(does not exist yet)')) return '';
  const parsed = parseUnified(preview);
  if (!parsed || parsed.cut) return null;
  if (parsed.rows.length === 0) return content;
  const next = splitLines(content);
  const out = [];
  let at = 0; // next line of `next` not yet accounted for (0-based)
  for (const r of parsed.rows) {
    if (r.type === 'skip') continue;
    if (r.new !== undefined) {
      while (at < r.new - 1) out.push(next[at++]);
      if (r.type === 'add' && next[at] === undefined) return null;
      at = r.new;
    }
    if (r.type !== 'add') out.push(`${r.text}${r.eol ? '\n' : ''}`);
  }
  while (at < next.length) out.push(next[at++]);
  return out.join('');
}

/** How many changed lines: `{added, removed}`. */
export function stats(rows) {
  let added = 0;
  let removed = 0;
  for (const r of rows) {
    if (r.type === 'add') added++;
    else if (r.type === 'del') removed++;
  }
  return { added, removed };
}

/**
 * A diff as a table: old line number, new line number, sign, text. `rows` are folded or
 * parsed rows; past `max` rows a note says how many more lines there are. `label` names
 * it for screen readers. `snippet`: the texts are pieces of a file (an edit's strings),
 * whose last line is not the file's, so no "no newline at end of file" mark.
 */
export function diffTable(rows, { label = 'Changes', max = MAX_ROWS, cut = null, snippet = false } = {}) {
  const { added, removed } = stats(rows);
  const shown = rows.slice(0, max);
  const more = rows.slice(max).reduce((n, r) => n + (r.type === 'skip' ? 0 : 1), 0);
  const sign = { add: '+', del: '−', ctx: ' ' };
  const body = shown.map((r) =>
    r.type === 'skip'
      ? h('tr', { class: 'diff-skip' }, h('td', { colspan: 4 }, `⋯ ${r.count} unchanged line${r.count === 1 ? '' : 's'}`))
      : h(
          'tr',
          { class: `diff-row diff-${r.type}` },
          h('td', { class: 'diff-ln', 'aria-label': r.old ? `old line ${r.old}` : null }, r.old ?? ''),
          h('td', { class: 'diff-ln', 'aria-label': r.new ? `new line ${r.new}` : null }, r.new ?? ''),
          h('td', { class: 'diff-sign', 'aria-hidden': 'true' }, sign[r.type]),
          h('td', { class: 'diff-code' }, r.text, r.eol === false && !snippet ? h('span', { class: 'diff-eol', title: 'No newline at end of file' }, ' ⏎̸') : null),
        ),
  );
  return h(
    'div',
    { class: 'diff', role: 'region', 'aria-label': label },
    h('p', { class: 'diff-stats' }, h('span', { class: 'diff-added' }, `+${added}`), ' ', h('span', { class: 'diff-removed' }, `−${removed}`)),
    rows.length === 0
      ? h('p', { class: 'diff-none' }, 'No change.')
      : h('div', { class: 'diff-scroll' }, h('table', { class: 'diff-table' }, h('tbody', {}, body))),
    more > 0 ? h('p', { class: 'diff-more' }, `${more} more line${more === 1 ? '' : 's'} not shown`) : null,
    cut ? h('p', { class: 'diff-more' }, cut) : null,
  );
}
