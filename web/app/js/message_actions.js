// Message actions (issue 17, point 5): each message's time, and what a person can do
// with a message after the fact: regenerate the last answer, edit a prompt and send the
// edit, retry a run that failed or was stopped. All three are the same server command,
// a new prompt run on the same session (`POST /api/sessions/:id/prompt`, queued behind a
// run that is going): the earlier messages and answers stay, the new answer follows at
// the end. There is no server-side "replace this answer"; the UI says so where it matters.
//
// Idempotency as in the composer: one requestId per action, minted at its first click
// and kept while the request is out or its answer was uncertain (network error, 5xx), so
// a double click or a retry after "not confirmed" runs the prompt at most once; once the
// server answered, the next click is a new action with a new id.

import { post } from './api.js';
import { h } from './dom.js';
import { icon } from './icons.js';
import { newId } from './format.js';

/** Longest edit accepted here; the server has its own limit and says so if it is lower. */
export const MAX_EDIT_CHARS = 100_000;

const SHORT = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const FULL = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'medium' });

/** `<time>` showing "14:05", the full date in its title; null without a usable timestamp. */
export function messageTime(ts) {
  if (!Number.isFinite(ts) || ts <= 0) return null;
  const d = new Date(ts);
  return h('time', { class: 'msg-time', datetime: d.toISOString(), title: FULL.format(d) }, SHORT.format(d));
}

const userText = (m) => m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

export class MessageActions {
  /** sessionId; repaint(): the view paints again when an action's state changes. */
  constructor(sessionId, repaint) {
    this.sessionId = sessionId;
    this.repaint = repaint;
    this.pending = new Map(); // action key → {requestId, text, busy}
    this.editing = new Map(); // user message index → the text in its edit box
    this.errors = new Map(); // action key → the last definite error's message
    this.rev = 0; // bumped on any change, so cached answer rows with actions rebuild
    this.rowRevs = new Map(); // user message index → revision of its Edit state
  }

  /** `index`: the user message whose Edit state changed (only that prompt row rebuilds). */
  changed(index = null) {
    this.rev++;
    if (index !== null) this.rowRevs.set(index, (this.rowRevs.get(index) ?? 0) + 1);
    this.repaint();
  }

  /** What a prompt row's actions depend on besides the message itself. */
  rowKey(i) {
    return `${this.rowRevs.get(i) ?? 0}:${this.editing.has(i)}`;
  }

  /** Sends `text` as a new prompt run for the action `key`; see the file comment. */
  async send(key, text, index = null) {
    const prior = this.pending.get(key);
    if (prior?.busy) return; // the second click of a double click: the first is out
    const requestId = prior && prior.text === text ? prior.requestId : newId('req');
    this.pending.set(key, { requestId, text, busy: true });
    this.errors.delete(key);
    this.changed(index);
    try {
      await post(`/api/sessions/${encodeURIComponent(this.sessionId)}/prompt`, { text, requestId, queue: true });
      this.pending.delete(key);
      return true;
    } catch (e) {
      if (e.uncertain) this.pending.set(key, { requestId, text, busy: false });
      else this.pending.delete(key);
      this.errors.set(key, e.uncertain
        ? 'Not confirmed: the server did not answer. Click again to retry safely (it runs at most once).'
        : e.code === 'queue_full' ? 'The queue is full. Wait for a queued prompt to run, or remove one.' : e.message);
      return false;
    } finally {
      this.changed(index);
    }
  }

  busy(key) {
    return Boolean(this.pending.get(key)?.busy);
  }

  /** The index of the answer Regenerate belongs on, or null: the last answer that ended well, while idle. */
  lastAnswer(store, indexes) {
    if (store.status === 'busy' || store.drafts.size > 0) return null;
    for (let k = indexes.length - 1; k >= 0; k--) {
      const m = store.messages.get(indexes[k]);
      if (!m) return null;
      if (m.role === 'user') return null;
      // A failed or stopped round has Retry on its ending row instead.
      if (m.role === 'assistant') return m.stopReason === 'error' || m.stopReason === 'aborted' ? null : indexes[k];
    }
    return null;
  }

  /** The user message index whose round holds `i`, or null when it is not loaded. */
  roundOf(store, indexes, i) {
    for (let k = indexes.indexOf(i); k >= 0; k--) {
      const m = store.messages.get(indexes[k]);
      if (m?.role === 'user') return indexes[k];
    }
    return null;
  }

  /** A user message: its bubble (or edit box), time and Edit button. */
  userRow(store, i, m, connected) {
    const text = userText(m);
    const key = `edit:${i}`;
    const error = this.errors.get(key);
    if (this.editing.has(i)) return this.editor(i, key, connected, error);
    return h('div', { class: 'msg-col' },
      h('div', { class: 'bubble' }, text),
      h('div', { class: 'msg-actions' },
        messageTime(m.timestamp),
        h('button', {
          class: 'msg-action', type: 'button', dataset: { action: 'edit' },
          'aria-label': 'Edit this message and send it again', title: 'Edit and send again',
          onclick: () => {
            this.editing.set(i, text);
            this.changed(i);
            queueMicrotask(() => document.querySelector(`.msg[data-index="${i}"] .edit-box`)?.focus());
          },
        }, icon('pencil'), 'Edit')),
      error ? h('p', { class: 'msg-action-error', role: 'alert' }, error) : null);
  }

  editor(i, key, connected, error) {
    const draft = this.editing.get(i);
    const busy = this.busy(key);
    const box = h('textarea', {
      class: 'edit-box', rows: 3, maxlength: MAX_EDIT_CHARS, 'aria-label': 'Edited message', value: draft,
      oninput: () => {
        this.editing.set(i, box.value);
        submit.disabled = !connected || busy || !box.value.trim();
      },
      onkeydown: (e) => {
        if (e.key === 'Escape') {
          e.preventDefault();
          e.stopPropagation();
          cancel();
        } else if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          go();
        }
      },
    });
    const cancel = () => {
      this.editing.delete(i);
      this.errors.delete(key);
      this.changed(i);
    };
    const go = async () => {
      const text = box.value.trim();
      if (!text || !connected) return;
      if (await this.send(key, text, i)) {
        this.editing.delete(i);
        this.changed(i);
      }
    };
    const submit = h('button', { class: 'btn primary small', type: 'button', disabled: !connected || busy || !draft.trim(), onclick: go },
      busy ? 'Sending…' : 'Send as a new prompt');
    return h('div', { class: 'msg-col editing' },
      box,
      h('p', { class: 'edit-note muted' }, 'Sends the edited text as a new prompt at the end of the conversation; this message and its answer stay as they are.'),
      h('div', { class: 'edit-buttons' },
        h('button', { class: 'btn small', type: 'button', onclick: cancel }, 'Cancel'),
        submit),
      error ? h('p', { class: 'msg-action-error', role: 'alert' }, error) : null);
  }

  /** An answer's footer: its time and, on the last answer, Regenerate. */
  answerFooter(store, indexes, i, m, connected) {
    const last = this.lastAnswer(store, indexes) === i;
    const u = last ? this.roundOf(store, indexes, i) : null;
    const prompt = u === null ? null : store.messages.get(u);
    const key = `regen:${u}`;
    const error = this.errors.get(key);
    const time = messageTime(m.timestamp);
    if (!time && prompt === null) return null;
    return h('div', { class: 'msg-actions' },
      time,
      prompt ? h('button', {
        class: 'msg-action', type: 'button', dataset: { action: 'regenerate' }, disabled: !connected || this.busy(key),
        'aria-label': 'Regenerate: ask the same prompt again; this answer stays', title: 'Ask the same prompt again (this answer stays)',
        onclick: () => this.send(key, userText(prompt)),
      }, icon('restore'), this.busy(key) ? 'Sending…' : 'Regenerate') : null,
      error ? h('span', { class: 'msg-action-error', role: 'alert' }, error) : null);
  }

  /** Retry on the ending of a failed or stopped run: the round's prompt, again. */
  retryButton(store, u, connected) {
    const prompt = store.messages.get(u);
    if (!prompt || prompt.role !== 'user' || store.status === 'busy') return null;
    const key = `retry:${u}`;
    const error = this.errors.get(key);
    return h('span', { class: 'retry' },
      h('button', {
        class: 'btn small', type: 'button', dataset: { action: 'retry' }, disabled: !connected || this.busy(key),
        'aria-label': 'Retry: run this prompt again', onclick: () => this.send(key, userText(prompt)),
      }, this.busy(key) ? 'Sending…' : 'Retry'),
      error ? h('span', { class: 'msg-action-error', role: 'alert' }, ` ${error}`) : null);
  }
}
