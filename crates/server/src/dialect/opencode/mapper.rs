//! Native frames of one session → OpenCode events.
//!
//! | native                                   | OpenCode                                             |
//! |------------------------------------------|------------------------------------------------------|
//! | `session.state` busy / idle              | `session.status` busy / idle (+ `session.idle`)       |
//! | `session.state` with a changed session   | `session.updated`                                     |
//! | `message_end` of a user message          | `message.updated` + its `text` parts                  |
//! | `message_start` of an assistant message  | `message.updated` + `step-start`                      |
//! | `text_start` / `thinking_start`          | `message.part.updated` (`text` / `reasoning`, empty)  |
//! | `text_delta` / `thinking_delta`          | `message.part.delta` (`field: "text"`)                |
//! | `text_end` / `thinking_end`              | `message.part.updated` with the whole text, `time.end`|
//! | `toolcall_start`, then `message_end`     | `tool` part `pending` (then with its `input`)         |
//! | `tool_execution_start` / `_end`          | `tool` part `running` / `completed` or `error`        |
//! | `tool_execution_update`                  | `tool` part `running` with `metadata.output` so far (its first 30,000 characters) |
//! | `message_end` (no tools) or `turn_end`   | `step-finish` (reason, cost, tokens) + `message.updated` |
//! | `agent_end` failed / cancelled           | `session.error`                                       |
//! | `approval_requested` / `_resolved`       | `permission.updated` + `permission.asked` / `permission.replied` |
//! | the same, of a question (`select_option`, `provide_input`) | `question.asked` / `question.replied` (at its call's start, with the answer) or `question.rejected` |
//! | `auto_retry_start` / `_end`              | `session.status` retry / busy                         |
//! | `todo_write`                             | `todo.updated` (the whole list)                       |
//! | `session.git` (the git poller)           | `session.diff` (every changed file with its line counts) |
//!
//! A step that asked for tools finishes at `turn_end`, after its tools ran, as OpenCode's
//! does (seed 004: tool `completed`, then `step-finish` with `tool-calls`). Tool results
//! are not messages of their own: they complete the tool part (see `records.rs`).
//!
//! # Deltas stay linear
//!
//! By default a token is one `message.part.delta`; the whole part travels only when it
//! starts and when it ends, like current OpenCode servers. Seed 004 describes the older
//! form — every token a `message.part.updated` with the text so far *and* the `delta` —
//! which costs O(n²) bytes for an answer of n tokens. That form is available per
//! connection for clients that read only it ([`Mapper::legacy_deltas`]); it then comes
//! right after the `message.part.delta` it repeats, so a client that reads both ends with
//! the right text either way (`part.updated` replaces, `part.delta` appends).
//!
//! # Joining mid-run
//!
//! A connection that starts following a session usually resumes from a cursor (see
//! `global.rs`) and sees the run's frames from its `run.accepted` on. When it cannot,
//! it gets a snapshot. If the session is busy, the mapper replays the current run from
//! it through the same code as live frames: the user message, each assistant message
//! with its text as one catch-up delta, tool states, pending permissions. (A snapshot
//! does not say where the run began; the caller tells the mapper, [`Mapper::run_start`].)
//! A client therefore sees every part start empty and grow by deltas, and the deltas it
//! received always add up to the stored text. After that the live deltas continue at
//! the offsets the snapshot implied; a delta at an offset already sent is dropped, so
//! nothing is counted twice.

use super::ids;
use super::records::{Scope, complete, finish_reason, is_question, permission, question, step_finish, tool_input};
use super::wire::*;
use spool_protocol::event::offset_len;
use spool_protocol::frame::{FrameBody, SessionState, ToolStatus};
use spool_protocol::time::Millis;
use spool_protocol::{
    AgentEvent, ApprovalId, Content, Message, Session, SessionStatus, StopReason, StreamDelta, Usage,
};
use std::collections::{BTreeMap, HashMap};

/// What a connection that starts following a session tells its client about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// Nothing: the client knows the session (it was busy when the client connected).
    Nothing,
    /// `session.created`: the session is new.
    Created,
    /// `session.updated`: the session changed while nobody followed it.
    Updated,
}

/// Maps one session's frames for one connection (cloned at a frame to become the
/// session's shared form: see `dialect/shared.rs`).
#[derive(Clone)]
pub struct Mapper {
    scope: Scope,
    legacy_deltas: bool,
    /// What to announce about the session at the first snapshot.
    announce: Announce,
    session: Option<Session>,
    busy: bool,
    /// A run was accepted and the session has not gone idle since.
    accepted: bool,
    pending: Vec<ApprovalId>,
    /// The pending approvals that are questions, with their tool calls.
    questions: HashMap<ApprovalId, String>,
    /// Questions answered (`fill`) whose call has not started, by call id. The answer is
    /// the call's `answer` argument, so `question.replied` goes out when the call starts.
    answered: HashMap<String, ApprovalId>,
    run: RunTrack,
    /// Index of the active run's user message, for replaying it from a snapshot.
    run_start: Option<u64>,
    /// The client has had text of this session before (it reconnected with a
    /// `Last-Event-ID`, or this mapper already mapped a snapshot): a snapshot's text is
    /// sent as whole parts to replace, never as deltas it may already have appended.
    resuming: bool,
    /// When the reconnecting client last heard from the server (ms), until the first
    /// snapshot has told it what it missed.
    since: Option<Millis>,
}

/// What the mapper needs to know about the current run.
/// The most live output a running tool part's `metadata.output` holds: the bound
/// OpenCode's own bash tool puts on it.
const LIVE_METADATA_CHARS: usize = 30_000;

#[derive(Clone, Default)]
struct RunTrack {
    /// Index of the user message the run answers.
    user: Option<u64>,
    /// Assistant messages whose step has not finished, by index.
    steps: BTreeMap<u64, Step>,
    /// Tool call id → (message index, content index).
    calls: HashMap<String, (u64, usize)>,
    /// The model's error message, if a step failed.
    error: Option<String>,
}

#[derive(Clone)]
struct Step {
    info: AssistantInfo,
    /// By content index.
    blocks: Vec<Option<Block>>,
    /// `message_end` was seen: the step waits only for its tools (or finished).
    ended: bool,
    stop: Option<StopReason>,
    usage: Usage,
    error: Option<String>,
}

#[derive(Clone)]
struct Block {
    kind: BlockKind,
    text: String,
    /// UTF-16 length of the text sent so far: the offset the next delta must have.
    sent: usize,
    time: PartTime,
}

#[derive(Clone)]
enum BlockKind {
    Text,
    Reasoning,
    Tool { call_id: String, name: String, state: ToolState },
}

impl Mapper {
    pub fn new(scope: Scope) -> Self {
        Mapper {
            scope,
            legacy_deltas: false,
            announce: Announce::Nothing,
            session: None,
            busy: false,
            accepted: false,
            pending: Vec::new(),
            questions: HashMap::new(),
            answered: HashMap::new(),
            run: RunTrack::default(),
            run_start: None,
            resuming: false,
            since: None,
        }
    }

    /// Also send seed 004's per-token `message.part.updated` (text so far + `delta`).
    /// Whether this mapper sends seed 004's per-token `message.part.updated` too.
    pub fn legacy(&self) -> bool {
        self.legacy_deltas
    }

    /// The directory its events name.
    pub fn directory(&self) -> &str {
        &self.scope.directory
    }

    /// The client reconnected, having last heard from the server at `since` (ms): it
    /// has this session's text so far (see the `resuming` field), and a permission
    /// replied to since is told again.
    pub fn since(mut self, since: Option<Millis>) -> Self {
        self.resuming |= since.is_some();
        self.since = since;
        self
    }

    pub fn legacy_deltas(mut self, on: bool) -> Self {
        self.legacy_deltas = on;
        self
    }

    /// What to say about the session at the first snapshot.
    pub fn announce(mut self, announce: Announce) -> Self {
        self.announce = announce;
        self
    }

    /// Where the active run begins (its user message's index), which a snapshot does
    /// not say. Without it a busy snapshot replays only drafts and pending permissions.
    pub fn run_start(mut self, index: Option<u64>) -> Self {
        self.run_start = index;
        self
    }

    /// The session record as last seen.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Whether the session has anything going on: a run, or a permission waiting. A
    /// session that has not is followed again when it next changes.
    pub fn is_active(&self) -> bool {
        self.busy || self.accepted || !self.pending.is_empty() || !self.run.steps.is_empty()
    }

    /// The OpenCode events for one native frame; `now` stamps part times.
    pub fn map(&mut self, body: &FrameBody, now: Millis) -> Vec<Event> {
        let mut out = Vec::new();
        match body {
            FrameBody::Snapshot { state } => self.snapshot(state, now, &mut out),
            FrameBody::State { state } => self.state(state, &mut out),
            FrameBody::RunAccepted { .. } => self.accepted = true,
            FrameBody::LoopEvent { message_index, event, .. } => self.event(event, *message_index, now, &mut out),
            FrameBody::Git { git } => out.push(Event::SessionDiff {
                session_id: self.sid(),
                diff: git.files.iter().map(FileDiff::from_change).collect(),
            }),
            // OpenCode has no queue: a queued prompt shows once a run takes it.
            FrameBody::Queue { .. } => {}
        }
        out
    }

    fn sid(&self) -> String {
        self.scope.session_id.to_string()
    }

    fn part_updated(&self, part: Part, now: Millis, delta: Option<String>) -> Event {
        Event::PartUpdated { session_id: self.sid(), part, time: now, delta }
    }

    // ---- session-level state ----------------------------------------------------------

    fn state(&mut self, state: &SessionState, out: &mut Vec<Event>) {
        if self.session.as_ref() != Some(&state.session) {
            let info = super::records::session_info(&state.session, &self.scope.directory);
            out.push(Event::SessionUpdated { session_id: self.sid(), info });
            self.session = Some(state.session.clone());
        }
        self.pending = state.pending_approvals.iter().map(|a| a.id.clone()).collect();
        match (state.status, self.busy) {
            (SessionStatus::Busy, false) => {
                self.busy = true;
                out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Busy });
            }
            (SessionStatus::Idle, true) => {
                self.busy = false;
                self.accepted = false;
                out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Idle });
                out.push(Event::SessionIdle { session_id: self.sid() });
            }
            _ => {}
        }
    }

    /// Starts from a snapshot: remembers the session and, if it is busy, replays the
    /// current run through [`Self::event`] (see the module docs).
    fn snapshot(&mut self, state: &SessionState, now: Millis, out: &mut Vec<Event>) {
        self.run = RunTrack::default();
        self.session = Some(state.session.clone());
        let info = || super::records::session_info(&state.session, &self.scope.directory);
        match std::mem::replace(&mut self.announce, Announce::Nothing) {
            Announce::Nothing => {}
            Announce::Created => out.push(Event::SessionCreated { session_id: self.sid(), info: info() }),
            Announce::Updated => out.push(Event::SessionUpdated { session_id: self.sid(), info: info() }),
        }
        self.pending = state.pending_approvals.iter().map(|a| a.id.clone()).collect();
        self.accepted = state.active_run.is_some();
        self.busy = state.status == SessionStatus::Busy || self.accepted;
        if !self.busy && self.pending.is_empty() {
            return;
        }
        self.busy = true;
        out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Busy });
        let from = self
            .run_start
            .and_then(|start| state.messages.iter().position(|m| m.index >= start))
            .unwrap_or(state.messages.len());
        let waiting: Vec<&str> = state.pending_approvals.iter().map(|a| a.tool_call_id.as_str()).collect();
        for m in &state.messages[from..] {
            let index = Some(m.index);
            match &m.message {
                Message::User { .. } => {
                    self.event(&AgentEvent::MessageStart { message: m.message.clone() }, index, now, out);
                    self.event(&AgentEvent::MessageEnd { message: m.message.clone() }, index, now, out);
                }
                Message::Assistant { content, .. } => {
                    self.replay_assistant(m.index, &m.message, true, now, out);
                    for c in content {
                        let Content::ToolCall { id, .. } = c else { continue };
                        let Some(exec) = state.tool_executions.get(id) else { continue };
                        if waiting.contains(&id.as_str()) {
                            continue;
                        }
                        let start = AgentEvent::ToolExecutionStart {
                            tool_call_id: id.clone(),
                            tool_name: exec.tool_name.clone(),
                            args: exec.args.clone(),
                        };
                        self.event(&start, None, now, out);
                        if let Some(output) = &exec.output {
                            let update = AgentEvent::ToolExecutionUpdate {
                                tool_call_id: id.clone(),
                                tool_name: exec.tool_name.clone(),
                                offset: 0,
                                delta: output.clone(),
                                truncated: exec.output_truncated,
                            };
                            self.event(&update, None, now, out);
                        }
                        if let (ToolStatus::Success | ToolStatus::Error, Some(result)) = (exec.status, &exec.result) {
                            let end = AgentEvent::ToolExecutionEnd {
                                tool_call_id: id.clone(),
                                tool_name: exec.tool_name.clone(),
                                result: result.clone(),
                                is_error: exec.status == ToolStatus::Error,
                            };
                            self.event(&end, None, now, out);
                        }
                    }
                }
                Message::ToolResult { .. } => {}
            }
        }
        for (index, draft) in &state.drafts {
            self.replay_assistant(*index, draft, false, now, out);
        }
        self.questions.clear();
        self.answered.clear();
        for approval in &state.pending_approvals {
            let requested = AgentEvent::ApprovalRequested { approval: Box::new(approval.clone()) };
            self.event(&requested, None, now, out);
        }
        if let Some(since) = self.since.take() {
            out.extend(self.replied_since(state, since));
        }
        // Any later snapshot re-anchors a client that has this text already.
        self.resuming = true;
    }

    /// `permission.replied` for the session's last resolved approval, if that was after
    /// `since`.
    fn replied_since(&self, state: &SessionState, since: Millis) -> Option<Event> {
        let last = state.last_approval.as_ref().filter(|a| a.at > since)?;
        let reply = Reply::from_resolution(&last.decision);
        Some(Event::PermissionReplied {
            session_id: self.sid(),
            permission_id: last.id.to_string(),
            request_id: last.id.to_string(),
            response: reply,
            reply,
        })
    }

    /// What a client away since `since` (ms) missed of an idle session: the messages that
    /// changed since (each with its parts, whole), the permission last replied to if
    /// that was since, and that it is idle. Sent on reconnect, before live events.
    pub fn missed(&mut self, state: &SessionState, since: Millis, now: Millis) -> Vec<Event> {
        let mut out = Vec::new();
        self.session = Some(state.session.clone());
        self.busy = false;
        let model = state.session.model.as_deref();
        for m in super::records::history(&self.scope, &state.messages, model) {
            let changed = match &m.info {
                MessageInfo::User(info) => info.time.created > since,
                MessageInfo::Assistant(info) => info.time.completed.unwrap_or(info.time.created) > since,
            };
            if !changed {
                continue;
            }
            out.push(Event::MessageUpdated { session_id: self.sid(), info: m.info });
            for part in m.parts {
                out.push(self.part_updated(part, now, None));
            }
        }
        out.extend(self.replied_since(state, since));
        // Last, as live: the session went idle after its messages were done.
        out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Idle });
        out.push(Event::SessionIdle { session_id: self.sid() });
        out
    }

    /// Replays one assistant message as if it streamed: start, each block with its whole
    /// text as one delta, and — for a committed message — its end. A draft's last block
    /// stays open: its next live delta continues it.
    fn replay_assistant(&mut self, index: u64, message: &Message, committed: bool, now: Millis, out: &mut Vec<Event>) {
        let Message::Assistant { content, model, timestamp, .. } = message else { return };
        if self.run.steps.values().any(|s| s.ended) {
            // A later model call means the previous turn ended.
            self.event(&AgentEvent::TurnEnd {}, None, now, out);
        }
        let skeleton = Message::Assistant {
            content: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            model: model.clone(),
            error_message: None,
            timestamp: *timestamp,
        };
        let at = Some(index);
        self.event(&AgentEvent::MessageStart { message: skeleton }, at, now, out);
        let last = content.len().saturating_sub(1);
        for (ci, c) in content.iter().enumerate() {
            let (start, delta, end) = match c {
                Content::Text { text } => (
                    StreamDelta::TextStart { content_index: ci },
                    StreamDelta::TextDelta { content_index: ci, offset: 0, delta: text.clone() },
                    StreamDelta::TextEnd { content_index: ci },
                ),
                Content::Thinking { thinking } => (
                    StreamDelta::ThinkingStart { content_index: ci },
                    StreamDelta::ThinkingDelta { content_index: ci, offset: 0, delta: thinking.clone() },
                    StreamDelta::ThinkingEnd { content_index: ci },
                ),
                Content::ToolCall { id, name, .. } => {
                    let start = StreamDelta::ToolcallStart { content_index: ci, id: id.clone(), name: name.clone() };
                    self.event(&AgentEvent::MessageUpdate { assistant_message_event: start }, at, now, out);
                    continue;
                }
            };
            for d in [Some(start), Some(delta), (committed || ci < last).then_some(end)].into_iter().flatten() {
                let catch_up = matches!(d, StreamDelta::TextDelta { .. } | StreamDelta::ThinkingDelta { .. });
                if catch_up && self.resuming {
                    // The text so far as a whole part, which replaces what the client
                    // holds; the block remembers it as sent, so live deltas continue it.
                    self.event(&AgentEvent::MessageUpdate { assistant_message_event: d }, at, now, &mut Vec::new());
                    if let Some(part) = self.block_part(index, ci) {
                        out.push(self.part_updated(part, now, None));
                    }
                    continue;
                }
                self.event(&AgentEvent::MessageUpdate { assistant_message_event: d }, at, now, out);
            }
        }
        if committed {
            self.event(&AgentEvent::MessageEnd { message: message.clone() }, at, now, out);
        }
    }

    // ---- loop events ------------------------------------------------------------------

    fn event(&mut self, event: &AgentEvent, index: Option<u64>, now: Millis, out: &mut Vec<Event>) {
        match event {
            AgentEvent::AgentStart {} => self.run = RunTrack::default(),
            AgentEvent::MessageStart { message } => match (message, index) {
                (Message::User { .. }, Some(i)) => self.run.user = Some(i),
                (Message::Assistant { model, timestamp, .. }, Some(i)) => {
                    self.start_step(i, model, *timestamp, now, out)
                }
                _ => {}
            },
            AgentEvent::MessageUpdate { assistant_message_event } => {
                if let Some(i) = index {
                    self.update(i, assistant_message_event, now, out);
                }
            }
            AgentEvent::MessageEnd { message } => {
                if let Some(i) = index {
                    self.end_message(i, message, now, out);
                }
            }
            AgentEvent::ToolExecutionStart { tool_call_id, args, .. } => {
                if let Some(request) = self.answered.remove(tool_call_id) {
                    let answer = args.get("answer").and_then(|a| a.as_str()).map(str::to_owned);
                    out.push(Event::QuestionReplied {
                        session_id: self.sid(),
                        request_id: request.to_string(),
                        answers: vec![answer.into_iter().collect()],
                    });
                }
                let (input, _) = tool_input(args);
                self.set_tool_state(tool_call_id, now, out, |_| ToolState::Running {
                    input,
                    time: StartTime { start: now },
                    metadata: None,
                });
            }
            AgentEvent::ToolExecutionUpdate { tool_call_id, delta, .. } => {
                self.tool_output(tool_call_id, delta, now, out)
            }
            AgentEvent::ToolExecutionEnd { tool_call_id, tool_name, result, is_error, .. } => {
                self.set_tool_state(tool_call_id, now, out, |state| {
                    let (input, start) = match state {
                        ToolState::Running { input, time, .. } => (input.clone(), time.start),
                        ToolState::Pending { input, .. } => (input.clone(), now),
                        ToolState::Completed { input, time, .. } | ToolState::Error { input, time, .. } => {
                            (input.clone(), time.start)
                        }
                    };
                    let time = SpanTime { start, end: now };
                    if *is_error {
                        ToolState::Error { input, error: result.clone(), time }
                    } else {
                        ToolState::Completed {
                            input,
                            output: result.clone(),
                            title: tool_name.clone(),
                            metadata: serde_json::json!({}),
                            time,
                        }
                    }
                });
            }
            AgentEvent::TurnEnd {} => {
                let ended: Vec<u64> = self.run.steps.iter().filter(|(_, s)| s.ended).map(|(i, _)| *i).collect();
                for i in ended {
                    self.finish_step(i, now, out);
                }
            }
            AgentEvent::AgentEnd { status, .. } => self.end_run(status, now, out),
            AgentEvent::ApprovalRequested { approval } => {
                if !self.pending.contains(&approval.id) {
                    self.pending.push(approval.id.clone());
                }
                let message = self.run.calls.get(&approval.tool_call_id).map(|(i, _)| *i);
                if is_question(approval) {
                    self.questions.insert(approval.id.clone(), approval.tool_call_id.clone());
                    out.push(Event::QuestionAsked(question(approval, message)));
                } else {
                    let p = permission(approval, message);
                    out.push(Event::PermissionUpdated(p.clone()));
                    out.push(Event::PermissionAsked(p));
                }
            }
            AgentEvent::ApprovalResolved { approval_id, decision, .. } => {
                self.pending.retain(|p| p != approval_id);
                match self.questions.remove(approval_id) {
                    // Only `fill` carries an answer; anything else left it unanswered.
                    Some(call) if decision == "fill" => {
                        self.answered.insert(call, approval_id.clone());
                    }
                    Some(_) => out
                        .push(Event::QuestionRejected { session_id: self.sid(), request_id: approval_id.to_string() }),
                    None => {
                        let reply = Reply::from_resolution(decision);
                        out.push(Event::PermissionReplied {
                            session_id: self.sid(),
                            permission_id: approval_id.to_string(),
                            request_id: approval_id.to_string(),
                            response: reply,
                            reply,
                        });
                    }
                }
            }
            AgentEvent::AutoRetryStart { attempt, delay_ms, error_message, .. } => {
                let next = now.saturating_add(i64::try_from(*delay_ms).unwrap_or(i64::MAX));
                let status = Status::Retry { attempt: *attempt, message: error_message.clone(), next };
                out.push(Event::SessionStatus { session_id: self.sid(), status });
            }
            AgentEvent::AutoRetryEnd { .. } => {
                out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Busy });
            }
            AgentEvent::CompactionEnd { success: true, .. } => {
                out.push(Event::SessionCompacted { session_id: self.sid() });
            }
            AgentEvent::TodoWrite { todos } => out.push(Event::TodoUpdated {
                session_id: self.sid(),
                todos: todos.iter().enumerate().map(|(i, t)| Todo::from_todo(i, t)).collect(),
            }),
            AgentEvent::TurnStart {}
            | AgentEvent::PromptTiming { .. }
            | AgentEvent::AgentSettled {}
            | AgentEvent::SessionTitle { .. }
            | AgentEvent::CompactionStart { .. }
            | AgentEvent::CompactionEnd { .. } => {}
        }
    }

    fn start_step(&mut self, index: u64, model: &str, created: Millis, now: Millis, out: &mut Vec<Event>) {
        let info = self.scope.assistant_info(index, self.run.user, created, model);
        out.push(Event::MessageUpdated {
            session_id: self.sid(),
            info: MessageInfo::Assistant(Box::new(info.clone())),
        });
        out.push(self.part_updated(self.scope.part(index, 0, PartKind::StepStart {}), now, None));
        let step = Step { info, blocks: Vec::new(), ended: false, stop: None, usage: Usage::default(), error: None };
        self.run.steps.insert(index, step);
    }

    fn update(&mut self, index: u64, delta: &StreamDelta, now: Millis, out: &mut Vec<Event>) {
        match delta {
            StreamDelta::TextStart { content_index } => {
                self.open_block(index, *content_index, BlockKind::Text, now, out)
            }
            StreamDelta::ThinkingStart { content_index } => {
                self.open_block(index, *content_index, BlockKind::Reasoning, now, out)
            }
            StreamDelta::ToolcallStart { content_index, id, name } => {
                self.run.calls.insert(id.clone(), (index, *content_index));
                let state = ToolState::Pending { input: serde_json::json!({}), raw: String::new() };
                let kind = BlockKind::Tool { call_id: id.clone(), name: name.clone(), state };
                self.open_block(index, *content_index, kind, now, out);
            }
            StreamDelta::TextDelta { content_index, offset, delta }
            | StreamDelta::ThinkingDelta { content_index, offset, delta } => {
                self.append(index, *content_index, *offset, delta, now, out)
            }
            StreamDelta::TextEnd { content_index } | StreamDelta::ThinkingEnd { content_index } => {
                self.close_block(index, *content_index, now, out)
            }
            // Tool arguments arrive whole at `message_end`; streaming them would repeat
            // the arguments so far on every piece.
            StreamDelta::ToolcallDelta { .. } | StreamDelta::ToolcallEnd { .. } | StreamDelta::Done { .. } => {}
        }
    }

    fn block_mut(&mut self, index: u64, content: usize) -> Option<&mut Block> {
        self.run.steps.get_mut(&index)?.blocks.get_mut(content)?.as_mut()
    }

    /// The part a block is now.
    fn block_part(&self, index: u64, content: usize) -> Option<Part> {
        let block = self.run.steps.get(&index)?.blocks.get(content)?.as_ref()?;
        let kind = match &block.kind {
            BlockKind::Text => PartKind::Text { text: block.text.clone(), time: Some(block.time) },
            BlockKind::Reasoning => PartKind::Reasoning { text: block.text.clone(), time: block.time },
            BlockKind::Tool { call_id, name, state } => {
                PartKind::Tool { call_id: call_id.clone(), tool: name.clone(), state: state.clone() }
            }
        };
        Some(self.scope.part(index, ids::content_part(content), kind))
    }

    fn emit_block(&self, index: u64, content: usize, now: Millis, out: &mut Vec<Event>) {
        if let Some(part) = self.block_part(index, content) {
            out.push(self.part_updated(part, now, None));
        }
    }

    fn open_block(&mut self, index: u64, content: usize, kind: BlockKind, now: Millis, out: &mut Vec<Event>) {
        let Some(step) = self.run.steps.get_mut(&index) else { return };
        if step.blocks.len() <= content {
            step.blocks.resize_with(content + 1, || None);
        }
        let time = PartTime { start: now, end: None };
        step.blocks[content] = Some(Block { kind, text: String::new(), sent: 0, time });
        self.emit_block(index, content, now, out);
    }

    /// Applies a delta at `offset`: the part of it not sent yet goes out (see the module
    /// docs); a delta entirely behind what was sent is a duplicate and sends nothing.
    fn append(&mut self, index: u64, content: usize, offset: usize, delta: &str, now: Millis, out: &mut Vec<Event>) {
        let Some(block) = self.block_mut(index, content) else { return };
        if offset + offset_len(delta) <= block.sent {
            return;
        }
        // `offset > sent` would be a hole; within one subscription frames never skip,
        // so the text is appended as it comes.
        let fresh = skip_utf16(delta, block.sent.saturating_sub(offset)).to_owned();
        block.text.push_str(&fresh);
        block.sent += offset_len(&fresh);
        let Some(part) = self.block_part(index, content) else { return };
        out.push(Event::PartDelta {
            session_id: self.sid(),
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            field: "text",
            delta: fresh.clone(),
        });
        if self.legacy_deltas {
            out.push(self.part_updated(part, now, Some(fresh)));
        }
    }

    /// Ends a text or reasoning block (a tool part ends with its tool, not its block).
    fn close_block(&mut self, index: u64, content: usize, now: Millis, out: &mut Vec<Event>) {
        let Some(block) = self.block_mut(index, content) else { return };
        if block.time.end.is_some() || matches!(block.kind, BlockKind::Tool { .. }) {
            return;
        }
        block.time.end = Some(now);
        self.emit_block(index, content, now, out);
    }

    /// A running tool printed more: the part's `metadata.output` grows, as OpenCode's
    /// bash tool reports it, up to [`LIVE_METADATA_CHARS`]. Each update repeats the
    /// output so far (OpenCode has no delta for it), which that bound keeps small;
    /// past it the part stays as it is, and the result completes it.
    fn tool_output(&mut self, call_id: &str, delta: &str, now: Millis, out: &mut Vec<Event>) {
        let Some(&(index, content)) = self.run.calls.get(call_id) else { return };
        let Some(Block { kind: BlockKind::Tool { state, .. }, .. }) = self.block_mut(index, content) else { return };
        let ToolState::Running { metadata, .. } = state else { return };
        let metadata = metadata.get_or_insert_with(|| serde_json::json!({"output": ""}));
        let Some(serde_json::Value::String(output)) = metadata.get_mut("output") else { return };
        let room = LIVE_METADATA_CHARS.saturating_sub(output.chars().count());
        if room == 0 || delta.is_empty() {
            return;
        }
        output.extend(delta.chars().take(room));
        self.emit_block(index, content, now, out);
    }

    fn set_tool_state(
        &mut self,
        call_id: &str,
        now: Millis,
        out: &mut Vec<Event>,
        next: impl FnOnce(&ToolState) -> ToolState,
    ) {
        let Some(&(index, content)) = self.run.calls.get(call_id) else { return };
        let Some(Block { kind: BlockKind::Tool { state, .. }, .. }) = self.block_mut(index, content) else { return };
        *state = next(state);
        self.emit_block(index, content, now, out);
    }

    fn end_message(&mut self, index: u64, message: &Message, now: Millis, out: &mut Vec<Event>) {
        match message {
            Message::User { content, timestamp } => {
                self.run.user = Some(index);
                let model = self.session.as_ref().and_then(|s| s.model.as_deref());
                let info = self.scope.user_info(index, *timestamp, model);
                out.push(Event::MessageUpdated { session_id: self.sid(), info });
                for (i, c) in content.iter().enumerate() {
                    if let Content::Text { text } = c {
                        let kind = PartKind::Text { text: text.clone(), time: None };
                        out.push(self.part_updated(self.scope.part(index, ids::content_part(i), kind), now, None));
                    }
                }
            }
            Message::Assistant { content, stop_reason, usage, model, error_message, timestamp } => {
                if !self.run.steps.contains_key(&index) {
                    self.start_step(index, model, *timestamp, now, out);
                }
                self.reconcile(index, content, now, out);
                let asks_tools = content.iter().any(|c| matches!(c, Content::ToolCall { .. }));
                if let Some(step) = self.run.steps.get_mut(&index) {
                    step.ended = true;
                    step.stop = *stop_reason;
                    step.usage = *usage;
                    step.error = error_message.clone();
                }
                if *stop_reason == Some(StopReason::Error) {
                    self.run.error = error_message.clone().or_else(|| Some("the model failed".into()));
                }
                if !(asks_tools && *stop_reason == Some(StopReason::ToolUse)) {
                    self.finish_step(index, now, out);
                }
            }
            Message::ToolResult { .. } => {}
        }
    }

    /// Brings every block up to the committed message: sends any text not sent yet,
    /// closes open blocks, and gives tool parts their parsed input.
    fn reconcile(&mut self, index: u64, content: &[Content], now: Millis, out: &mut Vec<Event>) {
        for (ci, c) in content.iter().enumerate() {
            match c {
                Content::Text { text } | Content::Thinking { thinking: text } => {
                    if self.block_mut(index, ci).is_none() {
                        let kind =
                            if matches!(c, Content::Text { .. }) { BlockKind::Text } else { BlockKind::Reasoning };
                        self.open_block(index, ci, kind, now, out);
                    }
                    let Some(block) = self.block_mut(index, ci) else { continue };
                    if let Some(tail) = text.strip_prefix(block.text.as_str()) {
                        let (sent, tail) = (block.sent, tail.to_owned());
                        if !tail.is_empty() {
                            self.append(index, ci, sent, &tail, now, out);
                        }
                    } else {
                        // Cannot happen with an engine that applies its own deltas; the
                        // committed text wins, as a whole-part replacement.
                        block.text = text.clone();
                        block.sent = offset_len(text);
                        self.emit_block(index, ci, now, out);
                    }
                    self.close_block(index, ci, now, out);
                }
                Content::ToolCall { id, name, arguments } => {
                    if self.block_mut(index, ci).is_none() {
                        self.run.calls.insert(id.clone(), (index, ci));
                        let state = ToolState::Pending { input: serde_json::json!({}), raw: String::new() };
                        let kind = BlockKind::Tool { call_id: id.clone(), name: name.clone(), state };
                        self.open_block(index, ci, kind, now, out);
                    }
                    let (input, raw) = tool_input(arguments);
                    self.set_tool_state(id, now, out, |state| match state {
                        ToolState::Pending { .. } => ToolState::Pending { input, raw },
                        other => other.clone(),
                    });
                }
            }
        }
    }

    /// Ends a step: `step-finish` if it ended normally, then the completed message.
    fn finish_step(&mut self, index: u64, now: Millis, out: &mut Vec<Event>) {
        let Some(mut step) = self.run.steps.remove(&index) else { return };
        complete(&mut step.info, step.stop, step.error.as_deref(), step.usage, now);
        if let Some(reason) = step.stop.and_then(finish_reason) {
            let part = self.scope.part(index, ids::content_part(step.blocks.len()), step_finish(reason, step.usage));
            out.push(self.part_updated(part, now, None));
        }
        out.push(Event::MessageUpdated { session_id: self.sid(), info: MessageInfo::Assistant(Box::new(step.info)) });
    }

    /// The run settled: whatever is still open ends with it, and a failed or cancelled
    /// run is a `session.error`.
    fn end_run(&mut self, status: &str, now: Millis, out: &mut Vec<Event>) {
        // An answer whose call never started (the run was stopped first) was not used.
        for (_, request) in std::mem::take(&mut self.answered) {
            out.push(Event::QuestionRejected { session_id: self.sid(), request_id: request.to_string() });
        }
        let open: Vec<u64> = self.run.steps.keys().copied().collect();
        for index in open {
            let blocks = self.run.steps.get(&index).map_or(0, |s| s.blocks.len());
            for ci in 0..blocks {
                self.close_block(index, ci, now, out);
                let Some(Block { kind: BlockKind::Tool { call_id, .. }, .. }) = self.block_mut(index, ci) else {
                    continue;
                };
                let call_id = call_id.clone();
                let error = format!("the run was {status} before this tool finished");
                self.set_tool_state(&call_id, now, out, |state| match state {
                    ToolState::Pending { input, .. } => {
                        ToolState::Error { input: input.clone(), error, time: SpanTime { start: now, end: now } }
                    }
                    ToolState::Running { input, time, .. } => {
                        ToolState::Error { input: input.clone(), error, time: SpanTime { start: time.start, end: now } }
                    }
                    done => done.clone(),
                });
            }
            if status != "completed"
                && let Some(step) = self.run.steps.get_mut(&index)
            {
                // It ended by asking for tools, then the run stopped: not a normal finish.
                step.stop = Some(if status == "cancelled" { StopReason::Aborted } else { StopReason::Error });
                step.error = step.error.take().or_else(|| self.run.error.clone());
            }
            self.finish_step(index, now, out);
        }
        let error = match status {
            "cancelled" => Some(ErrorInfo::aborted("the run was aborted")),
            "failed" => Some(match self.run.error.take() {
                Some(message) => ErrorInfo::api(message),
                None => ErrorInfo::unknown("the run failed"),
            }),
            _ => None,
        };
        if let Some(error) = error {
            out.push(Event::SessionError { session_id: self.sid(), error });
        }
        self.run = RunTrack::default();
    }
}

/// `s` without its first `units` UTF-16 code units (whole characters only).
fn skip_utf16(s: &str, units: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen >= units {
            return &s[i..];
        }
        seen += c.len_utf16();
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::skip_utf16;

    #[test]
    fn skips_utf16_units_by_whole_characters() {
        assert_eq!(skip_utf16("héllo", 2), "llo");
        assert_eq!(skip_utf16("a🌍b", 3), "b");
        assert_eq!(skip_utf16("ab", 5), "");
        assert_eq!(skip_utf16("ab", 0), "ab");
    }
}
