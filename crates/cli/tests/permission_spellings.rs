//! Server permission rules against `bash` commands as a model would spell them, through
//! `spool serve` and the scripted model (issue 35, points 7 and 8, found from outside):
//!
//! - a server `deny` for `rm *` and `curl *` fell back to "ask" for `/bin/rm`, `\rm`,
//!   `r''m`, `"rm"`, `command rm`, `find -delete` and `cur''l`; every one is denied now;
//! - under the README's own rule `bash "git *" allow`, `git -c alias.x='!cmd' x` and
//!   `git -c core.pager=… log` ran arbitrary commands unasked; they ask now, while
//!   `git status` still runs without asking.

use crate::common;

use common::{WAIT, call, serve, wait_for};
use serde_json::{Value, json};
use std::path::Path;

/// The config of the review: the README's git rule, and two denies.
fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("spool.toml");
    let mut text = String::new();
    for (pattern, action) in [("git *", "allow"), ("rm *", "deny"), ("curl *", "deny")] {
        text.push_str(&format!("[[permission]]\ntool = \"bash\"\npattern = \"{pattern}\"\naction = \"{action}\"\n\n"));
    }
    std::fs::write(&path, text).expect("write the config");
    path
}

/// What became of one `bash` call.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The run stopped at an approval: a person decides.
    Asked,
    /// The call was refused without running; the run went on.
    Denied,
    /// The command ran; its result.
    Ran(String),
}

/// Prompts the scripted model to make one `bash` call in a new session of `project`.
async fn attempt(client: &reqwest::Client, base: &str, project: &Value, command: &str) -> Outcome {
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let prompt = format!("tool: bash {}", json!({ "command": command }));
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let settled = wait_for(client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    if settled["status"] == "interrupted" {
        return Outcome::Asked;
    }
    assert_eq!(settled["status"], "completed", "{command}: {settled}");
    let page = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    let messages = page["messages"].as_array().expect("messages").clone();
    let result: &Value = messages.iter().find(|m| m["role"] == "toolResult").expect("a tool result");
    let text = result["content"][0]["text"].as_str().expect("text").to_owned();
    if text.contains("is denied by a permission rule") { Outcome::Denied } else { Outcome::Ran(text) }
}

/// A server on a project with a git repository and `victim.txt`, under the config of
/// the review: the client, the base URL, the project and the temp dir holding it.
async fn server() -> (common::Spool, reqwest::Client, String, Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let out = std::process::Command::new("git").args(["init", "-q"]).current_dir(&project_dir).output().expect("git");
    assert!(out.status.success(), "git init: {out:?}");
    std::fs::write(project_dir.join("victim.txt"), "still here\n").expect("write");
    let config = config(dir.path());
    let data = dir.path().join("data");
    let (spool, base) = serve(&[
        "--addr",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("UTF-8"),
        "--config",
        config.to_str().expect("UTF-8"),
    ]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    (spool, client, base, project, dir)
}

/// Point 7: every spelling of a denied program is denied.
#[tokio::test]
async fn a_server_deny_holds_however_the_command_is_spelled() {
    let (_spool, client, base, project, dir) = server().await;
    for command in [
        "rm -f victim.txt",
        "/bin/rm -f victim.txt",
        "\\rm -f victim.txt",
        "r''m -f victim.txt",
        "\"rm\" -f victim.txt",
        "command rm -f victim.txt",
        "env -i X=1 rm -f victim.txt",
        "timeout 5 nice -n 5 rm -f victim.txt",
        "sh -c 'rm -f victim.txt'",
        "echo victim.txt | xargs rm -f",
        "find . -name victim.txt -delete",
        "find . -name victim.txt -exec rm {} \\;",
        "cur''l -s http://127.0.0.1:1/",
        "$'\\x63url' http://127.0.0.1:1/",
    ] {
        assert_eq!(attempt(&client, &base, &project, command).await, Outcome::Denied, "{command}");
    }
    assert!(dir.path().join("project/victim.txt").exists(), "a denied rm ran");
}

/// Point 8: under the README's `git *` allow, git's own work runs unasked; git pointed
/// at another program asks, and nothing runs.
#[tokio::test]
async fn git_pointed_at_another_program_asks_under_the_readme_rule() {
    let (_spool, client, base, project, dir) = server().await;
    match attempt(&client, &base, &project, "git status").await {
        Outcome::Ran(text) => assert!(text.starts_with("exit code 0\n"), "{text}"),
        other => panic!("git status: {other:?}"),
    }
    // In the project, where a command may write: a run that escaped would leave it.
    let marker = dir.path().join("project/ran-unasked");
    let m = marker.display();
    for command in [
        format!("git -c alias.x='!touch {m}' x"),
        format!("git -c core.pager='touch {m}' -p log"),
        format!("git -c core.pager='touch {m}' log"),
        format!("git config alias.x '!touch {m}'"),
        "git --config-env=core.pager=P log".to_owned(),
    ] {
        assert_eq!(attempt(&client, &base, &project, &command).await, Outcome::Asked, "{command}");
    }
    assert!(!marker.exists(), "a git call ran a program unasked");
}
