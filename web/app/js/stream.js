// Recovering: a stream that comes back by itself (seed 001), and RecoveringStream, its
// EventSource carrier.
//
// The browser's own EventSource retry is not used: on any error the source is closed and
// we reconnect after a delay that starts at 1.5 s and doubles up to 30 s; any message or
// heartbeat resets it. Each connection asks `url()` afresh, so it carries the store's
// latest cursor (or none, to get a snapshot). Callbacks of a replaced connection are
// ignored. Nothing here sends a command: recovering only ever re-reads.

export const BACKOFF_MIN = 1500;
export const BACKOFF_MAX = 30_000;

/**
 * The recovery every stream of the page shares, whatever carries it: states, backoff,
 * resync and pause. A carrier implements `begin()` (open one attempt, asking `url()`)
 * and `end()` (close it so that none of its callbacks count any more).
 */
export class Recovering {
  /**
   * url(): the address for the next connection; onMessage(data); onOpen(); onDown(delayMs)
   * when the connection is lost (delayMs until the next try, or null while offline).
   */
  constructor({ url, onMessage, onOpen, onDown }) {
    Object.assign(this, { url, onMessage, onOpen, onDown });
    this.timer = null;
    this.delay = BACKOFF_MIN;
    this.state = 'idle'; // connecting | open | waiting | offline | stopped
    this.lastActivity = Date.now();
    this.lastResync = 0;
    this.nextTry = null;
  }

  get open() {
    return this.state === 'open';
  }

  start() {
    this.connect();
  }

  connect() {
    if (this.state === 'stopped') return;
    this.clear();
    if (navigator.onLine === false) {
      this.state = 'offline';
      this.onDown?.(null);
      return;
    }
    this.state = 'connecting';
    this.lastActivity = Date.now();
    this.begin();
  }

  opened() {
    this.lastActivity = Date.now();
    if (this.state !== 'open') {
      this.state = 'open';
      this.onOpen?.();
    }
  }

  alive() {
    this.delay = BACKOFF_MIN;
    this.opened();
  }

  fail() {
    this.clear();
    this.state = 'waiting';
    const wait = this.delay;
    this.delay = Math.min(this.delay * 2, BACKOFF_MAX);
    this.nextTry = Date.now() + wait;
    this.timer = setTimeout(() => this.connect(), wait);
    this.onDown?.(wait);
  }

  /** Close and reconnect now (page came back, network online, watchdog, Retry). */
  rebuild() {
    if (this.state === 'stopped') return;
    this.delay = BACKOFF_MIN;
    this.connect();
  }

  /** The consumer refused a frame: reconnect for a snapshot, through the backoff if it keeps happening. */
  resync() {
    if (this.state === 'stopped') return;
    const now = Date.now();
    const again = now - this.lastResync < 5000;
    this.lastResync = now;
    if (again) this.fail();
    else this.connect();
  }

  /** Browser offline: close and wait for `online` (no timer). */
  pause() {
    if (this.state === 'stopped') return;
    this.clear();
    this.state = 'offline';
    this.onDown?.(null);
  }

  stop() {
    this.clear();
    this.state = 'stopped';
  }

  clear() {
    clearTimeout(this.timer);
    this.timer = null;
    this.nextTry = null;
    this.end();
  }
}

/** One EventSource per stream (the carrier where WebSocket is missing). */
export class RecoveringStream extends Recovering {
  constructor(options) {
    super(options);
    this.source = null;
    this.gen = 0;
  }

  begin() {
    const gen = ++this.gen;
    const source = new EventSource(this.url());
    this.source = source;
    source.onopen = () => gen === this.gen && this.opened();
    source.onmessage = (e) => {
      if (gen !== this.gen) return;
      this.alive();
      this.onMessage(e.data);
    };
    source.addEventListener('heartbeat', () => gen === this.gen && this.alive());
    source.onerror = () => gen === this.gen && this.fail();
  }

  end() {
    this.gen++;
    this.source?.close();
    this.source = null;
  }
}
