// SessionView: one open conversation. Loads `GET /api/sessions/:id`, then follows
// `/api/sessions/:id/events?approvals=1` with the store's cursor; frames go through the
// FrameFeed (paint batching) into the session's SessionStore, and the Timeline paints it.
//
// Connection handling (seed 001): backoff lives in RecoveringStream; here we show the
// reconnect notice only after 2 s without a connection (the grace restarts with every
// view, i.e. on session switch), drain pending deltas before reconnecting, and turn a
// refused frame, a parse error, Retry or an uncertain decision into a fresh snapshot.
// None of these paths re-sends a command. Disposing closes only this view's stream.

import { get, post, patch, del } from './api.js';
import { FrameFeed } from './feed.js';
import { newId } from './format.js';
import { parseFrame } from './store.js';
import { openStream } from './streams.js';
import { Timeline } from './timeline.js';
import { MessageActions } from './message_actions.js';

export const NOTICE_GRACE_MS = 2000;

export class SessionView {
  /**
   * store: this session's SessionStore (kept across switches); connectivity; scroller:
   * the timeline element; onChange(view): header, composer and sidebar repaint;
   * prompt: the composer's textarea (the focus goes there after the last approval).
   */
  constructor({ store, connectivity, scroller, onChange, examples, prompt }) {
    this.store = store;
    this.id = store.sessionId;
    this.connectivity = connectivity;
    this.onChange = onChange;
    this.disposed = false;
    this.error = null; // a load error shown instead of the conversation
    this.deleted = false; // the server said 404: see gone()
    this.downSince = Date.now();
    this.showNotice = false;
    this.retryIn = null;
    this.keys = new Map(); // `${approvalId}:${decision}` → idempotency key
    this.actions = new MessageActions(this.id, () => this.paint(), { prompt, resync: (why) => this.resync(why) });
    this.timeline = new Timeline(scroller, {
      onLoadEarlier: () => this.loadEarlier(),
      actions: this.actions,
      connected: () => this.connected,
      decide: (a, d, m, extra) => this.decide(a, d, m, extra),
      removeQueued: (q) => this.removeQueued(q),
      resumeQueue: () => this.resumeQueue(),
      examples,
      prompt,
    });
    this.feed = new FrameFeed({ store, paint: () => this.paint(), onResync: (why) => this.resync(why) });
    this.stream = openStream({
      url: () => this.url(),
      onMessage: (data) => this.onMessage(data),
      onOpen: () => this.up(),
      onDown: (wait) => this.down(wait),
    });
    this.forget = connectivity.add(this.stream);
    this.noticeTimer = setTimeout(() => this.checkNotice(), NOTICE_GRACE_MS);
    this.ticker = setInterval(() => this.store.status === 'busy' && this.paint(), 1000);
  }

  get connected() {
    return this.stream.open;
  }

  async open() {
    this.paint();
    if (!this.store.loaded) {
      try {
        const detail = await get(`/api/sessions/${encodeURIComponent(this.id)}`);
        if (this.disposed) return;
        this.store.load(detail);
      } catch (e) {
        if (this.disposed) return;
        if (e.status === 404) return this.gone();
        // The stream's snapshot will load it once the server is reachable.
      }
    }
    this.paint();
    this.stream.start();
  }

  url() {
    this.feed.flush(); // the cursor must include every frame already received
    const cursor = this.store.cursorParam();
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    return `/api/sessions/${encodeURIComponent(this.id)}/events?approvals=1&client=web${q}`;
  }

  onMessage(data) {
    let frame;
    try {
      frame = parseFrame(data);
    } catch {
      return this.resync('malformed frame');
    }
    this.feed.push(frame);
  }

  resync(why) {
    console.info(`spool: ${this.id}: ${why}; asking for a fresh snapshot`);
    this.feed.flush();
    this.store.requestSnapshot();
    this.stream.resync();
  }

  up() {
    this.downSince = null;
    this.showNotice = false;
    this.retryIn = null;
    this.paint(); // rows' Edit/Regenerate/Retry are enabled only while connected
  }

  down(wait) {
    if (this.deleted) return;
    // The shared socket says why a stream was refused; an EventSource cannot.
    if (this.stream.refused === 404) return this.gone();
    this.feed.flush();
    if (wait !== null) this.probe();
    if (this.downSince === null) this.downSince = Date.now();
    this.retryIn = wait;
    clearTimeout(this.noticeTimer);
    this.noticeTimer = setTimeout(() => this.checkNotice(), Math.max(0, this.downSince + NOTICE_GRACE_MS - Date.now()));
    this.paint();
  }

  /** Why can we not connect? A deleted session (404) ends the view; a 401 asks for a token (api.js). */
  async probe() {
    if (this.probing) return;
    this.probing = true;
    try {
      await get(`/api/sessions/${encodeURIComponent(this.id)}`);
    } catch (e) {
      if (e.status === 404) this.gone();
    } finally {
      this.probing = false;
    }
  }

  /**
   * The server says the session does not exist (a 404 on load or on reconnect; a
   * stream that ends with 404 comes here too): the view says it was deleted and stops
   * reconnecting for good, instead of showing "Reconnecting…" for ever.
   */
  gone() {
    if (this.disposed || this.deleted) return;
    this.deleted = true;
    this.error = 'This session was deleted.';
    this.stream.stop();
    clearTimeout(this.noticeTimer);
    this.showNotice = false;
    this.retryIn = null;
    this.changed();
  }

  checkNotice() {
    if (this.disposed || this.deleted || this.downSince === null) return;
    this.showNotice = Date.now() - this.downSince >= NOTICE_GRACE_MS;
    this.changed();
  }

  /** Retry in the reconnect notice: reconnect now, for a fresh snapshot. */
  retry() {
    this.store.requestSnapshot();
    this.stream.rebuild();
  }

  async loadEarlier() {
    const before = this.store.firstKnown();
    if (before <= 0 || this.timeline.loadingEarlier) return;
    this.timeline.loadingEarlier = true;
    this.paint();
    try {
      const page = await get(`/api/sessions/${encodeURIComponent(this.id)}/messages?before=${before}&limit=50`);
      if (this.disposed) return;
      this.timeline.loadingEarlier = false;
      this.timeline.keepPosition(() => {
        this.store.prependHistory(page.messages);
        this.paint();
      });
    } catch {
      this.timeline.loadingEarlier = false;
      this.paint();
    }
  }

  /**
   * Shows message `index` (a search result's match): pages of earlier history are
   * loaded until it is here, then the conversation scrolls to it and marks it a moment.
   * Asked before the conversation loaded, it waits for the load (see `paint`).
   */
  reveal(index) {
    this.wanted = index;
    this.revealWanted();
  }

  async revealWanted() {
    const index = this.wanted;
    if (index === null || index === undefined || !this.store.loaded || this.revealing) return;
    this.revealing = true;
    try {
      while (!this.disposed && this.wanted === index && this.store.firstKnown() > index) {
        const known = this.store.firstKnown();
        await this.loadEarlier();
        if (this.store.firstKnown() === known) break; // the page failed: show what is here
      }
    } finally {
      this.revealing = false;
    }
    if (this.disposed) return;
    if (this.wanted !== index) return this.revealWanted();
    this.wanted = null;
    this.timeline.reveal(index);
  }

  /**
   * One idempotency key per decision on a card: a double click or a retry sends the same
   * key, so the server acts once. Success shows through the stream; a failed or uncertain
   * answer asks for a fresh snapshot instead of trusting the HTTP result. A 409
   * `resource_changed` is definite: the file changed after the card was shown, nothing
   * ran, and the stream brings the new card (with a fresh preview), which says why it
   * is there.
   */
  async decide(approval, decision, message, extra) {
    // An answer to a question is `{fill: {answer}}`: one key per distinct answer (and
    // per "always" choice: `extra` carries its `patterns`).
    const busy = typeof decision === 'string' ? decision : 'fill';
    const k = `${approval.id}:${JSON.stringify([decision, extra ?? null])}`;
    if (!this.keys.has(k)) this.keys.set(k, newId('dec'));
    const ui = this.timeline.ui;
    ui.set(approval.id, { busy });
    this.paint();
    try {
      await post(`/api/sessions/${encodeURIComponent(this.id)}/approvals/${encodeURIComponent(approval.id)}`, {
        ...extra,
        decision,
        message,
        idempotencyKey: this.keys.get(k),
      });
      if (!this.disposed && ui.get(approval.id)?.busy === busy) ui.set(approval.id, { busy });
    } catch (e) {
      if (this.disposed) return;
      if (e.code === 'resource_changed' && e.approvalId) {
        ui.delete(approval.id);
        ui.set(e.approvalId, { notice: `${approval.payload?.argument ?? 'The file'} changed after you were asked, so nothing was written. Here is the change against the file as it is now; decide again.` });
        return this.paint();
      }
      ui.set(approval.id, { error: e.uncertain ? 'No answer from the server; checking the current state…' : e.message });
      this.resync(`decision answered ${e.status || 'nothing'}`);
    }
    this.paint();
  }

  /**
   * Removes a queued prompt before a run takes it. The stream shows the queue as it is
   * (removed, or taken by a run first: then the server says 404 and the prompt is
   * already in the conversation); anything uncertain asks for a fresh snapshot.
   */
  async removeQueued(queued) {
    const removing = this.timeline.removing;
    if (removing.has(queued.id)) return;
    removing.add(queued.id);
    this.paint();
    try {
      await del(`/api/messages/${encodeURIComponent(queued.id)}`);
    } catch (e) {
      if (!this.disposed && e.status !== 404) this.resync(`removing a queued prompt answered ${e.status || 'nothing'}`);
    } finally {
      removing.delete(queued.id);
      this.paint();
    }
  }

  /** Resume on a paused queue (Stop paused it): its next prompt runs; the stream shows it. */
  async resumeQueue() {
    if (this.timeline.resuming) return;
    this.timeline.resuming = true;
    this.paint();
    try {
      await post(`/api/sessions/${encodeURIComponent(this.id)}/queue/resume`);
    } catch (e) {
      if (!this.disposed) this.resync(`resuming the queue answered ${e.status || 'nothing'}`);
    } finally {
      this.timeline.resuming = false;
      this.paint();
    }
  }

  async setModel(model) {
    try {
      await patch(`/api/sessions/${encodeURIComponent(this.id)}`, { model });
    } catch {
      this.resync('model change failed');
    }
  }

  /** `plan` or `agent`; the session.state frame that follows repaints the toggle. */
  async setMode(mode) {
    try {
      await patch(`/api/sessions/${encodeURIComponent(this.id)}`, { mode });
    } catch {
      this.resync('mode change failed');
    }
  }

  async abort() {
    await post(`/api/sessions/${encodeURIComponent(this.id)}/abort`).catch(() => this.resync('abort failed'));
  }

  paint() {
    if (this.disposed) return;
    this.timeline.paint(this.store);
    if (this.wanted != null && !this.revealing) this.revealWanted();
    this.changed();
  }

  changed() {
    if (!this.disposed) this.onChange(this);
  }

  dispose() {
    this.disposed = true;
    this.feed.flush();
    this.feed.dispose();
    this.stream.stop();
    this.forget();
    clearTimeout(this.noticeTimer);
    clearInterval(this.ticker);
    this.actions.undo.dispose();
    this.timeline.dispose();
  }
}
