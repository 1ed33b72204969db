//! The engine's [`Cluster`] over Redis PUB/SUB: one channel per deployment
//! ([`channel_of`] its logical database) that every node subscribes to and publishes on, for the messages nodes send each other (an
//! abort for the node running a session, list notifications). Session frames do not go
//! this way; they have the streams of [`RedisBus`](crate::RedisBus).
//!
//! A message is small JSON, `{"from": node id, "message": {…}}`, sealed for the
//! channel's name with the cluster key (`seal.rs`): a node acts only on messages a node
//! of its deployment wrote (an abort or a list notice made up in Redis is dropped and
//! counted). Redis sends a
//! publisher its own messages too (it is subscribed to the channel), so each node drops
//! those carrying its own id: every node hears every other node once, and itself never.
//! Node ids must therefore differ between nodes, which `spool serve` sees to.
//!
//! Two tasks per node: a publisher that sends queued messages one at a time on the
//! command connection (so they leave in order), and a listener that owns the PUB/SUB
//! connection. The listener pings it now and then; when it drops or stops answering it
//! reconnects with backoff and subscribes again. Messages published meanwhile are lost,
//! and that is the contract ([`spool_engine::cluster`]): delivery is best effort, at
//! most once. For the same reason the publisher's queue is bounded and a publish that
//! finds it full is dropped with a warning, rather than Redis being away making the
//! queue, and the process, grow.
//!
//! Both tasks end when the last [`RedisCluster`] handle is dropped; open subscriptions
//! then end too.

use crate::BusError;
use crate::seal::ClusterKey;
use futures::StreamExt;
use futures::stream::BoxStream;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use spool_engine::{Cluster, ClusterMessage};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};

/// The channel every node of a deployment on logical database 0 shares.
pub const CHANNEL: &str = "spool:cluster";

/// The cluster channel of a deployment on logical database `db`. PUB/SUB channels are
/// server-wide while keys are per database, so deployments sharing one Redis server on
/// separate databases (`redis://host/1`, `/2`, …) need channels of their own; session
/// frames need nothing more (their channels carry the session id).
pub fn channel_of(db: i64) -> String {
    match db {
        0 => CHANNEL.to_owned(),
        db => format!("{CHANNEL}:{db}"),
    }
}

/// Messages waiting to be published before new ones are dropped: far more than a
/// node produces while Redis answers, and a bounded loss while it does not.
const OUTBOX: usize = 4096;
/// Received messages a slow subscriber may fall behind before it skips some.
const INBOX: usize = 1024;
/// How long one `PUBLISH` may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the listener checks that the PUB/SUB connection still answers, and how
/// long it waits for the answer.
const PING_EVERY: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect backoff bounds, as the bus link's.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    from: String,
    message: ClusterMessage,
}

/// One node's membership in the cluster: cheap to clone.
#[derive(Clone)]
pub struct RedisCluster {
    shared: Arc<Shared>,
}

struct Shared {
    outbox: mpsc::Sender<ClusterMessage>,
    inbox: broadcast::Sender<ClusterMessage>,
    /// Dropped with the last handle, which stops the listener.
    _stop: oneshot::Sender<()>,
}

impl RedisCluster {
    /// Joins the cluster as `node` on the channel of the URL's logical database
    /// ([`channel_of`]). Both connections are made (and the channel subscribed) before
    /// this returns, so a wrong URL fails here and every message published by another
    /// node from now on is heard.
    pub async fn connect(url: &str, node: &str, key: ClusterKey) -> Result<Self, BusError> {
        let db = redis::Client::open(url)?.get_connection_info().redis_settings().db();
        Self::connect_on(url, node, &channel_of(db), key).await
    }

    /// Like [`connect`](Self::connect), on a channel of one's own (tests sharing one
    /// Redis keep apart this way; PUB/SUB ignores the logical database).
    pub async fn connect_on(url: &str, node: &str, channel: &str, key: ClusterKey) -> Result<Self, BusError> {
        let client = redis::Client::open(url)?;
        // The PUB/SUB connection first: it is one attempt, so an unreachable Redis fails
        // at once (the connection manager would retry with backoff first).
        let link = subscribe(&client, channel).await?;
        let manager = ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
        let conn = ConnectionManager::new_with_config(client.clone(), manager).await?;
        let (outbox, queued) = mpsc::channel(OUTBOX);
        let (inbox, _) = broadcast::channel(INBOX);
        let (stop, stopped) = oneshot::channel();
        let (node, channel): (Arc<str>, Arc<str>) = (node.into(), channel.into());
        tokio::spawn(send(conn, queued, node.clone(), channel.clone(), key.clone()));
        tokio::spawn(listen(client, link, inbox.clone(), node, channel, key, stopped));
        Ok(Self { shared: Arc::new(Shared { outbox, inbox, _stop: stop }) })
    }
}

impl Cluster for RedisCluster {
    fn publish(&self, message: ClusterMessage) {
        if let Err(e) = self.shared.outbox.try_send(message) {
            tracing::warn!(error = %e, "dropped a cluster message: Redis is not keeping up");
        }
    }

    fn subscribe(&self) -> BoxStream<'static, ClusterMessage> {
        futures::stream::unfold(self.shared.inbox.subscribe(), |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(message) => return Some((message, rx)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "a cluster subscriber fell behind and skipped messages");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }
}

/// The publisher task: one `PUBLISH` at a time, in queue order, until every handle is
/// gone.
async fn send(
    mut conn: ConnectionManager,
    mut queued: mpsc::Receiver<ClusterMessage>,
    node: Arc<str>,
    channel: Arc<str>,
    key: ClusterKey,
) {
    while let Some(message) = queued.recv().await {
        let envelope = Envelope { from: node.to_string(), message };
        let json = serde_json::to_vec(&envelope).expect("cluster messages always serialize");
        let sealed = key.seal(&channel, &json);
        if let Err(e) = conn.publish::<_, _, ()>(&*channel, sealed.as_ref()).await {
            tracing::warn!(error = %e, "could not publish a cluster message; it is lost");
        }
    }
}

async fn subscribe(client: &redis::Client, channel: &str) -> Result<(PubSubSink, PubSubStream), BusError> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub.split())
}

/// The listener task: passes the other nodes' messages to the subscribers, and keeps
/// the PUB/SUB connection alive.
async fn listen(
    client: redis::Client,
    link: (PubSubSink, PubSubStream),
    inbox: broadcast::Sender<ClusterMessage>,
    node: Arc<str>,
    channel: Arc<str>,
    key: ClusterKey,
    mut stop: oneshot::Receiver<()>,
) {
    let mut link = Some(link);
    let mut delay = RETRY_MIN;
    loop {
        let (mut sink, mut stream) = match link.take() {
            Some(link) => link,
            None => {
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                match subscribe(&client, &channel).await {
                    Ok(link) => {
                        tracing::info!("cluster link reconnected");
                        delay = RETRY_MIN;
                        link
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?delay, "cluster link still down");
                        delay = (delay * 2).min(RETRY_MAX);
                        continue;
                    }
                }
            }
        };
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let reason = loop {
            tokio::select! {
                _ = &mut stop => return,
                message = stream.next() => match message {
                    Some(message) => {
                        let payload = bytes::Bytes::copy_from_slice(message.get_payload_bytes());
                        if let Some(json) = key.open(&channel, &payload) {
                            receive(&inbox, &node, &json);
                        }
                    }
                    None => break "the connection closed",
                },
                _ = ping.tick() => {
                    let answer = tokio::time::timeout(PING_TIMEOUT, sink.ping::<redis::Value>()).await;
                    if !matches!(answer, Ok(Ok(_))) {
                        break "the connection did not answer a ping";
                    }
                }
            }
        };
        tracing::warn!(reason, "cluster link lost; reconnecting (messages meanwhile are lost)");
    }
}

/// Passes one payload on, unless this node sent it or it is not a cluster message.
fn receive(inbox: &broadcast::Sender<ClusterMessage>, node: &str, payload: &[u8]) {
    match serde_json::from_slice::<Envelope>(payload) {
        // No receivers is fine: nothing on this node listens yet.
        Ok(envelope) if envelope.from != node => drop(inbox.send(envelope.message)),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "ignored a malformed cluster message"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::SessionId;

    fn payload(from: &str, message: &ClusterMessage) -> Vec<u8> {
        serde_json::to_vec(&Envelope { from: from.into(), message: message.clone() }).expect("serialize")
    }

    #[test]
    fn a_node_drops_its_own_messages_and_malformed_ones() {
        let (inbox, mut rx) = broadcast::channel(8);
        let mine = ClusterMessage::Abort { node: "b".into(), session: SessionId::new() };
        let theirs = ClusterMessage::Aborted { node: "b".into(), session: SessionId::new() };
        receive(&inbox, "a", &payload("a", &mine));
        receive(&inbox, "a", b"{\"from\":\"b\",\"message\":{\"type\":\"unknown\"}}");
        receive(&inbox, "a", b"not json");
        receive(&inbox, "a", &payload("b", &theirs));
        assert_eq!(rx.try_recv().expect("b's message"), theirs);
        assert!(rx.try_recv().is_err(), "nothing else passed on");
    }
}
