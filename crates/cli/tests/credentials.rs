//! Credentials stay out of argv, where every process of the machine reads them
//! (`/proc/PID/cmdline`; the review read the database and Redis passwords there from a
//! `bash` command). A `--database-url` or `--redis-url` with a password is refused on the
//! command line of every command that takes it, with a message naming the variable and
//! the `--…-url-file` option; URLs and the cluster key given in files work, the running
//! server's command line holds none of them, and a `bash` command cannot read the files.
//!
//! The refusals need nothing; the file test needs PostgreSQL and Redis
//! (`SPOOL_TEST_DATABASE_URL`, `SPOOL_TEST_REDIS_URL`; ignored without them, except
//! under CI: see `common`).

use crate::common;

use common::{TestDb, WAIT, call, redis_url, serve, wait_for};
use serde_json::json;

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
async fn urls_and_the_key_in_files_start_a_node_and_stay_out_of_reach() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).expect("secrets dir");
    let (db_file, redis_file, key_file) =
        (secrets.join("database-url"), secrets.join("redis-url"), secrets.join("cluster-key"));
    const KEY: &str = "5e2f0c9d8b7a69584736251403f2e1d0c9b8a79685746352413021f0e1d2c3b4";
    // Surrounding whitespace (an editor's newline) is trimmed.
    std::fs::write(&db_file, format!("  {}\n", db.url)).expect("write");
    std::fs::write(&redis_file, format!("{redis}\n")).expect("write");
    std::fs::write(&key_file, format!("{KEY}\n")).expect("write");
    // A config that lets `bash` run unasked, kept beside the secrets.
    let config = secrets.join("spool.toml");
    std::fs::write(&config, "[[permission]]\ntool = \"bash\"\naction = \"allow\"\n").expect("write");
    let (data, project_dir) = (dir.path().join("data"), dir.path().join("project"));
    std::fs::create_dir(&project_dir).expect("project dir");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let args = [
        "--addr".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--data-dir".to_owned(),
        path(&data),
        "--config".to_owned(),
        path(&config),
        "--database-url-file".to_owned(),
        path(&db_file),
        "--redis-url-file".to_owned(),
        path(&redis_file),
        "--cluster-key-file".to_owned(),
        path(&key_file),
    ];
    let (node, base) = serve(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let ready = client.get(format!("{base}/api/ready")).send().await.expect("ready");
    let body: serde_json::Value = ready.json().await.expect("json");
    // A bus check exists only on a node that joined Redis (which needs PostgreSQL).
    assert!(body["checks"]["bus"]["state"].is_string(), "the node joined Redis: {body}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", node.id())).expect("read the node's cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(!cmdline.contains(&db.url) && !cmdline.contains(&redis) && !cmdline.contains(KEY), "{cmdline}");

    // A command cannot read the files either (the sandbox hides every secret file).
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let command = format!("cat {} {} {}", path(&db_file), path(&redis_file), path(&key_file));
    let prompt = format!("tool: bash {}", json!({ "command": command }));
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let settled = wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(settled["status"], "completed", "{settled}");
    let page = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    let out = page["messages"].to_string();
    assert!(out.contains("Permission denied"), "the command ran and was refused: {out}");
    assert!(!out.contains(&db.url) && !out.contains(&redis) && !out.contains(KEY), "a secret file was read: {out}");
}
