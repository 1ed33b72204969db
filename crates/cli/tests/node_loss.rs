//! A node lost under load (issue 43), small: three `spool serve` nodes on one PostgreSQL
//! database and one Redis, 240 subscribers (80 a node) following 8 sessions over SSE,
//! and a long answer running on node A for one of them. Node C, which runs nothing, is
//! killed with SIGKILL mid-answer. Its subscribers do what Spool's clients do: they come
//! back after a jittered backoff, to another node (as a load balancer would send them),
//! with their cursor in `Last-Event-ID`.
//!
//! Every subscriber's frames, over all its connections, must be its session's frames
//! from its first snapshot on: each seq once, in order, none missing (a snapshot where
//! a replay was due jumps: a hole), byte for byte what every other subscriber of the
//! session got for that seq; and every one must end on its session's last frame. `spool-bench nodes
//! --kill-after-ms` is the same at up to 100,000 subscribers (BENCHMARKS.md).
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`;
//! built without them the test is ignored, except under CI (see `common`).

use crate::common;

use common::{Spool, SseStream, TestDb, WAIT, redis_url, start_with};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::sync::watch;

const NODES: usize = 3;
const SUBSCRIBERS: usize = 240;
const SESSIONS: usize = 8;
const DELTAS: u64 = 400;

/// What one subscriber got, over all its connections.
#[derive(Default)]
struct Got {
    /// The seq of the snapshot its first connection began with.
    snapshot: Option<u64>,
    /// Every other frame, `(seq, data)`, in arrival order.
    frames: Vec<(u64, String)>,
    /// Connections without a cursor after the first, or one that did not begin with a
    /// snapshot.
    bad_starts: usize,
    /// Times its stream ended and it came back.
    reconnects: usize,
    /// The node it read from at the end.
    node: usize,
}

/// One subscriber: follows `session` from node `node`, moving to another node whenever
/// its stream ends or a node refuses it, until `stop`.
async fn follow(
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    session: String,
    mut node: usize,
    last: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
    seed: u64,
) -> Got {
    let mut got = Got::default();
    let mut cursor: Option<String> = None;
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    loop {
        let mut req = client.get(format!("{}/api/sessions/{session}/events", bases[node]));
        if let Some(cursor) = &cursor {
            req = req.header("last-event-id", cursor);
        }
        if let Ok(res) = req.send().await
            && res.status() == 200
        {
            let resumed = cursor.is_some();
            let mut stream = SseStream::new(res);
            let mut first = true;
            loop {
                let event = tokio::select! {
                    event = stream.next_event_unbounded() => event,
                    _ = stop.wait_for(|s| *s) => {
                        got.node = node;
                        return got;
                    }
                };
                let Some(event) = event else { break };
                let Some(id) = event.id else { continue };
                let (_, seq) = id.rsplit_once(':').expect("id is streamId:seq");
                let seq: u64 = seq.parse().expect("a numeric seq");
                let kind: Value = serde_json::from_str(&event.data).expect("frame data is JSON");
                // Only the first connection starts without a cursor, with a snapshot.
                // After it, a snapshot is a frame like any other in its place (the bus
                // publishes one when a node begins following a running session); one
                // out of place shows as a hole or a repeat.
                match (first && !resumed, kind["type"] == "session.snapshot") {
                    (true, true) if got.snapshot.is_none() => got.snapshot = Some(seq),
                    (true, _) => got.bad_starts += 1,
                    (false, _) => got.frames.push((seq, event.data)),
                }
                first = false;
                last.store(seq, Relaxed);
                cursor = Some(id);
            }
            got.reconnects += 1;
        }
        // The client's backoff, shortened for a test: 100 ms and up to a quarter more.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wait = Duration::from_millis(100 + rng % 26);
        node = (node + 1 + (rng >> 32) as usize % (NODES - 1)) % NODES;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => {
                got.node = node;
                return got;
            }
        }
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_killed_under_load_loses_and_repeats_no_frame_for_any_subscriber() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let mut nodes: Vec<Option<Spool>> = Vec::new();
    let mut bases = Vec::new();
    for n in ["a", "b", "c"] {
        let (data, id) = (dir.path().join(n), format!("loss-{n}-{}", std::process::id()));
        let args =
            ["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "5", "--max-streams-per-user", "1000"];
        let (node, base) = start_with(&db.url, &data, &args);
        nodes.push(Some(node));
        bases.push(base);
    }
    let bases = Arc::new(bases);
    let a = &bases[0];
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let project = common::call(client.post(format!("{a}/api/projects")).json(&json!({"path": project_dir}))).await;
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let body = json!({"projectId": project["id"], "title": format!("loss {i}")});
        let session = common::call(client.post(format!("{a}/api/sessions")).json(&body)).await;
        sessions.push(session["id"].as_str().expect("session id").to_owned());
    }

    // Subscriber i: session i % 8, node i % 3. Each one's last seq, to see progress.
    let (stop_tx, stop_rx) = watch::channel(false);
    let lasts: Vec<Arc<AtomicU64>> = (0..SUBSCRIBERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let subscribers: Vec<_> = (0..SUBSCRIBERS)
        .map(|i| {
            let follow = follow(
                client.clone(),
                bases.clone(),
                sessions[i % SESSIONS].clone(),
                i % NODES,
                lasts[i].clone(),
                stop_rx.clone(),
                i as u64,
            );
            tokio::spawn(follow)
        })
        .collect();
    let all_streaming = async {
        while lasts.iter().any(|l| l.load(Relaxed) == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, all_streaming).await.expect("every subscriber has its snapshot");
    let before: Vec<u64> = lasts.iter().map(|l| l.load(Relaxed)).collect();

    // A long answer on A; C is killed once A's hot subscribers are 100 frames into it.
    let prompt = json!({"text": format!("stream: {DELTAS}")});
    let run = common::call(client.post(format!("{a}/api/sessions/{}/prompt", sessions[0])).json(&prompt)).await;
    let witness = &lasts[0];
    let into_run = async {
        while witness.load(Relaxed) < before[0] + 100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, into_run).await.expect("the answer streams");
    nodes[2].take().expect("node C").sigkill();
    let run_url = format!("{a}/api/runs/{}", run["runId"].as_str().expect("runId"));
    let state = common::call(client.get(&run_url)).await;
    assert_eq!(state["status"], "running", "C was killed mid-answer: {state}");

    // Done when the answer has ended and every subscriber of a session is on the same
    // last frame, twice in a row.
    let settled = async {
        let mut agreed_before = false;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let seqs: Vec<u64> = lasts.iter().map(|l| l.load(Relaxed)).collect();
            let agreed = (0..SESSIONS).all(|s| seqs.iter().skip(s).step_by(SESSIONS).all(|q| *q == seqs[s]));
            let answered = common::call(client.get(&run_url)).await["status"] != "running";
            if agreed && answered && agreed_before {
                return;
            }
            agreed_before = agreed && answered;
        }
    };
    tokio::time::timeout(WAIT, settled).await.expect("every subscriber reaches its session's last frame");
    stop_tx.send(true).expect("subscribers listen");
    let mut got = Vec::new();
    for s in subscribers {
        got.push(s.await.expect("a subscriber"));
    }

    // The session's frames by seq, from everyone: one body per seq.
    let mut faults = Vec::new();
    let mut reference: Vec<BTreeMap<u64, &str>> = vec![BTreeMap::new(); SESSIONS];
    for (i, g) in got.iter().enumerate() {
        for (seq, data) in &g.frames {
            let known = reference[i % SESSIONS].entry(*seq).or_insert(data);
            if known != data {
                faults.push(format!("session {}: seq {seq} arrived with two bodies", i % SESSIONS));
            }
        }
    }
    for (i, g) in got.iter().enumerate() {
        let session = &reference[i % SESSIONS];
        let last = session.keys().next_back().copied().unwrap_or(0);
        let start = g.snapshot.expect("every subscriber began with a snapshot");
        let seqs: Vec<u64> = g.frames.iter().map(|f| f.0).collect();
        let expected: Vec<u64> = (start + 1..=last).collect();
        if seqs != expected || g.bad_starts > 0 {
            let missing = expected.iter().filter(|s| !seqs.contains(s)).count();
            let repeated = seqs.len() + missing - expected.len();
            faults.push(format!(
                "subscriber {i} (node {} at first, {} at the end, {} reconnects): {missing} missing, {repeated} repeated, {} bad starts",
                i % NODES,
                g.node,
                g.reconnects,
                g.bad_starts
            ));
        }
    }
    assert!(faults.is_empty(), "{} faults:\n{}", faults.len(), faults.join("\n"));

    let deltas = reference[0].values().filter(|d| d.contains("\"text_delta\"")).count() as u64;
    assert_eq!(deltas, DELTAS, "the whole answer reached its subscribers");
    assert!(reference[0].values().any(|d| d.contains("\"agent_settled\"")), "and its end");
    // C's subscribers lost their stream and came back on A or B with their cursor.
    let moved: Vec<&Got> = got.iter().skip(2).step_by(NODES).collect();
    assert_eq!(moved.len(), SUBSCRIBERS / NODES);
    assert!(moved.iter().all(|g| g.reconnects >= 1 && g.node != 2), "C's subscribers came back elsewhere");
    let stayed = got.iter().enumerate().filter(|(i, _)| i % NODES != 2);
    assert!(stayed.clone().all(|(_, g)| g.reconnects == 0), "nobody on A or B lost their stream");
    drop(nodes);
}
