//! What checkpointing a long answer costs, and the answer size cap, through the real
//! `spool` binary on SQLite: a scripted `stream: N` answer of about 1 MB is checkpointed
//! while it streams in bytes linear in its size (the store's own count, in `/metrics`),
//! where rewriting the whole draft at every checkpoint wrote about a hundred times the
//! answer; and an answer past `--max-answer-bytes` fails its run with a message that
//! says so, keeps what streamed, and leaves the server and the session serving.
//!
//! The first test is also the benchmark in BENCHMARKS.md: `SPOOL_CHECKPOINT_WORDS=N`
//! streams `stream: N` instead, and `--nocapture` shows the bytes checkpointed and the
//! bytes the server process wrote in all (`wchar` of `/proc/PID/io`: database, WAL, logs).

use crate::common;

use common::{call, serve, wait_for};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Long enough for a debug build on a busy machine to stream a megabyte.
const RUN_WAIT: Duration = Duration::from_secs(180);

/// The full answer to `stream: N`.
fn full_answer(n: usize) -> String {
    (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// A session in a new project; returns its id.
async fn new_session(client: &reqwest::Client, base: &str, dir: &Path) -> String {
    let project_dir = dir.join("project");
    std::fs::create_dir_all(&project_dir).expect("project dir");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    session["id"].as_str().expect("id").to_owned()
}

/// Sends `text` as a prompt and waits for its run to settle; returns the run.
async fn settled_run(client: &reqwest::Client, base: &str, session: &str, text: &str) -> Value {
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({ "text": text }))).await;
    let run = accepted["runId"].as_str().expect("runId");
    wait_for(client, &format!("{base}/api/runs/{run}"), RUN_WAIT, |r| {
        matches!(r["status"].as_str(), Some("completed" | "failed" | "cancelled"))
    })
    .await
}

/// The session's last message.
async fn last_message(client: &reqwest::Client, base: &str, session: &str) -> Value {
    let history = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    history["messages"].as_array().and_then(|m| m.last()).cloned().expect("a message")
}

/// Bytes the process `pid` has written (to files and sockets), from `/proc/PID/io`.
fn bytes_written_by(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("the server's /proc/PID/io");
    io.lines().find_map(|l| l.strip_prefix("wchar: ")).and_then(|n| n.trim().parse().ok()).expect("wchar")
}

/// `spool_draft_checkpoint_bytes_total` from `/metrics`.
async fn checkpoint_bytes(client: &reqwest::Client, base: &str) -> u64 {
    let text = client.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("text");
    let line = text.lines().find(|l| l.starts_with("spool_draft_checkpoint_bytes_total ")).expect("the counter");
    line.rsplit(' ').next().and_then(|n| n.parse().ok()).expect("a count")
}

#[tokio::test]
async fn a_long_answer_is_checkpointed_in_bytes_linear_in_its_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    // A cap above the largest scripted answer, for the benchmark's 7.9 MB.
    let data = data.to_str().expect("UTF-8");
    let (server, base) = serve(&["--addr", "127.0.0.1:0", "--data-dir", data, "--max-answer-bytes", "16777216"]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let session = new_session(&client, &base, dir.path()).await;

    let words = match std::env::var("SPOOL_CHECKPOINT_WORDS") {
        Ok(n) => n.trim().parse().expect("SPOOL_CHECKPOINT_WORDS is a number of words"),
        Err(_) => 150_000,
    };
    let before = bytes_written_by(server.id());
    let run = settled_run(&client, &base, &session, &format!("stream: {words}")).await;
    let process_wrote = bytes_written_by(server.id()) - before;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = full_answer(words);
    assert_eq!(last_message(&client, &base, &session).await["content"][0]["text"], answer.as_str());

    let written = checkpoint_bytes(&client, &base).await;
    let size = answer.len() as u64;
    eprintln!("answer {size} bytes: checkpoints wrote {written} bytes; the server process wrote {process_wrote} bytes");
    assert!(written > 0, "the answer was checkpointed while it streamed");
    // Each byte once, plus the deltas' JSON around it; rewriting the draft whole at every
    // checkpoint wrote about a hundred times the answer.
    assert!(written < 3 * size, "{written} bytes written to checkpoint an answer of {size} bytes");
}

#[tokio::test]
async fn an_answer_over_the_cap_fails_its_run_and_keeps_what_streamed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let limit: usize = 20_000;
    let (_server, base) = serve(&[
        "--addr",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("UTF-8"),
        "--max-answer-bytes",
        &limit.to_string(),
    ]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let session = new_session(&client, &base, dir.path()).await;

    // About 59 KB of answer against a 20 KB cap.
    let run = settled_run(&client, &base, &session, "stream: 10000").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "answer_too_large", "{run}");
    let message = run["error"]["message"].as_str().expect("a message");
    assert!(message.contains(&format!("at most {limit} bytes")), "says what the limit is: {message}");

    let kept = last_message(&client, &base, &session).await;
    assert_eq!(kept["role"], "assistant", "{kept}");
    assert_eq!(kept["stopReason"], "error", "{kept}");
    assert!(kept["errorMessage"].as_str().is_some_and(|e| e.contains("max_answer_bytes")), "{kept}");
    let text = kept["content"][0]["text"].as_str().expect("the answer so far");
    assert!(full_answer(10_000).starts_with(text), "the kept text is the answer's beginning");
    assert!(text.len() > limit / 2 && text.len() <= limit + 16, "cut at the limit: {} bytes", text.len());

    // The server and the session go on.
    let health = client.get(format!("{base}/api/health")).send().await.expect("health");
    assert_eq!(health.status(), 200);
    let again = settled_run(&client, &base, &session, "echo: still here").await;
    assert_eq!(again["status"], "completed", "{again}");
}
