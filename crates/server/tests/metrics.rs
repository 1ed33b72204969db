//! `/metrics` through a real server: the counters a person watching a dashboard relies
//! on move when the things they count happen.

mod common;

use common::{Open, TestServer};

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

#[tokio::test]
async fn counters_follow_streams_runs_and_snapshots() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let before = scrape(&server).await;
    assert!(before.contains("# TYPE spool_runs_total counter"));

    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    server.run_prompt(&session, "stream: 50").await;
    stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let after = scrape(&server).await;

    let grew = |series: &str| value(&after, series) - value(&before, series);
    assert!(grew("spool_runs_total{status=\"completed\"}") >= 1.0);
    assert!(grew("spool_stream_starts_total{mode=\"snapshot\"}") >= 1.0);
    assert!(grew("spool_frames_sent_total") >= 55.0, "snapshot + 50 deltas + the run's other frames");
    assert!(grew("spool_bytes_sent_total") > 5_000.0);
    assert!(value(&after, "spool_open_connections{kind=\"session_stream\"}") >= 1.0);
    assert!(value(&after, "spool_open_connections{kind=\"http\"}") >= 1.0);
    assert!(value(&after, "spool_provider_first_token_seconds_count") >= 1.0);
}
