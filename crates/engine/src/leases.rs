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
//!   gone — and, if another node did take the lease over, it settles nothing.
//! * Every write a run makes is fenced. Each taking of a lease draws an epoch (kept
//!   while the same node renews it, new when the lease changes hands or is taken after
//!   being given up), and the run's writes go through a store held to that taking
//!   ([`LeaseFence`], [`Nodes::fenced`](crate::store::Nodes::fenced)): each write is one
//!   transaction that first checks, in the database, that the lease row still names
//!   this node and this epoch, and writes nothing (`StoreError::Fenced`) when it does
//!   not. So a node frozen past its lease (SIGSTOP, a VM paused, a partition from the
//!   database), whose run another node already settled as `node_lost`, cannot append a
//!   message, rewrite the run, take a queued steer, change the session record or leave
//!   a draft when it wakes, however late its writes arrive. Held: starting the run with
//!   its prompt (or a queued one), messages, drafts, the run's record (settling,
//!   parking at an approval, marking a decided call started), steers, the session
//!   record, its todos and memory, step snapshots, the reaper's own settling.
//! * Frames are not in the database, so they cannot be fenced there: a run publishes
//!   only while its node knows the lease to be its own ([`Held::speaks`]: until the
//!   end its last renewal set, on the engine's clock, and no renewal refused since),
//!   and a run whose settling was fenced stops quietly — no `agent_end`, no idle state,
//!   no queue started — since the node that took the lease over announced the run's
//!   end. So does a run whose settling could not be stored at all (the database out of
//!   reach): an end the store does not hold is not announced; the run keeps its lease
//!   unrenewed, and when it expires a reaper settles the run `node_lost` and announces
//!   that, once. A frame published a moment before the lease's end can still reach the bus
//!   after the new holder's (the delay of one publish), and nodes' clocks must agree to
//!   well within a lease, as they must for leases at all.
//! * Not fenced: the run's frame log (`run_log.rs`; it records what the bus ordered,
//!   every node's frames, and is only written by the node that started the run), the
//!   end of a live ask (a tool's question while it runs, `approvals/live.rs`: its
//!   asking is fenced, its settling is a decision's, which a stale node loses to the
//!   new holder's `end_orphaned`), the session's first title (proposed in the
//!   background, often after a quick run gave its lease up; written only while the
//!   session has none), and the settling of a parked run's calls by a stop or an
//!   expiry (no run holds a lease then).
//! * One machine (SQLite) uses one fixed node id, so after a crash the restarted
//!   process owns its old leases at once (and their epochs); the runs a crash
//!   interrupted are failed at start (`server_restarted`), as before leases. With a
//!   shared store, a restarted node has a new id and its old runs end as `node_lost`
//!   after the lease time.
//!
//! This file is the lease itself, an owned service ([`Leases`]) that knows the store,
//! this node's name and the lifetime, and nothing of sessions or runs; the
//! [`LeaseGuard`] a request holds while it may still give a lease back; and [`Held`],
//! the lease as a run holds it. What the engine does around it — the reaper that
//! settles a dead node's runs, dropping views another node changed — is in
//! `reaper.rs`.

use crate::Clock;
use crate::error::{EngineError, Result};
use crate::store::{LeaseFence, Nodes};
use spool_protocol::time::Millis;
use spool_protocol::{RunError, SessionId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
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
    /// How many holders on this node each session's lease has: requests that took it
    /// and have not let it go yet, and the run that keeps it. Takings on one node share
    /// the lease and its epoch (a decision that loses takes the running run's lease
    /// again), so the row is given back only when the last holder lets go — never from
    /// under a run, which would fence the run out of its own session. A tokio mutex: a
    /// count and the row change together, across the store's round trip. (One for the
    /// node: a lease is taken or given back once a run, not per frame.)
    holders: tokio::sync::Mutex<HashMap<SessionId, usize>>,
}

/// What a run hands [`Leases::keep_renewed`]: when it finished, how to stop it, and
/// the failure it then settles with.
pub(crate) struct Renewal {
    pub finished: CancellationToken,
    pub cancel: CancellationToken,
    pub failed_as: Arc<OnceLock<RunError>>,
}

/// A lease as a run holds it: the fence its writes carry, and until when this node
/// knows the lease to be its own — the end its last successful renewal set (on the
/// engine's clock), unless a renewal was refused since. Shared by the run and its
/// renewals.
pub(crate) struct Held {
    fence: LeaseFence,
    clock: Clock,
    /// The lease's end as this node last set it, in `clock`'s milliseconds.
    until: AtomicI64,
    /// A renewal was refused: another node may hold the lease now.
    lost: AtomicBool,
}

impl Held {
    fn new(fence: LeaseFence, clock: Clock, until: Millis) -> Held {
        Held { fence, clock, until: AtomicI64::new(until), lost: AtomicBool::new(false) }
    }

    /// The taking the run's writes are held to.
    pub fn fence(&self) -> &LeaseFence {
        &self.fence
    }

    /// Whether the run may still publish: the lease is this node's as far as it knows
    /// (see the module doc, "Failure semantics"). Past its end another node may have
    /// taken it over and announced the run's end; a frame after that would contradict it.
    pub fn speaks(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && self.clock.now_ms() < self.until.load(Ordering::Acquire)
    }

    fn renewed(&self, until: Millis) {
        self.until.fetch_max(until, Ordering::AcqRel);
    }

    fn lose(&self) {
        self.lost.store(true, Ordering::Release);
    }
}

/// A lease this node just took. Dropped without [`keep`](Self::keep) (an early return,
/// an error), it lets the lease go in the background: given back unless another holder
/// on this node (a run of the session) still has it.
pub(crate) struct LeaseGuard {
    leases: Arc<Leases>,
    session: Option<SessionId>,
    /// This taking, and when the lease it took ends.
    fence: LeaseFence,
    until: Millis,
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
    pub async fn take(leases: &Arc<Leases>, session: &SessionId) -> Result<LeaseGuard> {
        let until = leases.clock.now_ms().saturating_add(leases.ttl_ms());
        let fence = leases.take(session).await?;
        Ok(LeaseGuard { leases: leases.clone(), session: Some(session.clone()), fence, until })
    }

    /// The taking: what the writes that start the run are held to.
    pub fn fence(&self) -> &LeaseFence {
        &self.fence
    }

    /// The run now holds the lease (this taking's share of it): it renews it, holds its
    /// writes to it and lets it go ([`Leases::let_go`]) when it settles or parks.
    pub fn keep(mut self) -> Arc<Held> {
        self.session = None;
        Arc::new(Held::new(self.fence.clone(), self.leases.clock.clone(), self.until))
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let leases = self.leases.clone();
            // On one node, a lease taken again by a request that then lost (a second
            // decision) is the running run's too: it stays while the run holds it.
            tokio::spawn(async move { leases.let_go(&session).await });
        }
    }
}

impl Leases {
    pub fn new(store: Arc<dyn Nodes>, node: String, ttl: Duration, clock: Clock) -> Self {
        Leases { store, node, ttl, clock, holders: Default::default() }
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
    /// The caller holds it until it lets it go ([`let_go`](Self::let_go)).
    pub async fn take(&self, session: &SessionId) -> Result<LeaseFence> {
        if let Some(lease) = self.store.get_lease(session).await?
            && lease.node_id != self.node
            && lease.expires_at <= self.clock.now_ms()
        {
            return Err(EngineError::SessionBusy(format!("a run on node {}, which stopped renewing", lease.node_id)));
        }
        let mut holders = self.holders.lock().await;
        if let Some(fence) = self.store.acquire_lease(session, &self.node, self.clock.now_ms(), self.ttl_ms()).await? {
            *holders.entry(session.clone()).or_default() += 1;
            return Ok(fence);
        }
        drop(holders);
        let holder = self.store.get_lease(session).await?.map(|l| l.node_id);
        Err(EngineError::SessionBusy(format!("a run on node {}", holder.as_deref().unwrap_or("(another)"))))
    }

    /// Takes an expired lease over (the reaper): this node's taking, when it now holds it.
    pub async fn take_over(&self, session: &SessionId) -> Result<Option<LeaseFence>> {
        Ok(self.store.acquire_lease(session, &self.node, self.clock.now_ms(), self.ttl_ms()).await?)
    }

    /// One holder of `session`'s lease on this node lets it go; the last one gives it
    /// back.
    pub async fn let_go(&self, session: &SessionId) {
        let mut holders = self.holders.lock().await;
        let Some(count) = holders.get_mut(session) else { return };
        *count -= 1;
        if *count == 0 {
            holders.remove(session);
            self.release(session).await;
        }
    }

    /// One holder of `session`'s lease on this node lets it go without giving it back,
    /// even as the last: a run whose end could not be stored leaves the lease to expire,
    /// so a reaper (this node's or another's) settles the run, which would otherwise stay
    /// `running` with no lease to reap.
    pub async fn abandon(&self, session: &SessionId) {
        let mut holders = self.holders.lock().await;
        if let Some(count) = holders.get_mut(session) {
            *count -= 1;
            if *count == 0 {
                holders.remove(session);
            }
        }
    }

    /// Gives back a lease the reaper took over, unless a holder on this node has it.
    pub async fn release_unheld(&self, session: &SessionId) {
        let holders = self.holders.lock().await;
        if !holders.contains_key(session) {
            self.release(session).await;
        }
    }

    /// Gives the lease up (a failure is logged: the lease then simply expires).
    async fn release(&self, session: &SessionId) {
        if let Err(e) = self.store.release_lease(session, &self.node).await {
            tracing::warn!(%session, error = %e, "could not release a session lease; it will expire");
        }
    }

    /// Renews the lease `held` took every third of its lifetime until the run finishes,
    /// moving the end `held` knows of with each renewal. When a renewal is refused, or
    /// none succeeds for a whole lifetime, the run is cancelled to settle as failed with
    /// `lease_lost` (and `held` stops speaking at once on a refusal, or at the end its
    /// last renewal set).
    ///
    /// The renewals keep a fixed schedule (a third, two thirds, one lifetime … after
    /// the lease was taken), not "a third after the last renewal returned": a slow
    /// store round trip must not eat into the slack the next renewal has left.
    pub fn keep_renewed(self: &Arc<Self>, held: Arc<Held>, run: Renewal) {
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
                let kept = match leases.store.renew_lease(held.fence(), now, leases.ttl_ms()).await {
                    Ok(true) => {
                        renewed_at = now;
                        held.renewed(now.saturating_add(leases.ttl_ms()));
                        true
                    }
                    Ok(false) => {
                        held.lose();
                        false
                    }
                    Err(e) => {
                        tracing::warn!(session = %held.fence().session_id, error = %e, "could not renew a session lease");
                        now - renewed_at < leases.ttl_ms()
                    }
                };
                if !kept {
                    tracing::warn!(session = %held.fence().session_id, "lost the session lease; cancelling the run");
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
