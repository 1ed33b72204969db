//! `spool serve --database-url` keeps everything in PostgreSQL: a project, a session
//! and a conversation made over HTTP are there again after a restart, the rows are in
//! the database, and the data directory holds no SQLite file. A URL that cannot work
//! stops the start with a message that says why.
//!
//! The server comes from `SPOOL_TEST_DATABASE_URL`; the test makes a database of its
//! own and drops it afterwards. Without the variable it prints a notice and passes,
//! except under CI, where it fails.

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const WAIT: Duration = Duration::from_secs(30);
const URL_VAR: &str = "SPOOL_TEST_DATABASE_URL";

/// A database of this test's own on the test server, dropped on drop.
struct TestDb {
    server: String,
    name: String,
    url: String,
}

impl TestDb {
    async fn create() -> Option<TestDb> {
        let server = match std::env::var(URL_VAR) {
            Ok(url) if !url.trim().is_empty() => url,
            _ if std::env::var_os("CI").is_some() => panic!(
                "{URL_VAR} is not set: set it to a PostgreSQL server whose role may create databases, \
                 e.g. postgres://postgres@127.0.0.1:5432/postgres"
            ),
            _ => {
                eprintln!("skipped: set {URL_VAR} (e.g. postgres://postgres@127.0.0.1:5432/postgres) to run this test");
                return None;
            }
        };
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos();
        let name = format!("spool_cli_test_{}_{nanos}", std::process::id());
        let mut admin = PgConnection::connect(&server).await.expect("connect to the test server");
        // A database name cannot be a bound parameter; this one is ours, letters and digits.
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        admin.close().await.expect("close");
        let (scheme, rest) = server.split_once("://").expect("the test server is a URL");
        let (location, query) = rest.split_once('?').map_or((rest, String::new()), |(l, q)| (l, format!("?{q}")));
        let authority = location.split('/').next().unwrap_or(location);
        let url = format!("{scheme}://{authority}/{name}{query}");
        Some(TestDb { server, name, url })
    }
}

impl Drop for TestDb {
    /// On a runtime of its own: Drop cannot await, and after a panic the test's
    /// runtime may be gone. `WITH (FORCE)` ends connections left open.
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&server).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

struct Spool(Child);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Spool {
    /// SIGTERM, then waits for a clean exit.
    fn stop(mut self) {
        let killed = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().expect("run kill");
        assert!(killed.success());
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                assert!(status.success(), "graceful exit, got {status}");
                return;
            }
            assert!(std::time::Instant::now() < deadline, "spool did not exit in {WAIT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn spool() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spool"));
    for var in ["SPOOL_ADDR", "SPOOL_DATA_DIR", "SPOOL_DATABASE_URL"] {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn").env("RUST_BACKTRACE", "0");
    cmd
}

fn start(url: &str, data: &std::path::Path) -> (Spool, String) {
    start_with(url, data, &[])
}

fn start_with(url: &str, data: &std::path::Path, extra: &[&str]) -> (Spool, String) {
    let mut child = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--database-url", url, "--data-dir"])
        .arg(data)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start spool");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    let base =
        line.trim().strip_prefix("spool listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_owned();
    (Spool(child), base)
}

async fn call(req: reqwest::RequestBuilder) -> Value {
    let res = req.send().await.expect("request");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    body
}

#[tokio::test]
async fn projects_sessions_and_messages_survive_a_restart_on_postgres() {
    let Some(db) = TestDb::create().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&db.url, &data);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session_id = session["id"].as_str().expect("session id").to_owned();
    call(
        client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "echo: kept in postgres", "requestId": "r1"})),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let history = loop {
        let history = call(client.get(format!("{base}/api/sessions/{session_id}/messages"))).await;
        if history["total"] == 2 {
            break history;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run never finished: {history}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    spool.stop();

    // The rows are in PostgreSQL, and SQLite was never touched.
    let mut conn = PgConnection::connect(&db.url).await.expect("connect to the test database");
    let sessions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE id = $1")
        .bind(&session_id)
        .fetch_one(&mut conn)
        .await
        .expect("count sessions");
    assert_eq!(sessions, 1);
    conn.close().await.expect("close");
    assert!(!data.join("spool.db").exists(), "no SQLite database next to a PostgreSQL one");

    let (spool, base) = start(&db.url, &data);
    let projects = call(client.get(format!("{base}/api/projects"))).await;
    assert_eq!(projects, json!([project]), "the project is found again");
    let detail = call(client.get(format!("{base}/api/sessions/{session_id}"))).await;
    assert_eq!(detail["id"], session["id"]);
    assert_eq!(detail["projectId"], project["id"]);
    let again = call(client.get(format!("{base}/api/sessions/{session_id}/messages"))).await;
    assert_eq!(again, history, "the conversation is found again");
    spool.stop();
}

fn refused(url: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let Output { status, stderr, .. } = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--database-url", url, "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run spool");
    assert!(!status.success(), "spool must not start with --database-url {url}");
    String::from_utf8_lossy(&stderr).into_owned()
}

#[test]
fn an_unsupported_scheme_or_an_unreachable_server_stops_the_start() {
    let message = refused("mysql://spool:secret@127.0.0.1/spool");
    assert!(message.contains(r#"unsupported scheme "mysql""#), "{message}");
    assert!(message.contains("postgres://"), "the message says what is accepted: {message}");
    assert!(!message.contains("secret"), "the password is never shown: {message}");

    // Nothing listens on port 1.
    let message = refused("postgres://spool:secret@127.0.0.1:1/spool");
    assert!(message.contains("cannot connect to PostgreSQL at 127.0.0.1:1/spool"), "{message}");
    assert!(!message.contains("secret"), "the password is never shown: {message}");
}

/// Polls `GET url` until `done` holds for the JSON answer.
async fn wait_for(client: &reqwest::Client, url: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let body = call(client.get(url)).await;
        if done(&body) {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "not within {within:?}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_run_on_a_killed_node_fails_as_node_lost_on_the_other_within_the_lease_time() {
    let Some(db) = TestDb::create().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let slow = ["--lease-secs", "1", "--scripted-delay-ms", "20"];
    let (node_a, a) = start_with(&db.url, &dir.path().join("a"), &[&slow[..], &["--node-id", "node-a"]].concat());
    let (_node_b, b) = start_with(&db.url, &dir.path().join("b"), &[&slow[..], &["--node-id", "node-b"]].concat());

    let project = call(client.post(format!("{a}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{a}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let accepted =
        call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 100000"}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();

    // Node B knows the session (one database) and that node A is running it.
    let busy = client
        .post(format!("{b}/api/sessions/{session}/prompt"))
        .json(&json!({"text": "echo: me too"}))
        .send()
        .await
        .expect("prompt on B");
    assert_eq!(busy.status(), 409);
    let body: Value = busy.json().await.expect("json");
    assert_eq!(body["error"]["code"], "session_busy", "{body}");

    drop(node_a); // SIGKILL: no shutdown, no lease release.
    let killed_at = tokio::time::Instant::now();
    let failed = wait_for(&client, &format!("{b}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!((failed["status"].as_str(), failed["error"]["code"].as_str()), (Some("failed"), Some("node_lost")));
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "a 1 s lease is reaped in seconds: {:?}",
        killed_at.elapsed()
    );

    // The session is free again, on node B, and the killed run is never re-run.
    let next =
        call(client.post(format!("{b}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: on B"}))).await;
    let next = next["runId"].as_str().expect("run id").to_owned();
    let done = wait_for(&client, &format!("{b}/api/runs/{next}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    let again = call(client.get(format!("{b}/api/runs/{run}"))).await;
    assert_eq!(again, failed, "the lost run stays failed");
}
