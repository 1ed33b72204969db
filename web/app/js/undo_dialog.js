// "Undo to here" (issue 39): take a session back to before one of its prompts, with the
// files the agent changed since. The button on a prompt asks the server what would happen
// (`GET /api/sessions/:id/revert?index=k`, which changes nothing) and shows it in a
// dialog: the files put back or deleted, the ones changed since by someone else
// (conflicts, with their diff, which the undo leaves alone) and the ones no snapshot
// covers. Confirm is `POST /api/sessions/:id/revert {index}`: the turns leave the path
// (kept as a version of that turn) and the composer gets the prompt back, to edit and
// send again. Until a prompt is sent, a banner at the end of the conversation offers Redo
// (`POST /api/sessions/:id/unrevert`), which puts the files and turns back.
//
// Whether an undo is pending is the server's to say: the session's state carries it
// (`state.revert`, `{index, ordinal, report}`, absent when there is none), so an undo, a
// redo or the prompt that makes an undo final shows here as the stream brings it, from
// this tab or another. What this tab just did shows at once and stays until the state
// says otherwise (its frame may come after the answer).

import { get, post } from './api.js';
import { h } from './dom.js';
import { icon } from './icons.js';
import { diffTable, parseUnified } from './diff.js';
import { idle, refusal } from './branches.js';

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

export class Undo {
  /**
   * changed(index): repaint (a prompt's row when `index` is given); prompt: the composer's
   * textarea, which gets the prompt back; resync(why): ask the stream for a fresh snapshot.
   */
  constructor(sessionId, { changed, prompt, resync }) {
    this.sessionId = sessionId;
    this.changed = changed;
    this.prompt = prompt ?? null;
    this.resync = resync;
    this.checking = null; // the prompt index whose preview is being fetched
    this.errors = new Map(); // prompt index → why its preview could not be had
    this.dialog = null; // the open dialog's {el, index, text, busy, error}
    this.pending = null; // the pending undo: {index, ordinal, report}
    this.shape = null; // the state's `revert` when `pending` last followed it (JSON)
    this.redoing = false;
    this.redoNote = null; // what the last Redo left alone, or why it failed
    this.prefilled = null; // the text this undo put in the composer
  }

  get base() {
    return `/api/sessions/${encodeURIComponent(this.sessionId)}/revert`;
  }

  /** What the Undo button of prompt `i` depends on, for the timeline's row cache. */
  key(i) {
    return `${this.checking === i}:${this.errors.get(i) ?? ''}`;
  }

  /** "Undo to here" on prompt `i`, or null while a run goes (the server would refuse). */
  button(store, i, text, connected) {
    if (!idle(store)) return null;
    const checking = this.checking === i;
    return h('button', {
      class: 'msg-action', type: 'button', dataset: { action: 'undo' }, disabled: !connected || checking,
      'aria-haspopup': 'dialog', 'aria-label': 'Undo to here: take back this message, what came after it and the agent\'s file changes',
      title: 'Undo to here: see which files would change first',
      onclick: () => this.preview(i, text),
    }, icon('undo'), checking ? 'Checking…' : 'Undo to here');
  }

  error(i) {
    const e = this.errors.get(i);
    return e ? h('p', { class: 'msg-action-error', role: 'alert' }, e) : null;
  }

  /** Asks what undoing to prompt `index` would do, then shows it. */
  async preview(index, text) {
    if (this.checking !== null) return;
    this.checking = index;
    this.errors.delete(index);
    this.changed(index);
    let report;
    try {
      report = await get(`${this.base}?index=${index}`);
    } catch (e) {
      this.errors.set(index, e.uncertain ? 'The server did not answer; nothing changed. Try again.' : refusal(e));
      return;
    } finally {
      this.checking = null;
      this.changed(index);
    }
    this.open(index, text, report);
  }

  open(index, text, report) {
    this.close();
    const d = { index, text, report, busy: false, done: false };
    const error = h('p', { class: 'form-error', role: 'alert' });
    const confirm = h('button', { class: 'btn primary', type: 'button', dataset: { action: 'confirm-undo' }, autofocus: true, onclick: () => this.confirm(d) }, 'Undo to here');
    const cancel = h('button', { class: 'btn', type: 'button', onclick: () => d.el.close() }, 'Cancel');
    d.el = h('dialog', { class: 'dialog undo-dialog', 'aria-labelledby': 'undo-title', 'aria-describedby': 'undo-what' },
      h('h2', { id: 'undo-title' }, 'Undo to here?'),
      h('p', { id: 'undo-what', class: 'muted' },
        'The conversation goes back to before this message, and the message returns to the prompt box. What came after stays as an earlier version, and Redo brings it back until you send a prompt.'),
      changes(report),
      error,
      h('div', { class: 'dialog-actions' }, cancel, confirm));
    Object.assign(d, { error, confirm, cancel });
    d.el.addEventListener('close', () => {
      d.el.remove();
      if (this.dialog === d) this.dialog = null;
      // Cancelled: back to the Undo button it came from (its row was rebuilt meanwhile,
      // so the browser's own return of the focus finds the old one gone).
      if (!d.done) document.querySelector(`.msg[data-index="${index}"] [data-action="undo"]`)?.focus();
    });
    document.body.append(d.el);
    this.dialog = d;
    d.el.showModal();
  }

  close() {
    if (this.dialog?.el.open) this.dialog.el.close();
  }

  async confirm(d) {
    if (d.busy) return;
    d.busy = true;
    d.confirm.disabled = true;
    d.confirm.textContent = 'Undoing…';
    d.error.textContent = '';
    try {
      const report = await post(this.base, { index: d.index });
      d.done = true;
      d.el.close();
      this.pending = { index: d.index, ordinal: null, report: report ?? d.report };
      this.redoNote = null;
      this.fill(d.text);
    } catch (e) {
      d.busy = false;
      d.confirm.disabled = false;
      d.confirm.textContent = 'Undo to here';
      d.error.textContent = refusal(e);
      if (e.uncertain) this.resync('undo answered nothing');
    }
    this.changed();
  }

  /** Puts the undone prompt in the composer (unless the person is writing something else there). */
  fill(text) {
    const box = this.prompt;
    if (!box || !text) return;
    if (box.value.trim() && box.value !== this.prefilled) return;
    box.value = text;
    this.prefilled = text;
    box.dispatchEvent(new Event('input'));
    box.focus();
    box.setSelectionRange(text.length, text.length);
  }

  /**
   * Called on every paint, before the banner: follows the state's pending undo when it
   * changed there (what this tab set meanwhile stays until then).
   */
  sync(store) {
    if (!store.loaded) return;
    const shape = JSON.stringify(store.revert ?? null);
    if (shape === this.shape) return;
    this.shape = shape;
    this.pending = store.revert?.report ? store.revert : null;
  }

  /**
   * The banner at the end of the conversation while an undo can be taken back; null
   * otherwise. Kept while what it shows is the same, so a repaint does not take the
   * focus off its Redo.
   */
  banner(store, connected) {
    const key = JSON.stringify([this.pending, idle(store), connected, this.redoing, this.redoNote]);
    if (this.shown?.key !== key) this.shown = { key, el: this.build(store, connected) };
    return this.shown.el;
  }

  build(store, connected) {
    const p = this.pending;
    if (!p || !idle(store)) return this.redoNote ? h('div', { class: 'undo-banner is-note', role: 'status' }, this.redoNote) : null;
    const r = p.report;
    const writes = r.restore?.filter((f) => f.action !== 'delete').length ?? 0;
    const deletes = r.restore?.filter((f) => f.action === 'delete').length ?? 0;
    const files = [writes ? `${plural(writes, 'file')} restored` : null, deletes ? `${plural(deletes, 'file')} deleted` : null].filter(Boolean);
    return h('div', { class: 'undo-banner', role: 'status', dataset: { index: p.index } },
      icon('undo'),
      h('span', { class: 'undo-banner-text' },
        h('strong', {}, 'Undone to here'),
        files.length ? ` · ${files.join(', ')}` : '',
        h('span', { class: 'muted' }, ' · sending a prompt makes it final')),
      h('button', {
        class: 'btn small', type: 'button', dataset: { action: 'redo' }, disabled: !connected || this.redoing,
        'aria-label': 'Redo: bring back the undone messages and file changes', onclick: () => this.redo(),
      }, this.redoing ? 'Redoing…' : 'Redo'),
      this.redoNote ? h('span', { class: 'msg-action-error' }, this.redoNote) : null);
  }

  /** Redo on the banner: the undone turns and files come back (files changed since stay). */
  async redo() {
    if (this.redoing) return;
    this.redoing = true;
    this.redoNote = null;
    this.changed();
    try {
      const report = await post(`/api/sessions/${encodeURIComponent(this.sessionId)}/unrevert`, {});
      this.pending = null;
      const kept = report?.conflicts ?? [];
      if (kept.length) this.redoNote = `Redo left ${plural(kept.length, 'file')} as ${kept.length === 1 ? 'it is' : 'they are'}, changed since the undo: ${kept.map((c) => c.path ?? c).join(', ')}.`;
      // The undone prompt goes back where it was: out of the box, unless it was changed.
      if (this.prompt && this.prefilled !== null && this.prompt.value === this.prefilled) {
        this.prompt.value = '';
        this.prompt.dispatchEvent(new Event('input'));
      }
      this.prefilled = null;
    } catch (e) {
      this.redoNote = e.code === 'nothing_to_unrevert' ? 'There is nothing to redo any more: a prompt was sent after the undo.' : refusal(e);
      if (e.uncertain || e.status === 404 || e.status === 409) this.shape = null;
    } finally {
      this.redoing = false;
      this.changed();
    }
  }

  dispose() {
    this.close();
  }
}

/** The dialog's body: what an undo would do to the files. */
function changes(report) {
  const restore = report?.restore ?? [];
  const conflicts = report?.conflicts ?? [];
  const uncovered = report?.uncovered ?? [];
  const parts = [];
  if (restore.length) {
    parts.push(h('section', { class: 'undo-section', 'aria-labelledby': 'undo-restore' },
      h('h3', { id: 'undo-restore' }, `Files put back as they were (${restore.length})`),
      h('ul', { class: 'undo-files' }, restore.map((f) => h('li', { class: 'undo-file', dataset: { path: f.path, action: f.action } },
        h('code', {}, f.path),
        h('span', { class: `undo-action is-${f.action}` }, f.action === 'delete' ? 'deleted (the agent created it)' : 'restored'))))));
  }
  if (conflicts.length) {
    parts.push(h('section', { class: 'undo-section', 'aria-labelledby': 'undo-conflicts' },
      h('h3', { id: 'undo-conflicts' }, `Changed since, left as they are (${conflicts.length})`),
      h('p', { class: 'muted small-print' }, 'These files changed after the agent’s step, so undo does not touch them. Each diff goes from the file now to what undo would have written.'),
      conflicts.map((c) => h('div', { class: 'undo-conflict', dataset: { path: c.path } },
        h('p', { class: 'undo-conflict-path' }, icon('alert'), h('code', {}, c.path)),
        conflictDiff(c)))));
  }
  if (uncovered.length) {
    parts.push(h('section', { class: 'undo-section', 'aria-labelledby': 'undo-uncovered' },
      h('h3', { id: 'undo-uncovered' }, `Not covered, left as they are (${uncovered.length})`),
      h('p', { class: 'muted small-print' }, 'These turns may have changed them, but no snapshot recorded them (too large, or past a snapshot’s limits), so there is nothing to put back.'),
      h('ul', { class: 'undo-files' }, uncovered.map((p) => h('li', { class: 'undo-file', dataset: { path: p } }, h('code', {}, p))))));
  }
  if (!parts.length) parts.push(h('p', { class: 'undo-none' }, 'No file changes to undo: only the conversation goes back.'));
  return h('div', { class: 'undo-changes' }, parts);
}

function conflictDiff(c) {
  const parsed = parseUnified(c.diff);
  if (parsed) return diffTable(parsed.rows, { label: `Changes in ${c.path} since the agent’s step`, cut: parsed.cut });
  return c.diff ? h('pre', { class: 'code undo-diff-text' }, c.diff) : null;
}
