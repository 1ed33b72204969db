//! AG-UI (the Agent–User Interaction protocol, 1.0, what `@ag-ui/client`'s `HttpAgent`
//! reads), mapped from the native session frames of one run: the events of
//! `POST /api/ag-ui`.
//!
//! An AG-UI run is one request: it opens with `RUN_STARTED` and ends with `RUN_FINISHED`
//! (outcome `success`, `interrupt` or `cancelled`) or `RUN_ERROR`. Its `runId` is the
//! Spool run's `run_…` id, its `threadId` the client's. A Spool run parked at an
//! approval is two AG-UI runs with that one id: the first ends with an `interrupt`
//! outcome, and the request answering it (`resume`) streams the continuation. A run
//! parked at a call of a tool the client declared (`RunAgentInput.tools`) is two runs
//! the same way: the first ends `success` with the call in `pendingToolCallIds`, and the
//! request with the call's `tool` message streams the continuation, which leaves out
//! the call's `TOOL_CALL_RESULT` (the client holds its own tool message). The
//! transport writes the opening ([`opening`]: `RUN_STARTED`, then `STATE_SNAPSHOT`) and
//! the end ([`closing`]); the fold maps what lies between.
//!
//! | native frame                                   | AG-UI events |
//! |------------------------------------------------|--------------|
//! | `text_delta` (`thinking_delta`)                 | `TEXT_MESSAGE_START` once, then `TEXT_MESSAGE_CONTENT` (`REASONING_START` + `REASONING_MESSAGE_START`, then `REASONING_MESSAGE_CONTENT`) |
//! | `text_end` (`thinking_end`), or another part starting | `TEXT_MESSAGE_END` (`REASONING_MESSAGE_END` + `REASONING_END`) |
//! | `toolcall_start` / `toolcall_delta` / `toolcall_end` | `TOOL_CALL_START` / `TOOL_CALL_ARGS` / `TOOL_CALL_END` |
//! | `message_end`, `tool_execution_start` of a call not streamed | `TOOL_CALL_START`, `TOOL_CALL_ARGS` (the whole input), `TOOL_CALL_END` |
//! | `tool_execution_end`                            | `TOOL_CALL_RESULT` (an error says so in `metadata.spool.isError`) |
//! | `approval_requested`                            | nothing: the stream ends with the `interrupt` outcome ([`closing`]); for a call of a client tool, `success` with `pendingToolCallIds` |
//! | `approval_resolved`                             | `CUSTOM` `spool.approval_resolved {approvalId, toolCallId, decision, message}` ([`resolved`]) |
//! | `session_title` / `todo_write`                  | `STATE_DELTA` replacing `/title` / `/todos` |
//! | `message_end` of a user message the run took (a steer; not its prompt) | `TEXT_MESSAGE_START` role `user` (its files as content parts in `metadata.spool.files`), `TEXT_MESSAGE_CONTENT`, `TEXT_MESSAGE_END` |
//! | `agent_end`                                     | what is still open closes; the transport ends the stream |
//! | `session.presence` (once the run started, before its end) | `CUSTOM` `spool.presence` (`value` the counts: `{viewers, answerers, visible, clients}`), unnumbered ([`Step::presence`]) |
//!
//! Message ids derive from the session and the message's index in it (`ses_…:5`), so
//! a replay of the same frames names the same messages; a reasoning block is
//! `ses_…:5:thinking:0`, a tool result `ses_…:call_1:result`. A tool call's
//! `parentMessageId` is its assistant message, so the client keeps text and calls of
//! one Spool message in one AG-UI message, as the protocol's reducer builds them.
//!
//! The fold is a [`FormMapper`]: its state after a frame depends only on the run's
//! frames and where it started, so every stream of a run started the same way shares one
//! mapping and its bytes (`dialect/shared.rs`). What differs per request (the thread id
//! the client used) is only in the opening and the end, which the transport writes.

mod events;
pub(crate) mod routes;

use super::run_fold::{
    self, Block, Core, DrawnCall, DrawnResult, Muted, Part, PartFold, RunFrame, data_events as encode,
};
use crate::dialect::shared::FormMapper;
use bytes::Bytes;
use serde_json::{Value, json};
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{
    AgentEvent, Approval, ApprovalId, Content, IndexedMessage, Message, Run, RunError, RunId, RunStatus, SessionId,
    StreamDelta,
};
use std::collections::{BTreeMap, BTreeSet};

pub use events::{APPROVAL_RESOLVED, AgUiEvent, Interrupt, Outcome, PROTOCOL_VERSION};

/// The `CUSTOM` event of a decision taken on `approval`. A continuation opens with it
/// (after [`opening`]) from the stored approval: the engine may start the
/// subscription after the `approval_resolved` frame, which the run's numbering does not
/// count.
pub fn resolved(approval: &Approval) -> Bytes {
    // An approval settled without a decision (expired, cancelled) says how.
    let decision = approval.decision.as_ref().map_or(approval.status.as_str(), |d| d.label());
    resolved_event(&approval.id, Some(&approval.tool_call_id), Some(decision), approval.message.as_deref()).to_sse()
}

fn resolved_event(id: &ApprovalId, call: Option<&str>, decision: Option<&str>, message: Option<&str>) -> AgUiEvent {
    AgUiEvent::Custom {
        name: APPROVAL_RESOLVED.to_owned(),
        value: json!({"approvalId": id, "toolCallId": call, "decision": decision, "message": message}),
    }
}

/// The `CUSTOM` event of a live ask ([`events::INPUT_REQUESTED`]).
fn input_requested(approval: &Approval) -> AgUiEvent {
    AgUiEvent::Custom { name: events::INPUT_REQUESTED.to_owned(), value: super::live_ask_notice(approval) }
}

/// The state an AG-UI client is given: the session's id, title and todo list.
pub fn state_of(session: &SessionId, state: &SessionState) -> Value {
    json!({"sessionId": session, "title": state.session.title, "todos": state.todos})
}

/// What opens every stream: `RUN_STARTED` for the Spool run, then the thread's state.
pub fn opening(thread_id: &str, run_id: &RunId, state: Value) -> Bytes {
    encode(&[
        AgUiEvent::RunStarted {
            thread_id: thread_id.to_owned(),
            run_id: run_id.clone(),
            protocol_version: PROTOCOL_VERSION.to_owned(),
        },
        AgUiEvent::StateSnapshot { snapshot: state },
    ])
}

/// How a stream ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Close {
    Completed,
    Cancelled,
    Failed(Option<RunError>),
    /// Parked at these approvals.
    Waiting(Vec<Approval>),
    /// Parked at these calls of the client's own tools ([`Approval::is_client_call`]):
    /// the client runs them and answers with `tool` messages.
    ClientCalls(Vec<Approval>),
}

impl Close {
    /// A run parked at `approval`: an interrupt for a person, or a call the client runs.
    pub fn parked(approval: Approval) -> Self {
        match approval.is_client_call() {
            true => Close::ClientCalls(vec![approval]),
            false => Close::Waiting(vec![approval]),
        }
    }
}

/// The last event of a stream: `RUN_FINISHED` with its outcome, or `RUN_ERROR`. A run
/// parked at a client call finishes `success` with the call in `pendingToolCallIds`
/// (the model's call id, as `TOOL_CALL_START` named it): AG-UI's way to hand a
/// frontend tool to the application, which answers with a `tool` message.
pub fn closing(thread_id: &str, run_id: &RunId, close: Close) -> Bytes {
    let (thread_id, run_id) = (thread_id.to_owned(), run_id.clone());
    let event = match close {
        Close::Completed => AgUiEvent::RunFinished {
            thread_id,
            run_id,
            outcome: Outcome::Success { pending_tool_call_ids: Vec::new() },
        },
        Close::ClientCalls(calls) => {
            let pending_tool_call_ids = calls.into_iter().map(|a| a.tool_call_id).collect();
            AgUiEvent::RunFinished { thread_id, run_id, outcome: Outcome::Success { pending_tool_call_ids } }
        }
        Close::Cancelled => AgUiEvent::RunFinished { thread_id, run_id, outcome: Outcome::Cancelled },
        Close::Waiting(approvals) => {
            let interrupts = approvals.iter().map(Interrupt::of).collect();
            AgUiEvent::RunFinished { thread_id, run_id, outcome: Outcome::Interrupt { interrupts } }
        }
        Close::Failed(error) => {
            let (code, message) = match error {
                Some(e) => (e.code, e.message),
                None => ("run_failed".to_owned(), "the run failed".to_owned()),
            };
            AgUiEvent::RunError { message, code }
        }
    };
    event.to_sse()
}

/// What one native frame gives every stream of the run: its events, encoded once, and
/// where the run stands after it.
#[derive(Debug, Default)]
pub struct Step {
    pub bytes: Bytes,
    /// The frame said who is on the session: the `CUSTOM` `spool.presence` event, apart
    /// from `bytes`, which a numbered stream numbers. Presence comes when the views
    /// settle, on a timer, so it takes no number (no `id:`, not counted): the run is
    /// numbered the same with it or without it, in every stream and re-attach.
    pub presence: Option<Bytes>,
    /// After this frame the run waits for a person: the approval it waits for.
    pub waiting: Option<Approval>,
    /// After this frame the run has ended, with this status.
    pub ended: Option<RunStatus>,
    /// Why it ended failed or cancelled, as its `agent_end` says.
    pub error: Option<RunError>,
}

/// The fold over one run's frames. Pure: no clock, no I/O. What the run waits for is
/// the approval itself (the interrupt the stream ends with describes it). A streaming
/// tool call is one whose `TOOL_CALL_START` was sent and `TOOL_CALL_END` not yet.
#[derive(Clone, Debug)]
pub struct AgUiStream {
    core: Core<Approval>,
    /// Calls whose `TOOL_CALL_START` was sent.
    announced: BTreeSet<String>,
    /// Tool calls of the approvals asked, by approval.
    asked: BTreeMap<ApprovalId, String>,
    /// The decision on this approval was sent by the transport ([`resolved`]).
    announced_decision: Option<ApprovalId>,
    ended: Option<RunStatus>,
    error: Option<RunError>,
    /// `agent_start` was seen and the prompt's `message_end` not yet: the client sent
    /// the prompt, so it is not drawn; later user messages are steers, and are.
    prompt_pending: bool,
    /// The call whose result the client itself sent in the request this stream
    /// continues (a client tool's): its `TOOL_CALL_RESULT` is not sent back, since
    /// `@ag-ui/client` appends every one it hears as a second tool message.
    given: Option<String>,
    /// The fold starts inside the turn whose approval it continues ([`Self::continuing`]):
    /// every call of that turn's message was sent before the interrupt, so a call of it
    /// that runs now is not announced again (the fold that saw the message had them all),
    /// until the next turn.
    in_asked_turn: bool,
}

impl AgUiStream {
    /// A fold that starts at the run's `run.accepted` and ignores everything before it.
    pub fn new(run_id: RunId) -> Self {
        Self {
            core: Core::new(run_id),
            announced: BTreeSet::new(),
            asked: BTreeMap::new(),
            announced_decision: None,
            ended: None,
            error: None,
            prompt_pending: false,
            given: None,
            in_asked_turn: false,
        }
    }

    /// A fold that goes on right after `approval`'s `approval_requested` frame: the
    /// client has the run up to there, every call of the turn's message included (those
    /// that run after the decision are not announced again, as in [`Self::muted_until`],
    /// so both number the continuation alike), and the transport has sent the decision
    /// ([`resolved`]).
    /// `waiting`: the approval the run still waits for as the subscription starts.
    pub fn continuing(approval: &Approval, waiting: Option<Approval>) -> Self {
        let mut fold = Self::new(approval.run_id.clone());
        fold.core.started = true;
        fold.announced_decision = Some(approval.id.clone());
        fold.announced.insert(approval.tool_call_id.clone());
        fold.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
        fold.core.waiting = waiting;
        fold.given = approval.is_client_call().then(|| approval.tool_call_id.clone());
        fold.in_asked_turn = true;
        fold
    }

    /// A fold from the run's start that sends nothing up to and including `approval`'s
    /// request (the continuation, when the replay has to start at the run's start).
    /// `waiting` is what the engine says the run waits for as the subscription starts,
    /// which the fold takes over when it unmutes (a decision taken before the
    /// subscription need not have its frame in the ring yet).
    pub fn muted_until(approval: &Approval, waiting: Option<Approval>) -> Self {
        let mut fold = Self::new(approval.run_id.clone());
        fold.core.muted = Some(Muted { until: approval.id.clone(), waiting });
        fold.announced_decision = Some(approval.id.clone());
        fold.given = approval.is_client_call().then(|| approval.tool_call_id.clone());
        fold
    }

    /// A fold that starts at a session snapshot instead of the run's frames (they have
    /// left the buffer): the events that draw the run's messages after its prompt as the
    /// snapshot shows them (`messages`, the state's own when they reach back that far,
    /// and the drafts being streamed), and a fold that goes on from there with the live
    /// frames. A settled run ends here; one parked at an approval waits.
    ///
    /// With `after`, the stream continues the run from that approval's interrupt: the
    /// client has the run up to it — the message with the call and the results of the
    /// calls before it — so only what follows is drawn (text sent twice under one id
    /// would be appended twice), and the decision is the transport's ([`resolved`]).
    pub fn from_snapshot(
        run: &Run,
        state: &SessionState,
        messages: &[IndexedMessage],
        after: Option<&Approval>,
    ) -> (Self, Vec<AgUiEvent>) {
        let mut fold = Self::new(run.id.clone());
        fold.core.started = true;
        let session = &state.session.id;
        let mut out = Vec::new();
        let mut shown: Vec<(u64, &Message, bool)> = run_fold::shown(run, state, messages).collect();
        if let Some(approval) = after {
            fold.announced_decision = Some(approval.id.clone());
            fold.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
            fold.given = approval.is_client_call().then(|| approval.tool_call_id.clone());
            let call = &approval.tool_call_id;
            let holds_call = |m: &Message| match m {
                Message::Assistant { content, .. } => {
                    content.iter().any(|c| matches!(c, Content::ToolCall { id, .. } if id == call))
                }
                _ => false,
            };
            if let Some(at) = shown.iter().position(|(_, m, _)| holds_call(m)) {
                if let Message::Assistant { content, .. } = shown[at].1 {
                    for block in content {
                        if let Content::ToolCall { id, .. } = block {
                            fold.announced.insert(id.clone());
                        }
                    }
                }
                let rest = shown.split_off(at + 1);
                // The results of the calls before this one came before the interrupt.
                let earlier =
                    |m: &Message| matches!(m, Message::ToolResult { tool_call_id, .. } if tool_call_id != call);
                shown = rest.into_iter().skip_while(|(_, m, _)| earlier(m)).collect();
            }
        }
        for (index, message, done) in shown {
            match message {
                // A steer the run took: a user message the state shows that is no
                // run's prompt (older ones it cannot tell apart are left out).
                Message::User { .. } if index >= state.first_index && !state.prompt_timings.contains_key(&index) => {
                    fold.close_part(&mut out);
                    user_message(session, index, message, &mut out);
                }
                _ => fold.draw(session, index, message, done, &mut out),
            }
        }
        if let Some(approval) = state.pending_approvals.iter().find(|a| a.run_id == run.id) {
            fold.close_part(&mut out);
            fold.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
            match approval.is_live_ask() {
                // The run goes on; a client joining now is told of the question again.
                true => out.push(input_requested(approval)),
                false => fold.core.waiting = Some(approval.clone()),
            }
        }
        if run.status.is_terminal() {
            fold.finish(run.status, run.error.clone(), &mut out);
        }
        (fold, out)
    }

    pub fn run_id(&self) -> &RunId {
        &self.core.run_id
    }

    /// The `CUSTOM` `spool.presence` event of a `session.presence` frame: only while
    /// the fold sends the run's events (started, not muted up to a request the client
    /// has, not ended), as the AI SDK's stream carries it only inside the run's message.
    pub fn presence(&self, frame: &Frame) -> Option<AgUiEvent> {
        let FrameBody::Presence { presence } = &frame.body else { return None };
        let sending = self.core.started && self.core.muted.is_none() && self.ended.is_none();
        let value = serde_json::to_value(presence).expect("presence is plain data and always serializes");
        sending.then(|| AgUiEvent::Custom { name: events::PRESENCE.to_owned(), value })
    }

    /// The approval the run waits for, when it does.
    pub fn waiting(&self) -> Option<&Approval> {
        self.core.waiting.as_ref()
    }

    /// How the run ended, once it has.
    pub fn ended(&self) -> Option<RunStatus> {
        self.ended
    }

    /// The stream's last event, once the run ended or waits for a person.
    pub fn close(&self) -> Option<Close> {
        Some(match (self.ended, &self.core.waiting) {
            (Some(RunStatus::Completed), _) => Close::Completed,
            (Some(RunStatus::Cancelled), _) => Close::Cancelled,
            (Some(_), _) => Close::Failed(self.error.clone()),
            (None, Some(approval)) => Close::parked(approval.clone()),
            (None, None) => return None,
        })
    }

    fn map_loop_event(&mut self, session: &SessionId, message_index: u64, event: &AgentEvent) -> Vec<AgUiEvent> {
        let mut out = Vec::new();
        if matches!(
            event,
            AgentEvent::TurnStart {}
                | AgentEvent::MessageStart { message: Message::Assistant { .. } }
                | AgentEvent::MessageEnd { message: Message::Assistant { .. } }
        ) {
            self.in_asked_turn = false;
        }
        match event {
            AgentEvent::MessageUpdate { assistant_message_event } => {
                self.delta(session, message_index, assistant_message_event, &mut out);
            }
            AgentEvent::MessageEnd { message: Message::Assistant { content, .. } } => {
                self.close_part(&mut out);
                let parent = message_id(session, message_index);
                for block in content {
                    if let Content::ToolCall { id, name, arguments } = block {
                        // By id, not place: a streamed call ends here if its own end
                        // did not come.
                        let streamed = self.core.streaming.iter().find(|(_, call)| *call == id).map(|(key, _)| *key);
                        match streamed {
                            Some(key) => {
                                self.core.streaming.remove(&key);
                                out.push(AgUiEvent::ToolCallEnd { tool_call_id: id.clone() });
                            }
                            None => self.whole_call(id, name, arguments, Some(parent.clone()), &mut out),
                        }
                    }
                }
            }
            // A call of the turn the fold continues: its message, sent before the
            // interrupt, announced it (as a fold from the run's start knows).
            AgentEvent::ToolExecutionStart { tool_call_id, .. } if self.in_asked_turn => {
                self.close_part(&mut out);
                self.announced.insert(tool_call_id.clone());
            }
            AgentEvent::ToolExecutionStart { tool_call_id, tool_name, args } => {
                self.close_part(&mut out);
                self.whole_call(tool_call_id, tool_name, args, None, &mut out);
            }
            AgentEvent::ApprovalRequested { approval } if approval.is_live_ask() => {
                // Not a wait of the run: its call is running and asks; the stream goes on.
                self.close_part(&mut out);
                self.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
                out.push(input_requested(approval));
            }
            AgentEvent::ApprovalRequested { approval } => {
                self.close_part(&mut out);
                self.end_calls(&mut out);
                self.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
                self.core.waiting = Some((**approval).clone());
            }
            AgentEvent::ApprovalResolved { approval_id, decision, message, .. } => {
                if self.core.waiting.as_ref().is_some_and(|a| &a.id == approval_id) {
                    self.core.waiting = None;
                }
                if self.announced_decision.as_ref() != Some(approval_id) {
                    let call = self.asked.get(approval_id).map(String::as_str);
                    out.push(resolved_event(approval_id, call, Some(decision), message.as_deref()));
                }
            }
            AgentEvent::ToolExecutionEnd { tool_call_id, result: text, is_error, .. } => {
                self.close_part(&mut out);
                if self.given.as_ref() != Some(tool_call_id) {
                    out.push(result(session, tool_call_id, text.clone(), *is_error));
                }
            }
            AgentEvent::AgentStart {} => self.prompt_pending = true,
            AgentEvent::MessageEnd { message: message @ Message::User { .. } } => {
                // The run's prompt is the client's own: not sent back.
                let prompt = std::mem::take(&mut self.prompt_pending);
                if !prompt {
                    self.close_part(&mut out);
                    user_message(session, message_index, message, &mut out);
                }
            }
            AgentEvent::SessionTitle { title } => {
                out.push(AgUiEvent::StateDelta {
                    delta: vec![json!({"op": "replace", "path": "/title", "value": title})],
                });
            }
            AgentEvent::TodoWrite { todos } => {
                out.push(AgUiEvent::StateDelta {
                    delta: vec![json!({"op": "replace", "path": "/todos", "value": todos})],
                });
            }
            AgentEvent::AgentEnd { status, error, .. } => {
                // An unknown word is read as a failure: the stream must end either way.
                let status = RunStatus::parse(status).unwrap_or(RunStatus::Failed);
                self.finish(status, error.clone(), &mut out);
            }
            _ => {}
        }
        out
    }

    /// Closes what is open and ends the fold.
    fn finish(&mut self, status: RunStatus, error: Option<RunError>, out: &mut Vec<AgUiEvent>) {
        self.close_part(out);
        self.end_calls(out);
        self.core.waiting = None;
        self.ended = Some(status);
        self.error = error;
    }

    /// Ends every call still streaming: the protocol closes a run only with none open.
    fn end_calls(&mut self, out: &mut Vec<AgUiEvent>) {
        for (_, tool_call_id) in std::mem::take(&mut self.core.streaming) {
            out.push(AgUiEvent::ToolCallEnd { tool_call_id });
        }
    }

    fn delta(&mut self, session: &SessionId, index: u64, delta: &StreamDelta, out: &mut Vec<AgUiEvent>) {
        let Some(delta) = self.block_delta(session, index, delta, out) else { return };
        match delta {
            StreamDelta::ToolcallStart { content_index, id, name } => {
                if self.announced.contains(id) {
                    return;
                }
                self.close_part(out);
                self.announced.insert(id.clone());
                self.core.streaming.insert((index, *content_index), id.clone());
                out.push(AgUiEvent::ToolCallStart {
                    tool_call_id: id.clone(),
                    tool_call_name: name.clone(),
                    parent_message_id: Some(message_id(session, index)),
                });
            }
            StreamDelta::ToolcallDelta { content_index, delta, .. } => {
                if let Some(id) = self.core.streaming.get(&(index, *content_index))
                    && !delta.is_empty()
                {
                    out.push(AgUiEvent::ToolCallArgs { tool_call_id: id.clone(), delta: delta.clone() });
                }
            }
            StreamDelta::ToolcallEnd { content_index, .. } => {
                if let Some(tool_call_id) = self.core.streaming.remove(&(index, *content_index)) {
                    out.push(AgUiEvent::ToolCallEnd { tool_call_id });
                }
            }
            _ => {}
        }
    }

    /// A call that was not streamed: its start, its whole input, its end (once).
    fn whole_call(&mut self, id: &str, name: &str, input: &Value, parent: Option<String>, out: &mut Vec<AgUiEvent>) {
        if !self.announced.insert(id.to_owned()) {
            return;
        }
        let tool_call_id = id.to_owned();
        out.push(AgUiEvent::ToolCallStart {
            tool_call_id: tool_call_id.clone(),
            tool_call_name: name.to_owned(),
            parent_message_id: parent,
        });
        out.push(AgUiEvent::ToolCallArgs { tool_call_id: tool_call_id.clone(), delta: input.to_string() });
        out.push(AgUiEvent::ToolCallEnd { tool_call_id });
    }
}

/// A tool call's result.
fn result(session: &SessionId, tool_call_id: &str, content: String, is_error: bool) -> AgUiEvent {
    AgUiEvent::ToolCallResult {
        message_id: format!("{session}:{tool_call_id}:result"),
        tool_call_id: tool_call_id.to_owned(),
        content,
        role: "tool".to_owned(),
        metadata: is_error.then(|| json!({"spool": {"isError": true}})),
    }
}

/// A user message the run took while it ran (a steer), whole, as AG-UI streams a
/// user's text message. A text message's events carry no content parts, so its files
/// ride on `TEXT_MESSAGE_START`'s `metadata` as `{spool: {files}}`: AG-UI 1.0 content
/// parts ([`file_part`]), which `@ag-ui/client` keeps in the message's own `metadata`.
fn user_message(session: &SessionId, index: u64, message: &Message, out: &mut Vec<AgUiEvent>) {
    let message_id = message_id(session, index);
    let files: Vec<Value> = message.attachments().iter().map(file_part).collect();
    let metadata = (!files.is_empty()).then(|| json!({"spool": {"files": files}}));
    out.push(AgUiEvent::TextMessageStart { message_id: message_id.clone(), role: "user".to_owned(), metadata });
    let delta = message.text();
    if !delta.is_empty() {
        out.push(AgUiEvent::TextMessageContent { message_id: message_id.clone(), delta });
    }
    out.push(AgUiEvent::TextMessageEnd { message_id });
}

/// A file of a user message as an AG-UI 1.0 content part: `image` for an image, else
/// `document` (as `@ag-ui/client` upgrades a legacy `binary` part), its attachment id as
/// the part's `id`, a `url` source (`/api/attachments/{id}`, relative to the server,
/// fetched with the owner's credentials) and `metadata.filename` (and `size`, bytes).
fn file_part(file: &spool_protocol::api::AttachmentInfo) -> Value {
    let kind = if file.media_type.starts_with("image/") { "image" } else { "document" };
    json!({
        "type": kind,
        "id": file.id,
        "source": {"type": "url", "value": file.url, "mimeType": file.media_type},
        "metadata": {"filename": file.name, "size": file.size},
    })
}

/// A message's id: the same for the same message of the same session.
fn message_id(session: &SessionId, index: u64) -> String {
    format!("{session}:{index}")
}

impl PartFold for AgUiStream {
    type Event = AgUiEvent;
    type Waiting = Approval;

    fn core(&mut self) -> &mut Core<Approval> {
        &mut self.core
    }

    /// A text block is its message ([`message_id`]: AG-UI streams one text per message);
    /// a reasoning block a message of its own, `ses_…:5:thinking:0`.
    fn part_id(session: &SessionId, block: Block, index: u64, content: usize) -> String {
        match block {
            Block::Text => message_id(session, index),
            Block::Reasoning => format!("{session}:{index}:thinking:{content}"),
        }
    }

    fn start_part(&mut self, part: &Part, out: &mut Vec<AgUiEvent>) {
        let message_id = part.id.clone();
        match part.block {
            Block::Text => {
                out.push(AgUiEvent::TextMessageStart { message_id, role: "assistant".to_owned(), metadata: None })
            }
            Block::Reasoning => {
                out.push(AgUiEvent::ReasoningStart { message_id: message_id.clone() });
                out.push(AgUiEvent::ReasoningMessageStart { message_id, role: "reasoning".to_owned() });
            }
        }
    }

    /// None for empty text: AG-UI refuses a content event without content.
    fn part_content(part: &Part, delta: String, out: &mut Vec<AgUiEvent>) {
        if delta.is_empty() {
            return;
        }
        let message_id = part.id.clone();
        out.push(match part.block {
            Block::Text => AgUiEvent::TextMessageContent { message_id, delta },
            Block::Reasoning => AgUiEvent::ReasoningMessageContent { message_id, delta },
        });
    }

    fn end_part(Part { block, id: message_id }: Part, out: &mut Vec<AgUiEvent>) {
        match block {
            Block::Text => out.push(AgUiEvent::TextMessageEnd { message_id }),
            Block::Reasoning => {
                out.push(AgUiEvent::ReasoningMessageEnd { message_id: message_id.clone() });
                out.push(AgUiEvent::ReasoningEnd { message_id });
            }
        }
    }

    /// A call drawn from a snapshot: as a call that was not streamed.
    fn draw_call(&mut self, DrawnCall { session, index, id, name, input }: DrawnCall<'_>, out: &mut Vec<AgUiEvent>) {
        self.close_part(out);
        self.whole_call(id, name, input, Some(message_id(session, index)), out);
    }

    fn draw_result(&mut self, drawn: DrawnResult<'_>, out: &mut Vec<AgUiEvent>) {
        if self.given.as_deref() != Some(drawn.tool_call_id) {
            out.push(result(drawn.session, drawn.tool_call_id, drawn.text, drawn.is_error));
        }
    }

    fn map_frame(&mut self, frame: &Frame) -> Vec<AgUiEvent> {
        if self.ended.is_some() {
            return Vec::new();
        }
        match self.core.read(frame) {
            Some(RunFrame::Event(index, event)) => self.map_loop_event(&frame.session_id, index, event),
            // The run's start shows as the transport's `RUN_STARTED` ([`opening`]).
            Some(RunFrame::Accepted) | None => Vec::new(),
        }
    }
}

impl FormMapper for AgUiStream {
    type Out = Step;

    fn map(&mut self, frame: &Frame) -> Step {
        let events = self.push(frame);
        let presence = self.presence(frame).map(|event| event.to_sse());
        let waiting = self.core.waiting.clone();
        Step { bytes: encode(&events), presence, waiting, ended: self.ended, error: self.error.clone() }
    }
}

/// Which shared form a stream follows (the same for every run-following dialect).
pub type AgUiForm = super::shared::RunForm;

#[cfg(test)]
mod tests;
