//! Native frames of one session → OpenCode events.
//!
//! | native                                   | OpenCode                                             |
//! |------------------------------------------|------------------------------------------------------|
//! | `session.state` busy / idle              | `session.status` busy / idle (+ `session.idle`)       |
//! | `session.state` with a changed session   | `session.updated`                                     |
//! | `message_end` of a user message          | `message.updated` + its `file` and `text` parts       |
//! | `message_start` of an assistant message  | `message.updated` + `step-start`                      |
//! | `text_start` / `thinking_start`          | `message.part.updated` (`text` / `reasoning`, empty)  |
//! | `text_delta` / `thinking_delta`          | `message.part.delta` (`field: "text"`)                |
//! | `text_end` / `thinking_end`              | `message.part.updated` with the whole text, `time.end`|
//! | `toolcall_start`, then `message_end`     | `tool` part `pending` (then with its `input`)         |
//! | `tool_execution_start` / `_end`          | `tool` part `running` / `completed` or `error`        |
//! | `tool_execution_update`                  | `tool` part `running` with `metadata.output` so far (its first 30,000 characters) |
//! | `step_snapshot` before / after           | `step-start` again with its `snapshot` / the tree kept for `step-finish` |
//! | `message_end` (no tools) or `turn_end`   | `step-finish` (reason, cost, tokens, snapshot) + `message.updated` |
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
//! The rooms: this file holds the mapper's state and the loop events; `parts.rs` the
//! parts a step grows (text and reasoning blocks, tool states, the step's end) and the
//! run's end; `replay.rs` joining mid-run (a snapshot) and what a client back after a
//! drop missed.

use super::ids;
use super::records::{
    Scope, Trees, complete, finish_reason, is_question, permission, question, step_finish, tool_input, user_parts,
};
use super::wire::*;
use spool_protocol::event::offset_len;
use spool_protocol::frame::{FrameBody, SessionState, ToolStatus};
use spool_protocol::time::Millis;
use spool_protocol::{
    AgentEvent, ApprovalId, Content, Message, PendingRevert, Session, SessionStatus, SnapshotPhase, StopReason,
    StreamDelta, Usage,
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
    /// The pending revert last told (part of the session as OpenCode shows it).
    revert: Option<PendingRevert>,
    busy: bool,
    /// A run was accepted and the session has not gone idle since.
    accepted: bool,
    pending: Vec<ApprovalId>,
    /// The pending approvals that are questions, with their tool calls.
    questions: HashMap<ApprovalId, String>,
    /// Questions answered (`fill`) whose call has not started, by call id. The answer is
    /// the call's `answer` argument, so `question.replied` goes out when the call starts.
    answered: HashMap<String, ApprovalId>,
    /// The pending questions that are a server's, asked while its call runs (live
    /// asks): their call is running already, so an answer is replied at once.
    live: std::collections::HashSet<ApprovalId>,
    /// The pending client tool calls (`Approval::is_client_call`): neither a permission
    /// nor a question, their tool part runs until the client's result comes.
    client: std::collections::HashSet<ApprovalId>,
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
    /// The step's snapshots, as `step_snapshot` events named them.
    trees: Trees,
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
            revert: None,
            busy: false,
            accepted: false,
            pending: Vec::new(),
            questions: HashMap::new(),
            answered: HashMap::new(),
            live: Default::default(),
            client: Default::default(),
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
            FrameBody::Presence { presence } => {
                out.push(Event::SpoolPresence { session_id: self.sid(), presence: presence.clone() })
            }
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
        // A revert or unrevert changes no session record, only the pending revert.
        if self.session.as_ref() != Some(&state.session) || self.revert != state.revert {
            let info = super::records::session_info(&state.session, state.revert.as_ref(), &self.scope.directory);
            out.push(Event::SessionUpdated { session_id: self.sid(), info });
            self.session = Some(state.session.clone());
            self.revert.clone_from(&state.revert);
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
                    ToolState::settled(input, result.clone(), *is_error, tool_name.clone(), time)
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
                if approval.is_client_call() {
                    // The client runs it: OpenCode has nothing to answer, and the part
                    // runs until the result comes (`tool_execution_start` / `_end`).
                    self.client.insert(approval.id.clone());
                    let args = approval.payload.get("arguments").cloned().unwrap_or_default();
                    self.set_tool_state(&approval.tool_call_id, now, out, |state| {
                        let input = match state {
                            ToolState::Pending { input, .. } | ToolState::Running { input, .. } => input.clone(),
                            _ => tool_input(&args).0,
                        };
                        ToolState::Running { input, time: StartTime { start: now }, metadata: None }
                    });
                } else if is_question(approval) {
                    self.questions.insert(approval.id.clone(), approval.tool_call_id.clone());
                    if approval.is_live_ask() {
                        self.live.insert(approval.id.clone());
                    }
                    out.push(Event::QuestionAsked(question(approval, message)));
                } else {
                    let p = permission(approval, message);
                    out.push(Event::PermissionUpdated(p.clone()));
                    out.push(Event::PermissionAsked(p));
                }
            }
            AgentEvent::ApprovalResolved { approval_id, decision, .. } => {
                self.pending.retain(|p| p != approval_id);
                let live = self.live.remove(approval_id);
                if self.client.remove(approval_id) {
                    // A client call's result (or its cancelling): no permission was asked.
                    return;
                }
                match self.questions.remove(approval_id) {
                    // A server's question: answered (the fields are the server's, not
                    // on this event), or declined, expired or cancelled.
                    Some(_) if live && matches!(decision.as_str(), "fill" | "once") => {
                        out.push(Event::QuestionReplied {
                            session_id: self.sid(),
                            request_id: approval_id.to_string(),
                            answers: Vec::new(),
                        });
                    }
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
            AgentEvent::StepSnapshot { snapshot, phase, message_index } => {
                self.step_snapshot(*message_index, *phase, snapshot, now, out)
            }
        }
    }

    fn start_step(&mut self, index: u64, model: &str, created: Millis, now: Millis, out: &mut Vec<Event>) {
        let info = self.scope.assistant_info(index, self.run.user, created, model);
        out.push(Event::MessageUpdated {
            session_id: self.sid(),
            info: MessageInfo::Assistant(Box::new(info.clone())),
        });
        out.push(self.part_updated(self.scope.part(index, 0, PartKind::StepStart { snapshot: None }), now, None));
        let step = Step {
            info,
            blocks: Vec::new(),
            ended: false,
            stop: None,
            usage: Usage::default(),
            error: None,
            trees: Trees::default(),
        };
        self.run.steps.insert(index, step);
    }

    /// A step's snapshot. The `before` tree is taken once the model asked for its calls,
    /// so the step's `step-start` went out already: it is sent again, the same part
    /// with its `snapshot`. The `after` tree waits for the step's `step-finish`.
    fn step_snapshot(&mut self, index: u64, phase: SnapshotPhase, tree: &str, now: Millis, out: &mut Vec<Event>) {
        let Some(step) = self.run.steps.get_mut(&index) else { return };
        match phase {
            SnapshotPhase::Before => {
                step.trees.before = Some(tree.to_owned());
                let kind = PartKind::StepStart { snapshot: Some(tree.to_owned()) };
                out.push(self.part_updated(self.scope.part(index, 0, kind), now, None));
            }
            SnapshotPhase::After => step.trees.after = Some(tree.to_owned()),
        }
    }
}

mod parts;
mod replay;
