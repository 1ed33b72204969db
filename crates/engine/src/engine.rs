//! The `Engine`: the one handle the server holds. It owns the loaded sessions (each with
//! its `SessionEvents`), accepts prompts, starts and aborts runs, and answers queries.
//!
//! Every method takes the acting user and treats another user's record exactly like a
//! missing one (`NotFound`), so a later auth layer only has to supply the user.

use crate::ToolRegistry;
use crate::approvals::{Approvals, DecisionInput, DecisionOutcome, DecisionTarget};
use crate::error::{EngineError, Result};
use crate::events::{Ended, EventLimits, RunAfter, RunStart, SessionEvents, Start, Subscription};
use crate::leases::LeaseGuard;
use crate::models::{ModelInfo, Models};
use crate::queue::Submitted;
use crate::registry::Unused;
use crate::remote::{Remote, RemoteParts};
use crate::run::RunTask;
use crate::run_env::{Expiries, RunEnv, RunParts, RunSettings};
use crate::session::{ActiveHandle, Loaded, READ_YOUR_WRITES};
use crate::store::DecidedCall;
use crate::store::{RunInsert, Store};
use crate::view;
use spool_protocol::api::{
    ApprovalPolicy, MessagePage, OnDisconnect, PromptAccepted, PromptQueued, SessionDetail, SessionInfo,
};
use spool_protocol::approval;
use spool_protocol::frame::{ActiveRun, FrameBody, SNAPSHOT_USER_ROUNDS, SessionState};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Tunable limits and policies of the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub limits: EventLimits,
    /// Largest prompt text accepted, in bytes.
    pub max_prompt_bytes: usize,
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
    /// Most prompts one session's queue may hold (see [`crate::queue`]).
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
    /// What decides expiry: session leases and their renewals, the reaper, approval
    /// expiry, idempotency claims and the idle-session janitor all read and sleep on it
    /// (see [`crate::clock`]). The system clock, unless a test moves time itself.
    pub clock: crate::Clock,
    /// Whether `/metrics` is recorded and served (see [`crate::metrics`]); `false`
    /// (`spool serve --no-metrics`) makes every recording a no-op.
    pub metrics: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            limits: EventLimits::default(),
            max_prompt_bytes: 256 * 1024,
            max_turns: 50,
            max_answer_bytes: 4 << 20,
            rules: approval::default_rules(),
            approval_ttl: std::time::Duration::from_secs(24 * 3600),
            approval_policy: ApprovalPolicy::Wait,
            system_prompt: crate::context::SYSTEM_PROMPT.to_owned(),
            context_budget_tokens: 100_000,
            idle_unload: std::time::Duration::from_secs(600),
            max_runs_per_user: 16,
            max_queued: crate::queue::MAX_QUEUED,
            caps: crate::caps::UserCaps::default(),
            search: crate::search_slots::SearchLimits::default(),
            max_streams_per_user: 256,
            node_id: crate::leases::LOCAL_NODE.to_owned(),
            lease_ttl: std::time::Duration::from_secs(15),
            shared_store: false,
            workspace_roots: crate::roots::WorkspaceRoots::default(),
            data_dir: None,
            git: None,
            clock: crate::Clock::system(),
            metrics: true,
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
    /// When a run is going: wait in the session's queue instead of being refused
    /// (see [`Engine::submit`]).
    pub queue: bool,
}

/// What a prompt asks of its run, once it is checked: kept while it waits in the queue.
pub(crate) struct Wanted {
    pub text: String,
    pub request_id: Option<String>,
    pub approval_policy: Option<ApprovalPolicy>,
    pub on_disconnect: OnDisconnect,
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
    streams: Arc<Mutex<HashMap<UserId, usize>>>,
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
    pub git: crate::git::Readings,
    /// Set by [`Engine::stop_runs`]: a stopping node starts no queued prompt (its queue
    /// waits in the store for the next start, or another node).
    pub stopping: std::sync::atomic::AtomicBool,
    /// When the lease loop (the reaper) last finished a pass, for readiness.
    pub lease_loop: crate::readiness::LeaseLoopBeat,
}

/// One counted stream of a user; releases its count when dropped. Session streams hold
/// one inside their [`Subscription`]; the server's other long-lived connections (list
/// streams, WebSockets, OpenCode `/event`) take one with [`Engine::stream_permit`] and
/// hold it for as long as they are open, so every kind counts against the same limit.
pub struct StreamPermit {
    counts: Arc<Mutex<HashMap<UserId, usize>>>,
    user: UserId,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.user);
            }
        }
    }
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
            max_turns: config.max_turns,
            system_prompt: config.system_prompt.clone(),
            rules: config.rules.clone(),
            context_budget_tokens: config.context_budget_tokens,
            approval_ttl: config.approval_ttl,
            max_answer_bytes: config.max_answer_bytes,
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
        };
        let (env, expiries, settled) = RunEnv::new(parts);
        let approvals = Arc::new(Approvals::new(env.clone(), sessions.clone(), leases.clone()));
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
        let engine = Engine {
            inner: Arc::new(Inner {
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
                streams: Arc::new(Mutex::new(HashMap::new())),
                session_rate: crate::caps::SessionRate::default(),
                registering: tokio::sync::Mutex::new(()),
                searches,
                auth,
                leases,
                hub,
                git: crate::git::Readings::default(),
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
        if let Some(polling) = engine.inner.config.git.clone() {
            crate::git::spawn(Arc::downgrade(&engine.inner), polling);
        }
        engine.inner.auth.spawn_revocation_watch();
        Ok(engine)
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

    /// Records a durable read receipt: the person has read the session up to `index`.
    /// Receipts only move forward; pages are told so unread markers update.
    pub async fn mark_read(&self, owner: &UserId, id: &SessionId, index: u64) -> Result<Session> {
        let loaded = self.load(owner, id).await?;
        let mut session = loaded.events.read(|s| s.session.clone());
        let total = loaded.events.read(|s| s.total);
        if index >= total {
            return Err(EngineError::invalid(
                "invalid_index",
                format!("index {index} is past the session's last message ({total} messages)"),
            ));
        }
        if session.read_index.is_some_and(|r| r >= index) {
            return Ok(session);
        }
        session.read_index = Some(index);
        self.store().update_session(&session).await?;
        let published = session.clone();
        loaded.events.publish(move |s| {
            s.session = published;
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        Ok(session)
    }

    /// The configured models.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.inner.env.models.list()
    }

    pub(crate) fn store(&self) -> &dyn Store {
        &*self.inner.store
    }

    // ---- projects -------------------------------------------------------------------

    /// The canonical directory `path` names, if `owner` may have a project there: under
    /// their project roots (403 `outside_roots`, the same for existing and missing
    /// paths) and clear of the data directory (403 `data_dir`); see [`crate::roots`].
    pub async fn project_dir(&self, owner: &UserId, path: &str) -> Result<String> {
        if path.trim().is_empty() || path.len() > MAX_PATH {
            return Err(EngineError::invalid("invalid_path", format!("path must be 1 to {MAX_PATH} bytes")));
        }
        let auth_on = self.inner.auth.auth_required().await?;
        let engine = self.clone();
        let (user, requested) = (owner.clone(), path.to_owned());
        let canonical =
            tokio::task::spawn_blocking(move || engine.inner.fence.place_project(&user, auth_on, &requested))
                .await
                .map_err(|e| EngineError::invalid("invalid_path", format!("resolving the path failed: {e}")))??;
        Ok(canonical
            .to_str()
            .ok_or_else(|| EngineError::invalid("invalid_path", "the path is not valid UTF-8"))?
            .to_owned())
    }

    /// True when `active` is a run whose settlement is already stored and that is only
    /// publishing its last frames: a client that saw it settle (its record, a `done`
    /// event) may prompt at once, so the prompt waits for it (briefly) instead of
    /// answering `session_busy` for a run that is over.
    async fn settles_now(&self, active: &ActiveHandle) -> Result<bool> {
        let stored = self.store().get_run(&active.run_id).await?;
        if !stored.is_some_and(|run| run.status.is_terminal()) {
            return Ok(false);
        }
        Ok(tokio::time::timeout(SETTLING_GRACE, active.finished.cancelled()).await.is_ok())
    }

    pub async fn create_project(&self, owner: &UserId, path: &str, name: Option<String>) -> Result<Project> {
        let canonical = self.project_dir(owner, path).await?;
        // Held until the project is stored: two users racing for one directory here
        // cannot both pass the check (see [`crate::overlap`]), nor one user's racing
        // registrations pass the cap together.
        let _registering = self.inner.registering.lock().await;
        let caps = &self.inner.config.caps;
        if self.store().list_projects(owner).await?.len() >= caps.max_projects {
            return Err(crate::caps::projects_full(caps));
        }
        self.check_claims(owner, &canonical, self.inner.auth.auth_required().await?).await?;
        let name = match name {
            Some(n) => check_name(&n, "name")?,
            None => std::path::Path::new(&canonical)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| canonical.clone()),
        };
        let now = now_ms();
        let project = Project {
            id: ProjectId::new(),
            owner_id: owner.clone(),
            name,
            dir: crate::roots::dir_identity(std::path::Path::new(&canonical)),
            path: canonical,
            created_at: now,
            updated_at: now,
        };
        self.store().insert_project(&project).await.map_err(|e| match e {
            crate::StoreError::Conflict(_) => EngineError::Conflict {
                code: "project_exists",
                message: format!("the directory {:?} is already registered as a project", project.path),
            },
            other => other.into(),
        })?;
        self.inner.lists.projects_changed(&project.owner_id, &project.id);
        Ok(project)
    }

    pub async fn list_projects(&self, owner: &UserId) -> Result<Vec<Project>> {
        Ok(self.store().list_projects(owner).await?)
    }

    pub async fn project(&self, owner: &UserId, id: &ProjectId) -> Result<Project> {
        match self.store().get_project(id).await? {
            Some(p) if &p.owner_id == owner => Ok(p),
            _ => Err(EngineError::NotFound("project")),
        }
    }

    pub async fn rename_project(&self, owner: &UserId, id: &ProjectId, name: &str) -> Result<Project> {
        let mut project = self.project(owner, id).await?;
        project.name = check_name(name, "name")?;
        project.updated_at = now_ms();
        self.store().update_project(&project).await?;
        self.inner.lists.projects_changed(&project.owner_id, &project.id);
        Ok(project)
    }

    /// Deletes a project and, with it, all its sessions, their messages and runs. Active
    /// runs are aborted first and open streams end. Files on disk are never touched.
    pub async fn delete_project(&self, owner: &UserId, id: &ProjectId) -> Result<()> {
        let project = self.project(owner, id).await?;
        let mut doomed = self.store().list_sessions(&project.id, false).await?;
        doomed.extend(self.store().list_sessions(&project.id, true).await?);
        let loaded: Vec<(SessionId, Arc<Loaded>)> = (self.inner.sessions.all().into_iter())
            .filter(|l| l.events.read(|s| s.session.project_id == project.id))
            .map(|l| (l.events.session_id().clone(), l))
            .collect();
        // Under their control locks, so a stopped run's queue cannot start its next prompt
        // before the delete takes the queues with the sessions.
        let mut controls = Vec::with_capacity(loaded.len());
        for (_, l) in &loaded {
            controls.push(l.control.lock().await);
            stop_active(l).await;
        }
        // Delete first, then drop what is in memory: a stream opened meanwhile finds the
        // session gone instead of loading it back.
        let deleted = self.store().delete_project(&project.id).await;
        drop(controls);
        for (session_id, l) in loaded {
            self.unload(&session_id, &l).await;
        }
        // Sessions deleted before a failure stay deleted: tell pages either way.
        for session in doomed {
            self.inner.lists.change(
                &project.owner_id,
                crate::lists::Change::SessionDeleted { session: session.id, project: project.id.clone() },
            );
        }
        self.inner.lists.projects_changed(&project.owner_id, &project.id);
        deleted?;
        Ok(())
    }

    // ---- sessions -------------------------------------------------------------------

    pub async fn create_session(
        &self,
        owner: &UserId,
        project_id: &ProjectId,
        title: Option<String>,
    ) -> Result<Session> {
        let project = self.project(owner, project_id).await?;
        let title = title.map(|t| check_name(&t, "title")).transpose()?;
        self.admit_session(owner).await?;
        let now = now_ms();
        let session = Session {
            id: SessionId::new(),
            project_id: project.id,
            owner_id: owner.clone(),
            title_set: title.is_some(),
            title: title.unwrap_or_default(),
            archived: false,
            permissions: Vec::new(),
            model: None,
            mode: Default::default(),
            read_index: None,
            created_at: now,
            updated_at: now,
        };
        self.store().insert_session(&session).await?;
        self.inner.lists.change(
            &session.owner_id,
            crate::lists::Change::SessionCreated { session: session.id.clone(), project: session.project_id.clone() },
        );
        Ok(session)
    }

    /// Whether `owner` may create one more session now: within the creation rate and
    /// under the cap on sessions not archived (see [`crate::caps`]).
    async fn admit_session(&self, owner: &UserId) -> Result<()> {
        let caps = &self.inner.config.caps;
        if self.store().count_sessions(owner, false).await? >= caps.max_sessions as u64 {
            return Err(crate::caps::sessions_full(caps));
        }
        self.inner.session_rate.take(caps, owner, self.inner.config.clock.now_ms())
    }

    /// The session a client named `name` (an AI SDK chat id) before, if any (see
    /// [`named_session`](Self::named_session)).
    pub async fn session_named(&self, owner: &UserId, name: &str) -> Result<Option<SessionId>> {
        use crate::store::IdempotencyClaim;
        let scope = name_scope(owner);
        match self.store().claim_idempotency(&scope, name, now_ms()).await? {
            IdempotencyClaim::Done(answer) => Ok(Some(named(name, answer)?)),
            IdempotencyClaim::InProgress => Err(name_in_progress(name)),
            IdempotencyClaim::Claimed => {
                self.store().release_idempotency(&scope, name).await?;
                Ok(None)
            }
        }
    }

    /// The session a client names with a key of its own (an AI SDK chat id): the one
    /// that key named before, or — on first use — a new session in `project`,
    /// remembered for the key. The pair is kept durably, once, in the store's
    /// idempotency records (scope `session-name:<owner>`), so concurrent first uses
    /// agree on one session; a use that races one still creating gets a 409
    /// `name_in_progress` to retry. Returns the session and whether this call made it.
    pub async fn named_session(&self, owner: &UserId, name: &str, project: &ProjectId) -> Result<(SessionId, bool)> {
        use crate::store::IdempotencyClaim;
        let scope = name_scope(owner);
        match self.store().claim_idempotency(&scope, name, now_ms()).await? {
            IdempotencyClaim::Done(answer) => Ok((named(name, answer)?, false)),
            IdempotencyClaim::InProgress => Err(name_in_progress(name)),
            IdempotencyClaim::Claimed => match self.create_session(owner, project, None).await {
                Ok(session) => {
                    self.store().complete_idempotency(&scope, name, session.id.as_str()).await?;
                    Ok((session.id, true))
                }
                Err(e) => {
                    self.store().release_idempotency(&scope, name).await?;
                    Err(e)
                }
            },
        }
    }

    pub async fn list_sessions(
        &self,
        owner: &UserId,
        project_id: &ProjectId,
        archived: bool,
    ) -> Result<Vec<SessionInfo>> {
        let project = self.project(owner, project_id).await?;
        let sessions = self.store().list_sessions(&project.id, archived).await?;
        let waiting = self.waiting_among(&sessions).await?;
        Ok(sessions.into_iter().map(|session| self.session_info(session, &waiting)).collect())
    }

    /// Which of `sessions` wait for a person, from the store's pending approvals (so a
    /// run parked before a restart, or on another node, counts too): one query a project.
    pub(crate) async fn waiting_among<'a>(
        &self,
        sessions: impl IntoIterator<Item = &'a Session>,
    ) -> Result<HashSet<SessionId>> {
        let projects: HashSet<&ProjectId> = sessions.into_iter().map(|s| &s.project_id).collect();
        let mut waiting = HashSet::new();
        for project in projects {
            waiting.extend(self.store().waiting_sessions(project).await?);
        }
        Ok(waiting)
    }

    /// A session as lists show it; `waiting` from [`Engine::waiting_among`].
    pub(crate) fn session_info(&self, session: Session, waiting: &HashSet<SessionId>) -> SessionInfo {
        SessionInfo { status: self.status_of(&session.id), waiting: waiting.contains(&session.id), session }
    }

    /// The project's sessions with a run that ended after `after` (ms), latest first, at
    /// most `limit`: what a client that was away since then has not seen end.
    pub async fn sessions_ended_after(
        &self,
        owner: &UserId,
        project_id: &ProjectId,
        after: spool_protocol::time::Millis,
        limit: u32,
    ) -> Result<Vec<SessionId>> {
        let project = self.project(owner, project_id).await?;
        Ok(self.store().sessions_ended_after(&project.id, after, limit).await?)
    }

    pub(crate) fn status_of(&self, id: &SessionId) -> SessionStatus {
        match self.inner.sessions.get(id).and_then(|l| l.active()) {
            Some(_) => SessionStatus::Busy,
            None => SessionStatus::Idle,
        }
    }

    pub async fn session(&self, owner: &UserId, id: &SessionId) -> Result<SessionDetail> {
        let loaded = self.load(owner, id).await?;
        // Bus mode: what this node changed shows in what it answers.
        let (seq, state) = loaded.events.settled_state(READ_YOUR_WRITES).await;
        let stream_id = loaded.events.stream_id();
        Ok(SessionDetail {
            session: state.session.clone(),
            status: state.status,
            git: self.inner.git.get(id, &stream_id),
            stream_id,
            seq,
            state,
        })
    }

    pub async fn update_session(&self, owner: &UserId, id: &SessionId, patch: SessionPatch) -> Result<Session> {
        let loaded = self.load(owner, id).await?;
        let mut session = loaded.events.read(|s| s.session.clone());
        if let Some(title) = patch.title {
            session.title = check_name(&title, "title")?;
            session.title_set = true;
        }
        if let Some(archived) = patch.archived {
            // Taking a session out of the archive counts against the cap like a new one.
            if session.archived && !archived {
                let caps = &self.inner.config.caps;
                if self.store().count_sessions(owner, false).await? >= caps.max_sessions as u64 {
                    return Err(crate::caps::sessions_full(caps));
                }
            }
            session.archived = archived;
        }
        if let Some(mode) = patch.mode {
            session.mode = mode;
        }
        if let Some(model) = patch.model {
            if self.inner.env.models.get(&model).is_none() {
                let known: Vec<String> = self.inner.env.models.list().into_iter().map(|m| m.name).collect();
                return Err(EngineError::invalid(
                    "unknown_model",
                    format!("no model named {model:?} is configured; configured: {}", known.join(", ")),
                ));
            }
            session.model = Some(model);
        }
        if let Some(rules) = patch.permissions {
            if rules.len() > MAX_SESSION_RULES
                || rules.iter().any(|r| r.tool.is_empty() || r.tool.len() > 200 || r.pattern.len() > 1000)
            {
                return Err(EngineError::invalid(
                    "invalid_permissions",
                    format!(
                        "at most {MAX_SESSION_RULES} rules, each with a tool name of 1 to 200 bytes and a pattern of at most 1000"
                    ),
                ));
            }
            session.permissions = rules;
        }
        session.updated_at = now_ms();
        self.store().update_session(&session).await?;
        let published = session.clone();
        loaded.events.publish(move |state| {
            state.session = published;
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        Ok(session)
    }

    /// Deletes a session with its messages and runs; an active run is aborted first and
    /// open streams end.
    pub async fn delete_session(&self, owner: &UserId, id: &SessionId) -> Result<()> {
        let loaded = self.load(owner, id).await?;
        let project = loaded.events.read(|s| s.session.project_id.clone());
        // Under the control lock, so the stopped run's queue cannot start its next prompt
        // before the delete takes the queue with the session.
        let control = loaded.control.lock().await;
        stop_active(&loaded).await;
        // Delete first, then unload: a stream opened meanwhile finds the session gone
        // instead of loading it back into memory.
        let deleted = self.store().delete_session(id).await;
        drop(control);
        self.unload(id, &loaded).await;
        self.inner.lists.change(owner, crate::lists::Change::SessionDeleted { session: id.clone(), project });
        deleted?;
        Ok(())
    }

    /// Drops a deleted session from memory; its streams end saying so.
    async fn unload(&self, id: &SessionId, loaded: &Arc<Loaded>) {
        stop_active(loaded).await;
        let _control = loaded.control.lock().await;
        loaded.events.close(Ended::SessionDeleted);
        self.inner.sessions.remove(id);
    }

    pub async fn messages(
        &self,
        owner: &UserId,
        id: &SessionId,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<MessagePage> {
        let limit = limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(EngineError::invalid("invalid_limit", format!("limit must be between 1 and {MAX_PAGE}")));
        }
        let session = self.owned_session(owner, id).await?;
        let messages = self.store().list_messages(&session.id, before, limit).await?;
        let total = self.store().count_messages(&session.id).await?;
        Ok(MessagePage { messages, total })
    }

    /// The session's memory: confirmed facts and the compaction summary.
    pub async fn memory(&self, owner: &UserId, id: &SessionId) -> Result<SessionMemory> {
        let session = self.owned_session(owner, id).await?;
        Ok(self.store().get_memory(&session.id).await?)
    }

    /// The rules that decide a session's tool calls: the server's (built-in defaults, then
    /// the config file; their deny is final) and the session's own ("Always allow" and
    /// `PATCH`), each in the order they are checked.
    pub async fn permissions(
        &self,
        owner: &UserId,
        id: &SessionId,
    ) -> Result<(Vec<PermissionRule>, Vec<PermissionRule>)> {
        let session = self.owned_session(owner, id).await?;
        Ok((self.inner.env.settings.rules.clone(), session.permissions))
    }

    /// Removes the session's rule at `index` (Undo in the Rules panel), which must still
    /// be a rule for `tool` with `action`: a tab showing an older list gets a conflict
    /// instead of removing whatever rule is at that place now. Under the session's
    /// control lock, like the "Always allow" a decision adds, and the store removes it
    /// in one locked step (see [`Store::remove_session_rule`]), so a rule added at the
    /// same moment — here or on another node — stays. Returns the rules as
    /// [`Engine::permissions`] does, the session's as they are now.
    pub async fn remove_permission(
        &self,
        owner: &UserId,
        id: &SessionId,
        index: usize,
        tool: &str,
        action: PermissionAction,
    ) -> Result<(Vec<PermissionRule>, Vec<PermissionRule>)> {
        let loaded = self.load(owner, id).await?;
        let _control = loaded.control.lock().await;
        let now = now_ms();
        let rules = match self.store().remove_session_rule(id, index, tool, action, now).await? {
            crate::RuleRemoval::Removed(rules) => rules,
            crate::RuleRemoval::NoSession => return Err(EngineError::NotFound("session")),
            crate::RuleRemoval::Mismatch(None) => return Err(EngineError::NotFound("permission rule")),
            crate::RuleRemoval::Mismatch(Some(there)) => {
                return Err(EngineError::Conflict {
                    code: "rule_changed",
                    message: format!(
                        "the session's rule {index} is now {:?} {} (not {tool:?} {}): reload the rules and try again",
                        there.tool,
                        action_name(there.action),
                        action_name(action)
                    ),
                });
            }
        };
        let published = rules.clone();
        loaded.events.publish(move |state| {
            state.session.permissions = published;
            state.session.updated_at = now;
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        Ok((self.inner.env.settings.rules.clone(), rules))
    }

    /// A person confirms a fact; later model calls see it among the confirmed facts.
    pub async fn confirm_fact(&self, owner: &UserId, id: &SessionId, text: &str) -> Result<SessionMemory> {
        let text = text.trim();
        if text.is_empty()
            || text.chars().count() > crate::context::MAX_FACT_CHARS
            || text.chars().any(char::is_control)
        {
            return Err(EngineError::invalid(
                "invalid_fact",
                format!("a fact is 1 to {} characters on one line", crate::context::MAX_FACT_CHARS),
            ));
        }
        let loaded = self.load(owner, id).await?;
        // Under the control lock so it cannot interleave with a run's own fact writes
        // at a step boundary; a running run picks it up at its next load.
        let _control = loaded.control.lock().await;
        let mut memory = self.store().get_memory(id).await?;
        crate::context::remember(&mut memory, text, FactSource::User, now_ms());
        self.store().put_memory(id, owner, &memory).await?;
        Ok(memory)
    }

    /// The session record, checked for ownership, without loading it.
    pub(crate) async fn owned_session(&self, owner: &UserId, id: &SessionId) -> Result<Session> {
        match self.store().get_session(id).await? {
            Some(s) if &s.owner_id == owner => Ok(s),
            _ => Err(EngineError::NotFound("session")),
        }
    }

    /// Loads a session into memory (once) and checks ownership.
    pub(crate) async fn load(&self, owner: &UserId, id: &SessionId) -> Result<Arc<Loaded>> {
        // With a shared store and no frame bus, other nodes write to sessions this node
        // holds unseen: a view nobody here uses is read again from the store. (A frame
        // bus keeps views live.)
        let unused = match self.inner.config.shared_store && self.inner.frames.is_none() {
            true => Unused::Reload,
            false => Unused::Keep,
        };
        let existing = self.inner.sessions.touch(id, unused);
        if let Some(loaded) = existing {
            return if loaded.events.read(|s| &s.session.owner_id == owner) {
                Ok(loaded)
            } else {
                Err(EngineError::NotFound("session"))
            };
        }
        let session = self.owned_session(owner, id).await?;
        let project = self.store().get_project(&session.project_id).await?.ok_or(EngineError::NotFound("session"))?;
        // Bus mode: listen before reading the store, so every change after the read
        // arrives as a frame (one that the read already has folds in harmlessly).
        let opened = match &self.inner.frames {
            Some(bus) => Some(crate::events::Opened::open(&**bus, id).await.map_err(bus_error)?),
            None => None,
        };
        // A run parked at an approval (perhaps before a restart) keeps the session busy.
        let interrupted = self.store().interrupted_run(id).await?;
        let pending = self.store().pending_approvals(id).await?;
        // With a shared store, "no pending approval" may also mean another node has just
        // won the decision and is restarting the run: its lease says so. An expired
        // lease is the reaper's to settle (it resumes a decided call that never ran).
        let resuming_elsewhere = match self.inner.config.shared_store {
            true => self.store().get_lease(id).await?.is_some(),
            false => false,
        };
        if let Some(mut run) = interrupted.clone().filter(|_| pending.is_empty() && !resuming_elsewhere) {
            // The process stopped between taking a decision and restarting the run: the
            // decision is recorded, the continuation is lost, and re-running the tool
            // could repeat a side effect. Settle it as failed, like a crashed run.
            let now = now_ms();
            run.status = RunStatus::Failed;
            run.updated_at = now;
            run.ended_at = Some(now);
            run.error = Some(RunError {
                code: "server_restarted".into(),
                message: "the server stopped while this run was resuming from an approval".into(),
            });
            self.store().update_run(&run).await?;
        }
        let state = self.stored_view(session).await?;
        let handle = match (&state.active_run, state.pending_approvals.first()) {
            (Some(run), Some(approval)) => {
                let mut h = ActiveHandle::new(run.run_id.clone());
                h.interrupted = Some(approval.id.clone());
                h.finished.cancel();
                Some(h)
            }
            _ => None,
        };
        let (limits, lists) = (self.inner.config.limits, self.inner.lists.clone());
        let metrics = self.inner.env.metrics.clone();
        let events = match (&self.inner.frames, opened) {
            (Some(bus), Some(opened)) => {
                let follower = Arc::new(EngineFollower { inner: Arc::downgrade(&self.inner) });
                let node = self.inner.config.node_id.clone();
                let events =
                    SessionEvents::followed(state, limits, lists, metrics, bus.clone(), follower.clone(), opened, node);
                // A run on another node has streamed text the store does not hold yet.
                events.catch_up_with_runner(&*follower).await;
                events
            }
            _ => SessionEvents::observed(id.clone(), state, limits, lists, metrics),
        };
        if let Some(count) = self.parked_count(handle.as_ref()).await {
            events.resume_run_count(count);
        }
        let fresh = Arc::new(Loaded {
            events,
            root_id: project.dir,
            root: PathBuf::from(project.path),
            control: tokio::sync::Mutex::new(()),
            active: Mutex::new(handle),
            touched: std::sync::atomic::AtomicI64::new(self.inner.config.clock.now_ms()),
        });
        // Two concurrent loads: the first insert wins and both use it.
        Ok(self.inner.sessions.insert(id, fresh))
    }

    /// The run-stream counter of a run parked at an approval, from the sequence its
    /// checkpoint keeps: a session loaded after a restart (or an unload) numbers the
    /// run's continuation on from its `interrupt`, so a client that holds the events up
    /// to it drops none of what follows. `None` when the checkpoint has no sequence.
    async fn parked_count(&self, handle: Option<&ActiveHandle>) -> Option<crate::RunCount> {
        let handle = handle?;
        let approval = handle.interrupted.as_ref()?;
        let (_, checkpoint) = match self.store().get_approval(approval).await {
            Ok(found) => found?,
            Err(error) => {
                tracing::warn!(%approval, %error, "cannot read a parked run's checkpoint; its run stream numbers anew");
                return None;
            }
        };
        let sequence = serde_json::from_value::<crate::run::Checkpoint>(checkpoint).ok()?.sequence?;
        Some(crate::RunCount::parked(handle.run_id.clone(), sequence, approval.clone()))
    }

    /// The session's view as the store has it: the latest rounds, their timings, a run
    /// parked at an approval (with its approvals) or executing on another node.
    async fn stored_view(&self, session: Session) -> Result<SessionState> {
        let id = session.id.clone();
        let latest = self.store().latest_rounds(&id, SNAPSHOT_USER_ROUNDS).await?;
        let total = self.store().count_messages(&id).await?;
        let mut state = view::initial_state(session, latest, total);
        state.todos = self.store().get_todos(&id).await?;
        // The timing rows of the shown rounds survive a reload or restart.
        for run in self.store().runs_since(&id, state.first_index).await? {
            view::set_timing(&mut state, frame::PromptTiming::of(&run));
        }
        state.queue = self.store().queued_prompts(&id).await?.into_iter().map(|q| q.message).collect();
        state.queue_paused = self.store().queue_paused(&id).await?;
        let pending = self.store().pending_approvals(&id).await?;
        let interrupted = self.store().interrupted_run(&id).await?;
        // Only a frame bus brings the run's end to this view; without one a view that
        // said busy could stay so.
        let running = match (&interrupted, self.inner.frames.is_some()) {
            (None, true) => {
                self.store().runs_since(&id, 0).await?.into_iter().rev().find(|r| r.status == RunStatus::Running)
            }
            _ => None,
        };
        if let Some(run) = interrupted.filter(|_| !pending.is_empty()) {
            state.pending_approvals = pending;
            state.status = SessionStatus::Busy;
            state.active_run =
                Some(ActiveRun { run_id: run.id.clone(), request_id: run.request_id.clone(), status: run.status });
        } else if let Some(run) = running {
            // Executing on another node (a shared store): busy until it settles there.
            state.status = SessionStatus::Busy;
            state.active_run = Some(ActiveRun { run_id: run.id, request_id: run.request_id, status: run.status });
        }
        if state.active_run.is_none() {
            // No run is active, so no call can be running: one whose run a crash ended
            // before it had a result shows as ended, not as running for ever.
            for exec in state.tool_executions.values_mut().filter(|e| e.status == frame::ToolStatus::Running) {
                exec.status = frame::ToolStatus::Error;
                exec.result = Some("This call did not finish: its run ended before it had a result.".into());
            }
        }
        Ok(state)
    }

    // ---- runs -----------------------------------------------------------------------

    /// Accepts a prompt. The same `request_id` in the same session returns the run it
    /// started before and starts nothing; a prompt while a run is active is refused.
    /// (A prompt that may wait in the session's queue goes through [`submit`](Self::submit).)
    pub async fn prompt(&self, owner: &UserId, id: &SessionId, input: PromptInput) -> Result<PromptAccepted> {
        match self.submit(owner, id, PromptInput { queue: false, ..input }).await? {
            Submitted::Started(accepted) => Ok(accepted),
            // Only a requestId that was queued before (through `submit`) comes back queued.
            Submitted::Queued(queued) => Err(EngineError::Conflict {
                code: "prompt_queued",
                message: format!(
                    "requestId {} is queued ({}); it runs when the session's active run settles",
                    queued.request_id, queued.message_id
                ),
            }),
        }
    }

    /// Accepts a prompt, or with `queue` puts it in the session's queue when a run is
    /// going (see [`crate::queue`]): then it runs, in order, once the runs before it
    /// have settled. The same `request_id` returns the run it started or the message
    /// it queued, and starts or queues nothing.
    pub async fn submit(&self, owner: &UserId, id: &SessionId, input: PromptInput) -> Result<Submitted> {
        let PromptInput { text, request_id, approval_policy, on_disconnect, queue } = input;
        if text.len() > self.inner.config.max_prompt_bytes {
            return Err(EngineError::TooLarge {
                code: "prompt_too_large",
                message: format!(
                    "the prompt is {} bytes; the limit is {}",
                    text.len(),
                    self.inner.config.max_prompt_bytes
                ),
            });
        }
        if text.trim().is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the prompt text is empty"));
        }
        if let Some(r) = &request_id
            && (r.is_empty() || r.len() > MAX_REQUEST_ID || !r.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(EngineError::invalid(
                "invalid_request_id",
                format!("requestId must be 1 to {MAX_REQUEST_ID} printable ASCII characters"),
            ));
        }
        let loaded = self.load(owner, id).await?;
        // A project registered before the roots (or the data directory rule) existed
        // keeps its history, but runs no tools there.
        self.inner.fence.check_existing(owner, self.inner.auth.auth_required().await?, &loaded.root)?;
        // And one registered before a directory belonged to one user.
        let project = loaded.events.read(|s| s.session.project_id.clone());
        self.check_claims_at_run(owner, &project, self.inner.auth.auth_required().await?).await?;
        crate::roots::check_identity(&loaded.root, loaded.root_id)?;
        let _control = loaded.control.lock().await;
        if let Some(request_id) = &request_id
            && let Some(run) = self.store().find_run_by_request(id, request_id).await?
        {
            return Ok(Submitted::Started(PromptAccepted {
                request_id: run.request_id,
                run_id: run.id,
                created: false,
            }));
        }
        let queued = self.store().queued_prompts(id).await?;
        if let Some(request_id) = &request_id
            && let Some(position) = queued.iter().position(|q| &q.message.request_id == request_id)
        {
            return Ok(Submitted::Queued(PromptQueued::at(&queued[position].message, position)));
        }
        let active = loaded.active();
        let busy = match &active {
            Some(active) => !self.settles_now(active).await?,
            None => false,
        };
        let wanted = Wanted { text, request_id, approval_policy, on_disconnect };
        // Behind the queue even when no run is going (one is about to take the queue's
        // first message): the queue keeps the order prompts came in.
        if queue && (busy || !queued.is_empty()) {
            if !queued.is_empty() {
                self.unpause_for_prompt(id).await?;
            }
            let answer = self.enqueue(&loaded, owner, wanted).await?;
            if !busy {
                self.inner.env.run_settled(id);
            }
            return Ok(Submitted::Queued(answer));
        }
        if let Some(active) = active.filter(|_| busy) {
            return Err(EngineError::SessionBusy(active.run_id.to_string()));
        }
        let limit = self.inner.config.max_runs_per_user;
        if self.active_runs_of(owner) >= limit {
            return Err(EngineError::TooMany {
                code: "too_many_runs",
                message: format!("you already have {limit} active runs; wait for one to settle or abort one"),
            });
        }
        // Another node may be running this session: the lease decides.
        let lease = match LeaseGuard::take(&self.inner.leases, &self.inner.sessions, id).await {
            Ok(lease) => lease,
            // That node takes the queue when its run settles.
            Err(EngineError::SessionBusy(_)) if queue => {
                return Ok(Submitted::Queued(self.enqueue(&loaded, owner, wanted).await?));
            }
            Err(e) => return Err(e),
        };
        if self.is_stale(&loaded).await? {
            // Another node wrote to the session since this one loaded it: start over
            // from the store.
            drop((_control, lease));
            self.forget_stale(id);
            let Wanted { text, request_id, approval_policy, on_disconnect } = wanted;
            let input = PromptInput { text, request_id, approval_policy, on_disconnect, queue };
            return Box::pin(self.submit(owner, id, input)).await;
        }
        let request_id = wanted.request_id.clone().unwrap_or_else(|| format!("req_{}", ulid_body()));
        let run = self.new_run(&loaded, request_id);
        let prompt = self.prompt_message(&run, MessageId::default(), wanted.text.clone());
        if let RunInsert::Existing(run) = self.store().start_run(&run, &prompt).await? {
            return Ok(Submitted::Started(PromptAccepted {
                request_id: run.request_id,
                run_id: run.id,
                created: false,
            }));
        }
        Ok(Submitted::Started(self.launch(&loaded, run, wanted, lease, prompt)))
    }

    /// The user message `run` answers, as it is stored with the run: `text` at the run's
    /// user message index, timed when the run was accepted.
    pub(crate) fn prompt_message(&self, run: &Run, id: MessageId, text: String) -> IndexedMessage {
        IndexedMessage { id, index: run.user_message_index, message: Message::user_text(text, run.created_at) }
    }

    /// A new run of the loaded session, answering a prompt with this request id.
    pub(crate) fn new_run(&self, loaded: &Loaded, request_id: String) -> Run {
        let now = now_ms();
        let (session_id, owner_id) = loaded.events.read(|s| (s.session.id.clone(), s.session.owner_id.clone()));
        Run {
            id: RunId::new(),
            session_id,
            owner_id,
            request_id,
            status: RunStatus::Running,
            user_message_index: loaded.events.read(|s| s.total),
            created_at: now,
            updated_at: now,
            first_token_at: None,
            ended_at: None,
            usage: Usage::default(),
            error: None,
        }
    }

    /// Starts `run`, stored already, on this node: it becomes the session's active run,
    /// the accepted frames go out, and its task takes the lease over. `prompt` is its
    /// user message, stored with the run.
    pub(crate) fn launch(
        &self,
        loaded: &Arc<Loaded>,
        run: Run,
        wanted: Wanted,
        lease: LeaseGuard,
        prompt: IndexedMessage,
    ) -> PromptAccepted {
        let request_id = run.request_id.clone();
        let handle = ActiveHandle::new(run.id.clone());
        loaded.set_active(Some(handle.clone()));
        let accepted = PromptAccepted { request_id: request_id.clone(), run_id: run.id.clone(), created: true };
        loaded.events.publish_body(FrameBody::RunAccepted { request_id: request_id.clone(), run_id: run.id.clone() });
        let active_run = ActiveRun { run_id: run.id.clone(), request_id, status: RunStatus::Running };
        loaded.events.publish(|state| {
            state.status = SessionStatus::Busy;
            state.active_run = Some(active_run);
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        // Logged in the caller's span (an HTTP request's, with its id): the line that
        // ties a request to the run it started.
        tracing::info!(run = %run.id, session = %run.session_id, "run accepted");
        let policy = wanted.approval_policy.unwrap_or(self.inner.config.approval_policy);
        let env = self.inner.env.clone();
        let task = RunTask::new(env, loaded.clone(), run, wanted.text, handle, policy, wanted.on_disconnect)
            .with_stored_prompt(prompt);
        lease.keep();
        tokio::spawn(task.execute());
        accepted
    }

    /// Aborts the session's active run and waits until it is settled as `cancelled`.
    /// Returns the run id, or `None` when nothing was running.
    ///
    /// A run parked at an approval is cancelled together with its approval. A run on
    /// another node is aborted there (see [`crate::remote`]).
    pub async fn abort(&self, owner: &UserId, id: &SessionId) -> Result<Option<RunId>> {
        let loaded = self.load(owner, id).await?;
        // Stop stops: the queued prompts wait, paused, instead of starting (crate::queue).
        self.pause_queue_for_stop(&loaded).await?;
        match self.abort_loaded(&loaded).await? {
            Some(run) => Ok(Some(run)),
            None => match &self.inner.remote {
                Some(remote) => remote.abort_elsewhere(id).await,
                None => Ok(None),
            },
        }
    }

    /// Aborts the run this node has of a loaded session, if any.
    pub(crate) async fn abort_loaded(&self, loaded: &Arc<Loaded>) -> Result<Option<RunId>> {
        self.inner.approvals.abort(loaded).await
    }

    /// Asks the node running `session` (the lease holder; perhaps this one) for a full
    /// snapshot frame on the frame bus. `false` when no node holds the lease (the store
    /// then has the whole state) or this node holds it without the session loaded.
    pub(crate) async fn request_snapshot(&self, session: &SessionId) -> bool {
        let lease = match self.inner.store.get_lease(session).await {
            Ok(lease) => lease.filter(|l| l.expires_at > self.inner.config.clock.now_ms()),
            Err(error) => {
                tracing::warn!(%session, %error, "cannot read a session's lease to ask for a snapshot");
                return false;
            }
        };
        let Some(lease) = lease else { return false };
        if lease.node_id == self.inner.config.node_id {
            return self.inner.sessions.resync(session);
        }
        let Some(remote) = &self.inner.remote else { return false };
        remote.ask_resync(lease.node_id, session);
        true
    }

    // ---- approvals --------------------------------------------------------------------

    /// Applies a decision to an approval of `owner`'s, addressed at `target` (see
    /// [`crate::approvals`] for the order of checks).
    pub async fn decide(
        &self,
        owner: &UserId,
        target: DecisionTarget,
        approval_id: &ApprovalId,
        input: DecisionInput,
    ) -> Result<DecisionOutcome> {
        Approvals::check(&input)?;
        let approvals = &self.inner.approvals;
        let (approval, checkpoint) = approvals.find(owner, &target, approval_id).await?;
        let loaded = self.load(owner, &approval.session_id).await?;
        approvals.decide(&loaded, owner, approval, checkpoint, input).await
    }

    /// Every approval of `owner` still waiting for a decision, oldest first.
    pub async fn pending_approvals_of(&self, owner: &UserId) -> Result<Vec<Approval>> {
        self.inner.approvals.pending_of(owner).await
    }

    /// One approval of `owner`, in whatever state it is.
    pub async fn approval(&self, owner: &UserId, id: &ApprovalId) -> Result<Approval> {
        self.inner.approvals.get(owner, id).await
    }

    /// Resumes a run whose approving decision was acknowledged before a crash and whose
    /// tool never started.
    pub(crate) async fn resume_decided(&self, decided: DecidedCall) -> Result<()> {
        let loaded = self.load(&decided.approval.owner_id, &decided.approval.session_id).await?;
        self.inner.approvals.resume_decided(&loaded, decided).await
    }

    /// Expires every approval a run arms (see [`RunEnv::arm_expiry`]) when its time
    /// comes, unless it was decided before. The timers hold the engine weakly: a gone
    /// engine expires nothing.
    fn spawn_expiries(&self, mut armed: Expiries) {
        let weak = Arc::downgrade(&self.inner);
        let clock = self.inner.config.clock.clone();
        tokio::spawn(async move {
            while let Some(approval) = armed.recv().await {
                let (weak, clock) = (weak.clone(), clock.clone());
                tokio::spawn(async move {
                    clock.sleep_until(approval.expires_at).await;
                    let Some(inner) = weak.upgrade() else { return };
                    let engine = Engine { inner };
                    let outcome = async {
                        let loaded = engine.load(&approval.owner_id, &approval.session_id).await?;
                        engine.inner.approvals.expire(&loaded, &approval.id).await
                    };
                    if let Err(e) = outcome.await
                        && !matches!(e, EngineError::NotFound(_))
                    {
                        tracing::warn!(approval = %approval.id, error = %e, "could not expire an approval");
                    }
                });
            }
        });
    }

    pub async fn run(&self, owner: &UserId, id: &RunId) -> Result<Run> {
        match self.store().get_run(id).await? {
            Some(run) if &run.owner_id == owner => Ok(run),
            _ => Err(EngineError::NotFound("run")),
        }
    }

    /// The run the prompt with `request_id` became in session `id`, if it became one (a
    /// queued prompt has none until a run takes it).
    pub async fn run_of_request(&self, owner: &UserId, id: &SessionId, request_id: &str) -> Result<Option<Run>> {
        let run = self.store().find_run_by_request(id, request_id).await?;
        Ok(run.filter(|run| &run.owner_id == owner))
    }

    /// Subscribes to a session's native stream from an optional cursor (see
    /// [`SessionEvents::subscribe`]).
    pub async fn subscribe(
        &self,
        owner: &UserId,
        id: &SessionId,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        interactive: bool,
    ) -> Result<(Subscription, Start)> {
        let loaded = self.load(owner, id).await?;
        let permit = self.stream_permit(owner)?;
        if let Some(cursor) = cursor {
            loaded.events.backfill(cursor).await;
        }
        let (mut subscription, start) = loaded.events.subscribe(cursor, kill, interactive);
        subscription.hold(permit);
        Ok((subscription, start))
    }

    /// Subscribes a run-stream client to `run` after its event `after` (see
    /// [`SessionEvents::subscribe_from_run`]): one subscription, one of the user's
    /// streams, whatever the buffer still holds.
    ///
    /// Unlike [`subscribe`](Self::subscribe) it does not backfill the ring from the
    /// bus's log: a replay starts at the frame marked with the client's last sequence,
    /// and backfilled frames carry no marks (see `run_sequence.rs`), so a backfill would
    /// cost a bus round trip and could never turn a snapshot into a replay.
    pub async fn subscribe_from_run(
        &self,
        owner: &UserId,
        run: &Run,
        after: RunAfter,
        kill: CancellationToken,
    ) -> Result<(Subscription, RunStart)> {
        let loaded = self.load(owner, &run.session_id).await?;
        let permit = self.stream_permit(owner)?;
        let (mut subscription, start) = loaded.events.subscribe_from_run(&run.id, after, kill);
        subscription.hold(permit);
        Ok((subscription, start))
    }

    /// Counts one more open stream of `owner` until the permit is dropped; past
    /// `max_streams_per_user` it is a 429 `too_many_streams`.
    pub fn stream_permit(&self, owner: &UserId) -> Result<StreamPermit> {
        // A std mutex: nothing awaits while it is held.
        let mut counts = self.inner.streams.lock().unwrap_or_else(|p| p.into_inner());
        let open = counts.entry(owner.clone()).or_insert(0);
        let limit = self.inner.config.max_streams_per_user;
        if *open >= limit {
            return Err(EngineError::TooMany {
                code: "too_many_streams",
                message: format!("you already have {limit} open streams; close one first"),
            });
        }
        *open += 1;
        Ok(StreamPermit { counts: self.inner.streams.clone(), user: owner.clone() })
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
        let weak = Arc::downgrade(&self.inner);
        let idle = self.inner.config.idle_unload;
        let every = (idle / 4).max(std::time::Duration::from_millis(50));
        let clock = self.inner.config.clock.clone();
        let mut ticks = clock.ticks(clock.now_ms(), every);
        tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let engine = Engine { inner };
                engine.unload_idle(idle);
            }
        });
    }

    /// One janitor pass: unloads the sessions idle for `idle` or longer on the engine's
    /// clock; returns how many.
    pub fn unload_idle(&self, idle: std::time::Duration) -> usize {
        let cutoff = self.inner.config.clock.now_ms().saturating_sub(crate::clock::millis(idle));
        self.inner.sessions.unload_idle(cutoff)
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

/// A rule's action as the API spells it.
fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Allow => "allow",
        PermissionAction::Ask => "ask",
        PermissionAction::Deny => "deny",
    }
}

/// Where the sessions clients named are kept (see [`Engine::named_session`]).
fn name_scope(owner: &UserId) -> String {
    format!("session-name:{owner}")
}

/// The session a kept name record holds.
fn named(name: &str, answer: String) -> Result<SessionId> {
    answer.parse().map_err(|_| EngineError::Conflict {
        code: "name_unusable",
        message: format!("the session name {name:?} is taken by a record this server cannot read"),
    })
}

/// Another request is creating the session this name stands for.
fn name_in_progress(name: &str) -> EngineError {
    EngineError::Conflict {
        code: "name_in_progress",
        message: format!("the session for {name:?} is being created by another request; retry"),
    }
}
