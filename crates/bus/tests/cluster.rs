//! `RedisCluster` against a real Redis (`SPOOL_TEST_REDIS_URL`; built without it the
//! tests are ignored, except under CI: build.rs). Each test uses a channel of its own, since
//! PUB/SUB is shared by every logical database and every test.

use futures::StreamExt;
use futures::stream::BoxStream;
use spool_bus::{ClusterKey, RedisCluster};
use spool_engine::cluster::{Cluster, ClusterMessage};
use spool_engine::lists::{Change, ListNote};
use spool_protocol::{ProjectId, SessionId, UserId};
use std::time::Duration;
use tokio::time::error::Elapsed;

use spool_test_support::redis_url;

/// The next message, within a few seconds.
async fn next(messages: &mut BoxStream<'static, ClusterMessage>) -> Result<Option<ClusterMessage>, Elapsed> {
    tokio::time::timeout(Duration::from_secs(5), messages.next()).await
}

/// The cluster key every node of these tests shares.
fn key() -> ClusterKey {
    ClusterKey::new(&[7; 32]).expect("a 32-byte key")
}

fn channel() -> String {
    format!("spool:test:cluster:{}", SessionId::new())
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn every_other_node_hears_a_message_once_and_the_sender_never() {
    let url = redis_url();
    let channel = channel();
    let a = RedisCluster::connect_on(&url, "node-a", &channel, key()).await.expect("a joins");
    let b = RedisCluster::connect_on(&url, "node-b", &channel, key()).await.expect("b joins");
    let c = RedisCluster::connect_on(&url, "node-c", &channel, key()).await.expect("c joins");
    let (mut on_a, mut on_b, mut on_c) = (a.subscribe(), b.subscribe(), c.subscribe());

    let list = ClusterMessage::List {
        owner: UserId::new(),
        note: ListNote::Change { change: Change::ProjectChanged { project: ProjectId::new() } },
    };
    let abort = ClusterMessage::Abort { node: "node-a".into(), session: SessionId::new() };
    a.publish(list.clone());
    b.publish(abort.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears a"), Some(list.clone()));
    assert_eq!(next(&mut on_c).await.expect("c hears a"), Some(list));
    assert_eq!(next(&mut on_a).await.expect("a hears b, not itself"), Some(abort.clone()));
    assert_eq!(next(&mut on_c).await.expect("c hears b"), Some(abort));

    // A marker sent last: once it arrives, anything duplicated would have come first.
    let marker = ClusterMessage::Aborted { node: "node-c".into(), session: SessionId::new() };
    c.publish(marker.clone());
    assert_eq!(next(&mut on_a).await.expect("a hears c"), Some(marker.clone()), "no duplicate before it");
    assert_eq!(next(&mut on_b).await.expect("b hears c"), Some(marker), "b does not hear itself");
}

#[tokio::test]
async fn a_wrong_url_fails_at_connect() {
    assert!(RedisCluster::connect("redis://127.0.0.1:1/", "node-a", key()).await.is_err(), "nothing listens on port 1");
    assert!(RedisCluster::connect("http://127.0.0.1:6379/", "node-a", key()).await.is_err(), "not a Redis URL");
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn deployments_on_separate_logical_databases_do_not_hear_each_other() {
    let url = redis_url();
    // The server's URL without a database: `…:6379` or `…:6379/N`.
    let server = match url.rsplit_once('/') {
        Some((server, db)) if !db.is_empty() && db.bytes().all(|b| b.is_ascii_digit()) => server.to_owned(),
        _ => url.trim_end_matches('/').to_owned(),
    };
    let (on_13, on_14) = (format!("{server}/13"), format!("{server}/14"));
    let a = RedisCluster::connect(&on_13, "deploy-13-a", key()).await.expect("a joins");
    let b = RedisCluster::connect(&on_13, "deploy-13-b", key()).await.expect("b joins");
    let other = RedisCluster::connect(&on_14, "deploy-14-a", key()).await.expect("another deployment's node joins");
    let (mut on_b, mut on_other) = (b.subscribe(), other.subscribe());

    let abort = ClusterMessage::Abort { node: "deploy-13-b".into(), session: SessionId::new() };
    a.publish(abort.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears a"), Some(abort));
    // A marker from the other deployment reaches nobody but its own: had the abort
    // crossed over, it would have come first.
    let marker = ClusterMessage::Aborted { node: "deploy-14-b".into(), session: SessionId::new() };
    let other_b = RedisCluster::connect(&on_14, "deploy-14-b", key()).await.expect("its second node joins");
    other_b.publish(marker.clone());
    assert_eq!(next(&mut on_other).await.expect("the other deployment hears its own"), Some(marker));
    // Nothing of the other deployment reaches b: the next message b hears is one of
    // its own deployment's, published after the other's marker had been delivered.
    let own = ClusterMessage::Aborted { node: "deploy-13-a".into(), session: SessionId::new() };
    a.publish(own.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears its own deployment"), Some(own));
}

/// A cluster message made up in Redis — an abort for a session, published on the
/// channel as `redis-cli` would — or sealed with another deployment's key is dropped:
/// the node hears only what a node with its key wrote.
#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn messages_no_node_of_the_deployment_wrote_are_dropped() {
    let url = redis_url();
    let channel = channel();
    let a = RedisCluster::connect_on(&url, "node-a", &channel, key()).await.expect("a joins");
    let b = RedisCluster::connect_on(&url, "node-b", &channel, key()).await.expect("b joins");
    let stranger = ClusterKey::new(&[9; 32]).expect("another key");
    let intruder = RedisCluster::connect_on(&url, "node-x", &channel, stranger.clone()).await.expect("x joins");
    let accomplice = RedisCluster::connect_on(&url, "node-y", &channel, stranger).await.expect("y joins");
    let (mut on_b, mut on_accomplice) = (b.subscribe(), accomplice.subscribe());

    let forged = ClusterMessage::Abort { node: "node-b".into(), session: SessionId::new() };
    let json = serde_json::json!({"from": "node-a", "message": forged}).to_string();
    let mut conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis");
    let receivers: u64 = redis::AsyncCommands::publish(&mut conn, &channel, json).await.expect("PUBLISH");
    assert!(receivers >= 3, "every node listens");
    intruder.publish(forged.clone());
    // Its own key's nodes hear it: it is on the channel before the marker below.
    assert_eq!(next(&mut on_accomplice).await.expect("y hears x"), Some(forged));
    // A marker from a: had either forgery passed, it would have come first.
    let marker = ClusterMessage::Aborted { node: "node-a".into(), session: SessionId::new() };
    a.publish(marker.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears a"), Some(marker));
}
