//! Branches: the turns an edit, a regenerate, a switch or a revert took off the active
//! path, kept whole so they can come back (see [`spool_protocol::branch`]).
//!
//! The active path stays in the messages table exactly as it was, so everything that
//! reads a session's conversation by index sees the path and nothing else; a branch is
//! a side table of the messages it holds, each with its id and its parts, and the step
//! snapshot records of those turns point at it. Moving turns either way is one
//! transaction: no reader ever sees a turn on both sides or on neither.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Branches: Send + Sync + 'static {
    /// Moves every message with `index >= from_index` (with its parts, ids kept) off
    /// the active path into a new branch of the session (ordinal: one past the largest
    /// the session had), anchored at the message just before `from_index`. The step
    /// snapshot records of those turns go with them, and when the session's summary
    /// covers any of them the memory is kept with the branch and the summary dropped
    /// (facts stay). `None`, and nothing changes, when no message is at or past
    /// `from_index`.
    async fn shelve(&self, session: &SessionId, from_index: u64, kind: BranchKind) -> Result<Option<u32>, StoreError>;
    /// Brings branch `ordinal` back onto the active path: the path's own turns from the
    /// branch's fork index on are shelved first (kind `switch`; its ordinal is returned,
    /// `None` when the path ended before the fork index), then the branch's messages,
    /// step snapshot records and summary return and the branch is gone. `Conflict`
    /// when the session has no branch `ordinal`.
    async fn unshelve(&self, session: &SessionId, ordinal: u32) -> Result<Option<u32>, StoreError>;
    /// The user turns at or past `from_index` on the active path that have other
    /// versions: for each, the path's own message and every branch shelved from the same
    /// place (same fork index, same anchor), in the order their first messages were
    /// written. Turns with one version are left out.
    async fn variants(&self, session: &SessionId, from_index: u64) -> Result<Vec<VariantSet>, StoreError>;
    /// The session's branches, oldest first.
    async fn list_branches(&self, session: &SessionId) -> Result<Vec<Branch>, StoreError>;
    /// The messages of branch `ordinal`, ascending; `None` when the session has no such
    /// branch.
    async fn branch_messages(
        &self,
        session: &SessionId,
        ordinal: u32,
    ) -> Result<Option<Vec<IndexedMessage>>, StoreError>;
}
