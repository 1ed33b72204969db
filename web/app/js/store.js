// SessionStore: everything the page shows about one session, fed only by frames of its
// stream (session.snapshot, session.state, run.accepted, loop.event, session.queue) plus
// pages of older history. No DOM and no network here, so Node tests drive it with golden
// frames.
//
// The cursor rules of seed 001:
//   * every applied frame moves the cursor `{streamId, seq}`;
//   * an incremental frame at or behind the cursor is a duplicate and is dropped;
//   * one from another stream, or past cursor+1 (a gap), is not applied: the caller closes
//     the connection and reconnects without a cursor, which yields a fresh snapshot;
//   * a snapshot of the same stream behind the cursor is older than what we show: ignored.
// A batch of frames is validated as a whole before any of it is applied.
//
// State mirrors the server's projection (crates/engine/src/view.rs): committed messages
// by absolute index, drafts being streamed, tool executions by call id, prompt timings by
// user message index, pending approvals, prompts queued behind the run. Messages loaded
// earlier through the history endpoint stay as long as they join the snapshot's window
// without a hole.

import { applyDelta } from './deltas.js';

export class SessionStore {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.cursor = null; // {streamId, seq} of the last frame applied
    this.wantSnapshot = true; // the next connection asks for a snapshot, not a replay
    this.loaded = false;
    this.session = null;
    this.status = 'idle';
    this.activeRun = null;
    this.firstIndex = 0;
    this.total = 0;
    this.messages = new Map(); // index → committed message (with `index`)
    this.drafts = new Map(); // index → assistant message being streamed
    this.tools = new Map(); // toolCallId → {toolCallId, toolName, args, status, result, output, outputTruncated}
    this.timings = new Map(); // userMessageIndex → prompt timing
    this.approvals = [];
    this.lastApproval = null;
    this.todos = []; // the agent's todo list, as its last todo_write left it
    this.queue = []; // prompts waiting for the run, next first: {id, requestId, text, createdAt}
    this.queuePaused = false; // Stop paused the queue: nothing runs until Resume or a new prompt
    this.variants = []; // turns with more than one version: [{index, position, versions}] (branches.js)
    this.presence = null; // who is on the session: {viewers, answerers, visible, clients} (chrome.js, cards.js)
    this.revert = null; // the undo Redo can take back: {index, ordinal, report, snapshot, diff} (undo_dialog.js)
    this.notice = null; // a passing run notice (model retry, compaction)
    this.callOwner = new Map(); // toolCallId → index of the assistant message that made it
    this.revs = new Map(); // index → revision, so the view repaints only changed rows
    this.epoch = 0; // bumped when everything may have changed (snapshot, state)
    this.version = 0; // bumped on any change
  }

  /** The `?cursor=` for the next connection, or null to ask for a snapshot. */
  cursorParam() {
    return this.wantSnapshot || !this.cursor ? null : `${this.cursor.streamId}:${this.cursor.seq}`;
  }

  /** The next connection asks for a snapshot; the cursor stays to judge its age. */
  requestSnapshot() {
    this.wantSnapshot = true;
  }

  /** Seeds the store from `GET /api/sessions/:id`, which carries a snapshot's state and cursor. */
  load(detail) {
    return this.apply({ type: 'session.snapshot', state: detail.state, streamId: detail.streamId, seq: detail.seq });
  }

  /**
   * Applies one frame. Returns 'ok', 'duplicate', 'ignored' (an older snapshot) or
   * {resync: reason} when the caller must reconnect for a fresh snapshot.
   */
  apply(frame) {
    if (frame.type === 'session.snapshot') return this.snapshot(frame);
    const verdict = this.check(frame, this.cursor);
    if (verdict !== 'ok') return verdict;
    return this.commit([frame]);
  }

  /** Applies frames in order, all or nothing as far as their cursors go. */
  applyBatch(frames) {
    let cursor = this.cursor;
    const fresh = [];
    for (const frame of frames) {
      if (frame.type === 'session.snapshot') return { resync: 'snapshot inside a batch' };
      const verdict = this.check(frame, cursor);
      if (verdict === 'duplicate') continue;
      if (verdict !== 'ok') return verdict;
      cursor = { streamId: frame.streamId, seq: frame.seq };
      fresh.push(frame);
    }
    return fresh.length ? this.commit(fresh) : 'duplicate';
  }

  check(frame, cursor) {
    if (!cursor) return { resync: 'no snapshot yet' };
    if (frame.streamId !== cursor.streamId) return { resync: 'the stream changed' };
    if (frame.seq <= cursor.seq) return 'duplicate';
    if (frame.seq !== cursor.seq + 1) return { resync: `gap after seq ${cursor.seq}` };
    return 'ok';
  }

  commit(frames) {
    for (const frame of frames) {
      const result = this.incremental(frame);
      this.cursor = { streamId: frame.streamId, seq: frame.seq };
      this.version++;
      if (result === 'hole') return { resync: `delta hole at seq ${frame.seq}` };
    }
    return 'ok';
  }

  snapshot(frame) {
    const c = this.cursor;
    if (c && c.streamId === frame.streamId && frame.seq < c.seq) return 'ignored';
    this.replace(frame.state);
    this.cursor = { streamId: frame.streamId, seq: frame.seq };
    this.wantSnapshot = false;
    this.loaded = true;
    return 'ok';
  }

  incremental(frame) {
    switch (frame.type) {
      case 'session.state':
        this.replace(frame.state);
        return 'ok';
      case 'run.accepted':
        this.activeRun = { runId: frame.runId, requestId: frame.requestId, status: 'running' };
        this.status = 'busy';
        return 'ok';
      case 'loop.event':
        return this.event(frame.event, frame.messageIndex);
      case 'session.presence':
        // Who is on the session now, on every node (the header's chip, the cards' reach).
        this.presence = frame.presence;
        this.version++;
        return 'ok';
      case 'session.queue':
        // The whole queue as it is now (a prompt joined, a run took one, one was removed).
        this.queue = [...frame.queue];
        this.queuePaused = !!frame.paused;
        return 'ok';
      default:
        return 'ok';
    }
  }

  /** A whole state (snapshot or session.state) replaces the projection. */
  replace(state) {
    const kept = new Map();
    for (let i = state.firstIndex - 1; this.messages.has(i); i--) kept.set(i, this.messages.get(i));
    for (const m of state.messages) kept.set(m.index, m);
    this.messages = kept;
    this.drafts = new Map(Object.entries(state.drafts ?? {}).map(([k, m]) => [Number(k), structuredClone(m)]));
    const tools = this.tools;
    const timings = this.timings;
    this.tools = new Map(Object.values(state.toolExecutions ?? {}).map((t) => [t.toolCallId, { ...t }]));
    this.timings = new Map(Object.values(state.promptTimings ?? {}).map((t) => [t.userMessageIndex, t]));
    // A state holds tools and timings only for the rounds in its window; the messages
    // kept below it keep what we knew about them, or their cards would say "Running".
    // A call's stored result settles its card even if we never saw the call run.
    for (const [i, m] of kept) {
      if (i >= state.firstIndex) continue;
      if (m.role === 'user' && timings.has(i) && !this.timings.has(i)) this.timings.set(i, timings.get(i));
      if (m.role === 'assistant') {
        for (const c of m.content) if (c.type === 'toolCall' && tools.has(c.id) && !this.tools.has(c.id)) this.tools.set(c.id, tools.get(c.id));
      }
    }
    for (const [i, m] of kept) if (i < state.firstIndex && m.role === 'toolResult' && (this.tools.get(m.toolCallId)?.status ?? 'running') === 'running') this.settle(m);
    this.session = state.session;
    this.status = state.status;
    this.activeRun = state.activeRun;
    this.firstIndex = state.firstIndex;
    this.total = state.total;
    this.approvals = [...(state.pendingApprovals ?? [])];
    this.lastApproval = state.lastApproval ?? null;
    this.todos = [...(state.todos ?? [])];
    this.queue = [...(state.queue ?? [])];
    this.queuePaused = !!state.queuePaused;
    this.variants = [...(state.variants ?? [])];
    this.revert = state.revert ?? null;
    // Absent while nobody is there (or before the server first said): a frame follows.
    this.presence = state.presence ?? null;
    if (this.status === 'idle') this.notice = null;
    this.callOwner = new Map();
    for (const m of [...this.messages.values(), ...this.drafts.values()]) this.own(m);
    this.epoch++;
    this.version++;
  }

  event(ev, index) {
    switch (ev.type) {
      case 'message_start':
        if (ev.message.role === 'assistant') {
          this.drafts.set(index, structuredClone(ev.message));
          this.touch(index);
        }
        return 'ok';
      case 'message_update': {
        const draft = this.drafts.get(index);
        if (!draft) return 'hole';
        const delta = ev.assistantMessageEvent;
        const result = applyDelta(draft, delta);
        if (delta.type === 'toolcall_start') this.callOwner.set(delta.id, index);
        this.touch(index);
        return result === 'hole' ? 'hole' : 'ok';
      }
      case 'message_end': {
        this.drafts.delete(index);
        const message = { index, ...ev.message };
        this.messages.set(index, message);
        this.total = Math.max(this.total, index + 1);
        // A message where the undo went back to makes it final (the server's fold, view.rs).
        if (this.revert && index >= this.revert.index) this.revert = null;
        this.record(message);
        this.touch(index);
        return 'ok';
      }
      case 'tool_execution_start':
        this.tools.set(ev.toolCallId, {
          toolCallId: ev.toolCallId,
          toolName: ev.toolName,
          args: ev.args,
          status: 'running',
          result: null,
        });
        this.touchCall(ev.toolCallId);
        return 'ok';
      case 'tool_execution_update':
        return this.toolOutput(ev);
      case 'tool_execution_end': {
        const t = this.tool(ev.toolCallId, ev.toolName);
        t.status = ev.isError ? 'error' : 'success';
        t.result = ev.result;
        this.touchCall(ev.toolCallId);
        return 'ok';
      }
      case 'prompt_timing':
        this.timings.set(ev.userMessageIndex, {
          userMessageIndex: ev.userMessageIndex,
          startedAt: ev.startedAt,
          firstTokenAt: ev.firstTokenAt,
          endedAt: ev.endedAt,
          status: ev.status ?? null,
          error: ev.error ?? null,
        });
        return 'ok';
      case 'approval_requested':
        if (!this.approvals.some((a) => a.id === ev.approval.id)) this.approvals.push(ev.approval);
        // A server's question asked while its call runs (`live`) leaves the run running.
        if (this.activeRun && ev.approval.payload?.live !== true) this.activeRun = { ...this.activeRun, status: 'interrupted' };
        this.touchCall(ev.approval.toolCallId);
        return 'ok';
      case 'approval_resolved': {
        const gone = this.approvals.find((a) => a.id === ev.approvalId);
        this.approvals = this.approvals.filter((a) => a.id !== ev.approvalId);
        this.lastApproval = { id: ev.approvalId, decision: ev.decision, actor: ev.actor, at: Date.now() };
        if (this.activeRun?.status === 'interrupted') this.activeRun = { ...this.activeRun, status: 'running' };
        if (gone) this.touchCall(gone.toolCallId);
        return 'ok';
      }
      case 'todo_write':
        this.todos = [...ev.todos];
        return 'ok';
      case 'session_title':
        this.session = { ...this.session, title: ev.title, titleSet: true };
        return 'ok';
      case 'agent_end':
        if (this.activeRun) this.activeRun = { ...this.activeRun, status: ev.status };
        return 'ok';
      case 'auto_retry_start':
        this.notice = `The model call failed (${ev.errorMessage}); retry ${ev.attempt} of ${ev.maxAttempts}…`;
        return 'ok';
      case 'compaction_start':
        this.notice = 'Summarizing older turns to fit the context…';
        return 'ok';
      case 'auto_retry_end':
      case 'compaction_end':
      case 'agent_settled':
        this.notice = null;
        return 'ok';
      default:
        return 'ok';
    }
  }

  /** Older messages from `GET …/messages?before=`; kept only where they join without a hole. */
  prependHistory(messages) {
    const sorted = [...messages].sort((a, b) => b.index - a.index);
    for (const m of sorted) {
      if (m.index !== this.firstKnown() - 1) continue;
      this.messages.set(m.index, m);
      this.own(m);
      this.touch(m.index);
    }
    for (const m of [...messages].sort((a, b) => a.index - b.index)) this.record(m, false);
    this.version++;
  }

  /** The lowest index from which every committed message is here. */
  firstKnown() {
    let k = this.firstIndex;
    while (this.messages.has(k - 1)) k--;
    return k;
  }

  /** Indexes of all committed and draft messages, in order. */
  indexes() {
    const all = new Set([...this.messages.keys(), ...this.drafts.keys()]);
    return [...all].sort((a, b) => a - b);
  }

  /** The text a finished assistant answer or draft shows (text blocks only). */
  textAt(index) {
    const m = this.drafts.get(index) ?? this.messages.get(index);
    return m ? m.content.filter((c) => c.type === 'text').map((c) => c.text).join('') : '';
  }

  /** Mirrors record_tool_results: calls start running, results settle them. */
  record(m, claim = true) {
    if (m.role === 'assistant') {
      if (claim) this.own(m);
      for (const c of m.content) {
        if (c.type === 'toolCall' && !this.tools.has(c.id)) {
          this.tools.set(c.id, { toolCallId: c.id, toolName: c.name, args: c.arguments, status: 'running', result: null });
        }
      }
    } else if (m.role === 'toolResult') {
      this.settle(m);
      this.touchCall(m.toolCallId);
    }
  }

  /** A toolResult message ends its call: error or success, with the text it returned. */
  settle(m) {
    const t = this.tool(m.toolCallId, m.toolName);
    t.status = m.isError ? 'error' : 'success';
    t.result = m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
    // A write/edit's diff of what it changed, kept with the stored result.
    if (typeof m.diff === 'string') t.diff = m.diff;
  }

  /**
   * Live output of a running call (`tool_execution_update`): the delta joins the output
   * only at the offset it expects (UTF-16 units, JavaScript's length), like message
   * deltas: behind is a duplicate, ahead is a hole that asks for a snapshot.
   */
  toolOutput(ev) {
    const t = this.tool(ev.toolCallId, ev.toolName);
    const held = t.output ?? '';
    if (ev.offset > held.length) return 'hole';
    if (ev.offset === held.length) {
      t.output = held + ev.delta;
      t.outputTruncated = Boolean(t.outputTruncated || ev.truncated);
      this.touchCall(ev.toolCallId);
    }
    return 'ok';
  }

  tool(id, name) {
    if (!this.tools.has(id)) {
      this.tools.set(id, { toolCallId: id, toolName: name, args: null, status: 'running', result: null });
    }
    return this.tools.get(id);
  }

  own(m) {
    if (m.role !== 'assistant') return;
    for (const c of m.content) if (c.type === 'toolCall') this.callOwner.set(c.id, m.index ?? this.indexOfDraft(m));
  }

  indexOfDraft(m) {
    for (const [i, d] of this.drafts) if (d === m) return i;
    return undefined;
  }

  touch(index) {
    this.revs.set(index, (this.revs.get(index) ?? 0) + 1);
  }

  touchCall(id) {
    const owner = this.callOwner.get(id);
    if (owner !== undefined) this.touch(owner);
  }
}

/** Parses an SSE `data:` payload into a frame; throws on anything that is not one. */
export function parseFrame(text) {
  const frame = JSON.parse(text);
  if (!frame || typeof frame.type !== 'string' || typeof frame.streamId !== 'string' || !Number.isInteger(frame.seq)) {
    throw new SyntaxError('not a frame');
  }
  return frame;
}
