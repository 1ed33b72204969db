//! What streamed stays: a run streaming a long answer is stopped — SIGKILL, or a
//! graceful SIGTERM — and after a restart on the same data directory the text a client
//! had watched is in every view (history, snapshot, OpenCode) together with the run's
//! failure. The real `spool` binary, a real kill; no fixed sleeps: the test reads the
//! session stream until it has seen the words, and (for the kill) waits until the store
//! holds them, which is what proves the answer is checkpointed while it streams.

use crate::common;

use common::{SseStream, WAIT, call, serve};
use serde_json::{Value, json};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Row};
use std::path::Path;
use std::time::Duration;

/// Words the client must have watched before the server is stopped.
const SEEN_WORDS: usize = 50;

fn start(data: &Path) -> (common::Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    serve(&["--addr", "127.0.0.1:0", "--scripted-delay-ms", "5", "--data-dir", data])
}

/// The full answer to `stream: N`.
fn full_answer(n: usize) -> String {
    (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// Reads the session's native stream until its text deltas add up to `words` words;
/// returns that text.
async fn watch_words(client: &reqwest::Client, base: &str, session: &str, words: usize) -> String {
    let res = client.get(format!("{base}/api/sessions/{session}/events")).send().await.expect("events");
    assert_eq!(res.status(), 200);
    let mut stream = SseStream::new(res).with_wait(WAIT);
    let mut text = String::new();
    while text.split_whitespace().count() < words {
        let frame = stream.next_json().await.expect("the stream stays open");
        // Opened after the prompt: on a busy machine the answer may have begun, and the
        // snapshot's draft holds its start.
        if frame["type"] == "session.snapshot"
            && let Some(draft) = frame["state"]["drafts"].as_object().and_then(|d| d.values().next())
        {
            text.push_str(draft["content"][0]["text"].as_str().unwrap_or_default());
        }
        let delta = &frame["event"]["assistantMessageEvent"];
        if delta["type"] == "text_delta" {
            text.push_str(delta["delta"].as_str().unwrap_or_default());
        }
    }
    text
}

/// Polls the database file (read-only, beside the running server) until the session's
/// stored draft starts with `seen`.
async fn wait_for_stored_draft(data: &Path, seen: &str) {
    let options = SqliteConnectOptions::new().filename(data.join("spool.db")).read_only(true);
    let mut db = options.connect().await.expect("open the database read-only");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // The draft is its chunks of deltas, appended one per checkpoint.
        let rows = sqlx::query("SELECT deltas FROM message_draft_chunks ORDER BY seq")
            .fetch_all(&mut db)
            .await
            .expect("query");
        let mut text = String::new();
        for row in rows {
            let deltas: Value = serde_json::from_str(&row.get::<String, _>("deltas")).expect("a JSON chunk");
            for delta in deltas.as_array().expect("an array of deltas") {
                if delta["type"] == "text_delta" {
                    text.push_str(delta["delta"].as_str().unwrap_or_default());
                }
            }
        }
        if text.starts_with(seen) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the streamed text was never checkpointed: {text:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Started {
    session: String,
    run: String,
}

async fn stream_prompt(client: &reqwest::Client, base: &str, project_dir: &Path) -> Started {
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("id").to_owned();
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 3000"}))).await;
    Started { session, run: accepted["runId"].as_str().expect("runId").to_owned() }
}

/// After the restart: the run failed with `code`, and history, snapshot and the
/// OpenCode messages all show the partial answer, at least `seen`, with that failure.
async fn assert_partial_answer_kept(client: &reqwest::Client, base: &str, started: &Started, seen: &str, code: &str) {
    let Started { session, run } = started;
    let run = call(client.get(format!("{base}/api/runs/{run}"))).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], code, "{run}");

    let full = full_answer(3000);
    let check = |m: &Value, view: &str| {
        assert_eq!(m["role"], "assistant", "{view}: {m}");
        let text = m["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.starts_with(seen), "{view}: the watched words are kept: {text:?} vs {seen:?}");
        assert!(full.starts_with(text), "{view}: the kept text is the answer's beginning: {text:?}");
        assert!(text.len() < full.len(), "{view}: the answer was cut");
        assert_eq!(m["stopReason"], "error", "{view}: {m}");
        assert!(m["errorMessage"].as_str().is_some_and(|e| e.contains(code)), "{view} says why it stopped: {m}");
    };
    let history = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    assert_eq!(history["total"], 2, "the prompt and the partial answer: {history}");
    check(&history["messages"][1], "history");

    let detail = call(client.get(format!("{base}/api/sessions/{session}"))).await;
    assert_eq!(detail["status"], "idle");
    let shown = detail["state"]["messages"].as_array().expect("messages").clone();
    check(shown.last().expect("a message"), "snapshot");

    let opencode = call(client.get(format!("{base}/session/{session}/message"))).await;
    let last = opencode.as_array().and_then(|m| m.last()).expect("OpenCode messages").clone();
    assert_eq!(last["info"]["role"], "assistant", "{last}");
    assert!(last["info"]["error"].is_object(), "OpenCode shows the failure: {last}");
    let text: String = last["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(text.starts_with(seen), "OpenCode shows the watched words: {text:?}");

    // The session takes a new prompt.
    call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: again"}))).await;
}

#[tokio::test]
async fn streamed_text_survives_a_sigkill_with_its_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, project_dir) = (dir.path().join("data"), dir.path().join("project"));
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&data);
    let started = stream_prompt(&client, &base, &project_dir).await;
    let seen = watch_words(&client, &base, &started.session, SEEN_WORDS).await;
    let seen: String = seen.split_whitespace().take(SEEN_WORDS).collect::<Vec<_>>().join(" ");
    // Stored while it streams: the checkpoint holds the watched words before any stop.
    wait_for_stored_draft(&data, &seen).await;
    drop(spool); // SIGKILL

    let (_spool, base) = start(&data);
    assert_partial_answer_kept(&client, &base, &started, &seen, "server_restarted").await;
}

#[tokio::test]
async fn streamed_text_survives_a_graceful_stop_with_its_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, project_dir) = (dir.path().join("data"), dir.path().join("project"));
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&data);
    let started = stream_prompt(&client, &base, &project_dir).await;
    let seen = watch_words(&client, &base, &started.session, SEEN_WORDS).await;
    let seen: String = seen.split_whitespace().take(SEEN_WORDS).collect::<Vec<_>>().join(" ");
    // Everything streamed up to the stop is kept: no checkpoint needs to have happened.
    spool.stop();

    let (_spool, base) = start(&data);
    assert_partial_answer_kept(&client, &base, &started, &seen, "server_stopped").await;
}
