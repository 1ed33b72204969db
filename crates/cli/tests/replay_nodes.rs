//! Every run replayable exactly across nodes (issue 39): two `spool serve` nodes on one
//! PostgreSQL database and one Redis (the frame bus). The node running a run logs its
//! frames, under the cursors the bus gave them, in the shared store; a client on the
//! other node that asks for the run's events after N (`GET /api/runs/:id/events?after=N`)
//! gets the very bytes a live follower on the running node got from N on, while the
//! run goes on and after it ended, though the other node never held those frames; and a
//! native session-stream cursor a client got from the running node gets every frame
//! after it once on the other node.
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`;
//! built without them the test is ignored, except under CI (see `common`).

use crate::common;

use common::{SseStream, TestDb, WAIT, redis_url, start_with};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

/// A run-stream body's events as raw SSE blocks (`id:`, `event:`, `data:`), comments
/// left out, read to the stream's end.
async fn blocks(res: reqwest::Response) -> Vec<String> {
    assert_eq!(res.status(), 200);
    let text = tokio::time::timeout(WAIT, res.text()).await.expect("the stream ends").expect("body");
    replayable(&text)
}

/// The events of a run-stream body that a replay must repeat: every block but comments
/// and `presence` events, which say who is watching now, carry no id and are never
/// replayed (a presence event with an id fails here).
fn replayable(text: &str) -> Vec<String> {
    let blocks = text.split("\n\n").filter(|b| !b.is_empty() && !b.starts_with(':'));
    blocks
        .filter(|b| !(kind(b) == "presence" && !b.contains("\nid: ") && !b.starts_with("id: ")))
        .map(str::to_owned)
        .collect()
}

fn sequence(block: &str) -> u64 {
    let id = block.lines().find_map(|l| l.strip_prefix("id: ")).unwrap_or_else(|| panic!("no id: {block}"));
    id.parse().expect("a numeric id")
}

fn kind(block: &str) -> &str {
    block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_else(|| panic!("no event: {block}"))
}

fn live_after(live: &[String], after: u64) -> Vec<String> {
    live.iter().filter(|b| sequence(b) > after).cloned().collect()
}

/// The chunks of `run`'s frame log in the shared store.
async fn chunks(db: &sqlx::PgPool, run: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM run_frames WHERE run_id = $1")
        .bind(run)
        .fetch_one(db)
        .await
        .expect("count the log's chunks")
}

/// Two nodes on one PostgreSQL database and one Redis (the scripted model streaming at
/// 2 ms a delta), and a session on them; what the nodes and their files need lives as
/// long as this.
struct TwoNodes {
    client: reqwest::Client,
    a: String,
    b: String,
    store: sqlx::PgPool,
    session: String,
    _nodes: (common::Spool, common::Spool),
    _dir: tempfile::TempDir,
    _db: TestDb,
}

/// Starts [`TwoNodes`], node ids named after `name`, and creates the session on A.
async fn two_nodes(name: &str) -> TwoNodes {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let node = |n: &str| {
        let (data, id) = (dir.path().join(n), format!("{name}-{n}-{}", std::process::id()));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "2"])
    };
    let ((node_a, a), (node_b, b)) = (node("a"), node("b"));
    let store = sqlx::PgPool::connect(&db.url).await.expect("the shared store");
    let project_dir = dir.path().join("project");
    std::fs::create_dir_all(&project_dir).expect("project dir");
    let project = common::call(client.post(format!("{a}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = common::call(client.post(format!("{a}/api/sessions")).json(&json!({"projectId": project["id"]})))
        .await["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    TwoNodes { client, a, b, store, session, _nodes: (node_a, node_b), _dir: dir, _db: db }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_run_replays_exactly_on_another_node() {
    let nodes = two_nodes("replay").await;
    let TwoNodes { client, a, b, store, session, .. } = &nodes;

    // The live follower, on A, which runs the run: far more frames than a ring holds.
    let res = client.post(format!("{a}/api/chat")).json(&json!({"sessionId": session, "text": "stream: 1500"}));
    let res = res.send().await.expect("chat");
    assert_eq!(res.status(), 200);
    let mut body = res.bytes_stream();
    let mut bytes = Vec::new();
    while !bytes.windows(2).any(|w| w == b"\n\n") {
        let chunk = tokio::time::timeout(WAIT, body.next()).await.expect("an event").expect("open").expect("bytes");
        bytes.extend_from_slice(&chunk);
    }
    let first = String::from_utf8_lossy(&bytes).into_owned();
    let data = first.lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
    let run =
        serde_json::from_str::<serde_json::Value>(data).expect("json")["runId"].as_str().expect("runId").to_owned();
    let live = tokio::spawn(async move {
        while let Some(chunk) = body.next().await {
            bytes.extend_from_slice(&chunk.expect("bytes"));
        }
        replayable(&String::from_utf8(bytes).expect("utf-8"))
    });

    // While the run goes on, past the first chunks of its log: clients on B from early N.
    let grown = async {
        while chunks(store, &run).await < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, grown).await.expect("A logs the run in the shared store");
    let events = |after: u64| {
        let req = client.get(format!("{b}/api/runs/{run}/events?after={after}"));
        tokio::spawn(async move { (after, blocks(req.send().await.expect("events")).await) })
    };
    let going: Vec<_> = [0, 1, 50, 200].into_iter().map(events).collect();
    let state = common::call(client.get(format!("{a}/api/runs/{run}"))).await;
    assert_eq!(state["status"], "running", "asked while the run went on: {state}");

    let live = live.await.expect("the live stream");
    assert_eq!(kind(live.last().expect("events")), "done", "{:?}", live.last());
    assert!(live.len() > 1500, "{}", live.len());
    let last = sequence(live.last().expect("events"));
    // And once it ended: B never held these frames in its ring.
    let ended: Vec<_> = [0, 7, 300, 1000, last - 1].into_iter().map(events).collect();
    for replay in going.into_iter().chain(ended) {
        let (after, replay) = replay.await.expect("a replay");
        assert_ne!(replay.first().map(|b| kind(b)), Some("snapshot"), "after={after}: from the log, not a snapshot");
        assert!(replay == live_after(&live, after), "after={after}: the live events from N on, byte for byte");
    }
    store.close().await;
}

/// A native session-stream event as sent: its SSE id (`streamId:seq`) and data.
#[derive(Clone, Debug, PartialEq)]
struct Sent {
    id: String,
    data: String,
}

impl Sent {
    fn seq(&self) -> u64 {
        self.id.rsplit_once(':').expect("streamId:seq").1.parse().expect("seq")
    }

    fn settles(&self) -> bool {
        self.data.contains("\"agent_settled\"")
    }
}

async fn native(client: &reqwest::Client, base: &str, session: &str, cursor: Option<&str>) -> SseStream {
    let mut req = client.get(format!("{base}/api/sessions/{session}/events"));
    if let Some(cursor) = cursor {
        req = req.header("last-event-id", cursor);
    }
    let res = req.send().await.expect("open the session stream");
    assert_eq!(res.status(), 200);
    SseStream::new(res).with_wait(WAIT)
}

async fn next_sent(stream: &mut SseStream) -> Sent {
    loop {
        let event = stream.next_event().await.expect("the stream goes on");
        if !spool_test_support::sse::is_heartbeat(&event) {
            return Sent { id: event.id.expect("an id"), data: event.data };
        }
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_session_stream_cursor_from_one_node_replays_exactly_on_another() {
    let nodes = two_nodes("cursor").await;
    let TwoNodes { client, a, b, store, session, .. } = &nodes;

    // A client on A, which runs the run, reads every frame beside the test.
    let mut on_a = native(client, a, session, None).await;
    next_sent(&mut on_a).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        loop {
            let sent = next_sent(&mut on_a).await;
            let settles = sent.settles();
            if tx.send(sent).is_err() || settles {
                return;
            }
        }
    });
    // B follows the session from before the run too: it sees the run's `run.accepted`
    // come from the bus, and leaves the logging to A.
    let mut on_b = native(client, b, session, None).await;
    next_sent(&mut on_b).await;
    let live_on_b = tokio::spawn(async move {
        let mut sent = Vec::new();
        while sent.last().is_none_or(|s: &Sent| !s.settles()) {
            sent.push(next_sent(&mut on_b).await);
        }
        sent
    });
    let accepted =
        common::call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 1500"})))
            .await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let mut all = Vec::new();
    while all.len() < 20 {
        all.push(tokio::time::timeout(WAIT, rx.recv()).await.expect("a frame").expect("the stream goes on"));
    }
    let grown = async {
        while chunks(store, &run).await < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, grown).await.expect("A logs the run in the shared store");

    // Back on B with cursors A gave, while the run goes on: far behind any ring.
    let cursors = [all[0].id.clone(), all[12].id.clone()];
    let mut backs = Vec::new();
    for cursor in &cursors {
        backs.push(native(client, b, session, Some(cursor)).await);
    }
    let state = common::call(client.get(format!("{a}/api/runs/{run}"))).await;
    assert_eq!(state["status"], "running", "asked while the run went on: {state}");
    while let Some(sent) = rx.recv().await {
        all.push(sent);
    }
    reader.await.expect("the client on A");
    let live_on_b = live_on_b.await.expect("the client on B");
    assert!(live_on_b.ends_with(&all), "B streamed the very frames A did");
    let last = all.last().expect("frames").id.clone();
    for (cursor, mut back) in cursors.into_iter().zip(backs) {
        let seq: u64 = cursor.rsplit_once(':').expect("cursor").1.parse().expect("seq");
        let expected: Vec<Sent> = all.iter().filter(|s| s.seq() > seq).cloned().collect();
        let mut replayed = Vec::new();
        while replayed.last().is_none_or(|s: &Sent| s.id != last) {
            replayed.push(next_sent(&mut back).await);
        }
        assert_eq!(replayed.len(), expected.len(), "cursor {cursor}");
        assert!(replayed == expected, "cursor {cursor}: every frame after it once, byte for byte");
    }
    store.close().await;
}
