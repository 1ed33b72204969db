// The session store, delta application and paint batching, driven in Node with frames
// shaped like the golden frames in crates/protocol/tests/snapshots (no browser needed).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SessionStore, parseFrame } from '../app/js/store.js';
import { applyDelta } from '../app/js/deltas.js';
import { FrameFeed, MAX_PENDING } from '../app/js/feed.js';

const S = 'stm_a';
const state = (over = {}) => ({
  session: { id: 'ses_1', projectId: 'prj_1', title: 'T', titleSet: true, archived: false, model: null },
  status: 'idle',
  activeRun: null,
  messages: [],
  firstIndex: 0,
  total: 0,
  drafts: {},
  toolExecutions: {},
  promptTimings: {},
  pendingApprovals: [],
  lastApproval: null,
  ...over,
});
const snapshot = (seq, over, streamId = S) => ({ type: 'session.snapshot', state: state(over), sessionId: 'ses_1', streamId, seq });
const ev = (seq, event, messageIndex, streamId = S) => ({ type: 'loop.event', runId: 'run_1', messageIndex, event, sessionId: 'ses_1', streamId, seq });
const upd = (seq, index, d) => ev(seq, { type: 'message_update', assistantMessageEvent: d }, index);
const assistant = () => ({ role: 'assistant', content: [], usage: {}, model: 'scripted', timestamp: 1 });
const user = (text) => ({ role: 'user', content: [{ type: 'text', text }], timestamp: 1 });

function streaming() {
  const s = new SessionStore('ses_1');
  s.apply(snapshot(3, { messages: [{ index: 0, ...user('hi') }], total: 1, firstIndex: 0 }));
  s.apply(ev(4, { type: 'message_start', message: assistant() }, 1));
  s.apply(upd(5, 1, { type: 'text_start', contentIndex: 0 }));
  return s;
}

test('deltas build the draft; message_end commits it once', () => {
  const s = streaming();
  assert.equal(s.apply(upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'Hello' })), 'ok');
  assert.equal(s.apply(upd(7, 1, { type: 'text_delta', contentIndex: 0, offset: 5, delta: ' réad🌍' })), 'ok');
  assert.equal(s.textAt(1), 'Hello réad🌍');
  const final = { ...assistant(), content: [{ type: 'text', text: 'Hello réad🌍' }], stopReason: 'stop' };
  s.apply(ev(8, { type: 'message_end', message: final }, 1));
  assert.equal(s.drafts.size, 0);
  assert.equal(s.textAt(1), 'Hello réad🌍');
  assert.deepEqual(s.indexes(), [0, 1]);
  assert.equal(s.total, 2);
});

test('offsets count UTF-16 units: duplicates are dropped, overlaps trimmed, holes reported', () => {
  const draft = { ...assistant(), content: [{ type: 'text', text: '🌍a' }] }; // length 3
  assert.equal(applyDelta(draft, { type: 'text_delta', contentIndex: 0, offset: 0, delta: '🌍' }), 'duplicate');
  assert.equal(applyDelta(draft, { type: 'text_delta', contentIndex: 0, offset: 2, delta: 'ab' }), 'ok');
  assert.equal(draft.content[0].text, '🌍ab');
  assert.equal(applyDelta(draft, { type: 'text_delta', contentIndex: 0, offset: 9, delta: 'z' }), 'hole');
  assert.equal(applyDelta(draft, { type: 'text_start', contentIndex: 0 }), 'duplicate');
  assert.equal(applyDelta(draft, { type: 'text_delta', contentIndex: 1, offset: 0, delta: 'x' }), 'hole');
  assert.equal(draft.content[0].text, '🌍ab');
});

test('tool call arguments stream as text and become JSON at their end', () => {
  const draft = assistant();
  applyDelta(draft, { type: 'toolcall_start', contentIndex: 0, id: 'call_1', name: 'list' });
  applyDelta(draft, { type: 'toolcall_delta', contentIndex: 0, offset: 0, delta: '{"pa' });
  applyDelta(draft, { type: 'toolcall_delta', contentIndex: 0, offset: 4, delta: 'th":"."}' });
  applyDelta(draft, { type: 'toolcall_end', contentIndex: 0 });
  assert.deepEqual(draft.content[0], { type: 'toolCall', id: 'call_1', name: 'list', arguments: { path: '.' } });
});

test('duplicate frames are ignored and a gap or another stream asks for a snapshot', () => {
  const s = streaming();
  s.apply(upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'ab' }));
  assert.equal(s.apply(upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'ab' })), 'duplicate');
  assert.equal(s.apply(upd(5, 1, { type: 'text_start', contentIndex: 0 })), 'duplicate');
  assert.equal(s.textAt(1), 'ab');
  assert.deepEqual(s.apply(upd(8, 1, { type: 'text_delta', contentIndex: 0, offset: 3, delta: 'd' })), { resync: 'gap after seq 6' });
  assert.equal(s.cursor.seq, 6);
  assert.ok(s.apply(ev(7, { type: 'turn_end' }, undefined, 'stm_b')).resync);
  assert.equal(s.textAt(1), 'ab', 'nothing applied');
  assert.equal(s.cursorParam(), `${S}:6`);
  s.requestSnapshot();
  assert.equal(s.cursorParam(), null, 'the next connection asks for a snapshot');
});

test('older snapshots of the same stream are ignored; newer or other streams replace', () => {
  const s = streaming();
  assert.equal(s.apply(snapshot(2, { status: 'busy' })), 'ignored');
  assert.equal(s.drafts.size, 1);
  const drafts = { 1: { ...assistant(), content: [{ type: 'text', text: 'from snapshot' }] } };
  assert.equal(s.apply(snapshot(5, { drafts, messages: [{ index: 0, ...user('hi') }], total: 1 })), 'ok');
  assert.equal(s.textAt(1), 'from snapshot');
  assert.equal(s.apply(snapshot(1, {}, 'stm_new')), 'ok', 'a restarted server is a new stream');
  assert.deepEqual(s.cursor, { streamId: 'stm_new', seq: 1 });
});

test('a batch is validated as a whole before any of it applies', () => {
  const s = streaming();
  const good = upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'a' });
  const gap = upd(8, 1, { type: 'text_delta', contentIndex: 0, offset: 1, delta: 'b' });
  assert.ok(s.applyBatch([good, gap]).resync);
  assert.equal(s.textAt(1), '');
  assert.equal(s.applyBatch([good, good, upd(7, 1, { type: 'text_delta', contentIndex: 0, offset: 1, delta: 'b' })]), 'ok');
  assert.equal(s.textAt(1), 'ab');
});

test('a snapshot keeps earlier history only where it joins without a hole', () => {
  const s = new SessionStore('ses_1');
  const m = (i) => ({ index: i, ...user(`m${i}`) });
  s.apply(snapshot(1, { messages: [m(4), m(5)], firstIndex: 4, total: 6 }));
  assert.equal(s.firstKnown(), 4);
  s.prependHistory([m(1), m(2), m(3)]);
  assert.equal(s.firstKnown(), 1);
  s.apply(snapshot(9, { messages: [m(5), m(6)], firstIndex: 5, total: 7 }));
  assert.deepEqual(s.indexes(), [1, 2, 3, 4, 5, 6]);
  s.apply(snapshot(12, { messages: [m(9)], firstIndex: 9, total: 10 }));
  assert.deepEqual(s.indexes(), [9], 'messages 7 and 8 are unknown, so older ones would leave a hole');
});

test('live tool output joins at its offset: a snapshot seeds it, a repeat is dropped, a hole resyncs', () => {
  const s = new SessionStore('ses_1');
  const running = { toolCallId: 'c', toolName: 'bash', args: { command: 'make' }, status: 'running', result: null, output: 'a\n' };
  s.apply(snapshot(3, { toolExecutions: { c: running } }));
  assert.equal(s.tools.get('c').output, 'a\n', 'the snapshot carries the output so far');
  const out = (seq, offset, delta, truncated = false) =>
    ev(seq, { type: 'tool_execution_update', toolCallId: 'c', toolName: 'bash', offset, delta, truncated });
  assert.equal(s.apply(out(4, 2, 'é\n')), 'ok');
  assert.equal(s.apply(out(5, 0, 'a\n')), 'ok', 'an offset already passed is a repeat');
  assert.equal(s.tools.get('c').output, 'a\né\n');
  assert.equal(s.apply(out(6, 4, 'b', true)), 'ok', 'offsets count UTF-16 units, like JavaScript');
  assert.equal(s.tools.get('c').outputTruncated, true);
  assert.deepEqual(s.apply(out(7, 9, 'c')), { resync: 'delta hole at seq 7' });
  assert.equal(s.tools.get('c').output, 'a\né\nb');
});

test('tool executions, timings, approvals and run status follow their events', () => {
  const s = streaming();
  s.apply({ type: 'run.accepted', requestId: 'r', runId: 'run_1', sessionId: 'ses_1', streamId: S, seq: 6 });
  assert.equal(s.status, 'busy');
  s.apply(ev(7, { type: 'tool_execution_start', toolCallId: 'c', toolName: 'bash', args: { command: 'ls' } }));
  assert.equal(s.tools.get('c').status, 'running');
  s.apply(ev(8, { type: 'tool_execution_end', toolCallId: 'c', toolName: 'bash', result: 'a\nb', isError: false }));
  assert.equal(s.tools.get('c').status, 'success');
  s.apply(ev(9, { type: 'prompt_timing', userMessageIndex: 0, startedAt: 10, firstTokenAt: 20, endedAt: null }));
  assert.equal(s.timings.get(0).firstTokenAt, 20);
  const approval = { id: 'per_1', toolCallId: 'c2', tool: 'write', payload: {}, expiresAt: 0 };
  s.apply(ev(10, { type: 'approval_requested', approval }));
  s.apply(ev(11, { type: 'approval_requested', approval }));
  assert.equal(s.approvals.length, 1);
  assert.equal(s.activeRun.status, 'interrupted');
  s.apply(ev(12, { type: 'approval_resolved', approvalId: 'per_1', decision: 'once', actor: null }));
  assert.equal(s.approvals.length, 0);
  assert.equal(s.lastApproval.decision, 'once');
  s.apply(ev(13, { type: 'session_title', title: 'Named' }));
  assert.equal(s.session.title, 'Named');
});

test('the todo list comes with the state and is replaced whole by each todo_write', () => {
  const s = new SessionStore('ses_1');
  const first = [{ content: 'Plan', status: 'completed', id: '1' }, { content: 'Build', status: 'in_progress', id: '2' }];
  s.apply(snapshot(1, { todos: first }));
  assert.deepEqual(s.todos, first);
  const next = [{ content: 'Build', status: 'completed', id: '2' }];
  assert.equal(s.apply(ev(2, { type: 'todo_write', todos: next })), 'ok');
  assert.deepEqual(s.todos, next);
  s.apply({ type: 'session.state', state: state(), sessionId: 'ses_1', streamId: S, seq: 3 });
  assert.deepEqual(s.todos, [], 'a state from before todos existed has none');
});

test('parseFrame refuses what is not a frame', () => {
  assert.throws(() => parseFrame('{"type":"x"}'));
  assert.throws(() => parseFrame('not json'));
  assert.equal(parseFrame(JSON.stringify(ev(1, { type: 'turn_end' }))).seq, 1);
});

function feedFor(store) {
  const scheduled = [];
  const log = [];
  const feed = new FrameFeed({
    store,
    paint: () => log.push(`paint:${store.cursor.seq}`),
    onResync: (why) => log.push(`resync:${why}`),
    schedule: (fn) => scheduled.push(fn) && scheduled.length,
    cancel: () => scheduled.splice(0),
  });
  return { feed, scheduled, log };
}

test('message_update paints wait for the animation frame; other frames drain them first', () => {
  const s = streaming();
  const { feed, scheduled, log } = feedFor(s);
  feed.push(upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'a' }));
  feed.push(upd(7, 1, { type: 'text_delta', contentIndex: 0, offset: 1, delta: 'b' }));
  assert.equal(s.textAt(1), '', 'nothing applied before the frame');
  assert.equal(scheduled.length, 1, 'one animation frame for the batch');
  scheduled.shift()();
  assert.equal(s.textAt(1), 'ab');
  assert.deepEqual(log, ['paint:7']);
  feed.push(upd(8, 1, { type: 'text_delta', contentIndex: 0, offset: 2, delta: 'c' }));
  feed.push(ev(9, { type: 'tool_execution_start', toolCallId: 'c', toolName: 'list', args: {} }));
  assert.equal(s.textAt(1), 'abc', 'the pending delta was drained first');
  assert.equal(s.tools.get('c').status, 'running', 'tool_execution_start is committed at once');
  assert.deepEqual(log, ['paint:7', 'paint:8', 'paint:9']);
});

test('with paints suspended, deltas flush once 128 are pending', () => {
  const s = streaming();
  const { feed, log } = feedFor(s);
  let offset = 0;
  for (let i = 0; i < MAX_PENDING; i++) {
    feed.push(upd(6 + i, 1, { type: 'text_delta', contentIndex: 0, offset, delta: 'x' }));
    offset += 1;
  }
  assert.equal(s.textAt(1).length, MAX_PENDING);
  assert.deepEqual(log, [`paint:${5 + MAX_PENDING}`]);
});

test('a gap inside a batch asks for a snapshot and applies nothing of it', () => {
  const s = streaming();
  const { feed, scheduled, log } = feedFor(s);
  feed.push(upd(6, 1, { type: 'text_delta', contentIndex: 0, offset: 0, delta: 'a' }));
  feed.push(upd(9, 1, { type: 'text_delta', contentIndex: 0, offset: 1, delta: 'b' }));
  scheduled.shift()();
  assert.equal(s.textAt(1), '');
  assert.match(log[0], /^resync:gap/);
});

test('the queue comes with the state and changes with session.queue frames', () => {
  const q = (id, text) => ({ id, requestId: `req_${id}`, text, createdAt: 1 });
  const s = new SessionStore('ses_1');
  s.apply(snapshot(3, { status: 'busy', queue: [q('msg_a', 'next')] }));
  assert.deepEqual(s.queue.map((m) => m.text), ['next']);
  const frame = (seq, queue, change) => ({ type: 'session.queue', queue, change, sessionId: 'ses_1', streamId: S, seq });
  assert.equal(s.apply(frame(4, [q('msg_a', 'next'), q('msg_b', 'later')], { kind: 'added', messageId: 'msg_b' })), 'ok');
  assert.deepEqual(s.queue.map((m) => m.id), ['msg_a', 'msg_b']);
  assert.equal(s.apply(frame(4, [], { kind: 'deleted', messageId: 'msg_a' })), 'duplicate', 'cursor rules hold');
  assert.equal(s.apply(frame(5, [q('msg_b', 'later')], { kind: 'taken', messageIds: ['msg_a'], runId: 'run_2' })), 'ok');
  assert.deepEqual(s.queue.map((m) => m.id), ['msg_b']);
  // A state without a queue (none left) empties it.
  s.apply({ type: 'session.state', state: state({ status: 'idle' }), sessionId: 'ses_1', streamId: S, seq: 6 });
  assert.deepEqual(s.queue, []);
});

test('a state whose window starts later keeps the tools and timings of the rounds kept below it', () => {
  const s = new SessionStore('ses_1');
  const call = (id) => ({ ...assistant(), content: [{ type: 'toolCall', id, name: 'read', arguments: { path: 'README.md' } }], stopReason: 'toolUse' });
  const result = (id) => ({ role: 'toolResult', toolCallId: id, toolName: 'read', content: [{ type: 'text', text: '# Demo' }], isError: false, timestamp: 1 });
  const timing = (u) => ({ userMessageIndex: u, startedAt: 1, firstTokenAt: 2, endedAt: 3, status: 'completed' });
  const done = { status: 'success', result: '# Demo', toolName: 'read', args: { path: 'README.md' } };
  s.apply(snapshot(1, {
    messages: [{ index: 0, ...user('tool: read') }, { index: 1, ...call('call_1') }, { index: 2, ...result('call_1') }, { index: 3, ...user('tool: read') }, { index: 4, ...call('call_2') }],
    firstIndex: 0,
    total: 5,
    toolExecutions: { call_1: { toolCallId: 'call_1', ...done }, call_2: { toolCallId: 'call_2', ...done } },
    promptTimings: { 0: timing(0), 3: timing(3) },
  }));
  // The server's window now starts at the second round: call_1 and timing 0 are not in it.
  s.apply({ type: 'session.state', sessionId: 'ses_1', streamId: S, seq: 2, state: state({
    messages: [{ index: 3, ...user('tool: read') }, { index: 4, ...call('call_2') }],
    firstIndex: 3,
    total: 5,
    toolExecutions: { call_2: { toolCallId: 'call_2', ...done } },
    promptTimings: { 3: timing(3) },
  }) });
  assert.deepEqual(s.indexes(), [0, 1, 2, 3, 4]);
  assert.equal(s.tools.get('call_1').status, 'success', 'the older card stays done');
  assert.equal(s.tools.get('call_1').result, '# Demo');
  assert.equal(s.timings.get(0).status, 'completed', 'the older round keeps its timing');
});

test('a kept call with no known execution is settled by its stored result', () => {
  const s = new SessionStore('ses_1');
  s.apply(snapshot(1, {
    messages: [{ index: 4, role: 'toolResult', toolCallId: 'call_9', toolName: 'bash', content: [{ type: 'text', text: 'no' }], isError: true, timestamp: 1 }],
    firstIndex: 4,
    total: 5,
  }));
  s.tools.delete('call_9');
  s.apply({ type: 'session.state', sessionId: 'ses_1', streamId: S, seq: 2, state: state({ messages: [], firstIndex: 5, total: 5 }) });
  assert.equal(s.tools.get('call_9').status, 'error');
  assert.equal(s.tools.get('call_9').result, 'no');
});

test('a pending undo comes with the state and a message where it went back makes it final', () => {
  const s = new SessionStore('ses_1');
  const revert = { index: 1, ordinal: 1, report: { index: 1, restore: [{ path: 'a.txt', action: 'delete' }], conflicts: [], uncovered: [] } };
  s.apply(snapshot(3, { messages: [{ index: 0, ...user('hi') }], total: 1, revert }));
  assert.deepEqual(s.revert, revert, 'Redo is offered from the state');
  s.apply(ev(4, { type: 'message_end', message: user('again') }, 1));
  assert.equal(s.revert, null, 'the prompt sent where the undo went back made it final');
  s.apply({ type: 'session.state', state: state({ total: 2 }), sessionId: 'ses_1', streamId: S, seq: 5 });
  assert.equal(s.revert, null, 'a state without one has none');
});
