//! Drafts: the assistant message a run is streaming, checkpointed as it grows, so a
//! crash or a stop does not take away what a person watched arrive.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Drafts: Send + Sync + 'static {
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
}

/// The assistant message a run is streaming, as last checkpointed: what a crash or a
/// stop must not take away from a person who watched it arrive. Written as the message
/// it began as plus chunks of deltas ([`Drafts::append_draft`]); read back whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub owner_id: UserId,
    pub message: IndexedMessage,
}
