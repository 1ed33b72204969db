// Files in prompts (README, "Attachments"). In the composer: a file picker, files dropped
// on it and images pasted into it each upload at once (`POST /api/uploads`, the raw
// bytes) and show as a chip, an image with a thumbnail of the local file, until the
// prompt goes with their ids in `parts`; a chip comes off with its × button before then,
// and a refused upload shows the server's reason on its chip. In the conversation, a user
// message's files: images as thumbnails fetched from their `url` (same origin, so the
// page's own cookie goes with them), anything else as a link with its size.
//
// Only raster images are ever shown as pictures: an SVG (or HTML) file can carry script
// and active content, so it is a plain file chip here, whatever its name says.

import { ApiError } from './api.js';
import { h } from './dom.js';
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

/**
 * The composer's files: one list per session (switching sessions keeps each one's
 * chips), drawn into `list`. `onChange` tells the composer to re-check its Send button.
 */
export class Attachments {
  constructor({ list, onChange }) {
    Object.assign(this, { list, onChange });
    this.bySession = new Map(); // sessionId → [{key, file, thumb, status, info, error, abort}]
    this.sessionId = null;
    this.next = 0;
  }

  get items() {
    return this.bySession.get(this.sessionId) ?? [];
  }

  show(sessionId) {
    this.sessionId = sessionId;
    this.render();
  }

  /** Starts uploading each of `files` into the shown session's list. */
  add(files) {
    const sessionId = this.sessionId;
    if (!sessionId) return;
    const items = this.bySession.get(sessionId) ?? [];
    this.bySession.set(sessionId, items);
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

  remove(sessionId, item) {
    item.abort.abort();
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
    this.list.replaceChildren(...items.map((item) => this.chip(sessionId, item)));
  }

  chip(sessionId, item) {
    const { file } = item;
    const name = file.name || 'pasted file';
    return h('div', {
      class: `attachment-chip is-${item.status}`, role: 'group', 'aria-label': `Attached: ${name}`,
      dataset: { status: item.status },
    },
    // One image element per file, kept across renders: the picture decodes once.
    item.thumb ? (item.img ??= h('img', { class: 'attachment-thumb', src: item.thumb, alt: '' })) : h('span', { class: 'attachment-icon' }, icon('file')),
    h('span', { class: 'attachment-text' },
      h('span', { class: 'attachment-name', title: name }, name),
      h('span', { class: item.error ? 'attachment-error' : 'attachment-size', role: item.error ? 'alert' : null },
        item.error ?? (item.status === 'uploading' ? `Uploading… ${fileSize(file.size)}` : fileSize(item.info?.size ?? file.size)))),
    h('button', {
      class: 'attachment-remove', type: 'button', 'aria-label': `Remove ${name}`, title: 'Remove',
      onclick: () => this.remove(sessionId, item),
    }, icon('cross')));
  }
}

/** A user message's file parts, for its bubble: thumbnails and links, or null when none. */
export function messageFiles(m) {
  const files = m.content.filter((c) => c.type === 'file');
  if (files.length === 0) return null;
  return h('div', { class: 'msg-files' }, files.map((f) => isPicture(f.mediaType)
    ? h('a', { class: 'msg-file-image', href: f.url, target: '_blank', rel: 'noopener', title: `${f.name} · ${fileSize(f.size)}` },
      h('img', { src: f.url, alt: f.name, loading: 'lazy' }))
    // Opened as a download, never rendered by the browser (an SVG or HTML file included).
    : h('a', { class: 'msg-file', href: f.url, download: f.name },
      icon('file'), h('span', { class: 'attachment-name' }, f.name), h('span', { class: 'attachment-size' }, fileSize(f.size)))));
}
