//! Approvals: a run parked on a tool call until a person decides, with the checkpoint
//! it resumes from, and the marks that keep a decided call from running twice across a
//! crash.
//!
//! The writes here also write their outbox events (issue 41, see [`super::Outbox`]) in
//! the same transaction: `interrupt_run` and `supersede_approval` tell the approval
//! requested (`approval.requested`, or `question.asked` for a question a person
//! answers), `supersede_approval` the replaced one resolved as superseded, and
//! `settle_approval` the settle that won resolved; a write that loses tells nothing.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Approvals: Send + Sync + 'static {
    /// Interrupts a run, in ONE transaction: inserts the (pending) approval together
    /// with the checkpoint the run needs to continue, and writes the run (whose status
    /// is `interrupted`). Either all of it is durable or none.
    async fn interrupt_run(
        &self,
        run: &Run,
        approval: &Approval,
        checkpoint: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// Replaces an approval whose call has not started with a new one asking for the
    /// same call, because the call's target changed since it was asked. ONE transaction:
    /// moves `old.id` from `old.from` (pending; or resolved, for a decision a crash kept
    /// from running) to `superseded` — only while it has no "tool call started" mark —
    /// recording `old.actor` and `old.at`; inserts `approval` (pending) with its
    /// `checkpoint`; and writes `run` (interrupted). Returns false, writing nothing, when
    /// `old` had moved on (someone else acted first).
    async fn supersede_approval(
        &self,
        old: &Supersede<'_>,
        run: &Run,
        approval: &Approval,
        checkpoint: &serde_json::Value,
    ) -> Result<bool, StoreError>;
    /// An approval with its checkpoint.
    async fn get_approval(&self, id: &ApprovalId) -> Result<Option<(Approval, serde_json::Value)>, StoreError>;
    /// The session's pending approvals, oldest first.
    async fn pending_approvals(&self, session: &SessionId) -> Result<Vec<Approval>, StoreError>;
    /// Every pending approval of every session (to re-arm expiry timers at start-up).
    async fn all_pending_approvals(&self) -> Result<Vec<Approval>, StoreError>;
    /// The project's sessions with an approval pending: a run parked there, waiting for
    /// a person (what session lists mark `waiting`).
    async fn waiting_sessions(&self, project: &ProjectId) -> Result<Vec<SessionId>, StoreError>;
    /// The conditional update that makes a decision happen once: moves the approval
    /// from `pending` to `status` (resolved, expired or cancelled), recording decision,
    /// message, actor and time. Returns false — and writes nothing — when it was not
    /// pending any more (someone else won).
    async fn settle_approval(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        decision: Option<&Decision>,
        message: Option<&str>,
        actor: Option<&UserId>,
        at: time::Millis,
    ) -> Result<bool, StoreError>;

    /// For every `running` or `interrupted` run whose latest approval is resolved: that
    /// approval, its checkpoint and its "tool call started" mark. A crash may have come
    /// between recording the decision and its tool (see the engine's start-up).
    async fn decided_calls(&self) -> Result<Vec<DecidedCall>, StoreError>;
    /// Records, durably and before the tool runs, that the call decided by `approval`
    /// is starting: after a crash it is never run again.
    async fn mark_call_started(&self, approval: &ApprovalId, at: time::Millis) -> Result<(), StoreError>;
}

/// A decided approval of a run that was `running`: what start-up needs to tell a call
/// that never started (run it) from one that started (never again).
#[derive(Debug, Clone)]
pub struct DecidedCall {
    pub approval: Approval,
    pub checkpoint: serde_json::Value,
    /// When the decided tool call started, if it did.
    pub started_at: Option<time::Millis>,
}

/// The approval a [`Approvals::supersede_approval`] replaces: which one, the status it
/// must still have, and who (if anyone) acted and when.
#[derive(Debug, Clone)]
pub struct Supersede<'a> {
    pub id: &'a ApprovalId,
    pub from: ApprovalStatus,
    pub actor: Option<&'a UserId>,
    pub at: time::Millis,
}
