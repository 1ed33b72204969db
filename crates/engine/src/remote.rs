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

use crate::Clock;
use crate::approvals::Approvals;
use crate::cluster::{Cluster, ClusterMessage};
use crate::error::{EngineError, Result};
use crate::lists::ListNotifier;
use crate::registry::Registry;
use crate::store::Store;
use futures::StreamExt;
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

/// This node's side of the cluster: an owned service holding what answering the other
/// nodes takes (the registry to find a session, approvals to abort its run, the list
/// notifier to relay to its pages), so nothing here reaches back into the engine.
pub(crate) struct Remote {
    cluster: Arc<dyn Cluster>,
    /// The sessions whose remote aborts were reported done, for the nodes waiting.
    aborted: broadcast::Sender<SessionId>,
    node_id: String,
    lease_ttl: Duration,
    /// The leases' clock: whether a lease is live, and how long a dead holder's takes.
    clock: Clock,
    store: Arc<dyn Store>,
    sessions: Arc<Registry>,
    approvals: Arc<Approvals>,
    lists: ListNotifier,
}

/// What [`Remote::start`] is built from.
pub(crate) struct RemoteParts {
    pub cluster: Arc<dyn Cluster>,
    pub node_id: String,
    pub lease_ttl: Duration,
    pub clock: Clock,
    pub store: Arc<dyn Store>,
    pub sessions: Arc<Registry>,
    pub approvals: Arc<Approvals>,
    pub lists: ListNotifier,
}

impl Remote {
    /// The service, handling the other nodes' messages until it is dropped (with the
    /// engine that holds it): the handler holds it weakly and ends at the next message.
    pub fn start(parts: RemoteParts) -> Arc<Self> {
        let RemoteParts { cluster, node_id, lease_ttl, clock, store, sessions, approvals, lists } = parts;
        // A waiter that lags simply rereads the store: a small ring is enough.
        let (aborted, _) = broadcast::channel(64);
        let remote = Arc::new(Self { cluster, aborted, node_id, lease_ttl, clock, store, sessions, approvals, lists });
        let mut messages = remote.cluster.subscribe();
        let weak = Arc::downgrade(&remote);
        tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                let Some(remote) = weak.upgrade() else { return };
                remote.receive(message);
            }
        });
        remote
    }

    fn receive(self: Arc<Self>, message: ClusterMessage) {
        match message {
            ClusterMessage::List { owner, note } => self.lists.deliver(&owner, note),
            ClusterMessage::Abort { node, session } if node == self.node_id => {
                tokio::spawn(async move { self.abort_for_another_node(session).await });
            }
            ClusterMessage::Abort { .. } => {}
            ClusterMessage::Resync { node, session } if node == self.node_id => {
                self.sessions.resync(&session);
            }
            ClusterMessage::Resync { .. } => {}
            ClusterMessage::Aborted { session, .. } => {
                // No receivers is fine: nobody here is waiting for it.
                let _ = self.aborted.send(session);
            }
        }
    }

    /// Asks `node` for a full snapshot frame of `session` on the frame bus.
    pub fn ask_resync(&self, node: String, session: &SessionId) {
        self.cluster.publish(ClusterMessage::Resync { node, session: session.clone() });
    }

    /// Aborts this node's run of `session` for the node that asked, then tells it.
    async fn abort_for_another_node(&self, session: SessionId) {
        if let Some(loaded) = self.sessions.get(&session) {
            match self.approvals.abort(&loaded).await {
                Ok(Some(run)) => tracing::info!(%session, %run, "aborted a run at another node's request"),
                Ok(None) => {}
                Err(e) => tracing::warn!(%session, error = %e, "could not abort a run at another node's request"),
            }
        }
        self.cluster.publish(ClusterMessage::Aborted { node: self.node_id.clone(), session });
    }

    /// For a session with no run here: asks the node holding its lease to abort its
    /// running run, and waits until the store shows that run settled. `None` when no
    /// other node holds a live lease or the store has no running run.
    pub async fn abort_elsewhere(&self, session: &SessionId) -> Result<Option<RunId>> {
        let store = &self.store;
        let me = &self.node_id;
        let now = self.clock.now_ms();
        let Some(lease) = store.get_lease(session).await?.filter(|l| &l.node_id != me && l.expires_at > now) else {
            return Ok(None);
        };
        let runs = store.runs_since(session, 0).await?;
        let Some(run) = runs.into_iter().rev().find(|r| r.status == RunStatus::Running) else { return Ok(None) };
        // Listening before asking: the reply cannot come before the wait starts.
        let mut replies = self.aborted.subscribe();
        self.cluster.publish(ClusterMessage::Abort { node: lease.node_id.clone(), session: session.clone() });
        // A lease's time, so on the leases' clock.
        let deadline = now.saturating_add(crate::clock::millis(self.lease_ttl * 2 + MARGIN));
        let given_up = self.clock.sleep_until(deadline);
        tokio::pin!(given_up);
        loop {
            if store.get_run(&run.id).await?.is_none_or(|r| r.status != RunStatus::Running) {
                // This node's view of the session predates the run: read it afresh next time.
                self.sessions.forget_if_idle(session);
                return Ok(Some(run.id));
            }
            tokio::select! {
                _ = wait_for(&mut replies, session) => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = &mut given_up => {
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
