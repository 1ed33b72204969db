//! `RedisCluster` against a real Redis (`SPOOL_TEST_REDIS_URL`; without it the tests
//! print a notice and pass, except under CI). Each test uses a channel of its own, since
//! PUB/SUB is shared by every logical database and every test.

use futures::StreamExt;
use futures::stream::BoxStream;
use spool_bus::RedisCluster;
use spool_engine::cluster::{Cluster, ClusterMessage};
use spool_engine::lists::{Change, ListNote};
use spool_protocol::{ProjectId, SessionId, UserId};
use std::time::Duration;
use tokio::time::error::Elapsed;

fn redis_url() -> Option<String> {
    match std::env::var("SPOOL_TEST_REDIS_URL") {
        Ok(url) => Some(url),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("set SPOOL_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379) to a Redis the bus tests may write to")
        }
        Err(_) => {
            eprintln!("skipped: set SPOOL_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379) to run the Redis bus tests");
            None
        }
    }
}

/// The next message, within a few seconds.
async fn next(messages: &mut BoxStream<'static, ClusterMessage>) -> Result<Option<ClusterMessage>, Elapsed> {
    tokio::time::timeout(Duration::from_secs(5), messages.next()).await
}

fn channel() -> String {
    format!("spool:test:cluster:{}", SessionId::new())
}

#[tokio::test]
async fn every_other_node_hears_a_message_once_and_the_sender_never() {
    let Some(url) = redis_url() else { return };
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
    let Some(_) = redis_url() else { return };
    assert!(RedisCluster::connect("redis://127.0.0.1:1/", "node-a").await.is_err(), "nothing listens on port 1");
    assert!(RedisCluster::connect("http://127.0.0.1:6379/", "node-a").await.is_err(), "not a Redis URL");
}
