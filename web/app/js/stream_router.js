// SocketRouter: one WebSocket to `/api/streams` shared by every tab of this browser.
//
// Why: a browser allows six HTTP/1.1 connections per host, and each tab used to hold two
// long-lived EventSource streams (its session and the list stream), so a fourth tab's
// page request waited for ever. The server's `/api/streams` carries any number of native
// streams over one socket; this router sits in a SharedWorker (stream_worker.js) and
// hands each tab's streams their own messages. Without SharedWorker the tab runs the
// same router itself over a MessageChannel (streams.js), so there is one code path.
//
// Shape: the router is deliberately dumb. It keeps no timers and makes no decisions
// about recovery — backoff, the watchdog and cursors stay in each tab (streams.js, the
// stores), where Playwright's clock and the page's online/visibility signals reach
// them. The router opens the socket when a tab asks for a stream, forwards opens and
// closes, routes each message by its stream id, and when the socket goes tells every
// tab (`down`); the tabs' streams then reconnect with their cursors, which reopens it.
//
// Wire (server → router): `"<id>\n<SSE event>"`; an empty id is for every stream of the
// socket (heartbeats, a refused client message). Router → tab: {t:'up'|'down'},
// {t:'msg', id, text}, {t:'all', text}. Tab → router: {t:'hello', tab}, {t:'open', id,
// spec}, {t:'close', id}, {t:'bye'}, {t:'presence', visible} (the tab's page was hidden
// or shown: sent to the server for each of the tab's streams, `{type:'presence', id,
// visible}`). Stream ids are the tab's own, prefixed here with
// the tab's port number, so two tabs never collide.

export class SocketRouter {
  /** url: the socket's address; locks: `navigator.locks` where it exists (tab liveness). */
  constructor(url, locks = null) {
    this.url = url;
    this.locks = locks;
    this.ports = new Map(); // port number → port
    this.owners = new Map(); // socket stream id → {port number, tab's id}
    this.pending = []; // open messages waiting for the socket
    this.socket = null;
    this.nextPort = 1;
  }

  attach(port) {
    const n = this.nextPort++;
    this.ports.set(n, port);
    port.onmessage = (e) => this.fromTab(n, e.data);
    port.start?.();
    if (this.socket?.readyState === WebSocket.OPEN) port.postMessage({ t: 'up' });
  }

  fromTab(n, m) {
    if (!m || typeof m !== 'object') return;
    if (m.t === 'hello' && this.locks && typeof m.tab === 'string') {
      // The tab holds a lock of this name for as long as it lives; ours is granted when
      // it is gone (closed, crashed, navigated away), and its streams go with it. A
      // SharedWorker port has no close event of its own.
      this.locks.request(`spool-tab:${m.tab}`, () => this.forget(n));
    } else if (m.t === 'open' && typeof m.id === 'string') {
      const sid = `${n}.${m.id}`;
      this.owners.set(sid, { n, id: m.id });
      this.send({ op: 'open', id: sid, ...m.spec });
    } else if (m.t === 'close' && typeof m.id === 'string') {
      this.close(`${n}.${m.id}`);
    } else if (m.t === 'bye') {
      this.forget(n, false);
    } else if (m.t === 'presence' && typeof m.visible === 'boolean') {
      for (const [sid, owner] of this.owners) {
        if (owner.n === n) this.send({ type: 'presence', id: sid, visible: m.visible });
      }
    }
  }

  /** Closes every stream of a tab; `gone` also forgets the tab's port. */
  forget(n, gone = true) {
    for (const [sid, owner] of this.owners) if (owner.n === n) this.close(sid);
    if (gone) this.ports.delete(n);
  }

  close(sid) {
    if (!this.owners.delete(sid)) return;
    const before = this.pending.length;
    this.pending = this.pending.filter((m) => m.id !== sid);
    if (this.pending.length === before) this.send({ op: 'close', id: sid });
  }

  send(message) {
    const s = this.socket;
    if (s?.readyState === WebSocket.OPEN) return s.send(JSON.stringify(message));
    // A close or a presence before the socket exists has nothing to act on (an open
    // that waits carries the tab's visibility itself).
    if (message.op !== 'open') return;
    this.pending.push(message);
    if (!s) this.connect();
  }

  connect() {
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.onopen = () => {
      if (this.socket !== socket) return;
      for (const m of this.pending.splice(0)) socket.send(JSON.stringify(m));
      this.broadcast({ t: 'up' });
    };
    socket.onmessage = (e) => this.socket === socket && this.fromSocket(e.data);
    socket.onclose = () => this.socket === socket && this.lost();
  }

  fromSocket(data) {
    if (typeof data !== 'string') return;
    const cut = data.indexOf('\n');
    if (cut < 0) return;
    const sid = data.slice(0, cut);
    const text = data.slice(cut + 1);
    if (sid === '') return this.broadcast({ t: 'all', text });
    const owner = this.owners.get(sid);
    if (!owner) return; // closed by its tab while the message was on its way
    this.ports.get(owner.n)?.postMessage({ t: 'msg', id: owner.id, text });
  }

  /** The socket closed: every stream on it is gone; the tabs reconnect theirs. */
  lost() {
    this.socket = null;
    this.owners.clear();
    this.pending = [];
    this.broadcast({ t: 'down' });
  }

  broadcast(m) {
    for (const port of this.ports.values()) port.postMessage(m);
  }
}

/** The socket's address for a page or worker served from `origin`. */
export function socketUrl(loc) {
  return `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}/api/streams`;
}
