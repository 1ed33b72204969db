//! Run frames: the durable log of a run's session-stream frames, kept in chunks so a
//! run replays exactly long after it left the in-memory ring (see [`crate::run_log`],
//! which writes and reads it; the store keeps the chunks as opaque bytes).

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait RunFrames: Send + Sync + 'static {
    /// Adds one chunk of a run's log; writing the same `(run, chunk)` again replaces it,
    /// so a failed write is retried.
    async fn append_run_frames(&self, chunk: &RunFrameChunk) -> Result<(), StoreError>;
    /// Every stored chunk of a run, in chunk order (none: the run was never logged, or
    /// retention pruned it).
    async fn run_frames(&self, run: &RunId) -> Result<Vec<RunFrameChunk>, StoreError>;
    /// Deletes the chunks written before `before`; returns how many.
    async fn prune_run_frames(&self, before: time::Millis) -> Result<u64, StoreError>;
}

/// One chunk of a run's frame log: the frames with session seqs `first_seq..=last_seq`
/// (`frames` of them), as `data` (opaque to the store). The last chunk of a run logged
/// whole says `complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFrameChunk {
    pub run_id: RunId,
    pub chunk: u64,
    pub session_id: SessionId,
    pub stream_id: StreamId,
    pub first_seq: u64,
    pub last_seq: u64,
    pub frames: u64,
    pub complete: bool,
    pub data: Vec<u8>,
    pub created_at: time::Millis,
}
