//! The cluster seam: how the nodes that share one store tell each other the few things
//! the store cannot carry by itself — "abort your run of this session" and "a list
//! changed". The engine defines the trait and the messages; the Redis PUB/SUB
//! implementation lives below it (`spool_bus::RedisCluster`), and a single node uses
//! [`Solo`], which sends nothing and hears nothing.
//!
//! Delivery is at most once and best effort, on purpose: every message is something a
//! node can do without. A list page that misses a notification refetches at its next
//! reset; a node that asked for an abort also polls the store, so a lost request ends
//! in the run settling on its own (or being reaped as `node_lost`), never in a hang.
//! So an implementation never queues messages for a node that is away, and never
//! retries a publish.
//!
//! An implementation hands a node only the other nodes' messages, never its own, and
//! each of them once: the engine acts on what it receives locally and does not publish
//! it again, so a message cannot echo around the cluster.

use crate::list_note::ListNote;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use spool_protocol::{SessionId, UserId};
use std::sync::Arc;
use tokio::sync::broadcast;

/// What one node tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClusterMessage {
    /// Asks `node` (the holder of the session's lease) to abort its run of `session`,
    /// exactly as an abort sent to it would. Ownership was checked by the sender.
    Abort { node: String, session: SessionId },
    /// `node` has done an abort it was asked for (or found nothing to abort): whoever
    /// waits on `session` reads the run's status from the store now.
    Aborted { node: String, session: SessionId },
    /// Asks `node` (the holder of the session's lease) to publish a full snapshot frame
    /// of `session` on the frame bus: another node lost its place in the stream, or began
    /// following it mid-run, and the store lacks what was streamed so far.
    Resync { node: String, session: SessionId },
    /// A list notification for `owner`'s pages, published on the sending node.
    List { owner: UserId, note: ListNote },
}

/// The nodes of one deployment, as one node sees them.
pub trait Cluster: Send + Sync + 'static {
    /// Sends `message` to every other node, in the background: it never waits for the
    /// network, so it may be called from anywhere (even under a std lock).
    fn publish(&self, message: ClusterMessage);

    /// The other nodes' messages from now on, each once, never this node's own. A
    /// receiver that falls far behind skips what it missed (see the module doc).
    fn subscribe(&self) -> BoxStream<'static, ClusterMessage>;
}

/// A node on its own: nothing to tell, nobody to hear from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl Cluster for Solo {
    fn publish(&self, _message: ClusterMessage) {}

    fn subscribe(&self) -> BoxStream<'static, ClusterMessage> {
        futures::stream::pending().boxed()
    }
}

/// Messages a receiver of [`InProcess`] may fall behind before it skips some.
const IN_PROCESS_RING: usize = 1024;

/// Several nodes in one process (tests of two engines over one store): every node made
/// by [`node`](Self::node) of one hub hears the others, never itself.
#[derive(Clone)]
pub struct InProcess {
    hub: broadcast::Sender<(Arc<str>, ClusterMessage)>,
    node: Arc<str>,
}

impl InProcess {
    /// A new hub, and its first node.
    pub fn hub(node: &str) -> Self {
        let (hub, _) = broadcast::channel(IN_PROCESS_RING);
        Self { hub, node: node.into() }
    }

    /// Another node on the same hub.
    pub fn node(&self, node: &str) -> Self {
        Self { hub: self.hub.clone(), node: node.into() }
    }
}

impl Cluster for InProcess {
    fn publish(&self, message: ClusterMessage) {
        // No receivers is fine: no other node is listening yet.
        let _ = self.hub.send((self.node.clone(), message));
    }

    fn subscribe(&self) -> BoxStream<'static, ClusterMessage> {
        let me = self.node.clone();
        futures::stream::unfold(self.hub.subscribe(), move |mut rx| {
            let me = me.clone();
            async move {
                loop {
                    match rx.recv().await {
                        Ok((from, message)) if from != me => return Some((message, rx)),
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::Change;
    use spool_protocol::ProjectId;

    #[tokio::test]
    async fn a_node_hears_the_others_once_and_never_itself() {
        let a = InProcess::hub("a");
        let (b, c) = (a.node("b"), a.node("c"));
        let (mut on_a, mut on_b, mut on_c) = (a.subscribe(), b.subscribe(), c.subscribe());
        let from_a = ClusterMessage::Abort { node: "b".into(), session: SessionId::new() };
        let from_b = ClusterMessage::Aborted { node: "b".into(), session: SessionId::new() };
        a.publish(from_a.clone());
        b.publish(from_b.clone());
        assert_eq!(on_a.next().await, Some(from_b.clone()), "a skips its own message");
        assert_eq!(on_b.next().await, Some(from_a.clone()), "b skips its own message");
        assert_eq!(on_c.next().await, Some(from_a));
        assert_eq!(on_c.next().await, Some(from_b));
        // Nothing else reaches a: the next message it hears is a marker c sends now.
        let marker = ClusterMessage::Aborted { node: "c".into(), session: SessionId::new() };
        c.publish(marker.clone());
        assert_eq!(on_a.next().await, Some(marker), "nothing before the marker");
    }

    #[test]
    fn messages_are_small_tagged_json() {
        let owner = UserId::new();
        let project = ProjectId::new();
        let message = ClusterMessage::List {
            owner: owner.clone(),
            note: ListNote::Change { change: Change::ProjectChanged { project: project.clone() } },
        };
        let json = serde_json::to_value(&message).expect("serialize");
        assert_eq!(
            json,
            serde_json::json!({
                "type": "list",
                "owner": owner,
                "note": {"kind": "change", "change": {"type": "project_changed", "project": project}},
            })
        );
        assert_eq!(serde_json::from_value::<ClusterMessage>(json).expect("parse"), message);
    }
}
