// ListSync: the sidebar's list caches (projects, each project's sessions and archived
// sessions), kept fresh by the list stream `GET /api/workspaces/events` (seed 000/001).
//
//   lists.reset          → refresh everything (every connection starts with one)
//   projects.changed {w} → projects, sessions of w, archived of w
//   sessions.changed {w} → sessions of w, archived of w
//
// Notifications only mark lists dirty; a 50 ms window coalesces a burst into one
// refresh. A refresh first aborts the one still in flight and takes over its lists, so
// an older response can never overwrite a newer change. Lists nobody shows (a collapsed
// project) stay stale until they are shown. Duplicate frames are dropped; a gap, another
// stream or a malformed frame means a full refresh.

import { get } from './api.js';
import { parseFrame } from './store.js';
import { openStream } from './streams.js';

export const COALESCE_MS = 50;

export class ListSync {
  constructor({ connectivity, onChange }) {
    this.onChange = onChange;
    this.projects = null;
    this.sessions = new Map(); // projectId → SessionInfo[]
    this.archived = new Map(); // projectId → SessionInfo[]
    this.active = (key) => key === 'projects';
    this.dirty = new Set();
    this.stale = new Set();
    this.timer = null;
    this.inFlight = null; // {keys, controller}
    this.cursor = null;
    this.stream = openStream({
      url: () => '/api/workspaces/events',
      onMessage: (data) => this.onMessage(data),
    });
    connectivity.add(this.stream);
  }

  start() {
    this.invalidate(['projects']);
    this.stream.start();
  }

  onMessage(data) {
    let frame;
    try {
      frame = parseFrame(data);
    } catch {
      this.cursor = null;
      return this.reset();
    }
    const c = this.cursor;
    const sameStream = c && c.streamId === frame.streamId;
    if (frame.type !== 'lists.reset' && sameStream && frame.seq <= c.seq) return; // duplicate
    const inOrder = sameStream && frame.seq === c.seq + 1;
    this.cursor = { streamId: frame.streamId, seq: frame.seq };
    if (frame.type === 'lists.reset' || !inOrder) return this.reset();
    const w = frame.workspaceId;
    if (frame.type === 'projects.changed') this.invalidate(['projects', `s:${w}`, `a:${w}`]);
    else if (frame.type === 'sessions.changed') this.invalidate([`s:${w}`, `a:${w}`]);
  }

  /** Every list we hold is out of date. */
  reset() {
    const keys = ['projects'];
    for (const id of this.sessions.keys()) keys.push(`s:${id}`);
    for (const id of this.archived.keys()) keys.push(`a:${id}`);
    this.invalidate([...keys, ...this.stale]);
  }

  /** Marks lists dirty; they refresh together after the coalescing window. */
  invalidate(keys, delay = COALESCE_MS) {
    for (const k of keys) this.dirty.add(k);
    if (this.timer === null) this.timer = setTimeout(() => this.refresh(), delay);
  }

  /** A list is about to be shown: fetch it if it is missing or stale. */
  use(key) {
    const id = key.slice(2);
    const missing = key.startsWith('s:') ? !this.sessions.has(id) : key.startsWith('a:') ? !this.archived.has(id) : !this.projects;
    if (missing || this.stale.has(key)) this.invalidate([key], 0);
  }

  async refresh() {
    this.timer = null;
    if (this.inFlight) {
      this.inFlight.controller.abort();
      for (const k of this.inFlight.keys) this.dirty.add(k);
    }
    const keys = [];
    for (const k of this.dirty) {
      if (this.active(k)) keys.push(k);
      else this.stale.add(k);
    }
    this.dirty.clear();
    if (keys.length === 0) return;
    const controller = new AbortController();
    const batch = { keys, controller };
    this.inFlight = batch;
    const results = await Promise.allSettled(keys.map((k) => this.fetch(k, controller.signal)));
    if (controller.signal.aborted) return; // a newer refresh took these lists over
    this.inFlight = null;
    results.forEach((r, i) => {
      const k = keys[i];
      if (r.status === 'fulfilled') {
        this.stale.delete(k);
        this.store(k, r.value);
      } else {
        this.stale.add(k); // shown as it was; the next notification or use refetches it
      }
    });
    this.onChange();
  }

  fetch(key, signal) {
    if (key === 'projects') return get('/api/projects', { signal });
    const id = encodeURIComponent(key.slice(2));
    const archived = key.startsWith('a:');
    return get(`/api/projects/${id}/sessions?archived=${archived}`, { signal });
  }

  store(key, value) {
    if (key === 'projects') {
      this.projects = value;
      const ids = new Set(value.map((p) => p.id));
      for (const map of [this.sessions, this.archived]) for (const id of map.keys()) if (!ids.has(id)) map.delete(id);
    } else if (key.startsWith('s:')) {
      this.sessions.set(key.slice(2), value);
    } else {
      this.archived.set(key.slice(2), value);
    }
  }

  /** The session record from any list we hold. */
  findSession(id) {
    for (const map of [this.sessions, this.archived]) for (const list of map.values()) {
      const s = list.find((x) => x.id === id);
      if (s) return s;
    }
    return null;
  }
}
