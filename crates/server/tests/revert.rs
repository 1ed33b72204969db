//! Reverting a session to a prompt (issue 39): `POST /api/sessions/{id}/revert` puts
//! back every file the agent changed from that prompt on, whatever changed it (`write`,
//! `edit`, a `bash` command), and takes those turns off the session's history;
//! `POST /api/sessions/{id}/unrevert` puts both back. A file someone else changed since
//! is a conflict, shown with its diff and never overwritten; a busy session refuses; a
//! prompt after a revert makes it final.

use crate::common;

use common::{Open, TestOptions, TestServer, files_on_disk, message_rows, session_allowing};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::snapshots::StepSnapshotting;
use spool_tools::snapshot::{ShadowRepos, SnapshotLimits};
use std::sync::Arc;

/// A server recording step snapshots in a directory of its own (kept with the server).
async fn server() -> (TestServer, tempfile::TempDir) {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow));
    (TestServer::start_with(options).await, shadow_dir)
}

/// Runs `prompt` to its end; returns the index of its user message.
async fn turn(server: &TestServer, session: &str, prompt: &str) -> u64 {
    let run = server.run_prompt(session, prompt).await;
    assert_eq!(run["status"], "completed", "{run}");
    run["userMessageIndex"].as_u64().unwrap_or_else(|| panic!("a run names its user message: {run}"))
}

/// The paths of a report's `restore`, each with its action.
fn restored(report: &Value) -> Vec<(String, String)> {
    let entries = report["restore"].as_array().unwrap_or_else(|| panic!("a report lists what it restores: {report}"));
    entries
        .iter()
        .map(|e| (e["path"].as_str().expect("path").to_owned(), e["action"].as_str().expect("action").to_owned()))
        .collect()
}

fn pair(path: &str, action: &str) -> (String, String) {
    (path.to_owned(), action.to_owned())
}

#[tokio::test]
async fn a_revert_after_write_edit_and_bash_restores_every_file_byte_for_byte_and_unrevert_puts_them_back() {
    let (server, _shadow) = server().await;
    let session = session_allowing(&server, &["write", "edit", "bash"]).await;
    let dir = server.project_dir();
    std::fs::write(dir.join("keep.txt"), "untouched by the agent\n").expect("seed a file");

    turn(&server, &session, "hello").await;
    let before_agent = files_on_disk(&dir);
    let history_before = message_rows(&server.messages(&session, "").await);
    let write = json!({"path": "notes.txt", "content": "alpha\nbeta\n"});
    let from = turn(&server, &session, &format!("tool: write {write}")).await;
    let edit = json!({"path": "README.md", "oldString": "# Test project", "newString": "# Edited by the agent"});
    turn(&server, &session, &format!("tool: edit {edit}")).await;
    turn(&server, &session, &format!("tool: bash {}", json!({"command": "rm src/main.rs"}))).await;
    turn(&server, &session, &format!("tool: bash {}", json!({"command": "sed -i 's/beta/BETA/' notes.txt"}))).await;
    let after_agent = files_on_disk(&dir);
    let failed: Vec<_> = server.tool_results(&session).await.into_iter().filter(|r| r.2).collect();
    assert!(failed.is_empty(), "every call did its work: {failed:?}");
    let history_after = message_rows(&server.messages(&session, "").await);
    assert_ne!(after_agent, before_agent, "the agent changed the files");
    assert_eq!(after_agent["notes.txt"], b"alpha\nBETA\n");
    assert!(!after_agent.contains_key("src/main.rs"));

    // The preview says what will happen and changes nothing.
    let (status, preview) = server.get(&format!("/api/sessions/{session}/revert?index={from}")).await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    let expected = vec![pair("README.md", "write"), pair("notes.txt", "delete"), pair("src/main.rs", "write")];
    assert_eq!(restored(&preview), expected, "{preview}");
    assert_eq!(preview["conflicts"], json!([]));
    assert_eq!(files_on_disk(&dir), after_agent, "a preview changes no file");

    let mut stream = server.events(&session, Open::fresh()).await;
    let (status, report) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": from})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(restored(&report), expected, "{report}");
    // An open view redraws without the reverted turns.
    stream.frames_until(|f| f.kind == "session.state" && f.state().total == from).await;
    assert_eq!(files_on_disk(&dir), before_agent, "every file is as it was before the agent's turns, byte for byte");
    assert_eq!(
        message_rows(&server.messages(&session, "").await),
        history_before,
        "the reverted turns left the history"
    );
    let (_, pending) = server.get(&format!("/api/sessions/{session}/revert")).await;
    assert_eq!(pending["index"], from, "{pending}");

    let (status, report) = server.post(&format!("/api/sessions/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(files_on_disk(&dir), after_agent, "unrevert puts back what the agent left, byte for byte");
    let total = history_after.len() as u64;
    stream.frames_until(|f| f.kind == "session.state" && f.state().total == total).await;
    assert_eq!(message_rows(&server.messages(&session, "").await), history_after, "the turns are back");
    assert_eq!(report["conflicts"], json!([]), "{report}");
    let (_, pending) = server.get(&format!("/api/sessions/{session}/revert")).await;
    assert_eq!(pending, Value::Null, "nothing is left to unrevert");
}

#[tokio::test]
async fn a_file_the_person_changed_since_is_a_conflict_left_alone() {
    let (server, _shadow) = server().await;
    let session = session_allowing(&server, &["write", "edit", "bash"]).await;
    let dir = server.project_dir();
    let write = json!({"path": "notes.txt", "content": "from the agent\n"});
    let from = turn(&server, &session, &format!("tool: write {write}")).await;
    let other = json!({"path": "other.txt", "content": "also the agent\n"});
    turn(&server, &session, &format!("tool: write {other}")).await;
    // The person edits one of the agent's files afterwards.
    std::fs::write(dir.join("notes.txt"), "the person's own words\n").expect("edit");

    let (status, report) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": from})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let conflicts = report["conflicts"].as_array().expect("conflicts");
    assert_eq!(conflicts.len(), 1, "{report}");
    assert_eq!(conflicts[0]["path"], "notes.txt");
    let diff = conflicts[0]["diff"].as_str().expect("a diff");
    assert!(diff.contains("-the person's own words"), "the diff shows what is there now: {diff}");
    assert_eq!(std::fs::read(dir.join("notes.txt")).expect("still there"), b"the person's own words\n");
    assert_eq!(restored(&report), vec![pair("other.txt", "delete")], "the file nobody else touched went back");
    assert!(!dir.join("other.txt").exists());
}

#[tokio::test]
async fn a_busy_session_refuses_a_revert_with_409() {
    let (server, _shadow) = server().await;
    // No allow rule: the write asks, and the run waits at the approval.
    let session = server.new_session().await;
    let write = json!({"path": "notes.txt", "content": "waiting\n"});
    let (_run, _approval) = server.park(&session, &format!("tool: write {write}")).await;

    let (status, body) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": 0})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy", "{body}");
    let (status, body) = server.post(&format!("/api/sessions/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy", "{body}");
    assert_eq!(
        message_rows(&server.messages(&session, "").await).first().map(|m| m.1.clone()),
        Some("user".into()),
        "history kept"
    );
}

#[tokio::test]
async fn a_prompt_after_a_revert_makes_it_final() {
    let (server, _shadow) = server().await;
    let session = session_allowing(&server, &["write", "edit", "bash"]).await;
    let dir = server.project_dir();
    let write = json!({"path": "notes.txt", "content": "first try\n"});
    let from = turn(&server, &session, &format!("tool: write {write}")).await;
    let (status, report) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": from})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert!(!dir.join("notes.txt").exists());

    let again = json!({"path": "notes.txt", "content": "second try\n"});
    let index = turn(&server, &session, &format!("tool: write {again}")).await;
    assert_eq!(index, from, "the new prompt takes the reverted one's place");
    let (status, body) = server.post(&format!("/api/sessions/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "nothing_to_unrevert", "{body}");
    assert_eq!(std::fs::read(dir.join("notes.txt")).expect("kept"), b"second try\n", "the new turn's file stays");
    let (_, pending) = server.get(&format!("/api/sessions/{session}/revert")).await;
    assert_eq!(pending, Value::Null);
}

#[tokio::test]
async fn the_session_state_carries_the_pending_revert_until_unrevert_or_the_next_prompt() {
    let (server, _shadow) = server().await;
    let session = session_allowing(&server, &["write", "edit", "bash"]).await;
    turn(&server, &session, "hello").await;
    let write = json!({"path": "notes.txt", "content": "first try\n"});
    let from = turn(&server, &session, &format!("tool: write {write}")).await;

    let mut stream = server.events(&session, Open::fresh()).await;
    let (status, report) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": from})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let frames = stream.frames_until(|f| f.kind == "session.state" && f.state().total == from).await;
    let pending = frames.last().expect("the redraw").state().revert.expect("an open view hears of the revert");
    assert_eq!((pending.index, pending.report.restore.len()), (from, 1), "{pending:?}");
    assert!(pending.snapshot.is_some(), "it names the snapshot unrevert puts back: {pending:?}");
    let diff = pending.diff.expect("a diff of what the revert did");
    assert!(diff.contains("-first try"), "the diff shows the file the revert deleted: {diff}");
    // A view opened now draws it from its first snapshot.
    let mut late = server.events(&session, Open::fresh()).await;
    let snapshot = late.frames_until(|f| f.kind == "session.snapshot").await;
    let shown = snapshot.last().expect("snapshot").state().revert;
    assert_eq!(shown.map(|r| r.index), Some(from), "a view opened after the revert shows it");

    let (status, body) = server.post(&format!("/api/sessions/{session}/unrevert"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let frames = stream.frames_until(|f| f.kind == "session.state" && f.state().total > from).await;
    assert_eq!(frames.last().expect("the redraw").state().revert, None, "after unrevert no view offers Redo");

    let (status, body) = server.post(&format!("/api/sessions/{session}/revert"), json!({"index": from})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    stream.frames_until(|f| f.kind == "session.state" && f.state().revert.is_some()).await;
    turn(&server, &session, "a new prompt in its place").await;
    let mut after = server.events(&session, Open::fresh()).await;
    let snapshot = after.frames_until(|f| f.kind == "session.snapshot").await;
    assert_eq!(snapshot.last().expect("snapshot").state().revert, None, "the prompt made the revert final");
}
