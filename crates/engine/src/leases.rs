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
//!
//! This file is the lease itself, an owned service ([`Leases`]) that knows the store,
//! this node's name and the lifetime, and nothing of sessions or runs; and the
//! [`LeaseGuard`] a request holds while it may still give a lease back. What the engine
//! does around it — the reaper that settles a dead node's
//! runs, dropping views another node changed — is in `reaper.rs`.

use crate::Clock;
use crate::error::{EngineError, Result};
use crate::registry::Registry;
use crate::store::Nodes;
use spool_protocol::time::Millis;
use spool_protocol::{RunError, SessionId};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The node id of a single process on its own store.
pub const LOCAL_NODE: &str = "local";

pub(crate) struct Leases {
    /// Only the lease rows ([`Nodes`]): all this service reads or writes.
    store: Arc<dyn Nodes>,
    node: String,
    ttl: Duration,
    /// Every lease time (taken, renewed, expired) is this clock's, and so is the
    /// renewal schedule: a test that moves it decides when a lease expires.
    clock: Clock,
}

/// What a run hands [`Leases::keep_renewed`]: when it finished, how to stop it, and
/// the failure it then settles with.
pub(crate) struct Renewal {
    pub finished: CancellationToken,
    pub cancel: CancellationToken,
    pub failed_as: Arc<OnceLock<RunError>>,
}

/// A lease this node just took. Dropped without [`keep`](Self::keep) (an early return,
/// an error), it is given back in the background — unless a run of the session executes
/// here, which is why the guard asks the registry.
pub(crate) struct LeaseGuard {
    leases: Arc<Leases>,
    sessions: Arc<Registry>,
    session: Option<SessionId>,
}

impl LeaseGuard {
    /// Takes `session`'s lease for this node, or answers busy when another node has it.
    /// The lease is given back when the guard drops, unless [`keep`](Self::keep) hands
    /// it to a run.
    ///
    /// Another node's lease, even expired, is busy too: taking it over means settling
    /// that node's runs, which only the reaper does. A request that took it instead
    /// would start a run beside the dead node's, or (a decision that lost) give the
    /// lease up, and the dead node's run would never be reaped. The reaper comes within
    /// half a lease.
    pub async fn take(leases: &Arc<Leases>, sessions: &Arc<Registry>, session: &SessionId) -> Result<LeaseGuard> {
        leases.take(session).await?;
        Ok(LeaseGuard { leases: leases.clone(), sessions: sessions.clone(), session: Some(session.clone()) })
    }

    /// The run now holds the lease; it renews and releases it.
    pub fn keep(mut self) {
        self.session = None;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let (leases, sessions) = (self.leases.clone(), self.sessions.clone());
            tokio::spawn(async move {
                // On one node, a lease taken again by a request that then lost (a second
                // decision) is the running run's own: it stays.
                if !sessions.runs_here(&session) {
                    leases.release(&session).await;
                }
            });
        }
    }
}

impl Leases {
    pub fn new(store: Arc<dyn Nodes>, node: String, ttl: Duration, clock: Clock) -> Self {
        Leases { store, node, ttl, clock }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ttl_ms(&self) -> Millis {
        crate::clock::millis(self.ttl)
    }

    /// Takes `session`'s lease for this node, or answers busy when another node has it.
    ///
    /// Another node's lease, even expired, is busy too: taking it over means settling
    /// that node's runs, which only the reaper does ([`take_over`](Self::take_over)). A
    /// request that took it instead would start a run beside the dead node's, or (a
    /// decision that lost) give the lease up, and the dead node's run would never be
    /// reaped. The reaper comes within half a lease.
    pub async fn take(&self, session: &SessionId) -> Result<()> {
        if let Some(lease) = self.store.get_lease(session).await?
            && lease.node_id != self.node
            && lease.expires_at <= self.clock.now_ms()
        {
            return Err(EngineError::SessionBusy(format!("a run on node {}, which stopped renewing", lease.node_id)));
        }
        if self.store.acquire_lease(session, &self.node, self.clock.now_ms(), self.ttl_ms()).await? {
            return Ok(());
        }
        let holder = self.store.get_lease(session).await?.map(|l| l.node_id);
        Err(EngineError::SessionBusy(format!("a run on node {}", holder.as_deref().unwrap_or("(another)"))))
    }

    /// Takes an expired lease over (the reaper): true when this node now holds it.
    pub async fn take_over(&self, session: &SessionId) -> Result<bool> {
        Ok(self.store.acquire_lease(session, &self.node, self.clock.now_ms(), self.ttl_ms()).await?)
    }

    /// Gives the lease up (a failure is logged: the lease then simply expires).
    pub async fn release(&self, session: &SessionId) {
        if let Err(e) = self.store.release_lease(session, &self.node).await {
            tracing::warn!(%session, error = %e, "could not release a session lease; it will expire");
        }
    }

    /// Renews the lease every third of its lifetime until the run finishes. When a
    /// renewal is refused, or none succeeds for a whole lifetime, the run is cancelled
    /// to settle as failed with `lease_lost`.
    ///
    /// The renewals keep a fixed schedule (a third, two thirds, one lifetime … after
    /// the lease was taken), not "a third after the last renewal returned": a slow
    /// store round trip must not eat into the slack the next renewal has left.
    pub fn keep_renewed(self: &Arc<Self>, session: SessionId, run: Renewal) {
        let leases = self.clone();
        let Renewal { finished, cancel, failed_as } = run;
        let every = self.ttl / 3;
        let taken = self.clock.now_ms();
        let mut ticks = self.clock.ticks(taken.saturating_add(crate::clock::millis(every)), every);
        tokio::spawn(async move {
            let mut renewed_at = taken;
            loop {
                let now = tokio::select! {
                    _ = finished.cancelled() => return,
                    now = ticks.tick() => now,
                };
                let kept = match leases.store.renew_lease(&session, &leases.node, now, leases.ttl_ms()).await {
                    Ok(true) => {
                        renewed_at = now;
                        true
                    }
                    Ok(false) => false,
                    Err(e) => {
                        tracing::warn!(%session, error = %e, "could not renew a session lease");
                        now - renewed_at < leases.ttl_ms()
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
}
