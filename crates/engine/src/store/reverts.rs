//! A session's pending revert (see [`crate::engine::Reverts`]): the turns from a
//! message on were shelved as a branch and the files put back; the record keeps what
//! `unrevert` needs to undo both. At most one per session.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait SessionReverts: Send + Sync + 'static {
    /// Records the session's pending revert, replacing the one it had.
    async fn put_session_revert(&self, revert: &SessionRevert) -> Result<(), StoreError>;
    /// The session's pending revert as recorded (stale or not: the engine decides).
    async fn session_revert(&self, session: &SessionId) -> Result<Option<SessionRevert>, StoreError>;
    /// The pending reverts of `project`'s sessions that are not stale (their session
    /// holds no message at their index), in one query: what a list of sessions shows.
    async fn pending_session_reverts(&self, project: &ProjectId) -> Result<Vec<SessionRevert>, StoreError>;
    /// Deletes the session's pending revert; `false` when it had none.
    async fn delete_session_revert(&self, session: &SessionId) -> Result<bool, StoreError>;
}

/// A revert that `unrevert` can still undo.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRevert {
    pub session_id: SessionId,
    pub owner_id: UserId,
    /// The user message the revert went back to (it and everything after it left).
    pub message_index: u64,
    /// The branch the turns were shelved as (`None`: there were none to shelve).
    pub ordinal: Option<u32>,
    /// The engine's record of what the revert did to the files (JSON; its `pre` is the
    /// tree of the files just before it, which pruning keeps).
    pub state: serde_json::Value,
    pub created_at: time::Millis,
}
