//! What a run that did not finish is charged, through a real server. A model reports
//! its usage when it finishes; a run stopped by a person or failed mid-answer never
//! hears it, yet the words that streamed were paid for. Such a run counts what it
//! used, estimated from what streamed and what was sent, and says it is an estimate
//! (`usage.estimated`), on the run record, on the cut message and in `agent_end`.

use crate::common;

use common::{Open, ReceivedFrame, TestOptions, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;
use std::time::Duration;

/// Asserts `usage` counts some input and output and says it is an estimate.
fn assert_estimated(usage: &Value, who: &str) {
    assert!(usage["output"].as_u64().is_some_and(|n| n > 0), "{who}: output counted: {usage}");
    assert!(usage["input"].as_u64().is_some_and(|n| n > 0), "{who}: input counted: {usage}");
    assert_eq!(usage["estimated"], true, "{who}: {usage}");
}

/// The last assistant message of the session, as stored.
async fn last_answer(server: &TestServer, session: &str) -> Value {
    let page = server.messages(session, "").await;
    let messages = page["messages"].as_array().expect("messages");
    messages.iter().rfind(|m| m["role"] == "assistant").cloned().unwrap_or_else(|| panic!("no answer in {page}"))
}

fn agent_end(frames: &[ReceivedFrame]) -> Value {
    let end = frames.iter().find(|f| f.event_type() == Some("agent_end")).expect("agent_end");
    end.json["event"].clone()
}

#[tokio::test]
async fn a_stopped_run_counts_the_words_that_streamed() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");

    let run_id = server.start_run(&session, "stream: 2000").await;
    stream.frames_until(|f| f.json["event"]["assistantMessageEvent"]["type"] == "text_delta").await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!((status, &body["aborted"]), (StatusCode::OK, &json!(true)), "{body}");

    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_estimated(&run["usage"], "the run");
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let end = agent_end(&frames);
    assert_eq!(end["status"], "cancelled");
    assert_eq!(end["usage"], run["usage"], "agent_end carries the run's usage");
    let answer = last_answer(&server, &session).await;
    assert_eq!(answer["stopReason"], "aborted", "{answer}");
    assert_estimated(&answer["usage"], "the stopped answer");
    // The session's totals are its runs' sums.
    let (_, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    assert_eq!(runs[0]["usage"], run["usage"], "{runs}");
}

#[tokio::test]
async fn a_run_failed_mid_answer_counts_the_words_that_streamed() {
    // The answer is cut at 200 bytes, a failure after output began.
    let engine = EngineConfig { max_answer_bytes: 200, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;

    let run = server.run_prompt(&session, "stream: 2000").await;
    assert_eq!((&run["status"], &run["error"]["code"]), (&json!("failed"), &json!("answer_too_large")), "{run}");
    assert_estimated(&run["usage"], "the run");
    let answer = last_answer(&server, &session).await;
    assert_estimated(&answer["usage"], "the cut answer");
}

#[tokio::test]
async fn a_finished_run_keeps_the_usage_the_model_reported() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let run = server.run_prompt(&session, "stream: 5").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["usage"]["output"], 5, "{run}");
    assert!(run["usage"].get("estimated").is_none(), "reported, not estimated: {run}");
}
