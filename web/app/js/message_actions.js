// Message actions (issue 17, point 5; issue 39): each message's time, and what a person
// can do with a message after the fact: edit a prompt, regenerate the last answer, retry a
// run that failed or was stopped, switch between a turn's versions, undo to a prompt.
//
// Edit and Regenerate change the turn in place: `POST /api/sessions/:id/prompt` with
// `at: k` (the prompt's message index; Regenerate adds `regenerate: true` and sends the
// same text). The server shelves the turn at k and everything after it as a branch, and
// runs the prompt at k: the model sees only the path shown, and the old turn stays as an
// earlier version of this one (‹ 1/2 ›, branches.js). That is refused while a run goes,
// parks at a card or has prompts queued (409 `session_busy`), so both wait for an idle
// session here: Regenerate shows only then, and an open edit box says why Send waits.
// Retry still appends the prompt again at the end (`queue: true`): the failed run stays.
// "Undo to here" lives in undo_dialog.js; this file places its button.
//
// Idempotency as in the composer: one requestId per action, minted at its first click
// and kept while the request is out or its answer was uncertain (network error, 5xx), so
// a double click or a retry after "not confirmed" runs the prompt at most once; once the
// server answered, the next click is a new action with a new id.

import { post } from './api.js';
import { h } from './dom.js';
import { icon } from './icons.js';
import { newId } from './format.js';
import { Branches, idle } from './branches.js';
import { Undo } from './undo_dialog.js';
import { messageFiles } from './attachments.js';

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
  /**
   * sessionId; repaint(): the view paints again when an action's state changes; prompt:
   * the composer's textarea (an undo puts its prompt back there); resync(why): ask the
   * stream for a fresh snapshot after an answer that leaves the state unknown.
   */
  constructor(sessionId, repaint, { prompt = null, resync = () => {} } = {}) {
    this.sessionId = sessionId;
    this.repaint = repaint;
    const changed = (index) => this.changed(index ?? null);
    this.branches = new Branches(sessionId, { changed, resync });
    this.undo = new Undo(sessionId, { changed, prompt, resync });
    this.editors = new Map(); // user message index → refresh(store, connected) of its open edit box
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

  /**
   * What a prompt row's actions depend on besides the message itself. An open edit box
   * is rebuilt only by its own changes (it keeps its focus and caret through runs and
   * state frames); `sync` updates its Send button in place.
   */
  rowKey(i, store) {
    const rev = this.rowRevs.get(i) ?? 0;
    if (this.editing.has(i)) return `${rev}:editing`;
    return `${rev}:${idle(store)}:${this.branches.key(store, i)}:${this.undo.key(i)}`;
  }

  /** Called on every paint: open edit boxes follow the run state, a pending undo is looked for. */
  sync(store, connected) {
    for (const refresh of this.editors.values()) refresh(store, connected);
    this.undo.sync(store);
  }

  /**
   * Sends `text` for the action `key`: at the end (`queue: true`), or in place of the
   * prompt at `body.at` (see the file comment).
   */
  async send(key, text, index = null, body = { queue: true }) {
    const prior = this.pending.get(key);
    if (prior?.busy) return; // the second click of a double click: the first is out
    const requestId = prior && prior.text === text ? prior.requestId : newId('req');
    this.pending.set(key, { requestId, text, busy: true });
    this.errors.delete(key);
    this.changed(index);
    try {
      await post(`/api/sessions/${encodeURIComponent(this.sessionId)}/prompt`, { text, requestId, ...body });
      this.pending.delete(key);
      return true;
    } catch (e) {
      if (e.uncertain) this.pending.set(key, { requestId, text, busy: false });
      else this.pending.delete(key);
      this.errors.set(key, e.uncertain
        ? 'Not confirmed: the server did not answer. Click again to retry safely (it runs at most once).'
        : e.code === 'queue_full' ? 'The queue is full. Wait for a queued prompt to run, or remove one.'
          : e.code === 'session_busy' ? 'A run is going or prompts are queued: send this once it has finished.' : e.message);
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
    if (!idle(store)) return null;
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

  /** A user message: its bubble (or edit box), time, versions (‹ 2/3 ›), Edit and Undo to here. */
  userRow(store, i, m, connected) {
    const text = userText(m);
    const key = `edit:${i}`;
    const error = this.errors.get(key);
    if (this.editing.has(i)) return this.editor(store, i, key, connected, error);
    this.editors.delete(i);
    const files = messageFiles(m);
    return h('div', { class: 'msg-col' },
      files,
      text || !files ? h('div', { class: 'bubble' }, text) : null,
      h('div', { class: 'msg-actions' },
        messageTime(m.timestamp),
        this.branches.switcher(store, i, connected),
        h('button', {
          class: 'msg-action', type: 'button', dataset: { action: 'edit' },
          'aria-label': 'Edit this message and send it again', title: 'Edit and send again',
          onclick: () => {
            this.editing.set(i, text);
            this.changed(i);
            queueMicrotask(() => document.querySelector(`.msg[data-index="${i}"] .edit-box`)?.focus());
          },
        }, icon('pencil'), 'Edit'),
        this.undo.button(store, i, text, connected)),
      error ? h('p', { class: 'msg-action-error', role: 'alert' }, error) : null,
      this.branches.error(i),
      this.undo.error(i));
  }

  editor(store, i, key, connected, error) {
    const draft = this.editing.get(i);
    const busy = this.busy(key);
    let free = idle(store);
    const box = h('textarea', {
      class: 'edit-box', rows: 3, maxlength: MAX_EDIT_CHARS, 'aria-label': 'Edited message', value: draft,
      'aria-describedby': `edit-note-${i}`,
      oninput: () => {
        this.editing.set(i, box.value);
        submit.disabled = !connected || busy || !free || !box.value.trim();
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
      this.editors.delete(i);
      this.errors.delete(key);
      this.changed(i);
    };
    const go = async () => {
      const text = box.value.trim();
      if (!text || !connected || !free) return;
      if (await this.send(key, text, i, { at: i })) {
        this.editing.delete(i);
        this.changed(i);
      }
    };
    const submit = h('button', { class: 'btn primary small', type: 'button', disabled: !connected || busy || !free || !draft.trim(), onclick: go },
      busy ? 'Sending…' : 'Send');
    const noteText = (ok) => ok
      ? 'Sends the edit in place of this message. The message and what came after it stay as an earlier version (‹ › under the message).'
      : 'A run is going or prompts are queued: you can send the edit once it has finished.';
    const note = h('p', { class: 'edit-note muted', id: `edit-note-${i}` }, noteText(free));
    // The run state changes under an open box without rebuilding it (see rowKey).
    this.editors.set(i, (s, c) => {
      const now = idle(s);
      if (now === free || c !== connected) return;
      free = now;
      note.textContent = noteText(free);
      submit.disabled = !connected || busy || !free || !box.value.trim();
    });
    return h('div', { class: 'msg-col editing' },
      box,
      note,
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
        'aria-label': 'Regenerate: a new answer to the same prompt; this one stays as an earlier version',
        title: 'A new answer to the same prompt (this one stays as an earlier version)',
        onclick: () => this.send(key, userText(prompt), null, { at: u, regenerate: true }),
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
