//! A finished `write` or `edit` keeps the diff of what it changed: in its stored tool
//! result, in the session state a snapshot carries, and after a restart (the state is
//! rebuilt from the store), so a card reloaded later still shows the change. The model
//! sees the result line only.

use crate::common;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn session_allowing(server: &TestServer, tool: &str) -> String {
    let session = server.new_session().await;
    let rules = json!({"permissions": [{"tool": tool, "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), rules).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    session
}

/// The stored `toolResult` messages of the session.
async fn stored_results(server: &TestServer, session: &str) -> Vec<Value> {
    let page = server.messages(session, "").await;
    page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "toolResult").cloned().collect()
}

async fn snapshot_diff(server: &TestServer, session: &str, call: &str) -> Value {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    detail["state"]["toolExecutions"][call]["diff"].clone()
}

#[tokio::test]
async fn an_overwrite_keeps_its_diff_in_the_stored_result_and_the_snapshot_after_a_restart() {
    let server = TestServer::start().await;
    std::fs::write(server.project_dir().join("notes.txt"), "alpha\nbeta\ngamma\n").expect("seed");
    let session = session_allowing(&server, "write").await;
    let call = json!({"path": "notes.txt", "content": "alpha\nBETA\ngamma\n"});
    let run = server.run_prompt(&session, &format!("tool: write {call}")).await;
    assert_eq!(run["status"], "completed", "{run}");

    let results = stored_results(&server, &session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert_eq!(result["content"][0]["text"], "overwrote notes.txt (17 bytes, was 17)", "{result}");
    let diff = result["diff"].as_str().expect("the stored result keeps a diff");
    assert_eq!(
        diff,
        "--- notes.txt (before the write)\n+++ notes.txt (after the write)\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n"
    );
    let call_id = result["toolCallId"].as_str().expect("call id").to_owned();
    assert_eq!(snapshot_diff(&server, &session, &call_id).await, diff, "the live snapshot");

    // A restart rebuilds the state from the store: the diff is still there.
    let server = server.restart().await;
    assert_eq!(snapshot_diff(&server, &session, &call_id).await, diff, "the snapshot after a restart");
}

#[tokio::test]
async fn a_failed_edit_keeps_no_diff() {
    let server = TestServer::start().await;
    std::fs::write(server.project_dir().join("a.txt"), "one\n").expect("seed");
    let session = session_allowing(&server, "edit").await;
    let call = json!({"path": "a.txt", "oldString": "absent", "newString": "x"});
    server.run_prompt(&session, &format!("tool: edit {call}")).await;
    let results = stored_results(&server, &session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["isError"], true, "{results:?}");
    assert!(results[0].get("diff").is_none(), "{results:?}");
}
