//! A real provider client (OpenAI-compatible) through a whole server, against the
//! shared scriptable fake (`spool_test_support::Fake`): what a person watching the
//! session sees when the provider fails. A failure before any output is retried and
//! the stream says so (`auto_retry_start` / `auto_retry_end`); a stream cut mid-answer
//! keeps the text that arrived; Stop closes the provider's connection and keeps the
//! text too.

use crate::common;

use common::{Open, ReceivedFrame, TestServer, id_of};
use serde_json::{Value, json};
use spool_test_support::{End, Fake, Reply, openai_delta, openai_finish, openai_sse};

/// A titled session (an untitled one would ask the model for a title, taking one of
/// the fake's scripted replies) and its live stream.
async fn watched(server: &TestServer) -> (String, common::SseStream) {
    let project = server.default_project().await;
    let session = id_of(&server.create_session(&project, Some("provider")).await);
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    (session, stream)
}

fn events<'a>(frames: &'a [ReceivedFrame], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f.event_type() == Some(kind)).map(|f| &f.json["event"]).collect()
}

/// The stored assistant message's text and stop reason.
async fn stored_answer(server: &TestServer, session: &str) -> (String, String) {
    let page = server.messages(session, "").await;
    let answer = page["messages"].as_array().expect("messages").iter().rfind(|m| m["role"] == "assistant").cloned();
    let answer = answer.unwrap_or_else(|| panic!("no assistant message in {page}"));
    let text = answer["content"].as_array().expect("content").iter().filter_map(|c| c["text"].as_str()).collect();
    (text, answer["stopReason"].as_str().expect("stopReason").to_owned())
}

fn answer(text: &[&str]) -> Reply {
    let mut chunks: Vec<Value> = text.iter().map(|t| openai_delta(json!({"content": t}))).collect();
    chunks.push(openai_finish("stop"));
    Reply::Stream { pieces: vec![openai_sse(&chunks).into_bytes()], end: End::Complete }
}

#[tokio::test]
async fn a_failure_before_any_output_is_retried_and_the_stream_shows_it() {
    let busy = Reply::Status { status: 503, headers: vec![], body: r#"{"error":{"message":"overloaded"}}"#.into() };
    let mut fake = Fake::start(vec![busy, answer(&["Hel", "lo"])]).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let (session, mut stream) = watched(&server).await;

    let run = server.run_prompt(&session, "say hello").await;
    assert_eq!(run["status"], "completed", "{run}");
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let starts = events(&frames, "auto_retry_start");
    assert_eq!(starts.len(), 1, "one retry: {starts:?}");
    assert_eq!(starts[0]["attempt"], 1);
    assert_eq!(starts[0]["maxAttempts"], 2, "the retries the policy allows");
    assert!(starts[0]["errorMessage"].as_str().is_some_and(|m| !m.is_empty()), "{}", starts[0]);
    assert_eq!(events(&frames, "auto_retry_end"), [&json!({"type": "auto_retry_end", "attempt": 1, "success": true})]);
    assert_eq!(stored_answer(&server, &session).await, ("Hello".to_owned(), "stop".to_owned()));
    fake.request().await;
    fake.request().await;
    assert_eq!(fake.requests_so_far(), 0, "two calls, no more");
}

#[tokio::test]
async fn a_stream_cut_mid_answer_keeps_the_text_that_arrived() {
    let partial = openai_sse(&[openai_delta(json!({"content": "The first half"}))]);
    let partial = partial.trim_end_matches("data: [DONE]\n\n").as_bytes().to_vec();
    // Output had begun, so the cut is not retried: the next reply is never asked for.
    let mut fake = Fake::start(vec![Reply::Stream { pieces: vec![partial], end: End::Cut }, answer(&["no"])]).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let (session, mut stream) = watched(&server).await;

    let run = server.run_prompt(&session, "write a lot").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "stream_cut", "{run}");
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let ended = events(&frames, "message_end");
    let streamed = ended.last().expect("message_end")["message"]["content"][0]["text"].clone();
    assert_eq!(streamed, "The first half", "the stream's last word on the message");
    assert_eq!(stored_answer(&server, &session).await, ("The first half".to_owned(), "error".to_owned()));
    fake.request().await;
    assert_eq!(fake.requests_so_far(), 0, "a cut after output is not retried");
}

#[tokio::test]
async fn stop_closes_the_provider_connection_and_keeps_the_text() {
    let started = openai_sse(&[openai_delta(json!({"content": "Thinking out loud"}))]);
    let started = started.trim_end_matches("data: [DONE]\n\n").as_bytes().to_vec();
    let mut fake = Fake::start(vec![Reply::Stream { pieces: vec![started], end: End::Hold }]).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let (session, mut stream) = watched(&server).await;

    let run_id = server.start_run(&session, "go on and on").await;
    stream.frames_until(|f| f.event_type() == Some("message_update")).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    fake.connection_closed(common::WAIT).await;
    assert_eq!(server.wait_run(&run_id).await["status"], "cancelled");
    assert_eq!(stored_answer(&server, &session).await, ("Thinking out loud".to_owned(), "aborted".to_owned()));
}
