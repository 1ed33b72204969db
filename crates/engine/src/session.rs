//! A session in memory ([`Loaded`]) and the handle of the run it has ([`ActiveHandle`]):
//! the data the registry keeps, requests lock, runs publish through and approvals
//! continue. Plain data with the one rule that needs both halves — a parked run is held
//! only while its approval is pending — so every service that touches a loaded session
//! imports this file, not the engine.

use crate::events::SessionEvents;
use spool_protocol::{ApprovalId, RunError, RunId};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// How long a read waits for this node's own changes to come back from the frame bus
/// before answering with what it has (bus mode only).
pub(crate) const READ_YOUR_WRITES: std::time::Duration = std::time::Duration::from_secs(2);

/// A session in memory: its event stream plus the handle of its active run.
pub(crate) struct Loaded {
    pub events: SessionEvents,
    pub root: PathBuf,
    /// The project directory's identity when registered (see `ToolContext::root_id`).
    pub root_id: Option<spool_protocol::DirIdentity>,
    /// Serializes the session's control steps — accepting a prompt, applying a decision,
    /// expiring or aborting — so "what is the run doing?" and "change it" are one step.
    pub control: tokio::sync::Mutex<()>,
    /// Serializes changes to the session's record (title, model, mode, rules, read
    /// receipt): each reads the record, changes it, stores and publishes it under this
    /// lock. Without it two at once undid each other: a title the model proposed, read
    /// before a PATCH of the model and written after it, put the old model back.
    pub record: tokio::sync::Mutex<()>,
    pub active: Mutex<Option<ActiveHandle>>,
    /// When a request last touched this session (ms), for idle unloading.
    pub(crate) touched: std::sync::atomic::AtomicI64,
}

#[derive(Clone)]
pub(crate) struct ActiveHandle {
    pub run_id: RunId,
    pub cancel: CancellationToken,
    /// Cancelled by the run task once the run is settled and stored, or parked at an
    /// approval.
    pub finished: CancellationToken,
    /// Set while the run is parked at this approval (no task is executing it).
    pub interrupted: Option<ApprovalId>,
    /// Set (before `cancel` fires) when the run must end as failed rather than
    /// cancelled: the node lost the session's lease, or is shutting down.
    pub failed_as: Arc<std::sync::OnceLock<RunError>>,
}

impl ActiveHandle {
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            cancel: CancellationToken::new(),
            finished: CancellationToken::new(),
            interrupted: None,
            failed_as: Arc::default(),
        }
    }
}

impl Loaded {
    /// The run this node holds for the session. A run parked at an approval is held only
    /// while the session's view still shows that approval pending: once it is decided,
    /// expired or aborted — here, or on another node and seen through its frames — the
    /// parked handle is stale and is dropped, so a copy taken when the session was
    /// loaded never keeps it busy.
    pub fn active(&self) -> Option<ActiveHandle> {
        let handle = self.active.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let parked_at = handle.as_ref().and_then(|h| h.interrupted.clone());
        let Some(approval) = parked_at else { return handle };
        // The view's lock is never held while `active` is taken (nor the reverse).
        if self.events.read(|s| s.pending_approvals.iter().any(|a| a.id == approval)) {
            return handle;
        }
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if active.as_ref().is_some_and(|h| h.interrupted.as_ref() == Some(&approval)) {
            *active = None;
        }
        active.clone()
    }

    pub fn set_active(&self, handle: Option<ActiveHandle>) {
        *self.active.lock().unwrap_or_else(|p| p.into_inner()) = handle;
    }

    /// A run settled: the session is idle, with no active run and no drafts (a draft
    /// left is a message that will never end). No loop event says all that, so the
    /// state goes out whole.
    pub fn publish_idle(&self) {
        self.events.publish(|state| {
            state.status = spool_protocol::SessionStatus::Idle;
            state.active_run = None;
            state.drafts.clear();
            Some(spool_protocol::frame::FrameBody::State { state: Box::new(state.clone()) })
        });
    }

    /// The session's record changed (stored already): the state takes it, and every
    /// view — other nodes' too — gets the state whole. No loop event carries a record,
    /// so this is a `state` frame rather than a fold.
    pub fn publish_session(&self, session: spool_protocol::Session) {
        self.events.publish(move |state| {
            state.session = session;
            Some(spool_protocol::frame::FrameBody::State { state: Box::new(state.clone()) })
        });
    }
}
