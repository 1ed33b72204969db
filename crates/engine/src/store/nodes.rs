//! Nodes: what each serving process records about itself in the shared store, the
//! session leases that keep two nodes from running one session, and the address it
//! listens on.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Nodes: Send + Sync + 'static {
    /// Takes the session's lease for `node` until `now + ttl`, in one atomic step: true
    /// when the lease was free, expired (`expires_at <= now`) or already `node`'s (then
    /// it is extended); false, writing nothing, while another node holds it. Of any
    /// number of nodes racing for one session, at most one gets true.
    async fn acquire_lease(
        &self,
        session: &SessionId,
        node: &str,
        now: time::Millis,
        ttl: time::Millis,
    ) -> Result<bool, StoreError>;
    /// Extends `node`'s lease to `now + ttl`; false when the node no longer holds it
    /// (released, taken over, or already expired: another node may have declared this
    /// one dead, so a run whose renewal fails must stop rather than carry on).
    async fn renew_lease(
        &self,
        session: &SessionId,
        node: &str,
        now: time::Millis,
        ttl: time::Millis,
    ) -> Result<bool, StoreError>;
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
}

/// Which node runs a session, and until when: the row that keeps two nodes from
/// running one session. A lease is live while `now < expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub session_id: SessionId,
    pub node_id: String,
    pub expires_at: time::Millis,
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
