//! `/metrics` through a real server: the counters a person watching a dashboard relies
//! on move when the things they count happen.

mod common;

use common::{Open, TestOptions, TestServer};
use std::time::Duration;

async fn scrape(server: &TestServer) -> String {
    let res = server.client.get(server.url("/metrics")).send().await.expect("scrape");
    assert!(res.headers()["content-type"].to_str().expect("type").starts_with("text/plain"));
    res.text().await.expect("body")
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// Reads frames until the stream has received every frame `/metrics` says was sent
/// since `before`, on top of the `received` ones already read: the one subscriber must
/// get exactly what the counter counts (a frame counted and never delivered would hang
/// here until `WAIT`; one delivered and not counted fails the comparison).
/// Returns the scrape and the cursor of the last frame read (`last` if none was).
async fn catch_up(
    server: &TestServer,
    stream: &mut common::SseStream,
    before: &str,
    mut received: usize,
    mut last: String,
) -> (String, String) {
    let now = scrape(server).await;
    let sent = (value(&now, FRAMES) - value(before, FRAMES)) as usize;
    assert!(received <= sent, "{received} frames received, {sent} counted");
    while received < sent {
        let frame =
            tokio::time::timeout(common::WAIT, stream.next_frame()).await.expect("a counted frame").expect("a frame");
        last = frame.cursor();
        received += 1;
    }
    (now, last)
}

const FRAMES: &str = "spool_frames_sent_total";
const BYTES: &str = "spool_bytes_sent_total";

// The counters are process-wide (see `spool_engine::metrics`): this file is its own
// test binary and its one test its only server, so every change below is exactly what
// the test did.
#[tokio::test]
async fn counters_count_exactly_what_streams_runs_and_approvals_did() {
    // No heartbeat within the test: every byte of a stream is a frame's, so the bytes
    // counter must equal what the stream received.
    let mut server =
        TestServer::start_with(TestOptions { heartbeat: Duration::from_secs(3600), ..Default::default() }).await;
    // Every request of the test, the stream's too, on one HTTP/2 connection: the
    // connection gauge has one right value. (HTTP/1.1 keep-alive pools may open one
    // more connection whenever a request overlaps the return of another to the pool.)
    server.client = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().expect("client");
    let project = server.default_project().await;
    // Titled, so no title is derived after the first run.
    let session = common::id_of(&server.create_session(&project, Some("Metrics")).await);
    let before = scrape(&server).await;
    assert!(before.contains("# TYPE spool_runs_total counter"));
    let series = [
        "spool_runs_total{status=\"completed\"}",
        "spool_runs_total{status=\"interrupted\"}",
        "spool_stream_starts_total{mode=\"snapshot\"}",
        "spool_stream_starts_total{mode=\"replay\"}",
        "spool_slow_client_disconnects_total",
        "spool_approval_wait_seconds_count",
        "spool_provider_first_token_seconds_count",
    ];
    let grown = |after: &str| -> Vec<f64> { series.iter().map(|s| value(after, s) - value(&before, s)).collect() };

    // One stream from a snapshot, one run of 50 deltas.
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    server.run_prompt(&session, "stream: 50").await;
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let received = 1 + frames.len();
    assert!(received > 50, "{received}");
    let settled = frames.last().expect("agent_settled").cursor();
    let (after, cursor) = catch_up(&server, &mut stream, &before, received, settled).await;
    // completed, interrupted, snapshot, replay, cuts, approval waits, first tokens
    assert_eq!(grown(&after), [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], "{series:?}");
    // A scrape now, when every counted frame has arrived: their bytes are all counted.
    let settled_scrape = scrape(&server).await;
    assert_eq!(value(&settled_scrape, BYTES) - value(&before, BYTES), stream.raw.len() as f64, "bytes received");
    assert_eq!(value(&after, "spool_open_connections{kind=\"session_stream\"}"), 1.0);
    assert_eq!(value(&after, "spool_open_connections{kind=\"http\"}"), 1.0, "the one HTTP/2 connection");

    // The stream leaves and comes back with its cursor: a replay, of nothing missed.
    drop(stream);
    let mut back = server.events(&session, Open::last_event_id(cursor)).await;
    // A write asks: the run parks (interrupted), a person decides once, it completes.
    let run_id = server.start_run(&session, "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}").await;
    server.wait_run_until(&run_id, |r| r["status"] == "interrupted").await;
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let approval = common::id_of(&detail["state"]["pendingApprovals"][0]);
    let path = format!("/api/sessions/{session}/approvals/{approval}");
    let (status, body) = server.post(&path, serde_json::json!({"decision": "once"})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let second = back.frames_until(|f| f.event_type() == Some("agent_settled")).await.len();
    // Nothing was published between the first stream's last frame and this one's first:
    // what the counter added since `after` is this stream's.
    let (last, _) = catch_up(&server, &mut back, &after, second, String::new()).await;
    // Two model calls in the second run (the call, then the answer to its result).
    assert_eq!(grown(&last), [2.0, 1.0, 1.0, 1.0, 0.0, 1.0, 3.0], "{series:?}");
    let end = scrape(&server).await;
    assert_eq!(value(&end, BYTES) - value(&settled_scrape, BYTES), back.raw.len() as f64, "bytes received");
}
