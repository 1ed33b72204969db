//! The `Engine`: the one handle the server holds. It owns the loaded sessions (each with
//! its `SessionEvents`), accepts prompts, starts and aborts runs, and answers queries.
//!
//! A thin front: what a request asks for goes through one of three handles, each a
//! borrow of the engine with the operations of one concern, in a room of its own in
//! `engine/`:
//! * [`engine.sessions()`](Engine::sessions) ([`Sessions`]): create, list, get, update,
//!   delete, messages, memory, permissions, search, subscribe;
//! * [`engine.runs()`](Engine::runs) ([`Runs`]): prompt, submit (the queue, in
//!   `engine/queue.rs`), abort, decide, approvals, run records, the run stream;
//! * [`engine.projects()`](Engine::projects) ([`Projects`]): create, list, get, rename,
//!   delete.
//!
//! This file holds the configuration, the shared state ([`Inner`]) and the start, and
//! the node-wide parts (stream permits, metrics, readiness, idle unloading, shutdown).
//! The helpers the rooms share (loading a session, launching a run) are `pub(crate)`
//! methods of `Engine` beside the operations that use them most.
//!
//! Every method takes the acting user and treats another user's record exactly like a
//! missing one (`NotFound`), so a later auth layer only has to supply the user.

use crate::ToolRegistry;
use crate::approvals::{Approvals, DecisionInput, DecisionOutcome, DecisionTarget};
use crate::error::{EngineError, Result};
use crate::events::{Ended, EventLimits, RunAfter, RunStart, SessionEvents, Start, Subscription};
use crate::leases::LeaseGuard;
use crate::models::{ModelInfo, Models};
use crate::registry::Unused;
use crate::remote::{Remote, RemoteParts};
use crate::run::{Asked, RunTask};
use crate::run_env::{Expiries, RunEnv, RunParts, RunSettings};
use crate::session::{ActiveHandle, Loaded, READ_YOUR_WRITES};
use crate::store::DecidedCall;
use crate::store::{RunInsert, Store};
use crate::view;
use spool_protocol::api::{
    ApprovalPolicy, MessagePage, Multitask, OnDisconnect, PromptAccepted, PromptQueued, SessionDetail, SessionInfo,
};
use spool_protocol::approval;
use spool_protocol::frame::{ActiveRun, FrameBody, SNAPSHOT_USER_ROUNDS, SessionState};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

// The engine's rooms: each holds one handle's operations (and the `impl Engine` helpers
// of that concern); the queue is the runs' room for prompts that wait.
mod branches;
mod fork;
mod projects;
mod queue;
mod reverts;
mod runs;
mod sessions;
mod tool_sources;

pub use projects::Projects;
pub use queue::{MAX_QUEUED, MAX_STEERS, Steered, Submitted};
pub use reverts::Reverts;
pub use runs::Runs;
pub(crate) use runs::with_files;
pub use sessions::Sessions;
pub use tool_sources::{SessionUse, SourceView, ToolSources};

/// Tunable limits and policies of the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub limits: EventLimits,
    /// Largest prompt text accepted, in bytes.
    pub max_prompt_bytes: usize,
    /// What files a user may send (see [`crate::attachments`]).
    pub attachments: crate::attachments::AttachmentLimits,
    /// Most model calls one run may make before it fails (a loop guard).
    pub max_turns: usize,
    /// Most bytes of text, reasoning and tool arguments one assistant message may
    /// stream; past it the run fails with `answer_too_large` and keeps the answer so far.
    pub max_answer_bytes: usize,
    /// The server's permission rules. Their deny is final; a session's own rules
    /// decide only within what they do not deny.
    pub rules: Vec<PermissionRule>,
    /// How long an approval waits for a decision before it expires.
    pub approval_ttl: std::time::Duration,
    /// How long a call of a client-side tool waits for the client's result before it
    /// expires and cancels its run (`client_tool_expired`; see [`crate::client_tools`]).
    pub client_tool_ttl: std::time::Duration,
    /// The server's guardrails (`[guardrails]`): limits at which a run parks to ask
    /// whether to go on (see `run/guard.rs`); a session's own may only tighten them.
    pub guardrails: spool_protocol::Guardrails,
    /// What happens to an approval that arises while no interactive view is connected.
    pub approval_policy: ApprovalPolicy,
    /// The system prompt every model call starts with.
    pub system_prompt: String,
    /// Estimated tokens of verbatim history above which older turns are summarized.
    pub context_budget_tokens: u64,
    /// A loaded session with no subscriber and no active run is unloaded after this
    /// long untouched, so memory follows active sessions, not all sessions ever opened.
    pub idle_unload: std::time::Duration,
    /// Most runs one user may have active at once.
    pub max_runs_per_user: usize,
    /// Most prompts one session's queue may hold (see [`queue`]).
    pub max_queued: usize,
    /// What one user may hold: projects, sessions, queued prompts (see [`crate::caps`]).
    pub caps: crate::caps::UserCaps,
    /// Searches at once, per user and per node, and how long one may run (see
    /// [`crate::search_slots`]).
    pub search: crate::search_slots::SearchLimits,
    /// Most open session streams one user may hold at once (all dialects).
    pub max_streams_per_user: usize,
    /// This node's name in session leases ([`LOCAL_NODE`](crate::LOCAL_NODE) for a
    /// single process on its own store).
    pub node_id: String,
    /// How long a session lease lasts unrenewed: a dead node's runs are marked
    /// `node_lost` this long (plus a reaper tick) after it stopped.
    pub lease_ttl: std::time::Duration,
    /// Whether other nodes share the store. Then a start does not fail the store's
    /// `running` runs (other nodes may be running them); expired leases do that.
    pub shared_store: bool,
    /// Where users may register projects (see [`crate::roots`]).
    pub workspace_roots: crate::roots::WorkspaceRoots,
    /// Spool's data directory: never a project, never a tool's path, and `bash` runs
    /// sandboxed away from it.
    pub data_dir: Option<PathBuf>,
    /// The git poller (see [`crate::git`]); `None`: no project's git state is read.
    pub git: Option<crate::git::GitPolling>,
    /// Who records the project's files around steps that may change them (see
    /// [`crate::snapshots`]); `None`: no step snapshots.
    pub snapshots: Option<crate::snapshots::StepSnapshotting>,
    /// What decides expiry: session leases and their renewals, the reaper, approval
    /// expiry, idempotency claims and the idle-session janitor all read and sleep on it
    /// (see [`crate::clock`]). The system clock, unless a test moves time itself.
    pub clock: crate::Clock,
    /// Whether `/metrics` is recorded and served (see [`crate::metrics`]); `false`
    /// (`spool serve --no-metrics`) makes every recording a no-op.
    pub metrics: bool,
    /// How long a run's frame log is kept (see [`crate::run_log`]); `None` keeps it as
    /// long as its run.
    pub frame_log_retention: Option<std::time::Duration>,
    /// Whether runs' frames are logged at all (`[frame_log] enabled`); off, a run that
    /// left the buffer replays as a snapshot, and retention still prunes older logs.
    pub frame_log: bool,
    /// How long a session's views must settle before a `session.presence` frame
    /// announces who is on it (see `events/presence.rs`); `None` announces nothing (the
    /// counts are kept and read all the same). The binary uses [`PRESENCE_SETTLE`];
    /// the default is `None` so tests that read exact frame sequences see no frame
    /// that arrives on a timer.
    pub presence: Option<std::time::Duration>,
}

/// How long the views must settle before the binary announces presence.
pub const PRESENCE_SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            limits: EventLimits::default(),
            max_prompt_bytes: 256 * 1024,
            attachments: crate::attachments::AttachmentLimits::default(),
            max_turns: 50,
            max_answer_bytes: 4 << 20,
            rules: approval::default_rules(),
            approval_ttl: std::time::Duration::from_secs(24 * 3600),
            client_tool_ttl: std::time::Duration::from_secs(3600),
            approval_policy: ApprovalPolicy::Wait,
            guardrails: spool_protocol::Guardrails::default(),
            system_prompt: crate::context::SYSTEM_PROMPT.to_owned(),
            context_budget_tokens: 100_000,
            idle_unload: std::time::Duration::from_secs(600),
            max_runs_per_user: 16,
            max_queued: MAX_QUEUED,
            caps: crate::caps::UserCaps::default(),
            search: crate::search_slots::SearchLimits::default(),
            max_streams_per_user: 256,
            node_id: crate::leases::LOCAL_NODE.to_owned(),
            lease_ttl: std::time::Duration::from_secs(15),
            shared_store: false,
            workspace_roots: crate::roots::WorkspaceRoots::default(),
            data_dir: None,
            git: None,
            snapshots: None,
            clock: crate::Clock::system(),
            metrics: true,
            frame_log_retention: Some(std::time::Duration::from_secs(30 * 24 * 3600)),
            frame_log: true,
            presence: None,
        }
    }
}

/// A prompt and how its run should behave.
#[derive(Clone, Debug, Default)]
pub struct PromptInput {
    pub text: String,
    pub request_id: Option<String>,
    /// Overrides the server's approval policy for this run.
    pub approval_policy: Option<ApprovalPolicy>,
    pub on_disconnect: OnDisconnect,
    /// What the prompt does when a run is going: refused, queued, or it interrupts or
    /// rolls back that run (see [`Runs::submit`]). Each dialect picks its default.
    pub multitask: Multitask,
    /// Edits the turn at this user message index: the turns from there on are shelved
    /// as a branch and the prompt takes its place (see [`Runs::submit`]).
    pub at: Option<u64>,
    /// With `at`: the turn is asked again (its own text when `text` is empty), and the
    /// branch is a regenerate rather than an edit.
    pub regenerate: bool,
    /// Tools the client runs itself, offered to the model beside Spool's (see
    /// [`crate::client_tools`]); checked by [`Runs::submit`].
    pub client_tools: Vec<spool_protocol::api::ClientTool>,
    /// The caller's attachments sent with the prompt (see [`crate::attachments`]): the
    /// user message holds them before its text.
    pub files: Vec<spool_protocol::AttachmentId>,
}

/// What a prompt asks of its run, once it is checked: kept while it waits in the queue.
pub(crate) struct Wanted {
    pub text: String,
    pub request_id: Option<String>,
    pub approval_policy: Option<ApprovalPolicy>,
    pub on_disconnect: OnDisconnect,
    /// The prompt's client tools, checked (never queued: see [`Runs::submit`]).
    pub client_tools: Vec<spool_protocol::api::ClientTool>,
}

/// Longest client `requestId` accepted.
const MAX_REQUEST_ID: usize = 128;
/// Longest project or session name.
const MAX_NAME: usize = 200;
/// Longest project path.
const MAX_PATH: usize = 4096;
/// Default and largest page of the history endpoint.
pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 500;

#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub store: Arc<dyn Store>,
    /// What runs use (store, models, tools, leases …): handed to every run instead of
    /// the engine (see [`crate::run_env`]).
    pub env: Arc<RunEnv>,
    pub config: EngineConfig,
    local_user: UserId,
    pub lists: crate::lists::ListNotifier,
    /// The other nodes, when there are any (see [`crate::remote`]).
    pub remote: Option<Arc<Remote>>,
    /// The frame bus that carries session streams between nodes (see [`crate::framebus`]).
    pub frames: Option<Arc<dyn crate::FrameBus>>,
    /// The sessions loaded on this node (see [`crate::registry`]).
    pub sessions: Arc<crate::registry::Registry>,
    /// Deciding, expiring and cancelling approvals (see [`crate::approvals`]).
    pub approvals: Arc<Approvals>,
    /// The project roots and the data directory, resolved at start.
    pub fence: crate::roots::Fence,
    /// Open session streams per user, for the per-user limit.
    streams: crate::per_user::PerUser,
    /// Each user's session-creation rate on this node (see [`crate::caps`]).
    pub session_rate: crate::caps::SessionRate,
    /// Held while a project is checked against other users' and stored (see
    /// [`crate::overlap`]).
    pub registering: tokio::sync::Mutex<()>,
    /// The searches running on this node (see [`crate::search_slots`]).
    pub searches: crate::search_slots::SearchSlots,
    pub auth: Arc<crate::auth::Auth>,
    /// This node's session leases (see [`crate::leases`]).
    pub leases: Arc<crate::leases::Leases>,
    /// Published hub events (see [`crate::hub`]).
    pub hub: crate::hub::Hub,
    /// The git poller's latest reading of each loaded session (see [`crate::git`]).
    pub git: Arc<crate::git::Readings>,
    /// Set by [`Engine::stop_runs`]: a stopping node starts no queued prompt (its queue
    /// waits in the store for the next start, or another node).
    pub stopping: std::sync::atomic::AtomicBool,
    /// When the lease loop (the reaper) last finished a pass, for readiness.
    pub lease_loop: crate::readiness::LeaseLoopBeat,
    /// Where session streams log their runs' frames (see [`crate::run_log`]).
    pub run_log: crate::run_log::RunLog,
}

/// One counted stream of a user; releases its count when dropped. Session streams hold
/// one inside their [`Subscription`]; the server's other long-lived connections (list
/// streams, WebSockets, OpenCode `/event`) take one with [`Engine::stream_permit`] and
/// hold it for as long as they are open, so every kind counts against the same limit.
pub struct StreamPermit {
    _count: crate::per_user::Counted,
}

fn bus_error(error: crate::BusFailure) -> EngineError {
    // The bus's own words (which may name its server) stay in the log.
    tracing::warn!(%error, "cannot follow a session through the frame bus");
    EngineError::Unavailable {
        code: "bus_unavailable",
        message: "the event bus (Redis) cannot be reached; try again shortly".into(),
    }
}

/// The engine's answers to a followed session (see [`crate::events::Follower`]). Weak:
/// a session's tasks must not keep the engine alive.
struct EngineFollower {
    inner: std::sync::Weak<Inner>,
}

#[async_trait::async_trait]
impl crate::events::Follower for EngineFollower {
    async fn reload(&self, session: &SessionId) -> Option<SessionState> {
        let engine = Engine { inner: self.inner.upgrade()? };
        let stored = async {
            let record = engine.store().get_session(session).await?.ok_or(EngineError::NotFound("session"))?;
            engine.stored_view(record).await
        };
        match stored.await {
            Ok(state) => Some(state),
            Err(error) => {
                tracing::warn!(%session, %error, "cannot read a session's view from the store");
                None
            }
        }
    }

    fn runs_here(&self, session: &SessionId) -> bool {
        self.inner.upgrade().is_some_and(|inner| Engine { inner }.runs_here(session))
    }

    async fn request_snapshot(&self, session: &SessionId) -> bool {
        let Some(inner) = self.inner.upgrade() else { return false };
        Engine { inner }.request_snapshot(session).await
    }
}

/// How long a prompt waits for a settled run to finish publishing its last frames.
const SETTLING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Changes to a session; absent fields stay as they are.
#[derive(Clone, Debug, Default)]
pub struct SessionPatch {
    pub title: Option<String>,
    pub archived: Option<bool>,
    /// Replaces the session's own permission rules.
    pub permissions: Option<Vec<PermissionRule>>,
    /// Switches the session's model (a configured name); takes effect at the next run.
    pub model: Option<String>,
    /// Switches between `agent` and `plan`; a running run sees it at its next model call.
    pub mode: Option<spool_protocol::SessionMode>,
    /// Replaces the session's own guardrails (empty: none of its own), which may only
    /// tighten the server's; a run reads them when it starts or resumes.
    pub guardrails: Option<spool_protocol::Guardrails>,
}

/// Most permission rules one session may carry.
const MAX_SESSION_RULES: usize = 200;

impl Engine {
    /// Starts the engine: ensures the local user and marks runs a crash left `running`
    /// as `failed` with `server_restarted` (they cannot continue and must not re-run).
    pub async fn start(
        store: Arc<dyn Store>,
        models: Models,
        tools: ToolRegistry,
        config: EngineConfig,
    ) -> Result<Engine> {
        Self::start_node(store, models, tools, config, None, None).await
    }

    /// Like [`start`](Self::start), for one node of several: aborts reach the node
    /// running the session, and list notifications reach the pages on every node,
    /// through `cluster`; with `frames`, session streams are shared by every node too
    /// (a client follows a run on any node and resumes on any other).
    pub async fn start_clustered(
        store: Arc<dyn Store>,
        models: Models,
        tools: ToolRegistry,
        config: EngineConfig,
        cluster: Arc<dyn crate::Cluster>,
        frames: Option<Arc<dyn crate::FrameBus>>,
    ) -> Result<Engine> {
        Self::start_node(store, models, tools, config, Some(cluster), frames).await
    }

    async fn start_node(
        store: Arc<dyn Store>,
        models: Models,
        tools: ToolRegistry,
        config: EngineConfig,
        cluster: Option<Arc<dyn crate::Cluster>>,
        frames: Option<Arc<dyn crate::FrameBus>>,
    ) -> Result<Engine> {
        let local_user = store.ensure_user("local").await?;
        let metrics = crate::metrics::Metrics::new(config.metrics);
        let error = RunError {
            code: "server_restarted".into(),
            message: "the server stopped while this run was executing".into(),
        };
        // With a shared store, other nodes may be running those runs: their leases say.
        // Alone, a run whose acknowledged decision never reached its tool resumes.
        let decided = match config.shared_store {
            true => Vec::new(),
            false => crate::approvals::sort_decided(&*store, None, &metrics).await?.resume,
        };
        let keep: Vec<RunId> = decided.iter().map(|d| d.approval.run_id.clone()).collect();
        let failed = if config.shared_store { 0 } else { store.fail_running_runs(&error, now_ms(), &keep).await? };
        if failed > 0 {
            tracing::warn!(failed, "marked runs left running by a previous process as failed");
        }
        // A live ask of one of them waited inside a call that is gone: nobody will hear
        // its answer, so it must not stay pending.
        if !config.shared_store {
            crate::approvals::end_orphaned(&*store, None, now_ms()).await?;
        }
        // One process on its own store (it holds the data directory's lock): a claim
        // without a response was made by a process that is gone. Shared stores release
        // them by age, in the reaper.
        if !config.shared_store {
            crate::approvals::log_released(store.release_open_claims(time::Millis::MAX).await?);
        }
        let pending = store.all_pending_approvals().await?;
        let fence = crate::roots::Fence::build(&config.workspace_roots, config.data_dir.as_deref(), &*store).await?;
        let auth = crate::auth::Auth::new(store.clone(), config.node_id.clone());
        let clock = config.clock.clone();
        let leases = Arc::new(crate::leases::Leases::new(
            store.clone(),
            config.node_id.clone(),
            config.lease_ttl,
            clock.clone(),
        ));
        let hub = crate::hub::Hub::new(store.clone(), frames.as_ref().and_then(|f| f.hub_bus()));
        let sessions = Arc::new(crate::registry::Registry::new(clock.clone()));
        let data_dir = fence.data_dir().map(Into::into);
        let settings = RunSettings {
            prompt_file_bytes: config.attachments.prompt_file_bytes,
            max_turns: config.max_turns,
            system_prompt: config.system_prompt.clone(),
            rules: config.rules.clone(),
            context_budget_tokens: config.context_budget_tokens,
            approval_ttl: config.approval_ttl,
            client_tool_ttl: config.client_tool_ttl,
            max_answer_bytes: config.max_answer_bytes,
            guardrails: config.guardrails,
        };
        let node_id = config.node_id.clone();
        let (leases2, frames2) = (leases.clone(), frames.clone());
        let parts = RunParts {
            store: store.clone(),
            models,
            tools,
            data_dir,
            leases: leases2,
            frames: frames2,
            settings,
            node_id,
            clock,
            metrics,
            snapshots: config.snapshots.clone(),
        };
        let (env, expiries, settled) = RunEnv::new(parts);
        let approvals = Arc::new(Approvals::new(env.clone(), leases.clone()));
        let lists = match &cluster {
            Some(cluster) => crate::lists::ListNotifier::clustered(cluster.clone()),
            None => crate::lists::ListNotifier::new(),
        };
        let remote = cluster.map(|cluster| {
            Remote::start(RemoteParts {
                cluster,
                node_id: config.node_id.clone(),
                lease_ttl: config.lease_ttl,
                clock: config.clock.clone(),
                store: store.clone(),
                sessions: sessions.clone(),
                approvals: approvals.clone(),
                lists: lists.clone(),
            })
        });
        let searches = crate::search_slots::SearchSlots::new(&config.search);
        let run_log = crate::run_log::RunLog::start(store.clone());
        let engine = Engine {
            inner: Arc::new(Inner {
                run_log,
                store,
                approvals,
                env,
                config,
                local_user,
                lists,
                remote,
                frames,
                sessions,
                fence,
                streams: Default::default(),
                session_rate: crate::caps::SessionRate::default(),
                registering: tokio::sync::Mutex::new(()),
                searches,
                auth,
                leases,
                hub,
                git: Arc::default(),
                stopping: std::sync::atomic::AtomicBool::new(false),
                lease_loop: crate::readiness::LeaseLoopBeat::default(),
            }),
        };
        // The answers those runs were streaming join the history, marked with the failure.
        engine.spawn_expiries(expiries);
        match crate::drafts::commit_orphaned_drafts(&*engine.inner.store).await? {
            0 => {}
            kept => tracing::warn!(kept, "kept the partial answers of runs a stop or crash ended"),
        }
        // Interrupted runs stay interrupted across a restart; their approvals keep expiring.
        for approval in pending {
            engine.inner.env.arm_expiry(&approval);
        }
        for call in decided {
            let run = call.approval.run_id.clone();
            if let Err(e) = engine.resume_decided(call).await {
                tracing::error!(%run, error = %e, "could not resume a decided call after a restart");
            }
        }
        // Queues whose run a crash (or stop) ended start their next prompt now.
        engine.spawn_queue_runner(settled);
        if let Err(e) = engine.start_waiting_queues().await {
            tracing::warn!(error = %e, "could not start the queued prompts left by a previous process");
        }
        engine.spawn_janitor();
        engine.spawn_reaper();
        engine.spawn_frame_log_pruning();
        engine.spawn_snapshot_pruning();
        if let Some(polling) = engine.inner.config.git.clone() {
            let inner = &engine.inner;
            crate::git::spawn(Arc::downgrade(&inner.sessions), Arc::downgrade(&inner.git), polling);
        }
        engine.inner.auth.spawn_revocation_watch();
        Ok(engine)
    }

    /// A user's sessions: created, listed, changed, deleted, read and followed.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { engine: self }
    }

    /// Prompts and their runs: started, queued, aborted, decided at an approval, read
    /// and followed.
    pub fn runs(&self) -> Runs<'_> {
        Runs { engine: self }
    }

    /// Files sent with prompts (see [`crate::attachments`]).
    pub fn attachments(&self) -> crate::attachments::Attachments<'_> {
        crate::attachments::Attachments { engine: self }
    }

    /// A user's projects: registered, listed, renamed and deleted.
    pub fn projects(&self) -> Projects<'_> {
        Projects { engine: self }
    }

    /// Reverting a session to a message (its files and its turns) and undoing that.
    pub fn reverts(&self) -> Reverts<'_> {
        Reverts { engine: self }
    }

    /// The tool sources besides Spool's own tools (MCP servers): their state, and
    /// which a session is offered.
    pub fn tool_sources(&self) -> ToolSources<'_> {
        ToolSources { engine: self }
    }

    /// Tokens, logins, the "auth required" rule and cutting streams whose credential
    /// ended (see [`crate::auth`]).
    pub fn auth(&self) -> &Arc<crate::auth::Auth> {
        &self.inner.auth
    }

    /// Published hub events: the [`Broadcaster`](crate::hub::Broadcaster) and its subscribers.
    pub fn hub(&self) -> &crate::hub::Hub {
        &self.inner.hub
    }

    /// The user every request acts as while auth is off.
    pub fn local_user(&self) -> &UserId {
        &self.inner.local_user
    }

    /// The name `user` was created with (`spool token create --user NAME`; `local` while
    /// auth is off).
    pub async fn user_name(&self, user: &UserId) -> Result<String> {
        self.store().user_name(user).await?.ok_or(EngineError::NotFound("user"))
    }

    /// The default model's name.
    pub fn model_name(&self) -> String {
        self.inner.env.models.default_name().to_owned()
    }

    /// The list notifier behind `GET /api/workspaces/events`.
    pub fn lists(&self) -> &crate::lists::ListNotifier {
        &self.inner.lists
    }

    /// Whether this node can do its work now, check by check (see [`crate::readiness`]).
    pub async fn readiness(&self) -> crate::Readiness {
        let inner = &self.inner;
        let probes = crate::readiness::Probes {
            store: &*inner.store,
            frames: inner.frames.as_deref(),
            lease_ttl: inner.leases.ttl(),
            beat: &inner.lease_loop,
        };
        probes.run().await
    }

    /// The configured models.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.inner.env.models.list()
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.inner.store
    }

    /// The store, for what runs beside the engine and keeps records of its own in it
    /// (Web Push's subscriptions and shared keys, issue 41).
    pub fn store_handle(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// This node's id (`--node-id`): whose lease a claim holds (the outbox's, issue 41).
    pub fn node_id(&self) -> &str {
        &self.inner.config.node_id
    }

    /// Counts one more open stream of `owner` until the permit is dropped; past
    /// `max_streams_per_user` it is a 429 `too_many_streams`.
    pub fn stream_permit(&self, owner: &UserId) -> Result<StreamPermit> {
        let limit = self.inner.config.max_streams_per_user;
        match self.inner.streams.take(owner, limit) {
            Some(count) => Ok(StreamPermit { _count: count }),
            None => Err(EngineError::TooMany {
                code: "too_many_streams",
                message: format!("you already have {limit} open streams; close one first"),
            }),
        }
    }

    /// This engine's metrics (see [`crate::metrics`]): the server records HTTP requests,
    /// connections and open streams in them.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.env.metrics
    }

    /// `/metrics`: the OpenMetrics text, with the gauges read from the engine's state
    /// now (loaded sessions, active runs, list streams, bus lag).
    pub fn metrics_text(&self) -> String {
        let sessions = self.inner.sessions.all();
        let (mut running, mut parked, mut lag) = (0, 0, 0);
        for loaded in &sessions {
            match loaded.active() {
                Some(handle) if handle.interrupted.is_some() => parked += 1,
                Some(_) => running += 1,
                None => {}
            }
            lag += loaded.events.bus_lag().unwrap_or(0);
        }
        let metrics = self.metrics();
        metrics.set_scraped(crate::metrics::Scraped {
            loaded_sessions: sessions.len(),
            running,
            parked,
            list_streams: self.inner.lists.subscriber_count(),
            bus_lag: self.inner.frames.as_ref().map(|_| (self.inner.config.node_id.as_str(), lag)),
            bus_rejected: self.inner.frames.as_ref().map_or(0, |bus| bus.rejected_messages()),
        });
        metrics.encode()
    }

    pub(crate) fn active_runs_of(&self, owner: &UserId) -> usize {
        let sessions = self.inner.sessions.all();
        sessions.iter().filter(|l| l.active().is_some() && l.events.read(|s| &s.session.owner_id == owner)).count()
    }

    /// Unloads sessions nobody watches or runs, once they have been idle for
    /// `idle_unload`, looking every quarter of it on the engine's clock. Holds only a
    /// weak reference, so it ends with the engine.
    fn spawn_janitor(&self) {
        let idle = self.inner.config.idle_unload;
        let every = (idle / 4).max(std::time::Duration::from_millis(50));
        self.spawn_every(every, move |engine| async move {
            engine.unload_idle(idle);
        });
    }

    /// Runs `pass` every `every` on the engine's clock, the first at once (the janitor,
    /// the lease reaper). The task holds the engine weakly, so it ends with the engine.
    pub(crate) fn spawn_every<F, Pass>(&self, every: std::time::Duration, pass: Pass)
    where
        Pass: Fn(Engine) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let weak = Arc::downgrade(&self.inner);
        let clock = self.inner.config.clock.clone();
        let mut ticks = clock.ticks(clock.now_ms(), every);
        tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                pass(Engine { inner }).await;
            }
        });
    }

    /// One janitor pass: unloads the sessions idle for `idle` or longer on the engine's
    /// clock; returns how many.
    pub fn unload_idle(&self, idle: std::time::Duration) -> usize {
        let cutoff = self.inner.config.clock.now_ms().saturating_sub(crate::clock::millis(idle));
        self.inner.sessions.unload_idle(cutoff)
    }

    /// Whether a person is looking at `session` right now, on any node: a view that can
    /// answer its approvals, on a page that is visible. What a notification sent only
    /// to someone away (`[push] when = "away"`) asks before it goes. Reads the bus when
    /// clustered; loads nothing (a session not loaded here has no views here).
    pub async fn has_visible_answerer(&self, session: &SessionId) -> bool {
        let here = self.inner.sessions.get(session).map(|loaded| loaded.events.watchers_here()).unwrap_or_default();
        if here.visible > 0 {
            return true;
        }
        self.inner.env.watchers_elsewhere(session).await.visible > 0
    }

    /// Number of sessions held in memory.
    pub fn loaded_sessions(&self) -> usize {
        self.inner.sessions.len()
    }

    /// For a graceful shutdown: ends every run executing here as `failed` with
    /// `server_stopped` (its lease released, so another node may run the session at
    /// once), waiting up to `within` for them to settle. Runs parked at an approval
    /// stay parked. Returns how many runs were stopped.
    pub async fn stop_runs(&self, within: std::time::Duration) -> usize {
        self.inner.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        let handles = self.inner.sessions.running();
        let error =
            RunError { code: "server_stopped".into(), message: "the server running this run was stopped".into() };
        for handle in &handles {
            let _ = handle.failed_as.set(error.clone());
            handle.cancel.cancel();
        }
        let settled = futures::future::join_all(handles.iter().map(|h| h.finished.cancelled()));
        if tokio::time::timeout(within, settled).await.is_err() {
            tracing::warn!("some runs did not settle before the shutdown deadline");
        }
        handles.len()
    }

    /// Ends every open stream (session and list streams, and with the list notifier the
    /// streams that watch it), for a graceful shutdown. Runs still executing are left
    /// to be marked `server_restarted` at the next start.
    pub fn close_streams(&self) {
        self.lists().close();
        for loaded in self.inner.sessions.all() {
            loaded.events.close(Ended::Shutdown);
        }
    }
}

/// Cancels the session's active run, if any, and waits until it has settled.
async fn stop_active(loaded: &Loaded) {
    if let Some(active) = loaded.active() {
        active.cancel.cancel();
        active.finished.cancelled().await;
    }
}

fn check_name(raw: &str, field: &str) -> Result<String> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(EngineError::invalid(
            "invalid_name",
            format!("{field} must be 1 to {MAX_NAME} characters without control characters"),
        ));
    }
    Ok(name.to_owned())
}

pub(crate) fn ulid_body() -> String {
    RunId::new().as_str()[4..].to_owned()
}
