// The sidebar's session search: a box at the top of the sidebar that asks
// `GET /api/sessions/search` (titles and message text of the caller's sessions, on the
// server, paged) as the person types, debounced so a word is one request, not one per
// key. Results replace the project list while a query is in the box, each with the
// snippet the server cut around the match, the matched words marked (<mark>, built as
// nodes: the snippet is a person's text, never HTML); Enter or a click opens the
// highlighted one at the message that matched (`open(id, messageIndex)`), arrows move
// the highlight, Esc clears the box and brings the projects back. Answers to an older
// query that arrive late are dropped.

import { get } from './api.js';
import { h } from './dom.js';

const DEBOUNCE_MS = 250;
const PAGE = 20;
/** The server's limit on `q`; the box stops there too. */
const MAX_QUERY = 200;

/** Characters a regular expression gives a meaning to, escaped to mean themselves. */
const escapeRegExp = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * `text` as nodes, every case-insensitive occurrence of `query` in a <mark>. The server
 * matched the query with its whitespace collapsed, so any run of whitespace matches here.
 */
export function marked(text, query) {
  const words = query.trim().split(/\s+/).filter(Boolean).map(escapeRegExp);
  if (!words.length) return [text];
  const nodes = [];
  let at = 0;
  for (const m of text.matchAll(new RegExp(words.join('\\s+'), 'giu'))) {
    nodes.push(text.slice(at, m.index), h('mark', {}, m[0]));
    at = m.index + m[0].length;
  }
  nodes.push(text.slice(at));
  return nodes.filter((n) => n !== '');
}

export class SessionSearch {
  /**
   * `box`: the element to build in; `nav`: the project list hidden while searching;
   * `open(id, messageIndex)`: shows a result (the index is absent when the title matched).
   */
  constructor({ box, nav, open }) {
    this.nav = nav;
    this.show = open ?? ((id) => (location.hash = `#/s/${id}`));
    this.input = h('input', {
      type: 'search', placeholder: 'Search sessions', 'aria-label': 'Search sessions', maxlength: MAX_QUERY,
      autocomplete: 'off', dataset: { testid: 'session-search' },
    });
    this.results = h('ul', { class: 'search-results', role: 'listbox', 'aria-label': 'Matching sessions', hidden: true });
    box.replaceChildren(this.input, this.results);
    this.query = '';
    this.hits = [];
    this.next = null;
    this.active = 0;
    this.asked = 0; // number of the latest request; older answers are dropped
    this.timer = null;
    this.input.addEventListener('input', () => this.typed());
    this.input.addEventListener('keydown', (e) => this.key(e));
  }

  typed() {
    clearTimeout(this.timer);
    const q = this.input.value.trim();
    if (!q) return this.clear(false);
    this.timer = setTimeout(() => this.search(q), DEBOUNCE_MS);
  }

  key(e) {
    if (e.key === 'Escape') {
      e.preventDefault();
      this.clear(true);
    } else if (e.key === 'Enter') {
      e.preventDefault();
      const hit = this.hits[this.active];
      if (hit) this.open(hit);
    } else if ((e.key === 'ArrowDown' || e.key === 'ArrowUp') && this.hits.length) {
      e.preventDefault();
      const step = e.key === 'ArrowDown' ? 1 : -1;
      this.active = (this.active + step + this.hits.length) % this.hits.length;
      this.paint();
    }
  }

  async search(q, cursor = null, retry = true) {
    const n = ++this.asked;
    const params = new URLSearchParams({ q, limit: String(PAGE) });
    if (cursor) params.set('cursor', cursor);
    let page;
    try {
      page = await get(`/api/sessions/search?${params}`);
    } catch (e) {
      if (n !== this.asked) return;
      // The server runs only a few of one person's searches at once: the latest query
      // waits out the refusal once (Retry-After is a second) instead of failing.
      if (e.code === 'too_many_searches' && retry) {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        if (n === this.asked) return this.search(q, cursor, false);
        return;
      }
      this.query = q;
      this.hits = [];
      this.next = null;
      this.error = `Search failed: ${e.message}`;
      return this.paint();
    }
    if (n !== this.asked) return;
    this.error = null;
    if (!cursor) {
      this.query = q;
      this.hits = [];
      this.active = 0;
    }
    this.hits.push(...page.sessions);
    this.next = page.nextCursor ?? null;
    this.paint();
  }

  clear(emptyBox) {
    clearTimeout(this.timer);
    this.asked++;
    if (emptyBox) this.input.value = '';
    this.query = '';
    this.hits = [];
    this.next = null;
    this.error = null;
    this.paint();
  }

  open(hit) {
    this.clear(true);
    this.show(hit.id, hit.matched === 'message' ? hit.messageIndex ?? null : null);
  }

  paint() {
    const searching = Boolean(this.query);
    this.nav.hidden = searching;
    this.results.hidden = !searching;
    if (!searching) return this.results.replaceChildren();
    const items = this.hits.map((hit, i) => h('li', { class: i === this.active ? 'active' : '', role: 'option', 'aria-selected': String(i === this.active), dataset: { sessionId: hit.id } },
      h('button', { type: 'button', onclick: () => this.open(hit) },
        h('span', { class: 'search-title' }, hit.matched === 'title' ? marked(hit.title, this.query) : hit.title || 'New session'),
        hit.matched === 'message' ? h('span', { class: 'search-snippet' }, marked(hit.snippet, this.query)) : null)));
    if (this.error) items.push(h('li', { class: 'search-empty', role: 'alert' }, this.error));
    else if (!this.hits.length) items.push(h('li', { class: 'search-empty' }, `No session mentions “${this.query}”.`));
    if (this.next) {
      items.push(h('li', {}, h('button', { type: 'button', class: 'search-more', onclick: () => this.search(this.query, this.next) }, 'More results')));
    }
    this.results.replaceChildren(...items);
  }
}
