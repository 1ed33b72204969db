//! The `Store` trait: everything Spool keeps durably.
//!
//! The engine talks to storage only through this trait, so SQLite (the default) and
//! PostgreSQL (past one machine) are interchangeable and pass the same test suite.
//! Methods are plain CRUD plus the few conditional writes whose atomicity the product
//! depends on (one run per requestId, one message per index). Ownership checks live
//! in the engine; the store keeps the owner column on every record.

use async_trait::async_trait;
use spool_protocol::*;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was violated (for example a message index already taken).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database failed or returned data that does not decode.
    #[error("storage failure: {0}")]
    Backend(String),
}

/// The result of inserting a run: the requestId decides whether it is new.
#[derive(Debug, Clone, PartialEq)]
// Returned once per accepted prompt; boxing the run would buy nothing measurable.
#[allow(clippy::large_enum_variant)]
pub enum RunInsert {
    Created,
    /// A run with the same `(session_id, request_id)` exists; nothing was written.
    Existing(Run),
}

/// A session a search matched, with the message text that matched and that message's
/// index (`None` when only its title did).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionMatch {
    pub session: Session,
    pub text: Option<String>,
    pub message_index: Option<u64>,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Returns the id of the user with this name, creating it on first use.
    async fn ensure_user(&self, name: &str) -> Result<UserId, StoreError>;

    /// The id of the user named `name`, if there is one (nothing is created): whom a
    /// hub audience may name.
    async fn user_id(&self, name: &str) -> Result<Option<UserId>, StoreError>;

    /// The name of user `id` (`None` for an unknown id): what the hub shows as a
    /// message's author.
    async fn user_name(&self, id: &UserId) -> Result<Option<String>, StoreError>;

    /// Stores a new token (its hash) for a user.
    async fn insert_token(&self, token: &ApiToken) -> Result<(), StoreError>;
    /// The unrevoked token with this hash, if any.
    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>, StoreError>;
    /// Every token, revoked ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError>;
    /// Revokes a token; false if there is no such unrevoked token. Its login sessions
    /// stop working with it (`find_login` checks the token).
    async fn revoke_token(&self, id: &TokenId, at: time::Millis) -> Result<bool, StoreError>;

    /// Whether auth is on: set when the first token is created, cleared only by
    /// `spool auth disable`. False in a store that never had a token.
    async fn auth_enabled(&self) -> Result<bool, StoreError>;
    /// Sets the sticky auth flag.
    async fn set_auth_enabled(&self, enabled: bool, at: time::Millis) -> Result<(), StoreError>;
    /// Stores a new browser login session (the hash of its secret).
    async fn insert_login(&self, login: &LoginSession) -> Result<(), StoreError>;
    /// The login session with this secret hash if it is usable at `now`: not ended,
    /// not expired, and its token not revoked.
    async fn find_login(&self, hash: &str, now: time::Millis) -> Result<Option<LoginSession>, StoreError>;
    /// Ends a login session (logout); false when it had already ended or does not exist.
    async fn end_login(&self, id: &LoginId, at: time::Millis) -> Result<bool, StoreError>;
    /// The ids (token and login-session ids) of every credential that stopped working
    /// after `since`: tokens revoked and login sessions ended after it, and login
    /// sessions that expired in `(since, now]`. How running servers notice revocations
    /// made by another process or node, cheaply (indexed by time).
    async fn credentials_ended_since(&self, since: time::Millis, now: time::Millis) -> Result<Vec<String>, StoreError>;
    /// Records (or refreshes) the address a node serves on.
    async fn record_listener(&self, listener: &Listener) -> Result<(), StoreError>;
    /// Forgets a node's address (it stopped serving).
    async fn remove_listener(&self, node: &str) -> Result<(), StoreError>;
    /// Every recorded listener, fresh or stale.
    async fn listeners(&self) -> Result<Vec<Listener>, StoreError>;

    /// Inserts a project. `Conflict` when the owner already registered that path.
    async fn insert_project(&self, project: &Project) -> Result<(), StoreError>;
    /// The owner's projects, oldest first.
    async fn list_projects(&self, owner: &UserId) -> Result<Vec<Project>, StoreError>;
    /// Every user's projects, oldest first: what a new registration is compared with,
    /// because a directory belongs to one user (see `crate::overlap`).
    async fn all_projects(&self) -> Result<Vec<Project>, StoreError>;
    /// Every project, of any owner, whose path is `path`, lies under it or holds it (by
    /// the text of the paths, which are canonical): what a prompt checks its project
    /// against, cheaply, when it starts a run.
    async fn projects_overlapping(&self, path: &str) -> Result<Vec<Project>, StoreError>;
    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError>;
    /// Writes `name` and `updated_at`.
    async fn update_project(&self, project: &Project) -> Result<(), StoreError>;
    /// Deletes the project with all its sessions, messages, runs and approvals. False if absent.
    async fn delete_project(&self, id: &ProjectId) -> Result<bool, StoreError>;

    async fn insert_session(&self, session: &Session) -> Result<(), StoreError>;
    /// A project's sessions with the given archived flag, most recently updated first.
    async fn list_sessions(&self, project: &ProjectId, archived: bool) -> Result<Vec<Session>, StoreError>;
    async fn get_session(&self, id: &SessionId) -> Result<Option<Session>, StoreError>;
    /// How many of the owner's sessions, in every project, have this archived flag:
    /// what the per-user session cap counts (see `crate::caps`).
    async fn count_sessions(&self, owner: &UserId, archived: bool) -> Result<u64, StoreError>;
    /// The owner's sessions (archived ones too) whose title or a message's text contains
    /// `needle`, case-insensitively, newest activity first; with `before` only those
    /// ordered after that `(updated_at, id)`; at most `limit`. A scan of the owner's
    /// text parts, not an index: see `sql/search.rs` for what it costs. The database
    /// stops the scan once it has run for `time_limit` (then an error).
    async fn search_sessions(
        &self,
        owner: &UserId,
        needle: &str,
        before: Option<(time::Millis, SessionId)>,
        limit: u32,
        time_limit: std::time::Duration,
    ) -> Result<Vec<SessionMatch>, StoreError>;
    /// Writes `title`, `title_set`, `archived`, `permissions` and `updated_at`.
    async fn update_session(&self, session: &Session) -> Result<(), StoreError>;
    /// Deletes the session with its messages, runs and approvals. False if absent.
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError>;
    /// Removes the session's permission rule at `index`, only if it is still a rule for
    /// `tool` with `action`, and sets `updated_at`: read, checked and written as one
    /// step that no other write of the session's rules can come between.
    async fn remove_session_rule(
        &self,
        session: &SessionId,
        index: usize,
        tool: &str,
        action: PermissionAction,
        updated_at: time::Millis,
    ) -> Result<RuleRemoval, StoreError>;

    /// Appends a committed message (with its parts). `Conflict` if the index is taken.
    async fn insert_message(
        &self,
        session: &SessionId,
        owner: &UserId,
        message: &IndexedMessage,
    ) -> Result<(), StoreError>;
    /// Up to `limit` messages with `index < before` (all when `before` is `None`),
    /// the latest ones, returned in ascending index order.
    async fn list_messages(
        &self,
        session: &SessionId,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<IndexedMessage>, StoreError>;
    /// Number of committed messages in the session.
    async fn count_messages(&self, session: &SessionId) -> Result<u64, StoreError>;
    /// The messages from the `rounds`-th last user message to the end, ascending
    /// (everything when the session has fewer user messages).
    async fn latest_rounds(&self, session: &SessionId, rounds: usize) -> Result<Vec<IndexedMessage>, StoreError>;

    /// The session's memory (confirmed facts, compaction summary); default when none.
    async fn get_memory(&self, session: &SessionId) -> Result<SessionMemory, StoreError>;
    /// Replaces the session's memory.
    async fn put_memory(&self, session: &SessionId, owner: &UserId, memory: &SessionMemory) -> Result<(), StoreError>;

    /// The session's todo list as the agent last wrote it; empty when it never did.
    async fn get_todos(&self, session: &SessionId) -> Result<Vec<hub::Todo>, StoreError>;
    /// Replaces the session's todo list.
    async fn put_todos(&self, session: &SessionId, owner: &UserId, todos: &[hub::Todo]) -> Result<(), StoreError>;

    /// Inserts a run unless one with the same `(session_id, request_id)` exists.
    async fn insert_run(&self, run: &Run) -> Result<RunInsert, StoreError>;
    /// Inserts a run and `prompt`, the user message it answers (at the run's
    /// `user_message_index`), in ONE transaction, unless a run with the same
    /// `(session_id, request_id)` exists: then that run comes back and nothing is
    /// written. What the engine uses to accept a prompt: once a client is told
    /// "accepted", a crash cannot lose the prompt's text.
    async fn start_run(&self, run: &Run, prompt: &IndexedMessage) -> Result<RunInsert, StoreError>;
    /// The run a `(session_id, request_id)` pair started, if any.
    async fn find_run_by_request(&self, session: &SessionId, request_id: &str) -> Result<Option<Run>, StoreError>;
    async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError>;
    /// Writes every mutable field: status, timings, usage, error, updated_at.
    async fn update_run(&self, run: &Run) -> Result<(), StoreError>;
    /// The session's runs whose user message index is `from_index` or later, in order
    /// (to restore the prompt timings of the rounds a snapshot shows).
    async fn runs_since(&self, session: &SessionId, from_index: u64) -> Result<Vec<Run>, StoreError>;
    /// Sessions of `project` with a run that ended after `after`, latest first, at most
    /// `limit`.
    async fn sessions_ended_after(
        &self,
        project: &ProjectId,
        after: time::Millis,
        limit: u32,
    ) -> Result<Vec<SessionId>, StoreError>;
    /// The session's run that is `interrupted` (waiting for an approval), if any.
    async fn interrupted_run(&self, session: &SessionId) -> Result<Option<Run>, StoreError>;
    /// Marks every run still `running` as `failed` with `error`; returns how many.
    /// Called once at start-up: a run that was executing when the process died cannot
    /// continue (its in-memory state is gone) and must not be re-executed.
    /// Runs in `keep` are left alone: they resume from a decision (see `decided_calls`).
    async fn fail_running_runs(&self, error: &RunError, now: time::Millis, keep: &[RunId]) -> Result<u64, StoreError>;
    /// For every `running` or `interrupted` run whose latest approval is resolved: that
    /// approval, its checkpoint and its "tool call started" mark. A crash may have come
    /// between recording the decision and its tool (see the engine's start-up).
    async fn decided_calls(&self) -> Result<Vec<DecidedCall>, StoreError>;
    /// Records, durably and before the tool runs, that the call decided by `approval`
    /// is starting: after a crash it is never run again.
    async fn mark_call_started(&self, approval: &ApprovalId, at: time::Millis) -> Result<(), StoreError>;

    /// Puts a prompt at the end of its session's queue, unless the session already has
    /// `limits.per_session` queued (then `Full`, writing nothing), its owner already has
    /// `limits.per_owner` queued in all their sessions or the prompt's text would take
    /// the owner's queued text past `limits.per_owner_bytes` (then `OwnerFull`, writing
    /// nothing), or the prompt's request id is queued already (then that message comes
    /// back as `Existing`, and nothing is written).
    async fn queue_prompt(&self, prompt: &QueuedPrompt, limits: QueueLimits) -> Result<QueueInsert, StoreError>;
    /// The session's queued prompts, in queue order (the next to run first).
    async fn queued_prompts(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>, StoreError>;
    /// One queued prompt by its message id (`None` once taken or removed).
    async fn get_queued(&self, id: &MessageId) -> Result<Option<QueuedPrompt>, StoreError>;
    /// Removes a queued prompt; false (nothing written) when it is not queued any more.
    async fn delete_queued(&self, id: &MessageId) -> Result<bool, StoreError>;
    /// Takes a queued prompt for `run`, in ONE transaction: removes it from the queue and
    /// inserts the run (which carries the prompt's request id) and `prompt`, the user
    /// message the queued text becomes. `None`, writing nothing,
    /// when it is not queued any more — of any number of racing takers (two nodes after
    /// a restart) exactly one gets `Some`. `Some(Existing)` when a run with its request id
    /// already exists: the prompt leaves the queue and nothing new starts.
    async fn take_queued(
        &self,
        id: &MessageId,
        run: &Run,
        prompt: &IndexedMessage,
    ) -> Result<Option<RunInsert>, StoreError>;
    /// Sessions that have queued prompts, oldest first, at most `limit`: what start-up and
    /// the reaper look at for queues no run will take (their run ended in a crash).
    async fn queued_sessions(&self, limit: u32) -> Result<Vec<SessionId>, StoreError>;
    /// Pauses the session's queue (Stop with prompts waiting): none of its prompts
    /// starts, and [`queued_sessions`](Self::queued_sessions) leaves it out, until
    /// [`resume_queue`](Self::resume_queue). Durable, so a restart does not start them.
    async fn pause_queue(&self, session: &SessionId, at: time::Millis) -> Result<(), StoreError>;
    /// Lets a paused queue go on; false when it was not paused.
    async fn resume_queue(&self, session: &SessionId) -> Result<bool, StoreError>;
    async fn queue_paused(&self, session: &SessionId) -> Result<bool, StoreError>;

    /// Checkpoints the session's streaming draft by appending what it gained since the
    /// last checkpoint (rewriting it whole made a long answer cost the square of its
    /// size): `deltas`, which applied in order to the draft so far give the draft now.
    /// Chunk `seq` 0 starts a draft — `draft.message` is then the message as it began —
    /// and replaces any earlier draft of the session; a later chunk is added to the
    /// draft of the same message (writing a `seq` again replaces that chunk, so a failed
    /// write is retried). Returns the bytes of chunk data written.
    async fn append_draft(&self, draft: &Draft, seq: u64, deltas: &[StreamDelta]) -> Result<u64, StoreError>;
    /// Forgets the session's draft (its message was committed).
    async fn delete_draft(&self, session: &SessionId) -> Result<(), StoreError>;
    /// Drafts whose run is neither `running` nor `interrupted`: the run ended (a crash, a
    /// stop, a node declared dead) without committing the message it was streaming.
    async fn orphaned_drafts(&self) -> Result<Vec<Draft>, StoreError>;

    /// Interrupts a run, in ONE transaction: inserts the (pending) approval together
    /// with the checkpoint the run needs to continue, and writes the run (whose status
    /// is `interrupted`). Either all of it is durable or none.
    async fn interrupt_run(
        &self,
        run: &Run,
        approval: &Approval,
        checkpoint: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// Replaces an approval whose call has not started with a new one asking for the
    /// same call, because the call's target changed since it was asked. ONE transaction:
    /// moves `old.id` from `old.from` (pending; or resolved, for a decision a crash kept
    /// from running) to `superseded` — only while it has no "tool call started" mark —
    /// recording `old.actor` and `old.at`; inserts `approval` (pending) with its
    /// `checkpoint`; and writes `run` (interrupted). Returns false, writing nothing, when
    /// `old` had moved on (someone else acted first).
    async fn supersede_approval(
        &self,
        old: &Supersede<'_>,
        run: &Run,
        approval: &Approval,
        checkpoint: &serde_json::Value,
    ) -> Result<bool, StoreError>;
    /// An approval with its checkpoint.
    async fn get_approval(&self, id: &ApprovalId) -> Result<Option<(Approval, serde_json::Value)>, StoreError>;
    /// The session's pending approvals, oldest first.
    async fn pending_approvals(&self, session: &SessionId) -> Result<Vec<Approval>, StoreError>;
    /// Every pending approval of every session (to re-arm expiry timers at start-up).
    async fn all_pending_approvals(&self) -> Result<Vec<Approval>, StoreError>;
    /// The project's sessions with an approval pending: a run parked there, waiting for
    /// a person (what session lists mark `waiting`).
    async fn waiting_sessions(&self, project: &ProjectId) -> Result<Vec<SessionId>, StoreError>;
    /// The conditional update that makes a decision happen once: moves the approval
    /// from `pending` to `status` (resolved, expired or cancelled), recording decision,
    /// message, actor and time. Returns false — and writes nothing — when it was not
    /// pending any more (someone else won).
    async fn settle_approval(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        decision: Option<&Decision>,
        message: Option<&str>,
        actor: Option<&UserId>,
        at: time::Millis,
    ) -> Result<bool, StoreError>;

    /// Reserves an idempotency key (unique per `scope` and `key`). The first caller gets
    /// `Claimed` and must later `complete_idempotency`; later callers get the kept
    /// answer, or `InProgress` while the first is still working.
    async fn claim_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: time::Millis,
    ) -> Result<IdempotencyClaim, StoreError>;
    /// Stores the answer for a claimed key, once, byte for byte: `Conflict` when the
    /// key has no open claim or already has an answer.
    async fn complete_idempotency(&self, scope: &str, key: &str, answer: &str) -> Result<(), StoreError>;
    /// Releases a claimed key whose request failed before it had a response to keep, so
    /// a retry can run it again.
    async fn release_idempotency(&self, scope: &str, key: &str) -> Result<(), StoreError>;
    /// Releases every claim still without a response that was made before
    /// `made_before`: claims whose request died with its process (a kill between claim
    /// and response). Returns the `(scope, key)` pairs released, so each can be logged.
    async fn release_open_claims(&self, made_before: time::Millis) -> Result<Vec<(String, String)>, StoreError>;

    /// Takes the session's lease for `node` until `now + ttl`, in one atomic step: true
    /// when the lease was free, expired (`expires_at <= now`) or already `node`'s (then
    /// it is extended); false, writing nothing, while another node holds it. Of any
    /// number of nodes racing for one session, at most one gets true.
    async fn acquire_lease(
        &self,
        session: &SessionId,
        node: &str,
        now: time::Millis,
        ttl: time::Millis,
    ) -> Result<bool, StoreError>;
    /// Extends `node`'s lease to `now + ttl`; false when the node no longer holds it
    /// (released, taken over, or already expired: another node may have declared this
    /// one dead, so a run whose renewal fails must stop rather than carry on).
    async fn renew_lease(
        &self,
        session: &SessionId,
        node: &str,
        now: time::Millis,
        ttl: time::Millis,
    ) -> Result<bool, StoreError>;
    /// Gives the lease up; false (and nothing changes) when `node` did not hold it.
    async fn release_lease(&self, session: &SessionId, node: &str) -> Result<bool, StoreError>;
    /// The session's lease row, expired or not.
    async fn get_lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError>;
    /// Every lease expired at `now` (its node stopped renewing: probably dead), oldest
    /// expiry first. A node that takes one over with `acquire_lease` is the single one
    /// that marks the dead node's runs of that session failed.
    async fn expired_leases(&self, now: time::Millis) -> Result<Vec<Lease>, StoreError>;
}

/// The assistant message a run is streaming, as last checkpointed: what a crash or a
/// stop must not take away from a person who watched it arrive. Written as the message
/// it began as plus chunks of deltas ([`Store::append_draft`]); read back whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub owner_id: UserId,
    pub message: IndexedMessage,
}

/// A prompt waiting in its session's queue (see [`Store::queue_prompt`]): what clients
/// see of it, and what the run that takes it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedPrompt {
    pub session_id: SessionId,
    pub owner_id: UserId,
    pub message: frame::QueuedMessage,
    pub approval_policy: Option<crate::ApprovalPolicy>,
    pub on_disconnect: crate::OnDisconnect,
}

/// The result of [`Store::remove_session_rule`].
#[derive(Debug, Clone, PartialEq)]
pub enum RuleRemoval {
    /// The rule is gone; these are the session's rules now.
    Removed(Vec<PermissionRule>),
    /// The rule at the index is another one (the list changed since it was read), or
    /// there is none (`None`): nothing was written.
    Mismatch(Option<PermissionRule>),
    /// No such session.
    NoSession,
}

/// The result of [`Store::queue_prompt`].
#[derive(Debug, Clone, PartialEq)]
pub enum QueueInsert {
    Queued,
    /// The request id was queued before: this is that prompt; nothing was written.
    Existing(QueuedPrompt),
    /// The session's queue is at its limit; nothing was written.
    Full,
    /// The owner's prompts queued across all their sessions are at the count or byte
    /// limit; nothing was written.
    OwnerFull,
}

/// What [`Store::queue_prompt`] lets one session and one owner hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Prompts one session's queue holds.
    pub per_session: usize,
    /// Prompts one owner has queued across all their sessions.
    pub per_owner: usize,
    /// Bytes of prompt text one owner has queued across all their sessions.
    pub per_owner_bytes: usize,
}

impl QueueLimits {
    /// Only the per-session limit (the owner's totals unbounded).
    pub fn session(per_session: usize) -> QueueLimits {
        QueueLimits { per_session, per_owner: usize::MAX, per_owner_bytes: usize::MAX }
    }
}

/// Which node runs a session, and until when: the row that keeps two nodes from
/// running one session. A lease is live while `now < expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub session_id: SessionId,
    pub node_id: String,
    pub expires_at: time::Millis,
}

/// A browser login: the cookie holds a random secret, the store its SHA-256, so a
/// logout or a revocation can end it server-side. It acts as `user_id` through
/// `token_id` and never outlives `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSession {
    pub id: LoginId,
    pub token_id: TokenId,
    pub user_id: UserId,
    /// Lower-case hex SHA-256 of the cookie's secret.
    pub hash: String,
    pub created_at: time::Millis,
    pub expires_at: time::Millis,
    pub ended_at: Option<time::Millis>,
}

/// The address a node serves on, refreshed while it runs: `spool auth disable` reads
/// these to refuse while any server is reachable from the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub node_id: String,
    pub addr: String,
    /// Not a loopback address: reachable from other machines.
    pub public: bool,
    pub updated_at: time::Millis,
}

/// A decided approval of a run that was `running`: what start-up needs to tell a call
/// that never started (run it) from one that started (never again).
#[derive(Debug, Clone)]
pub struct DecidedCall {
    pub approval: Approval,
    pub checkpoint: serde_json::Value,
    /// When the decided tool call started, if it did.
    pub started_at: Option<time::Millis>,
}

/// The approval a [`Store::supersede_approval`] replaces: which one, the status it must
/// still have, and who (if anyone) acted and when.
#[derive(Debug, Clone)]
pub struct Supersede<'a> {
    pub id: &'a ApprovalId,
    pub from: ApprovalStatus,
    pub actor: Option<&'a UserId>,
    pub at: time::Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyClaim {
    Claimed,
    InProgress,
    /// The answer the first request kept (opaque to the store).
    Done(String),
}
