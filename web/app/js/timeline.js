// Timeline: paints one SessionStore as the conversation column. Rows are cached by
// message index and rebuilt only when the store bumped that row's revision (or after a
// snapshot), so streaming repaints one row per animation frame, not the whole history.
// Open/closed toggles and an approval card's half-typed message survive repaints.
// Prompts queued behind the run (Enter while it goes) show last, each with a remove button.

import { h, reconcile } from './dom.js';
import { icon } from './icons.js';
import { renderText } from './text.js';
import { toolCard, approvalCard, updateApproval } from './cards.js';
import { duration } from './format.js';
import { usageLines } from './usage.js';

/** What a person should do about a run that ended this way (by its error code). */
const ENDINGS = {
  tool_outcome_unknown: 'Check whether its change happened before asking for it again.',
  server_restarted: 'What streamed before the restart is kept above; send the prompt again to continue.',
};

export class Timeline {
  constructor(scroller, { onLoadEarlier, decide, removeQueued, examples }) {
    this.scroller = scroller;
    this.list = h('div', { class: 'rows' });
    scroller.replaceChildren(this.list);
    this.onLoadEarlier = onLoadEarlier;
    this.decide = decide;
    this.removeQueued = removeQueued;
    this.removing = new Set(); // ids of queued prompts whose removal is on its way
    this.examples = examples;
    this.rows = new Map(); // index → {key, el}
    this.open = new Map(); // details key → open
    this.cards = new Map(); // approvalId → element
    this.ui = new Map(); // approvalId → {busy, error}
    this.loadingEarlier = false;
  }

  paint(store) {
    const stick = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 80;
    const nodes = [];
    if (!store.loaded) nodes.push(h('div', { class: 'placeholder' }, h('span', { class: 'spinner' }), 'Loading the conversation…'));
    const known = store.firstKnown();
    if (store.loaded && known > 0) nodes.push(this.earlierButton(known));
    const calls = new Set();
    for (const m of [...store.messages.values(), ...store.drafts.values()]) {
      if (m.role === 'assistant') for (const c of m.content) if (c.type === 'toolCall') calls.add(c.id);
    }
    const waiting = new Set(store.approvals.map((a) => a.toolCallId));
    let round = null;
    const usage = usageLines(store);
    const indexes = store.indexes();
    for (const i of indexes) {
      const m = store.drafts.get(i) ?? store.messages.get(i);
      if (m.role === 'user') {
        if (round !== null) nodes.push(this.timing(store, round), usage.get(round));
        round = i;
      }
      if (m.role === 'toolResult' && calls.has(m.toolCallId)) continue;
      nodes.push(this.row(store, i, m, waiting));
    }
    if (round !== null) nodes.push(this.timing(store, round), usage.get(round));
    if (store.loaded && indexes.length === 0) nodes.push(this.empty());
    const running = [...store.tools.values()].some((t) => t.status === 'running' && calls.has(t.toolCallId));
    if (store.status === 'busy' && store.drafts.size === 0 && !running && store.approvals.length === 0) {
      nodes.push(h('div', { class: 'working' }, h('span', { class: 'dots' }, h('i'), h('i'), h('i')), 'Working…'));
    }
    if (store.notice) nodes.push(h('div', { class: 'run-notice', role: 'status' }, store.notice));
    nodes.push(...this.approvals(store));
    nodes.push(this.queued(store));
    reconcile(this.list, nodes);
    if (stick) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  row(store, i, m, waiting) {
    const draft = store.drafts.has(i);
    const key = `${store.epoch}:${store.revs.get(i) ?? 0}:${draft}:${m.role === 'assistant' ? this.waitKey(m, waiting) : ''}`;
    const cached = this.rows.get(i);
    if (cached && cached.key === key) return cached.el;
    const el = this.message(store, i, m, draft, waiting);
    this.rows.set(i, { key, el });
    return el;
  }

  waitKey(m, waiting) {
    return m.content.filter((c) => c.type === 'toolCall' && waiting.has(c.id)).map((c) => c.id).join(',');
  }

  message(store, i, m, draft, waiting) {
    const attrs = { class: `msg ${m.role}${draft ? ' is-draft' : ''}`, dataset: { index: i, role: m.role } };
    if (m.role === 'user') {
      const text = m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
      return h('article', attrs, h('div', { class: 'bubble' }, text));
    }
    if (m.role === 'toolResult') {
      const exec = store.tools.get(m.toolCallId);
      return h('article', attrs, toolCard({ id: m.toolCallId, name: m.toolName, args: exec?.args, exec, open: this.open }));
    }
    const blocks = m.content.map((c, ci) => this.block(store, i, ci, c, draft, waiting));
    if (draft && m.content.length === 0) blocks.push(h('span', { class: 'dots' }, h('i'), h('i'), h('i')));
    if (m.stopReason === 'error') blocks.push(h('p', { class: 'msg-error' }, m.errorMessage ?? 'The model failed.'));
    if (m.stopReason === 'aborted') blocks.push(h('p', { class: 'msg-note' }, 'Stopped.'));
    return h('article', attrs, h('div', { class: 'avatar', 'aria-hidden': 'true' }, 'S'), h('div', { class: 'body' }, blocks));
  }

  block(store, i, ci, c, draft, waiting) {
    if (c.type === 'text') return h('div', { class: 'text' }, renderText(c.text));
    if (c.type === 'thinking') {
      const key = `${i}:${ci}:thinking`;
      const d = h('details', { class: 'thinking', open: this.open.get(key) ?? false },
        h('summary', {}, draft ? 'Thinking…' : 'Thought process'),
        h('div', { class: 'thinking-text' }, c.thinking));
      d.addEventListener('toggle', () => this.open.set(key, d.open));
      return d;
    }
    if (c.type === 'toolCall') {
      const streaming = draft && typeof c.arguments === 'string';
      return toolCard({ id: c.id, name: c.name, args: c.arguments, exec: store.tools.get(c.id), waiting: waiting.has(c.id), streaming, open: this.open });
    }
    return null;
  }

  timing(store, u) {
    const t = store.timings.get(u);
    if (!t) return null;
    const end = t.endedAt ?? Date.now();
    const first = t.firstTokenAt ? ` · first token after ${duration(t.firstTokenAt - t.startedAt)}` : '';
    const took = duration(end - t.startedAt);
    if (t.endedAt && (t.status === 'failed' || t.status === 'cancelled')) return this.ending(t, took);
    const text = t.endedAt ? `Answered in ${took}${first}` : `Working for ${took}${first}`;
    return h('div', { class: 'timing', dataset: { userIndex: u } }, icon('clock'), text);
  }

  /** A run that did not complete says how it ended and what that means for the person. */
  ending(t, took) {
    const verb = t.status === 'failed' ? 'Failed' : 'Stopped';
    const why = t.error?.message ? `: ${t.error.message}` : '';
    const hint = ENDINGS[t.error?.code] ?? null;
    return h('div', { class: `timing ended ${t.status}`, dataset: { userIndex: t.userMessageIndex, code: t.error?.code ?? '' } },
      icon('clock'),
      h('span', {}, `${verb} after ${took}${why}.`, hint ? h('span', { class: 'hint-text' }, ` ${hint}`) : null));
  }

  earlierButton(known) {
    return h('div', { class: 'earlier' },
      h('button', { class: 'btn ghost', type: 'button', disabled: this.loadingEarlier, onclick: () => this.onLoadEarlier() },
        this.loadingEarlier ? 'Loading…' : `Load earlier messages (${known} more)`));
  }

  empty() {
    return h('div', { class: 'empty-chat' },
      icon('chat', 'big'),
      h('h2', {}, 'Start the conversation'),
      h('p', {}, 'Ask for something below. Tool calls, approvals and answers appear here as they happen.'),
      this.examples?.() ?? null);
  }

  approvals(store) {
    const ids = new Set(store.approvals.map((a) => a.id));
    for (const id of this.cards.keys()) if (!ids.has(id)) this.cards.delete(id);
    return store.approvals.map((a) => {
      let card = this.cards.get(a.id);
      if (!card) {
        card = approvalCard(a, (decision, message) => this.decide(a, decision, message));
        this.cards.set(a.id, card);
      }
      updateApproval(card, a, this.ui.get(a.id) ?? {});
      return card;
    });
  }

  /** The prompts waiting for the run, next first; each can be removed before it runs. */
  queued(store) {
    if (store.queue.length === 0) return null;
    return h('section', { class: 'queue', 'aria-label': 'Queued prompts' },
      h('h3', { class: 'queue-title' }, store.queue.length === 1 ? '1 prompt queued' : `${store.queue.length} prompts queued`,
        h('span', { class: 'muted' }, ' · each runs when the one before it has finished')),
      h('ol', { class: 'queue-list' }, store.queue.map((q) => h('li', { class: 'queued', dataset: { messageId: q.id } },
        h('span', { class: 'queued-text' }, q.text),
        h('button', {
          class: 'icon-btn queued-remove',
          type: 'button',
          'aria-label': `Remove from the queue: ${q.text.slice(0, 60)}`,
          title: 'Remove from the queue',
          disabled: this.removing.has(q.id),
          onclick: () => this.removeQueued(q),
        }, icon('cross'))))));
  }

  /** Runs `change` (which prepends rows) without moving what the reader is looking at. */
  keepPosition(change) {
    const before = this.scroller.scrollHeight - this.scroller.scrollTop;
    change();
    this.scroller.scrollTop = this.scroller.scrollHeight - before;
  }
}
