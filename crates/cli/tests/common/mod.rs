//! Helpers of the CLI tests that run `spool serve` processes, on SQLite or on a
//! PostgreSQL database of their own (and a Redis): each test binary uses some of them.
//! The process harness, the SSE reader and the services are the shared test toolkit's
//! (`spool_test_support`); what is here binds them to this crate's binary.
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
#![allow(dead_code, unused_imports)] // Each test binary uses its own part of this module.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A database of a test's own (see `spool_test_support::services`).
pub use spool_test_support::TestDb;
pub use spool_test_support::process::{Spool, WAIT, log_to, sigterm};
/// The test Redis, for tests gated on `spool_redis` (see the module docs).
pub use spool_test_support::redis_url;
pub use spool_test_support::sse::SseStream;

/// This crate's `spool` binary, with none of the caller's `SPOOL_*` settings.
pub fn spool() -> Command {
    spool_test_support::process::command(env!("CARGO_BIN_EXE_spool"))
}

/// `spool serve` on PostgreSQL at `url` with its data directory `data`.
pub fn start(url: &str, data: &Path) -> (Spool, String) {
    start_with(url, data, &[])
}

pub fn start_with(url: &str, data: &Path, extra: &[&str]) -> (Spool, String) {
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
pub fn serve_logged(args: &[&str], log: &Path) -> (Spool, String) {
    serve_to(args, log_to(log))
}

fn serve_to(args: &[&str], stderr: Stdio) -> (Spool, String) {
    let mut cmd = spool();
    cmd.arg("serve").args(args).stderr(stderr);
    spool_test_support::process::serve(cmd)
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
