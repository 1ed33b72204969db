//! `spool serve --database-url` keeps everything in PostgreSQL: a project, a session
//! and a conversation made over HTTP are there again after a restart, the rows are in
//! the database, and the data directory holds no SQLite file. A URL that cannot work
//! stops the start with a message that says why. A node killed mid-run: its runs end
//! `node_lost` on another node, except a decided call, which ends as after a restart
//! alone (`tool_outcome_unknown` once started, run from its checkpoint if it never did).
//!
//! The server comes from `SPOOL_TEST_DATABASE_URL`; the test makes a database of its
//! own and drops it afterwards. Built without the variable the tests are ignored,
//! except under CI, where they fail (see `common`).

use crate::common;

use common::{TestDb, WAIT, call, spool, start, start_with, wait_for};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use std::process::Output;
use std::time::Duration;

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn projects_sessions_and_messages_survive_a_restart_on_postgres() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let (spool, base) = start(&db.url, &data);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session_id = session["id"].as_str().expect("session id").to_owned();
    let accepted = call(
        client
            .post(format!("{base}/api/sessions/{session_id}/prompt"))
            .json(&json!({"text": "echo: kept in postgres", "requestId": "r1"})),
    )
    .await;
    let run = accepted["runId"].as_str().expect("run id");
    wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] == "completed").await;
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

/// `spool serve` with `SPOOL_DATABASE_URL=url` (a URL with a password is refused on the
/// command line: see `credentials.rs`); it must not start.
fn refused(url: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let Output { status, stderr, .. } = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("SPOOL_DATABASE_URL", url)
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

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_run_on_a_killed_node_fails_as_node_lost_on_the_other() {
    let db = TestDb::create().await;
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
    // How soon the reaper acts is the lease logic's to test, with a clock it can
    // pause; here, that it acts (within WAIT, a bound against hanging).
    let failed = wait_for(&client, &format!("{b}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!((failed["status"].as_str(), failed["error"]["code"].as_str()), (Some("failed"), Some("node_lost")));

    // The session is free again, on node B, and the killed run is never re-run.
    let next =
        call(client.post(format!("{b}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: on B"}))).await;
    let next = next["runId"].as_str().expect("run id").to_owned();
    let done = wait_for(&client, &format!("{b}/api/runs/{next}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    let again = call(client.get(format!("{b}/api/runs/{run}"))).await;
    assert_eq!(again, failed, "the lost run stays failed");
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_graceful_stop_fails_its_running_run_and_frees_the_session_at_once() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    // A lease far longer than the test: only the stop itself can free the session.
    let args = ["--scripted-delay-ms", "20", "--lease-secs", "600"];
    let (spool, base) = start_with(&db.url, &dir.path().join("data"), &args);
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 100000"})))
            .await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    wait_for(&client, &format!("{base}/api/sessions/{session}"), WAIT, |s| {
        s["state"]["drafts"].as_object().is_some_and(|d| !d.is_empty())
    })
    .await;
    spool.stop();

    let (_spool, base) = start_with(&db.url, &dir.path().join("data"), &args);
    let stopped = call(client.get(format!("{base}/api/runs/{run}"))).await;
    assert_eq!(
        (stopped["status"].as_str(), stopped["error"]["code"].as_str()),
        (Some("failed"), Some("server_stopped"))
    );
    let next =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: again"}))).await;
    let next = next["runId"].as_str().expect("run id").to_owned();
    let done = wait_for(&client, &format!("{base}/api/runs/{next}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
}

/// A session on node A whose run is parked at an approval for `command`: (session, run,
/// approval).
async fn parked_on(client: &reqwest::Client, base: &str, project_dir: &std::path::Path, command: &str) -> [String; 3] {
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let prompt = format!("tool: bash {}", json!({"command": command}));
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let detail = wait_for(client, &format!("{base}/api/sessions/{session}"), WAIT, |d| {
        d["state"]["pendingApprovals"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    let approval = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("approval id").to_owned();
    [session, run, approval]
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn an_approved_call_cut_off_on_a_killed_node_says_tool_outcome_unknown_on_the_other() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let (node_a, a) = start_with(&db.url, &dir.path().join("a"), &["--lease-secs", "1", "--node-id", "node-a"]);
    let (_node_b, b) = start_with(&db.url, &dir.path().join("b"), &["--lease-secs", "1", "--node-id", "node-b"]);

    let [session, run, approval] = parked_on(&client, &a, &project_dir, "echo ran >> m.txt; sleep 30").await;
    let decided = client
        .post(format!("{a}/api/sessions/{session}/approvals/{approval}"))
        .json(&json!({"decision": "once", "idempotencyKey": "k"}))
        .send()
        .await
        .expect("decide");
    assert_eq!(decided.status(), 200);
    let marker = project_dir.join("m.txt");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !marker.exists() {
        assert!(tokio::time::Instant::now() < deadline, "the approved command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(node_a); // SIGKILL while the approved command runs.

    let failed = wait_for(&client, &format!("{b}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("tool_outcome_unknown")),
        "the person is told the call may or may not have had its effect: {failed}"
    );
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n", "never run again");
    let next =
        call(client.post(format!("{b}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: on B"}))).await;
    let next = next["runId"].as_str().expect("run id").to_owned();
    let done = wait_for(&client, &format!("{b}/api/runs/{next}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn an_acknowledged_decision_whose_tool_never_started_on_a_killed_node_runs_once_on_the_other() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let (node_a, a) = start_with(&db.url, &dir.path().join("a"), &["--lease-secs", "1", "--node-id", "node-a"]);
    let [session, run, approval] = parked_on(&client, &a, &project_dir, "echo ran >> marker.txt").await;
    drop(node_a);

    // Node A killed right after its 200, its tool not started. The instant cannot be
    // hit from outside, so the rows are written.
    decided_on_dead_node(&db.url, [&session, &run, &approval], 1000).await;

    let (node_b, b) = start_with(&db.url, &dir.path().join("b"), &["--lease-secs", "1", "--node-id", "node-b"]);
    let done = wait_for(&client, &format!("{b}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "the decided call ran on the node that took over: {done}");
    let marker = project_dir.join("marker.txt");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n", "exactly once");
    wait_for(&client, &format!("{b}/api/sessions/{session}"), WAIT, |d| d["status"] == "idle").await;

    // Another node later changes nothing: the call is not run a second time.
    drop(node_b);
    let (_node_c, c) = start_with(&db.url, &dir.path().join("c"), &["--lease-secs", "1", "--node-id", "node-c"]);
    let next =
        call(client.post(format!("{c}/api/sessions/{session}/prompt")).json(&json!({"text": "echo: on C"}))).await;
    let next = next["runId"].as_str().expect("run id").to_owned();
    let again = wait_for(&client, &format!("{c}/api/runs/{next}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(call(client.get(format!("{c}/api/runs/{run}"))).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n");
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("a sane clock")
}

/// Writes what node A leaves when it is killed right after answering 200 to a decision
/// (the decision stored, the run `running`, A holding the session's lease for
/// `lease_ms` more) and before the tool started. Returns when the lease expires.
async fn decided_on_dead_node(url: &str, [session, run, approval]: [&str; 3], lease_ms: i64) -> i64 {
    let mut conn = PgConnection::connect(url).await.expect("connect to the test database");
    let now = now_ms();
    sqlx::query("UPDATE approvals SET status = 'resolved', decision = '\"once\"', resolved_at = $1 WHERE id = $2")
        .bind(now)
        .bind(approval)
        .execute(&mut conn)
        .await
        .expect("resolve");
    sqlx::query("UPDATE runs SET status = 'running', updated_at = $1 WHERE id = $2")
        .bind(now)
        .bind(run)
        .execute(&mut conn)
        .await
        .expect("running");
    sqlx::query("INSERT INTO session_leases (session_id, node_id, expires_at) VALUES ($1, 'node-a', $2)")
        .bind(session)
        .bind(now + lease_ms)
        .execute(&mut conn)
        .await
        .expect("lease");
    conn.close().await.expect("close");
    now + lease_ms
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_dead_nodes_expired_lease_is_taken_over_only_by_the_reaper_that_settles_its_run() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let (node_a, a) = start_with(&db.url, &dir.path().join("a"), &["--lease-secs", "1", "--node-id", "node-a"]);
    let [session, run, approval] = parked_on(&client, &a, &project_dir, "echo ran >> marker.txt").await;
    drop(node_a);
    let expires = decided_on_dead_node(&db.url, [&session, &run, &approval], 1500).await;

    // Node B reaps at start, then not for five minutes: the expired lease is left to
    // requests on B.
    let (_node_b, b) = start_with(&db.url, &dir.path().join("b"), &["--lease-secs", "600", "--node-id", "node-b"]);
    while now_ms() <= expires {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A decision that loses may not take the lease and give it up, and a prompt may not
    // start a run beside the dead node's: either would leave A's run running for ever.
    let decision = client
        .post(format!("{b}/api/sessions/{session}/approvals/{approval}"))
        .json(&json!({"decision": "once", "idempotencyKey": "a-retry"}))
        .send()
        .await
        .expect("decide on B");
    assert_eq!(decision.status(), 409, "the decision was taken on A");
    let mut conn = PgConnection::connect(&db.url).await.expect("connect to the test database");
    let holder: Option<String> = sqlx::query_scalar("SELECT node_id FROM session_leases WHERE session_id = $1")
        .bind(&session)
        .fetch_optional(&mut conn)
        .await
        .expect("lease");
    conn.close().await.expect("close");
    assert_eq!(holder.as_deref(), Some("node-a"), "the dead node's lease waits for a reaper");
    let prompt = client
        .post(format!("{b}/api/sessions/{session}/prompt"))
        .json(&json!({"text": "echo: beside"}))
        .send()
        .await
        .expect("prompt on B");
    assert_eq!(prompt.status(), 409, "{}", prompt.text().await.unwrap_or_default());

    // A node that reaps takes it over and runs the decided call, once.
    let (_node_c, c) = start_with(&db.url, &dir.path().join("c"), &["--lease-secs", "1", "--node-id", "node-c"]);
    let done = wait_for(&client, &format!("{c}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(std::fs::read_to_string(project_dir.join("marker.txt")).expect("marker"), "ran\n");
}

/// Issue 14 on a shared database: a node killed after acknowledging decisions. The call
/// whose tool had not started resumes on the node that reaps the lease (once); the call
/// whose tool had started ends `tool_outcome_unknown`, never re-run — neither is
/// `node_lost`, which says nothing about the side effect.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_killed_nodes_decided_calls_resume_or_say_tool_outcome_unknown_on_the_other_node() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let short = ["--lease-secs", "1"];
    let (node_a, a) = start_with(&db.url, &dir.path().join("a"), &[&short[..], &["--node-id", "node-a"]].concat());

    let project = call(client.post(format!("{a}/api/projects")).json(&json!({"path": project_dir}))).await;
    let parked = |command: &'static str| {
        let (client, a, project) = (client.clone(), a.clone(), project.clone());
        async move {
            let session =
                call(client.post(format!("{a}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
            let session = session["id"].as_str().expect("session id").to_owned();
            let prompt = format!("tool: bash {}", json!({"command": command}));
            let accepted =
                call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
            let run = accepted["runId"].as_str().expect("run id").to_owned();
            wait_for(&client, &format!("{a}/api/runs/{run}"), WAIT, |r| r["status"] == "interrupted").await;
            let detail = call(client.get(format!("{a}/api/sessions/{session}"))).await;
            let approval = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("approval").to_owned();
            (session, run, approval)
        }
    };
    let (_, never_started, waiting) = parked("echo ran >> resumed.txt").await;
    let (cut_session, cut, cut_approval) = parked("echo ran >> cut.txt; sleep 30").await;
    let decided = client
        .post(format!("{a}/api/sessions/{cut_session}/approvals/{cut_approval}"))
        .json(&json!({"decision": "once"}))
        .send()
        .await
        .expect("decide");
    assert_eq!(decided.status(), 200);
    let marker = project_dir.join("cut.txt");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !marker.exists() {
        assert!(tokio::time::Instant::now() < deadline, "the approved command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(node_a); // SIGKILL: no shutdown, no lease release.

    // The other call was acknowledged the instant before the kill: what a decision writes
    // before its 200 (resolved, run running, node A's lease), its tool not started.
    let mut conn = PgConnection::connect(&db.url).await.expect("connect");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
    sqlx::query("UPDATE approvals SET status = 'resolved', decision = '\"once\"', resolved_at = $1 WHERE id = $2")
        .bind(now)
        .bind(&waiting)
        .execute(&mut conn)
        .await
        .expect("resolve");
    sqlx::query("UPDATE runs SET status = 'running', updated_at = $1 WHERE id = $2")
        .bind(now)
        .bind(&never_started)
        .execute(&mut conn)
        .await
        .expect("running");
    sqlx::query(
        "INSERT INTO session_leases (session_id, node_id, expires_at)
         SELECT session_id, 'node-a', $1 FROM runs WHERE id = $2
         ON CONFLICT (session_id) DO UPDATE SET node_id = excluded.node_id, expires_at = excluded.expires_at",
    )
    .bind(now + 1000)
    .bind(&never_started)
    .execute(&mut conn)
    .await
    .expect("lease");
    conn.close().await.expect("close");

    let (_node_b, b) = start_with(&db.url, &dir.path().join("b"), &[&short[..], &["--node-id", "node-b"]].concat());
    let settled = |run: String| {
        let (client, url) = (client.clone(), format!("{b}/api/runs/{run}"));
        async move { wait_for(&client, &url, WAIT, |r| r["status"] != "running").await }
    };
    let resumed = settled(never_started).await;
    assert_eq!(resumed["status"], "completed", "the acknowledged call ran on node B: {resumed}");
    assert_eq!(std::fs::read_to_string(project_dir.join("resumed.txt")).expect("ran"), "ran\n", "once");
    let unknown = settled(cut).await;
    assert_eq!(
        (unknown["status"].as_str(), unknown["error"]["code"].as_str()),
        (Some("failed"), Some("tool_outcome_unknown"))
    );
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran\n", "never run again");
    let detail = call(client.get(format!("{b}/api/sessions/{cut_session}"))).await;
    assert_eq!(detail["state"]["promptTimings"]["0"]["error"]["code"], "tool_outcome_unknown", "{detail}");
}
