// Versions of a turn (issue 39): editing a prompt or regenerating an answer shelves the
// turn and what followed it as a branch, and the turn's prompt then shows ‹ 2/3 ›. The
// server says which turns have versions (SessionState `variants`: `{index, position,
// versions}`, where `versions[p - 1]` is null for the one on the active path and a
// branch's ordinal otherwise), so nothing here keeps a tree: a switch is
// `POST /api/sessions/:id/branch {ordinal}` for the neighbour, and the `session.state`
// frame that follows redraws every open view, this one included.
//
// The server refuses a switch while a run goes or prompts wait (409 `session_busy`), so the
// arrows are disabled then and say why. After a switch the ordinals shown are stale until
// that frame comes (the branch switched to is gone, the old path has a new ordinal): the
// arrows stay disabled until the state changes, so a quick second click cannot name a
// branch that no longer exists.

import { post } from './api.js';
import { h } from './dom.js';

/**
 * True when the session's path may change: no run (going or parked at a card), nothing
 * streaming and no prompt queued. The server refuses edits, switches and undos otherwise.
 */
export function idle(store) {
  return store.status !== 'busy' && store.drafts.size === 0 && store.queue.length === 0;
}

/** What a person reads when the server refused a change of the path. */
export function refusal(e) {
  if (e.code === 'session_busy') return 'A run is going or prompts are queued: try again once it has finished.';
  if (e.uncertain) return 'Not confirmed: the server did not answer. The conversation shows what happened.';
  return e.message;
}

/** How long a switch that was answered waits for its state frame before the arrows work again. */
const SETTLE_MS = 5000;

export class Branches {
  /** changed(index): repaint that prompt's row; resync(why): ask the stream for a fresh snapshot. */
  constructor(sessionId, { changed, resync }) {
    this.sessionId = sessionId;
    this.changed = changed;
    this.resync = resync;
    this.switching = null; // {index, epoch, answered}: a switch sent, until the state it made arrives
    this.errors = new Map(); // user message index → why its last switch failed
  }

  variant(store, i) {
    return store.variants.find((v) => v.index === i && v.versions.length > 1) ?? null;
  }

  /** True while a switch waits for its answer or for the state it made. */
  pending(store) {
    const s = this.switching;
    if (s?.answered && store.epoch !== s.epoch) this.switching = null;
    return this.switching !== null;
  }

  /** What the switcher of prompt `i` depends on, for the timeline's row cache. */
  key(store, i) {
    const v = this.variant(store, i);
    if (!v) return '';
    return `${v.position}/${v.versions.join()}:${this.pending(store)}:${this.errors.get(i) ?? ''}`;
  }

  /** ‹ 2/3 › for prompt `i`, or null when its turn has one version. */
  switcher(store, i, connected) {
    const v = this.variant(store, i);
    if (!v) return null;
    const n = v.versions.length;
    const at = v.position;
    const free = idle(store);
    const can = connected && free && !this.pending(store);
    const why = !free ? 'Switch versions once the run has finished' : !connected ? 'Disconnected' : null;
    const step = (to, label, glyph) => h('button', {
      class: 'version-step', type: 'button', dataset: { version: to }, 'aria-label': label,
      title: why ?? `Show version ${to} of ${n}`, disabled: !can || to < 1 || to > n,
      onclick: () => this.switch(store, i, v.versions[to - 1]),
    }, glyph);
    return h('span', { class: 'versions', role: 'group', 'aria-label': `Version ${at} of ${n}`, dataset: { position: at, count: n } },
      step(at - 1, 'Previous version', '‹'),
      h('span', { class: 'version-at', 'aria-hidden': 'true' }, `${at}/${n}`),
      step(at + 1, 'Next version', '›'));
  }

  error(i) {
    const e = this.errors.get(i);
    return e ? h('p', { class: 'msg-action-error', role: 'alert' }, e) : null;
  }

  async switch(store, i, ordinal) {
    if (this.pending(store) || typeof ordinal !== 'number') return;
    // The state before the switch: any newer one (the switch's frame may come before
    // its answer) holds ordinals that are current again.
    const sent = { index: i, epoch: store.epoch, answered: false };
    this.switching = sent;
    this.errors.delete(i);
    this.changed(i);
    try {
      await post(`/api/sessions/${encodeURIComponent(this.sessionId)}/branch`, { ordinal });
      sent.answered = true;
      // A frame that never comes (a stream that is down) must not leave the arrows dead.
      setTimeout(() => {
        if (this.switching !== sent) return;
        this.switching = null;
        this.changed(i);
      }, SETTLE_MS);
    } catch (e) {
      this.switching = null;
      this.errors.set(i, refusal(e));
      // Not found: the branch went meanwhile (another tab switched); the stream's state says how it is now.
      if (e.uncertain || e.status === 404) this.resync(`switching versions answered ${e.status || 'nothing'}`);
    } finally {
      this.changed(i);
    }
  }
}
