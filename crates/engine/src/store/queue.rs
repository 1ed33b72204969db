//! The queue: prompts that arrived while their session was busy, waiting in order for
//! the run that takes them, bounded per session and per owner, and pausable.

use super::error::StoreError;
use super::runs::RunInsert;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Queue: Send + Sync + 'static {
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
    /// Puts a steer (issue 40: a user message for the running run) at the end of its
    /// session's queue, marked as a steer, unless the session already holds
    /// `limits.per_session` steers (`Full`) or the owner's limits are reached
    /// (`OwnerFull`); a request id queued already comes back as `Existing`.
    async fn queue_steer(&self, prompt: &QueuedPrompt, limits: QueueLimits) -> Result<QueueInsert, StoreError>;
    /// The session's steers not yet taken, in queue order.
    async fn queued_steers(&self, session: &SessionId) -> Result<Vec<QueuedPrompt>, StoreError>;
    /// Takes a steer into its session's running run, in ONE transaction: removes it
    /// from the queue and inserts `message` (the user message at the run's next index).
    /// False, writing nothing, when it is not queued any more (taken or removed).
    async fn take_steer(
        &self,
        id: &MessageId,
        session: &SessionId,
        owner: &UserId,
        message: &IndexedMessage,
    ) -> Result<bool, StoreError>;
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
}

/// A prompt waiting in its session's queue (see [`Queue::queue_prompt`]): what clients
/// see of it, and what the run that takes it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedPrompt {
    pub session_id: SessionId,
    pub owner_id: UserId,
    pub message: frame::QueuedMessage,
    pub approval_policy: Option<crate::ApprovalPolicy>,
    pub on_disconnect: crate::OnDisconnect,
}

/// The result of [`Queue::queue_prompt`].
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

/// What [`Queue::queue_prompt`] lets one session and one owner hold.
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
