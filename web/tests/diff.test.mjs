// The line diff behind the write/edit cards (web/app/js/diff.js), in Node: the rows a
// person reads (what was removed, what was added, which lines), folding, the parse of
// the server's unified preview, and rebuilding a write's old file from it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { diffLines, fold, oldFromPreview, parseUnified, splitLines, stats } from '../app/js/diff.js';

const compact = (rows) => rows.map((r) => (r.type === 'skip' ? `… ${r.count}` : `${r.type} ${r.old ?? '-'} ${r.new ?? '-'} ${r.text}${r.eol === false ? ' ⏎̸' : ''}`));

/** Applying the rows gives back both texts: the diff is correct, whatever its size. */
function replay(rows) {
  const side = (keep) => rows.filter((r) => keep.includes(r.type)).map((r) => `${r.text}${r.eol ? '\n' : ''}`).join('');
  return [side(['ctx', 'del']), side(['ctx', 'add'])];
}

test('lines keep their terminators, so a missing last newline is a difference', () => {
  assert.deepEqual(splitLines(''), []);
  assert.deepEqual(splitLines('a\nb'), ['a\n', 'b']);
  assert.deepEqual(splitLines('a\nb\n'), ['a\n', 'b\n']);
  assert.deepEqual(splitLines('\n'), ['\n']);
});

test('a changed line is removed then added, numbered on both sides', () => {
  const rows = diffLines('one\ntwo\nthree\n', 'one\n2\nthree\n');
  assert.deepEqual(compact(rows), ['ctx 1 1 one', 'del 2 - two', 'add - 2 2', 'ctx 3 3 three']);
});

test('an insertion shifts the new side’s numbers only', () => {
  const rows = diffLines('a\nb\nc\n', 'a\nx\ny\nb\nc\n');
  assert.deepEqual(compact(rows), ['ctx 1 1 a', 'add - 2 x', 'add - 3 y', 'ctx 2 4 b', 'ctx 3 5 c']);
});

test('an empty old file: every line is added', () => {
  const rows = diffLines('', 'hello\nworld\n');
  assert.deepEqual(compact(rows), ['add - 1 hello', 'add - 2 world']);
  assert.deepEqual(stats(rows), { added: 2, removed: 0 });
  assert.deepEqual(compact(diffLines('gone\n', '')), ['del 1 - gone']);
});

test('identical texts: no change to show', () => {
  const rows = diffLines('same\ntext\n', 'same\ntext\n');
  assert.ok(rows.every((r) => r.type === 'ctx'));
  assert.deepEqual(fold(rows), []);
  assert.deepEqual(fold(diffLines('', '')), []);
});

test('adding a trailing newline changes the last line, and says which side lacks it', () => {
  const rows = diffLines('a\nb', 'a\nb\n');
  assert.deepEqual(compact(rows), ['ctx 1 1 a', 'del 2 - b ⏎̸', 'add - 2 b']);
});

test('long unchanged runs fold to three lines of context around each change', () => {
  const old = Array.from({ length: 20 }, (_, i) => `l${i + 1}\n`).join('');
  const next = old.replace('l10\n', 'ten\n');
  assert.deepEqual(compact(fold(diffLines(old, next))), [
    '… 6',
    'ctx 7 7 l7', 'ctx 8 8 l8', 'ctx 9 9 l9',
    'del 10 - l10', 'add - 10 ten',
    'ctx 11 11 l11', 'ctx 12 12 l12', 'ctx 13 13 l13',
    '… 7',
  ]);
});

test('a snippet is numbered from where it sits in the file', () => {
  assert.deepEqual(compact(diffLines('x\n', 'y\n', { firstOld: 41, firstNew: 41 })), ['del 41 - x', 'add - 41 y']);
});

test('the diff of scrambled texts is always a correct one, large ones included', () => {
  let seed = 7;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % n);
  for (let round = 0; round < 200; round++) {
    const make = (len) => Array.from({ length: len }, () => `${'abcd'[rand(4)]}\n`).join('');
    const a = make(rand(30));
    const b = make(rand(30));
    assert.deepEqual(replay(diffLines(a, b)), [a, b], `${JSON.stringify(a)} → ${JSON.stringify(b)}`);
  }
  // Beyond the search bound (every line differs): still correct, removed then added.
  const a = Array.from({ length: 3000 }, (_, i) => `a${i}\n`).join('');
  const b = Array.from({ length: 3000 }, (_, i) => `b${i}\n`).join('');
  const rows = diffLines(a, b);
  assert.deepEqual(replay(rows), [a, b]);
  assert.deepEqual(stats(rows), { added: 3000, removed: 3000 });
});

test('a small change is found as small', () => {
  const a = 'a\nb\nc\nd\ne\n';
  const b = 'a\nc\nd\nE\ne\n';
  assert.deepEqual(stats(diffLines(a, b)), { added: 1, removed: 1 });
});

test('the server’s unified preview parses to numbered rows', () => {
  // As crates/tools/src/inspect.rs writes it.
  const preview = '--- a (now)\n+++ a (after the edit)\n@@ -8,3 +8,3 @@\n one\n-two\n+2\n three\n@@ -20,2 +20,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n';
  const { rows, cut } = parseUnified(preview);
  assert.equal(cut, null);
  assert.deepEqual(compact(rows), ['… 7', 'ctx 8 8 one', 'del 9 - two', 'add - 9 2', 'ctx 10 10 three', '… 9', 'ctx 20 20 x', 'del 21 - y ⏎̸', 'add - 21 z']);
  assert.equal(parseUnified('The call would fail: no such file'), null);
  assert.deepEqual(parseUnified('--- a\n+++ b\n(no change)\n').rows, []);
  const long = parseUnified('--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n… 3 more lines of the diff not shown (the call\'s arguments hold all of it)\n');
  assert.deepEqual(compact(long.rows), ['add - 1 x', 'add - 2 y']);
  assert.match(long.cut, /3 more lines/);
});

test('a write’s old file is rebuilt from its preview and content, or not at all', () => {
  const old = Array.from({ length: 30 }, (_, i) => `l${i + 1}\n`).join('');
  const content = old.replace('l5\n', 'five\n').replace('l25\n', '').concat('tail');
  const preview = `--- f (now)\n+++ f (after the write)\n${
    // The preview the server would send, with its hunk headers.
    '@@ -2,7 +2,7 @@\n l2\n l3\n l4\n-l5\n+five\n l6\n l7\n l8\n@@ -22,9 +22,8 @@\n l22\n l23\n l24\n-l25\n l26\n l27\n l28\n l29\n l30\n+tail\n\\ No newline at end of file\n'
  }`;
  assert.equal(oldFromPreview(preview, content), old);
  assert.equal(oldFromPreview('--- f (does not exist yet)\n+++ f (after the write)\n@@ -0,0 +1 @@\n+x\n', 'x\n'), '');
  assert.equal(oldFromPreview('--- f (now)\n+++ f (after the write)\n(no change)\n', 'same\n'), 'same\n');
  assert.equal(oldFromPreview('f holds 2 bytes that are not UTF-8 text; the write replaces them with 1 byte.', 'x'), null);
  assert.equal(oldFromPreview('--- f (now)\n+++ f\n@@ -1 +1 @@\n-a\n+b\n… 9 more lines of the diff not shown\n', 'b\n'), null);
});
