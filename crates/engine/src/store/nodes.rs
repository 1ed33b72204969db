//! Nodes: what each serving process records about itself in the shared store, the
//! session leases that keep two nodes from running one session, and the address it
//! listens on.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;
use std::sync::Arc;

#[async_trait]
pub trait Nodes: Send + Sync + 'static {
    /// Takes the session's lease for `node` until `now + ttl`, in one atomic step: the
    /// [`LeaseFence`] of this taking when the lease was free, expired (`expires_at <= now`) or
    /// already `node`'s (then it is extended, its epoch kept); `None`, writing nothing,
    /// while another node holds it. Of any number of nodes racing for one session, at
    /// most one gets a fence. A lease that changes hands, or is taken afresh, gets a new
    /// epoch: whoever held it before can no longer write through its fence.
    async fn acquire_lease(
        &self,
        session: &SessionId,
        node: &str,
        now: time::Millis,
        ttl: time::Millis,
    ) -> Result<Option<LeaseFence>, StoreError>;
    /// Extends the lease `fence` took to `now + ttl`; false when that taking no longer
    /// holds it (released, taken over, or already expired: another node may have
    /// declared this one dead, so a run whose renewal fails must stop rather than carry
    /// on).
    async fn renew_lease(&self, fence: &LeaseFence, now: time::Millis, ttl: time::Millis) -> Result<bool, StoreError>;
    /// Gives the lease up; false (and nothing changes) when `node` did not hold it.
    async fn release_lease(&self, session: &SessionId, node: &str) -> Result<bool, StoreError>;
    /// The session's lease row, expired or not.
    async fn get_lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError>;
    /// Every lease expired at `now` (its node stopped renewing: probably dead), oldest
    /// expiry first. A node that takes one over with `acquire_lease` is the single one
    /// that marks the dead node's runs of that session failed.
    async fn expired_leases(&self, now: time::Millis) -> Result<Vec<Lease>, StoreError>;

    /// Records (or refreshes) the address a node serves on.
    async fn record_listener(&self, listener: &Listener) -> Result<(), StoreError>;
    /// Forgets a node's address (it stopped serving).
    async fn remove_listener(&self, node: &str) -> Result<(), StoreError>;
    /// Every recorded listener, fresh or stale.
    async fn listeners(&self) -> Result<Vec<Listener>, StoreError>;

    /// This store with the writes a run makes held to `fence`: each of them is one
    /// transaction that first checks, in the database, that the session's lease is
    /// still that taking (the same node, the same epoch), and writes nothing, failing
    /// with [`StoreError::Fenced`], when it is not. So a node that lost the lease (it
    /// was frozen, or cut off from the database, past the lease's end, and another node
    /// took the session over) cannot change what the new holder settled, however late
    /// its writes arrive. Held: starting a run (`start_run`, `take_queued`), messages,
    /// drafts, the run's record (`update_run`, `settle_run`, `interrupt_run`,
    /// `mark_call_started`), steers taken, the session record, its todos and memory, and
    /// step snapshots. Everything else goes to the store as it is.
    fn fenced(&self, fence: LeaseFence) -> Arc<dyn super::Store>;
}

/// One taking of a session's lease: the node that took it and the epoch that taking
/// drew, a number chosen afresh each time the lease changes hands or is taken after
/// being given up (and kept while the same node extends it). Only compared for
/// equality: a write held to a fence goes through only while the lease row still
/// names this node and this epoch (see [`Nodes::fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFence {
    pub session_id: SessionId,
    pub node_id: String,
    pub epoch: i64,
}

/// Which node runs a session, and until when: the row that keeps two nodes from
/// running one session. A lease is live while `now < expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub session_id: SessionId,
    pub node_id: String,
    pub expires_at: time::Millis,
    /// The epoch of the taking that holds it (see [`LeaseFence`]).
    pub epoch: i64,
}

impl Lease {
    /// The fence of the taking that holds this lease.
    pub fn fence(&self) -> LeaseFence {
        LeaseFence { session_id: self.session_id.clone(), node_id: self.node_id.clone(), epoch: self.epoch }
    }
}

/// The address a node serves on, refreshed while it runs: `spool auth disable` reads
/// these to refuse while any server is reachable from the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub node_id: String,
    pub addr: String,
    /// Not a loopback address: reachable from other machines.
    pub public: bool,
    pub updated_at: time::Millis,
}
