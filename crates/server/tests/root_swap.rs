//! A project directory swapped for a symbolic link after it was registered (issue 35,
//! point 1), through the real server: the review registered `bob/sub`, then ran
//! `rmdir sub && ln -s DATA_DIR sub`, and the next `bash` call got the sandbox's
//! read-write grant on the data directory (the stored path was judged as text, the
//! grant followed the link). A project's directory must be the one registered every
//! time it is used: a prompt there is refused, and a call approved before the swap is
//! refused by the tool itself when it runs, with the data directory untouched.

use crate::common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Registers `<dir>/bob/sub` through the API and opens a session in it.
async fn project_and_session(server: &TestServer) -> (PathBuf, String) {
    let sub = server.new_dir("bob/sub");
    let (status, project) = server.post("/api/projects", json!({"path": sub.to_str().expect("utf-8 temp path")})).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    let (status, session) = server.post("/api/sessions", json!({"projectId": id_of(&project)})).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    (sub, id_of(&session))
}

/// `rmdir sub && ln -s DATA_DIR sub`.
fn swap_for_link(sub: &Path, target: &Path) {
    std::fs::remove_dir(sub).expect("rmdir the project");
    std::os::unix::fs::symlink(target, sub).expect("a link in its place");
}

/// The data directory's entries, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list the data directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Parks a run at its tool call's approval; returns the run's and the approval's ids.
async fn park(server: &TestServer, session: &str, prompt: &str) -> (String, String) {
    let (run_id, approval) = server.park(session, prompt).await;
    (run_id, id_of(&approval))
}

/// Approves once and waits for the run to settle; returns the session's messages.
async fn approve(server: &TestServer, session: &str, (run, approval): &(String, String)) -> String {
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "once"})).await;
    assert!(status.is_success(), "{status}: {body}");
    server.wait_run(run).await;
    server.messages(session, "").await.to_string()
}

#[tokio::test]
async fn a_prompt_in_a_project_swapped_for_a_link_to_the_data_directory_is_refused() {
    let server = TestServer::start().await;
    let data = server.dir().join("data");
    let (sub, session) = project_and_session(&server).await;
    let before = entries(&data);
    swap_for_link(&sub, &data);

    let bash = format!("tool: bash {}", json!({"command": "echo pwned > planted.txt"}));
    let (status, body) = server.prompt(&session, &bash, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("project_moved")), "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("symbolic link")), "{body}");
    assert_eq!(entries(&data), before, "nothing was written in the data directory");
}

#[tokio::test]
async fn a_bash_call_approved_after_the_swap_is_refused_by_the_tool() {
    let server = TestServer::start().await;
    let data = server.dir().join("data");
    let (sub, session) = project_and_session(&server).await;
    let approval =
        park(&server, &session, &format!("tool: bash {}", json!({"command": "echo pwned > planted.txt"}))).await;
    let before = entries(&data);
    swap_for_link(&sub, &data);

    let shown = approve(&server, &session, &approval).await;
    assert!(shown.contains("replaced by a symbolic link"), "{shown}");
    assert_eq!(entries(&data), before, "nothing was written in the data directory");
}

#[tokio::test]
async fn a_read_call_approved_after_the_swap_is_refused_by_the_tool() {
    let server = TestServer::start().await;
    let data = server.dir().join("data");
    let (sub, session) = project_and_session(&server).await;
    let (status, body) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "read", "action": "ask"}]}))
        .await;
    assert!(status.is_success(), "{status}: {body}");
    let approval = park(&server, &session, &format!("tool: read {}", json!({"path": "spool.db"}))).await;
    swap_for_link(&sub, &data);

    let shown = approve(&server, &session, &approval).await;
    assert!(shown.contains("replaced by a symbolic link"), "{shown}");
    assert!(!shown.contains("SQLite format"), "the database was read: {shown}");
}
