// Files in prompts (README, "Attachments"). In the composer: a file picker, files dropped
// on it and images pasted into it each upload at once (`POST /api/uploads`, the raw
// bytes) and show as a chip, an image with a thumbnail of the local file, until the
// prompt goes with their ids in `parts`; a chip comes off with its × button before then
// (which deletes the upload), a refused upload shows the server's reason on its chip,
// and a file the session's model cannot read (an image for a model without vision) says
// so on its chip before anything is sent. In the conversation, a user message's files
// (and a queued prompt's): images as thumbnails fetched from their `url` (same origin,
// so the page's own cookie goes with them), anything else as a link with its size.
//
// Only raster images are ever shown as pictures: an SVG (or HTML) file can carry script
// and active content, so it is a plain file chip here, whatever its name says.

import { ApiError } from './api.js';
import { h, reconcile } from './dom.js';
import { icon } from './icons.js';

/** The image types shown as thumbnails: the raster ones the server stores. */
const PICTURES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

export const isPicture = (mediaType) => PICTURES.has(String(mediaType ?? '').toLowerCase());

/** 5120 → "5.0 KB". */
export function fileSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** Sends one file's bytes to `POST /api/uploads`; the stored file's info, or an ApiError. */
async function upload(file, signal) {
  let res;
  try {
    res = await fetch(`/api/uploads?name=${encodeURIComponent(file.name || 'pasted')}`, {
      method: 'POST',
      // Raw bytes, whatever the file claims to be: the server sniffs what they are
      // (and admits no other body type on this route).
      headers: { 'content-type': 'application/octet-stream' },
      body: file,
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'The server could not be reached.');
  }
  let data = null;
  try {
    data = await res.json();
  } catch {
    // not JSON: the status says enough
  }
  if (!res.ok) {
    if (res.status === 401) dispatchEvent(new Event('spool:unauthorized'));
    throw new ApiError(res.status, data?.error?.code ?? `http_${res.status}`, data?.error?.message ?? res.statusText);
  }
  return data;
}

/** A file's name as a person reads it (a clipboard image may come without one). */
const nameOf = (file) => file.name || 'pasted file';

/**
 * Why the model cannot read a stored file, or null: `reads` is the session's model's
 * `{name, inputs: {images, pdf}}` from `GET /api/models` (null while unknown: no
 * warning then; the server checks on send in any case).
 */
function unreadable(reads, mediaType) {
  if (!reads?.inputs) return null;
  if (isPicture(mediaType) && reads.inputs.images === false) {
    return `${reads.name} does not read images: pick a model that does, or remove it`;
  }
  if (mediaType === 'application/pdf' && reads.inputs.pdf === false) {
    return `${reads.name} does not read PDFs: pick a model that does, or remove it`;
  }
  return null;
}

/**
 * The composer's files: one list per session (switching sessions keeps each one's
 * chips), drawn into `list`. `onChange` tells the composer to re-check its Send button;
 * `home` takes the focus when the last chip is removed (the prompt box).
 *
 * Each chip is built once and updated in place: an upload finishing must not rebuild
 * the × under a keyboard user's focus, and a thumbnail decodes once.
 */
export class Attachments {
  constructor({ list, onChange, home }) {
    Object.assign(this, { list, onChange, home });
    this.bySession = new Map(); // sessionId → [{key, file, thumb, status, info, error, abort, view}]
    this.sessionId = null;
    this.reads = null;
    this.next = 0;
  }

  get items() {
    return this.bySession.get(this.sessionId) ?? [];
  }

  show(sessionId) {
    this.sessionId = sessionId;
    this.render();
  }

  /**
   * The shown session's model (`{name, inputs}`, or null): chips say what it cannot
   * read. True when that changed.
   */
  setModel(reads) {
    const key = reads ? `${reads.name}|${reads.inputs?.images}|${reads.inputs?.pdf}` : '';
    if (key === this.readsKey) return false;
    this.readsKey = key;
    this.reads = reads;
    this.render();
    return true;
  }

  /**
   * Starts uploading each of `files` into the shown session's list. `refused`: chips
   * that never upload, each `{name, error}` (a dropped folder, say).
   */
  add(files, refused = []) {
    const sessionId = this.sessionId;
    if (!sessionId) return;
    const items = this.bySession.get(sessionId) ?? [];
    this.bySession.set(sessionId, items);
    for (const { name, error } of refused) {
      items.push({ key: ++this.next, file: { name, size: 0, type: '' }, status: 'failed', info: null, error, abort: null, thumb: null });
    }
    for (const file of files) {
      const item = {
        key: ++this.next, file, status: 'uploading', info: null, error: null, abort: new AbortController(),
        // A local preview, never the bytes rendered as a document: raster images only.
        thumb: isPicture(file.type) ? URL.createObjectURL(file) : null,
      };
      items.push(item);
      upload(file, item.abort.signal).then(
        (info) => Object.assign(item, { status: 'ready', info }),
        (e) => {
          if (e.name === 'AbortError') return;
          Object.assign(item, { status: 'failed', error: e.message || 'The upload failed.' });
        },
      ).finally(() => this.changed());
    }
    this.changed();
  }

  /**
   * The person took a chip off (its ×): an upload on its way stops, and a stored one is
   * deleted (`DELETE /api/uploads/{id}`), so a file sent by mistake never stays on the
   * server. The delete's answer changes nothing here: a server without the route, or a
   * file a prompt took meanwhile (409), leaves the file to the server's own cleanup.
   */
  discard(sessionId, item) {
    const items = this.bySession.get(sessionId) ?? [];
    const at = items.indexOf(item);
    this.remove(sessionId, item);
    if (item.info?.id) {
      fetch(`/api/uploads/${encodeURIComponent(item.info.id)}`, { method: 'DELETE' }).catch(() => {});
    }
    // The focus stays among the chips (the next one's ×), or goes back to the prompt.
    const left = this.bySession.get(sessionId) ?? [];
    const next = left[Math.min(at, left.length - 1)];
    if (next?.view) next.view.remove.focus();
    else this.home?.();
  }

  remove(sessionId, item) {
    item.abort?.abort();
    if (item.thumb) URL.revokeObjectURL(item.thumb);
    const items = (this.bySession.get(sessionId) ?? []).filter((i) => i !== item);
    if (items.length) this.bySession.set(sessionId, items);
    else this.bySession.delete(sessionId);
    this.changed();
  }

  /** True while a file of the shown session is still on its way up. */
  get uploading() {
    return this.items.some((i) => i.status === 'uploading');
  }

  /** The `parts` of the uploaded files, in the order they were added. */
  parts(sessionId) {
    return (this.bySession.get(sessionId) ?? [])
      .filter((i) => i.status === 'ready')
      .map((i) => ({ type: 'file', id: i.info.id }));
  }

  /** After a send took them: the sent chips go (a failed one stays, with its reason). */
  sent(sessionId, ids) {
    for (const item of [...(this.bySession.get(sessionId) ?? [])]) {
      if (item.info && ids.includes(item.info.id)) this.remove(sessionId, item);
    }
  }

  changed() {
    this.render();
    this.onChange?.();
  }

  render() {
    const sessionId = this.sessionId;
    const items = this.items;
    this.list.hidden = items.length === 0;
    reconcile(this.list, items.map((item) => this.chip(sessionId, item)));
  }

  /** The chip of `item`, made the first time and brought up to date after. */
  chip(sessionId, item) {
    const name = nameOf(item.file);
    if (!item.view) {
      const remove = h('button', {
        class: 'attachment-remove', type: 'button', 'aria-label': `Remove ${name}`, title: 'Remove',
        onclick: () => this.discard(sessionId, item),
      }, icon('cross'));
      const text = h('span', { class: 'attachment-text' }, h('span', { class: 'attachment-name', title: name }, name));
      const el = h('div', { class: 'attachment-chip', role: 'group', 'aria-label': `Attached: ${name}` },
        item.thumb ? h('img', { class: 'attachment-thumb', src: item.thumb, alt: '' }) : h('span', { class: 'attachment-icon' }, icon('file')),
        text, remove);
      item.view = { el, text, remove, note: null, noteKey: '' };
    }
    const { view } = item;
    const warning = item.status === 'ready' ? unreadable(this.reads, item.info?.mediaType) : null;
    const status = warning ? 'unreadable' : item.status;
    view.el.className = `attachment-chip is-${status}`;
    view.el.dataset.status = item.status;
    // The line under the name: its size, the server's refusal, or what the model cannot
    // read. A new element when it turns into a message, so it is announced.
    const [kind, note] = item.error ? ['error', item.error]
      : warning ? ['warning', warning]
        : ['size', item.status === 'uploading' ? `Uploading… ${fileSize(item.file.size)}` : fileSize(item.info?.size ?? item.file.size)];
    const noteKey = `${kind}|${note}`;
    if (view.noteKey !== noteKey) {
      const alert = kind === 'size' ? null : kind === 'error' ? 'alert' : 'status';
      const next = h('span', { class: `attachment-${kind}`, role: alert, title: kind === 'size' ? null : note }, note);
      if (view.note) view.note.replaceWith(next);
      else view.text.append(next);
      Object.assign(view, { note: next, noteKey });
    }
    return view.el;
  }
}

/** A user message's file parts, for its bubble: thumbnails and links, or null when none. */
export function messageFiles(m) {
  return fileLinks(m.content.filter((c) => c.type === 'file'));
}

/**
 * Stored files (`{name, mediaType, size, url}`, a message's parts or a queued prompt's
 * files) as thumbnails and links, or null when none.
 */
export function fileLinks(files, { className = 'msg-files' } = {}) {
  if (!files?.length) return null;
  return h('div', { class: className }, files.map((f) => isPicture(f.mediaType)
    ? h('a', { class: 'msg-file-image', href: f.url, target: '_blank', rel: 'noopener', title: `${f.name} · ${fileSize(f.size)}` },
      h('img', { src: f.url, alt: f.name, loading: 'lazy' }))
    // Opened as a download, never rendered by the browser (an SVG or HTML file included).
    : h('a', { class: 'msg-file', href: f.url, download: f.name, title: `${f.name} · ${fileSize(f.size)}` },
      icon('file'), h('span', { class: 'attachment-name' }, f.name), h('span', { class: 'attachment-size' }, fileSize(f.size)))));
}
