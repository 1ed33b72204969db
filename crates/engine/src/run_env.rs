//! What a run may use: the narrow context a [`RunTask`](crate::run::RunTask) holds
//! instead of the whole engine. One `Arc<RunEnv>` is shared by every run of the node and
//! by the approvals service, which continues parked runs.
//!
//! A run reads and writes the store, calls models and tools, keeps its session's lease
//! renewed, counts who watches its session on other nodes, arms the expiry of the
//! approvals it asks for, and says when it settled. It cannot load or unload sessions,
//! take prompts, answer queries or reach auth: those are the engine's. Expiry and
//! settlement are messages to the engine (an approval that expires must be looked up
//! and ended through the whole decision machinery, and a settled run's queue started
//! as a prompt is, neither of which a run holds), so nothing here points back at the
//! engine.

use crate::framebus::{FrameBus, Watchers};
use crate::leases::{Held, Leases, Renewal};
use crate::models::Models;
use crate::session::{ActiveHandle, Loaded};
use crate::{Clock, Store, ToolContext, ToolRegistry};
use spool_protocol::{Approval, PermissionRule, SessionId};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The engine settings a run reads.
#[derive(Clone, Debug)]
pub(crate) struct RunSettings {
    /// Most bytes of files one model call carries (`[limits] prompt_file_bytes`): the
    /// newest files first; older ones go as their names.
    pub prompt_file_bytes: u64,
    /// Most model calls one run may make before it fails (a loop guard).
    pub max_turns: usize,
    /// The system prompt every model call starts with.
    pub system_prompt: String,
    /// The server's permission rules (their deny is final).
    pub rules: Vec<PermissionRule>,
    /// Estimated tokens of verbatim history above which older turns are summarized.
    pub context_budget_tokens: u64,
    /// How long an approval waits for a decision before it expires.
    pub approval_ttl: Duration,
    /// How long a client tool's call waits for the client's result.
    pub client_tool_ttl: Duration,
    /// Most bytes of text, reasoning and tool arguments one assistant message may
    /// stream; past it the run fails with `answer_too_large`, the answer so far kept.
    pub max_answer_bytes: usize,
    /// The server's guardrails: a run reaching one parks to ask whether to go on
    /// (see `run/guard.rs`).
    pub guardrails: spool_protocol::Guardrails,
}

pub(crate) struct RunEnv {
    pub store: Arc<dyn Store>,
    pub models: Models,
    pub tools: ToolRegistry,
    pub settings: RunSettings,
    /// What approvals are stamped with and expire by (see [`crate::clock`]).
    pub clock: Clock,
    /// The engine's metrics (see [`crate::metrics`]).
    pub metrics: crate::metrics::Metrics,
    /// Spool's data directory: no tool path resolves into it.
    data_dir: Option<PathBuf>,
    leases: Arc<Leases>,
    /// The frame bus, when sessions are shared between nodes: it counts their watchers.
    frames: Option<Arc<dyn FrameBus>>,
    node_id: String,
    /// Approvals whose expiry the engine is to arm (see [`RunEnv::arm_expiry`]).
    expiries: mpsc::UnboundedSender<Approval>,
    /// Sessions whose run settled, for the engine to start their next queued prompt
    /// (see [`RunEnv::run_settled`]).
    settled: mpsc::UnboundedSender<SessionId>,
    /// The running calls of this node waiting for a person's answer (live asks): a
    /// decision wakes them here.
    pub live: crate::approvals::Waiters,
    /// Who records the project's files around a step (see [`crate::snapshots`]).
    pub snapshots: Option<crate::snapshots::StepSnapshotting>,
}

/// The engine's end of [`RunEnv::arm_expiry`]: every approval sent here must expire
/// at its `expires_at` unless it is decided first.
pub(crate) type Expiries = mpsc::UnboundedReceiver<Approval>;

/// The engine's end of [`RunEnv::run_settled`]: each session sent here may have a
/// queued prompt to start.
pub(crate) type Settled = mpsc::UnboundedReceiver<SessionId>;

/// What [`RunEnv::new`] is built from.
pub(crate) struct RunParts {
    pub store: Arc<dyn Store>,
    pub models: Models,
    pub tools: ToolRegistry,
    pub data_dir: Option<PathBuf>,
    pub leases: Arc<Leases>,
    pub frames: Option<Arc<dyn FrameBus>>,
    pub settings: RunSettings,
    /// This node's name: its own watchers are not "elsewhere".
    pub node_id: String,
    pub clock: Clock,
    pub metrics: crate::metrics::Metrics,
    pub snapshots: Option<crate::snapshots::StepSnapshotting>,
}

impl RunEnv {
    pub fn new(parts: RunParts) -> (Arc<RunEnv>, Expiries, Settled) {
        let RunParts { store, models, tools, data_dir, leases, frames, settings, node_id, clock, metrics, snapshots } =
            parts;
        // The node's name goes with every step it records: the trees are in its data directory.
        let snapshots = snapshots.map(|s| s.on_node(node_id.clone()));
        let (expiries, armed) = mpsc::unbounded_channel();
        let (settled, settlements) = mpsc::unbounded_channel();
        let env = RunEnv {
            store,
            models,
            tools,
            settings,
            clock,
            metrics,
            data_dir,
            leases,
            frames,
            node_id,
            expiries,
            settled,
            live: Default::default(),
            snapshots,
        };
        (Arc::new(env), armed, settlements)
    }

    /// Whether other nodes may have clients on this node's sessions.
    pub fn clustered(&self) -> bool {
        self.frames.is_some()
    }

    /// The clients other nodes have on `session`'s stream (bus mode; nothing without a
    /// bus, or when the bus cannot say — then only this node's clients count).
    pub async fn watchers_elsewhere(&self, session: &SessionId) -> Watchers {
        let Some(bus) = &self.frames else { return Watchers::default() };
        crate::events::watchers_elsewhere(&**bus, &self.node_id, session).await
    }

    /// Renews the session's lease `held` took for the run `handle` stands for, until it
    /// finishes.
    pub fn keep_lease(&self, held: &Arc<Held>, handle: &ActiveHandle) {
        let renewal = Renewal {
            finished: handle.finished.clone(),
            cancel: handle.cancel.clone(),
            failed_as: handle.failed_as.clone(),
        };
        self.leases.keep_renewed(held.clone(), renewal);
    }

    /// The store as the run holding `held` writes to it: each of its writes held to the
    /// lease's fence (see `leases.rs`, "Failure semantics").
    pub fn fenced_store(&self, held: &Held) -> Arc<dyn Store> {
        self.store.fenced(held.fence().clone())
    }

    /// Lets the run's hold on the session's lease go: the lease is given back unless
    /// another holder on this node still has it (see [`Leases::let_go`]).
    pub async fn drop_lease(&self, session: &SessionId) {
        self.leases.let_go(session).await;
    }

    /// Lets the run's hold on the session's lease go and leaves the lease to expire
    /// (see [`Leases::abandon`]).
    pub async fn abandon_lease(&self, session: &SessionId) {
        self.leases.abandon(session).await;
    }

    /// Has the approval expire when its time comes, unless it is decided before.
    /// One that never expires ([`spool_protocol::NEVER_EXPIRES`]) is armed by nobody.
    pub fn arm_expiry(&self, approval: &Approval) {
        if approval.expires_at >= spool_protocol::NEVER_EXPIRES {
            return;
        }
        // Closed only once the engine is gone: then nobody is left to decide either.
        let _ = self.expiries.send(approval.clone());
    }

    /// Tells the engine a run of `session` settled here (or that its queue has a prompt
    /// no run is taking), so the next queued prompt starts. Like expiry, a message: the
    /// queue is the engine's, and a run does not hold the engine.
    pub fn run_settled(&self, session: &SessionId) {
        // Closed only once the engine is gone: then no queue is left to run either.
        let _ = self.settled.send(session.clone());
    }

    /// Where attachments' bytes are kept (see [`crate::attachments`]); `None` without a
    /// data directory.
    pub fn blobs(&self) -> Option<crate::attachments::BlobDir> {
        self.data_dir.as_deref().map(crate::attachments::BlobDir::under)
    }

    /// What a tool call of this session may touch: the project, minus Spool's data
    /// directory.
    pub fn tool_context(&self, loaded: &Loaded, cancel: CancellationToken) -> ToolContext {
        ToolContext {
            root: loaded.root.clone(),
            root_id: loaded.root_id,
            cancel,
            data_dir: self.data_dir.clone(),
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        }
    }
}
