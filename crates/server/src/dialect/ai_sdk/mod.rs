//! The Vercel AI SDK's UI message stream (`ai` package, major 7), mapped from the native
//! session frames of one run: what `DefaultChatTransport` reads from
//! `POST /api/ai-sdk/chat` and from `GET /api/ai-sdk/chat/:id/stream`.
//!
//! One run is one assistant message of the chat, named by the run id (`start
//! {messageId}`); one model turn is one step. The chunk shapes are those of the package's
//! `UIMessageChunk` type (`node_modules/ai/dist/index.d.ts`); the transport writes each
//! as `data: <json>` and ends the body with `data: [DONE]`.
//!
//! | native frame                                   | UI message chunks |
//! |------------------------------------------------|-------------------|
//! | `run.accepted` of this run                      | `start {messageId}` |
//! | `turn_start` / `turn_end`                       | `start-step` / `finish-step` |
//! | `text_delta` (`thinking_delta`)                 | `text-start` once, then `text-delta` (`reasoning-*`) |
//! | `text_end` (`thinking_end`), or another part starting | `text-end` (`reasoning-end`) |
//! | `toolcall_start` / `toolcall_delta`             | `tool-input-start` / `tool-input-delta` |
//! | `message_end` of an assistant message, `tool_execution_start` | `tool-input-available` (once per call; a `question` call's when it is asked) |
//! | `approval_requested`                            | `tool-approval-request {approvalId, toolCallId, approvalDescriptor}` |
//! | `approval_requested` of a question              | `tool-input-available` of the `question` call, `providerMetadata.spool.approvalId` |
//! | `approval_resolved` rejected or expired         | `tool-output-denied` (its `tool_execution_end` then maps to nothing) |
//! | `tool_execution_end`                            | `tool-output-available {output}` or `tool-output-error {errorText}` |
//! | `agent_end` completed                           | `finish {finishReason: "stop"}` |
//! | `agent_end` cancelled                           | `abort` |
//! | `agent_end` failed                              | `error {errorText}` from the stored run ([`Step::failed`]) |
//!
//! Tools are Spool's, not the client's, so tool parts are `dynamic` (`dynamic-tool` parts
//! with a `toolName`, as the AI SDK shows tools it has no types for) and
//! `providerExecuted`: the client neither runs them nor is asked to (`onToolCall`).
//! The one exception is the `question` tool, whose answer only the person can give: its
//! call is a tool call the client answers, as the AI SDK does for tools without an
//! `execute` — `providerExecuted: false`, announced when Spool asks (the approval's id
//! rides in `providerMetadata`, so the part the client sends back names it), and
//! answered with `addToolOutput` (`routes.rs` turns the output into the approval's
//! `fill`). A question's `tool-input-available` is therefore held back from the
//! assistant message's end to its `approval_requested`, or to its result when it was
//! never asked (a rule denied it). Part ids derive from
//! the message index and content index, so a replay of the same frames names the same
//! parts: a client that reloads and resumes replaces its message with an identical one.
//!
//! A run parked at an approval: the transport ends the stream after the
//! `tool-approval-request` once it has caught up with the live frames, closing it with
//! `finish-step` and `finish {finishReason: "tool-calls"}` ([`parked_end`]); the client's
//! next request carries the decision, and the answer continues the same message from
//! the frame after the interrupt ([`AiSdkStream::continuing`]).
//!
//! The fold is a [`FormMapper`]: its state after a frame depends only on the run's
//! frames and where it started, so every stream of a run started the same way shares one
//! mapping and its bytes (`dialect/shared.rs`).

pub(crate) mod routes;

use super::run_fold::{Drawn, Muted};
use crate::dialect::shared::FormMapper;
use crate::dialect::{QUESTION_TOOL, asks_for_input};
use bytes::{Bytes, BytesMut};
use serde::Serialize;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{
    AgentEvent, Approval, ApprovalId, Content, IndexedMessage, Message, Run, RunError, RunId, RunStatus, StreamDelta,
    sse,
};
use std::collections::{BTreeMap, BTreeSet};

/// One chunk of the UI message stream. The serde names are the wire `type`s.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UiChunk {
    /// A new assistant message: the run.
    #[serde(rename_all = "camelCase")]
    Start {
        message_id: String,
    },
    /// One model turn begins.
    StartStep,
    FinishStep,
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    ReasoningStart {
        id: String,
    },
    ReasoningDelta {
        id: String,
        delta: String,
    },
    ReasoningEnd {
        id: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        tool_call_id: String,
        tool_name: String,
        dynamic: bool,
        /// Spool runs the call: every tool's but a question's.
        provider_executed: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputDelta {
        tool_call_id: String,
        input_text_delta: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputAvailable {
        tool_call_id: String,
        tool_name: String,
        input: serde_json::Value,
        dynamic: bool,
        provider_executed: bool,
        /// A question's `{spool: {approvalId}}`: the approval its answer decides.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        provider_metadata: Option<serde_json::Value>,
    },
    /// The call waits for a person. `approvalId` is the `per_…` approval; the
    /// descriptor is its redacted card (tool, argument summary, preview).
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        approval_id: ApprovalId,
        tool_call_id: String,
        approval_descriptor: serde_json::Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputAvailable {
        tool_call_id: String,
        output: serde_json::Value,
        dynamic: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputError {
        tool_call_id: String,
        error_text: String,
        dynamic: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        tool_call_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Finish {
        finish_reason: FinishReason,
    },
    #[serde(rename_all = "camelCase")]
    Error {
        error_text: String,
    },
    Abort {
        reason: String,
    },
}

/// The AI SDK's `FinishReason` values Spool sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Stop,
    /// The message stops at a tool call waiting for approval.
    ToolCalls,
}

impl UiChunk {
    /// `data: <json>` and a blank line.
    pub fn to_sse(&self) -> Bytes {
        let json = serde_json::to_string(self).expect("chunks are plain data and always serialize");
        sse::encode(None, None, &json)
    }

    /// The `error` chunk of a run that settled failed, with the error its `agent_end`
    /// carries (or a run drawn from a snapshot: its record's).
    pub fn failed(error: Option<&RunError>) -> Self {
        let error_text = error.map_or_else(|| "the run failed".to_owned(), |e| e.message.clone());
        Self::Error { error_text }
    }

    /// The `abort` chunk of a cancelled run.
    fn cancelled(status: RunStatus) -> Self {
        Self::Abort { reason: format!("the run was {}", status.as_str()) }
    }
}

/// The last line of every UI message stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// What closes a stream that stops at an approval: the step and the message end here; the
/// client's answer continues them.
pub fn parked_end() -> Bytes {
    encode(&[UiChunk::FinishStep, UiChunk::Finish { finish_reason: FinishReason::ToolCalls }])
}

/// What opens the continuation after a decision: the same message, the same step, and
/// for a rejected call its denial.
pub fn continuation_start(approval: &Approval, denied: bool) -> Bytes {
    let mut chunks = vec![UiChunk::Start { message_id: approval.run_id.to_string() }, UiChunk::StartStep];
    if denied {
        chunks.push(UiChunk::ToolOutputDenied { tool_call_id: approval.tool_call_id.clone() });
    }
    encode(&chunks)
}

fn encode(chunks: &[UiChunk]) -> Bytes {
    let mut out = BytesMut::new();
    for chunk in chunks {
        out.extend_from_slice(&chunk.to_sse());
    }
    out.freeze()
}

/// What one native frame gives every stream of the run: its chunks, encoded once, and
/// where the run stands after it.
#[derive(Debug, Default)]
pub struct Step {
    pub bytes: Bytes,
    /// After this frame the run waits for a person.
    pub waiting: bool,
    /// After this frame nothing more follows.
    pub finished: bool,
}

/// The part being streamed: a text or reasoning block of one message.
#[derive(Clone, Debug, PartialEq)]
enum Open {
    Text(String),
    Reasoning(String),
}

/// The fold over one run's frames. Pure: no clock, no I/O.
#[derive(Clone, Debug)]
pub struct AiSdkStream {
    run_id: RunId,
    /// `run.accepted` was seen (or the fold continues a message begun elsewhere).
    started: bool,
    step_open: bool,
    open: Option<Open>,
    /// Streaming tool calls by `(message index, content index)`.
    streaming: BTreeMap<(u64, usize), String>,
    /// Calls whose `tool-input-available` was sent.
    available: BTreeSet<String>,
    /// Question calls not asked yet, with their input: sent when asked ([`Self::ask`]).
    held: BTreeMap<String, serde_json::Value>,
    /// Tool calls of the approvals asked (questions aside), by approval.
    asked: BTreeMap<ApprovalId, String>,
    /// Calls a person denied: their `tool_execution_end` is no output.
    denied: BTreeSet<String>,
    waiting: Option<ApprovalId>,
    finished: bool,
    /// Output held back until an approval's request has passed.
    muted: Option<Muted<ApprovalId>>,
    /// What a snapshot already sent: live deltas send only what lies beyond.
    drawn: Drawn,
}

impl AiSdkStream {
    /// A fold that starts at the run's `run.accepted` and ignores everything before it.
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            started: false,
            step_open: false,
            open: None,
            streaming: BTreeMap::new(),
            available: BTreeSet::new(),
            held: BTreeMap::new(),
            asked: BTreeMap::new(),
            denied: BTreeSet::new(),
            waiting: None,
            finished: false,
            muted: None,
            drawn: Drawn::default(),
        }
    }

    /// A fold from the run's start that sends nothing up to and including `approval`'s
    /// request: the continuation after it, when the replay has to start at the run's
    /// start (the transport writes [`continuation_start`] first).
    /// `waiting` is what the engine says the run waits for as the subscription starts,
    /// which the fold takes over when it unmutes (a decision taken before the
    /// subscription need not have its frame in the ring yet).
    /// `denied` as for [`continuing`](Self::continuing).
    pub fn muted_until(approval: &Approval, waiting: Option<ApprovalId>, denied: bool) -> Self {
        let mut fold = Self::new(approval.run_id.clone());
        fold.muted = Some(Muted { until: approval.id.clone(), waiting });
        if denied {
            fold.denied.insert(approval.tool_call_id.clone());
        }
        fold
    }

    /// A fold that starts at a session snapshot instead of the run's frames (they have
    /// left the buffer): the chunks that draw the run as the snapshot shows it — its
    /// messages after the prompt (`messages`, the state's own when they reach back that
    /// far), the message being streamed, a pending approval, and the end of a settled
    /// run — and a fold that goes on from there with the live frames. The whole run is
    /// one step here: the snapshot does not say where turns began.
    pub fn from_snapshot(run: &Run, state: &SessionState, messages: &[IndexedMessage]) -> (Self, Vec<UiChunk>) {
        let mut fold = Self::new(run.id.clone());
        fold.started = true;
        let mut out = vec![UiChunk::Start { message_id: run.id.to_string() }];
        fold.open_step(&mut out);
        let committed =
            messages.iter().filter(|m| m.index > run.user_message_index).map(|m| (m.index, &m.message, true));
        let drafts = state.drafts.iter().filter(|(i, _)| **i > run.user_message_index).map(|(i, m)| (*i, m, false));
        for (index, message, done) in committed.chain(drafts) {
            fold.draw(index, message, done, &mut out);
        }
        for approval in state.pending_approvals.iter().filter(|a| a.run_id == run.id) {
            fold.ask(approval, &mut out);
        }
        if run.status.is_terminal() {
            fold.release_all(&mut out);
            fold.close_step(&mut out);
            fold.finished = true;
            fold.waiting = None;
            out.push(match run.status {
                RunStatus::Completed => UiChunk::Finish { finish_reason: FinishReason::Stop },
                RunStatus::Cancelled => UiChunk::cancelled(run.status),
                _ => UiChunk::failed(run.error.as_ref()),
            });
        }
        (fold, out)
    }

    /// The chunks of one message a snapshot holds; a draft's blocks are noted as sent
    /// so far, and its last text block stays open for the deltas that follow.
    fn draw(&mut self, index: u64, message: &Message, done: bool, out: &mut Vec<UiChunk>) {
        match message {
            Message::Assistant { content, .. } => {
                for (ci, block) in content.iter().enumerate() {
                    match block {
                        Content::Text { text } | Content::Thinking { thinking: text } => {
                            let open = match block {
                                Content::Text { .. } => Open::Text(part_id("txt", index, ci)),
                                _ => Open::Reasoning(part_id("rsn", index, ci)),
                            };
                            let id = match &open {
                                Open::Text(id) | Open::Reasoning(id) => id.clone(),
                            };
                            let text_block = matches!(open, Open::Text(_));
                            self.open_part(open, out);
                            if !text.is_empty() {
                                out.push(match text_block {
                                    true => UiChunk::TextDelta { id, delta: text.clone() },
                                    false => UiChunk::ReasoningDelta { id, delta: text.clone() },
                                });
                            }
                            self.drawn.record((index, ci), text);
                        }
                        Content::ToolCall { id, name, arguments } => self.input_available(id, name, arguments, out),
                    }
                }
                if done {
                    self.close_part(out);
                }
            }
            Message::ToolResult { tool_call_id, content, is_error, .. } => {
                self.close_part(out);
                self.release(tool_call_id, out);
                let text: String = content
                    .iter()
                    .filter_map(|c| match c {
                        Content::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                let tool_call_id = tool_call_id.clone();
                out.push(match is_error {
                    true => UiChunk::ToolOutputError { tool_call_id, error_text: text, dynamic: true },
                    false => UiChunk::ToolOutputAvailable { tool_call_id, output: text.into(), dynamic: true },
                });
            }
            Message::User { .. } => {}
        }
    }

    /// A fold that goes on right after `approval`'s `approval_requested` frame: the
    /// message and step the stream that stopped there opened (the transport writes
    /// [`continuation_start`] first) and the call, whose input the client has. `waiting`:
    /// the run still waits for a person as the subscription starts (the engine says).
    /// `denied`: the decision taken rejected the call; the transport opens with its
    /// `tool-output-denied` ([`continuation_start`]), as the `approval_resolved` frame
    /// may precede the subscription.
    pub fn continuing(approval: &Approval, waiting: Option<ApprovalId>, denied: bool) -> Self {
        let mut fold = Self::new(approval.run_id.clone());
        fold.started = true;
        fold.step_open = true;
        fold.available.insert(approval.tool_call_id.clone());
        if !asks_for_input(approval) {
            fold.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
        }
        fold.waiting = waiting;
        if denied {
            fold.denied.insert(approval.tool_call_id.clone());
        }
        fold
    }

    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    pub fn waiting(&self) -> bool {
        self.waiting.is_some()
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Maps one native frame of the run's session to its chunks.
    pub fn push(&mut self, frame: &Frame) -> Vec<UiChunk> {
        let Some(muted) = &self.muted else { return self.map_frame(frame) };
        let ends = muted.ends_at(frame);
        let _ = self.map_frame(frame);
        if ends {
            self.waiting = self.muted.take().and_then(|muted| muted.waiting);
        }
        Vec::new()
    }

    fn map_frame(&mut self, frame: &Frame) -> Vec<UiChunk> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let (message_index, event) = match &frame.body {
            FrameBody::RunAccepted { run_id, .. } if *run_id == self.run_id && !self.started => {
                self.started = true;
                out.push(UiChunk::Start { message_id: self.run_id.to_string() });
                return out;
            }
            FrameBody::LoopEvent { run_id, message_index, event, .. } if *run_id == self.run_id && self.started => {
                (message_index.unwrap_or(0), event)
            }
            _ => return out,
        };
        match event {
            AgentEvent::TurnStart {} => {
                self.open_step(&mut out);
            }
            AgentEvent::MessageUpdate { assistant_message_event } => {
                self.delta(message_index, assistant_message_event, &mut out);
            }
            AgentEvent::MessageEnd { message: Message::Assistant { content, .. } } => {
                self.close_part(&mut out);
                for block in content {
                    if let Content::ToolCall { id, name, arguments } = block {
                        self.input_available(id, name, arguments, &mut out);
                    }
                }
            }
            AgentEvent::ToolExecutionStart { tool_call_id, tool_name, args } => {
                self.input_available(tool_call_id, tool_name, args, &mut out);
            }
            AgentEvent::ApprovalRequested { approval } => {
                self.ask(approval, &mut out);
            }
            AgentEvent::ApprovalResolved { approval_id, decision, .. } => {
                if self.waiting.as_ref() == Some(approval_id) {
                    self.waiting = None;
                }
                // `reject` and `expired` never run the tool; `superseded` asks again.
                if matches!(decision.as_str(), "reject" | "expired")
                    && let Some(call) = self.asked.get(approval_id)
                    && self.denied.insert(call.clone())
                {
                    out.push(UiChunk::ToolOutputDenied { tool_call_id: call.clone() });
                }
            }
            AgentEvent::ToolExecutionEnd { tool_call_id, result, is_error, .. } => {
                self.release(tool_call_id, &mut out);
                if !self.denied.contains(tool_call_id) {
                    let tool_call_id = tool_call_id.clone();
                    out.push(match is_error {
                        true => UiChunk::ToolOutputError { tool_call_id, error_text: result.clone(), dynamic: true },
                        false => UiChunk::ToolOutputAvailable {
                            tool_call_id,
                            output: serde_json::Value::String(result.clone()),
                            dynamic: true,
                        },
                    });
                }
            }
            AgentEvent::TurnEnd {} => {
                self.close_step(&mut out);
            }
            AgentEvent::AgentEnd { status, error, .. } => {
                self.release_all(&mut out);
                self.close_step(&mut out);
                self.finished = true;
                self.waiting = None;
                out.push(match RunStatus::parse(status) {
                    Some(RunStatus::Completed) => UiChunk::Finish { finish_reason: FinishReason::Stop },
                    Some(status @ RunStatus::Cancelled) => UiChunk::cancelled(status),
                    _ => UiChunk::failed(error.as_ref()),
                });
            }
            _ => {}
        }
        out
    }

    fn open_step(&mut self, out: &mut Vec<UiChunk>) {
        if !self.step_open {
            self.step_open = true;
            out.push(UiChunk::StartStep);
        }
    }

    fn close_step(&mut self, out: &mut Vec<UiChunk>) {
        self.close_part(out);
        if self.step_open {
            self.step_open = false;
            out.push(UiChunk::FinishStep);
        }
    }

    fn close_part(&mut self, out: &mut Vec<UiChunk>) {
        match self.open.take() {
            Some(Open::Text(id)) => out.push(UiChunk::TextEnd { id }),
            Some(Open::Reasoning(id)) => out.push(UiChunk::ReasoningEnd { id }),
            None => {}
        }
    }

    /// Opens `want` unless it is the part being streamed (closing that one first).
    fn open_part(&mut self, want: Open, out: &mut Vec<UiChunk>) {
        if self.open.as_ref() == Some(&want) {
            return;
        }
        self.close_part(out);
        self.open_step(out);
        out.push(match &want {
            Open::Text(id) => UiChunk::TextStart { id: id.clone() },
            Open::Reasoning(id) => UiChunk::ReasoningStart { id: id.clone() },
        });
        self.open = Some(want);
    }

    fn delta(&mut self, index: u64, delta: &StreamDelta, out: &mut Vec<UiChunk>) {
        match delta {
            StreamDelta::TextDelta { content_index, offset, delta } => {
                let Some(delta) = self.drawn.unsent((index, *content_index), *offset, delta) else { return };
                let id = part_id("txt", index, *content_index);
                self.open_part(Open::Text(id.clone()), out);
                out.push(UiChunk::TextDelta { id, delta });
            }
            StreamDelta::ThinkingDelta { content_index, offset, delta } => {
                let Some(delta) = self.drawn.unsent((index, *content_index), *offset, delta) else { return };
                let id = part_id("rsn", index, *content_index);
                self.open_part(Open::Reasoning(id.clone()), out);
                out.push(UiChunk::ReasoningDelta { id, delta });
            }
            StreamDelta::TextEnd { content_index } | StreamDelta::ThinkingEnd { content_index } => {
                let ids = [part_id("txt", index, *content_index), part_id("rsn", index, *content_index)];
                if matches!(&self.open, Some(Open::Text(id) | Open::Reasoning(id)) if ids.contains(id)) {
                    self.close_part(out);
                }
            }
            StreamDelta::ToolcallStart { content_index, id, name } => {
                if self.available.contains(id) {
                    return;
                }
                self.close_part(out);
                self.open_step(out);
                self.streaming.insert((index, *content_index), id.clone());
                out.push(UiChunk::ToolInputStart {
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                    dynamic: true,
                    provider_executed: name != QUESTION_TOOL,
                });
            }
            StreamDelta::ToolcallDelta { content_index, delta, .. } => {
                if let Some(id) = self.streaming.get(&(index, *content_index)) {
                    out.push(UiChunk::ToolInputDelta { tool_call_id: id.clone(), input_text_delta: delta.clone() });
                }
            }
            StreamDelta::TextStart { .. }
            | StreamDelta::ThinkingStart { .. }
            | StreamDelta::ToolcallEnd { .. }
            | StreamDelta::Done { .. } => {}
        }
    }

    /// A call's input is complete: sent now, or for a question when it is asked.
    fn input_available(&mut self, id: &str, name: &str, input: &serde_json::Value, out: &mut Vec<UiChunk>) {
        if self.available.contains(id) {
            return;
        }
        match name {
            QUESTION_TOOL => {
                self.held.insert(id.to_owned(), input.clone());
            }
            _ => self.send_input(id, name, input.clone(), None, out),
        }
    }

    /// Sends a call's `tool-input-available`; with `approval`, as the question the client
    /// answers.
    fn send_input(
        &mut self,
        id: &str,
        name: &str,
        input: serde_json::Value,
        approval: Option<&ApprovalId>,
        out: &mut Vec<UiChunk>,
    ) {
        if !self.available.insert(id.to_owned()) {
            return;
        }
        self.held.remove(id);
        self.close_part(out);
        self.open_step(out);
        out.push(UiChunk::ToolInputAvailable {
            tool_call_id: id.to_owned(),
            tool_name: name.to_owned(),
            input,
            dynamic: true,
            provider_executed: approval.is_none(),
            provider_metadata: approval.map(|id| serde_json::json!({"spool": {"approvalId": id}})),
        });
    }

    /// The run waits for a person: a question is its call, for the client to answer;
    /// any other approval a `tool-approval-request`.
    fn ask(&mut self, approval: &Approval, out: &mut Vec<UiChunk>) {
        self.waiting = Some(approval.id.clone());
        if asks_for_input(approval) {
            let call = &approval.tool_call_id;
            // The arguments as the call was made; the card's question and options when
            // the fold never saw the call (a continuation from elsewhere).
            let input = self.held.remove(call).unwrap_or_else(|| {
                serde_json::json!({"question": approval.payload["question"], "options": approval.payload["options"]})
            });
            self.send_input(call, &approval.tool, input, Some(&approval.id), out);
            return;
        }
        self.close_part(out);
        self.open_step(out);
        self.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
        out.push(UiChunk::ToolApprovalRequest {
            approval_id: approval.id.clone(),
            tool_call_id: approval.tool_call_id.clone(),
            approval_descriptor: approval.payload.clone(),
        });
    }

    /// A held question call that ended without being asked (a rule denied it, the run
    /// ended): sent as a call Spool settled, before its end.
    fn release(&mut self, id: &str, out: &mut Vec<UiChunk>) {
        if let Some(input) = self.held.remove(id) {
            self.send_input(id, QUESTION_TOOL, input, None, out);
        }
    }

    fn release_all(&mut self, out: &mut Vec<UiChunk>) {
        let held: Vec<String> = self.held.keys().cloned().collect();
        for id in held {
            self.release(&id, out);
        }
    }
}

/// A text or reasoning part's id: the same for the same block of the same message.
fn part_id(kind: &str, index: u64, content: usize) -> String {
    format!("{kind}_{index}_{content}")
}

impl FormMapper for AiSdkStream {
    type Out = Step;

    fn map(&mut self, frame: &Frame) -> Step {
        let chunks = self.push(frame);
        Step { bytes: encode(&chunks), waiting: self.waiting(), finished: self.finished }
    }
}

/// Which shared form a stream follows (the same for every run-following dialect).
pub type AiSdkForm = super::shared::RunForm;

#[cfg(test)]
mod tests;
