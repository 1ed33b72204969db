//! A crash mid-run: `spool serve` is killed with SIGKILL while a run streams. After a
//! restart on the same data directory the run reads `failed` with `server_restarted`
//! (it is never re-executed), committed messages are all there, and the session stream
//! has a new streamId.

use crate::common;

use common::{Spool, WAIT, call, serve};
use serde_json::{Value, json};
use std::time::Duration;

fn start(data: &std::path::Path) -> (Spool, String) {
    start_with(data, &[])
}

fn start_with(data: &std::path::Path, extra: &[&str]) -> (Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["--addr", "127.0.0.1:0", "--scripted-delay-ms", "20", "--data-dir", data];
    args.extend_from_slice(extra);
    serve(&args)
}

#[tokio::test]
async fn a_run_interrupted_by_a_crash_reads_failed_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&data);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session_id = session["id"].as_str().expect("id").to_owned();
    let accepted = call(
        client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "stream: 1000", "requestId": "r1"})),
    )
    .await;
    let run_id = accepted["runId"].as_str().expect("runId").to_owned();

    // Wait until the answer is visibly streaming (a draft with text), then crash.
    let deadline = tokio::time::Instant::now() + WAIT;
    let before = loop {
        let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
        let streaming = detail["state"]["drafts"]
            .as_object()
            .is_some_and(|d| d.values().any(|m| m["content"][0]["text"].as_str().is_some_and(|t| t.len() > 20)));
        if streaming {
            break detail;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run never started streaming: {detail}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    spool.sigkill();

    let (_spool, base) = start(&data);
    let run = call(client.get(format!("{base}/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "server_restarted", "{run}");

    let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
    assert_ne!(detail["streamId"], before["streamId"], "a restart starts a new stream");
    assert_eq!(detail["status"], "idle");
    assert_eq!(detail["state"]["drafts"], json!({}), "a draft does not come back streaming");
    let history = call(client.get(format!("{base}/api/sessions/{session_id}/messages"))).await;
    assert_eq!(history["messages"][0]["content"][0]["text"], "stream: 1000", "the user message survives");
    // The answer so far is kept only if a checkpoint (every 250 ms) came before the kill;
    // when it is, it says why it stopped (tests/drafts.rs pins that case down).
    match history["total"].as_u64() {
        Some(1) => {}
        Some(2) => assert_eq!(history["messages"][1]["stopReason"], "error", "{history}"),
        _ => panic!("the prompt and at most its partial answer: {history}"),
    }

    // The same requestId still names the dead run and starts nothing; a new prompt runs.
    let again = call(
        client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "stream: 1000", "requestId": "r1"})),
    )
    .await;
    assert_eq!(again["runId"], run_id.as_str());
    let fresh = call(
        client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "echo: back", "requestId": "r2"})),
    )
    .await;
    assert_ne!(fresh["runId"], run_id.as_str());
}

/// A prompt the server answered 202 is in the history after a SIGKILL that comes the
/// moment the answer arrives. Before the prompt was stored with its run, the run task
/// wrote it a little later, and a kill in between lost it (7 of 20 tries on this
/// machine, from a shell loop with curl). Several tries, each on a fresh data directory,
/// so a window that small is hit.
#[tokio::test]
async fn a_prompt_answered_202_survives_a_sigkill_right_after_the_answer() {
    const TRIES: usize = 8;
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    for attempt in 0..TRIES {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let project_dir = dir.path().join("project");
        std::fs::create_dir(&project_dir).expect("project dir");
        let (spool, base) = start(&data);
        let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
        let session =
            call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
        let session_id = session["id"].as_str().expect("id").to_owned();
        let accepted = call(
            client.post(format!("{base}/api/sessions/{session_id}/prompt")).json(&json!({"text": "stream: 1000"})),
        )
        .await;
        spool.sigkill();

        let (_spool, base) = start(&data);
        let history = call(client.get(format!("{base}/api/sessions/{session_id}/messages"))).await;
        let prompts: Vec<&str> = history["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"][0]["text"].as_str().expect("text"))
            .collect();
        assert_eq!(prompts, ["stream: 1000"], "try {attempt}: the accepted prompt is kept, once: {history}");
        let run = call(client.get(format!("{base}/api/runs/{}", accepted["runId"].as_str().expect("runId")))).await;
        assert_eq!(run["error"]["code"], "server_restarted", "try {attempt}: {run}");
    }
}

#[tokio::test]
async fn a_pending_approval_survives_sigkill_and_completes_once_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&data);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session_id = session["id"].as_str().expect("id").to_owned();
    let prompt = r#"tool: bash {"command": "echo once >> side-effect.txt"}"#;
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session_id}/prompt")).json(&json!({"text": prompt}))).await;
    let run_id = accepted["runId"].as_str().expect("runId").to_owned();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = call(client.get(format!("{base}/api/runs/{run_id}"))).await;
        if run["status"] == "interrupted" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run never asked: {run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    spool.sigkill();

    let (_spool, base) = start(&data);
    let run = call(client.get(format!("{base}/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "interrupted", "an interrupted run stays interrupted across a restart: {run}");
    let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
    let pending = detail["state"]["pendingApprovals"].as_array().expect("pending").clone();
    assert_eq!(pending.len(), 1, "the restarted server shows the card: {detail}");
    assert_eq!(detail["status"], "busy");
    let approval_id = pending[0]["id"].as_str().expect("approval id");

    let url = format!("{base}/api/sessions/{session_id}/approvals/{approval_id}");
    let decision = json!({"decision": "once", "idempotencyKey": "after-restart"});
    let first = client.post(&url).json(&decision).send().await.expect("decide");
    assert_eq!(first.status(), 200);
    let first = first.text().await.expect("body");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = call(client.get(format!("{base}/api/runs/{run_id}"))).await;
        if run["status"] == "completed" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run did not complete: {run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let repeat = client.post(&url).json(&decision).send().await.expect("repeat");
    assert_eq!(repeat.text().await.expect("body"), first, "a retried decision gets the same answer");
    let written = std::fs::read_to_string(project_dir.join("side-effect.txt")).expect("side effect");
    assert_eq!(written, "once\n", "the tool ran exactly once");
}

/// A prompt queued behind a run that a SIGKILL cuts off is in the store: the restarted
/// server runs it once at start-up, on its own (no client asks), and a retry of its
/// request id finds that run. Leases last an hour here, so neither the reaper's pass
/// nor the dead process's lease running out is what starts it.
#[tokio::test]
async fn a_prompt_queued_behind_a_run_cut_by_sigkill_runs_once_after_restart() {
    let start = |data| start_with(data, &["--lease-secs", "3600"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&data);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session_id = session["id"].as_str().expect("id").to_owned();
    let prompt_url = format!("{base}/api/sessions/{session_id}/prompt");
    let accepted = call(client.post(&prompt_url).json(&json!({"text": "stream: 1000"}))).await;
    let cut = accepted["runId"].as_str().expect("runId").to_owned();
    let queued = json!({"text": "echo: after the crash", "requestId": "later", "queue": true});
    let waiting = call(client.post(&prompt_url).json(&queued)).await;
    assert_eq!((waiting["queued"].clone(), waiting["position"].clone()), (json!(true), json!(1)), "{waiting}");
    let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
    assert_eq!(detail["status"], "busy", "still streaming when killed: {detail}");
    spool.sigkill();

    let (_spool, base) = start(&data);
    let run = call(client.get(format!("{base}/api/runs/{cut}"))).await;
    assert_eq!(run["error"]["code"], "server_restarted", "{run}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let history = loop {
        let history = call(client.get(format!("{base}/api/sessions/{session_id}/messages"))).await;
        let answered = history["messages"].as_array().expect("messages").iter().any(|m| {
            m["role"] == "assistant" && m["content"][0]["text"].as_str().is_some_and(|t| t.contains("after the crash"))
        });
        if answered {
            break history;
        }
        assert!(tokio::time::Instant::now() < deadline, "the queued prompt never ran: {history}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let prompts: Vec<&Value> =
        history["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").collect();
    let texts: Vec<&str> = prompts.iter().map(|m| m["content"][0]["text"].as_str().expect("text")).collect();
    assert_eq!(texts, ["stream: 1000", "echo: after the crash"], "each prompt once, in order");
    assert_eq!(prompts[1]["id"], waiting["messageId"], "the queued message became the prompt");
    let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
    assert!(detail["state"]["queue"].is_null(), "the queue is empty: {detail}");
    // Its request id names the run it became; sent again, it queues nothing new.
    let again = call(client.post(format!("{base}/api/sessions/{session_id}/prompt")).json(&queued)).await;
    let run_url = format!("{base}/api/runs/{}", again["runId"].as_str().expect("a run, not a queue"));
    let deadline = tokio::time::Instant::now() + WAIT;
    let run = loop {
        let run = call(client.get(&run_url)).await;
        if run["status"] != "running" {
            break run;
        }
        assert!(tokio::time::Instant::now() < deadline, "the queued prompt's run never settled: {run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((run["requestId"].clone(), run["status"].clone()), (json!("later"), json!("completed")), "{run}");
}
