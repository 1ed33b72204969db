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

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Returns the id of the user with this name, creating it on first use.
    async fn ensure_user(&self, name: &str) -> Result<UserId, StoreError>;

    /// Inserts a project. `Conflict` when the owner already registered that path.
    async fn insert_project(&self, project: &Project) -> Result<(), StoreError>;
    /// The owner's projects, oldest first.
    async fn list_projects(&self, owner: &UserId) -> Result<Vec<Project>, StoreError>;
    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError>;
    /// Writes `name` and `updated_at`.
    async fn update_project(&self, project: &Project) -> Result<(), StoreError>;
    /// Deletes the project with all its sessions, messages and runs. False if absent.
    async fn delete_project(&self, id: &ProjectId) -> Result<bool, StoreError>;

    async fn insert_session(&self, session: &Session) -> Result<(), StoreError>;
    /// A project's sessions with the given archived flag, most recently updated first.
    async fn list_sessions(&self, project: &ProjectId, archived: bool) -> Result<Vec<Session>, StoreError>;
    async fn get_session(&self, id: &SessionId) -> Result<Option<Session>, StoreError>;
    /// Writes `title`, `title_set`, `archived` and `updated_at`.
    async fn update_session(&self, session: &Session) -> Result<(), StoreError>;
    /// Deletes the session with its messages and runs. False if absent.
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError>;

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

    /// Inserts a run unless one with the same `(session_id, request_id)` exists.
    async fn insert_run(&self, run: &Run) -> Result<RunInsert, StoreError>;
    /// The run a `(session_id, request_id)` pair started, if any.
    async fn find_run_by_request(&self, session: &SessionId, request_id: &str) -> Result<Option<Run>, StoreError>;
    async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError>;
    /// Writes every mutable field: status, timings, usage, error, updated_at.
    async fn update_run(&self, run: &Run) -> Result<(), StoreError>;
    /// Marks every run still `running` as `failed` with `error`; returns how many.
    /// Called once at start-up: a run that was executing when the process died cannot
    /// continue (its in-memory state is gone) and must not be re-executed.
    async fn fail_running_runs(&self, error: &RunError, now: time::Millis) -> Result<u64, StoreError>;
}
