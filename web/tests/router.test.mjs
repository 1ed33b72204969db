// The shared stream socket's router (web/app/js/stream_router.js), without a browser:
// a fake WebSocket stands in for the server so each rule is checked on its own — streams
// of two tabs never mix, a close before the socket opens sends nothing, a tab that goes
// away takes its streams along, and a lost socket tells every tab.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SocketRouter } from '../app/js/stream_router.js';

class FakeSocket {
  static CONNECTING = 0;
  static OPEN = 1;
  static made = [];
  constructor(url) {
    this.url = url;
    this.readyState = FakeSocket.CONNECTING;
    this.sent = [];
    FakeSocket.made.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  accept() {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }
  say(text) {
    this.onmessage?.({ data: text });
  }
  drop() {
    this.readyState = 3;
    this.onclose?.();
  }
}
globalThis.WebSocket = FakeSocket;

/** A tab's end: what it posts, and what the router posted to it. */
function tab(router) {
  const got = [];
  const port = { postMessage: (m) => got.push(m) };
  router.attach(port);
  return { got, say: (m) => port.onmessage({ data: m }) };
}

function fresh() {
  FakeSocket.made = [];
  const locks = { granted: new Map(), request(name, fn) { this.granted.set(name, fn); } };
  return { router: new SocketRouter('ws://x/api/streams', locks), locks };
}

test('opens wait for the socket, are prefixed per tab, and each tab gets only its own messages', () => {
  const { router } = fresh();
  const a = tab(router);
  const b = tab(router);
  a.say({ t: 'open', id: 's1', spec: { session: 'ses_a', cursor: null, approvals: true } });
  b.say({ t: 'open', id: 's1', spec: { lists: true } });
  assert.equal(FakeSocket.made.length, 1, 'one socket for both tabs');
  const socket = FakeSocket.made[0];
  assert.deepEqual(socket.sent, [], 'nothing is sent before the socket opens');
  socket.accept();
  assert.deepEqual(socket.sent, [
    { op: 'open', id: '1.s1', session: 'ses_a', cursor: null, approvals: true },
    { op: 'open', id: '2.s1', lists: true },
  ]);
  assert.deepEqual(a.got, [{ t: 'up' }]);
  socket.say('1.s1\nid: stm:1\ndata: {"a":1}\n\n');
  socket.say('2.s1\ndata: {"b":2}\n\n');
  socket.say('\nevent: heartbeat\ndata: {}\n\n');
  assert.deepEqual(a.got.slice(1), [
    { t: 'msg', id: 's1', text: 'id: stm:1\ndata: {"a":1}\n\n' },
    { t: 'all', text: 'event: heartbeat\ndata: {}\n\n' },
  ]);
  assert.deepEqual(b.got.slice(1), [
    { t: 'msg', id: 's1', text: 'data: {"b":2}\n\n' },
    { t: 'all', text: 'event: heartbeat\ndata: {}\n\n' },
  ]);
});

test('a stream closed before the socket opens is never opened; one closed later is closed on the server', () => {
  const { router } = fresh();
  const a = tab(router);
  a.say({ t: 'open', id: 's1', spec: { lists: true } });
  a.say({ t: 'open', id: 's2', spec: { lists: true } });
  a.say({ t: 'close', id: 's1' });
  const socket = FakeSocket.made[0];
  socket.accept();
  assert.deepEqual(socket.sent, [{ op: 'open', id: '1.s2', lists: true }]);
  a.say({ t: 'close', id: 's2' });
  a.say({ t: 'close', id: 's2' });
  assert.deepEqual(socket.sent.at(-1), { op: 'close', id: '1.s2' });
  assert.equal(socket.sent.length, 2, 'closing twice sends one close');
  socket.say('1.s2\ndata: {}\n\n');
  assert.deepEqual(a.got, [{ t: 'up' }], 'a message racing the close is dropped');
});

test('a tab that is gone takes its streams along; pagehide closes them but keeps the tab', () => {
  const { router, locks } = fresh();
  const a = tab(router);
  const b = tab(router);
  a.say({ t: 'hello', tab: 'A' });
  a.say({ t: 'open', id: 's1', spec: { lists: true } });
  b.say({ t: 'open', id: 's1', spec: { lists: true } });
  const socket = FakeSocket.made[0];
  socket.accept();
  locks.granted.get('spool-tab:A')(); // tab A's lock was released: the tab is gone
  assert.deepEqual(socket.sent.slice(2), [{ op: 'close', id: '1.s1' }]);
  socket.say('2.s1\ndata: {}\n\n');
  assert.equal(b.got.at(-1).t, 'msg', 'the other tab keeps its stream');
  b.say({ t: 'bye' });
  assert.deepEqual(socket.sent.at(-1), { op: 'close', id: '2.s1' });
  b.say({ t: 'open', id: 's2', spec: { lists: true } });
  assert.deepEqual(socket.sent.at(-1), { op: 'open', id: '2.s2', lists: true }, 'after pagehide the tab can come back');
});

test('a lost socket tells every tab, forgets every stream, and the next open makes a new socket', () => {
  const { router } = fresh();
  const a = tab(router);
  const b = tab(router);
  a.say({ t: 'open', id: 's1', spec: { lists: true } });
  FakeSocket.made[0].accept();
  FakeSocket.made[0].drop();
  assert.deepEqual(a.got.at(-1), { t: 'down' });
  assert.deepEqual(b.got.at(-1), { t: 'down' });
  FakeSocket.made[0].say('1.s1\ndata: {}\n\n');
  assert.equal(a.got.filter((m) => m.t === 'msg').length, 0, 'the old socket is ignored');
  a.say({ t: 'open', id: 's3', spec: { lists: true } });
  assert.equal(FakeSocket.made.length, 2);
  FakeSocket.made[1].accept();
  assert.deepEqual(FakeSocket.made[1].sent, [{ op: 'open', id: '1.s3', lists: true }], 'the old stream is not reopened behind the tab');
});
