// An answer's text on the page. `TextView` shows Markdown as the server rendered and
// sanitized it (markdown.js); until that HTML is here, or instead of it when it cannot
// be (a failed request), the page renders the Markdown itself (markdown_local.js: built
// as elements, never parsed as HTML, so just as safe). Only a text over the server's
// limit shows plain: its line breaks kept, in chunks.
//
// A streaming draft is rendered block by block: the blocks before the last blank line
// (outside fenced code) cannot change any more, so each is rendered once and its
// elements kept; the last, open block is rendered in the page again on each paint while
// it grows (a list as a list, an unclosed fence as code, a table once its delimiter row
// is here), holding back what is only half written, so no raw Markdown of it shows; its
// new rendering is patched into the elements it has, so what did not change is not laid
// out again. An open block over LOCAL_CHARS shows plain, each delta appended (see
// appendPlain): a long answer never renders much text again per delta.

import { h } from './dom.js';
import { icon } from './icons.js';
import { BlockSplitter, cachedHtml, grewFrom, htmlOf, onRendered, renderable } from './markdown.js';
import { renderLocal } from './markdown_local.js';

/**
 * The longest open block rendered in the page on each paint; a longer one shows plain.
 * A code block costs little to render (one text node, no inlines): it may be longer.
 */
const LOCAL_CHARS = 16 * 1024;
const LOCAL_CODE_CHARS = 128 * 1024;

/** True when the page renders this open block (see LOCAL_CHARS). */
function localOpen(source) {
  return source.length <= LOCAL_CHARS || (source.length <= LOCAL_CODE_CHARS && /^ {0,3}(?:`{3,}|~{3,})/.test(source));
}

/**
 * One text block of one message, kept across repaints: the timeline keeps this view's
 * element in the answer's article and refills the article around it.
 */
export class TextView {
  constructor() {
    this.el = h('div', { class: 'text' });
    this.splitter = new BlockSplitter();
    this.parts = []; // [{source, html: bool, el}] in order
    this.text = null;
    this.draft = false;
  }

  /** Shows `text`; `draft` while it is still streaming. Cheap when nothing changed. */
  update(text, draft) {
    this.text = text;
    this.draft = draft;
    if (!draft && renderable(text)) {
      // A committed answer is rendered whole (lists and references span blank lines).
      const markup = htmlOf(text);
      if (markup !== null) return this.show([{ source: text, markup }]);
      // Until its HTML is here, the blocks the draft already showed rendered stay so.
      return this.show(this.blocks(text, false, cachedHtml));
    }
    // A draft, or an answer too long for the server: block by block.
    return this.show(this.blocks(text, draft, htmlOf));
  }

  /** `text`'s blocks with the HTML `lookup` has for them; an open draft block has none. */
  blocks(text, draft, lookup) {
    const { done, open } = this.splitter.split(text);
    const parts = done.map((source) => ({ source, markup: lookup(source) }));
    // A block too long for the server stays as the draft showed it, plain, in chunks.
    if (draft || (open && !renderable(open))) parts.push({ source: open, markup: null, open: true });
    else if (open) parts.push({ source: open, markup: lookup(open) });
    return parts;
  }

  /** Makes the element show `parts`, replacing only the parts that changed. */
  show(parts) {
    parts.forEach(({ source, markup, open = false }, i) => {
      const kind = markup !== null ? 'html' : !open ? 'local' : localOpen(source) ? 'open' : 'plain';
      const part = this.parts[i];
      if (part && part.source === source && part.kind === kind) return;
      if (kind === 'plain' && part?.kind === 'plain' && grewFrom(source, part.source)) {
        // The open block grew by a delta: append it, rather than rebuild the block.
        appendPlain(part.el, source.slice(part.source.length));
        part.source = source;
        return;
      }
      if (kind === 'open' && part?.kind === 'open') {
        // The open block changed: its new rendering is patched into the elements it
        // has, so what did not change (earlier items, rows, lines) is not laid out again.
        patch(part.el, [...withCopyButtons(h('div', {}, renderLocal(source, true))).childNodes]);
        part.source = source;
        return;
      }
      let el;
      if (kind === 'html') el = rendered(markup);
      else if (kind === 'plain') appendPlain((el = h('div', { class: 'plain open' })), source);
      else el = withCopyButtons(h('div', { class: 'md is-local' }, renderLocal(source, kind === 'open')));
      if (part) part.el.replaceWith(el);
      else this.el.append(el);
      this.parts[i] = { source, kind, el };
    });
    for (const part of this.parts.splice(parts.length)) part.el.remove();
    return this.el;
  }

  /** Shows HTML that arrived since the last update; true when something changed. */
  refresh() {
    if (this.text === null) return false;
    const before = this.parts.filter((p) => p.kind === 'html').length;
    this.update(this.text, this.draft);
    return this.parts.filter((p) => p.kind === 'html').length !== before;
  }
}

/**
 * A finished text shown on its own (a plan on its card), rendered whole: the page's
 * rendering at once, the server's HTML once it comes.
 */
export function markdownBlock(text) {
  const view = new TextView();
  view.update(text, false);
  if (cachedHtml(text) === null && renderable(text)) {
    const stop = onRendered(() => {
      view.refresh();
      if (cachedHtml(text) !== null) stop();
    });
  }
  return view.el;
}

/** Once a chunk of an open block is this long it ends at its last line break (or, at
 * twice this with no line break, at its last space), and the rest starts the next. */
const CHUNK_CHARS = 4096;

/**
 * Appends `text` to an open block's plain text, kept in chunks of a few KiB, each its own
 * block element: the browser then lays out only the last chunk when a delta arrives,
 * not the whole block (one text node of a 200,000-word answer is re-laid out whole on
 * every change). Chunks end after a line break, which shows nothing; only a single line
 * longer than twice a chunk is cut at a space, where it wraps a little early.
 */
function appendPlain(block, text) {
  for (let at = 0; at < text.length; at += CHUNK_CHARS) {
    const last = block.lastChild ?? block.appendChild(chunk(''));
    last.firstChild.appendData(text.slice(at, at + CHUNK_CHARS));
    const data = last.firstChild.data;
    if (data.length < CHUNK_CHARS) continue;
    let cut = data.lastIndexOf('\n') + 1;
    if (cut === 0 && data.length >= 2 * CHUNK_CHARS) cut = data.lastIndexOf(' ') + 1;
    if (cut === 0) continue;
    // What follows the cut starts the next chunk (which may be empty until the next delta).
    last.firstChild.deleteData(cut, data.length - cut);
    block.appendChild(chunk(data.slice(cut)));
  }
}

function chunk(text) {
  return h('div', { class: 'chunk' }, document.createTextNode(text));
}

/**
 * Makes `parent`'s children look like `nodes` (new, not in the document), keeping every
 * node that is the same element (tag and attributes) or a text node, and changing only
 * what differs: a delta then touches the end of a block, not all of it. A kept code
 * block's copy button is the old one, which copies the kept (updated) code.
 */
function patch(parent, nodes) {
  const old = [...parent.childNodes];
  nodes.forEach((node, i) => {
    const was = old[i];
    if (was && sameNode(was, node)) {
      if (node.nodeType === Node.TEXT_NODE) {
        if (was.data !== node.data) was.data = node.data;
      } else {
        patch(was, [...node.childNodes]);
      }
    } else if (was) {
      parent.replaceChild(node, was);
    } else {
      parent.appendChild(node);
    }
  });
  for (const extra of old.slice(nodes.length)) extra.remove();
}

function sameNode(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType === Node.TEXT_NODE) return true;
  if (a.tagName !== b.tagName || a.attributes.length !== b.attributes.length) return false;
  return [...a.attributes].every((attr) => b.getAttribute(attr.name) === attr.value);
}

/** The server's sanitized HTML as elements. */
function rendered(markup) {
  const box = h('div', { class: 'md' });
  // Without the line break after the last block, the answer's text ends where it does.
  box.innerHTML = markup.trimEnd();
  return withCopyButtons(box);
}

/** `box` with a copy button on each of its code blocks. */
function withCopyButtons(box) {
  for (const pre of box.querySelectorAll('pre')) {
    const wrap = h('div', { class: 'code-wrap' });
    pre.replaceWith(wrap);
    wrap.append(pre, copyButton('Copy code', () => pre.querySelector('code')?.textContent ?? pre.textContent));
  }
  return box;
}

/** An icon button that puts `source()` on the clipboard and says so for a moment. */
export function copyButton(label, source, text = null) {
  const button = h('button', { class: `copy-btn${text ? ' with-label' : ''}`, type: 'button', title: label, 'aria-label': label },
    icon('copy'), text ? h('span', { class: 'copy-label' }, text) : null);
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(source());
      button.classList.add('is-copied');
      button.title = 'Copied';
      setTimeout(() => {
        button.classList.remove('is-copied');
        button.title = label;
      }, 1500);
    } catch {
      button.title = 'Copying is not allowed here';
    }
  });
  return button;
}
