//! `RedisCluster` against a real Redis (`SPOOL_TEST_REDIS_URL`; built without it the
//! tests are ignored, except under CI: build.rs). Each test uses a channel of its own, since
//! PUB/SUB is shared by every logical database and every test.

use futures::StreamExt;
use futures::stream::BoxStream;
use spool_bus::RedisCluster;
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

fn channel() -> String {
    format!("spool:test:cluster:{}", SessionId::new())
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn every_other_node_hears_a_message_once_and_the_sender_never() {
    let url = redis_url();
    let channel = channel();
    let a = RedisCluster::connect_on(&url, "node-a", &channel).await.expect("a joins");
    let b = RedisCluster::connect_on(&url, "node-b", &channel).await.expect("b joins");
    let c = RedisCluster::connect_on(&url, "node-c", &channel).await.expect("c joins");
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
    assert!(RedisCluster::connect("redis://127.0.0.1:1/", "node-a").await.is_err(), "nothing listens on port 1");
    assert!(RedisCluster::connect("http://127.0.0.1:6379/", "node-a").await.is_err(), "not a Redis URL");
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
    let a = RedisCluster::connect(&on_13, "deploy-13-a").await.expect("a joins");
    let b = RedisCluster::connect(&on_13, "deploy-13-b").await.expect("b joins");
    let other = RedisCluster::connect(&on_14, "deploy-14-a").await.expect("another deployment's node joins");
    let (mut on_b, mut on_other) = (b.subscribe(), other.subscribe());

    let abort = ClusterMessage::Abort { node: "deploy-13-b".into(), session: SessionId::new() };
    a.publish(abort.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears a"), Some(abort));
    // A marker from the other deployment reaches nobody but its own: had the abort
    // crossed over, it would have come first.
    let marker = ClusterMessage::Aborted { node: "deploy-14-b".into(), session: SessionId::new() };
    let other_b = RedisCluster::connect(&on_14, "deploy-14-b").await.expect("its second node joins");
    other_b.publish(marker.clone());
    assert_eq!(next(&mut on_other).await.expect("the other deployment hears its own"), Some(marker));
    // Nothing of the other deployment reaches b: the next message b hears is one of
    // its own deployment's, published after the other's marker had been delivered.
    let own = ClusterMessage::Aborted { node: "deploy-13-a".into(), session: SessionId::new() };
    a.publish(own.clone());
    assert_eq!(next(&mut on_b).await.expect("b hears its own deployment"), Some(own));
}
