//! One run: the agent loop from an accepted prompt to a settled run.
//!
//! `model → tool calls → results → model` until the model stops without asking for
//! tools, the run is aborted, or something fails. Every step is published as a
//! `loop.event`, and publishing folds it into the session state (`view::apply_frame`,
//! as every client does): the event is the change, never a second hand-written one.
//! What no loop event carries (a pending approval, the idle status) changes the state
//! and goes out whole, as a `state` frame. Messages are
//! written to the store when they end (never per delta); the run record is written
//! when it settles, before the session reports itself idle, so a client that sees
//! `idle` can read the final run.
//!
//! The loop's rooms: [`turn`] (one model call streamed into the draft), [`tool_call`]
//! (whether a call runs, its approval, its execution and result) and [`settlement`]
//! (how the run ends). This file holds the task, its conversation and the loop itself.

use crate::context;
use crate::draft::{Billing, Draft};
use crate::drafts::Checkpoints;
use crate::leases::Held;
use crate::run_env::RunEnv;
use crate::session::{ActiveHandle, Loaded};
use crate::store;
use crate::{Model, ModelEvent, ToolOutput};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use spool_protocol::approval::evaluate_call_verdict;
use spool_protocol::frame::{FrameBody, PromptTiming};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use spool_protocol::api::{ApprovalPolicy, OnDisconnect};

mod guard;
mod sampling;
mod settlement;
mod steers;
mod tool_call;
mod turn;

pub(crate) use guard::GoOn;
pub(crate) use settlement::end_parked_calls;
pub(crate) use tool_call::{new_approval, pending_approval};

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
    /// The tools the prompt declared for the client to run (see [`crate::client_tools`]):
    /// kept with every checkpoint of the run, so the run still offers them (and knows a
    /// call of one for the client's) after it parked, on any node, after a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<spool_protocol::api::ClientTool>,
    /// What the run's guardrails counted (tool calls, time worked, raises): kept with
    /// every checkpoint, so a parked run goes on with them (see [`guard`]).
    #[serde(default)]
    pub guard_state: guard::GuardState,
    /// Set when a guardrail parked the run: where, and which limit. The approval is a
    /// guardrail's (`Approval::is_guardrail`), decided by [`RunTask::continue_past_guardrail`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<guard::GuardPause>,
}

/// How a decision resolves the pending call.
pub(crate) enum Resolution {
    /// Run it (with these arguments), after re-checking the rules.
    Approved { args: serde_json::Value },
    /// Do not run it. Without a message the run ends (cancelled); with one, the model
    /// is told the call was rejected, with the message, and the run goes on.
    /// `person`: a person rejected it (else a rule's timeout did, and its message
    /// says so).
    Rejected { message: Option<String>, person: bool },
    /// A client tool's call, which the client ran: its result is committed as it is,
    /// nothing runs here (see [`crate::client_tools`]).
    ClientResult(spool_protocol::approval::ClientOutput),
    /// Go on past a guardrail (see [`guard`]): one step more, or for the rest of the run.
    Continue(guard::GoOn),
}

/// A failed outcome. The message reaches clients, the store and the log, so secrets
/// from the environment are masked here, once, for every failure path.
fn failure(code: &str, message: impl Into<String>) -> Outcome {
    Outcome::Failed(RunError { code: code.into(), message: redact(&message.into()) })
}

/// What a prompt asks of its run: the prompt's text, whether approvals wait for a
/// person, and what a client's disconnect does. A resumed run asks what its checkpoint
/// kept.
pub(crate) struct Asked {
    pub prompt: String,
    pub policy: ApprovalPolicy,
    pub on_disconnect: OnDisconnect,
    /// The tools the prompt declared for the client to run.
    pub client_tools: Vec<spool_protocol::api::ClientTool>,
}

pub(crate) struct RunTask {
    env: Arc<RunEnv>,
    /// The session's lease as this run holds it: what its writes are held to, and
    /// whether it may still publish (see `leases.rs`, "Failure semantics").
    lease: Arc<Held>,
    /// The store, every write held to the lease's fence: what the run reads and writes
    /// through, never `env.store`.
    store: Arc<dyn crate::Store>,
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
    /// The tools the current turn offered the model: the static registry and what its
    /// sources offered when the turn began (see [`crate::tool_source`]). The turn's
    /// calls are looked up here, so a source's list changing mid-turn changes nothing
    /// until the next.
    tools: crate::ToolRegistry,
    /// The tools the prompt declared for the client (kept in every checkpoint), and the
    /// names of those the current turn offered (a source's tool of the same name wins).
    client_tools: Vec<spool_protocol::api::ClientTool>,
    client_offered: std::collections::HashSet<String>,
    /// The run's guardrails and what they counted (see [`guard`]).
    guard: guard::Guard,
    /// The guardrail pause the next park records (set by `park_guardrail` only).
    guard_pause: Option<guard::GuardPause>,
    /// The turn's step was begun before the run parked (a guardrail before one of its
    /// calls): its `before` snapshot is taken, not taken again.
    resumed_step: bool,
}

impl RunTask {
    pub fn new(
        env: Arc<RunEnv>,
        loaded: Arc<Loaded>,
        run: Run,
        handle: ActiveHandle,
        asked: Asked,
        lease: Arc<Held>,
    ) -> Self {
        let next_index = run.user_message_index;
        let Asked { prompt, policy, on_disconnect, client_tools } = asked;
        let tools = env.tools.clone();
        let store = env.fenced_store(&lease);
        Self {
            lease,
            store,
            tools,
            client_tools,
            client_offered: Default::default(),
            guard: Default::default(),
            guard_pause: None,
            resumed_step: false,
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

    /// A task that continues a parked run from its checkpoint, under the lease the
    /// decision took.
    pub fn resume(
        env: Arc<RunEnv>,
        loaded: Arc<Loaded>,
        run: Run,
        handle: ActiveHandle,
        (checkpoint, resolution): (Checkpoint, Resolution),
        approval: ApprovalId,
        lease: Arc<Held>,
    ) -> Self {
        let asked = Asked {
            prompt: String::new(),
            policy: checkpoint.policy,
            on_disconnect: OnDisconnect::Continue,
            client_tools: checkpoint.client_tools.clone(),
        };
        let mut task = Self::new(env, loaded, run, handle, asked, lease);
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
        self.env.keep_lease(&self.lease, &self.handle);
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
        let store = self.store.clone();
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
        if let Err(outcome) = self.load_guard(checkpoint.guard_state.clone()).await {
            return outcome;
        }
        // The turn's list is gone with the task that parked: its sources are asked
        // again, and a tool they no longer offer ends its call as an error.
        self.offer_tools().await;
        if let Some(pause) = checkpoint.guard {
            let go_on = match resolution {
                Resolution::Continue(go_on) => Some(go_on),
                Resolution::Approved { .. } => Some(guard::GoOn::Once),
                Resolution::Rejected { .. } | Resolution::ClientResult(_) => None,
            };
            return self.continue_past_guardrail(pause, checkpoint, go_on).await;
        }
        let mut calls = vec![checkpoint.pending];
        calls.extend(checkpoint.remaining);
        self.turns(checkpoint.turn, calls, Some(resolution)).await
    }

    /// Asks the tool sources the session has on what this turn offers (see
    /// [`Self::tools`]). Its choices are read at every turn, so one made while a run
    /// goes on (on any node) counts from that run's next turn. When they cannot be
    /// read no source is asked: a server the person turned off must not be started.
    async fn offer_tools(&mut self) {
        let scope = crate::ToolScope { session_id: self.run.session_id.clone(), root: self.loaded.root.clone() };
        let choices = match self.env.tools.sources().is_empty() {
            true => Ok(Default::default()),
            false => self.store.get_source_choices(&self.run.session_id).await,
        };
        let registry = match choices {
            Ok(choices) => self.env.tools.for_turn(&scope, &choices, &self.handle.cancel).await,
            Err(e) => {
                let session = &self.run.session_id;
                tracing::warn!(%session, "no tool source this turn: the session's choices are unreadable: {e}");
                crate::ToolRegistry { tools: self.env.tools.tools.clone(), sources: Vec::new() }
            }
        };
        self.tools = registry;
        self.offer_client_tools();
    }

    /// Adds the prompt's client tools to the turn's registry, beside Spool's: a name
    /// a source's tool took this turn stays the source's (rules keep one meaning per
    /// name), and the client's is not offered.
    fn offer_client_tools(&mut self) {
        self.client_offered.clear();
        for declared in &self.client_tools {
            if self.tools.tools.contains_key(&declared.name) {
                tracing::warn!(tool = %declared.name, "a client tool is named like a tool offered this turn; not offered");
                continue;
            }
            let tool = crate::client_tools::ClientTool::new(declared.clone());
            self.tools.tools.insert(declared.name.clone(), Arc::new(tool));
            self.client_offered.insert(declared.name.clone());
        }
    }

    /// Whether `name` is a client tool this turn offered: a call of it parks for the
    /// client instead of running here.
    pub(super) fn is_client_tool(&self, name: &str) -> bool {
        self.client_offered.contains(name)
    }

    /// Publishes one of the run's events; the session state changes by its fold.
    /// Nothing goes out once this node may have lost the session's lease: another node
    /// may have announced the run's end already (see `leases.rs`, "Failure semantics").
    /// An event that reports what a write of the run just stored goes out with
    /// [`emit_stored`](Self::emit_stored) instead.
    fn emit(&self, event: AgentEvent, message_index: Option<u64>) {
        if self.lease.speaks() {
            self.emit_stored(event, message_index, None);
        }
    }

    /// Publishes an event that reports what the run just stored (naming the committed
    /// message on `message_end`): the write went through its lease's fence, so the
    /// lease was this node's when it committed, and the event goes out whatever the
    /// node knows of the lease since.
    fn emit_stored(&self, event: AgentEvent, message_index: Option<u64>, message_id: Option<MessageId>) {
        let run_id = self.run.id.clone();
        self.loaded.events.publish_body(FrameBody::LoopEvent { run_id, message_index, message_id, event });
    }

    fn emit_timing(&self) {
        self.emit(PromptTiming::of(&self.run).event(), None);
    }

    /// Writes a finished message to the store and publishes its end.
    async fn commit(&mut self, message: Message) -> Result<(), Outcome> {
        let id = self.draft_id.take().unwrap_or_default();
        let indexed = IndexedMessage { id, index: self.next_index, message };
        self.next_index += 1;
        self.store
            .insert_message(&self.run.session_id, &self.run.owner_id, &indexed)
            .await
            .map_err(|e| failure("storage_error", format!("could not save message {}: {e}", indexed.index)))?;
        if std::mem::take(&mut self.draft_stored)
            && let Err(e) = self.store.delete_draft(&self.run.session_id).await
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
        let IndexedMessage { id, index, message } = indexed;
        self.emit_stored(AgentEvent::MessageEnd { message }, Some(index), Some(id));
    }

    /// Reads the session's memory, then the messages before `next_index` that model
    /// calls see: those from the summary's cut on (all of them while nothing has been
    /// summarized).
    async fn load_context(&mut self) -> Result<(), Outcome> {
        let store = self.store.clone();
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
        if let Err(outcome) = self.load_guard(guard::GuardState::default()).await {
            return outcome;
        }
        self.emit(AgentEvent::AgentStart {}, None);
        self.emit(AgentEvent::TurnStart {}, None);
        let Some(user) = self.stored_prompt.take() else {
            return failure("internal_error", "the run was started without its stored prompt");
        };
        self.emit(AgentEvent::MessageStart { message: user.message.clone() }, Some(user.index));
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
            self.emit(AgentEvent::TurnEnd {}, None);
            turn += 1;
        }
        while turn < max_turns {
            // Before the turn starts: a pause here goes on with this same turn.
            if let Err(outcome) = self.guard_model_call(turn).await {
                return outcome;
            }
            if turn > 0 {
                self.emit(AgentEvent::TurnStart {}, None);
                // After a tool batch, before the next model call: a steer lands here.
                if let Err(outcome) = self.take_steers().await {
                    return outcome;
                }
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
                self.emit(AgentEvent::TurnEnd {}, None);
                // A steer sent while the model answered: the run answers it too.
                match self.take_steers().await {
                    Ok(true) => {
                        turn += 1;
                        continue;
                    }
                    Ok(false) => return Outcome::Completed,
                    Err(outcome) => return outcome,
                }
            }
            if let Err(outcome) = self.run_calls(turn, calls, None).await {
                return outcome;
            }
            self.emit(AgentEvent::TurnEnd {}, None);
            turn += 1;
        }
        failure("max_turns_exceeded", format!("the run made {max_turns} model calls without finishing"))
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
pub(crate) fn redact(text: &str) -> String {
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

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}
