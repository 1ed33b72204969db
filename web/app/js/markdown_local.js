// Markdown rendered in the page, for the text the server has not rendered (yet): the
// block of a streaming answer that is still being written, rendered again on each paint
// while it grows, and a finished block until its HTML comes back (markdown.js).
//
// It is as safe as the server's sanitized HTML by construction: the result is built from
// elements and text nodes (dom.js), nothing is parsed as HTML, raw HTML in the Markdown
// shows as text (as the server shows it), and a link is a link only for `http:`,
// `https:`, `mailto:` or no scheme (the server's rule), with the server's `target` and
// `rel`. It covers what answers use, CommonMark's blocks and inlines with GFM tables,
// strikethrough and task lists, with the elements and classes the server writes, so the
// server's HTML takes its place without a jump; what is rarer (HTML blocks, reference
// links) stays text until then.
//
// `open`: the text is the end of a draft, and its last line may be half written. What
// cannot be told yet is held back rather than shown raw: a last line that is only a
// marker (`-`, `1.`, `#`, `>`, the first backticks of a fence, `|--`), a table's header
// row until the row under it says whether it is one, a delimiter run at the very end
// (the first `*` of a closing `**`). Emphasis, strikethrough or a code span still open at
// the end shows as if it closed there, so `**bo` is already bold and never `**bo`.

import { h } from './dom.js';

/** `text` as block elements. */
export function renderLocal(text, open = false) {
  const lines = text.split('\n');
  // A draft's half-written last line that is only a marker so far shows nothing yet.
  if (open && PENDING.test(lines.at(-1))) lines[lines.length - 1] = '';
  return blocks(lines, open).nodes;
}

/** A last line that may still become any of several things. */
const PENDING = /^ {0,3}(?:[-+*]|\d{1,9}[.)]?|#{1,6}|>|`{1,2}|~{1,2}|[-*_=]{2,}|\*\*)[ \t]*$/;

const FENCE = /^( {0,3})(`{3,}|~{3,})(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-+*]|\d{1,9}[.)])(?:([ \t]+)(.*))?$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;
const DELIMITER_ROW = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
/** What a delimiter row may be on its way to: held back with its header. */
const DELIMITER_START = /^ {0,3}\|?[ \t:|-]*$/;
const blank = (line) => line.trim() === '';
const indentOf = (line) => line.length - line.trimStart().length;

function fenceOpener(line) {
  const m = FENCE.exec(line);
  if (!m || (m[2][0] === '`' && m[3].includes('`'))) return null;
  return { indent: m[1].length, marker: m[2], info: m[3].trim() };
}

/** True when `line` starts a block that ends a paragraph. */
function interrupts(line) {
  if (fenceOpener(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)) return true;
  const item = ITEM.exec(line);
  // An empty item, or a numbered one not starting at 1, cannot end a paragraph.
  return Boolean(item && item[4]?.trim() && (/^[-+*]$/.test(item[2]) || parseInt(item[2], 10) === 1));
}

/**
 * `lines` as elements: `{nodes, gaps}`, where `gaps` says whether a blank line stood
 * between two of the blocks (what makes a list loose). With `open`, the last line is
 * where the draft ends.
 */
function blocks(lines, open) {
  const nodes = [];
  let gaps = false;
  let pendingGap = false;
  let para = null;
  const last = lines.length - 1;
  const push = (node) => {
    if (pendingGap && nodes.length > 0) gaps = true;
    pendingGap = false;
    nodes.push(node);
  };
  const endPara = (atEnd) => {
    if (para) push(h('p', {}, inline(para.join('\n').trim(), open && atEnd)));
    para = null;
  };
  let i = 0;
  while (i <= last) {
    const line = lines[i];
    if (para) {
      const setext = SETEXT.exec(line);
      // An underline is one only once its line is complete.
      if (setext && !(open && i === last)) {
        push(h(setext[1][0] === '=' ? 'h1' : 'h2', {}, inline(para.join('\n').trim(), false)));
        para = null;
        i++;
        continue;
      }
      if (!blank(line) && !interrupts(line)) {
        para.push(line.trimStart());
        i++;
        continue;
      }
      endPara(false);
    }
    if (blank(line)) {
      pendingGap = true;
      i++;
      continue;
    }
    const fence = fenceOpener(line);
    if (fence) {
      i = codeBlock(lines, i, fence, open, push);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      push(h(`h${heading[1].length}`, {}, inline(heading[2] ?? '', open && i === last)));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      push(h('hr'));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i <= last && (QUOTE.test(lines[i]) || (inner.length && !blank(lines[i]) && !blank(inner.at(-1)) && !interrupts(lines[i])))) {
        inner.push(QUOTE.exec(lines[i])?.[1] ?? lines[i]);
        i++;
      }
      push(h('blockquote', {}, blocks(inner, open && i > last).nodes));
      continue;
    }
    if (ITEM.test(line)) {
      i = list(lines, i, open, push);
      continue;
    }
    if (indentOf(line) >= 4) {
      const body = [];
      while (i <= last && (blank(lines[i]) || indentOf(lines[i]) >= 4)) body.push(lines[i++].slice(4));
      while (body.length && blank(body.at(-1))) body.pop();
      push(codeElement(null, body.join('\n')));
      continue;
    }
    if (line.includes('|')) {
      const table = tableAt(lines, i, open);
      if (table === HOLD) break;
      if (table) {
        push(table.el);
        i = table.next;
        continue;
      }
    }
    para = [line.trimStart()];
    i++;
  }
  endPara(true);
  return { nodes, gaps };
}

/** A fenced code block from `lines[i]`; returns the index after it. */
function codeBlock(lines, i, fence, open, push) {
  const last = lines.length - 1;
  const body = [];
  let j = i + 1;
  let closed = false;
  for (; j <= last; j++) {
    const line = lines[j];
    const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(line);
    if (close && close[1][0] === fence.marker[0] && close[1].length >= fence.marker.length && !(open && j === last)) {
      closed = true;
      break;
    }
    body.push(fence.indent ? line.replace(new RegExp(`^ {0,${fence.indent}}`), '') : line);
  }
  if (open && !closed) {
    // The draft's last line: what may be the closing fence coming, or nothing yet.
    const tail = body.at(-1);
    if (tail !== undefined && (tail === '' || new RegExp(`^ {0,3}\\${fence.marker[0]}+[ \\t]*$`).test(tail))) body.pop();
  }
  // A language only once its line is complete: `rus` is not yet `rust`.
  const lang = open && i === last ? null : fence.info.split(/\s+/)[0];
  push(codeElement(lang, body.join('\n')));
  return closed ? j + 1 : j;
}

/** The server's code block: `<pre class="code" data-lang><code>`. */
function codeElement(lang, body) {
  const known = lang && /^[A-Za-z0-9+\-_.#]{1,32}$/.test(lang) ? lang : null;
  return h('pre', { class: 'code', 'data-lang': known }, h('code', {}, body));
}

/** The header is held back until the row under it says what it is. */
const HOLD = Symbol('hold');

function cells(row) {
  let text = row.trim();
  if (text.startsWith('|')) text = text.slice(1);
  if (text.endsWith('|') && !text.endsWith('\\|')) text = text.slice(0, -1);
  return text.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

/** A GFM table starting at `lines[i]`, `HOLD`, or null when it is not one. */
function tableAt(lines, i, open) {
  const last = lines.length - 1;
  const head = cells(lines[i]);
  const under = lines[i + 1];
  const complete = under !== undefined && DELIMITER_ROW.test(under) && cells(under).length === head.length;
  if (!complete) {
    // A header row of a draft, with nothing or the start of a delimiter row under it.
    const waiting = open && lines[i].trimStart().startsWith('|') && (i === last || (i + 1 === last && DELIMITER_START.test(under)));
    return waiting ? HOLD : null;
  }
  const align = cells(under).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'align-center' : c.endsWith(':') ? 'align-right' : c.startsWith(':') ? 'align-left' : null));
  const row = (tag, texts, atEnd) =>
    h('tr', {}, head.map((_, k) => h(tag, { class: align[k] }, inline(texts[k] ?? '', atEnd && k === texts.length - 1))));
  const body = [];
  let j = i + 2;
  for (; j <= last && !blank(lines[j]) && !interrupts(lines[j]); j++) {
    if (open && j === last && DELIMITER_START.test(lines[j]) && lines[j].trim().length <= 1) break; // a row's first `|`
    body.push(row('td', cells(lines[j]), open && j === last));
  }
  return { el: h('table', {}, h('thead', {}, row('th', head, false)), body.length ? h('tbody', {}, body) : null), next: j };
}

/** A list from `lines[i]`; returns the index after it. */
function list(lines, i, open, push) {
  const last = lines.length - 1;
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const kind = first[2].at(-1);
  const items = [];
  let loose = false;
  while (i <= last) {
    const m = ITEM.exec(lines[i]);
    if (!m || /\d/.test(m[2]) !== ordered || m[2].at(-1) !== kind || RULE.test(lines[i])) break;
    const spaces = (m[3] ?? ' ').length;
    const width = m[1].length + m[2].length + (spaces > 4 ? 1 : spaces);
    const content = [spaces > 4 ? m[3].slice(1) + m[4] : (m[4] ?? '')];
    let j = i + 1;
    for (; j <= last; j++) {
      const line = lines[j];
      if (blank(line)) content.push('');
      else if (indentOf(line) >= width) content.push(line.slice(width));
      else if (!ITEM.test(line) && !blank(content.at(-1)) && !interrupts(line) && !fenceOpener(content[0])) content.push(line.trimStart());
      else break;
    }
    // Blank lines at the item's end go between it and what follows.
    let end = content.length;
    while (end > 1 && blank(content[end - 1])) end--;
    const gapAfter = end < content.length && j <= last && ITEM.test(lines[j]);
    const atEnd = open && j > last;
    // A draft's `- [` or `- [x]` is a task's box on its way.
    const half = atEnd && end === 1 ? /^\[([ xX]?)\]?$/.exec(content[0].trim()) : null;
    if (half) content[0] = '';
    const inner = blocks(content.slice(0, end), atEnd);
    const task = half ? { checked: half[1] !== '' && half[1] !== ' ', half: true } : /^\[([ xX])\](?:[ \t]|$)/.exec(content[0]) && { checked: !/^\[ /.test(content[0]) };
    items.push({ inner, task });
    loose ||= inner.gaps || gapAfter;
    i = j;
    if (!gapAfter && end < content.length) break;
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  push(h(ordered ? 'ol' : 'ul', { start: start !== 1 ? start : null }, items.map((item) => listItem(item, loose))));
  return i;
}

function listItem({ inner, task }, loose) {
  const nodes = inner.nodes.flatMap((node) => (!loose && node.tagName === 'P' ? [...node.childNodes] : [node]));
  if (task) {
    // `[x] ` opens the item's first paragraph: a disabled checkbox, as the server writes.
    const box = h('input', { type: 'checkbox', disabled: true, checked: task.checked });
    const host = loose ? nodes[0] : null;
    const children = host ? host.childNodes : nodes;
    const text = children[0];
    if (task.half) nodes.unshift(box);
    else if (text?.nodeType === Node.TEXT_NODE && /^\[[ xX]\]/.test(text.data)) {
      text.data = text.data.replace(/^\[[ xX]\][ \t]?/, '');
      if (host) host.prepend(box);
      else nodes.unshift(box);
    }
  }
  return h('li', {}, nodes);
}

// Inlines.

const PUNCT = /[!-/:-@[-`{-~\p{P}\p{S}]/u;
const ESCAPABLE = /[!-/:-@[-`{-~]/;
/** The characters inline() looks at; the text between them is copied as it is. */
const SPECIAL = /[\\`[!<&\n*_~]/g;
const ENTITIES = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };
const LINK_REL = 'noopener noreferrer nofollow';
const TAGS = { '*': ['em', 'strong'], _: ['em', 'strong'], '~': ['del', 'del'] };

/** The server's rule (crates/server/src/markdown.rs): http, https, mailto or no scheme. */
function safeHref(dest) {
  const d = dest.replace(/^[\s\u0000-\u001f]+/, '');
  const colon = d.indexOf(':');
  if (colon < 0 || /[/?#]/.test(d.slice(0, colon))) return true;
  return ['http', 'https', 'mailto'].includes(d.slice(0, colon).toLowerCase());
}

function link(dest, children) {
  return safeHref(dest) ? h('a', { href: dest, target: '_blank', rel: LINK_REL }, children) : children;
}

/** A `[text](dest)` (or `![alt](dest)`) at `at`: `{end, text, dest}` or null. */
function linkAt(text, at) {
  const open = text[at] === '!' ? at + 1 : at;
  let depth = 0;
  let k = open;
  for (; k < text.length; k++) {
    if (text[k] === '\\') k++;
    else if (text[k] === '[') depth++;
    else if (text[k] === ']' && --depth === 0) break;
  }
  if (k >= text.length) return null;
  const m = /^\(\s*(<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+("[^"]*"|'[^']*'))?\s*\)/.exec(text.slice(k + 1));
  if (!m) return null;
  return { end: k + 1 + m[0].length, label: text.slice(open + 1, k), dest: m[1].replace(/^<|>$/g, '') };
}

/**
 * `text` as inline nodes. With `open`, the text ends where the draft does: a trailing
 * delimiter run is held back and what is still open shows as if it closed at the end.
 */
export function inline(text, open = false) {
  const items = []; // strings, nodes and delimiter runs
  let buf = '';
  const flush = () => {
    if (buf) items.push(buf);
    buf = '';
  };
  for (let i = 0; i < text.length; ) {
    const c = text[i];
    if (c === '\\' && i + 1 < text.length && (ESCAPABLE.test(text[i + 1]) || text[i + 1] === '\n')) {
      if (text[i + 1] === '\n') {
        flush();
        items.push(h('br'));
      } else buf += text[i + 1];
      i += 2;
    } else if (c === '`') {
      const run = '`'.repeat(runLength(text, i));
      const close = text.indexOf(run, i + run.length);
      let end = close;
      // A closing run must be exactly as long.
      while (end >= 0 && text[end + run.length] === '`') {
        end = text.indexOf(run, end + runLength(text, end));
      }
      if (end >= 0 || (open && i + run.length < text.length)) {
        flush();
        items.push(h('code', {}, codeText(text.slice(i + run.length, end >= 0 ? end : text.length))));
        i = end >= 0 ? end + run.length : text.length;
      } else if (open && i + run.length === text.length) {
        i = text.length; // a span's first backticks, its text not here yet
      } else {
        buf += run;
        i += run.length;
      }
    } else if (c === '[' || (c === '!' && text[i + 1] === '[')) {
      const found = linkAt(text, i);
      const partial = open && /^!?\[([^[\]\n]*)\](?:\([^)]*)?$/.exec(text.slice(i));
      if (found) {
        flush();
        const label = c === '!' ? [found.label] : inline(found.label);
        items.push(...[link(found.dest, label)].flat());
        i = found.end;
      } else if (partial) {
        // `[text](http://ex` of a draft: the link's text, its address still coming.
        flush();
        items.push(...inline(partial[1], false));
        i = text.length;
      } else {
        buf += c;
        i++;
      }
    } else if (c === '<') {
      const auto = /^<((?:https?|mailto):[^\s<>]*)>/i.exec(text.slice(i));
      if (auto) {
        flush();
        items.push(...[link(auto[1], [auto[1]])].flat());
        i += auto[0].length;
      } else {
        buf += c;
        i++;
      }
    } else if (c === '&') {
      const m = /^&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|([a-z]+));/.exec(text.slice(i));
      const code = m && (m[1] ? parseInt(m[1], 10) : m[2] ? parseInt(m[2], 16) : null);
      const ch = m && (code !== null ? (code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : '\ufffd') : ENTITIES[m[3]]);
      buf += ch ?? c;
      i += ch ? m[0].length : 1;
    } else if (c === '\n') {
      const hard = / {2,}$/.test(buf);
      buf = buf.replace(/ +$/, '');
      if (hard) {
        flush();
        items.push(h('br'));
      } else buf += '\n';
      i++;
    } else if (c === '*' || c === '_' || c === '~') {
      const run = c.repeat(runLength(text, i));
      const before = i > 0 ? text[i - 1] : ' ';
      const after = i + run.length < text.length ? text[i + run.length] : ' ';
      const left = !/\s/.test(after) && (!PUNCT.test(after) || /\s/.test(before) || PUNCT.test(before));
      const right = !/\s/.test(before) && (!PUNCT.test(before) || /\s/.test(after) || PUNCT.test(after));
      flush();
      items.push({
        ch: c,
        count: run.length,
        length: run.length,
        atEnd: i + run.length === text.length,
        canOpen: c === '_' ? left && (!right || PUNCT.test(before)) : left,
        canClose: c === '_' ? right && (!left || PUNCT.test(after)) : right,
      });
      i += run.length;
    } else {
      // Up to the next character that may mean something.
      SPECIAL.lastIndex = i + 1;
      const next = SPECIAL.test(text) ? SPECIAL.lastIndex - 1 : text.length;
      buf += text.slice(i, next);
      i = next;
    }
  }
  flush();
  if (open && items.at(-1)?.atEnd) items.pop(); // may be the start of a closing run
  emphasis(items, open);
  return items.map((item) => (typeof item === 'string' || item instanceof Node ? item : item.ch.repeat(item.count)));
}

/** How many times the character at `at` repeats from there. */
function runLength(text, at) {
  let end = at + 1;
  while (text[end] === text[at]) end++;
  return end - at;
}

/** A code span's text: line breaks are spaces, and one space each side is trimmed. */
function codeText(raw) {
  const text = raw.replace(/\n/g, ' ');
  return /^ .*[^ ].* $/.test(text) ? text.slice(1, -1) : text;
}

const isRun = (item) => item && typeof item === 'object' && !(item instanceof Node);

/** CommonMark's delimiter matching, over `items` in place; open runs close at the end when `open`. */
function emphasis(items, open) {
  for (let c = 0; c < items.length; c++) {
    const closer = items[c];
    if (!isRun(closer) || !closer.canClose) continue;
    for (let o = c - 1; o >= 0 && closer.count > 0; o--) {
      const opener = items[o];
      if (!isRun(opener) || !opener.canOpen || opener.ch !== closer.ch || opener.count === 0) continue;
      if (closer.ch === '~' ? opener.count !== closer.count || closer.count > 2 : (opener.canClose || closer.canOpen) && (opener.length + closer.length) % 3 === 0 && (opener.length % 3 || closer.length % 3)) continue;
      const n = closer.ch === '~' ? closer.count : opener.count >= 2 && closer.count >= 2 ? 2 : 1;
      c -= wrap(items, o, c, n);
      o = c; // look again from the closer, now nearer
    }
  }
  if (!open) return;
  // Still open at the end of a draft: as if closed there, the innermost first.
  for (let o = items.length - 1; o >= 0; o--) {
    const opener = items[o];
    if (!isRun(opener) || !opener.canOpen || opener.count === 0 || o === items.length - 1) continue;
    if (opener.ch === '~' && opener.count > 2) continue;
    while (opener.count > 0) wrap(items, o, items.length, opener.ch === '~' ? opener.count : Math.min(opener.count, 2));
  }
}

/** Wraps what lies between the runs at `o` and `c` in an element; returns how many items went. */
function wrap(items, o, c, n) {
  const opener = items[o];
  const inner = items.slice(o + 1, c).map((item) => (isRun(item) ? item.ch.repeat(item.count) : item));
  const el = h(TAGS[opener.ch][n - 1], {}, inner);
  opener.count -= n;
  const closer = items[c];
  if (closer) closer.count -= n;
  const removed = c - o - 1;
  items.splice(o + 1, removed, el);
  let gone = removed - 1;
  if (closer && closer.count === 0) {
    items.splice(o + 2, 1);
    gone++;
  }
  if (opener.count === 0) {
    items.splice(o, 1);
    gone++;
  }
  return gone;
}
