//! One run: the agent loop from an accepted prompt to a settled run.
//!
//! `model → tool calls → results → model` until the model stops without asking for
//! tools, the run is aborted, or something fails. Every step is published as a
//! `loop.event` and mirrored into the session state in the same step. Messages are
//! written to the store when they end (never per delta); the run record is written
//! when it settles, before the session reports itself idle, so a client that sees
//! `idle` can read the final run.

use crate::context;
use crate::draft::{Billing, Draft};
use crate::drafts::Checkpoints;
use crate::run_env::RunEnv;
use crate::session::{ActiveHandle, Loaded};
use crate::store;
use crate::view::{self, apply_delta};
use crate::{Model, ModelEvent, ToolOutput};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use spool_protocol::approval::evaluate_call;
use spool_protocol::frame::{FrameBody, PromptTiming, ToolExecution, ToolStatus};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use spool_protocol::api::{ApprovalPolicy, OnDisconnect};

/// How a run ended, or stopped to wait.
enum Outcome {
    Completed,
    Cancelled,
    /// A plain reject (seed 003: a rejection only changes states): the call never ran
    /// and the run ends as cancelled, saying why.
    Rejected(RunError),
    Failed(RunError),
    /// Parked at an approval: durable, and continued by a decision.
    Interrupted,
}

impl Outcome {
    fn status(&self) -> RunStatus {
        match self {
            Outcome::Completed => RunStatus::Completed,
            Outcome::Cancelled | Outcome::Rejected(_) => RunStatus::Cancelled,
            Outcome::Failed(_) => RunStatus::Failed,
            Outcome::Interrupted => RunStatus::Interrupted,
        }
    }
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    pub args: serde_json::Value,
}

/// What a parked run needs to continue, stored with its approval. The conversation
/// itself is in the store; `next_index` is its version: resuming checks that exactly
/// that many messages exist, so a checkpoint never continues a different history.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Checkpoint {
    pub next_index: u64,
    pub turn: usize,
    /// The call waiting for the decision.
    pub pending: Call,
    /// Later calls of the same assistant message, run after it.
    pub remaining: Vec<Call>,
    pub policy: ApprovalPolicy,
    pub usage: Usage,
    /// The file the pending call would change, as it was when the approval was asked
    /// (`write` and `edit`): an approving decision re-reads it, and a change asks again.
    /// Absent in checkpoints written before it existed, which are not re-checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<crate::Resource>,
    /// The run-stream sequence of the `interrupt` that announces this checkpoint's
    /// approval, so a session loaded after a restart numbers the run's continuation on
    /// from it (a run's sequence is the run's, for the run's lifetime). Absent when the
    /// stream did not count the run, and in checkpoints written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
}

/// How a decision resolves the pending call.
pub(crate) enum Resolution {
    /// Run it (with these arguments), after re-checking the rules.
    Approved { args: serde_json::Value },
    /// Do not run it. Without a message the run ends (cancelled); with one, the model
    /// is told the call was rejected, with the message, and the run goes on.
    Rejected { message: Option<String> },
}

/// A failed outcome. The message reaches clients, the store and the log, so secrets
/// from the environment are masked here, once, for every failure path.
fn failure(code: &str, message: impl Into<String>) -> Outcome {
    Outcome::Failed(RunError { code: code.into(), message: redact(&message.into()) })
}

pub(crate) struct RunTask {
    env: Arc<RunEnv>,
    loaded: Arc<Loaded>,
    run: Run,
    prompt: String,
    handle: ActiveHandle,
    policy: ApprovalPolicy,
    on_disconnect: OnDisconnect,
    /// Set when this task continues a parked run.
    resume: Option<(Checkpoint, Resolution)>,
    /// The approval whose decision this task carries out: its call is marked started
    /// in the store before the tool runs, so a crash never runs it twice.
    decided: Option<ApprovalId>,
    /// The conversation from `conversation_base` on: the part model calls see (after
    /// the compaction summary) and the messages this run adds. The part a summary
    /// replaced is never read: reading the whole history made every run cost memory
    /// and time in proportion to every message the session ever had.
    conversation: Vec<Message>,
    /// Absolute index of `conversation[0]`.
    conversation_base: u64,
    /// Confirmed facts and the compaction summary.
    memory: SessionMemory,
    /// The code of the model error that ended the last model call, if one did.
    model_error: Option<String>,
    /// Absolute index the next committed message takes.
    next_index: u64,
    /// The id of the assistant message streaming now: its draft checkpoints and the
    /// committed message share it.
    draft_id: Option<MessageId>,
    /// Whether a draft of it is in the store (and must be deleted once it commits).
    draft_stored: bool,
    /// Checkpoint chunks of it written so far: the `seq` of the next one.
    draft_chunks: u64,
    /// The prompt's user message, stored with the run (see `Store::start_run`): the
    /// run publishes it, and does not write it again.
    stored_prompt: Option<IndexedMessage>,
}

impl RunTask {
    pub fn new(
        env: Arc<RunEnv>,
        loaded: Arc<Loaded>,
        run: Run,
        prompt: String,
        handle: ActiveHandle,
        policy: ApprovalPolicy,
        on_disconnect: OnDisconnect,
    ) -> Self {
        let next_index = run.user_message_index;
        Self {
            env,
            loaded,
            run,
            prompt,
            handle,
            policy,
            on_disconnect,
            resume: None,
            decided: None,
            conversation: Vec::new(),
            conversation_base: 0,
            memory: SessionMemory::default(),
            model_error: None,
            next_index,
            draft_id: None,
            draft_stored: false,
            draft_chunks: 0,
            stored_prompt: None,
        }
    }

    /// The prompt's user message as the store holds it, written with the run (a queued
    /// prompt keeps its id when a run takes it, so the hub's `messages.processed` and
    /// `message.created` name one message).
    pub fn with_stored_prompt(mut self, prompt: IndexedMessage) -> Self {
        self.stored_prompt = Some(prompt);
        self
    }

    /// A task that continues a parked run from its checkpoint.
    pub fn resume(
        env: Arc<RunEnv>,
        loaded: Arc<Loaded>,
        run: Run,
        handle: ActiveHandle,
        checkpoint: Checkpoint,
        resolution: Resolution,
        approval: ApprovalId,
    ) -> Self {
        let mut task = Self::new(env, loaded, run, String::new(), handle, checkpoint.policy, OnDisconnect::Continue);
        task.next_index = checkpoint.next_index;
        task.resume = Some((checkpoint, resolution));
        task.decided = Some(approval);
        task
    }

    /// Runs the run to its end (or its next approval) inside a `run` span naming the run
    /// and its session, so every log line of the run carries both (as fields of the
    /// JSON logs) and a run id found in a request's log leads to all of them.
    pub async fn execute(self) {
        let span = tracing::info_span!("run", run = %self.run.id, session = %self.run.session_id);
        tracing::Instrument::instrument(self.execute_in_span(), span).await
    }

    async fn execute_in_span(mut self) {
        if self.on_disconnect == OnDisconnect::Cancel {
            self.cancel_when_unwatched();
        }
        // The caller took the session's lease; it is held until the run settles or parks.
        self.env.keep_lease(self.run.session_id.clone(), &self.handle);
        let outcome = match self.resume.take() {
            None => self.drive().await,
            Some((checkpoint, resolution)) => self.continue_from(checkpoint, resolution).await,
        };
        self.settle(outcome).await;
    }

    /// Seed 003's `onDisconnect: "cancel"`: the run ends when its last listener leaves.
    /// With a frame bus, listeners on every node count: their numbers are read every
    /// [`WATCHERS_POLL`] as well as whenever this node's change.
    fn cancel_when_unwatched(&self) {
        let mut count = self.loaded.events.watch_subscribers();
        let (cancel, finished) = (self.handle.cancel.clone(), self.handle.finished.clone());
        let (env, session) = (self.env.clone(), self.run.session_id.clone());
        let clustered = env.clustered();
        tokio::spawn(async move {
            let elsewhere = match clustered {
                true => env.watchers_elsewhere(&session).await.streams,
                false => 0,
            };
            let mut watched = *count.borrow_and_update() as u64 + elsewhere > 0;
            loop {
                tokio::select! {
                    _ = finished.cancelled() => return,
                    changed = count.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(WATCHERS_POLL), if clustered => {}
                }
                let here = *count.borrow_and_update();
                let elsewhere = match clustered {
                    true => env.watchers_elsewhere(&session).await.streams,
                    false => 0,
                };
                let now = here as u64 + elsewhere > 0;
                // A change to nobody; with a bus, also "nobody any more" seen by polling.
                if !now && (watched || !clustered) {
                    cancel.cancel();
                    return;
                }
                watched = now;
            }
        });
    }

    /// Interactive views (`?approvals=1`) on the session: this node's, and with a frame
    /// bus every other node's.
    async fn interactive_views(&self) -> u64 {
        let here = self.loaded.events.interactive_views() as u64;
        here + self.env.watchers_elsewhere(&self.run.session_id).await.interactive
    }

    /// Continues after a decision: re-reads the conversation, checks it is the version
    /// the checkpoint was taken at, resolves the pending call, then runs on.
    async fn continue_from(&mut self, checkpoint: Checkpoint, resolution: Resolution) -> Outcome {
        let store = self.env.store.clone();
        match store.count_messages(&self.run.session_id).await {
            Ok(count) if count == checkpoint.next_index => {}
            Ok(count) => {
                return failure(
                    "checkpoint_mismatch",
                    format!("the conversation has {count} messages; the checkpoint expected {}", checkpoint.next_index),
                );
            }
            Err(e) => return failure("storage_error", format!("could not load the conversation: {e}")),
        }
        if let Err(outcome) = self.load_context().await {
            return outcome;
        }
        let mut calls = vec![checkpoint.pending];
        calls.extend(checkpoint.remaining);
        self.turns(checkpoint.turn, calls, Some(resolution)).await
    }

    fn emit(&self, event: AgentEvent, message_index: Option<u64>, mutate: impl FnOnce(&mut frame::SessionState)) {
        self.emit_message(event, message_index, None, mutate);
    }

    /// [`emit`](Self::emit) naming the committed message (on `message_end`).
    fn emit_message(
        &self,
        event: AgentEvent,
        message_index: Option<u64>,
        message_id: Option<MessageId>,
        mutate: impl FnOnce(&mut frame::SessionState),
    ) {
        let run_id = self.run.id.clone();
        self.loaded.events.publish(move |state| {
            mutate(state);
            Some(FrameBody::LoopEvent { run_id, message_index, message_id, event })
        });
    }

    fn emit_timing(&self) {
        let timing = PromptTiming::of(&self.run);
        self.emit(timing.event(), None, |s| view::set_timing(s, timing));
    }

    /// Writes a finished message to the store and publishes its end.
    async fn commit(&mut self, message: Message) -> Result<(), Outcome> {
        let id = self.draft_id.take().unwrap_or_default();
        let indexed = IndexedMessage { id, index: self.next_index, message };
        self.next_index += 1;
        self.env
            .store
            .insert_message(&self.run.session_id, &self.run.owner_id, &indexed)
            .await
            .map_err(|e| failure("storage_error", format!("could not save message {}: {e}", indexed.index)))?;
        if std::mem::take(&mut self.draft_stored)
            && let Err(e) = self.env.store.delete_draft(&self.run.session_id).await
        {
            // Harmless: the next draft replaces it, and a leftover whose index is taken
            // is only deleted (see `commit_orphaned_drafts`).
            tracing::warn!(run = %self.run.id, error = %e, "could not delete a committed draft");
        }
        self.publish_committed(indexed);
        Ok(())
    }

    /// A message the store holds now joins the conversation, and its end goes out.
    fn publish_committed(&mut self, indexed: IndexedMessage) {
        self.next_index = indexed.index + 1;
        self.conversation.push(indexed.message.clone());
        let (index, id) = (indexed.index, indexed.id.clone());
        self.emit_message(AgentEvent::MessageEnd { message: indexed.message.clone() }, Some(index), Some(id), |s| {
            view::commit_message(s, indexed)
        });
    }

    /// Reads the session's memory, then the messages before `next_index` that model
    /// calls see: those from the summary's cut on (all of them while nothing has been
    /// summarized).
    async fn load_context(&mut self) -> Result<(), Outcome> {
        let store = self.env.store.clone();
        self.memory = store
            .get_memory(&self.run.session_id)
            .await
            .map_err(|e| failure("storage_error", format!("could not load the session memory: {e}")))?;
        let wanted = self.next_index.saturating_sub(self.memory.summarized_before);
        let limit = u32::try_from(wanted).unwrap_or(u32::MAX);
        let history = store
            .list_messages(&self.run.session_id, Some(self.next_index), limit)
            .await
            .map_err(|e| failure("storage_error", format!("could not load the conversation: {e}")))?;
        self.conversation_base = history.first().map_or(self.next_index, |m| m.index);
        self.conversation = history.into_iter().map(|m| m.message).collect();
        Ok(())
    }

    /// The part of the conversation model calls see verbatim, and its first absolute index.
    fn verbatim(&self) -> (u64, &[Message]) {
        let skip = self.memory.summarized_before.saturating_sub(self.conversation_base);
        let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(self.conversation.len());
        (self.conversation_base + skip as u64, &self.conversation[skip..])
    }

    async fn drive(&mut self) -> Outcome {
        if let Err(outcome) = self.load_context().await {
            return outcome;
        }
        self.emit(AgentEvent::AgentStart {}, None, |_| {});
        self.emit(AgentEvent::TurnStart {}, None, |_| {});
        let Some(user) = self.stored_prompt.take() else {
            return failure("internal_error", "the run was started without its stored prompt");
        };
        self.emit(AgentEvent::MessageStart { message: user.message.clone() }, Some(user.index), |_| {});
        // Stored already, with the run: only published here.
        self.publish_committed(user);
        self.emit_timing();
        self.spawn_title();

        self.turns(0, Vec::new(), None).await
    }

    /// The agent loop from `turn` on. `queued` are calls of the current turn still to
    /// run (after a resume), the first of them resolved by `resolution`.
    async fn turns(&mut self, mut turn: usize, queued: Vec<Call>, resolution: Option<Resolution>) -> Outcome {
        let max_turns = self.env.settings.max_turns;
        if !queued.is_empty() {
            if let Err(outcome) = self.run_calls(turn, queued, resolution).await {
                return outcome;
            }
            self.emit(AgentEvent::TurnEnd {}, None, |_| {});
            turn += 1;
        }
        while turn < max_turns {
            if turn > 0 {
                self.emit(AgentEvent::TurnStart {}, None, |_| {});
            }
            let (assistant, aborted) = match self.stream_model_traced().await {
                Ok(r) => r,
                Err(outcome) => return outcome,
            };
            let calls: Vec<Call> = assistant
                .content()
                .iter()
                .filter_map(|c| match c {
                    Content::ToolCall { id, name, arguments } => {
                        Some(Call { id: id.clone(), name: name.clone(), args: arguments.clone() })
                    }
                    _ => None,
                })
                .collect();
            let error = match &assistant {
                Message::Assistant { stop_reason: Some(StopReason::Error), error_message, .. } => {
                    Some(error_message.clone().unwrap_or_else(|| "the model failed".into()))
                }
                _ => None,
            };
            if let Err(outcome) = self.commit(assistant).await {
                return outcome;
            }
            if aborted {
                return Outcome::Cancelled;
            }
            if let Some(message) = error {
                // The provider's own code (bad_credentials, context_overflow, stream_cut …)
                // tells a client what to do about it.
                let code = self.model_error.take().unwrap_or_else(|| "model_error".into());
                return failure(&code, message);
            }
            if calls.is_empty() {
                self.emit(AgentEvent::TurnEnd {}, None, |_| {});
                return Outcome::Completed;
            }
            if let Err(outcome) = self.run_calls(turn, calls, None).await {
                return outcome;
            }
            self.emit(AgentEvent::TurnEnd {}, None, |_| {});
            turn += 1;
        }
        failure("max_turns_exceeded", format!("the run made {max_turns} model calls without finishing"))
    }

    /// Runs a turn's calls in order; stops at the first that parks, fails or aborts.
    /// Each call runs in a `tool_call` span (a child of the run's): the tool, the call's
    /// id, the person's decision when one resumed it, and whether it ended in an error
    /// (`parked` when it stopped for an approval instead).
    async fn run_calls(
        &mut self,
        turn: usize,
        calls: Vec<Call>,
        mut resolution: Option<Resolution>,
    ) -> Result<(), Outcome> {
        for (i, call) in calls.iter().enumerate() {
            let decision = resolution.as_ref().map(|r| match r {
                Resolution::Approved { .. } => "approved",
                Resolution::Rejected { .. } => "rejected",
            });
            let span = tracing::info_span!(
                "tool_call",
                tool = %call.name,
                call_id = %call.id,
                decision = decision,
                outcome = tracing::field::Empty,
            );
            let done = tracing::Instrument::instrument(
                self.execute_tool(call.clone(), resolution.take(), turn, &calls[i + 1..]),
                span.clone(),
            )
            .await;
            if let Err(Outcome::Interrupted) = &done {
                span.record("outcome", "parked");
            }
            done?;
        }
        Ok(())
    }

    /// `stream_model` inside a `model_call` span (a child of the run's): the model, the
    /// tokens the call counted, its retries and how it stopped, so a trace shows each
    /// call of a run and what it cost.
    async fn stream_model_traced(&mut self) -> Result<(Message, bool), Outcome> {
        let span = tracing::info_span!(
            "model_call",
            model = tracing::field::Empty,
            input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            retries = 0u64,
            stop_reason = tracing::field::Empty,
        );
        let before = self.run.usage;
        let started = self.env.clock.now_ms();
        let streamed = tracing::Instrument::instrument(self.stream_model(), span.clone()).await;
        if let Ok((Message::Assistant { model, .. }, _)) = &streamed {
            self.env.metrics.model_call(model, self.env.clock.now_ms() - started);
        }
        let after = self.run.usage;
        span.record("input_tokens", after.input.saturating_sub(before.input));
        span.record("output_tokens", after.output.saturating_sub(before.output));
        match &streamed {
            Ok((Message::Assistant { stop_reason: Some(reason), .. }, aborted)) => {
                let reason = match serde_json::to_value(reason) {
                    _ if *aborted => "aborted".to_owned(),
                    Ok(serde_json::Value::String(name)) => name,
                    _ => format!("{reason:?}"),
                };
                span.record("stop_reason", reason);
            }
            Ok(_) => {}
            Err(_) => {
                span.record("stop_reason", "failed");
            }
        }
        streamed
    }

    /// Streams one assistant message. Returns it (ended, not yet committed) and whether
    /// the run was aborted while it streamed.
    async fn stream_model(&mut self) -> Result<(Message, bool), Outcome> {
        let index = self.next_index;
        let choice = self.loaded.events.read(|s| s.session.model.clone());
        let entry = self.env.models.resolve(choice.as_deref()).clone();
        let model = entry.model.clone();
        tracing::Span::current().record("model", model.name());
        self.maybe_compact(&model).await;
        let request = context::assemble(
            &self.env.settings.system_prompt,
            &self.memory,
            self.verbatim().1,
            self.env.tools.specs_for(self.mode()),
        );
        let billing = Billing { price: entry.price, prompt_tokens: context::request_tokens(&request) };
        let mut draft = Draft::new(model.name(), now_ms(), billing);
        let start = draft.message().clone();
        self.draft_id = Some(MessageId::new());
        self.draft_chunks = 0;
        let mut checkpoints = Checkpoints::default();
        self.emit(AgentEvent::MessageStart { message: start.clone() }, Some(index), move |s| {
            s.drafts.insert(index, start);
        });
        let cancel = self.handle.cancel.clone();
        // On the engine's clock, as the other durations in `/metrics` are.
        let call_started = self.env.clock.now_ms();
        let mut first_event = true;
        let opened = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = model.stream(request) => Some(r),
        };
        let mut stream = match opened {
            None => return Ok(self.end_draft(draft, StopReason::Aborted, None, true)),
            Some(Err(e)) => {
                let draft = self.end_draft(draft, StopReason::Error, Some(e.to_string()), false);
                self.model_error = Some(e.code);
                return Ok(draft);
            }
            Some(Ok(s)) => s,
        };
        loop {
            let due = checkpoints.due();
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    // A stop of the server is a failure the message itself tells.
                    return Ok(match self.handle.failed_as.get() {
                        Some(e) => {
                            let reason = format!("{} ({})", e.message, e.code);
                            self.end_draft(draft, StopReason::Error, Some(reason), true)
                        }
                        None => self.end_draft(draft, StopReason::Aborted, None, true),
                    });
                }
                () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                    self.save_draft(&mut draft).await;
                    checkpoints.written();
                    continue;
                }
                next = stream.next() => next,
            };
            // A model whose stream is always ready (the scripted one with no delay) would
            // otherwise publish its whole answer without yielding, and every subscriber
            // would wake to find itself far behind. Spending tokio's cooperative budget
            // yields every so often, so connections drain while the run streams.
            tokio::task::consume_budget().await;
            if first_event
                && matches!(
                    next,
                    Some(Ok(ModelEvent::Text(_) | ModelEvent::Thinking(_) | ModelEvent::ToolCallStart { .. }))
                )
            {
                first_event = false;
                self.env.metrics.first_token_after(self.env.clock.now_ms() - call_started);
            }
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    let draft = self.end_draft(draft, StopReason::Error, Some(e.to_string()), false);
                    self.model_error = Some(e.code);
                    return Ok(draft);
                }
                None => {
                    let reason = "the model stream ended without finishing".to_owned();
                    return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                }
            };
            let grew = match &event {
                ModelEvent::Text(t) | ModelEvent::Thinking(t) | ModelEvent::ToolCallArgs(t) => t.len(),
                ModelEvent::ToolCallStart { name, .. } => name.len().max(1),
                _ => 0,
            };
            if matches!(event, ModelEvent::Text(_) | ModelEvent::Thinking(_) | ModelEvent::ToolCallStart { .. }) {
                self.first_token();
            }
            match event {
                ModelEvent::Text(text) => draft.text(text, &mut |delta| self.update(delta)),
                ModelEvent::Thinking(text) => draft.thinking(text, &mut |delta| self.update(delta)),
                ModelEvent::ToolCallStart { id, name } => draft.tool_call(id, name, &mut |delta| self.update(delta)),
                ModelEvent::ToolCallArgs(text) => {
                    if draft.tool_args(text, &mut |delta| self.update(delta)).is_err() {
                        let reason = "the model sent tool arguments outside a tool call".to_owned();
                        return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                    }
                }
                ModelEvent::Usage(u) => draft.add_usage(u),
                ModelEvent::RetryStart { attempt, max_attempts, delay_ms, reason } => {
                    tracing::Span::current().record("retries", u64::from(attempt));
                    let event =
                        AgentEvent::AutoRetryStart { attempt, max_attempts, delay_ms, error_message: redact(&reason) };
                    self.emit(event, None, |_| {});
                }
                ModelEvent::RetryEnd { attempt, success } => {
                    self.emit(AgentEvent::AutoRetryEnd { attempt, success }, None, |_| {});
                }
                ModelEvent::Stop(reason) => {
                    let usage = draft.stop(reason, &mut |delta| self.update(delta));
                    self.run.usage.add(usage);
                    return Ok((draft.into_message(), false));
                }
            }
            if grew > 0 {
                let limit = self.env.settings.max_answer_bytes;
                if draft.streamed_bytes() > limit {
                    // Cut here, the answer so far kept (it is committed with the error):
                    // an answer without end would fill the store and every client.
                    self.model_error = Some("answer_too_large".into());
                    let reason = format!(
                        "the answer was cut at {} bytes: an answer may have at most {limit} bytes of text, \
                         reasoning and tool arguments (max_answer_bytes)",
                        draft.streamed_bytes()
                    );
                    return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                }
                let now = tokio::time::Instant::now();
                checkpoints.grew(grew, now);
                if checkpoints.should_write(now) {
                    self.save_draft(&mut draft).await;
                    checkpoints.written();
                }
            }
        }
    }

    /// Checkpoints the streaming message (see [`crate::drafts`]). A failed write is
    /// logged and the run goes on: the stream matters more than the checkpoint.
    /// Only what is new since the last checkpoint is written (appended); a failed
    /// write keeps it, to be written with the next.
    async fn save_draft(&mut self, draft: &mut Draft) {
        let Some(id) = self.draft_id.clone() else { return };
        if draft.unsaved().is_empty() {
            return;
        }
        let saved = store::Draft {
            session_id: self.run.session_id.clone(),
            run_id: self.run.id.clone(),
            owner_id: self.run.owner_id.clone(),
            message: IndexedMessage { id, index: self.next_index, message: draft.start().clone() },
        };
        match self.env.store.append_draft(&saved, self.draft_chunks, draft.unsaved()).await {
            Ok(bytes) => {
                self.draft_stored = true;
                self.draft_chunks += 1;
                draft.saved();
                self.env.metrics.draft_bytes_written(bytes);
            }
            Err(e) => tracing::warn!(run = %self.run.id, error = %e, "could not checkpoint the streaming answer"),
        }
    }

    fn first_token(&mut self) {
        if self.run.first_token_at.is_none() {
            self.run.first_token_at = Some(now_ms());
            self.emit_timing();
        }
    }

    /// Publishes one `message_update` the draft made and applies it to the session
    /// state's copy of the draft.
    fn update(&self, delta: StreamDelta) {
        let index = self.next_index;
        self.emit(AgentEvent::MessageUpdate { assistant_message_event: delta.clone() }, Some(index), move |s| {
            if let Some(d) = s.drafts.get_mut(&index) {
                apply_delta(d, &delta);
            }
        });
    }

    /// Ends the draft with `reason`: what `stream_model` returns, `stopped` telling
    /// whether the run was stopped (rather than the model failing). What the cut call
    /// used (estimated where the provider did not say) counts in the run's usage.
    fn end_draft(
        &mut self,
        mut draft: Draft,
        reason: StopReason,
        error: Option<String>,
        stopped: bool,
    ) -> (Message, bool) {
        // A provider's error may echo what it was sent (a key in a header, a secret in
        // the prompt): masked before the message is stored or streamed.
        let usage = draft.end(reason, error.map(|e| redact(&e)), &mut |delta| self.update(delta));
        self.run.usage.add(usage);
        (draft.into_message(), stopped)
    }

    /// The session's mode now (a person may switch it while the run goes on).
    fn mode(&self) -> SessionMode {
        self.loaded.events.read(|s| s.session.mode)
    }

    /// Switches the session's mode, durably, and tells every view (a tool's
    /// [`crate::Tool::mode_after`], after the person accepted).
    async fn switch_mode(&mut self, mode: SessionMode) -> Result<(), Outcome> {
        let mut session = self.loaded.events.read(|s| s.session.clone());
        if session.mode == mode {
            return Ok(());
        }
        session.mode = mode;
        session.updated_at = now_ms();
        if let Err(e) = self.env.store.update_session(&session).await {
            return Err(failure(
                "storage_error",
                format!("could not switch the session to {} mode: {e}", mode.as_str()),
            ));
        }
        self.loaded.events.publish(move |state| {
            state.session = session;
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        Ok(())
    }

    /// The permission for a call now: a server deny is final; within the rest the
    /// session's own rules decide (see [`evaluate_call`]).
    fn permission(&self, tool: &dyn crate::Tool, name: &str, args: &serde_json::Value) -> PermissionAction {
        let subject = tool.subject(args);
        let session_rules = self.loaded.events.read(|s| s.session.permissions.clone());
        evaluate_call(&self.env.settings.rules, &session_rules, name, &subject)
    }

    async fn execute_tool(
        &mut self,
        call: Call,
        resolution: Option<Resolution>,
        turn: usize,
        remaining: &[Call],
    ) -> Result<(), Outcome> {
        let Call { id: call_id, name, args } = call.clone();
        let plain_reject = matches!(&resolution, Some(Resolution::Rejected { message })
            if message.as_deref().is_none_or(|m| m.trim().is_empty()));
        if plain_reject {
            // Nothing about this call starts: no `tool_execution_start`, so no stream
            // shows it running, and the run stops here. The call (and any later call of
            // the message) ends as rejected in every view and in the conversation.
            let calls: Vec<Call> = std::iter::once(call).chain(remaining.iter().cloned()).collect();
            let why = |tool: &str| format!("The person rejected this {tool} call; the run was cancelled.");
            self.next_index = end_unrun_calls(&self.env, &self.loaded, &self.run, self.next_index, calls, why).await;
            return Err(Outcome::Rejected(RunError {
                code: "approval_rejected".into(),
                message: format!("the {name} call was rejected; the run was cancelled"),
            }));
        }
        let tool = self.env.tools.get(&name);
        // Decide whether the call runs: the rules, or the decision that resumed us. A
        // rule that says deny wins even over an approval given earlier.
        let mode = self.mode();
        let verdict: Result<serde_json::Value, String> = match (&tool, resolution) {
            (None, _) => Err(format!("unknown tool {name:?}")),
            // The model was not offered it; a person's earlier approval does not change
            // the mode's promise either (the mode may have changed since).
            (Some(tool), _) if !tool.available_in(mode) => Err(unavailable(&name, mode)),
            (Some(_), _) if !args.is_object() => Err(format!(
                "invalid arguments for {name}: expected a JSON object, got {}",
                truncate(&args.to_string(), 200)
            )),
            (Some(_), Some(Resolution::Rejected { message })) => Err(match message {
                Some(m) if !m.trim().is_empty() => format!("The user rejected this {name} call: {m}"),
                _ => format!("The user rejected this {name} call."),
            }),
            (Some(tool), Some(Resolution::Approved { args })) => {
                if !args.is_object() {
                    Err(format!("invalid arguments for {name}: expected a JSON object"))
                } else if self.permission(&**tool, &name, &args) == PermissionAction::Deny {
                    Err(format!("{name} is denied by a permission rule (changed after the approval was asked)"))
                } else {
                    Ok(args)
                }
            }
            (Some(tool), None) if let Err(reason) = tool.check(&args) => Err(reason),
            (Some(tool), None) => match self.permission(&**tool, &name, &args) {
                PermissionAction::Deny => Err(format!("{name} is denied by a permission rule")),
                // A question always waits for the person, unless nobody can answer.
                _ if tool.asks(&args).is_some() => {
                    if self.policy == ApprovalPolicy::Deny && self.interactive_views().await == 0 {
                        Err(format!("{name} asks the person and no one is connected to answer (approval policy: deny)"))
                    } else {
                        return Err(self.interrupt(&**tool, call, turn, remaining).await);
                    }
                }
                PermissionAction::Allow => Ok(args.clone()),
                PermissionAction::Ask if self.policy == ApprovalPolicy::Deny && self.interactive_views().await == 0 => {
                    Err(format!("{name} needs approval and no one is connected to give it (approval policy: deny)"))
                }
                PermissionAction::Ask => return Err(self.interrupt(&**tool, call, turn, remaining).await),
            },
        };
        // A decided call is about to run: say so durably first (exactly once, at least once).
        if let (Some(approval), Some(_), Ok(_)) = (self.decided.take(), &tool, &verdict)
            && let Err(e) = self.env.store.mark_call_started(&approval, now_ms()).await
        {
            return Err(failure("storage_error", format!("could not mark the approved call started: {e}")));
        }
        let shown_args = verdict.as_ref().map_or_else(|_| args.clone(), Clone::clone);
        let exec = ToolExecution {
            tool_call_id: call_id.clone(),
            tool_name: name.clone(),
            args: shown_args.clone(),
            status: ToolStatus::Running,
            result: None,
            output: None,
            output_truncated: false,
            diff: None,
        };
        self.emit(
            AgentEvent::ToolExecutionStart { tool_call_id: call_id.clone(), tool_name: name.clone(), args: shown_args },
            None,
            move |s| {
                s.tool_executions.insert(exec.tool_call_id.clone(), exec);
            },
        );
        let cancel = self.handle.cancel.clone();
        let mut aborted = false;
        let output = match (tool, verdict) {
            (_, Err(reason)) => ToolOutput::error(reason),
            (None, Ok(_)) => ToolOutput::error(format!("unknown tool {name:?}")),
            (Some(tool), Ok(args)) => {
                let (progress, mut reader) = crate::ToolProgress::channel();
                let mut ctx = self.env.tool_context(&self.loaded, cancel.clone());
                ctx.progress = progress;
                let mut live = LiveOutput::new(&call_id, &name);
                let started = self.env.clock.now_ms();
                let mut running = Box::pin(tool.call(args, &ctx));
                let finished = loop {
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => break None,
                        out = &mut running => break Some(out),
                        chunk = reader.next() => self.stream_output(&mut live, chunk, false),
                    }
                };
                // Stopped: the call is dropped first (which kills what it started), so
                // nothing more is printed after the output the result keeps.
                drop(running);
                self.env.metrics.tool_call(&name, self.env.clock.now_ms() - started);
                self.stream_output(&mut live, reader.rest(), true);
                finished.unwrap_or_else(|| {
                    aborted = true;
                    ToolOutput::error(live.stopped_result())
                })
            }
        };
        let mut output = output;
        if let Some(todos) = output.todos.take().filter(|_| !output.is_error && !aborted)
            && let Err(reason) = self.replace_todos(todos).await
        {
            output = ToolOutput::error(reason);
        }
        // A tool that prints an environment secret (a failing command echoing a key)
        // must not carry it into events, the store or the next model call.
        let (result, is_error) = (redact(&output.text), output.is_error);
        // The diff shows file text the call wrote, which may hold a secret as well.
        let diff = output.diff.as_deref().filter(|_| !is_error && !aborted).map(redact);
        if !is_error && !aborted {
            self.remember_tool_fact(&call, &result).await;
            if let Some(mode) = self.env.tools.get(&name).and_then(|t| t.mode_after()) {
                self.switch_mode(mode).await?;
            }
        }
        let status = if is_error { ToolStatus::Error } else { ToolStatus::Success };
        let outcome = if aborted {
            "aborted"
        } else if is_error {
            "error"
        } else {
            "ok"
        };
        tracing::Span::current().record("outcome", outcome);
        let shown = result.clone();
        let id = call_id.clone();
        self.emit(
            AgentEvent::ToolExecutionEnd {
                tool_call_id: call_id.clone(),
                tool_name: name.clone(),
                result: result.clone(),
                is_error,
            },
            None,
            move |s| {
                if let Some(e) = s.tool_executions.get_mut(&id) {
                    e.status = status;
                    e.result = Some(shown);
                    view::end_tool_output(e);
                }
            },
        );
        let message = Message::ToolResult {
            tool_call_id: call_id,
            tool_name: name,
            content: vec![Content::Text { text: result }],
            is_error,
            timestamp: now_ms(),
            diff,
        };
        self.emit(AgentEvent::MessageStart { message: message.clone() }, Some(self.next_index), |_| {});
        self.commit(message).await?;
        if aborted { Err(Outcome::Cancelled) } else { Ok(()) }
    }

    /// Publishes a chunk of a running call's output as `tool_execution_update` (redacted
    /// like the result) and adds it to the call's output in the session state. `last`:
    /// the call is over, so nothing is held back any more.
    fn stream_output(&self, live: &mut LiveOutput, chunk: crate::ProgressChunk, last: bool) {
        let mut text = std::mem::take(&mut live.held);
        text.push_str(&chunk.text);
        let mut text = redact_with(&text, &live.secrets);
        if !last && !chunk.truncated {
            let keep = secret_prefix_len(&text, &live.secrets);
            live.held = text.split_off(text.len() - keep);
        }
        if text.is_empty() && !chunk.truncated {
            return;
        }
        let offset = spool_protocol::event::offset_len(&live.sent);
        live.sent.push_str(&text);
        live.truncated |= chunk.truncated;
        let (id, delta, truncated) = (live.tool_call_id.clone(), text.clone(), chunk.truncated);
        self.emit(
            AgentEvent::ToolExecutionUpdate {
                tool_call_id: live.tool_call_id.clone(),
                tool_name: live.tool_name.clone(),
                offset,
                delta: text,
                truncated,
            },
            None,
            move |s| view::append_tool_output(s, &id, offset, &delta, truncated),
        );
    }

    /// Parks the run at an approval: persist the approval and checkpoint with the run's
    /// `interrupted` status (one transaction), and only then publish the state and the
    /// `approval_requested` event. A call that changes one file is looked at first: the
    /// card shows the change, and the checkpoint keeps the file's fingerprint.
    async fn interrupt(&mut self, tool: &dyn crate::Tool, call: Call, turn: usize, remaining: &[Call]) -> Outcome {
        let inspected =
            tool.inspect(&call.args, &self.env.tool_context(&self.loaded, self.handle.cancel.clone())).await;
        // The approval's times are the engine clock's: its expiry is timed by it.
        let now = self.env.clock.now_ms();
        let settings = &self.env.settings;
        let approval =
            new_approval(settings.approval_ttl, &settings.rules, tool, &self.run, &call, inspected.as_ref(), now);
        // The `interrupt` below is the run's next event: nothing else of the run is
        // published before it.
        let sequence = self.loaded.events.next_run_sequence(&self.run.id, crate::session::READ_YOUR_WRITES).await;
        let checkpoint = Checkpoint {
            next_index: self.next_index,
            turn,
            pending: call,
            remaining: remaining.to_vec(),
            policy: self.policy,
            usage: self.run.usage,
            resource: inspected.map(|i| i.resource),
            sequence,
        };
        self.run.status = RunStatus::Interrupted;
        self.run.updated_at = now;
        let checkpoint = serde_json::to_value(&checkpoint).expect("plain data serializes");
        if let Err(e) = self.env.store.interrupt_run(&self.run, &approval, &checkpoint).await {
            return failure("storage_error", format!("could not save the approval: {e}"));
        }
        let shown = approval.clone();
        self.loaded.events.publish(move |s| {
            s.pending_approvals.push(shown);
            if let Some(active) = s.active_run.as_mut() {
                active.status = RunStatus::Interrupted;
            }
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        // After the view shows the approval pending: a parked handle is held only while
        // it does (see `Loaded::active`).
        {
            let mut active = self.loaded.active.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(handle) = active.as_mut().filter(|h| h.run_id == self.run.id) {
                handle.interrupted = Some(approval.id.clone());
            }
        }
        self.env.arm_expiry(&approval);
        self.emit(AgentEvent::ApprovalRequested { approval: Box::new(approval) }, None, |_| {});
        Outcome::Interrupted
    }

    /// Replaces the session's todo list (`todo_write`): stored first, so a list anyone
    /// was shown survives a restart, then published as `todo_write` with the state.
    /// The model wrote the items: masked like everything else it says that is shown.
    async fn replace_todos(&mut self, mut todos: Vec<hub::Todo>) -> Result<(), String> {
        for todo in &mut todos {
            todo.content = redact(&todo.content);
        }
        let store = &self.env.store;
        if let Err(e) = store.put_todos(&self.run.session_id, &self.run.owner_id, &todos).await {
            tracing::warn!(run = %self.run.id, error = %e, "could not save the todo list");
            return Err("todo_write: the todo list could not be saved; it is unchanged".into());
        }
        let shown = todos.clone();
        self.emit(AgentEvent::TodoWrite { todos }, None, move |s| s.todos = shown);
        Ok(())
    }

    /// A successful tool call is a confirmed fact: record what it did and what it saw.
    async fn remember_tool_fact(&mut self, call: &Call, result: &str) {
        let change = match self.env.tools.get(&call.name) {
            Some(tool) => tool.describe(&call.args),
            None => call.name.clone(),
        };
        let fact = redact(&context::tool_fact(&change, result));
        self.update_memory(|m| context::remember(m, &fact, FactSource::Tool, now_ms())).await;
    }

    /// Re-reads the memory, applies `change` and writes it back, so facts a person
    /// confirmed while the run was going are kept. On a storage error the run goes on
    /// with what it has; returns whether the change was saved.
    async fn update_memory(&mut self, change: impl FnOnce(&mut SessionMemory)) -> bool {
        let store = &self.env.store;
        let mut memory = store.get_memory(&self.run.session_id).await.unwrap_or_else(|_| self.memory.clone());
        change(&mut memory);
        match store.put_memory(&self.run.session_id, &self.run.owner_id, &memory).await {
            Ok(()) => {
                self.memory = memory;
                true
            }
            Err(e) => {
                tracing::warn!(run = %self.run.id, error = %e, "could not save the session memory");
                false
            }
        }
    }

    /// Summarizes older turns when the verbatim history passes the context budget.
    /// A failed summary is reported and the run goes on with the raw history.
    async fn maybe_compact(&mut self, model: &Arc<dyn Model>) {
        let (start, verbatim) = self.verbatim();
        let tokens = context::estimate_tokens(verbatim);
        if tokens <= self.env.settings.context_budget_tokens {
            return;
        }
        let Some(fold) = context::compaction_cut(verbatim) else {
            return;
        };
        // Absolute, as the memory keeps it; `fold` messages of the verbatim part go.
        let cut = start + fold as u64;
        self.emit(AgentEvent::CompactionStart { tokens_before: tokens }, None, |_| {});
        let request = context::summary_request(&self.memory, &verbatim[..fold]);
        let summary = collect_text(model, request, &self.handle.cancel).await;
        let saved = match summary {
            Ok(text) if !text.trim().is_empty() => {
                self.update_memory(|m| {
                    m.summary = Some(text);
                    m.summarized_before = cut;
                })
                .await
            }
            Ok(_) | Err(_) => false,
        };
        let (summarized_before, tokens_after, success) = if saved {
            (cut, context::estimate_tokens(self.verbatim().1), true)
        } else {
            (self.memory.summarized_before, tokens, false)
        };
        self.emit(AgentEvent::CompactionEnd { summarized_before, tokens_after, success }, None, |_| {});
    }

    /// Titles an untitled session after its first prompt, asynchronously: the model
    /// proposes a title while the run goes on; if it fails, the prompt's first line is
    /// the title. A title a person set in the meantime is kept.
    fn spawn_title(&self) {
        if self.loaded.events.read(|s| s.session.title_set) {
            return;
        }
        let (env, loaded, prompt, run_id) =
            (self.env.clone(), self.loaded.clone(), self.prompt.clone(), self.run.id.clone());
        tokio::spawn(async move {
            let choice = loaded.events.read(|s| s.session.model.clone());
            let model = env.models.resolve(choice.as_deref()).model.clone();
            let never = CancellationToken::new();
            let proposed = collect_text(&model, context::title_request(&prompt), &never).await.ok();
            let title = proposed.as_deref().and_then(context::clean_title).unwrap_or_else(|| title_from(&prompt));
            let mut session = loaded.events.read(|s| s.session.clone());
            if session.title_set {
                return;
            }
            session.title = title.clone();
            session.title_set = true;
            session.updated_at = now_ms();
            if let Err(e) = env.store.update_session(&session).await {
                tracing::warn!(session = %session.id, error = %e, "could not save the session title");
                return;
            }
            loaded.events.publish_body(FrameBody::LoopEvent {
                run_id,
                message_index: None,
                message_id: None,
                event: AgentEvent::SessionTitle { title },
            });
            loaded.events.publish(move |s| {
                s.session = session;
                Some(FrameBody::State { state: Box::new(s.clone()) })
            });
        });
    }

    async fn settle(mut self, outcome: Outcome) {
        let outcome = match (outcome, self.handle.failed_as.get()) {
            (Outcome::Cancelled, Some(error)) => failure(&error.code, error.message.clone()),
            (other, _) => other,
        };
        tracing::info!(status = outcome.status().as_str(), "run settled");
        self.env.metrics.run_settled(outcome.status());
        if let Outcome::Interrupted = outcome {
            // Durable already; the run continues when someone decides, on whichever
            // node wins the decision: no lease is held while it waits.
            self.env.drop_lease(&self.run.session_id).await;
            self.handle.finished.cancel();
            return;
        }
        let now = now_ms();
        self.run.status = outcome.status();
        self.run.ended_at = Some(now);
        self.run.updated_at = now;
        match &outcome {
            Outcome::Failed(error) => {
                tracing::warn!(run = %self.run.id, code = %error.code, message = %error.message, "run failed");
                self.run.error = Some(error.clone());
            }
            Outcome::Rejected(error) => self.run.error = Some(error.clone()),
            _ => {}
        }
        if let Err(e) = self.env.store.update_run(&self.run).await {
            tracing::error!(run = %self.run.id, error = %e, "could not save the settled run");
        }
        self.env.drop_lease(&self.run.session_id).await;
        self.emit(
            AgentEvent::AgentEnd {
                status: self.run.status.as_str().into(),
                usage: self.run.usage,
                error: self.run.error.clone(),
            },
            None,
            |_| {},
        );
        self.emit_timing();
        self.loaded.set_active(None);
        self.loaded.events.publish(|s| {
            s.status = SessionStatus::Idle;
            s.active_run = None;
            s.drafts.clear();
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        self.emit(AgentEvent::AgentSettled {}, None, |_| {});
        self.handle.finished.cancel();
        // Completed, failed or cancelled (a Stop ends this run only), the queue goes on —
        // unless this node is stopping or lost the session: its next runner takes it.
        if self.handle.failed_as.get().is_none() {
            self.env.run_settled(&self.run.session_id);
        }
    }
}

/// Ends the calls of a run parked at an approval that will never run them (the run was
/// stopped, or the approval expired): each gets a `tool_execution_end` with an error and
/// a stored tool result, so every view — and the model, at the next prompt — sees the
/// call ended instead of running for ever. Then the prompt's timing ends. `run` is the
/// run as settled; `checkpoint` the one stored with its approval.
pub(crate) async fn end_parked_calls(env: &RunEnv, loaded: &Loaded, run: &Run, checkpoint: serde_json::Value) {
    let reason = run.error.as_ref().map_or("the run was cancelled", |e| e.message.as_str()).to_owned();
    let (index, calls) = match serde_json::from_value::<Checkpoint>(checkpoint) {
        Ok(c) => (c.next_index, std::iter::once(c.pending).chain(c.remaining).collect()),
        Err(e) => {
            tracing::warn!(run = %run.id, error = %e, "unreadable checkpoint: the parked calls stay open");
            (0, Vec::new())
        }
    };
    let why = |name: &str| format!("The {name} call was cancelled before it ran: {reason}.");
    end_unrun_calls(env, loaded, run, index, calls, why).await;
    let timing = PromptTiming::of(run);
    let event = timing.event();
    let run_id = run.id.clone();
    loaded.events.publish(|state| {
        view::set_timing(state, timing);
        Some(FrameBody::LoopEvent { run_id, message_index: None, message_id: None, event })
    });
}

/// Ends `calls`, none of which ran, from message `index` on: for each, a
/// `tool_execution_end` with an error saying `why`, and a stored tool result (so the
/// conversation stays well-formed for the model). Returns the next free index.
async fn end_unrun_calls(
    env: &RunEnv,
    loaded: &Loaded,
    run: &Run,
    mut index: u64,
    calls: Vec<Call>,
    why: impl Fn(&str) -> String,
) -> u64 {
    let publish = |event, message_index, message_id, mutate: &mut dyn FnMut(&mut frame::SessionState)| {
        let run_id = run.id.clone();
        loaded.events.publish(|state| {
            mutate(state);
            Some(FrameBody::LoopEvent { run_id, message_index, message_id, event })
        });
    };
    for Call { id, name, .. } in calls {
        let result = why(&name);
        let (shown, call) = (result.clone(), id.clone());
        let end = AgentEvent::ToolExecutionEnd {
            tool_call_id: id.clone(),
            tool_name: name.clone(),
            result: result.clone(),
            is_error: true,
        };
        publish(end, None, None, &mut |s| {
            if let Some(e) = s.tool_executions.get_mut(&call) {
                e.status = ToolStatus::Error;
                e.result = Some(shown.clone());
                view::end_tool_output(e);
            }
        });
        let message = Message::ToolResult {
            tool_call_id: id,
            tool_name: name,
            content: vec![Content::Text { text: result }],
            is_error: true,
            timestamp: now_ms(),
            diff: None,
        };
        publish(AgentEvent::MessageStart { message: message.clone() }, Some(index), None, &mut |_| {});
        let indexed = IndexedMessage { id: MessageId::new(), index, message };
        if let Err(e) = env.store.insert_message(&run.session_id, &run.owner_id, &indexed).await {
            tracing::warn!(run = %run.id, error = %e, "could not save the result of a call that never ran");
            break;
        }
        let (end, id) = (AgentEvent::MessageEnd { message: indexed.message.clone() }, indexed.id.clone());
        let mut committed = Some(indexed);
        publish(end, Some(index), Some(id), &mut |s| {
            if let Some(m) = committed.take() {
                view::commit_message(s, m);
            }
        });
        index += 1;
    }
    index
}

/// The approval a person is asked for `call`: the tool, its whole main argument, a
/// one-line summary, for a call that changes one file the preview of the change
/// against the file as `inspected` found it, and for a command the patterns "always"
/// may allow (`alwaysOptions`, those the server's `rules` leave open). Everything shown
/// is redacted.
pub(crate) fn new_approval(
    ttl: std::time::Duration,
    rules: &[PermissionRule],
    tool: &dyn crate::Tool,
    run: &Run,
    call: &Call,
    inspected: Option<&crate::Inspected>,
    now: time::Millis,
) -> Approval {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let mut payload = serde_json::json!({
        "tool": call.name,
        // Whole, never cut: a person decides on exactly what will run, and the
        // end of a long command is where a `curl … | sh` hides.
        "argument": tool.main_argument(&call.args).map(|a| redact(&a)),
        "change": redact(&tool.describe(&call.args)),
        "reason": "this tool changes files or runs commands, and the permission rules say to ask",
    });
    if let Some(inspected) = inspected {
        payload["preview"] = redact(&inspected.preview).into();
    }
    if let Some(options) = tool.always_options(&call.args) {
        // Not redacted: a pattern must be the command's own text to match it later, and
        // the card shows the (redacted) argument beside it. What redaction would mask
        // is left out instead.
        let options: Vec<_> = spool_protocol::approval::offerable(rules, &call.name, options)
            .into_iter()
            .filter(|o| o.patterns.iter().all(|p| redact(p) == *p))
            .collect();
        payload["alwaysOptions"] = serde_json::to_value(options).expect("plain data serializes");
    }
    let ask = tool.asks(&call.args);
    if let Some(ask) = &ask {
        payload["reason"] = "the model asks you this; answer it to go on".into();
        for (key, value) in &ask.payload {
            // The model wrote it: masked like everything else a card shows.
            let masked = redact(&value.to_string());
            payload[key] = serde_json::from_str(&masked).unwrap_or(serde_json::Value::String(masked));
        }
    }
    Approval {
        id: ApprovalId::new(),
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        owner_id: run.owner_id.clone(),
        tool_call_id: call.id.clone(),
        tool: call.name.clone(),
        kind: ask.map_or(ApprovalKind::ConfirmAction, |a| a.kind),
        payload,
        status: ApprovalStatus::Pending,
        decision: None,
        message: None,
        actor: None,
        created_at: now,
        expires_at: now.saturating_add(ttl),
        resolved_at: None,
    }
}

/// What the model reads when it calls a tool its session's mode does not offer.
fn unavailable(name: &str, mode: SessionMode) -> String {
    match mode {
        SessionMode::Plan => format!(
            "{name} is not available in plan mode: nothing may change until the person accepts a plan. \
             Look with the read-only tools, then call exit_plan with your plan."
        ),
        SessionMode::Agent => format!("{name} is only available in plan mode; this session is in agent mode"),
    }
}

/// How often a run with `onDisconnect: "cancel"` reads the other nodes' listener counts.
const WATCHERS_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// A title from the prompt's first line: at most 60 characters, with an ellipsis when cut.
fn title_from(prompt: &str) -> String {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("Untitled");
    truncate(line, 60)
}

/// Masks the values of secret-looking environment variables and settings (names
/// containing KEY, TOKEN, SECRET or PASSWORD) wherever they appear, so an approval card
/// never shows one.
fn redact(text: &str) -> String {
    redact_with(text, &secrets())
}

/// The values of the server's environment variables that look like secrets, and the
/// secret settings it was configured with (the config's `[env]`; see [`crate::secrets`]).
fn secrets() -> Vec<String> {
    crate::secrets::values()
}

fn redact_with(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for value in secrets {
        if out.contains(value.as_str()) {
            out = out.replace(value.as_str(), "[redacted]");
        }
    }
    out
}

/// The length of the longest end of `text` that is the start of a secret (but not a
/// whole one): live output holds it back until the next chunk says whether the secret
/// follows, so a secret split between two reads is redacted all the same.
fn secret_prefix_len(text: &str, secrets: &[String]) -> usize {
    secrets
        .iter()
        .filter_map(|secret| {
            (1..secret.len().min(text.len() + 1))
                .rev()
                .find(|&k| secret.is_char_boundary(k) && text.ends_with(&secret[..k]))
        })
        .max()
        .unwrap_or(0)
}

/// The bytes of live output a stopped call's result keeps, half from its start and
/// half from its end: the same 50 KiB as `bash`'s own result, so a Stop does not give
/// the conversation a longer result than finishing would have.
const STOPPED_OUTPUT_BYTES: usize = 50 * 1024;

/// One call's live output on its way to the stream: what was sent, and the end held
/// back because it could be the start of a secret (see [`secret_prefix_len`]).
struct LiveOutput {
    tool_call_id: String,
    tool_name: String,
    sent: String,
    held: String,
    truncated: bool,
    secrets: Vec<String>,
}

impl LiveOutput {
    fn new(tool_call_id: &str, tool_name: &str) -> Self {
        Self {
            tool_call_id: tool_call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            sent: String::new(),
            held: String::new(),
            truncated: false,
            secrets: secrets(),
        }
    }

    /// The result of a call the run's Stop cut short: it says so, and keeps what the
    /// call had printed (its start and end when that is long), so the card and the
    /// stored conversation still show it after a reload.
    fn stopped_result(&self) -> String {
        const STOPPED: &str = "the run was aborted before the tool finished";
        if self.sent.is_empty() {
            return STOPPED.to_owned();
        }
        let capped = if self.truncated {
            format!(" (live output stops at {} KiB)", spool_protocol::event::LIVE_OUTPUT_CAP / 1024)
        } else {
            String::new()
        };
        format!("{STOPPED}; what it printed until then{capped}:\n{}", keep_ends(&self.sent, STOPPED_OUTPUT_BYTES))
    }
}

/// `text` if it is at most `max` bytes, else its first and last `max / 2` bytes (cut on
/// character boundaries) with a line saying how much was left out between them.
fn keep_ends(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}\n… {} bytes of output omitted …\n{}", &text[..head], tail - head, &text[tail..])
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// Runs a housekeeping model call (title, summary) to the end and returns its text.
async fn collect_text(
    model: &Arc<dyn Model>,
    request: crate::ModelRequest,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let work = async {
        let mut stream = model.stream(request).await.map_err(|e| e.to_string())?;
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event.map_err(|e| e.to_string())? {
                ModelEvent::Text(t) => text.push_str(&t),
                ModelEvent::Stop(_) => return Ok(text),
                _ => {}
            }
        }
        Err("the model stream ended without finishing".to_owned())
    };
    tokio::select! {
        _ = cancel.cancelled() => Err("aborted".to_owned()),
        r = work => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_that_could_start_a_secret_is_held_back_and_nothing_else() {
        let secrets = vec!["sk-abcdef123".to_owned(), "pässwort-geheim".to_owned()];
        assert_eq!(secret_prefix_len("output sk-ab", &secrets), 5);
        assert_eq!(secret_prefix_len("output s", &secrets), 1);
        assert_eq!(secret_prefix_len("output\n", &secrets), 0);
        // A whole secret is redacted, not held; a prefix ends on a character boundary.
        assert_eq!(secret_prefix_len("sk-abcdef123", &secrets), 0);
        assert_eq!(secret_prefix_len("x pä", &secrets), "pä".len());
        assert_eq!(secret_prefix_len("", &secrets), 0);
    }

    #[test]
    fn a_stopped_calls_long_output_keeps_its_start_and_end() {
        assert_eq!(keep_ends("short", 10), "short");
        let text = format!("{}{}", "a".repeat(10), "é".repeat(10));
        let kept = keep_ends(&text, 10);
        assert_eq!(kept, "aaaaa\n… 21 bytes of output omitted …\néé");
    }
}
