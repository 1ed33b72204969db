//! Sessions: one conversation in a project, with its title, archived flag and
//! permission rules, and the search over an owner's sessions and their text.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Sessions: Send + Sync + 'static {
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
    /// The session's own guardrails (`None`: it has none, or there is no such session).
    async fn session_guardrails(&self, session: &SessionId) -> Result<Option<Guardrails>, StoreError>;
    /// Replaces the session's own guardrails (`None` removes them) and sets `updated_at`.
    async fn set_session_guardrails(
        &self,
        session: &SessionId,
        guardrails: Option<&Guardrails>,
        updated_at: time::Millis,
    ) -> Result<(), StoreError>;
}

/// A session a search matched, with the message text that matched and that message's
/// index (`None` when only its title did).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionMatch {
    pub session: Session,
    pub text: Option<String>,
    pub message_index: Option<u64>,
}

/// The result of [`Sessions::remove_session_rule`].
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
