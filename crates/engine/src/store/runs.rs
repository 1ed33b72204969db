//! Runs: one agent turn answering one prompt, keyed by its `(session_id, request_id)`
//! so a retried request never starts a second run.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Runs: Send + Sync + 'static {
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
    /// Writes every mutable field: status, timings, usage, error, updated_at. A run
    /// written with a terminal status is settled as by [`Runs::settle_run`]: a settled
    /// run never changes again, and its `run.settled` event is written once.
    async fn update_run(&self, run: &Run) -> Result<(), StoreError>;
    /// Settles a run (its status is terminal), in ONE transaction with its `run.settled`
    /// event, only while the stored run is not settled yet: the conditional update picks
    /// one settler, so a second settle (another node's reaper, a stop racing the end)
    /// writes neither the run nor an event. Returns whether this call settled it.
    async fn settle_run(&self, run: &Run) -> Result<bool, StoreError>;
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
    /// Marks every run still `running` as `failed` with `error`, each with its
    /// `run.settled` event, in one transaction; returns how many.
    /// Called once at start-up: a run that was executing when the process died cannot
    /// continue (its in-memory state is gone) and must not be re-executed.
    /// Runs in `keep` are left alone: they resume from a decision (see
    /// [`Approvals::decided_calls`](super::approvals::Approvals::decided_calls)).
    async fn fail_running_runs(&self, error: &RunError, now: time::Millis, keep: &[RunId]) -> Result<u64, StoreError>;
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
