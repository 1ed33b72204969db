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
//! | `tool_execution_start`, or the call's end unrun  | `tool-input-available` (once per call, from the input `message_end` completed) |
//! | `approval_requested`                            | the call's `tool-input-available`, then `tool-approval-request {approvalId, toolCallId, approvalDescriptor}` |
//! | `approval_requested` of a question or a client tool's call | `tool-input-available` of the call, `providerExecuted: false`, `providerMetadata.spool.approvalId` |
//! | `approval_resolved` rejected or expired         | `tool-output-denied` (its `tool_execution_end` then maps to nothing) |
//! | `tool_execution_end`                            | `tool-output-available {output}` or `tool-output-error {errorText}` |
//! | `message_end` of a user message the run took (a steer; not its prompt) | `data-spool-steer {messageId, text, files?}` (`files`: `FileUIPart`s) |
//! | `session.presence` (while the run streams) | `data-spool-presence` (transient: `onData` gets it, the message does not) |
//! | `agent_end` completed                           | `finish {finishReason: "stop"}` |
//! | `agent_end` cancelled                           | `abort` |
//! | `agent_end` failed                              | `error {errorText}` from the stored run ([`Step::failed`]) |
//!
//! Tool parts are `dynamic` (`dynamic-tool` parts with a `toolName`, as the AI SDK shows
//! tools it has no types for). Spool's own tools are `providerExecuted`: the client
//! neither runs them nor is asked to (`onToolCall`). Two kinds of call are the client's
//! to answer, as the AI SDK does for tools without an `execute`: the `question` tool's
//! (only the person can answer it) and a call of a tool the client declared with the
//! prompt (the request's `tools`, run by the client: the engine parks the run at an
//! approval marked `client`). Their `tool-input-available` is `providerExecuted: false`
//! and announced when Spool asks (the approval's id rides in `providerMetadata`, so the
//! part the client sends back names it); the client answers with `addToolOutput`
//! (`routes.rs` turns a question's output into the approval's `fill`, a client tool's
//! output or `output-error` into its `output` decision). Which calls those are is known
//! only once the run asks, so every call's `tool-input-available` is held back from the
//! assistant message's end until what becomes of the call is known: Spool starts it,
//! asks a person or the client about it, or it ends unrun (a rule denied it); the step's
//! end sends any still held. A call a person approves first (an `ask` rule on a client
//! tool) goes out as Spool's with its approval request and again as the client's when
//! the client is asked: the part takes the second. A call's `tool-input-start`, sent
//! while its input streams, says `providerExecuted: true` for all but a question (the
//! client's `tool-input-available` overrides it). Part ids derive from
//! the message index and content index, so a replay of the same frames names the same
//! parts: a client that reloads and resumes replaces its message with an identical one.
//!
//! A run parked at an approval (or a question, or a client call): the transport ends the
//! stream after the `tool-approval-request` (or the call's `tool-input-available`) once
//! it has caught up with the live frames, closing it with `finish-step` and
//! `finish {finishReason: "tool-calls"}` ([`parked_end`]); the client's next request
//! carries the decision or the output, and the answer continues the same message from
//! the frame after the interrupt ([`AiSdkStream::continuing`]): for an answered call,
//! its `tool-output-available {output}` (the result as the model reads it: text) or
//! `tool-output-error`, then the rest of the run.
//!
//! The fold is a [`FormMapper`]: its state after a frame depends only on the run's
//! frames and where it started, so every stream of a run started the same way shares one
//! mapping and its bytes (`dialect/shared.rs`).

pub(crate) mod routes;

use super::run_fold::{
    self, Block, Core, DrawnCall, DrawnResult, Muted, Part, PartFold, RunFrame, data_events as encode,
};
use crate::dialect::shared::FormMapper;
use crate::dialect::{QUESTION_TOOL, asks_for_input};
use bytes::Bytes;
use serde::Serialize;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{
    AgentEvent, Approval, ApprovalId, Content, IndexedMessage, Message, MessageId, Run, RunError, RunId, RunStatus,
    SessionId, StreamDelta,
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
    /// A running call's server asks the person for input (a live ask): a data part
    /// (`data-spool-input-requested`), answered through Spool's decision route.
    #[serde(rename = "data-spool-input-requested")]
    InputRequested {
        id: ApprovalId,
        #[schema(value_type = Object)]
        data: serde_json::Value,
    },
    /// A user message the run took while it ran (a steer, `POST
    /// /api/sessions/:id/steer`; never the run's prompt, which the client sent): a data
    /// part (`data-spool-steer`), `{messageId, text, files?}`, `messageId` the stored
    /// message's, `files` its files as `FileUIPart`s (absent when it has none).
    /// The UI message stream has no user-message chunks.
    #[serde(rename = "data-spool-steer")]
    Steer {
        id: String,
        #[schema(value_type = Object)]
        data: serde_json::Value,
    },
    /// Who is on the session changed while the run streams (`session.presence`): a
    /// transient data part (`data-spool-presence`, the counts), which `useChat` hands to
    /// `onData` and keeps out of the message.
    #[serde(rename = "data-spool-presence")]
    Presence {
        data: spool_protocol::Presence,
        transient: bool,
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
        run_fold::data_event(self)
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

/// The call id of a guardrail's approval starts so (see `spool_engine`'s `run/guard.rs`).
const GUARD_CALL_PREFIX: &str = "guard_";

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

/// The fold over one run's frames. Pure: no clock, no I/O. What the run waits for is
/// the approval's id.
#[derive(Clone, Debug)]
pub struct AiSdkStream {
    core: Core<ApprovalId>,
    step_open: bool,
    /// Calls whose `tool-input-available` was sent, and whether as a call the client
    /// answers (a question's or a client tool's).
    available: BTreeMap<String, bool>,
    /// Calls whose input is complete but not sent yet, with their name and input: sent
    /// when what becomes of them is known ([`Self::input_available`]).
    held: BTreeMap<String, (String, serde_json::Value)>,
    /// Tool calls of the approvals asked (questions aside), by approval.
    asked: BTreeMap<ApprovalId, String>,
    /// Calls a person denied: their `tool_execution_end` is no output.
    denied: BTreeSet<String>,
    finished: bool,
    /// `agent_start` was seen and the prompt's `message_end` not yet: the client sent
    /// the prompt, so it is not sent back; later user messages are steers, and are.
    prompt_pending: bool,
}

impl AiSdkStream {
    /// A fold that starts at the run's `run.accepted` and ignores everything before it.
    pub fn new(run_id: RunId) -> Self {
        Self {
            core: Core::new(run_id),
            step_open: false,
            available: BTreeMap::new(),
            held: BTreeMap::new(),
            asked: BTreeMap::new(),
            denied: BTreeSet::new(),
            finished: false,
            prompt_pending: false,
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
        fold.core.muted = Some(Muted { until: approval.id.clone(), waiting });
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
        fold.core.started = true;
        let mut out = vec![UiChunk::Start { message_id: run.id.to_string() }];
        fold.open_step(&mut out);
        for (index, message, done) in run_fold::shown(run, state, messages) {
            match message {
                // A steer the run took: a user message the state shows that is no
                // run's prompt (older ones it cannot tell apart are left out).
                Message::User { .. } if index >= state.first_index && !state.prompt_timings.contains_key(&index) => {
                    let id = messages.iter().find(|m| m.index == index).map(|m| &m.id);
                    fold.close_part(&mut out);
                    out.push(steer(index, id, message));
                }
                _ => fold.draw(&state.session.id, index, message, done, &mut out),
            }
        }
        for approval in state.pending_approvals.iter().filter(|a| a.run_id == run.id) {
            fold.ask(approval, &mut out);
        }
        // Calls without a result that wait for nobody run now or are next: shown as
        // Spool's (one the client is asked for after all is sent again as the client's).
        // A question not asked yet stays held, as in a live stream.
        let going: Vec<String> =
            fold.held.iter().filter(|(_, (name, _))| name != QUESTION_TOOL).map(|(id, _)| id.clone()).collect();
        for id in going {
            fold.release(&id, &mut out);
        }
        if run.status.is_terminal() {
            fold.release_all(&mut out);
            fold.close_step(&mut out);
            fold.finished = true;
            fold.core.waiting = None;
            out.push(match run.status {
                RunStatus::Completed => UiChunk::Finish { finish_reason: FinishReason::Stop },
                RunStatus::Cancelled => UiChunk::cancelled(run.status),
                _ => UiChunk::failed(run.error.as_ref()),
            });
        }
        (fold, out)
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
        fold.core.started = true;
        fold.step_open = true;
        fold.available.insert(approval.tool_call_id.clone(), asks_for_input(approval));
        if !asks_for_input(approval) {
            fold.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
        }
        fold.core.waiting = waiting;
        if denied {
            fold.denied.insert(approval.tool_call_id.clone());
        }
        fold
    }

    pub fn run_id(&self) -> &RunId {
        &self.core.run_id
    }

    pub fn waiting(&self) -> bool {
        self.core.waiting.is_some()
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    fn map_loop_event(
        &mut self,
        session: &SessionId,
        message_index: u64,
        message_id: Option<&MessageId>,
        event: &AgentEvent,
    ) -> Vec<UiChunk> {
        let mut out = Vec::new();
        match event {
            AgentEvent::AgentStart {} => self.prompt_pending = true,
            AgentEvent::MessageEnd { message: message @ Message::User { .. } } => {
                // The run's prompt is the client's own: not sent back.
                let prompt = std::mem::take(&mut self.prompt_pending);
                if !prompt {
                    self.close_part(&mut out);
                    out.push(steer(message_index, message_id, message));
                }
            }
            AgentEvent::TurnStart {} => {
                self.open_step(&mut out);
            }
            AgentEvent::MessageUpdate { assistant_message_event } => {
                self.delta(session, message_index, assistant_message_event, &mut out);
            }
            AgentEvent::MessageEnd { message: Message::Assistant { content, .. } } => {
                self.close_part(&mut out);
                for block in content {
                    if let Content::ToolCall { id, name, arguments } = block {
                        self.input_available(id, name, arguments);
                    }
                }
            }
            AgentEvent::ToolExecutionStart { tool_call_id, tool_name, args } => {
                // Spool runs the call: its input as the model gave it, or (never seen)
                // the arguments it runs with.
                let input = self.held.remove(tool_call_id).map_or_else(|| args.clone(), |(_, input)| input);
                self.send_input(tool_call_id, tool_name, input, None, &mut out);
            }
            AgentEvent::ApprovalRequested { approval } => {
                self.ask(approval, &mut out);
            }
            AgentEvent::ApprovalResolved { approval_id, decision, .. } => {
                if self.core.waiting.as_ref() == Some(approval_id) {
                    self.core.waiting = None;
                }
                // `reject` and `expired` never run the tool; `superseded` asks again.
                if matches!(decision.as_str(), "reject" | "expired")
                    && let Some(call) = self.asked.get(approval_id)
                    && self.denied.insert(call.clone())
                {
                    out.push(UiChunk::ToolOutputDenied { tool_call_id: call.clone() });
                }
                // A guardrail's part ends when the person lets the run go on past it.
                if matches!(decision.as_str(), "once" | "always")
                    && let Some(call) = self.asked.get(approval_id).filter(|c| c.starts_with(GUARD_CALL_PREFIX))
                {
                    let output = serde_json::Value::String("the run goes on".into());
                    out.push(UiChunk::ToolOutputAvailable { tool_call_id: call.clone(), output, dynamic: true });
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
                self.release_all(&mut out);
                self.close_step(&mut out);
            }
            AgentEvent::AgentEnd { status, error, .. } => {
                self.release_all(&mut out);
                self.close_step(&mut out);
                self.finished = true;
                self.core.waiting = None;
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

    fn delta(&mut self, session: &SessionId, index: u64, delta: &StreamDelta, out: &mut Vec<UiChunk>) {
        let Some(delta) = self.block_delta(session, index, delta, out) else { return };
        match delta {
            StreamDelta::ToolcallStart { content_index, id, name } => {
                if self.available.contains_key(id) {
                    return;
                }
                self.close_part(out);
                self.open_step(out);
                self.core.streaming.insert((index, *content_index), id.clone());
                out.push(UiChunk::ToolInputStart {
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                    dynamic: true,
                    provider_executed: name != QUESTION_TOOL,
                });
            }
            StreamDelta::ToolcallDelta { content_index, delta, .. } => {
                if let Some(id) = self.core.streaming.get(&(index, *content_index)) {
                    out.push(UiChunk::ToolInputDelta { tool_call_id: id.clone(), input_text_delta: delta.clone() });
                }
            }
            _ => {}
        }
    }

    /// A call's input is complete: held until what becomes of the call is known — Spool
    /// starts it (`tool_execution_start`), asks a person about it, asks the client to
    /// answer it (a question, a client tool: `approval_requested`), or it ends unrun —
    /// so a call the client answers is announced once, as the client's.
    fn input_available(&mut self, id: &str, name: &str, input: &serde_json::Value) {
        if !self.available.contains_key(id) {
            self.held.insert(id.to_owned(), (name.to_owned(), input.clone()));
        }
    }

    /// Sends a call's `tool-input-available`; with `approval`, as a call the client
    /// answers (a question, a client tool), whose part names the approval. A call sent
    /// as Spool's and asked of the client after all (an `ask` rule approved first) is
    /// sent again: the client's part takes the second.
    fn send_input(
        &mut self,
        id: &str,
        name: &str,
        input: serde_json::Value,
        approval: Option<&ApprovalId>,
        out: &mut Vec<UiChunk>,
    ) {
        let for_client = approval.is_some();
        if self.available.get(id).is_some_and(|&sent| sent || !for_client) {
            return;
        }
        self.available.insert(id.to_owned(), for_client);
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

    /// The run waits for a person: a question or a client tool's call is its call, for
    /// the client to answer; any other approval a `tool-approval-request` (after the
    /// call's input).
    fn ask(&mut self, approval: &Approval, out: &mut Vec<UiChunk>) {
        if approval.is_live_ask() {
            // Not a wait of the run: its call is running and its server asks. The
            // call's part stays as it is; the question comes as a data part beside it.
            self.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
            out.push(UiChunk::InputRequested { id: approval.id.clone(), data: super::live_ask_notice(approval) });
            return;
        }
        self.core.waiting = Some(approval.id.clone());
        let call = &approval.tool_call_id;
        if asks_for_input(approval) {
            // The arguments as the call was made; when the fold never saw the call (a
            // continuation from elsewhere), a client call's arguments or the card's
            // question and options.
            let input = self.held.remove(call).map(|(_, input)| input).unwrap_or_else(|| match approval.is_client_call() {
                true => approval.payload["arguments"].clone(),
                false => {
                    serde_json::json!({"question": approval.payload["question"], "options": approval.payload["options"]})
                }
            });
            self.send_input(call, &approval.tool, input, Some(&approval.id), out);
            return;
        }
        if approval.is_guardrail() {
            // No call of the model's waits: the client gets one, `guardrail`, Spool's,
            // for the approval request to name (its input says what was reached).
            let payload = &approval.payload;
            let input = serde_json::json!({"guardrail": payload["guardrail"], "reason": payload["reason"]});
            self.send_input(call, &approval.tool, input, None, out);
        }
        self.release(call, out);
        self.close_part(out);
        self.open_step(out);
        self.asked.insert(approval.id.clone(), approval.tool_call_id.clone());
        out.push(UiChunk::ToolApprovalRequest {
            approval_id: approval.id.clone(),
            tool_call_id: approval.tool_call_id.clone(),
            approval_descriptor: approval.payload.clone(),
        });
    }

    /// A held call that Spool settles (asks a person about, ends unrun, or the step or
    /// run ended): sent as Spool's call.
    fn release(&mut self, id: &str, out: &mut Vec<UiChunk>) {
        if let Some((name, input)) = self.held.remove(id) {
            self.send_input(id, &name, input, None, out);
        }
    }

    fn release_all(&mut self, out: &mut Vec<UiChunk>) {
        let held: Vec<String> = self.held.keys().cloned().collect();
        for id in held {
            self.release(&id, out);
        }
    }
}

impl PartFold for AiSdkStream {
    type Event = UiChunk;
    type Waiting = ApprovalId;

    fn core(&mut self) -> &mut Core<ApprovalId> {
        &mut self.core
    }

    /// `txt_<message>_<block>` or `rsn_…`: a chat is one session, so no part id needs it.
    fn part_id(_: &SessionId, block: Block, index: u64, content: usize) -> String {
        let kind = match block {
            Block::Text => "txt",
            Block::Reasoning => "rsn",
        };
        format!("{kind}_{index}_{content}")
    }

    fn start_part(&mut self, part: &Part, out: &mut Vec<UiChunk>) {
        self.open_step(out);
        let id = part.id.clone();
        out.push(match part.block {
            Block::Text => UiChunk::TextStart { id },
            Block::Reasoning => UiChunk::ReasoningStart { id },
        });
    }

    fn part_content(part: &Part, delta: String, out: &mut Vec<UiChunk>) {
        let id = part.id.clone();
        out.push(match part.block {
            Block::Text => UiChunk::TextDelta { id, delta },
            Block::Reasoning => UiChunk::ReasoningDelta { id, delta },
        });
    }

    fn end_part(Part { block, id }: Part, out: &mut Vec<UiChunk>) {
        out.push(match block {
            Block::Text => UiChunk::TextEnd { id },
            Block::Reasoning => UiChunk::ReasoningEnd { id },
        });
    }

    /// A call drawn from a snapshot: its input is complete.
    fn draw_call(&mut self, DrawnCall { id, name, input, .. }: DrawnCall<'_>, _out: &mut Vec<UiChunk>) {
        self.input_available(id, name, input);
    }

    /// A held call is released before its result.
    fn draw_result(
        &mut self,
        DrawnResult { tool_call_id, text, is_error, .. }: DrawnResult<'_>,
        out: &mut Vec<UiChunk>,
    ) {
        self.release(tool_call_id, out);
        let tool_call_id = tool_call_id.to_owned();
        out.push(match is_error {
            true => UiChunk::ToolOutputError { tool_call_id, error_text: text, dynamic: true },
            false => UiChunk::ToolOutputAvailable { tool_call_id, output: text.into(), dynamic: true },
        });
    }

    fn map_frame(&mut self, frame: &Frame) -> Vec<UiChunk> {
        if self.finished {
            return Vec::new();
        }
        if let FrameBody::Presence { presence } = &frame.body {
            // Only inside the run's message: before its `start` there is none to carry it.
            return match self.core.started {
                true => vec![UiChunk::Presence { data: presence.clone(), transient: true }],
                false => Vec::new(),
            };
        }
        match self.core.read(frame) {
            Some(RunFrame::Accepted) => vec![UiChunk::Start { message_id: self.core.run_id.to_string() }],
            Some(RunFrame::Event(index, event)) => {
                let message_id = match &frame.body {
                    FrameBody::LoopEvent { message_id, .. } => message_id.as_ref(),
                    _ => None,
                };
                self.map_loop_event(&frame.session_id, index, message_id, event)
            }
            None => Vec::new(),
        }
    }
}

impl FormMapper for AiSdkStream {
    type Out = Step;

    fn map(&mut self, frame: &Frame) -> Step {
        let chunks = self.push(frame);
        Step { bytes: encode(&chunks), waiting: self.waiting(), finished: self.finished }
    }
}

/// A steer the run took, as its data part: `usr_<index>`, so a replay names the same
/// part, with the stored message's id, its text and — when it was sent with files —
/// `files`, each as the AI SDK's own `FileUIPart` (`{type: "file", mediaType, filename,
/// url}`, `url` Spool's `/api/attachments/{id}`), which a client shows as it shows the
/// file parts of its own messages.
fn steer(index: u64, message_id: Option<&MessageId>, message: &Message) -> UiChunk {
    let mut data = serde_json::json!({"messageId": message_id, "text": message.text()});
    let files: Vec<serde_json::Value> = message
        .attachments()
        .into_iter()
        .map(|f| serde_json::json!({"type": "file", "mediaType": f.media_type, "filename": f.name, "url": f.url}))
        .collect();
    if !files.is_empty() {
        data["files"] = serde_json::Value::Array(files);
    }
    UiChunk::Steer { id: format!("usr_{index}"), data }
}

/// Which shared form a stream follows (the same for every run-following dialect).
pub type AiSdkForm = super::shared::RunForm;

#[cfg(test)]
mod tests;
