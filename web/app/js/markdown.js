// Markdown HTML from the server (`POST /api/markdown`), cached per text. The page has no
// bundler and fetches nothing from elsewhere, so the Markdown library and its sanitizer
// live in the server; this module only batches and caches. Texts that need HTML are
// asked for together — one request for everything that lacks it, at most one request in
// flight and about four a second, so a streaming answer whose blocks close one after
// another costs a few requests a second, never one per delta. Until a text's HTML is
// here (or when it cannot be: over the server's limit, or the request failed) the
// caller shows its plain rendering.

import { post } from './api.js';

/** The server's limits: texts per request and bytes per text (crates/server). */
const MAX_TEXTS = 64;
const MAX_TEXT_BYTES = 256 * 1024;
/** Keeps a request well under the server's 1 MiB body limit. */
const MAX_BATCH_BYTES = 768 * 1024;
/** The least time between the starts of two requests. */
const SPACING_MS = 250;
/** How many texts' HTML is kept; the oldest go first. */
const CACHE_ENTRIES = 2000;

const encoder = new TextEncoder();
const html = new Map(); // text → sanitized HTML (insertion order = age)
const failed = new Set(); // texts the server refused or could not be asked for
const wanted = new Set(); // texts waiting for the next request
const asked = new Set(); // texts in the request on its way
const listeners = new Set();
let inFlight = false;
let lastStart = -Infinity;
let timer = null;

/** Calls `fn()` whenever new HTML arrived; returns the unsubscribe function. */
export function onRendered(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** True when `text` can be rendered by the server at all. */
export function renderable(text) {
  return text.length <= MAX_TEXT_BYTES && encoder.encode(text).length <= MAX_TEXT_BYTES;
}

/** The HTML of `text` if it is here, without asking for it. */
export function cachedHtml(text) {
  return html.get(text) ?? null;
}

/**
 * The HTML of `text` if it is here. Otherwise `null`, and `text` is asked for (unless it
 * cannot be), in the next batch.
 */
export function htmlOf(text) {
  const found = html.get(text);
  if (found !== undefined) return found;
  if (!failed.has(text) && !wanted.has(text) && !asked.has(text)) {
    if (!renderable(text)) failed.add(text);
    else {
      wanted.add(text);
      schedule();
    }
  }
  return null;
}

function schedule() {
  if (inFlight || timer || wanted.size === 0) return;
  const wait = Math.max(0, lastStart + SPACING_MS - performance.now());
  // A microtask at least, so every text one paint asks for goes into one request.
  timer = setTimeout(send, wait);
}

async function send() {
  timer = null;
  const texts = [];
  let bytes = 0;
  for (const text of wanted) {
    const size = text.length * 3;
    if (texts.length === MAX_TEXTS || (texts.length > 0 && bytes + size > MAX_BATCH_BYTES)) break;
    texts.push(text);
    bytes += size;
  }
  for (const text of texts) {
    wanted.delete(text);
    asked.add(text);
  }
  inFlight = true;
  lastStart = performance.now();
  try {
    const answer = await post('/api/markdown', { texts });
    texts.forEach((text, i) => remember(text, answer.html[i]));
  } catch {
    // The plain rendering stays; a text that failed is not asked for again.
    for (const text of texts) failed.add(text);
  } finally {
    asked.clear();
    inFlight = false;
    schedule();
  }
  for (const fn of listeners) fn();
}

function remember(text, markup) {
  if (typeof markup !== 'string') return failed.add(text);
  html.set(text, markup);
  if (html.size > CACHE_ENTRIES) html.delete(html.keys().next().value);
}

/** A line that starts a list item: `-`, `+`, `*`, `1.` or `1)` and a space (or nothing). */
const LIST_ITEM = /^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)/;
/** A line indented enough to belong to the list item above it. */
const INDENTED = /^(?: {2,}|\t)\S/;

/**
 * Splits a text into top-level Markdown blocks at blank lines outside fenced code.
 * `done` are the blocks a later delta cannot change; `open` is the text after the last
 * blank line (or an unclosed fence), which can still grow into something else. A draft
 * only grows, so each call goes on from where the last one stopped when the new text
 * starts with what was already read: a delta costs its own length, not the answer's.
 *
 * A blank line inside a list does not end it: in a loose list (items separated by blank
 * lines) the next item, or an indented line of the item, goes on with the same list, and
 * rendered apart each item would be a list of its own. So after a blank line in a block
 * that holds a list item, the split waits for the next line: it ends the block there
 * only when that line neither starts an item nor is indented.
 */
export class BlockSplitter {
  constructor() {
    this.reset();
  }

  reset() {
    this.text = '';
    this.done = [];
    this.start = 0; // where the open block starts
    this.at = 0; // the first line not read yet
    this.seen = 0; // how much of the text was searched for line breaks
    this.fence = null; // the open fence's marker (``` or ~~~, at least three)
    this.blockHasText = false;
    this.list = false; // the open block holds a list item
    this.gap = null; // where the blank lines after a list's line start, until the next line decides
  }

  /** `{done, open}` for `text`. */
  split(text) {
    if (!grewFrom(text, this.text)) this.reset();
    this.text = text;
    // The unfinished last line was searched for a line break up to `seen` already.
    let from = Math.max(this.at, this.seen);
    for (;;) {
      const nl = text.indexOf('\n', from);
      if (nl < 0) break; // the last line is unfinished: it belongs to the open block
      this.line(text, this.at, nl);
      this.at = from = nl + 1;
    }
    this.seen = text.length;
    // A list's blank lines, then the start of a line that can no longer become an item
    // or an indented line: the list is over already, before that line is.
    if (this.gap !== null && !this.fence && mustEndList(text.slice(this.at))) this.endList(this.at);
    return { done: this.done, open: text.slice(this.start) };
  }

  /** The list block ends at its blank lines; the next block starts at `at`. */
  endList(at) {
    this.done.push(this.text.slice(this.start, this.gap));
    this.start = at;
    this.list = false;
    this.gap = null;
  }

  line(text, at, nl) {
    const line = text.slice(at, nl);
    if (this.gap !== null && !this.fence && line.trim() !== '') {
      // The line after a list's blank lines: more of the list, or the next block.
      if (!LIST_ITEM.test(line) && !INDENTED.test(line)) this.endList(at);
      this.gap = null;
    }
    const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (this.fence) {
      if (marker && marker[0] === this.fence[0] && marker.length >= this.fence.length && line.trim() === marker) this.fence = null;
      this.blockHasText = true;
    } else if (marker && !(marker[0] === '`' && line.slice(line.indexOf(marker) + marker.length).includes('`'))) {
      this.fence = marker;
      this.blockHasText = true;
    } else if (line.trim() === '') {
      if (this.list) {
        this.gap ??= at;
        return;
      }
      if (this.blockHasText) this.done.push(text.slice(this.start, at));
      this.start = nl + 1;
      this.blockHasText = false;
    } else {
      this.blockHasText = true;
      if (LIST_ITEM.test(line)) this.list = true;
    }
  }
}

/**
 * True when `partial`, the start of a line, can no longer become a list item or an
 * indented line, whatever follows: it starts with a character that is neither a space
 * nor the beginning of an item marker (`-`, `+`, `*`, digits then `.` or `)`).
 */
function mustEndList(partial) {
  if (partial === '' || /^\s/.test(partial)) return false;
  return !LIST_ITEM.test(partial) && !/^(?:[-+*]|\d{1,9}[.)]?)$/.test(partial);
}

/**
 * True when `text` is `before` with something appended. A draft only grows at its end
 * (deltas apply at their offset; a snapshot of the same stream carries the same text),
 * so the end of `before` in place stands for all of it: comparing whole texts would cost
 * the answer's length on every paint.
 */
export function grewFrom(text, before) {
  const tail = Math.min(before.length, 256);
  return text.length >= before.length && text.startsWith(before.slice(before.length - tail), before.length - tail);
}

/** `text`'s blocks, read from the start (see BlockSplitter). */
export function splitBlocks(text) {
  return new BlockSplitter().split(text);
}
