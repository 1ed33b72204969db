//! `/metrics` through a real server: the counters a person watching a dashboard relies
//! on move when the things they count happen, durations land in the buckets the paused
//! clock says, and requests are counted by route pattern.

use crate::common;

use async_trait::async_trait;
use common::{Open, TestOptions, TestServer, ToolsOverride};
use serde_json::json;
use spool_engine::{EngineConfig, ManualClock, Tool, ToolContext, ToolOutput, ToolSpec};
use std::time::Duration;

async fn scrape(server: &TestServer) -> String {
    let res = server.client.get(server.url("/metrics")).send().await.expect("scrape");
    assert_eq!(res.headers()["content-type"], "application/openmetrics-text; version=1.0.0; charset=utf-8");
    let text = res.text().await.expect("body");
    assert!(text.ends_with("# EOF\n"), "an OpenMetrics exposition ends in # EOF:\n{text}");
    text
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

// Each engine has its own metrics (see `spool_engine::metrics`): every change below is
// exactly what this test's server did, whatever other tests run beside it.
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
    // OpenMetrics names a counter family without its `_total` sample suffix.
    assert!(before.contains("# TYPE spool_runs counter"));
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

/// A tool that takes exactly `by` on the engine's manual clock: it moves the clock.
struct Tick {
    clock: ManualClock,
    by: Duration,
}

#[async_trait]
impl Tool for Tick {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "tick".into(),
            description: "Takes a known time.".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn call(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        self.clock.advance(self.by);
        ToolOutput::ok("ticked")
    }
}

#[tokio::test]
async fn an_approval_and_a_tool_call_land_in_the_buckets_of_their_paused_clock_durations() {
    let clock = ManualClock::starting_now();
    let tools = spool_tools::workspace_tools().with(Tick { clock: clock.clone(), by: Duration::from_millis(750) });
    let engine = EngineConfig { clock: clock.clone().into(), ..EngineConfig::default() };
    let options = TestOptions { engine, tools: Some(ToolsOverride(tools)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    // `tick` has no rule of its own, so the default `*: ask` parks the run at it.
    let run_id = server.start_run(&session, "tool: tick {}").await;
    server.wait_run_until(&run_id, |r| r["status"] == "interrupted").await;
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let approval = common::id_of(&detail["state"]["pendingApprovals"][0]);
    // A person takes 7 s to decide; the tool then takes 750 ms.
    clock.advance(Duration::from_secs(7));
    let path = format!("/api/sessions/{session}/approvals/{approval}");
    let (status, body) = server.post(&path, json!({"decision": "once"})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");

    let text = scrape(&server).await;
    let approval_wait = [
        ("spool_approval_wait_seconds_bucket{le=\"5.0\"}", 0.0),
        ("spool_approval_wait_seconds_bucket{le=\"10.0\"}", 1.0),
        ("spool_approval_wait_seconds_count", 1.0),
        ("spool_approval_wait_seconds_sum", 7.0),
    ];
    let tool = [
        ("spool_tool_call_duration_seconds_bucket{le=\"0.5\",tool=\"tick\"}", 0.0),
        ("spool_tool_call_duration_seconds_bucket{le=\"1.0\",tool=\"tick\"}", 1.0),
        ("spool_tool_call_duration_seconds_count{tool=\"tick\"}", 1.0),
        ("spool_tool_call_duration_seconds_sum{tool=\"tick\"}", 0.75),
    ];
    for (series, expected) in approval_wait.into_iter().chain(tool) {
        assert_eq!(value(&text, series), expected, "{series}");
    }
    // Two model calls (the call, then the answer to its result), each of no time on
    // the paused clock: in the lowest bucket.
    let model = "spool_model_call_duration_seconds_bucket{le=\"0.005\",model=\"scripted\"}";
    assert_eq!(value(&text, model), 2.0);
    assert_eq!(value(&text, "spool_provider_first_token_seconds_bucket{le=\"0.005\"}"), 2.0);
}

#[tokio::test]
async fn requests_are_counted_by_route_pattern_method_and_status_class() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    for _ in 0..5 {
        assert_eq!(server.get(&format!("/api/sessions/{session}")).await.0, reqwest::StatusCode::OK);
    }
    // Another session id is the same route: one series, never one per id.
    let (status, _) = server.get("/api/sessions/ses_01jd0000000000000000000000").await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    for n in 0..3 {
        assert_eq!(server.get(&format!("/api/no-such-route/{n}")).await.0, reqwest::StatusCode::NOT_FOUND);
    }
    let text = scrape(&server).await;
    let route = "route=\"/api/sessions/{id}\",method=\"GET\"";
    assert_eq!(value(&text, &format!("spool_http_requests_total{{{route},status_class=\"2xx\"}}")), 5.0);
    assert_eq!(value(&text, &format!("spool_http_requests_total{{{route},status_class=\"4xx\"}}")), 1.0);
    let count = format!("spool_http_request_duration_seconds_count{{{route},status_class=\"2xx\"}}");
    assert_eq!(value(&text, &count), 5.0);
    let unmatched = "spool_http_requests_total{route=\"unmatched\",method=\"GET\",status_class=\"4xx\"}";
    assert_eq!(value(&text, unmatched), 3.0);
    assert!(!text.contains("no-such-route") && !text.contains(&session), "raw paths never become labels:\n{text}");
}

/// Scrapes until `series` reads `expected`, for at most [`common::WAIT`]: a gauge that
/// follows a disconnect moves when the server notices, not at a known instant.
async fn wait_for(server: &TestServer, series: &str, expected: f64) {
    let waited = tokio::time::timeout(common::WAIT, async {
        loop {
            if value(&scrape(server).await, series) == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{series} never read {expected}:\n{}", scrape(server).await);
}

#[tokio::test]
async fn an_open_stream_is_counted_by_dialect_until_its_client_goes() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    const NATIVE: &str = "spool_open_streams{dialect=\"native\"}";
    assert_eq!(value(&scrape(&server).await, NATIVE), 0.0);
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    let text = scrape(&server).await;
    assert_eq!(value(&text, NATIVE), 1.0);
    assert_eq!(value(&text, "spool_open_streams{dialect=\"ws\"}"), 0.0);
    assert_eq!(value(&text, "spool_loaded_sessions"), 1.0);
    drop(stream);
    wait_for(&server, NATIVE, 0.0).await;
}

#[tokio::test]
async fn with_metrics_off_nothing_is_served() {
    let engine = EngineConfig { metrics: false, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let (status, body) = server.get("/metrics").await;
    assert_eq!((status, body["error"]["code"].as_str()), (reqwest::StatusCode::NOT_FOUND, Some("not_found")));
}

/// The workspace's root, where `deploy/` and `README.md` are.
fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Every `spool_…` name in `text`.
fn spool_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("spool_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The `expr` of every query of the dashboard, wherever it is nested.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The name of each metric family on `/metrics` as queries name it: a counter by its
/// `_total` sample, anything else by its family name.
fn families(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| if kind == "counter" { format!("{name}_total") } else { name.to_owned() })
        .collect()
}

/// Families that have samples only with `--redis-url` (one per node): on a server
/// without a bus they are not on `/metrics` at all. The bus crate's lag test checks
/// them on two nodes over Redis.
const BUS_ONLY: [&str; 1] = ["spool_bus_lag_frames"];

/// A scripted run that streams, reads a file (a tool call) and parks at an approval
/// that a person answers; returns `/metrics` after it.
async fn scripted_run(server: &TestServer) -> String {
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    let read = server.start_run(&session, "tool: read {\"path\": \"README.md\"}").await;
    assert_eq!(server.wait_run(&read).await["status"], "completed");
    let write = server.start_run(&session, "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}").await;
    server.wait_run_until(&write, |r| r["status"] == "interrupted").await;
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let approval = common::id_of(&detail["state"]["pendingApprovals"][0]);
    let path = format!("/api/sessions/{session}/approvals/{approval}");
    assert_eq!(server.post(&path, json!({"decision": "once"})).await.0, reqwest::StatusCode::OK);
    assert_eq!(server.wait_run(&write).await["status"], "completed");
    scrape(server).await
}

#[tokio::test]
async fn every_series_the_grafana_dashboard_queries_is_on_metrics_after_a_scripted_run() {
    let dashboard: serde_json::Value = serde_json::from_str(&repo_file("deploy/grafana/spool.json")).expect("JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    let wanted = spool_names(&queries.join("\n"));
    assert!(wanted.len() >= 15, "the dashboard queries {wanted:?}");
    let server = TestServer::start().await;
    let text = scripted_run(&server).await;
    for series in wanted.iter().filter(|s| !BUS_ONLY.contains(&s.as_str())) {
        let sampled = text.lines().any(|l| {
            l.strip_prefix(series.as_str()).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        });
        assert!(sampled, "the dashboard queries {series}, which /metrics does not have:\n{text}");
    }
}

#[tokio::test]
async fn the_readme_lists_exactly_the_series_on_metrics() {
    let readme = repo_file("README.md");
    let section = readme.split("\n## Metrics\n").nth(1).expect("a Metrics section");
    let section = section.split("\n## ").next().expect("its text");
    let server = TestServer::start().await;
    let mut on_metrics = families(&scripted_run(&server).await);
    on_metrics.extend(BUS_ONLY.map(str::to_owned));
    assert_eq!(spool_names(section), on_metrics, "README's Metrics section against /metrics");
}
