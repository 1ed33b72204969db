//! Helpers of the CLI tests that run `spool serve` processes on a PostgreSQL database
//! of their own (and a Redis): each test binary uses some of them.
//!
//! # Tests that need PostgreSQL or Redis
//!
//! libtest cannot skip a test at run time: one that returns early shows as "ok". So the
//! crate's build script sets `cfg(spool_postgres)` when `SPOOL_TEST_DATABASE_URL` is
//! set at build time and `cfg(spool_redis)` for `SPOOL_TEST_REDIS_URL` (both under CI,
//! whatever is set, so CI never ignores them), and each such test is gated:
//!
//! ```text
//! #[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
//! #[tokio::test]
//! async fn …() { let db = TestDb::create().await; … }
//! ```
//!
//! Without the variables `cargo test` lists them as ignored, with the reason; with them
//! (`scripts/test` sets both) they run. Cargo rebuilds when a variable changes. A gated
//! test that runs without its variable anyway (`--ignored`, or a binary run by hand)
//! fails, naming it: it never passes without its service.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);

/// A database of a test's own (see `spool_test_support::services`).
#[allow(unused_imports)] // Each test binary uses its own part of this module.
pub use spool_test_support::TestDb;

pub struct Spool(Child);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Spool {
    /// SIGTERM, then waits for a clean exit.
    pub fn stop(mut self) {
        sigterm(&self.0);
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

/// Sends SIGTERM to `child`, as an operator's `kill` would. A system call, not the
/// `kill` program: a minimal system (a container image) has no procps.
pub fn sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes plain integers; the child is ours and not yet reaped.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0, "kill -TERM {pid}: {}", std::io::Error::last_os_error());
}

pub fn spool() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spool"));
    for var in [
        "SPOOL_ADDR",
        "SPOOL_DATA_DIR",
        "SPOOL_DATABASE_URL",
        "SPOOL_REDIS_URL",
        "SPOOL_NODE_ID",
        "SPOOL_TLS_CERT",
        "SPOOL_TLS_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn").env("RUST_BACKTRACE", "0");
    cmd
}

pub fn start(url: &str, data: &std::path::Path) -> (Spool, String) {
    start_with(url, data, &[])
}

pub fn start_with(url: &str, data: &std::path::Path, extra: &[&str]) -> (Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["--addr", "127.0.0.1:0", "--database-url", url, "--data-dir", data];
    args.extend_from_slice(extra);
    serve(&args)
}

/// `spool serve ARGS…`, once it prints its address: the process and `http://HOST:PORT`.
pub fn serve(args: &[&str]) -> (Spool, String) {
    serve_to(args, Stdio::inherit())
}

/// Like [`serve`], with the server's log (its stderr) appended to the file `log`: a test
/// that starts many servers keeps their warnings to show when it fails.
pub fn serve_logged(args: &[&str], log: &std::path::Path) -> (Spool, String) {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open the log file");
    serve_to(args, Stdio::from(log))
}

fn serve_to(args: &[&str], stderr: Stdio) -> (Spool, String) {
    let mut child = spool()
        .arg("serve")
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start spool");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    let base =
        line.trim().strip_prefix("spool listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_owned();
    (Spool(child), base)
}

pub async fn call(req: reqwest::RequestBuilder) -> Value {
    let res = req.send().await.expect("request");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    body
}

/// Polls `GET url` until `done` holds for the JSON answer.
pub async fn wait_for(client: &reqwest::Client, url: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
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

/// The test Redis, for tests gated on `spool_redis` (see the module docs).
#[allow(unused_imports)]
pub use spool_test_support::redis_url;
