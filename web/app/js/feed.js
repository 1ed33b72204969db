// FrameFeed: the paint batching between a session's stream and its store (seed 001).
//
// `message_update` frames (token deltas) wait for the next animation frame and are
// applied and painted together; if paints are suspended (a hidden tab gets no animation
// frames) they are flushed once 128 are pending, so memory and the cursor never fall far
// behind. Every other frame first drains the pending deltas, then is applied and painted
// at once: results, errors, approvals, run boundaries and `tool_execution_start` are
// never delayed behind a batch.

export const MAX_PENDING = 128;

export class FrameFeed {
  /**
   * store: a SessionStore; paint(): repaints the view; onResync(reason): the store
   * refused a frame and the connection must be rebuilt for a fresh snapshot.
   */
  constructor({
    store,
    paint,
    onResync,
    schedule = (fn) => requestAnimationFrame(fn),
    cancel = (handle) => cancelAnimationFrame(handle),
  }) {
    this.store = store;
    this.paint = paint;
    this.onResync = onResync;
    this.schedule = schedule;
    this.cancel = cancel;
    this.pending = [];
    this.handle = null;
    this.disposed = false;
  }

  push(frame) {
    if (this.disposed) return;
    if (frame.type === 'loop.event' && frame.event?.type === 'message_update') {
      this.pending.push(frame);
      if (this.pending.length >= MAX_PENDING) this.flush();
      else if (this.handle === null) this.handle = this.schedule(() => {
        this.handle = null;
        this.flush();
      });
      return;
    }
    if (!this.flush()) return;
    this.settle(this.store.apply(frame));
    this.paint();
  }

  /** Applies pending deltas now. Returns false when they forced a resync. */
  flush() {
    if (this.handle !== null) {
      this.cancel(this.handle);
      this.handle = null;
    }
    if (this.disposed || this.pending.length === 0) return true;
    const batch = this.pending;
    this.pending = [];
    const ok = this.settle(this.store.applyBatch(batch));
    this.paint();
    return ok;
  }

  settle(result) {
    if (result && typeof result === 'object' && result.resync) {
      this.pending = [];
      this.onResync(result.resync);
      return false;
    }
    return true;
  }

  /** Cancels scheduled work; late frames are ignored. */
  dispose() {
    if (this.handle !== null) this.cancel(this.handle);
    this.handle = null;
    this.pending = [];
    this.disposed = true;
  }
}
