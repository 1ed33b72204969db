//! Notes: what the agent keeps about a session besides its messages, its memory
//! (confirmed facts, a compaction summary) and its todo list, each one value per
//! session replaced whole, and the person's choices about its tool sources, one per
//! source. All are deleted with the session.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Notes: Send + Sync + 'static {
    /// The session's memory (confirmed facts, compaction summary); default when none.
    async fn get_memory(&self, session: &SessionId) -> Result<SessionMemory, StoreError>;
    /// Replaces the session's memory.
    async fn put_memory(&self, session: &SessionId, owner: &UserId, memory: &SessionMemory) -> Result<(), StoreError>;

    /// The session's todo list as the agent last wrote it; empty when it never did.
    async fn get_todos(&self, session: &SessionId) -> Result<Vec<hub::Todo>, StoreError>;
    /// Replaces the session's todo list.
    async fn put_todos(&self, session: &SessionId, owner: &UserId, todos: &[hub::Todo]) -> Result<(), StoreError>;

    /// The session's choices about tool sources: a source's name → on or off (see
    /// [`crate::tool_source::SourceChoices`]); empty when the person made none.
    async fn get_source_choices(&self, session: &SessionId) -> Result<crate::tool_source::SourceChoices, StoreError>;
    /// Turns `source` on or off for the session, replacing an earlier choice about it.
    async fn set_source_choice(
        &self,
        session: &SessionId,
        owner: &UserId,
        source: &str,
        enabled: bool,
    ) -> Result<(), StoreError>;
}
