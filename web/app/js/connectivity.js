// Page-level connection signals for every open stream (seed 001): `offline` closes them
// at once (content and drafts stay); `online`, a return from hidden to visible and a
// restore from the back/forward cache rebuild them; a watchdog checks every 15 s while
// the page is visible and rebuilds a stream that has heard nothing (not even a
// heartbeat) for more than 45 s. Rebuilding reconnects with the cursor; it never
// re-sends a command.

export const WATCHDOG_EVERY = 15_000;
export const SILENCE_LIMIT = 45_000;

export class Connectivity {
  constructor() {
    this.streams = new Set();
    this.listeners = new Set();
    this.online = navigator.onLine !== false;
    addEventListener('offline', () => {
      this.online = false;
      for (const s of this.streams) s.pause();
      this.emit();
    });
    addEventListener('online', () => {
      this.online = true;
      this.emit();
      this.rebuildAll();
    });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') this.rebuildAll();
    });
    addEventListener('pageshow', (e) => e.persisted && this.rebuildAll());
    setInterval(() => this.watch(), WATCHDOG_EVERY);
  }

  /** Registers a stream; returns the function that forgets it. */
  add(stream) {
    this.streams.add(stream);
    return () => this.streams.delete(stream);
  }

  onChange(fn) {
    this.listeners.add(fn);
  }

  emit() {
    for (const fn of this.listeners) fn(this.online);
  }

  rebuildAll() {
    if (!this.online) return;
    for (const s of this.streams) s.rebuild();
  }

  watch() {
    if (document.visibilityState !== 'visible') return;
    const now = Date.now();
    for (const s of this.streams) {
      const live = s.state === 'open' || s.state === 'connecting';
      if (live && now - s.lastActivity > SILENCE_LIMIT) s.rebuild();
    }
  }
}
