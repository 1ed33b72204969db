//! The list notifier behind `GET /api/workspaces/events` (seeds 000/001): one stream
//! per server telling pages that a project's session list or the project list changed,
//! so sidebars refetch instead of polling.
//!
//! Frames are tiny (`type`, `workspaceId`, `streamId`, `seq`) and carry no data; a page
//! that missed some simply refetches. So there is no replay buffer: every connection
//! starts with `lists.reset` at the current seq (without incrementing it), even when it
//! sends a `Last-Event-ID`. Fan-out is a tokio broadcast ring (a shared ring with a
//! cursor per receiver, like the session streams); a receiver that falls a whole ring
//! behind is cut and reconnects to a reset. Token deltas and tool events never notify.
//!
//! Each user has a stream of their own: a frame is published for the project's owner,
//! numbered in that owner's sequence, and only that owner's connections pass it on. So
//! one user never learns another's project ids, nor (from gaps in `seq`) how busy
//! anyone else is.
//!
//! Several nodes: every notification is also published to the other nodes (a
//! [`Cluster`]), which pass it to their own connections with [`ListNotifier::deliver`]
//! — numbered in their own sequence, under their own `streamId` — and do not publish it
//! again. So a page connected to any node hears about a change made on any node, once.
//!
//! A graceful shutdown closes the notifier ([`ListNotifier::close`]): list streams end
//! with the session streams instead of holding the server for its whole grace period.

use crate::cluster::{Cluster, ClusterMessage, Solo};
pub use crate::list_note::{Change, ListNote};
use bytes::Bytes;
use futures::Stream;
use futures::StreamExt;
use serde::Serialize;
use spool_protocol::{ProjectId, StreamId, UserId, sse};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub const RESET: &str = "lists.reset";
pub const SESSIONS_CHANGED: &str = "sessions.changed";
pub const PROJECTS_CHANGED: &str = "projects.changed";

/// Frames a list subscriber may fall behind before it is cut.
const RING: usize = 1024;

/// One list notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListFrame {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<ProjectId>,
    pub stream_id: StreamId,
    pub seq: u64,
}

impl ListFrame {
    fn to_sse(&self) -> Bytes {
        let json = serde_json::to_string(self).expect("list frames always serialize");
        sse::encode(Some(&format!("{}:{}", self.stream_id, self.seq)), None, &json)
    }
}

#[derive(Clone)]
pub struct ListNotifier {
    shared: Arc<Shared>,
}

struct Shared {
    /// Where this node's notifications go for the other nodes.
    cluster: Arc<dyn Cluster>,
    changes: broadcast::Sender<Change>,
    stream_id: StreamId,
    /// Each owner's last seq. Publishers hold the lock while numbering and sending, so
    /// an owner's frames go out in seq order.
    seqs: std::sync::Mutex<HashMap<UserId, u64>>,
    /// Every owner's frames, tagged with the owner; each subscriber keeps its own.
    tx: broadcast::Sender<(UserId, Bytes)>,
    /// Cancelled when the server stops: every list stream ends, and so do the streams
    /// that watch changes (the WebSocket hub, OpenCode's `/event`).
    closed: CancellationToken,
}

impl Default for ListNotifier {
    fn default() -> Self {
        Self::new()
    }
}

impl ListNotifier {
    /// A notifier for a node on its own.
    pub fn new() -> Self {
        Self::clustered(Arc::new(Solo))
    }

    /// A notifier that also tells the other nodes of `cluster` about every change.
    pub fn clustered(cluster: Arc<dyn Cluster>) -> Self {
        let (tx, _) = broadcast::channel(RING);
        let (changes, _) = broadcast::channel(RING);
        Self {
            shared: Arc::new(Shared {
                cluster,
                changes,
                stream_id: StreamId::new(),
                seqs: std::sync::Mutex::new(HashMap::new()),
                tx,
                closed: CancellationToken::new(),
            }),
        }
    }

    pub fn stream_id(&self) -> &StreamId {
        &self.shared.stream_id
    }

    /// The session list of `project` changed (created, archived, restored, deleted,
    /// retitled, a run accepted or settled, a state change, a read receipt).
    pub fn sessions_changed(&self, owner: &UserId, project: &ProjectId) {
        self.announce(owner, ListNote::SessionsChanged { project: project.clone() });
    }

    /// The project list changed (registered, renamed, removed).
    pub fn projects_changed(&self, owner: &UserId, project: &ProjectId) {
        self.change(owner, Change::ProjectChanged { project: project.clone() });
    }

    /// Announces a typed change (and the list notification it implies) about a project
    /// of `owner`'s.
    pub fn change(&self, owner: &UserId, change: Change) {
        self.announce(owner, ListNote::Change { change });
    }

    /// Passes a notification to this node's connections and watchers, then to the
    /// other nodes.
    fn announce(&self, owner: &UserId, note: ListNote) {
        self.deliver(owner, note.clone());
        self.shared.cluster.publish(ClusterMessage::List { owner: owner.clone(), note });
    }

    /// Passes a notification to this node's connections and watchers only: what another
    /// node published reaches this one's pages, and goes no further.
    pub fn deliver(&self, owner: &UserId, note: ListNote) {
        match note {
            ListNote::SessionsChanged { project } => self.publish(SESSIONS_CHANGED, owner, &project),
            ListNote::Change { change } => {
                match &change {
                    Change::SessionCreated { project, .. }
                    | Change::SessionChanged { project, .. }
                    | Change::SessionDeleted { project, .. } => self.publish(SESSIONS_CHANGED, owner, project),
                    Change::ProjectChanged { project } => self.publish(PROJECTS_CHANGED, owner, project),
                }
                // No receivers is fine: nobody is watching.
                let _ = self.shared.changes.send(change);
            }
        }
    }

    /// Typed changes as they happen (no history; a receiver that lags a whole ring
    /// behind gets `Lagged` and should resynchronize).
    pub fn watch_changes(&self) -> broadcast::Receiver<Change> {
        self.shared.changes.subscribe()
    }

    /// Every list notification this node passes on, of every owner, as it happens: what
    /// wakes the outbox's dispatcher when a change may have written an event (a session
    /// created, a run parked, decided or settled; issue 41) before its next poll.
    pub fn watch_all(&self) -> broadcast::Receiver<(UserId, Bytes)> {
        self.shared.tx.subscribe()
    }

    fn publish(&self, kind: &str, owner: &UserId, project: &ProjectId) {
        let mut seqs = self.shared.seqs.lock().unwrap_or_else(|p| p.into_inner());
        let seq = seqs.entry(owner.clone()).or_insert(0);
        *seq += 1;
        let frame = ListFrame {
            kind: kind.into(),
            workspace_id: Some(project.clone()),
            stream_id: self.shared.stream_id.clone(),
            seq: *seq,
        };
        // No receivers is fine: nobody is watching.
        let _ = self.shared.tx.send((owner.clone(), frame.to_sse()));
    }

    /// A new connection of `owner`'s: `lists.reset` at their current seq, then every
    /// notification about their projects. The stream ends if the subscriber falls a
    /// whole ring behind (the ring is shared by all owners).
    pub fn subscribe(&self, owner: UserId) -> impl Stream<Item = Bytes> + Send + Unpin + 'static {
        let (reset, rx) = {
            let seqs = self.shared.seqs.lock().unwrap_or_else(|p| p.into_inner());
            let frame = ListFrame {
                kind: RESET.into(),
                workspace_id: None,
                stream_id: self.shared.stream_id.clone(),
                seq: seqs.get(&owner).copied().unwrap_or(0),
            };
            // Subscribing under the lock: no frame falls between reset and live.
            (frame.to_sse(), self.shared.tx.subscribe())
        };
        let live = futures::stream::unfold((rx, owner), |(mut rx, owner)| async move {
            loop {
                match rx.recv().await {
                    Ok((to, bytes)) if to == owner => return Some((bytes, (rx, owner))),
                    Ok(_) => continue,
                    // Lagged (cut: come back to a reset) or closed.
                    Err(_) => return None,
                }
            }
        });
        let closed = self.shared.closed.clone().cancelled_owned();
        futures::stream::once(async move { reset }).chain(live).take_until(closed).boxed()
    }

    /// Ends every list stream, now and for any opened later (a graceful shutdown).
    pub fn close(&self) {
        self.shared.closed.cancel();
    }

    /// Fires when [`close`](Self::close) is called: a stream built on the changes ends then.
    pub fn closed(&self) -> CancellationToken {
        self.shared.closed.clone()
    }

    /// Number of connected list subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.shared.tx.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &Bytes) -> ListFrame {
        let text = std::str::from_utf8(bytes).expect("utf-8");
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).expect("data line");
        serde_json::from_str(data).expect("frame")
    }

    #[tokio::test]
    async fn every_connection_starts_with_a_reset_at_the_current_seq() {
        let lists = ListNotifier::new();
        let (owner, project) = (UserId::new(), ProjectId::new());
        lists.projects_changed(&owner, &project);
        lists.sessions_changed(&owner, &project);
        let mut sub = lists.subscribe(owner.clone());
        let reset = decode(&sub.next().await.expect("reset"));
        assert_eq!((reset.kind.as_str(), reset.seq, reset.workspace_id), (RESET, 2, None));
        lists.sessions_changed(&owner, &project);
        let next = decode(&sub.next().await.expect("live"));
        assert_eq!((next.kind.as_str(), next.seq), (SESSIONS_CHANGED, 3));
        assert_eq!(next.workspace_id, Some(project));
    }

    #[tokio::test]
    async fn each_owner_has_a_sequence_and_sees_only_their_projects() {
        let lists = ListNotifier::new();
        let (alice, bob) = (UserId::new(), UserId::new());
        let (hers, his) = (ProjectId::new(), ProjectId::new());
        lists.sessions_changed(&alice, &hers);
        let mut bobs = lists.subscribe(bob.clone());
        assert_eq!(decode(&bobs.next().await.expect("reset")).seq, 0, "Alice's frames do not count for Bob");
        lists.sessions_changed(&alice, &hers);
        lists.projects_changed(&bob, &his);
        let next = decode(&bobs.next().await.expect("live"));
        assert_eq!((next.kind.as_str(), next.seq, next.workspace_id), (PROJECTS_CHANGED, 1, Some(his)));
        let mut alices = lists.subscribe(alice);
        assert_eq!(decode(&alices.next().await.expect("reset")).seq, 2);
    }

    #[tokio::test]
    async fn a_change_reaches_the_other_nodes_once_and_is_not_published_again() {
        use crate::cluster::InProcess;
        let hub = InProcess::hub("observer");
        let mut wire = hub.subscribe();
        let (a, b) =
            (ListNotifier::clustered(Arc::new(hub.node("a"))), ListNotifier::clustered(Arc::new(hub.node("b"))));
        let (owner, project, session) = (UserId::new(), ProjectId::new(), spool_protocol::SessionId::new());
        let mut page_on_b = b.subscribe(owner.clone());
        page_on_b.next().await.expect("reset");
        let mut watcher_on_b = b.watch_changes();

        let created = Change::SessionCreated { session, project: project.clone() };
        a.change(&owner, created.clone());
        let Some(ClusterMessage::List { owner: to, note }) = wire.next().await else { panic!("a list message") };
        assert_eq!((&to, &note), (&owner, &ListNote::Change { change: created.clone() }));
        b.deliver(&to, note);

        let frame = decode(&page_on_b.next().await.expect("live on b"));
        assert_eq!((frame.kind.as_str(), frame.seq, frame.workspace_id), (SESSIONS_CHANGED, 1, Some(project)));
        assert_eq!(&frame.stream_id, b.stream_id(), "numbered in b's own stream");
        assert_eq!(watcher_on_b.try_recv().expect("typed change on b"), created);
        // b does not publish what it received: the next message on the wire is a
        // marker a sends after the delivery.
        let marker = Change::ProjectChanged { project: ProjectId::new() };
        a.change(&owner, marker.clone());
        let Some(ClusterMessage::List { note, .. }) = wire.next().await else { panic!("a list message") };
        assert_eq!(note, ListNote::Change { change: marker });
    }

    #[tokio::test]
    async fn a_subscriber_a_whole_ring_behind_is_cut() {
        let lists = ListNotifier::new();
        let (owner, project) = (UserId::new(), ProjectId::new());
        let mut sub = lists.subscribe(owner.clone());
        sub.next().await.expect("reset");
        for _ in 0..RING + 5 {
            lists.sessions_changed(&owner, &project);
        }
        assert!(sub.next().await.is_none());
    }
}
