// openStream(): the page's long-lived streams (a session's frames, the list stream),
// carried over the browser's one shared socket when it can be (stream_router.js says
// why), otherwise over one EventSource each (stream.js).
//
// Which carrier, in order: a SharedWorker holding one WebSocket for every tab of this
// origin; where SharedWorker is missing (Chrome on Android, some embedded views) this
// tab's own WebSocket, through the same router on a MessageChannel; where WebSocket is
// missing too, EventSource. `localStorage['spool.transport']` = `shared` | `tab` | `sse`
// forces one (for tests and for a proxy that breaks WebSockets).
//
// SocketStream and RecoveringStream share their recovery (stream.js's Recovering), so
// views and Connectivity do not care which carrier they got: on any loss the stream
// waits 1.5 s doubling to 30 s, any message or heartbeat resets that, each attempt asks
// `url()` afresh (so it carries the store's latest cursor), messages of a replaced
// attempt are ignored, and nothing here sends a command.

import { SocketRouter, socketUrl } from './stream_router.js';
import { Recovering, RecoveringStream } from './stream.js';

let link = null;

/** A stream with RecoveringStream's interface: {url, onMessage, onOpen, onDown}. */
export function openStream(options) {
  const kind = transport();
  if (kind === 'sse') return new RecoveringStream(options);
  link ??= new Link(kind);
  return new SocketStream(link, options);
}

function transport() {
  let forced = null;
  try {
    forced = localStorage.getItem('spool.transport');
  } catch {
    // storage refused (privacy mode): choose by what exists
  }
  if (forced === 'sse' || typeof WebSocket !== 'function') return 'sse';
  if (forced === 'tab' || typeof SharedWorker !== 'function') return 'tab';
  return 'shared';
}

/** This tab's end of the router: a SharedWorker's port, or a local router's. */
class Link {
  constructor(kind) {
    this.kind = kind;
    this.streams = new Map(); // id → SocketStream
    this.up = false;
    this.next = 1;
    if (kind === 'shared') {
      try {
        this.port = new SharedWorker('/ui/js/stream_worker.js', { type: 'module', name: 'spool-streams' }).port;
      } catch {
        this.port = null; // a CSP or policy refusing workers: run the router here
      }
    }
    if (!this.port) {
      this.kind = 'tab';
      const channel = new MessageChannel();
      new SocketRouter(socketUrl(location)).attach(channel.port1);
      this.port = channel.port2;
    }
    this.port.onmessage = (e) => this.receive(e.data);
    this.port.start();
    this.announce();
    // Presence: the server counts an answerer on a hidden page as not looking (a push
    // notification may then reach the person), so the tab says when it hides and shows.
    document.addEventListener('visibilitychange', () => this.port.postMessage({ t: 'presence', visible: visible() }));
  }

  /** Tells a shared router when this tab is gone (see SocketRouter's `hello`). */
  announce() {
    if (this.kind !== 'shared') return;
    const tab = crypto.randomUUID?.() ?? `${Date.now()}-${Math.random()}`;
    // Hello only once the lock is ours: asked earlier, the worker could get it first
    // and take the tab for gone.
    navigator.locks?.request(`spool-tab:${tab}`, () => {
      this.port.postMessage({ t: 'hello', tab });
      return new Promise(() => {});
    });
    // A page going into the back/forward cache keeps its streams open in the worker
    // otherwise; `pageshow` rebuilds them (Connectivity).
    addEventListener('pagehide', () => this.port.postMessage({ t: 'bye' }));
  }

  newId() {
    return `s${this.next++}`;
  }

  open(id, spec, stream) {
    this.streams.set(id, stream);
    this.port.postMessage({ t: 'open', id, spec });
  }

  close(id) {
    if (this.streams.delete(id)) this.port.postMessage({ t: 'close', id });
  }

  receive(m) {
    if (m.t === 'msg') this.streams.get(m.id)?.event(parseEvent(m.text));
    else if (m.t === 'all') {
      const e = parseEvent(m.text);
      for (const s of this.streams.values()) s.shared(e);
    } else if (m.t === 'up') this.up = true;
    else if (m.t === 'down') {
      this.up = false;
      for (const s of [...this.streams.values()]) s.lost();
      this.streams.clear();
    }
  }
}

/** One SSE event, as the server framed it: {event, data} (`message` when unnamed). */
export function parseEvent(text) {
  let event = 'message';
  const data = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
    else if (line.startsWith('event:')) event = line.slice(6).trim();
  }
  return { event, data: data.join('\n') };
}

/** What the socket is asked to open for an EventSource address of ours. */
export function specFor(url) {
  const u = new URL(url, location.origin);
  if (u.pathname === '/api/workspaces/events') return { lists: true };
  const m = u.pathname.match(/^\/api\/sessions\/([^/]+)\/events$/);
  if (!m) throw new Error(`no socket stream for ${url}`);
  const approvals = ['1', 'true'].includes(u.searchParams.get('approvals'));
  return { session: decodeURIComponent(m[1]), cursor: u.searchParams.get('cursor'), approvals, visible: visible() };
}

/** Whether this tab's page is visible now. */
function visible() {
  return typeof document === 'undefined' || document.visibilityState !== 'hidden';
}

/** A stream over the shared socket: Recovering's states and backoff, the link's carrying. */
export class SocketStream extends Recovering {
  constructor(link, options) {
    super(options);
    this.link = link;
    this.id = null;
    // The status of the last refusal the server sent for this stream (404: the session
    // is gone), for views that want to say more than "reconnecting".
    this.refused = null;
  }

  begin() {
    this.id = this.link.newId();
    this.link.open(this.id, specFor(this.url()), this);
  }

  end() {
    if (this.id !== null) this.link.close(this.id);
    this.id = null;
  }

  /** An event of this stream's current attempt. */
  event({ event, data }) {
    if (event === 'open') {
      this.refused = null;
      return this.opened();
    }
    if (event === 'error') {
      try {
        this.refused = JSON.parse(data).status ?? null;
      } catch {
        this.refused = null;
      }
      return this.fail();
    }
    if (event === 'end') return this.fail();
    this.alive();
    if (event === 'message') this.onMessage(data);
  }

  /** An event for every stream of the socket: a heartbeat says the socket is alive. */
  shared({ event }) {
    if (event === 'heartbeat' && this.state === 'open') this.alive();
  }

  /** The socket went away (the link already forgot this stream). */
  lost() {
    this.id = null;
    if (this.state === 'connecting' || this.state === 'open') this.fail();
  }
}
