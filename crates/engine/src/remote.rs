//! What a node does with the other nodes of its cluster (see [`crate::cluster`]): it
//! relays list notifications to its own pages, and it aborts a run for a node that was
//! asked to abort it.
//!
//! # Abort on any node
//!
//! A session runs on the node holding its lease. An abort that reaches another node is
//! checked there (the session must be the caller's), then sent to the lease holder,
//! which aborts exactly as if the request had come to it, and says so. The asking node
//! answers once the store shows the run settled, so its answer is a local abort's: the
//! run id, with the run `cancelled`. It reads the store rather than trusting the reply
//! alone, and polls it too, because messages may be lost: if the holder never hears the
//! request, the run settles on its own or, should the holder have died, is failed as
//! `node_lost` by a reaper within a lease and a half. Past two leases the asking node
//! gives up and answers busy.

use crate::cluster::{Cluster, ClusterMessage};
use crate::engine::Engine;
use crate::error::{EngineError, Result};
use futures::StreamExt;
use spool_protocol::time::now_ms;
use spool_protocol::{RunId, RunStatus, SessionId};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// How often a node waiting for another node's abort rereads the run, in case the
/// reply was lost.
const POLL: Duration = Duration::from_millis(250);
/// Beyond the lease time a remote abort may take: a dead holder's lease expires within
/// one lease, and a reaper takes it within half a lease more.
const MARGIN: Duration = Duration::from_secs(2);

/// The engine's side of the cluster.
pub(crate) struct Remote {
    pub cluster: Arc<dyn Cluster>,
    /// The sessions whose remote aborts were reported done, for the nodes waiting.
    aborted: broadcast::Sender<SessionId>,
}

impl Remote {
    pub fn new(cluster: Arc<dyn Cluster>) -> Self {
        // A waiter that lags simply rereads the store: a small ring is enough.
        let (aborted, _) = broadcast::channel(64);
        Self { cluster, aborted }
    }
}

impl Engine {
    /// Handles the other nodes' messages until the engine is gone. Holds only a weak
    /// reference, so it ends with the engine (at the next message).
    pub(crate) fn spawn_remote(&self) {
        let Some(remote) = &self.inner.remote else { return };
        let mut messages = remote.cluster.subscribe();
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                let Some(inner) = weak.upgrade() else { return };
                Engine { inner }.receive(message);
            }
        });
    }

    fn receive(&self, message: ClusterMessage) {
        let Some(remote) = &self.inner.remote else { return };
        match message {
            ClusterMessage::List { owner, note } => self.inner.lists.deliver(&owner, note),
            ClusterMessage::Abort { node, session } if node == self.inner.config.node_id => {
                let engine = self.clone();
                tokio::spawn(async move { engine.abort_for_another_node(session).await });
            }
            ClusterMessage::Abort { .. } => {}
            ClusterMessage::Resync { node, session } if node == self.inner.config.node_id => {
                self.resync_here(&session);
            }
            ClusterMessage::Resync { .. } => {}
            ClusterMessage::Aborted { session, .. } => {
                // No receivers is fine: nobody here is waiting for it.
                let _ = remote.aborted.send(session);
            }
        }
    }

    /// Asks the node running `session` (the lease holder; perhaps this one) for a full
    /// snapshot frame on the frame bus. `false` when no node holds the lease (the store
    /// then has the whole state) or this node holds it without the session loaded.
    pub(crate) async fn request_snapshot(&self, session: &SessionId) -> bool {
        let lease = match self.inner.store.get_lease(session).await {
            Ok(lease) => lease.filter(|l| l.expires_at > now_ms()),
            Err(error) => {
                tracing::warn!(%session, %error, "cannot read a session's lease to ask for a snapshot");
                return false;
            }
        };
        let Some(lease) = lease else { return false };
        if lease.node_id == self.inner.config.node_id {
            return self.resync_here(session);
        }
        let Some(remote) = &self.inner.remote else { return false };
        remote.cluster.publish(ClusterMessage::Resync { node: lease.node_id, session: session.clone() });
        true
    }

    fn resync_here(&self, session: &SessionId) -> bool {
        let loaded = self.inner.sessions.get(session);
        loaded.map(|loaded| loaded.events.resync()).is_some()
    }

    /// Aborts this node's run of `session` for the node that asked, then tells it.
    async fn abort_for_another_node(&self, session: SessionId) {
        let loaded = self.inner.sessions.get(&session);
        if let Some(loaded) = loaded {
            match self.abort_loaded(&loaded).await {
                Ok(Some(run)) => tracing::info!(%session, %run, "aborted a run at another node's request"),
                Ok(None) => {}
                Err(e) => tracing::warn!(%session, error = %e, "could not abort a run at another node's request"),
            }
        }
        if let Some(remote) = &self.inner.remote {
            remote.cluster.publish(ClusterMessage::Aborted { node: self.inner.config.node_id.clone(), session });
        }
    }

    /// For a session with no run here: asks the node holding its lease to abort its
    /// running run, and waits until the store shows that run settled. `None` when no
    /// other node holds a live lease or the store has no running run.
    pub(crate) async fn abort_elsewhere(&self, session: &SessionId) -> Result<Option<RunId>> {
        let Some(remote) = &self.inner.remote else { return Ok(None) };
        let store = &self.inner.store;
        let me = &self.inner.config.node_id;
        let Some(lease) = store.get_lease(session).await?.filter(|l| &l.node_id != me && l.expires_at > now_ms())
        else {
            return Ok(None);
        };
        let runs = store.runs_since(session, 0).await?;
        let Some(run) = runs.into_iter().rev().find(|r| r.status == RunStatus::Running) else { return Ok(None) };
        // Listening before asking: the reply cannot come before the wait starts.
        let mut replies = remote.aborted.subscribe();
        remote.cluster.publish(ClusterMessage::Abort { node: lease.node_id.clone(), session: session.clone() });
        let deadline = tokio::time::Instant::now() + self.inner.config.lease_ttl * 2 + MARGIN;
        loop {
            if store.get_run(&run.id).await?.is_none_or(|r| r.status != RunStatus::Running) {
                // This node's view of the session predates the run: read it afresh next time.
                self.forget_stale(session);
                return Ok(Some(run.id));
            }
            tokio::select! {
                _ = wait_for(&mut replies, session) => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(EngineError::SessionBusy(format!(
                        "{} on node {}, which did not stop it when asked",
                        run.id, lease.node_id
                    )));
                }
            }
        }
    }
}

/// Returns when `session`'s abort is reported done (or some reports were missed).
async fn wait_for(replies: &mut broadcast::Receiver<SessionId>, session: &SessionId) {
    loop {
        match replies.recv().await {
            Ok(done) if &done == session => return,
            Ok(_) => continue,
            Err(_) => return,
        }
    }
}
