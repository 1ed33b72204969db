//! Step snapshots: which trees of a project's shadow repository a run recorded around
//! each step whose calls may change files (see [`crate::snapshots`]), one record per
//! turn of a run, for a revert to read back.

use super::error::StoreError;
use crate::snapshots::Skipped;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait StepSnapshots: Send + Sync + 'static {
    /// Records a step's `before` snapshot. A record of the same `(run, turn)` is kept
    /// as it is (a step is recorded once, before its first call).
    async fn insert_step_snapshot(&self, step: &StepSnapshot) -> Result<(), StoreError>;
    /// Records a step's `after` snapshot; returns the step's message index, or `None`
    /// when the step has no record (its `before` snapshot failed).
    async fn finish_step_snapshot(
        &self,
        run: &RunId,
        turn: u32,
        after_tree: &str,
        skipped: &Skipped,
    ) -> Result<Option<u64>, StoreError>;
    /// The step records of the session's active path in conversation order (those of
    /// shelved turns wait with their branch, see [`super::Branches`]).
    async fn list_step_snapshots(&self, session: &SessionId) -> Result<Vec<StepSnapshot>, StoreError>;
    /// Deletes the step records made before `before`; returns how many.
    async fn prune_step_snapshots(&self, before: time::Millis) -> Result<u64, StoreError>;
    /// Every tree of `project`'s shadow repository a record still names: the steps'
    /// `before` and `after` trees and the trees a pending revert's unrevert reads (its
    /// state's `pre` and `target`), each once. Pruning keeps what these need.
    async fn snapshot_trees(&self, project: &ProjectId) -> Result<Vec<String>, StoreError>;
}

/// The snapshots around one step of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSnapshot {
    pub run_id: RunId,
    pub turn: u32,
    pub session_id: SessionId,
    pub owner_id: UserId,
    pub project_id: ProjectId,
    /// The assistant message whose calls the step ran.
    pub message_index: u64,
    pub before_tree: String,
    pub before_skipped: Skipped,
    /// `None` until the step's last call finished (and for good when the run stopped
    /// inside the step).
    pub after_tree: Option<String>,
    pub after_skipped: Option<Skipped>,
    /// The node whose data directory holds the trees.
    pub node_id: String,
    pub created_at: time::Millis,
}
