//! `spool serve --git-poll-secs N`: the binary runs the git poller, and a session in a
//! git repository shows the branch and commit it read (`git` of the session).

use crate::common;

use common::{WAIT, call, serve, wait_for};
use serde_json::json;

#[tokio::test]
async fn the_binary_reads_a_sessions_git_state_at_its_interval() {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo_dir = dir.path().join("repo");
    std::fs::create_dir_all(&repo_dir).expect("mkdir");
    let mut init = git2::RepositoryInitOptions::new();
    init.initial_head("trunk");
    let repo = git2::Repository::init_opts(&repo_dir, &init).expect("git init");
    std::fs::write(repo_dir.join("a.txt"), "one\n").expect("write");
    let data = dir.path().join("data");
    let data = data.to_str().expect("UTF-8 path");
    let (_spool, base) = serve(&["--addr", "127.0.0.1:0", "--data-dir", data, "--git-poll-secs", "1"]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": repo_dir}))).await;
    let body = json!({"projectId": project["id"], "title": "git"});
    let session = call(client.post(format!("{base}/api/sessions")).json(&body)).await;
    let url = format!("{base}/api/sessions/{}", session["id"].as_str().expect("id"));
    let detail = wait_for(&client, &url, WAIT, |d| !d["git"].is_null()).await;
    // No commit yet: the branch HEAD names, and the new file's line.
    assert_eq!(detail["git"]["branch"], "trunk");
    assert_eq!(detail["git"]["commit"], serde_json::Value::Null);
    assert_eq!(detail["git"]["additions"], 1);
    drop(repo);
}
