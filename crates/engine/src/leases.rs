//! Session leases: which node runs a session. A run executes on one node; before it
//! starts (a prompt, or the winning decision on an approval) the node takes the
//! session's lease in the store, renews it while the run lives, and gives it up when
//! the run settles or parks at an approval. A node that cannot take the lease answers
//! like any busy session.
//!
//! # Failure semantics
//!
//! * A node that dies stops renewing. Once its lease expires, whichever node's reaper
//!   takes the lease over first settles the session's runs. A run resuming from an
//!   approved decision whose tool had not started (its "started" mark is absent) is
//!   resumed there, once; one whose tool had started ends `failed` with
//!   `tool_outcome_unknown`; every other `running` run ends `failed` with `node_lost`.
//!   None is re-executed past a started tool: it may already have had its side effect.
//!   A run parked at an approval holds no lease and stays resumable.
//! * A node that is alive but cannot renew (the store was unreachable for a whole
//!   lease, or another node already declared it dead) cancels its run, which settles
//!   as `failed` with `lease_lost`: it must not go on beside a node that thinks it is
//!   gone.
//! * One machine (SQLite) uses one fixed node id, so after a crash the restarted
//!   process owns its old leases at once; the runs a crash interrupted are failed at
//!   start (`server_restarted`), as before leases. With a shared store, a restarted
//!   node has a new id and its old runs end as `node_lost` after the lease time.

use crate::engine::{ActiveHandle, Engine, Loaded};
use crate::error::{EngineError, Result};
use spool_protocol::time::{Millis, now_ms};
use spool_protocol::{RunError, RunStatus, SessionId};
use std::time::Duration;

/// The node id of a single process on its own store.
pub const LOCAL_NODE: &str = "local";

/// A lease this node just took. Dropped without [`keep`](Self::keep) (an early return,
/// an error), it is given back in the background.
pub(crate) struct LeaseGuard {
    engine: Engine,
    session: Option<SessionId>,
}

impl LeaseGuard {
    /// The run now holds the lease; it renews and releases it.
    pub fn keep(mut self) {
        self.session = None;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let engine = self.engine.clone();
            tokio::spawn(async move {
                // On one node, a lease taken again by a request that then lost (a second
                // decision) is the running run's own: it stays.
                if !engine.runs_here(&session) {
                    engine.drop_lease(&session).await;
                }
            });
        }
    }
}

impl Engine {
    fn lease_ttl(&self) -> Millis {
        Millis::try_from(self.inner.config.lease_ttl.as_millis()).unwrap_or(Millis::MAX)
    }

    /// Takes `session`'s lease for this node, or answers busy when another node has it.
    /// The lease is given back when the guard drops, unless [`LeaseGuard::keep`] hands
    /// it to a run.
    ///
    /// Another node's lease, even expired, is busy too: taking it over means settling
    /// that node's runs, which only the reaper does. A request that took it instead
    /// would start a run beside the dead node's, or (a decision that lost) give the
    /// lease up, and the dead node's run would never be reaped. The reaper comes within
    /// half a lease.
    pub(crate) async fn take_lease(&self, session: &SessionId) -> Result<LeaseGuard> {
        let node = &self.inner.config.node_id;
        if let Some(lease) = self.inner.store.get_lease(session).await?
            && &lease.node_id != node
            && lease.expires_at <= now_ms()
        {
            return Err(EngineError::SessionBusy(format!("a run on node {}, which stopped renewing", lease.node_id)));
        }
        if self.inner.store.acquire_lease(session, node, now_ms(), self.lease_ttl()).await? {
            return Ok(LeaseGuard { engine: self.clone(), session: Some(session.clone()) });
        }
        let holder = self.inner.store.get_lease(session).await?.map(|l| l.node_id);
        Err(EngineError::SessionBusy(format!("a run on node {}", holder.as_deref().unwrap_or("(another)"))))
    }

    /// With a shared store, another node may have written to a session since this node
    /// loaded it (until the event bus keeps every node's view live): true when the
    /// stored conversation is not the one in memory.
    pub(crate) async fn is_stale(&self, loaded: &Loaded) -> Result<bool> {
        if !self.inner.config.shared_store {
            return Ok(false);
        }
        let id = loaded.events.read(|s| s.session.id.clone());
        let stored = self.inner.store.count_messages(&id).await?;
        Ok(loaded.events.read(|s| s.total) != stored)
    }

    /// Gives the lease up (a failure is logged: the lease then simply expires).
    pub(crate) async fn drop_lease(&self, session: &SessionId) {
        if let Err(e) = self.inner.store.release_lease(session, &self.inner.config.node_id).await {
            tracing::warn!(%session, error = %e, "could not release a session lease; it will expire");
        }
    }

    /// Renews the lease every third of its lifetime until the run finishes. When a
    /// renewal is refused, or none succeeds for a whole lifetime, the run is cancelled
    /// to settle as failed with `lease_lost`.
    pub(crate) fn keep_lease(&self, session: SessionId, handle: &ActiveHandle) {
        let engine = self.clone();
        let (finished, cancel, failed_as) = (handle.finished.clone(), handle.cancel.clone(), handle.failed_as.clone());
        let every = self.inner.config.lease_ttl / 3;
        tokio::spawn(async move {
            let mut renewed_at = now_ms();
            loop {
                tokio::select! {
                    _ = finished.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                let node = &engine.inner.config.node_id;
                let now = now_ms();
                let kept = match engine.inner.store.renew_lease(&session, node, now, engine.lease_ttl()).await {
                    Ok(true) => {
                        renewed_at = now;
                        true
                    }
                    Ok(false) => false,
                    Err(e) => {
                        tracing::warn!(%session, error = %e, "could not renew a session lease");
                        now - renewed_at < engine.lease_ttl()
                    }
                };
                if !kept {
                    tracing::warn!(%session, "lost the session lease; cancelling the run");
                    let _ = failed_as.set(RunError {
                        code: "lease_lost".into(),
                        message: "this node lost the session's lease (another node may have declared it dead), \
                                  so the run stopped"
                            .into(),
                    });
                    cancel.cancel();
                    return;
                }
            }
        });
    }

    /// Reaps expired leases every half lease. Holds only a weak reference, so it ends
    /// with the engine.
    pub(crate) fn spawn_reaper(&self) {
        let weak = std::sync::Arc::downgrade(&self.inner);
        let every = (self.inner.config.lease_ttl / 2).max(Duration::from_millis(20));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let engine = Engine { inner };
                if let Err(e) = engine.reap_expired_leases().await {
                    tracing::warn!(error = %e, "could not reap expired session leases");
                }
                if let Err(e) = engine.release_abandoned_claims().await {
                    tracing::warn!(error = %e, "could not release abandoned idempotency claims");
                }
            }
        });
    }

    /// One reaper pass: for every expired lease this node manages to take over, the
    /// lost node's decided calls are sorted by their "tool call started" marks (see
    /// [`crate::approvals::sort_decided`]): one that never started resumes here, one cut
    /// off while running fails `tool_outcome_unknown`; the session's other `running`
    /// runs are marked `failed` with `node_lost`. Then the lease is given up, unless a
    /// resumed run holds it. Returns how many runs were failed.
    pub async fn reap_expired_leases(&self) -> Result<usize> {
        let store = &self.inner.store;
        let node = &self.inner.config.node_id;
        let mut failed = 0;
        for lease in store.expired_leases(now_ms()).await? {
            // Taking the lease makes this node the single one that settles the session.
            if !store.acquire_lease(&lease.session_id, node, now_ms(), self.lease_ttl()).await? {
                continue;
            }
            if self.runs_here(&lease.session_id) {
                // Our own run, alive but late renewing: its renewal loop decides.
                continue;
            }
            let sorted = crate::approvals::sort_decided(&**store, Some(&lease.session_id)).await?;
            let mut lost = sorted.unknown;
            let error = RunError {
                code: "node_lost".into(),
                message: format!("node {} stopped renewing its lease while running this run", lease.node_id),
            };
            for mut run in store.runs_since(&lease.session_id, 0).await? {
                let resumes = sorted.resume.iter().any(|d| d.approval.run_id == run.id);
                if run.status != RunStatus::Running || resumes {
                    continue;
                }
                let now = now_ms();
                run.status = RunStatus::Failed;
                run.error = Some(error.clone());
                run.ended_at = Some(now);
                run.updated_at = now;
                store.update_run(&run).await?;
                crate::metrics::METRICS.run_settled(RunStatus::Failed);
                tracing::warn!(run = %run.id, node = %lease.node_id, "marked a run of a lost node failed");
                lost.push(run);
            }
            failed += lost.len();
            if self.inner.frames.is_some() {
                for run in &lost {
                    self.announce_lost(run).await;
                }
            } else {
                self.forget_stale(&lease.session_id);
            }
            if sorted.resume.is_empty() {
                self.drop_lease(&lease.session_id).await;
            }
            for call in sorted.resume {
                let run = call.approval.run_id.clone();
                tracing::warn!(%run, node = %lease.node_id, "resuming a lost node's decided call that never started");
                if let Err(e) = self.resume_decided(call).await {
                    tracing::error!(%run, error = %e, "could not resume a lost node's decided call");
                    self.drop_lease(&lease.session_id).await;
                }
            }
        }
        if failed > 0 {
            // What the lost runs had streamed joins the history, marked with the failure.
            self.commit_orphaned_drafts().await?;
        }
        Ok(failed)
    }

    /// Bus mode: settles a lost node's run in every node's view, with the frames a run
    /// that fails publishes, so clients on any node see it end.
    async fn announce_lost(&self, run: &spool_protocol::Run) {
        let loaded = match self.load(&run.owner_id, &run.session_id).await {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::warn!(run = %run.id, %error, "cannot announce a lost node's failed run");
                return;
            }
        };
        let event = |event| spool_protocol::frame::FrameBody::LoopEvent {
            run_id: run.id.clone(),
            message_index: None,
            message_id: None,
            event,
        };
        loaded.events.publish_body(event(spool_protocol::AgentEvent::AgentEnd {
            status: run.status.as_str().into(),
            usage: run.usage,
        }));
        loaded.events.publish(|s| {
            s.status = spool_protocol::SessionStatus::Idle;
            s.active_run = None;
            s.drafts.clear();
            Some(spool_protocol::frame::FrameBody::State { state: Box::new(s.clone()) })
        });
        // The prompt's timing row ends, with why (what the views explain).
        let timing = spool_protocol::frame::PromptTiming::of(run);
        let timed = timing.event();
        loaded.events.publish(|s| {
            crate::view::set_timing(s, timing);
            Some(event(timed))
        });
        loaded.events.publish_body(event(spool_protocol::AgentEvent::AgentSettled {}));
    }

    /// Whether this node is executing a run of the session right now.
    pub(crate) fn runs_here(&self, session: &SessionId) -> bool {
        let sessions = self.inner.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(session).and_then(|l| l.active()).is_some_and(|a| a.interrupted.is_none())
    }

    /// Drops this node's in-memory view of a session another node was running, so the
    /// next reader loads the settled state from the store (open streams end and their
    /// clients reconnect to a snapshot).
    pub(crate) fn forget_stale(&self, session: &SessionId) {
        let mut sessions = self.inner.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = sessions.get(session)
            && loaded.active().is_none()
        {
            loaded.events.close();
            sessions.remove(session);
        }
    }
}
