//! Per-user limits and memory that follows activity: concurrent runs, open streams,
//! and idle sessions unloaded (and reloaded on demand).

use crate::common;

use common::{Open, TestOptions, TestServer, WAIT};
use reqwest::StatusCode;
use spool_engine::{EngineConfig, ManualClock};
use std::time::Duration;

/// Waits until the session's view is idle and returns its detail. The run's record
/// says it settled a moment before the run leaves the view and stops counting among
/// the user's active runs, so a test that goes on from the record alone races that.
async fn wait_idle(server: &TestServer, session: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(status, StatusCode::OK, "{detail}");
        if detail["state"]["status"] == "idle" {
            return detail;
        }
        assert!(tokio::time::Instant::now() < deadline, "the session never went idle: {detail}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_user_past_the_run_limit_gets_a_429_until_a_run_settles() {
    let engine = EngineConfig { max_runs_per_user: 1, ..EngineConfig::default() };
    let options = TestOptions { engine, model_delay: Duration::from_millis(5), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let (a, b) = (server.new_session().await, server.new_session().await);
    let run = server.start_run(&a, "stream: 100").await;
    let (status, body) = server.prompt(&b, "echo: second", None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "too_many_runs");
    server.wait_run(&run).await;
    wait_idle(&server, &a).await;
    assert_eq!(server.run_prompt(&b, "echo: now").await["status"], "completed");
}

#[tokio::test]
async fn a_prompt_over_the_length_limit_is_a_json_413_and_starts_nothing() {
    let engine = EngineConfig { max_prompt_bytes: 1000, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let (status, body) = server.prompt(&session, &format!("echo: {}", "x".repeat(1000)), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "prompt_too_large");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("1000")), "{body}");
    let page = server.messages(&session, "").await;
    assert_eq!(page["messages"].as_array().map(Vec::len), Some(0), "nothing was stored: {page}");
    assert_eq!(server.run_prompt(&session, "echo: short").await["status"], "completed");
}

#[tokio::test]
async fn a_user_past_the_stream_limit_gets_a_429_until_one_closes() {
    let engine = EngineConfig { max_streams_per_user: 2, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let first = server.events(&session, Open::fresh()).await;
    let _second = server.events(&session, Open::fresh()).await;
    let res = server.events_response(&session, &Open::fresh()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: serde_json::Value = res.json().await.expect("json");
    assert_eq!(body["error"]["code"], "too_many_streams");
    drop(first);
    // The server sees the close when the connection goes; retry until it has.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let res = server.events_response(&session, &Open::fresh()).await;
        if res.status() == StatusCode::OK {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed stream was never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// On a manual clock: a session is unloaded once it has been idle for exactly
/// `idle_unload`, not a millisecond sooner; a watched one stays.
#[tokio::test]
async fn idle_sessions_are_unloaded_and_come_back_on_demand() {
    let clock = ManualClock::starting_now();
    let idle_for = Duration::from_secs(600);
    let engine = EngineConfig { idle_unload: idle_for, clock: clock.clone().into(), ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let (idle, watched) = (server.new_session().await, server.new_session().await);
    server.run_prompt(&idle, "echo: remember me").await;
    // The last use of both: the clock has not moved since the server started.
    let used = clock.now_ms();
    let before = wait_idle(&server, &idle).await;
    let mut stream = server.events(&watched, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");

    let idle_ms = i64::try_from(idle_for.as_millis()).expect("fits");
    clock.advance_to(used + idle_ms - 1);
    assert_eq!(server.engine.unload_idle(idle_for), 0, "a millisecond early");
    assert_eq!(server.engine.loaded_sessions(), 2);
    clock.advance_to(used + idle_ms);
    // The janitor looks at this instant too; whichever pass comes first unloads it.
    server.engine.unload_idle(idle_for);
    assert_eq!(server.engine.loaded_sessions(), 1, "the idle session is unloaded, the watched one stays");
    // The watched one stays; the idle one reloads from the store on demand.
    let (status, after) = server.get(&format!("/api/sessions/{idle}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(after["streamId"], before["streamId"], "a reload starts a new stream");
    assert_eq!(after["state"]["total"], 2);
    assert_eq!(after["state"]["messages"][1]["content"][0]["text"], "remember me");
    let timing = &after["state"]["promptTimings"]["0"];
    assert_eq!(timing, &before["state"]["promptTimings"]["0"], "the timing row survives the reload");
    assert!(timing["endedAt"].is_number(), "{after}");
    server.run_prompt(&watched, "echo: still live").await;
    let frame = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    assert!(!frame.is_empty());
}
