// Composer: the prompt box. Enter sends, Shift+Enter adds a line; while a run is going,
// Enter queues the prompt behind it (every send asks for `queue: true`, so the server
// runs it now when nothing runs, or queues it), and "Send now" (Ctrl+Enter) steers the
// run with it instead: `POST …/steer`, which the run reads at its next step (after its
// current model call or tool batch), so the text shows in the conversation there. Each send carries a requestId; when the answer is uncertain (network error, 5xx) the text and its
// requestId stay, and sending again reuses the id, so the server runs the prompt at most
// once. What a person typed is kept per session (in memory and sessionStorage) across
// reconnects, session switches and reloads. Sending is disabled while disconnected.
// Once a send has emptied the box, `onSent` lets an approval card that came meanwhile
// take the focus (timeline.js). Files (attachments.js) come by the Attach button, a drop
// on the conversation or the composer, or an image pasted into the box; they upload at
// once, and a prompt goes with the uploaded ones' ids in `parts` (the text may then be
// empty), queued like any prompt while a run is going. Steering takes text only: the
// files stay for the next prompt.

import { post } from './api.js';
import { newId } from './format.js';
import { Attachments } from './attachments.js';
import { icon } from './icons.js';

const KEY = 'spool.drafts';
/** A touch screen: no hover, a finger for a pointer. */
const TOUCH = matchMedia('(hover: none) and (pointer: coarse)');

export class Composer {
  constructor({ form, input, button, steer, hint, onSent, attach, picker, files, zone, model }) {
    Object.assign(this, { form, input, button, steer, hint, onSent });
    this.attachButton = attach;
    this.model = model; // () => the shown session's model, {name, inputs}, or null
    this.files = new Attachments({ list: files, onChange: () => this.update(), home: () => input.focus() });
    this.sessionId = null;
    this.drafts = new Map(Object.entries(JSON.parse(sessionStorage.getItem(KEY) ?? '{}')));
    this.pending = new Map(); // sessionId → {text, requestId} of an unconfirmed send
    this.view = null;
    this.sending = false;
    this.error = null;
    input.addEventListener('input', () => {
      this.save();
      this.autosize();
      this.update();
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.submit({ now: (e.ctrlKey || e.metaKey) && this.busy });
      }
    });
    button.addEventListener('click', (e) => {
      if (button.dataset.mode !== 'stop') return;
      e.preventDefault();
      this.view?.abort();
    });
    steer?.addEventListener('click', (e) => {
      e.preventDefault();
      this.submit({ now: true });
    });
    attach?.append(icon('clip'));
    attach?.addEventListener('click', () => picker.click());
    picker?.addEventListener('change', () => {
      this.files.add([...picker.files]);
      picker.value = '';
      input.focus();
    });
    // Pasted images become files; pasted text stays text (the browser's own paste). Text
    // copied from a spreadsheet or a word processor comes with a picture of itself too:
    // a clipboard with text is a text paste.
    input.addEventListener('paste', (e) => {
      const data = e.clipboardData;
      if (data?.getData('text/plain').trim()) return;
      const images = [...(data?.files ?? [])].filter((f) => f.type.startsWith('image/'));
      if (images.length === 0 || !this.view || this.input.disabled) return;
      e.preventDefault();
      this.files.add(images);
    });
    this.dropZone(zone ?? form);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit();
    });
  }

  /**
   * Files dropped anywhere on `zone` (the conversation and the composer) join the
   * prompt; while they are dragged over it the composer's box shows where they go.
   * Dropped anywhere else on the page they are refused, not opened by the browser in
   * place of the page. A dropped folder gets a chip that says it cannot be sent.
   */
  dropZone(zone) {
    const files = (e) => e.dataTransfer?.types.includes('Files');
    const open = () => Boolean(this.view) && !this.input.disabled;
    // Entered and left once per element crossed: the zone is left when every enter has
    // had its leave (a leave's relatedTarget is not to be relied on for a drag).
    let depth = 0;
    const done = () => {
      depth = 0;
      this.form.classList.remove('is-dropping');
    };
    zone.addEventListener('dragenter', (e) => {
      if (!files(e) || !open()) return;
      depth++;
      e.preventDefault();
      this.form.classList.add('is-dropping');
    });
    zone.addEventListener('dragover', (e) => {
      if (!files(e) || !open()) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
    });
    zone.addEventListener('dragleave', (e) => {
      if (depth > 0 && --depth === 0) done();
    });
    zone.addEventListener('drop', (e) => {
      done();
      if (!files(e) || !open()) return;
      e.preventDefault();
      const taken = [];
      const folders = [];
      for (const item of e.dataTransfer.items) {
        if (item.kind !== 'file') continue;
        const file = item.getAsFile();
        if (item.webkitGetAsEntry?.()?.isDirectory) {
          folders.push({ name: file?.name || 'folder', error: 'A folder cannot be attached: drop the files in it.' });
        } else if (file) {
          taken.push(file);
        }
      }
      this.files.add(taken, folders);
      this.input.focus();
    });
    addEventListener('dragover', (e) => {
      if (e.defaultPrevented || !files(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'none';
    });
    addEventListener('drop', (e) => {
      if (files(e)) e.preventDefault();
      done();
    });
    addEventListener('dragend', done);
  }

  /** Shows `view`'s session, keeping the draft of the one we leave. */
  attach(view) {
    this.save();
    this.view = view;
    this.sessionId = view?.id ?? null;
    this.error = null;
    this.files.show(this.sessionId);
    this.input.value = this.sessionId ? (this.drafts.get(this.sessionId) ?? '') : '';
    this.autosize();
    this.update();
  }

  save() {
    if (!this.sessionId) return;
    const text = this.input.value;
    if (text) this.drafts.set(this.sessionId, text);
    else this.drafts.delete(this.sessionId);
    sessionStorage.setItem(KEY, JSON.stringify(Object.fromEntries(this.drafts)));
  }

  /**
   * Fits the box to its text (up to 240 px). Measuring needs the textarea at its natural
   * height for a moment; its box holds its own height meanwhile, so the page around it
   * (the conversation above) never sees that moment: a conversation that grew for it
   * had the browser pull its scroll position up, and the view stopped following.
   */
  autosize() {
    const box = this.input.parentElement;
    box.style.height = `${box.offsetHeight}px`;
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight, 240)}px`;
    box.style.height = '';
  }

  get busy() {
    return this.view?.store.status === 'busy';
  }

  /** Sends the text: queued behind a run (or run at once), or with `now` into the run. */
  async submit({ now = false } = {}) {
    const view = this.view;
    if (!view || this.sending || !view.connected) return;
    const text = this.input.value.trim();
    const id = view.id;
    // Files wait for their uploads, and go with a prompt, not into a run.
    const parts = now ? [] : this.files.parts(id);
    if (!now && this.files.uploading) return;
    if (!text && parts.length === 0) return;
    const ids = parts.map((p) => p.id);
    const key = `${text}\n${ids.join(',')}`;
    const prior = this.pending.get(id);
    const requestId = prior && prior.key === key ? prior.requestId : newId('req');
    this.pending.set(id, { key, requestId });
    this.sending = true;
    this.error = null;
    this.update();
    try {
      if (now) await post(`/api/sessions/${encodeURIComponent(id)}/steer`, { text, requestId });
      else await post(`/api/sessions/${encodeURIComponent(id)}/prompt`, { text, parts, requestId, queue: true });
      this.pending.delete(id);
      this.files.sent(id, ids);
      const emptied = this.sessionId === id && this.input.value.trim() === text;
      if (emptied) this.input.value = '';
      this.drafts.delete(id);
      if (this.sessionId === id) this.save();
      if (emptied) this.onSent?.();
    } catch (e) {
      if (!e.uncertain) this.pending.delete(id);
      if (this.sessionId === id) {
        this.errorCode = e.code;
        this.error = e.uncertain
          ? 'Not confirmed: the server did not answer. Send again to retry safely (it runs at most once).'
          : e.code === 'queue_full'
            ? 'The queue is full. Wait for a queued prompt to run, or remove one.'
            : e.code === 'too_many_steers'
              ? 'The run has not read your last messages yet. Wait a moment, or queue this one.'
              : e.code === 'files_not_queueable'
                ? 'Files cannot wait in the queue: send them once this run has finished (or stop it).'
                : e.message;
      }
    } finally {
      this.sending = false;
      this.autosize();
      this.update();
    }
  }

  /** Enables and labels the controls from the view's connection and run state. */
  update() {
    const view = this.view;
    const connected = Boolean(view?.connected);
    const busy = this.busy;
    this.input.disabled = !view || view.deleted;
    if (this.attachButton) this.attachButton.disabled = this.input.disabled;
    // Another model: its refusal of the files no longer holds, and the chips say anew.
    if (this.files.setModel(this.model?.() ?? null) && this.errorCode?.startsWith('model_cannot_read')) this.error = null;
    const files = this.files.parts(this.sessionId).length > 0;
    this.button.disabled = !view || !connected || this.sending
      || (!busy && ((!this.input.value.trim() && !files) || this.files.uploading));
    this.button.dataset.mode = busy ? 'stop' : 'send';
    this.button.setAttribute('aria-label', busy ? 'Stop the run' : 'Send');
    this.button.title = busy ? 'Stop the run' : 'Send (Enter)';
    if (this.steer) {
      this.steer.hidden = !busy || !this.input.value.trim();
      this.steer.disabled = !connected || this.sending;
    }
    // A touch screen's keyboard has no Shift+Enter to speak of: no key hints there.
    const keys = TOUCH.matches
      ? (busy ? 'Sending now queues it after this run' : '')
      : busy ? 'Enter to queue after this run · Ctrl+Enter to send now · Shift+Enter for a new line' : 'Enter to send · Shift+Enter for a new line';
    const waiting = this.files.uploading ? 'Uploading your files: you can send once they are up.' : null;
    this.hint.textContent = this.error ?? (!view ? '' : view.deleted ? 'This session was deleted.' : !connected ? 'Disconnected: your text is kept and you can send once the connection is back.' : waiting ?? keys);
    this.hint.classList.toggle('is-error', Boolean(this.error));
  }
}
