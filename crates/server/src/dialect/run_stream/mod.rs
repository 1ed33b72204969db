//! The run stream of seed 003 (`POST /api/chat`, `GET /api/runs/:id/events`, and the
//! continuation a resume answers with), mapped from the native session frames.
//!
//! A run-stream client follows one run, not a session, and counts its events with a
//! dense `sequence` (1, 2, 3 …) to drop what it has already drawn. The sequence is the
//! run's, for the run's lifetime: every stream of one run continues it. The engine
//! counts it once per session as frames enter the ring ([`RunCount`], which this fold
//! steps too, so the two agree on every frame), which lets a re-attach start from the
//! frame of the client's last event (`after`) and number on. When the frames after it
//! are no longer buffered, [`RunStream::from_snapshot`] starts with one `snapshot`
//! event — status, text so far, the run's tool calls — numbered with the run's current
//! sequence; a settled run's `done` / `error`, or the `interrupt` a parked run waits at,
//! follows it with its own number (the snapshot then stands for the events before it).
//! A snapshot's tool calls are those a client that saw every event would hold: a call
//! the model announced but that has not started yet is left out (its `tool_started`
//! comes later), one that started is `running` until its result.
//!
//! The fold is a [`FormMapper`]: what a frame maps to depends on the run's frames only,
//! not on where a subscriber started, so every stream of a run shares one fold and the
//! encoded bytes of each event (`dialect/shared.rs`, keyed by [`RunForm`]); subscribers
//! with different `after`s differ in the outputs they take, not in the outputs.
//!
//! A restart loses the engine's counters. A run parked at an approval keeps its
//! `interrupt`'s number with the approval's checkpoint and the engine counts its
//! continuation on from it, so the one kind of run that lives across a restart keeps
//! its numbers. A run that settled before it (or one followed from the middle on
//! another node) is answered with a snapshot numbered after the client's own last
//! sequence ([`Numbering::After`]): higher than anything the client holds, so its
//! dedupe drops nothing, and the snapshot replaces what it drew.
//!
//! | native frame                                   | run-stream event |
//! |------------------------------------------------|------------------|
//! | `run.accepted` of this run                      | `run_started`    |
//! | `message_update` / `text_delta`                 | `text_delta {delta}` |
//! | `tool_execution_start`                          | `tool_started {callId, tool}` |
//! | `tool_execution_end`                            | `tool_finished {callId, tool, status, summary}` |
//! | `approval_requested`                            | `interrupt {interruptId, payload}` |
//! | `message_end` of a user message the run took while running (a steer; not its prompt) | `user_message {messageId, text, files?}` |
//! | `agent_end` completed, then the next `session.state` | `done {messageId}` (the state names the stored message) |
//! | `agent_end` failed / cancelled                  | `error {code, message}` that `agent_end` carries |
//! | `session.presence` (after `run_started`, before the end) | `presence {runId, viewers, answerers, visible, clients}`, unnumbered |
//!
//! Presence is Spool's, and the one event without a number: it comes when the views
//! of the session settle, on a timer, so it has no place in the run's numbering (the
//! frame log and every re-attach number the run the same without it). It has no `id:`
//! line, so an `EventSource` keeps the last numbered one as `Last-Event-ID`, and a
//! re-attach never sends one the client had: only those after its last event.
//!
//! Everything else (thinking, tool-call argument deltas, timings, titles, other runs)
//! maps to nothing. That includes `tool_execution_update` on purpose: seed 003's run
//! stream has no event for a tool's partial output, and `tool_finished` carries the
//! summary its clients show; live output is for the session stream. The transport ends the stream after `done` or `error`, and after an
//! `interrupt` that is still waiting once it has caught up with the live frames.

pub(crate) mod routes;

use crate::dialect::shared::FormMapper;
use bytes::Bytes;
use serde::Serialize;
use spool_engine::RunCount;
use spool_protocol::api::AttachmentInfo;
use spool_protocol::frame::{Frame, FrameBody, SessionState, ToolExecution, ToolStatus};
use spool_protocol::time::Millis;
use spool_protocol::{
    AgentEvent, Approval, ApprovalId, ApprovalKind, Content, IndexedMessage, Message, MessageId, Presence, Run,
    RunError, RunId, RunStatus, SessionId, StreamDelta, sse,
};
use std::collections::BTreeMap;

/// One event of the run stream: seed 003's `StreamEvent` with `type`, `runId` and the
/// run's dense `sequence`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    #[serde(flatten)]
    pub body: RunEventBody,
    pub run_id: RunId,
    pub sequence: u64,
}

/// Who is on the run's session now (`session.presence`): `event: presence`, `data`
/// the counts with the run's id and no `sequence`, and no `id:` line. Not one of the
/// run's events: it counts for nothing in the numbering, and a client that does not
/// know it skips it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPresence {
    /// Always `presence`.
    #[serde(rename = "type")]
    #[schema(pattern = "^presence$")]
    pub kind: &'static str,
    pub run_id: RunId,
    #[serde(flatten)]
    pub presence: Presence,
}

impl RunPresence {
    /// The SSE event: named, unnumbered.
    pub fn to_sse(&self) -> Bytes {
        let json = serde_json::to_string(self).expect("presence is plain data and always serializes");
        sse::encode(None, Some(self.kind), &json)
    }
}

/// The `data` of one run-stream event, for the API's schema: a run event, or presence.
#[allow(dead_code)] // Only its schema is used; the events are encoded one by one.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum RunStreamData {
    Event(RunEvent),
    Presence(RunPresence),
}

/// The type-specific part of a [`RunEvent`]. The serde names are the wire `type`s.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEventBody {
    /// The run was accepted. `sessionId` lets a client that sent only a `projectId`
    /// retry with the session; `requestId` is the key a retried POST reuses.
    #[serde(rename_all = "camelCase")]
    RunStarted { session_id: SessionId, request_id: String },
    /// Text the model added; a client appends it.
    TextDelta { delta: String },
    #[serde(rename_all = "camelCase")]
    ToolStarted { call_id: String, tool: String },
    /// `summary` is a short line for a step list, never the raw (possibly large) result.
    #[serde(rename_all = "camelCase")]
    ToolFinished { call_id: String, tool: String, status: ToolOutcome, summary: String },
    /// The run waits for a person. `payload` is the approval's redacted card; resume
    /// with `POST /api/runs/:id/resume {interruptId, decision, idempotencyKey}`.
    #[serde(rename_all = "camelCase")]
    Interrupt { interrupt_id: ApprovalId, kind: ApprovalKind, payload: serde_json::Value, expires_at: Millis },
    /// A user message the run took while it ran (a steer, `POST
    /// /api/sessions/:id/steer`): the model's next request holds it. Seed 003 has no
    /// user event (the client sent its prompt); this one is Spool's, and a client that
    /// does not know it skips it. `files`: the files sent with it, as `POST /api/uploads`
    /// answers them (`url` fetches the bytes with the owner's credentials), left out
    /// when there are none.
    #[serde(rename_all = "camelCase")]
    UserMessage {
        message_id: Option<MessageId>,
        text: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        files: Vec<AttachmentInfo>,
    },
    /// The run completed; `messageId` is its final assistant message as stored.
    #[serde(rename_all = "camelCase")]
    Done { message_id: Option<MessageId> },
    /// The run failed or was cancelled; `message` can be shown to a person.
    Error { code: String, message: String },
    /// The frames after the client's last event were no longer buffered: where the run
    /// is now. A client replaces what it drew for this run with `text` and `tools` and
    /// counts on from `sequence`. `steers`: the user messages the run took so far (its
    /// `user_message` events), left out when there are none.
    #[serde(rename_all = "camelCase")]
    Snapshot {
        session_id: SessionId,
        status: RunStatus,
        text: String,
        tools: Vec<RunTool>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        steers: Vec<RunSteer>,
    },
}

/// A user message the run took while it ran, as a snapshot shows it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSteer {
    pub message_id: MessageId,
    pub text: String,
    /// The files sent with it, as its `user_message` event has them; left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<AttachmentInfo>,
}

/// A tool call of the run, as a snapshot shows it: `running` from its call until its
/// `tool_finished`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunTool {
    pub call_id: String,
    pub tool: String,
    pub status: ToolState,
    /// Once finished: the `summary` its `tool_finished` carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolState {
    Running,
    Success,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolOutcome {
    Success,
    Error,
}

impl RunEvent {
    /// The wire `type`.
    #[cfg(test)]
    pub fn kind(&self) -> String {
        self.to_value()["type"].as_str().unwrap_or_default().to_owned()
    }

    fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("run events are plain data and always serialize")
    }

    /// The SSE event of seed 003: `event: <type>` and `data: <json>`, with the sequence
    /// as its `id` so an `EventSource` re-attaching to `GET /api/runs/:id/events` sends
    /// it back as `Last-Event-ID`.
    pub fn to_sse(&self) -> Bytes {
        let value = self.to_value();
        let kind = value["type"].as_str().unwrap_or_default().to_owned();
        sse::encode(Some(&self.sequence.to_string()), Some(&kind), &value.to_string())
    }
}

/// What one native frame gives every subscriber of a run, mapped and encoded once (the
/// run's shared form, see [`FormMapper`] below and `dialect/shared.rs`).
#[derive(Debug)]
pub struct Step {
    /// The run-stream event this frame is: its sequence and its SSE bytes.
    pub event: Option<(u64, Bytes)>,
    /// The frame said who is on the session: the unnumbered `presence` event.
    pub presence: Option<Bytes>,
    /// After this frame the run waits for a person.
    pub waiting: bool,
    /// After this frame nothing more follows (`done` or `error`).
    pub finished: bool,
}

/// The run stream's output form. The fold's state after a frame is a function of the
/// run's frames only (its counter, the approval it waits at, its last assistant
/// message), so every subscriber on the run's own numbering can share one fold and the
/// bytes it encodes, whatever its `after`: where they start differs, not what a frame
/// maps to. A fold numbered after a client's own last sequence ([`Numbering::After`])
/// maps the same frames to other numbers: it gets a form of its own ([`RunForm::Alone`]).
impl FormMapper for RunStream {
    type Out = Step;

    fn map(&mut self, frame: &Frame) -> Step {
        let event = self.push(frame).map(|event| (event.sequence, event.to_sse()));
        let presence = self.presence(frame).map(|p| p.to_sse());
        Step { event, presence, waiting: self.waiting.is_some(), finished: self.finished }
    }
}

/// Which shared form a run-stream subscriber follows (the key of [`Forms`]).
///
/// [`Forms`]: crate::dialect::shared::Forms
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunForm {
    /// The run's own numbering: shared by every subscriber of the run.
    Run(RunId),
    /// A numbering of this subscriber's own (a snapshot after a client's last sequence
    /// when this stream does not know the run's): never shared; the number only tells
    /// one such subscriber from another.
    Alone(u64),
}

impl RunForm {
    /// The form a fold numbered by `numbering` belongs to.
    pub fn of(run: &RunId, numbering: &Numbering) -> Self {
        match numbering {
            Numbering::Run(_) => Self::Run(run.clone()),
            Numbering::After(_) => Self::Alone(super::shared::alone()),
        }
    }
}

/// How a snapshot is numbered.
#[derive(Clone, Debug)]
pub enum Numbering {
    /// By the run's counter as it stood at the snapshot.
    Run(RunCount),
    /// This stream does not know the run's numbers (the session was loaded after the
    /// run began, or the client's sequence is past the run's): after the client's own
    /// last sequence.
    After(u64),
}

/// The fold over one run's frames: the run's counter and the little the mapping must
/// remember between frames. Pure: no clock, no I/O.
#[derive(Clone, Debug)]
pub struct RunStream {
    count: RunCount,
    /// Absolute index of the run's latest assistant message, named by `done`.
    last_assistant: Option<u64>,
    /// The approval the run waits for, if it does.
    waiting: Option<ApprovalId>,
    finished: bool,
}

impl RunStream {
    /// A fold that starts numbering at the run's `run.accepted` frame and ignores
    /// everything before it.
    pub fn new(run_id: RunId) -> Self {
        Self::resume(RunCount::new(run_id), None)
    }

    /// A fold that goes on from `count` (the engine's, where a subscription starts),
    /// with the run waiting at `waiting` if it does. A count that has ended has nothing
    /// more to give.
    pub fn resume(count: RunCount, waiting: Option<ApprovalId>) -> Self {
        let finished = count.ended();
        Self { count, last_assistant: None, waiting, finished }
    }

    pub fn run_id(&self) -> &RunId {
        self.count.run_id()
    }

    /// `done` or `error` was produced: nothing follows.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The approval the run is parked at, if any.
    pub fn waiting(&self) -> Option<&ApprovalId> {
        self.waiting.as_ref()
    }

    fn event(&self, sequence: u64, body: RunEventBody) -> RunEvent {
        RunEvent { body, run_id: self.count.run_id().clone(), sequence }
    }

    /// The `presence` event of a `session.presence` frame: only between the run's
    /// `run_started` and its end, where a client follows the run (as the AI SDK's
    /// stream carries it only inside the run's message).
    pub fn presence(&self, frame: &Frame) -> Option<RunPresence> {
        let FrameBody::Presence { presence } = &frame.body else { return None };
        let inside = self.count.sequence() > 0 && !self.finished;
        inside.then(|| RunPresence { kind: "presence", run_id: self.run_id().clone(), presence: presence.clone() })
    }

    /// Maps one native frame of the run's session.
    pub fn push(&mut self, frame: &Frame) -> Option<RunEvent> {
        if self.finished {
            return None;
        }
        // What the mapping remembers from frames that are no event of their own.
        if let FrameBody::LoopEvent { run_id, message_index, event, .. } = &frame.body
            && run_id == self.count.run_id()
        {
            match event {
                AgentEvent::MessageEnd { message: Message::Assistant { .. } } => {
                    self.last_assistant = message_index.or(self.last_assistant);
                }
                AgentEvent::ApprovalResolved { approval_id, .. } if self.waiting.as_ref() == Some(approval_id) => {
                    self.waiting = None;
                }
                AgentEvent::AgentEnd { .. } => self.waiting = None,
                _ => {}
            }
        }
        let sequence = self.count.step(&frame.body)?;
        let body = match &frame.body {
            FrameBody::RunAccepted { request_id, .. } => {
                RunEventBody::RunStarted { session_id: frame.session_id.clone(), request_id: request_id.clone() }
            }
            FrameBody::State { state } => {
                self.finished = true;
                RunEventBody::Done { message_id: self.message_id(&state.messages) }
            }
            FrameBody::LoopEvent { event, message_id, .. } => match event {
                AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { delta, .. } } => {
                    RunEventBody::TextDelta { delta: delta.clone() }
                }
                AgentEvent::ToolExecutionStart { tool_call_id, tool_name, .. } => {
                    RunEventBody::ToolStarted { call_id: tool_call_id.clone(), tool: tool_name.clone() }
                }
                AgentEvent::ToolExecutionEnd { tool_call_id, tool_name, result, is_error } => {
                    RunEventBody::ToolFinished {
                        call_id: tool_call_id.clone(),
                        tool: tool_name.clone(),
                        status: if *is_error { ToolOutcome::Error } else { ToolOutcome::Success },
                        summary: summary(result),
                    }
                }
                AgentEvent::ApprovalRequested { approval } => {
                    self.waiting = Some(approval.id.clone());
                    interrupt(approval)
                }
                AgentEvent::MessageEnd { message: message @ Message::User { .. } } => RunEventBody::UserMessage {
                    message_id: message_id.clone(),
                    text: message.text(),
                    files: message.attachments(),
                },
                // Failed or cancelled (a completed run's end is the `state` frame after it).
                AgentEvent::AgentEnd { status, error, .. } => {
                    self.finished = true;
                    error_body(RunStatus::parse(status).unwrap_or(RunStatus::Failed), error.as_ref())
                }
                other => unreachable!("the run counter counts no {other:?}"),
            },
            other => unreachable!("the run counter counts no {other:?}"),
        };
        Some(self.event(sequence, body))
    }

    /// A fold for a run whose frames after the client's last event are no longer
    /// buffered. `state` is the session snapshot the live frames will follow; `run` is
    /// the stored run read after it (authoritative once the snapshot shows the run
    /// settled); `messages` holds the run's committed messages (the snapshot's own when
    /// they are among its rounds).
    ///
    /// Returns the fold and its first events: the `snapshot`, then the pending
    /// `interrupt`, or `done` / `error` for a settled run. Numbered by the run, the
    /// snapshot carries the run's current sequence — or the one before, when the
    /// `interrupt` or end that follows it is the run's last event so far.
    pub fn from_snapshot(
        run: &Run,
        state: &SessionState,
        messages: &[IndexedMessage],
        numbering: Numbering,
    ) -> (Self, Vec<RunEvent>) {
        let is_settled = |s: RunStatus| matches!(s, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled);
        let active = state.active_run.as_ref().filter(|a| a.run_id == run.id);
        let mut status = active.map_or(run.status, |a| a.status);
        // The counter saw the run's failed `agent_end` before the state frame that
        // settles it: ended all the same, as the stored run says.
        if matches!(&numbering, Numbering::Run(count) if count.ended()) && !is_settled(status) {
            status = if is_settled(run.status) { run.status } else { RunStatus::Failed };
        }
        let settled = is_settled(status);
        let pending = state.pending_approvals.iter().find(|a| a.run_id == run.id).filter(|_| !settled);
        // The run's counter, when this stream counts the run: which calls started.
        let numbering_count = match &numbering {
            Numbering::Run(count) => Some(count.clone()),
            Numbering::After(_) => None,
        };
        let (snapshot_at, tail_at, count) = match numbering {
            Numbering::Run(count) => {
                let now = count.sequence();
                let tail_counted =
                    if settled { count.ended() } else { pending.is_some_and(|a| count.interrupt(&a.id) == Some(now)) };
                match (settled, pending) {
                    _ if tail_counted => (now - 1, now, count),
                    (false, Some(approval)) => (now, count.interrupt(&approval.id).unwrap_or(now), count),
                    _ => (now, now + 1, count),
                }
            }
            Numbering::After(after) => {
                let last = if settled || pending.is_some() { after + 2 } else { after + 1 };
                (after + 1, after + 2, RunCount::after(run.id.clone(), last))
            }
        };
        let started = match &numbering_count {
            Some(count) => Started::Counted(count),
            None => Started::Unknown { running: status == RunStatus::Running },
        };
        let mut fold = Self::resume(count, pending.map(|a| a.id.clone()));
        let span = Span::of(run, state, messages);
        fold.last_assistant = last_assistant(span, messages);
        let snapshot = RunEventBody::Snapshot {
            session_id: state.session.id.clone(),
            status,
            text: run_text(span, messages, &state.drafts),
            tools: run_tools(span, messages, &state.tool_executions, pending, started),
            steers: run_messages(span, messages)
                .filter(|m| m.message.is_user())
                .map(|m| RunSteer { message_id: m.id.clone(), text: m.message.text(), files: m.message.attachments() })
                .collect(),
        };
        let mut events = vec![fold.event(snapshot_at, snapshot)];
        if settled {
            fold.finished = true;
            let end = match status {
                RunStatus::Completed => RunEventBody::Done { message_id: fold.message_id(messages) },
                _ => error_body(status, run.error.as_ref()),
            };
            events.push(fold.event(tail_at, end));
        } else if let Some(approval) = pending {
            events.push(fold.event(tail_at, interrupt(approval)));
        }
        (fold, events)
    }

    /// The run's final assistant message: the one its last `message_end` named, else
    /// (the stream began after it) the session's latest, which a just-completed run's is.
    fn message_id(&self, messages: &[IndexedMessage]) -> Option<MessageId> {
        match self.last_assistant {
            Some(index) => messages.iter().find(|m| m.index == index),
            None => messages.iter().rev().find(|m| matches!(m.message, Message::Assistant { .. })),
        }
        .map(|m| m.id.clone())
    }
}

fn error_body(status: RunStatus, error: Option<&RunError>) -> RunEventBody {
    match error {
        Some(RunError { code, message }) => RunEventBody::Error { code: code.clone(), message: message.clone() },
        None => RunEventBody::Error {
            code: status.as_str().to_owned(),
            message: format!("the run ended {}", status.as_str()),
        },
    }
}

/// Which of a run's calls without a result have started, for a snapshot.
enum Started<'a> {
    /// As the run's counter counted their `tool_started`.
    Counted(&'a RunCount),
    /// This stream does not count the run: calls run one after another, so at most the
    /// first call without a result runs, and only while the run does.
    Unknown { running: bool },
}

/// The run's tool calls in call order, as a client that saw every event holds them:
/// `running` from their `tool_started` until a result ends them. A call the model
/// announced that has not started yet (a later call of the same message, or one waiting
/// for a person, whose `interrupt` follows the snapshot) is left out, as it is from a
/// live client's step list until its `tool_started`.
fn run_tools(
    span: Span,
    messages: &[IndexedMessage],
    executions: &BTreeMap<String, ToolExecution>,
    pending: Option<&Approval>,
    started: Started<'_>,
) -> Vec<RunTool> {
    let mut tools: Vec<RunTool> = Vec::new();
    for m in run_messages(span, messages) {
        match &m.message {
            Message::Assistant { content, .. } => {
                for c in content {
                    if let Content::ToolCall { id, name, .. } = c
                        && pending.is_none_or(|a| a.tool_call_id != *id)
                    {
                        let tool = RunTool {
                            call_id: id.clone(),
                            tool: name.clone(),
                            status: ToolState::Running,
                            summary: None,
                        };
                        tools.push(tool);
                    }
                }
            }
            Message::ToolResult { tool_call_id, is_error, .. } => {
                if let Some(tool) = tools.iter_mut().find(|t| t.call_id == *tool_call_id) {
                    tool.status = if *is_error { ToolState::Error } else { ToolState::Success };
                    tool.summary = Some(summary(&m.message.text()));
                }
            }
            Message::User { .. } => {}
        }
    }
    // Finished (its `tool_finished` is out) though its result message is not committed yet.
    for tool in tools.iter_mut().filter(|t| t.status == ToolState::Running) {
        if let Some(exec) = executions.get(&tool.call_id) {
            let state = match exec.status {
                ToolStatus::Running => continue,
                ToolStatus::Success => ToolState::Success,
                ToolStatus::Error => ToolState::Error,
            };
            tool.status = state;
            tool.summary = Some(summary(exec.result.as_deref().unwrap_or_default()));
        }
    }
    let first_unfinished = tools.iter().position(|t| t.status == ToolState::Running);
    let mut index = 0;
    tools.retain(|t| {
        let keep = t.status != ToolState::Running
            || match &started {
                Started::Counted(count) => count.call_started(&t.call_id),
                Started::Unknown { running } => *running && first_unfinished == Some(index),
            };
        index += 1;
        keep
    });
    tools
}

fn interrupt(approval: &Approval) -> RunEventBody {
    RunEventBody::Interrupt {
        interrupt_id: approval.id.clone(),
        kind: approval.kind,
        payload: approval.payload.clone(),
        expires_at: approval.expires_at,
    }
}

/// Where a run's messages lie: after its prompt, up to the next run's prompt. A user
/// message between them is a steer the run took.
#[derive(Clone, Copy, Debug)]
struct Span {
    prompt: u64,
    /// The next run's prompt, if there is one.
    end: Option<u64>,
}

impl Span {
    /// The next run's prompt is the next prompt the state times, when it times this
    /// run's; a run it does not (older than the state's rounds) ends at its next user
    /// message.
    fn of(run: &Run, state: &SessionState, messages: &[IndexedMessage]) -> Self {
        let prompt = run.user_message_index;
        let end = match prompt >= state.first_index && state.prompt_timings.contains_key(&prompt) {
            true => state.prompt_timings.range(prompt + 1..).next().map(|(index, _)| *index),
            false => messages.iter().find(|m| m.index > prompt && m.message.is_user()).map(|m| m.index),
        };
        Self { prompt, end }
    }
}

/// The messages of the run in `span`, its steers included.
fn run_messages(span: Span, messages: &[IndexedMessage]) -> impl Iterator<Item = &IndexedMessage> {
    messages.iter().filter(move |m| m.index > span.prompt && span.end.is_none_or(|end| m.index < end))
}

fn last_assistant(span: Span, messages: &[IndexedMessage]) -> Option<u64> {
    run_messages(span, messages).filter(|m| matches!(m.message, Message::Assistant { .. })).map(|m| m.index).last()
}

/// The run's text so far: what its `text_delta`s add up to — the text of its committed
/// assistant messages, then of the message still streaming.
fn run_text(span: Span, messages: &[IndexedMessage], drafts: &BTreeMap<u64, Message>) -> String {
    let committed = run_messages(span, messages).filter(|m| matches!(m.message, Message::Assistant { .. }));
    let mut text: String = committed.map(|m| m.message.text()).collect();
    for draft in drafts.range(span.prompt + 1..).map(|(_, m)| m) {
        text.push_str(&draft.text());
    }
    text
}

/// Longest summary line, in characters.
const SUMMARY_CHARS: usize = 120;

/// A one-line summary of a tool result for a step list: its first non-empty line, cut
/// to [`SUMMARY_CHARS`], and how many more lines there were.
pub fn summary(result: &str) -> String {
    let mut lines = result.lines().map(str::trim_end).filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return String::new();
    };
    let mut line: String = first.chars().take(SUMMARY_CHARS).collect();
    if first.chars().count() > SUMMARY_CHARS {
        line.push('…');
    }
    match lines.count() {
        0 => line,
        1 => format!("{line} (+1 more line)"),
        n => format!("{line} (+{n} more lines)"),
    }
}

#[cfg(test)]
mod tests;
