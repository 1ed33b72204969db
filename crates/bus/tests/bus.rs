//! The bus against a real Redis, found from `SPOOL_TEST_REDIS_URL` (e.g.
//! `redis://127.0.0.1:6379`). Built without it they are ignored, except under CI, where
//! a missing Redis is a failure (build.rs).
//!
//! Tests share one Redis and run in parallel, so each works on sessions of its own
//! (fresh ids). The two that must disturb a whole database do it in a logical database
//! no other test uses: `FLUSHDB` in database 9, killing PUB/SUB connections that
//! `CLIENT LIST` shows on database 10. `FLUSHALL` would wipe every test's keys at once.

use bytes::Bytes;
use futures::StreamExt;
use redis::AsyncCommands;
use spool_bus::{BusConfig, ClusterKey, Item, Listener, RedisBus, Replay, TAG_LEN};
use spool_protocol::{Cursor, SessionId, StreamId};
use std::collections::HashMap;
use std::time::Duration;

use spool_test_support::redis_url;

/// The same server, logical database `db`.
fn in_database(url: &str, db: u8) -> String {
    let host_start = url.find("://").map_or(0, |i| i + 3);
    let base = match url[host_start..].find('/') {
        Some(slash) => &url[..host_start + slash],
        None => url,
    };
    format!("{base}/{db}")
}

/// The cluster key the nodes of these tests share.
pub(crate) fn key() -> ClusterKey {
    ClusterKey::new(&[7; 32]).expect("a 32-byte key")
}

async fn bus(url: &str, config: BusConfig) -> RedisBus {
    RedisBus::connect(url, config, key()).await.expect("connect to the test Redis")
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("test Redis URL");
    client.get_multiplexed_async_connection().await.expect("connect to the test Redis")
}

/// The next item, or a failure naming what the test was waiting for.
async fn next(listener: &mut Listener, waiting_for: &str) -> Item {
    match tokio::time::timeout(Duration::from_secs(10), listener.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("listener ended while waiting for {waiting_for}"),
        Err(_) => panic!("timed out waiting for {waiting_for}"),
    }
}

/// Asserts that nothing arrived after what the listener was last given: a marker
/// frame published now must be its very next item (one listener's items are in order,
/// so anything extra — a repeat, a stray reset — would come before it).
/// Returns the marker's cursor.
async fn assert_next_is_marker(bus: &RedisBus, session: &SessionId, listener: &mut Listener) -> Cursor {
    let marker = frame("marker");
    let at = bus.publish(session, marker.clone()).await.expect("publish the marker");
    assert_eq!(expect_frame(next(listener, "the marker").await, &at.stream_id, at.seq), marker);
    at
}

fn frame(text: impl Into<String>) -> Bytes {
    Bytes::from(text.into())
}

fn expect_frame(item: Item, epoch: &StreamId, seq: u64) -> Bytes {
    match item {
        Item::Frame { epoch: e, seq: s, bytes } if e == *epoch && s == seq => bytes,
        other => panic!("expected frame {epoch}:{seq}, got {other:?}"),
    }
}

fn expect_reset(item: Item) -> Cursor {
    match item {
        Item::Reset { epoch, seq } => Cursor { stream_id: epoch, seq },
        other => panic!("expected a reset, got {other:?}"),
    }
}

fn channel(session: &SessionId) -> String {
    format!("spool:{{{session}}}:live")
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn two_publishers_on_two_nodes_get_one_dense_ordered_seq() {
    let url = redis_url();
    let config = BusConfig { history_frames: 1000, ..BusConfig::default() };
    let (a, b) = (bus(&url, config.clone()).await, bus(&url, config).await);
    let session = SessionId::new();
    let mut listener = a.listen(&session, None).await.expect("listen");
    let start = expect_reset(next(&mut listener, "the opening reset").await);
    assert_eq!(start.seq, 0, "a new session starts at seq 0");

    let publish_all = |bus: RedisBus, name: &'static str| {
        let session = session.clone();
        tokio::spawn(async move {
            let mut cursors = Vec::new();
            for i in 0..200 {
                let body = frame(format!("{name}-{i}"));
                cursors.push((bus.publish(&session, body.clone()).await.expect("publish"), body));
            }
            cursors
        })
    };
    let (from_a, from_b) = tokio::join!(publish_all(a.clone(), "a"), publish_all(b.clone(), "b"));
    let (from_a, from_b) = (from_a.expect("publisher a"), from_b.expect("publisher b"));

    // Each publisher sees its own frames in increasing seq; together they are 1..=400.
    for cursors in [&from_a, &from_b] {
        assert!(cursors.windows(2).all(|w| w[0].0.seq < w[1].0.seq), "one publisher's seqs increase");
    }
    let mut by_seq: HashMap<u64, Bytes> = HashMap::new();
    for (cursor, body) in from_a.iter().chain(&from_b) {
        assert_eq!(cursor.stream_id, start.stream_id, "one epoch");
        assert!(by_seq.insert(cursor.seq, body.clone()).is_none(), "seq {} given twice", cursor.seq);
    }
    assert_eq!(by_seq.len(), 400);
    assert!((1..=400).all(|seq| by_seq.contains_key(&seq)), "seqs are dense");

    // The listener gets exactly that sequence, in order.
    for seq in 1..=400 {
        let bytes = expect_frame(next(&mut listener, &format!("frame {seq}")).await, &start.stream_id, seq);
        assert_eq!(bytes, by_seq[&seq]);
    }
    assert_next_is_marker(&a, &session, &mut listener).await;
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_cursor_from_one_node_replays_on_another() {
    let url = redis_url();
    let (a, b) = (bus(&url, BusConfig::default()).await, bus(&url, BusConfig::default()).await);
    let session = SessionId::new();
    let mut cursors = Vec::new();
    for i in 1..=10 {
        cursors.push(a.publish(&session, frame(format!("frame {i}"))).await.expect("publish"));
    }
    let cursor = Cursor::parse(&cursors[3].to_string()).expect("a cursor prints and parses");
    assert_eq!(cursor.seq, 4);

    let replay = b.replay(&session, Some(&cursor)).await.expect("replay");
    let expected: Vec<Bytes> = (5..=10).map(|i| frame(format!("frame {i}"))).collect();
    assert_eq!(replay, Replay::Frames { epoch: cursor.stream_id.clone(), seq: 10, frames: expected });

    // Listening on B from the cursor: the same frames, then live ones published on A.
    let mut listener = b.listen(&session, Some(&cursor)).await.expect("listen");
    for seq in 5..=10 {
        let bytes = expect_frame(next(&mut listener, "a replayed frame").await, &cursor.stream_id, seq);
        assert_eq!(bytes, frame(format!("frame {seq}")));
    }
    a.publish(&session, frame("frame 11")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut listener, "frame 11").await, &cursor.stream_id, 11), frame("frame 11"));
    let head = assert_next_is_marker(&a, &session, &mut listener).await;
    assert_eq!(head.seq, 12);

    // A cursor at the head replays nothing; one from the future or another epoch cannot
    // be continued.
    let at_head = b.replay(&session, Some(&head)).await.expect("replay");
    assert_eq!(at_head, Replay::Frames { epoch: cursor.stream_id.clone(), seq: 12, frames: vec![] });
    let ahead = Cursor { stream_id: cursor.stream_id.clone(), seq: 99 };
    let other = Cursor { stream_id: StreamId::new(), seq: 4 };
    for bad in [ahead, other] {
        let answer = b.replay(&session, Some(&bad)).await.expect("replay");
        assert_eq!(answer, Replay::Snapshot { epoch: cursor.stream_id.clone(), seq: 12 }, "cursor {bad}");
    }
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_listener_that_comes_back_with_its_cursor_gets_exactly_what_it_missed() {
    let url = redis_url();
    let (a, b) = (bus(&url, BusConfig::default()).await, bus(&url, BusConfig::default()).await);
    let session = SessionId::new();
    let mut first = a.listen(&session, None).await.expect("listen");
    let epoch = expect_reset(next(&mut first, "the opening reset").await).stream_id;
    for i in 1..=5 {
        b.publish(&session, frame(format!("f{i}"))).await.expect("publish");
    }
    let mut last = None;
    for seq in 1..=5 {
        last = Some(next(&mut first, "a live frame").await.cursor());
        assert_eq!(last.as_ref().map(|c| c.seq), Some(seq));
    }
    drop(first);

    for i in 6..=12 {
        b.publish(&session, frame(format!("f{i}"))).await.expect("publish");
    }
    let mut again = b.listen(&session, last.as_ref()).await.expect("listen again");
    for seq in 6..=12 {
        let bytes = expect_frame(next(&mut again, "a missed frame").await, &epoch, seq);
        assert_eq!(bytes, frame(format!("f{seq}")));
    }
    a.publish(&session, frame("f13")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut again, "frame 13").await, &epoch, 13), frame("f13"));
    assert_next_is_marker(&a, &session, &mut again).await;
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn listeners_joining_while_frames_fly_see_no_hole_and_no_duplicate() {
    let url = redis_url();
    let (a, b) = (bus(&url, BusConfig::default()).await, bus(&url, BusConfig::default()).await);
    let session = SessionId::new();
    let head = a.publish(&session, frame("f1")).await.expect("publish");
    // The publisher says how far it got, so the joins spread over its run.
    let (published, mut progress) = tokio::sync::watch::channel(1u64);
    let publisher = {
        let (a, session) = (a.clone(), session.clone());
        tokio::spawn(async move {
            for i in 2..=150 {
                let at = a.publish(&session, frame(format!("f{i}"))).await.expect("publish");
                published.send_replace(at.seq);
            }
        })
    };
    // Join from the first cursor, ten times while the publisher runs (one join every 12
    // frames): each join races its subscribe against the publisher.
    let mut listeners = Vec::new();
    for k in 0..10u64 {
        progress.wait_for(|&seq| seq > 12 * k).await.expect("the publisher runs");
        listeners.push(b.listen(&session, Some(&head)).await.expect("listen"));
    }
    publisher.await.expect("publisher");
    let marker = a.publish(&session, frame("marker")).await.expect("publish the marker");
    for listener in &mut listeners {
        for seq in 2..=150 {
            let bytes = expect_frame(next(listener, &format!("frame {seq}")).await, &head.stream_id, seq);
            assert_eq!(bytes, frame(format!("f{seq}")));
        }
        // Then the marker: nothing repeated or extra came between.
        assert_eq!(expect_frame(next(listener, "the marker").await, &marker.stream_id, 151), frame("marker"));
    }
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_cursor_trimmed_away_needs_a_snapshot() {
    let url = redis_url();
    let config = BusConfig { history_frames: 8, ..BusConfig::default() };
    let a = bus(&url, config).await;
    let session = SessionId::new();
    let mut epoch = None;
    for i in 1..=20 {
        epoch = Some(a.publish(&session, frame(format!("f{i}"))).await.expect("publish").stream_id);
    }
    let epoch = epoch.expect("published");
    let at = |seq| Cursor { stream_id: epoch.clone(), seq };

    // The log holds 13..=20: a cursor at 12 continues, one at 11 cannot.
    let replay = a.replay(&session, Some(&at(12))).await.expect("replay");
    assert_eq!(
        replay,
        Replay::Frames { epoch: epoch.clone(), seq: 20, frames: (13..=20).map(|i| frame(format!("f{i}"))).collect() }
    );
    let replay = a.replay(&session, Some(&at(11))).await.expect("replay");
    assert_eq!(replay, Replay::Snapshot { epoch: epoch.clone(), seq: 20 });

    // A listener from a trimmed cursor starts with a reset at the head, then live frames.
    let mut listener = a.listen(&session, Some(&at(5))).await.expect("listen");
    assert_eq!(expect_reset(next(&mut listener, "the reset").await), at(20));
    a.publish(&session, frame("f21")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut listener, "frame 21").await, &epoch, 21), frame("f21"));
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn the_log_is_bounded_in_bytes_too() {
    let url = redis_url();
    let config = BusConfig { history_bytes: 1000, ..BusConfig::default() };
    let a = bus(&url, config).await;
    let session = SessionId::new();
    let mut conn = raw(&url).await;
    let (meta, log) = (format!("spool:{{{session}}}:meta"), format!("spool:{{{session}}}:log"));
    for i in 0..10u8 {
        a.publish(&session, Bytes::from(vec![b'a' + i; 300])).await.expect("publish");
    }
    // 300-byte frames under a 1000-byte budget: the newest three stay.
    let len: u64 = redis::cmd("XLEN").arg(&log).query_async(&mut conn).await.expect("XLEN");
    let bytes: u64 = conn.hget(&meta, "bytes").await.expect("HGET");
    // Each entry is its frame behind the 32-byte tag (seal.rs).
    assert_eq!((len, bytes), (3, 3 * (300 + TAG_LEN as u64)));
    let head = a.publish(&session, Bytes::from(vec![b'z'; 5000])).await.expect("publish");
    // A frame over the whole budget still stays, alone: the newest is always replayable.
    let len: u64 = redis::cmd("XLEN").arg(&log).query_async(&mut conn).await.expect("XLEN");
    let bytes: u64 = conn.hget(&meta, "bytes").await.expect("HGET");
    assert_eq!((len, bytes), (1, 5000 + TAG_LEN as u64));
    let previous = Cursor { stream_id: head.stream_id.clone(), seq: head.seq - 1 };
    let replay = a.replay(&session, Some(&previous)).await.expect("replay");
    assert_eq!(
        replay,
        Replay::Frames { epoch: head.stream_id.clone(), seq: 11, frames: vec![Bytes::from(vec![b'z'; 5000])] }
    );
    // Every key expires on its own when the session is abandoned.
    for key in [&meta, &log] {
        let ttl: i64 = conn.pttl(key).await.expect("PTTL");
        assert!(ttl > 0 && ttl <= 3_600_000, "{key} ttl {ttl}");
    }
}

/// `FLUSHDB` stands for every way Redis loses a session: the listeners must be told to
/// take a snapshot, never be handed frames of the new epoch as if they followed the old.
/// Database 9 is this test's alone, so the flush disturbs no other test.
#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_flushed_redis_resets_listeners_and_never_leaves_a_hole() {
    let url = redis_url();
    let url = in_database(&url, 9);
    let config = BusConfig { check_interval: Duration::from_millis(200), ..BusConfig::default() };
    let (a, b) = (bus(&url, config.clone()).await, bus(&url, config).await);
    let (busy, quiet) = (SessionId::new(), SessionId::new());
    let mut listener = b.listen(&busy, None).await.expect("listen");
    let mut quiet_listener = b.listen(&quiet, None).await.expect("listen");
    let old = expect_reset(next(&mut listener, "the opening reset").await).stream_id;
    let quiet_old = expect_reset(next(&mut quiet_listener, "the opening reset").await).stream_id;
    for seq in 1..=3 {
        a.publish(&busy, frame(format!("old {seq}"))).await.expect("publish");
        expect_frame(next(&mut listener, "an old frame").await, &old, seq);
    }
    let old_cursor = Cursor { stream_id: old.clone(), seq: 3 };

    let mut conn = raw(&url).await;
    redis::cmd("FLUSHDB").query_async::<()>(&mut conn).await.expect("FLUSHDB");

    let first_new = a.publish(&busy, frame("new 1")).await.expect("publish");
    assert_ne!(first_new.stream_id, old, "a lost log starts a new epoch");
    assert_eq!(first_new.seq, 1, "and a new seq");
    a.publish(&busy, frame("new 2")).await.expect("publish");

    let reset = expect_reset(next(&mut listener, "a reset after the flush").await);
    assert_eq!(reset.stream_id, first_new.stream_id);
    let mut at = reset.seq;
    while at < 2 {
        at += 1;
        expect_frame(next(&mut listener, "a new frame").await, &reset.stream_id, at);
    }
    assert_eq!(assert_next_is_marker(&a, &busy, &mut listener).await.seq, 3);

    // A cursor of the old epoch, on either node, gets a snapshot.
    for node in [&a, &b] {
        let replay = node.replay(&busy, Some(&old_cursor)).await.expect("replay");
        assert_eq!(replay, Replay::Snapshot { epoch: first_new.stream_id.clone(), seq: 3 });
    }
    // A session that published nothing since the flush learns of it from the periodic check.
    let quiet_reset = expect_reset(next(&mut quiet_listener, "the quiet session's reset").await);
    assert_ne!(quiet_reset.stream_id, quiet_old);
    assert_eq!(quiet_reset.seq, 0);
}

/// Simulates a lost PUB/SUB message: the frame (sealed as a node seals it) is in the
/// log and the seq moved, but nothing was published.
async fn append_silently(url: &str, session: &SessionId, body: &str) -> u64 {
    let log = format!("spool:{{{session}}}:log");
    append_raw(url, session, &key().seal(&log, body.as_bytes())).await
}

/// Appends `entry` to the session's log as the next seq, as anyone with access to
/// Redis can; returns the seq.
async fn append_raw(url: &str, session: &SessionId, entry: &[u8]) -> u64 {
    let mut conn = raw(url).await;
    let (meta, log) = (format!("spool:{{{session}}}:meta"), format!("spool:{{{session}}}:log"));
    let seq: u64 = conn.hincr(&meta, "seq", 1).await.expect("HINCRBY");
    let _: () = conn.hincr(&meta, "bytes", entry.len()).await.expect("HINCRBY");
    let _: String = redis::cmd("XADD")
        .arg(&log)
        .arg(format!("{seq}-0"))
        .arg("f")
        .arg(entry)
        .query_async(&mut conn)
        .await
        .expect("XADD");
    seq
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_lost_message_is_filled_from_the_log() {
    let url = redis_url();
    let a = bus(&url, BusConfig::default()).await;
    let session = SessionId::new();
    let epoch = a.publish(&session, frame("f1")).await.expect("publish").stream_id;
    let mut listener = a.listen(&session, Some(&Cursor { stream_id: epoch.clone(), seq: 1 })).await.expect("listen");
    a.publish(&session, frame("f2")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut listener, "frame 2").await, &epoch, 2), frame("f2"));

    assert_eq!(append_silently(&url, &session, "lost 3").await, 3);
    assert_eq!(append_silently(&url, &session, "lost 4").await, 4);
    a.publish(&session, frame("f5")).await.expect("publish");
    for (seq, body) in [(3, "lost 3"), (4, "lost 4"), (5, "f5")] {
        assert_eq!(expect_frame(next(&mut listener, body).await, &epoch, seq), frame(body));
    }
    assert_next_is_marker(&a, &session, &mut listener).await;
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_lost_last_message_is_found_by_the_periodic_check() {
    let url = redis_url();
    let config = BusConfig { check_interval: Duration::from_millis(200), ..BusConfig::default() };
    let a = bus(&url, config).await;
    let session = SessionId::new();
    let mut listener = a.listen(&session, None).await.expect("listen");
    let epoch = expect_reset(next(&mut listener, "the opening reset").await).stream_id;
    assert_eq!(append_silently(&url, &session, "lost 1").await, 1);
    assert_eq!(expect_frame(next(&mut listener, "the lost frame").await, &epoch, 1), frame("lost 1"));
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_gap_that_was_trimmed_resets_the_listener() {
    let url = redis_url();
    let config = BusConfig { history_frames: 4, ..BusConfig::default() };
    let a = bus(&url, config).await;
    let session = SessionId::new();
    let mut listener = a.listen(&session, None).await.expect("listen");
    let epoch = expect_reset(next(&mut listener, "the opening reset").await).stream_id;
    for _ in 0..10 {
        append_silently(&url, &session, "lost").await;
    }
    a.publish(&session, frame("f11")).await.expect("publish");
    // Frames 1..=7 are gone from a 4-frame log: the listener cannot be continued.
    assert_eq!(expect_reset(next(&mut listener, "a reset").await), Cursor { stream_id: epoch.clone(), seq: 11 });
    a.publish(&session, frame("f12")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut listener, "frame 12").await, &epoch, 12), frame("f12"));
}

async fn subscribers(conn: &mut redis::aio::MultiplexedConnection, session: &SessionId) -> u64 {
    let counts: Vec<(String, u64)> =
        redis::cmd("PUBSUB").arg("NUMSUB").arg(channel(session)).query_async(conn).await.expect("PUBSUB NUMSUB");
    counts.first().map_or(0, |(_, n)| *n)
}

/// Waits until Redis counts `want` subscriptions (leaving is asynchronous: a dropped
/// listener tells the link task, which then unsubscribes).
async fn until_subscribers(conn: &mut redis::aio::MultiplexedConnection, session: &SessionId, want: u64) {
    for _ in 0..100 {
        if subscribers(conn, session).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("expected {want} subscriptions, Redis counts {}", subscribers(conn, session).await);
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_node_subscribes_once_per_session_however_many_listeners() {
    let url = redis_url();
    let (a, b) = (bus(&url, BusConfig::default()).await, bus(&url, BusConfig::default()).await);
    let session = SessionId::new();
    let mut conn = raw(&url).await;

    let mut on_a = Vec::new();
    for _ in 0..5 {
        on_a.push(a.listen(&session, None).await.expect("listen"));
    }
    assert_eq!(subscribers(&mut conn, &session).await, 1, "five listeners on one node");
    let mut on_b = Vec::new();
    for _ in 0..3 {
        on_b.push(b.listen(&session, None).await.expect("listen"));
    }
    assert_eq!(subscribers(&mut conn, &session).await, 2, "one more node");

    // Every listener still gets every frame.
    let epoch = a.publish(&session, frame("f1")).await.expect("publish").stream_id;
    for listener in on_a.iter_mut().chain(on_b.iter_mut()) {
        expect_reset(next(listener, "the opening reset").await);
        expect_frame(next(listener, "frame 1").await, &epoch, 1);
    }

    on_a.truncate(1);
    // A's link handles joins and leaves in order: once a join after the four leaves is
    // done, the leaves were handled (and any unsubscribe they caused was sent).
    let _after_the_leaves = a.listen(&SessionId::new(), None).await.expect("listen");
    assert_eq!(subscribers(&mut conn, &session).await, 2, "A keeps its subscription while a listener is left");
    on_a.clear();
    until_subscribers(&mut conn, &session, 1).await;
    on_b.clear();
    until_subscribers(&mut conn, &session, 0).await;
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_stuck_listener_is_cut_while_another_gets_every_frame() {
    let url = redis_url();
    let config = BusConfig { queue_bytes: 64 << 10, ..BusConfig::default() };
    let a = bus(&url, config).await;
    let session = SessionId::new();
    let mut stuck = a.listen(&session, None).await.expect("listen");
    let mut reader = a.listen(&session, None).await.expect("listen");
    let epoch = expect_reset(next(&mut reader, "the opening reset").await).stream_id;
    let reading = tokio::spawn(async move {
        for seq in 1..=200 {
            expect_frame(next(&mut reader, &format!("frame {seq}")).await, &epoch, seq);
        }
        reader
    });
    for i in 0..200 {
        a.publish(&session, Bytes::from(vec![b'x'; 1024 + i])).await.expect("publish");
    }
    let reader = reading.await.expect("the reader got every frame");
    assert!(!reader.was_cut());

    // 200 KiB went by a 64 KiB queue: the stuck listener ends without another item.
    let ended = tokio::time::timeout(Duration::from_secs(5), stuck.next()).await.expect("a cut listener ends at once");
    assert_eq!(ended, None);
    assert!(stuck.was_cut());
}

/// Kills this test's PUB/SUB connections from the Redis side. They are the only ones on
/// database 10, which `CLIENT LIST` shows; other tests' links are left alone.
async fn kill_links_on_database_10(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: String =
        redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query_async(conn).await.expect("CLIENT LIST");
    let ids: Vec<String> = list
        .lines()
        .filter(|line| line.split(' ').any(|field| field == "db=10"))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")).map(str::to_owned))
        .collect();
    for id in &ids {
        let _: u64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query_async(conn).await.expect("CLIENT KILL");
    }
    ids
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_dropped_link_reconnects_resubscribes_and_fills_the_gap() {
    let url = redis_url();
    let url = in_database(&url, 10);
    let a = bus(&url, BusConfig::default()).await;
    let session = SessionId::new();
    let mut listener = a.listen(&session, None).await.expect("listen");
    let epoch = expect_reset(next(&mut listener, "the opening reset").await).stream_id;
    a.publish(&session, frame("f1")).await.expect("publish");
    expect_frame(next(&mut listener, "frame 1").await, &epoch, 1);

    let mut conn = raw(&url).await;
    let killed = kill_links_on_database_10(&mut conn).await;
    assert!(!killed.is_empty(), "the bus's link shows on database 10");
    // Published while the link is down or coming back: these can only arrive by a fill.
    for i in 2..=4 {
        a.publish(&session, frame(format!("f{i}"))).await.expect("publish");
    }
    for seq in 2..=4 {
        assert_eq!(
            expect_frame(next(&mut listener, "a frame from the outage").await, &epoch, seq),
            frame(format!("f{seq}"))
        );
    }
    // The new link is subscribed: live frames flow again.
    until_subscribers(&mut conn, &session, 1).await;
    a.publish(&session, frame("f5")).await.expect("publish");
    assert_eq!(expect_frame(next(&mut listener, "frame 5").await, &epoch, 5), frame("f5"));
    assert_next_is_marker(&a, &session, &mut listener).await;
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_batch_is_published_in_order_in_one_go_even_after_redis_forgot_the_script() {
    let url = redis_url();
    let publisher = bus(&url, BusConfig::default()).await;
    let session = SessionId::new();
    let mut listener = publisher.listen(&session, None).await.expect("listen");
    let start = expect_reset(next(&mut listener, "the opening reset").await);

    let first: Vec<Bytes> = (1..=50).map(|i| frame(format!("first-{i}"))).collect();
    let cursors = publisher.publish_many(&session, &first).await.expect("publish a batch");
    assert_eq!(cursors.iter().map(|c| c.seq).collect::<Vec<_>>(), (1..=50).collect::<Vec<_>>());
    // A Redis that lost its scripts (a restart, SCRIPT FLUSH) loads it again.
    let mut conn = raw(&url).await;
    let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.expect("script flush");
    let second: Vec<Bytes> = (51..=100).map(|i| frame(format!("second-{i}"))).collect();
    let cursors = publisher.publish_many(&session, &second).await.expect("publish after SCRIPT FLUSH");
    assert_eq!(cursors.first().map(|c| c.seq), Some(51));
    assert!(cursors.iter().all(|c| c.stream_id == start.stream_id), "one epoch");

    for (seq, body) in (1..=100).zip(first.iter().chain(&second)) {
        let bytes = expect_frame(next(&mut listener, &format!("frame {seq}")).await, &start.stream_id, seq);
        assert_eq!(&bytes, body);
    }
    assert_next_is_marker(&publisher, &session, &mut listener).await;
}

/// What an attacker who can reach Redis (`redis-cli`) writes into a session — a frame on
/// its channel only, a frame appended to its log and published, a node of another
/// deployment (another key) publishing — never reaches a listener: the frames of the
/// node's own key continue, and where forged entries hold seqs the listener takes a
/// snapshot (a reset) rather than a hole. Replays skip nothing silently either.
#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn frames_no_node_of_the_deployment_wrote_never_reach_a_listener() {
    let url = redis_url();
    let a = bus(&url, BusConfig::default()).await;
    let other = RedisBus::connect(&url, BusConfig::default(), ClusterKey::new(&[9; 32]).expect("key"))
        .await
        .expect("a node with another key");
    let session = SessionId::new();
    let epoch = a.publish(&session, frame("f1")).await.expect("publish").stream_id;
    let mut listener = a.listen(&session, Some(&Cursor { stream_id: epoch.clone(), seq: 1 })).await.expect("listen");
    let mut conn = raw(&url).await;

    // On the channel only, as the next frame: the log still has seq 2 free.
    let _: u64 = conn.publish(channel(&session), format!("{epoch}:2\nforged live")).await.expect("PUBLISH");
    let two = a.publish(&session, frame("f2")).await.expect("publish");
    assert_eq!(two.seq, 2);
    assert_eq!(expect_frame(next(&mut listener, "frame 2").await, &epoch, 2), frame("f2"), "not the forged one");

    // Into the log and onto the channel, as the publish script would.
    let forged = append_raw(&url, &session, b"forged logged").await;
    let _: u64 = conn.publish(channel(&session), format!("{epoch}:{forged}\nforged logged")).await.expect("PUBLISH");
    // Another deployment's node: sealed, with the wrong key.
    other.publish(&session, frame("another key")).await.expect("publish with another key");
    let five = a.publish(&session, frame("f5")).await.expect("publish");
    assert_eq!(five.seq, 5);
    // Seqs 3 and 4 hold frames no node of ours wrote: the listener cannot be continued
    // without them, so it takes a snapshot at 5; then the frames after it.
    assert_eq!(expect_reset(next(&mut listener, "a reset").await), Cursor { stream_id: epoch.clone(), seq: 5 });
    assert_next_is_marker(&a, &session, &mut listener).await;
    let from_two = Cursor { stream_id: epoch.clone(), seq: 2 };
    assert!(matches!(a.replay(&session, Some(&from_two)).await.expect("replay"), Replay::Snapshot { .. }));
    // The forged live frame, the forged logged one (live, then in the log), the other
    // key's (live): each counted.
    assert!(a.rejected() >= 4, "rejected {}", a.rejected());
}

/// Who watches a session is sealed too: an entry written into the session's watch hash
/// by anyone else (a node "with" a hundred interactive views, keeping a run alive or an
/// approval waiting) counts for nothing; the node's own entry still does.
#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_watcher_entry_no_node_wrote_counts_for_nothing() {
    use spool_engine::FrameBus;
    use spool_engine::framebus::Watchers;
    let url = redis_url();
    let a = bus(&url, BusConfig::default()).await;
    let session = SessionId::new();
    let mine = Watchers { streams: 2, interactive: 1, ..Watchers::default() };
    a.set_watchers(&session, "node-a", mine).await.expect("set");
    let mut conn = raw(&url).await;
    let far = spool_protocol::time::now_ms() + 3_600_000;
    let _: () =
        conn.hset(format!("spool:{{{session}}}:watch"), "node-x", format!("100 100 {far}")).await.expect("HSET");
    assert_eq!(a.watchers(&session).await.expect("watchers"), vec![("node-a".to_owned(), mine)]);
}
