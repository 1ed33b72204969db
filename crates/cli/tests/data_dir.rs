//! The data directory as the real binary keeps it: private (`0700`, `spool.db` and
//! its WAL files `0600`, tightened on start when they were not), and held by one
//! `spool serve` at a time: a second server on it exits at once naming the first's
//! pid and leaves the first's running run alone, while `spool token create` keeps
//! working beside a running server.

use crate::common;

use common::{Spool, WAIT, serve, spool};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn start(data: &Path, extra: &[&str]) -> (Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["--addr", "127.0.0.1:0", "--data-dir", data];
    args.extend_from_slice(extra);
    serve(&args)
}

/// Ends a server (SIGKILL: whether it stops gracefully is another test's business).
fn stop(spool: Spool) {
    drop(spool);
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

async fn call(req: reqwest::RequestBuilder) -> Value {
    let res = req.send().await.expect("request");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    body
}

fn assert_private(data: &Path) {
    assert_eq!(mode(data), 0o700, "the data directory");
    for name in ["spool.db", "spool.db-wal", "spool.db-shm", "serve.lock"] {
        let file = data.join(name);
        if name == "spool.db" || file.exists() {
            assert_eq!(mode(&file), 0o600, "{name}");
        }
    }
}

#[test]
fn the_data_directory_and_database_are_private_and_made_so_on_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let (server, _) = start(&data, &[]);
    assert_private(&data);
    stop(server);

    // Made by an older version, or by hand, readable by others: tightened on start.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(data.join("spool.db"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (server, _) = start(&data, &[]);
    assert_private(&data);
    stop(server);

    // `spool token create` on a new data directory makes it private too.
    let fresh = dir.path().join("fresh");
    let created = spool().args(["token", "create", "--user", "a", "--data-dir"]).arg(&fresh).output().expect("run");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    assert_eq!((mode(&fresh), mode(&fresh.join("spool.db"))), (0o700, 0o600));
}

#[tokio::test]
async fn a_second_server_on_the_data_directory_exits_naming_the_first_and_leaves_its_run_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    // 50 ms per delta for 100,000 deltas: the run goes on until it is aborted below.
    let (first, base) = start(&data, &["--scripted-delay-ms", "50"]);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("id").to_owned();
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 100000"})))
            .await;
    let run = format!("{base}/api/runs/{}", accepted["runId"].as_str().expect("runId"));
    assert_eq!(call(client.get(&run)).await["status"], "running");

    let mut second = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second spool");
    let deadline = Instant::now() + WAIT;
    while second.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = second.kill();
            panic!("the second server kept running: {:?}", second.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = second.wait_with_output().expect("second spool's output");
    assert!(!output.status.success(), "the second server must not run");
    assert!(output.stdout.is_empty(), "it never listened: {}", String::from_utf8_lossy(&output.stdout));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let holder = format!("pid {}, listening on {base}", first.id());
    assert!(stderr.contains(&holder) && stderr.contains("--data-dir"), "{stderr}");

    // The first server's run was not marked failed: it is still running, and ends
    // only when aborted.
    let status = call(client.get(&run)).await;
    assert_eq!((status["status"].as_str(), &status["error"]), (Some("running"), &Value::Null), "{status}");
    call(client.post(format!("{base}/api/sessions/{session}/abort")).json(&json!({}))).await;
    assert_eq!(call(client.get(&run)).await["status"], "cancelled");
    stop(first);
}

#[tokio::test]
async fn token_commands_work_while_a_server_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let (server, base) = start(&data, &[]);
    assert!(client.get(format!("{base}/api/projects")).send().await.expect("request").status().is_success());

    let created = spool().args(["token", "create", "--user", "alice", "--data-dir"]).arg(&data).output().expect("run");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let secret = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let listed = spool().args(["token", "list", "--data-dir"]).arg(&data).output().expect("run");
    assert!(listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains("alice"));

    // The server sees the token within its re-check interval: auth is on.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = client.get(format!("{base}/api/projects")).send().await.expect("request").status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "auth never turned on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let projects = call(client.get(format!("{base}/api/projects")).bearer_auth(&secret)).await;
    assert_eq!(projects, json!([]));
    stop(server);
}
