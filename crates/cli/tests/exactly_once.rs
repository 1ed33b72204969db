//! Exactly once means at least once too: what a person was told survives a SIGKILL.
//!
//! Each test runs the real `spool serve` on a SQLite data directory, kills it with
//! SIGKILL and starts it again on the same directory. Where the instant of the kill
//! cannot be hit reliably from outside (between a claim and its response, between the
//! 200 of a decision and the start of its tool), the test writes the rows exactly as a
//! process killed at that instant leaves them, while the server is down; where it can
//! (a tool that is still running), the kill is real. The server's log goes to a file so
//! a test can read the warnings it gave.

use crate::common;

use common::{Spool, WAIT, call, serve_logged};
use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `spool serve` on `data`, its log appended to `log`.
fn start(data: &Path, log: &Path) -> (Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    serve_logged(&["--addr", "127.0.0.1:0", "--scripted-delay-ms", "5", "--data-dir", data], log)
}

struct Setup {
    _dir: tempfile::TempDir,
    data: PathBuf,
    project: PathBuf,
    log: PathBuf,
    client: reqwest::Client,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, project, log) = (dir.path().join("data"), dir.path().join("project"), dir.path().join("spool.log"));
        std::fs::create_dir(&project).expect("project dir");
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        Setup { _dir: dir, data, project, log, client }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A session whose run is parked at an approval for `prompt`: (session, run, approval).
    async fn parked(&self, base: &str, prompt: &str) -> (String, String, String) {
        let c = &self.client;
        let project = call(c.post(format!("{base}/api/projects")).json(&json!({"path": self.project}))).await;
        let session = call(c.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
        let session_id = session["id"].as_str().expect("id").to_owned();
        let accepted = call(
            c.post(format!("{base}/api/sessions/{session_id}/prompt"))
                .json(&json!({"text": prompt, "requestId": "r1"})),
        )
        .await;
        let run_id = accepted["runId"].as_str().expect("runId").to_owned();
        let detail = self
            .wait(&format!("{base}/api/sessions/{session_id}"), |d| {
                d["state"]["pendingApprovals"].as_array().is_some_and(|a| !a.is_empty())
            })
            .await;
        let approval_id = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("approval id").to_owned();
        (session_id, run_id, approval_id)
    }

    async fn wait(&self, url: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let body = call(self.client.get(url)).await;
            if done(&body) {
                return body;
            }
            assert!(tokio::time::Instant::now() < deadline, "not within {WAIT:?}: {body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The data directory's database, opened while the server is down.
    async fn database(&self) -> SqliteConnection {
        let url = format!("sqlite://{}", self.data.join("spool.db").display());
        SqliteConnection::connect(&url).await.expect("open spool.db")
    }
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("a sane clock")
}

#[tokio::test]
async fn a_claim_left_by_a_killed_process_is_released_and_the_retry_decides() {
    let t = Setup::new();
    let (spool, base) = start(&t.data, &t.log);
    let (session_id, run_id, approval_id) =
        t.parked(&base, r#"tool: bash {"command": "echo ran >> marker.txt"}"#).await;
    spool.sigkill();

    // Killed inside the claim: the key's row is there, with no response.
    let mut db = t.database().await;
    sqlx::query("INSERT INTO idempotency (scope, key, answer, created_at) VALUES (?, ?, NULL, ?)")
        .bind(format!("approval:{approval_id}"))
        .bind("stuck-key")
        .bind(now_ms())
        .execute(&mut db)
        .await
        .expect("insert the claim");
    db.close().await.expect("close");

    let (_spool, base) = start(&t.data, &t.log);
    let url = format!("{base}/api/sessions/{session_id}/approvals/{approval_id}");
    let decision = json!({"decision": "once", "idempotencyKey": "stuck-key"});
    // Today's failure mode answers 409 after a 30 s wait: give the request less.
    let res = t
        .client
        .post(&url)
        .json(&decision)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("the retry is answered at once, not held for the stuck claim");
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap_or_default());
    let run = t.wait(&format!("{base}/api/runs/{run_id}"), |r| r["status"] != "running").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(std::fs::read_to_string(t.project.join("marker.txt")).expect("marker"), "ran\n");
    let log = t.log();
    assert!(log.contains("released an idempotency claim") && log.contains("stuck-key"), "no warning logged: {log}");
}

#[tokio::test]
async fn an_acknowledged_decision_whose_tool_never_started_runs_once_after_a_kill() {
    let t = Setup::new();
    let (spool, base) = start(&t.data, &t.log);
    let (session_id, run_id, approval_id) =
        t.parked(&base, r#"tool: bash {"command": "echo ran >> marker.txt"}"#).await;
    spool.sigkill();

    // Killed right after the 200: the decision is stored and the run is `running`,
    // its tool not started (what the decision writes before it answers).
    let mut db = t.database().await;
    let at = now_ms();
    sqlx::query("UPDATE approvals SET status = 'resolved', decision = '\"once\"', resolved_at = ? WHERE id = ?")
        .bind(at)
        .bind(&approval_id)
        .execute(&mut db)
        .await
        .expect("resolve");
    sqlx::query("UPDATE runs SET status = 'running', updated_at = ? WHERE id = ?")
        .bind(at)
        .bind(&run_id)
        .execute(&mut db)
        .await
        .expect("running");
    db.close().await.expect("close");

    let (_spool, base) = start(&t.data, &t.log);
    let run = t.wait(&format!("{base}/api/runs/{run_id}"), |r| r["status"] != "running").await;
    assert_eq!(run["status"], "completed", "the decided call ran after the restart: {run}");
    assert_eq!(std::fs::read_to_string(t.project.join("marker.txt")).expect("marker"), "ran\n", "exactly once");
    let detail = t.wait(&format!("{base}/api/sessions/{session_id}"), |d| d["status"] == "idle").await;
    assert_eq!(detail["state"]["activeRun"], Value::Null, "{detail}");

    // A restart after that changes nothing: the call is not run a second time.
    drop(_spool);
    let (_spool, base) = start(&t.data, &t.log);
    let run = call(t.client.get(format!("{base}/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(std::fs::read_to_string(t.project.join("marker.txt")).expect("marker"), "ran\n");
}

#[tokio::test]
async fn a_tool_killed_while_running_is_never_rerun_and_its_run_says_tool_outcome_unknown() {
    let t = Setup::new();
    let (spool, base) = start(&t.data, &t.log);
    let (session_id, run_id, approval_id) =
        t.parked(&base, r#"tool: bash {"command": "echo ran >> m.txt; sleep 30"}"#).await;
    let url = format!("{base}/api/sessions/{session_id}/approvals/{approval_id}");
    let res =
        t.client.post(&url).json(&json!({"decision": "once", "idempotencyKey": "k"})).send().await.expect("decide");
    assert_eq!(res.status(), 200);
    let marker = t.project.join("m.txt");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !marker.exists() {
        assert!(tokio::time::Instant::now() < deadline, "the approved command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    spool.sigkill();

    let (_spool, base) = start(&t.data, &t.log);
    let run = t.wait(&format!("{base}/api/runs/{run_id}"), |r| r["status"] != "running").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "tool_outcome_unknown", "{run}");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n", "never run again");
    // Every view can say why: the prompt's timing row carries the ending.
    let detail = call(t.client.get(format!("{base}/api/sessions/{session_id}"))).await;
    let timing = &detail["state"]["promptTimings"]["0"];
    assert_eq!(timing["status"], "failed", "{detail}");
    assert_eq!(timing["error"]["code"], "tool_outcome_unknown", "{detail}");
    // The session takes a new prompt.
    let fresh = call(
        t.client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "echo: back", "requestId": "r2"})),
    )
    .await;
    assert_ne!(fresh["runId"], run_id.as_str());
}

#[tokio::test]
async fn a_decision_recorded_just_before_a_kill_runs_once_after_the_restart() {
    let t = Setup::new();
    let (spool, base) = start(&t.data, &t.log);
    let (session_id, run_id, approval_id) =
        t.parked(&base, r#"tool: bash {"command": "echo ran >> marker.txt"}"#).await;
    spool.sigkill();

    // Killed between the two writes of a decision: the approval is resolved, the run is
    // still `interrupted` (it failed as `server_restarted` before, the decision lost).
    let mut db = t.database().await;
    sqlx::query("UPDATE approvals SET status = 'resolved', decision = '\"once\"', resolved_at = ? WHERE id = ?")
        .bind(now_ms())
        .bind(&approval_id)
        .execute(&mut db)
        .await
        .expect("resolve");
    db.close().await.expect("close");

    let (_spool, base) = start(&t.data, &t.log);
    let run = t
        .wait(&format!("{base}/api/runs/{run_id}"), |r| r["status"] != "running" && r["status"] != "interrupted")
        .await;
    assert_eq!(run["status"], "completed", "the recorded decision ran after the restart: {run}");
    assert_eq!(std::fs::read_to_string(t.project.join("marker.txt")).expect("marker"), "ran\n", "exactly once");
    let detail = t.wait(&format!("{base}/api/sessions/{session_id}"), |d| d["status"] == "idle").await;
    assert_eq!(detail["state"]["pendingApprovals"], json!([]), "{detail}");
}
