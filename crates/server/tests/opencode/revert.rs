//! OpenCode's revert and unrevert (issue 39): `POST /session/:id/revert` takes a turn
//! and the later ones out of the history and puts the files they changed back as they
//! were; `POST /session/:id/unrevert` brings both back. The session names its pending
//! revert in between, and a session with a run going is not reverted.

use super::client::{Events, create, directory, messages};
use crate::common::{TestOptions, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::snapshots::StepSnapshotting;
use spool_tools::snapshot::{ShadowRepos, SnapshotLimits};
use std::sync::Arc;

/// A server that snapshots the files around each step, as `spool serve` does.
async fn snapshotting_server(shadow: &tempfile::TempDir) -> TestServer {
    let shadow = Arc::new(ShadowRepos::new(shadow.path(), SnapshotLimits::default()));
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow));
    TestServer::start_with(options).await
}

/// Prompts through `POST /session/:id/message`, which answers once the run settled.
async fn prompt(server: &TestServer, session: &str, text: &str) {
    let (status, body) =
        server.post(&format!("/session/{session}/message"), json!({"parts": [{"type": "text", "text": text}]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Each message's id and role, in order.
fn shape(list: &[Value]) -> Vec<(String, String)> {
    list.iter()
        .map(|m| {
            (m["info"]["id"].as_str().expect("id").to_owned(), m["info"]["role"].as_str().expect("role").to_owned())
        })
        .collect()
}

#[tokio::test]
async fn revert_hides_later_messages_and_unrevert_brings_them_back() {
    let shadow = tempfile::tempdir().expect("temp dir");
    let server = snapshotting_server(&shadow).await;
    let dir = directory(&server, "app");
    std::fs::write(dir.join("notes.txt"), "before\n").expect("write");
    let session = create(&server, &dir, "revert").await;
    let allow = json!({"permissions": [{"tool": "write", "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), allow).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    prompt(&server, &session, "echo: first").await;
    let kept = messages(&server, &session).await;
    prompt(&server, &session, &format!("tool: write {}", json!({"path": "notes.txt", "content": "after\n"}))).await;
    prompt(&server, &session, &format!("tool: write {}", json!({"path": "new.txt", "content": "made\n"}))).await;
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).expect("notes"), "after\n");
    let all = messages(&server, &session).await;
    let users: Vec<&Value> = all.iter().filter(|m| m["info"]["role"] == "user").collect();
    assert_eq!(users.len(), 3, "{all:?}");
    let second_turn = users[1]["info"]["id"].as_str().expect("id");
    // The second turn's write step: an assistant message, which reverts from its turn's start.
    let step = all
        .iter()
        .find(|m| m["info"]["role"] == "assistant" && m["info"]["parentID"] == second_turn)
        .expect("the second turn's step");

    let (status, info) =
        server.post(&format!("/session/{session}/revert"), json!({"messageID": step["info"]["id"]})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert_eq!(info["revert"]["messageID"], second_turn, "{info}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).expect("notes"), "before\n");
    assert!(!dir.join("new.txt").exists(), "the file the reverted turns made is gone");
    assert_eq!(shape(&messages(&server, &session).await), shape(&kept), "only the first turn is left");
    let (status, read) = server.get(&format!("/session/{session}")).await;
    assert_eq!((status, &read["revert"]["messageID"]), (StatusCode::OK, &json!(second_turn)), "{read}");

    let (status, info) = server.post(&format!("/session/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert!(info.get("revert").is_none(), "{info}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).expect("notes"), "after\n");
    assert_eq!(std::fs::read_to_string(dir.join("new.txt")).expect("new.txt is back"), "made\n");
    assert_eq!(messages(&server, &session).await, all, "every turn is back as it was");
    let (status, read) = server.get(&format!("/session/{session}")).await;
    assert!(status == StatusCode::OK && read.get("revert").is_none(), "{read}");

    // As in OpenCode, unrevert with nothing pending answers the session unchanged.
    let (status, again) = server.post(&format!("/session/{session}/unrevert"), json!({})).await;
    assert_eq!((status, again.get("revert")), (StatusCode::OK, None), "{again}");
}

#[tokio::test]
async fn a_session_with_a_run_waiting_is_not_reverted() {
    let shadow = tempfile::tempdir().expect("temp dir");
    let server = snapshotting_server(&shadow).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "busy").await;
    prompt(&server, &session, "echo: first").await;
    let first = messages(&server, &session).await;
    // The write waits for a permission: the run is parked, not over.
    server.park(&session, &format!("tool: write {}", json!({"path": "a.txt", "content": "x"}))).await;

    let (status, body) =
        server.post(&format!("/session/{session}/revert"), json!({"messageID": first[0]["info"]["id"]})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy", "{body}");
    assert_eq!(body["data"]["message"], body["error"]["message"], "OpenCode's shape too: {body}");
    let (_, read) = server.get(&format!("/session/{session}")).await;
    assert!(read.get("revert").is_none(), "{read}");
    assert_eq!(shape(&messages(&server, &session).await)[..2], shape(&first)[..], "nothing left the history");
}

#[tokio::test]
async fn an_event_client_sees_the_revert_in_session_updated_and_the_list_until_unrevert() {
    let shadow = tempfile::tempdir().expect("temp dir");
    let server = snapshotting_server(&shadow).await;
    let dir = directory(&server, "app");
    std::fs::write(dir.join("notes.txt"), "before\n").expect("write");
    let session = create(&server, &dir, "revert events").await;
    let allow = json!({"permissions": [{"tool": "write", "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), allow).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    prompt(&server, &session, "echo: first").await;
    prompt(&server, &session, &format!("tool: write {}", json!({"path": "notes.txt", "content": "after\n"}))).await;
    let all = messages(&server, &session).await;
    let second_turn = all.iter().filter(|m| m["info"]["role"] == "user").nth(1).expect("the second turn")["info"]["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let mut events = Events::open(&server, &dir, "").await;
    let (status, info) = server.post(&format!("/session/{session}/revert"), json!({"messageID": second_turn})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let updated = events
        .until(|e| {
            e["type"] == "session.updated"
                && e["properties"]["info"]["id"] == session
                && e["properties"]["info"]["revert"]["messageID"] == second_turn
        })
        .await;
    let revert = &updated["properties"]["info"]["revert"];
    assert!(revert["snapshot"].as_str().is_some_and(|s| !s.is_empty()), "the snapshot unrevert restores: {revert}");
    let diff = revert["diff"].as_str().unwrap_or_else(|| panic!("a diff of what the revert did: {revert}"));
    assert!(diff.contains("-after") && diff.contains("+before"), "{diff}");
    assert_eq!(info["revert"], *revert, "the route and the event say the same");
    let (status, list) =
        server.get(&format!("/session?directory={}", crate::common::urlencode(&dir.to_string_lossy()))).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let listed = list.as_array().expect("a list").iter().find(|s| s["id"] == session).cloned().expect("listed");
    assert_eq!(listed["revert"]["messageID"], second_turn, "the list shows it too: {listed}");

    let (status, info) = server.post(&format!("/session/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let updated = events
        .until(|e| {
            e["type"] == "session.updated"
                && e["properties"]["info"]["id"] == session
                && e["properties"]["info"].get("revert").is_none()
        })
        .await;
    assert_eq!(updated["properties"]["info"]["title"], "revert events");
    let (_, list) =
        server.get(&format!("/session?directory={}", crate::common::urlencode(&dir.to_string_lossy()))).await;
    let listed = list.as_array().expect("a list").iter().find(|s| s["id"] == session).cloned().expect("listed");
    assert!(listed.get("revert").is_none(), "gone from the list after unrevert: {listed}");
}
