//! Credentials stay out of argv, where every process of the machine reads them
//! (`/proc/PID/cmdline`; the review read the database and Redis passwords there from a
//! `bash` command). A `--database-url` or `--redis-url` with a password is refused on the
//! command line of every command that takes it, with a message naming the variable and
//! the `--…-url-file` option; a URL given in a file works, and the running server's
//! command line holds none of it.
//!
//! The refusals need nothing; the file test needs PostgreSQL and Redis
//! (`SPOOL_TEST_DATABASE_URL`, `SPOOL_TEST_REDIS_URL`; ignored without them, except
//! under CI: see `common`).

use crate::common;

use common::{TestDb, redis_url, serve};

/// Runs `spool ARGS…`, which must fail; returns what it said.
fn refused(args: &[&str]) -> String {
    let out = common::spool().args(args).output().expect("run spool");
    assert!(!out.status.success(), "spool must refuse {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_password_on_the_command_line_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8");
    let db = "postgres://spool:hunter2@127.0.0.1:1/spool";
    let redis = "redis://:hunter2@127.0.0.1:1";
    let cases: [(Vec<&str>, &str, &str); 5] = [
        (vec!["serve", "--data-dir", data, "--database-url", db], "SPOOL_DATABASE_URL", "--database-url-file"),
        (
            vec!["serve", "--data-dir", data, "--database-url", "postgres://spool@127.0.0.1:1/spool?password=hunter2"],
            "SPOOL_DATABASE_URL",
            "--database-url-file",
        ),
        (vec!["serve", "--data-dir", data, "--redis-url", redis], "SPOOL_REDIS_URL", "--redis-url-file"),
        (vec!["token", "list", "--database-url", db], "SPOOL_DATABASE_URL", "--database-url-file"),
        (vec!["auth", "status", "--database-url", db], "SPOOL_DATABASE_URL", "--database-url-file"),
    ];
    for (args, var, file_flag) in cases {
        let message = refused(&args);
        assert!(message.contains(var) && message.contains(file_flag), "{args:?}: {message}");
        assert!(message.contains("/proc/PID/cmdline"), "says why: {message}");
        assert!(!message.contains("hunter2"), "the password is never shown: {message}");
    }
    // Nothing was created or reached: the refusal comes before anything else.
    assert!(std::fs::read_dir(dir.path()).expect("read dir").next().is_none(), "nothing written");
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn urls_in_files_start_a_node_and_stay_out_of_its_command_line() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let (db_file, redis_file) = (dir.path().join("database-url"), dir.path().join("redis-url"));
    // Surrounding whitespace (an editor's newline) is trimmed.
    std::fs::write(&db_file, format!("  {}\n", db.url)).expect("write");
    std::fs::write(&redis_file, format!("{redis}\n")).expect("write");
    let data = dir.path().join("data");
    let paths = [&data, &db_file, &redis_file].map(|p| p.to_str().expect("utf-8").to_owned());
    let args = ["--addr", "127.0.0.1:0", "--data-dir", &paths[0]];
    let files = ["--database-url-file", &paths[1], "--redis-url-file", &paths[2]];
    let (node, base) = serve(&[&args[..], &files[..]].concat());
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let ready = client.get(format!("{base}/api/ready")).send().await.expect("ready");
    let body: serde_json::Value = ready.json().await.expect("json");
    // A bus check exists only on a node that joined Redis (which needs PostgreSQL).
    assert!(body["checks"]["bus"]["state"].is_string(), "the node joined Redis: {body}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", node.id())).expect("read the node's cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(!cmdline.contains(&db.url) && !cmdline.contains(&redis), "{cmdline}");
}
