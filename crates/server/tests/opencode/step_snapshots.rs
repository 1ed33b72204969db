//! Step snapshots in OpenCode's shapes (issue 39): a step whose calls may change files
//! has a `step-start` naming the tree before its first call and a `step-finish` naming
//! the tree after its last, on `/event` and in the stored history (after a restart
//! too), the same trees as the store's `step_snapshots` row. A step without such calls
//! has no `snapshot` at all, as OpenCode leaves it out.

use super::client::{Events, create, directory, messages, prompt_async};
use crate::common::{TestOptions, TestServer};
use serde_json::{Value, json};
use spool_engine::snapshots::StepSnapshotting;
use spool_engine::store::prelude::*;
use spool_protocol::SessionId;
use spool_tools::snapshot::{ShadowRepos, SnapshotLimits};
use std::sync::Arc;

/// Every `message.part.updated` of a step part (`step-start` / `step-finish`) of
/// `message`, as its parts in the order they went out.
fn step_parts<'a>(events: &'a [Value], message: &str, kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "message.part.updated")
        .map(|e| &e["properties"]["part"])
        .filter(|p| p["messageID"] == message && p["type"] == kind)
        .collect()
}

/// The history's parts of type `kind` (`step-start` / `step-finish`), per assistant message.
fn history_parts(list: &[Value], kind: &str) -> Vec<Value> {
    list.iter()
        .filter(|m| m["info"]["role"] == "assistant")
        .flat_map(|m| m["parts"].as_array().expect("parts").iter().filter(|p| p["type"] == kind).cloned())
        .collect()
}

#[tokio::test]
async fn a_write_step_names_its_before_and_after_trees_live_and_in_history_after_a_restart() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow));
    let server = TestServer::start_with(options).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "snapshots").await;
    let allow = json!({"permissions": [{"tool": "write", "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), allow).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");

    let mut events = Events::open(&server, &dir, "").await;
    let write = json!({"path": "notes.txt", "content": "alpha\n"});
    prompt_async(&server, &session, &format!("tool: write {write}")).await;
    events.until_idle(&session).await;
    assert_eq!(std::fs::read(dir.join("notes.txt")).expect("written"), b"alpha\n");

    let id: SessionId = session.parse().expect("session id");
    let rows = server.store.list_step_snapshots(&id).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (before, after) = (rows[0].before_tree.clone(), rows[0].after_tree.clone().expect("the step finished"));
    assert_ne!(before, after, "the write changed the files");

    // The step that ran the write: its step-start went out bare, then again (the same
    // part) with the before tree; its step-finish names the after tree.
    let list = messages(&server, &session).await;
    let step = list
        .iter()
        .find(|m| m["info"]["role"] == "assistant" && m["parts"].to_string().contains("notes.txt"))
        .expect("the write's step");
    let message = step["info"]["id"].as_str().expect("id");
    let starts = step_parts(&events.seen, message, "step-start");
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[0]["id"], starts[1]["id"], "updated in place");
    assert!(starts[0].get("snapshot").is_none(), "sent before the snapshot was taken: {}", starts[0]);
    assert_eq!(starts[1]["snapshot"], before.as_str());
    let finishes = step_parts(&events.seen, message, "step-finish");
    assert_eq!(finishes.len(), 1, "{finishes:?}");
    assert_eq!(finishes[0]["snapshot"], after.as_str());

    // The answer after the tools is a step without file-changing calls: no snapshot.
    let last = list.last().expect("the answer");
    let last_id = last["info"]["id"].as_str().expect("id");
    assert_ne!(last_id, message);
    for part in step_parts(&events.seen, last_id, "step-start").into_iter().chain(step_parts(
        &events.seen,
        last_id,
        "step-finish",
    )) {
        assert!(part.get("snapshot").is_none(), "{part}");
    }

    // The stored history says the same, after a restart.
    let server = server.restart().await;
    let list = messages(&server, &session).await;
    let starts = history_parts(&list, "step-start");
    let finishes = history_parts(&list, "step-finish");
    let trees = |parts: &[Value]| parts.iter().map(|p| p.get("snapshot").cloned()).collect::<Vec<_>>();
    assert_eq!(trees(&starts), [Some(json!(before)), None]);
    assert_eq!(trees(&finishes), [Some(json!(after)), None]);
}

#[tokio::test]
async fn a_run_without_file_changing_calls_has_no_snapshot_field() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow));
    let server = TestServer::start_with(options).await;
    let dir = directory(&server, "app");
    std::fs::write(dir.join("README.md"), "hello\n").expect("write");
    let session = create(&server, &dir, "read only").await;
    let mut events = Events::open(&server, &dir, "").await;
    prompt_async(&server, &session, "tool: read {\"path\": \"README.md\"}").await;
    events.until_idle(&session).await;

    let parts: Vec<&Value> = events
        .seen
        .iter()
        .filter(|e| e["type"] == "message.part.updated")
        .map(|e| &e["properties"]["part"])
        .filter(|p| p["type"] == "step-start" || p["type"] == "step-finish")
        .collect();
    assert!(parts.len() >= 4, "two steps, each started and finished: {parts:?}");
    assert!(parts.iter().all(|p| p.get("snapshot").is_none()), "{parts:?}");
    let list = messages(&server, &session).await;
    let stored = [history_parts(&list, "step-start"), history_parts(&list, "step-finish")].concat();
    assert!(!stored.is_empty() && stored.iter().all(|p| p.get("snapshot").is_none()), "{stored:?}");
}
