//! What the engine does around session leases (the lease itself and the guard a request
//! holds while it may still give one back are `leases.rs`): the reaper that settles the
//! runs of a node that stopped renewing, and dropping an in-memory view another node
//! changed. See `leases.rs` for the failure semantics.

use crate::engine::Engine;
use crate::error::Result;
use crate::session::Loaded;
use spool_protocol::{RunError, RunStatus, SessionId};
use std::time::Duration;

impl Engine {
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

    /// Reaps expired leases every half lease, on the engine's clock (so a test that
    /// moves it past a lease's end sees the reaper come). Holds only a weak reference,
    /// so it ends with the engine.
    pub(crate) fn spawn_reaper(&self) {
        let every = (self.inner.leases.ttl() / 2).max(Duration::from_millis(20));
        // The first pass at once, as before: a lost node's leases may be long expired.
        self.spawn_every(every, |engine| async move {
            match engine.reap_expired_leases().await {
                Ok(_) => engine.inner.lease_loop.beat(),
                Err(e) => tracing::warn!(error = %e, "could not reap expired session leases"),
            }
            // After the reaping: a lost node's sessions may have prompts queued.
            if let Err(e) = engine.start_waiting_queues().await {
                tracing::warn!(error = %e, "could not start waiting queued prompts");
            }
            if let Err(e) = engine.inner.approvals.release_abandoned_claims().await {
                tracing::warn!(error = %e, "could not release abandoned idempotency claims");
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
        let mut failed = 0;
        let clock = &self.inner.config.clock;
        for lease in store.expired_leases(clock.now_ms()).await? {
            // Taking the lease makes this node the single one that settles the session;
            // what it settles is held to this taking, like a run's writes.
            let Some(taken) = self.inner.leases.take_over(&lease.session_id).await? else {
                continue;
            };
            if self.runs_here(&lease.session_id) {
                // Our own run, alive but late renewing: its renewal loop decides.
                continue;
            }
            let sorted =
                crate::approvals::sort_decided(&**store, Some(&lease.session_id), &self.inner.env.metrics).await?;
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
                let now = clock.now_ms();
                run.status = RunStatus::Failed;
                run.error = Some(error.clone());
                run.ended_at = Some(now);
                run.updated_at = now;
                store.fenced(taken.clone()).update_run(&run).await?;
                self.inner.env.metrics.run_settled(RunStatus::Failed);
                tracing::warn!(run = %run.id, node = %lease.node_id, "marked a run of a lost node failed");
                lost.push(run);
            }
            // Their live asks waited inside calls that died with the node.
            crate::approvals::end_orphaned(&**store, Some(&lease.session_id), clock.now_ms()).await?;
            failed += lost.len();
            if self.inner.frames.is_some() {
                for run in &lost {
                    self.announce_lost(run).await;
                }
            } else {
                self.forget_stale(&lease.session_id);
            }
            if sorted.resume.is_empty() {
                self.inner.leases.release_unheld(&lease.session_id).await;
            }
            for call in sorted.resume {
                let run = call.approval.run_id.clone();
                tracing::warn!(%run, node = %lease.node_id, "resuming a lost node's decided call that never started");
                if let Err(e) = self.resume_decided(call).await {
                    tracing::error!(%run, error = %e, "could not resume a lost node's decided call");
                    self.inner.leases.release_unheld(&lease.session_id).await;
                }
            }
        }
        if failed > 0 {
            // What the lost runs had streamed joins the history, marked with the failure.
            crate::drafts::commit_orphaned_drafts(&**store).await?;
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
            error: run.error.clone(),
        }));
        loaded.publish_idle();
        // The prompt's timing row ends, with why (what the views explain).
        loaded.events.publish_body(event(spool_protocol::frame::PromptTiming::of(run).event()));
        loaded.events.publish_body(event(spool_protocol::AgentEvent::AgentSettled {}));
    }

    /// Whether this node is executing a run of the session right now.
    pub(crate) fn runs_here(&self, session: &SessionId) -> bool {
        self.inner.sessions.runs_here(session)
    }

    /// Drops this node's in-memory view of a session another node was running, so the
    /// next reader loads the settled state from the store (open streams end and their
    /// clients reconnect to a snapshot).
    pub(crate) fn forget_stale(&self, session: &SessionId) {
        self.inner.sessions.forget_if_idle(session);
    }
}
