//! What an operator running `spool serve` behind a load balancer and a log shipper
//! relies on, through the real binary:
//!
//! * `GET /api/ready` answers 200 while the store, the Redis bus and the lease loop
//!   work, 503 naming the bus once the node's Redis is gone, 200 again once it is back
//!   (on a Redis of the test's own, started and killed here: the machine's shared one
//!   is never stopped), and 503 naming the store once the database is gone.
//! * `--log-format json` writes every log line as one JSON object, the line that
//!   accepts a run names the run and the HTTP request's id (the one the response
//!   carries), and no line holds the secret a prompt contained.

use crate::common;

use common::{Spool, TestDb, WAIT, call, spool, start_with, wait_for};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` of this test's own on a loopback port, killed on drop.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    /// Starts one on `port` (no persistence: nothing is left behind) and returns once
    /// it answers a `PING`.
    fn start(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server (the Redis server binary must be installed)");
        let redis = PrivateRedis { child, port };
        let deadline = std::time::Instant::now() + WAIT;
        while !redis.answers_ping() {
            assert!(std::time::Instant::now() < deadline, "redis-server on port {port} did not answer in {WAIT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(1)));
        let mut answer = [0; 7];
        tcp.write_all(b"PING\r\n").is_ok() && tcp.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: Redis gone at once, as in a crash.
    fn kill(mut self) {
        self.child.kill().expect("kill our redis-server");
        self.child.wait().expect("reap our redis-server");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().expect("address").port()
}

/// Polls `/api/ready` until it answers `status` with a body `done` accepts; the body.
async fn ready_until(client: &reqwest::Client, base: &str, status: StatusCode, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let res = client.get(format!("{base}/api/ready")).send().await.expect("GET /api/ready");
        let got = res.status();
        let body: Value = res.json().await.expect("a JSON body");
        if got == status && done(&body) {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "/api/ready never answered {status} as wanted: {got} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn ready_names_the_bus_while_redis_is_down_and_the_store_once_the_database_is_gone() {
    let db = TestDb::create().await;
    let redis = PrivateRedis::start(free_port());
    let port = redis.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let url = redis.url();
    let (_spool, base): (Spool, String) =
        start_with(&db.url, &dir.path().join("data"), &["--redis-url", &url, "--lease-secs", "3"]);

    let ok = json!({"state": "ok"});
    let ready = ready_until(&client, &base, StatusCode::OK, |_| true).await;
    assert_eq!(ready, json!({"status": "ready", "checks": {"store": ok, "bus": ok, "leases": ok}}));

    redis.kill();
    let down = ready_until(&client, &base, StatusCode::SERVICE_UNAVAILABLE, |_| true).await;
    assert_eq!(down["status"], "not_ready", "{down}");
    assert_eq!(down["checks"]["bus"]["state"], "failing", "{down}");
    assert_eq!((&down["checks"]["store"], &down["checks"]["leases"]), (&ok, &ok), "only the bus fails: {down}");
    let reason = down["reason"].as_str().expect("a reason");
    assert!(reason.starts_with("bus: the Redis bus is disconnected"), "{reason}");
    // Liveness is another question: the process still answers.
    assert_eq!(client.get(format!("{base}/api/health")).send().await.expect("health").status(), StatusCode::OK);

    let _redis = PrivateRedis::start(port);
    let back = ready_until(&client, &base, StatusCode::OK, |_| true).await;
    assert_eq!(back["checks"]["bus"], ok, "{back}");

    // The database goes away under the running node (its connections are ended).
    let name = db.url.rsplit('/').next().expect("a database name").to_owned();
    let server = std::env::var(spool_test_support::services::DATABASE_VAR).expect("the test server");
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&server).await.expect("admin connection");
    // The name is the test's own (letters, digits, underscores): no parameter for it.
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop the database");
    let gone = ready_until(&client, &base, StatusCode::SERVICE_UNAVAILABLE, |_| true).await;
    assert_eq!(gone["checks"]["store"]["state"], "failing", "{gone}");
    let reason = gone["reason"].as_str().expect("a reason");
    assert!(reason.starts_with("store: the store cannot answer a query"), "{reason}");
    // And it stays so: the request guard re-reads from the store whether auth is on once
    // a second, and a failing read once made every request a 500, the probes included.
    // Polled over three of those seconds, readiness says 503 and liveness 200 throughout.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        let ready = client.get(format!("{base}/api/ready")).send().await.expect("GET /api/ready");
        let status = ready.status();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", ready.text().await);
        let health = client.get(format!("{base}/api/health")).send().await.expect("GET /api/health");
        assert_eq!(health.status(), StatusCode::OK, "liveness while the database is gone");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A secret-looking token, as a person might paste into a prompt.
const SECRET: &str = "sk-live-0b9f3c1e7a5d4e2f8c6b0a9d7e5f3c1a";

#[tokio::test]
async fn json_logs_are_one_object_per_line_name_the_run_and_its_request_and_never_the_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let data = dir.path().join("data");
    let mut cmd = spool();
    // Every level of every crate: the HTTP layer, the store's queries, the runs.
    cmd.env("RUST_LOG", "debug").env("SPOOL_LOG_FORMAT", "json");
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--data-dir"]).arg(&data);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start spool");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let stderr = child.stderr.take().expect("piped stderr");
    let spool = Spool::from_child(child);
    // Both pipes are read to their end by threads, so the server never blocks on them.
    let stderr = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>());
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the address line");
    let base = first.trim().strip_prefix("spool listening on ").expect("the address line").to_owned();
    let stdout = std::thread::spawn(move || stdout.lines().map_while(Result::ok).collect::<Vec<_>>());

    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let prompts = [format!("echo: my key is {SECRET}"), format!("tool: read {{\"path\": \"{SECRET}.txt\"}}")];
    let mut runs = Vec::new();
    for text in prompts {
        let res = client
            .post(format!("{base}/api/sessions/{session}/prompt"))
            .json(&json!({"text": text}))
            .send()
            .await
            .expect("prompt");
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let request_id = res.headers()["x-request-id"].to_str().expect("an ASCII request id").to_owned();
        let accepted: Value = res.json().await.expect("json");
        let run = accepted["runId"].as_str().expect("run id").to_owned();
        wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] == "completed").await;
        runs.push((run, request_id));
    }
    spool.stop();
    let (stderr, stdout) = (stderr.join().expect("stderr reader"), stdout.join().expect("stdout reader"));

    assert!(stdout.is_empty(), "stdout holds only the address line: {stdout:?}");
    assert!(stderr.len() > 10, "debug logs were written: {stderr:?}");
    let lines: Vec<Value> = stderr
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}")))
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "target"] {
            assert!(line[field].is_string(), "no {field}: {line}");
        }
    }
    for (run, request_id) in &runs {
        let accepted = lines
            .iter()
            .find(|l| l["message"] == "run accepted" && l["run"] == run.as_str())
            .unwrap_or_else(|| panic!("no line accepts {run}"));
        assert_eq!(accepted["span"]["name"], "request", "{accepted}");
        assert_eq!(accepted["span"]["request_id"], request_id.as_str(), "the response's x-request-id: {accepted}");
        let settled = lines
            .iter()
            .find(|l| l["message"] == "run settled" && l["span"]["run"] == run.as_str())
            .unwrap_or_else(|| panic!("no line settles {run} in its span"));
        assert_eq!(settled["status"], "completed", "{settled}");
    }
    let leaked: Vec<&String> = stderr.iter().filter(|l| l.contains(SECRET)).collect();
    assert!(leaked.is_empty(), "the secret is in the logs: {leaked:?}");
}
