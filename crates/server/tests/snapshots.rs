//! Step snapshots (issue 39): a run whose calls may change files records the project's
//! files before the step's first call and after its last, in a shadow repository of
//! Spool's own, whatever changed them (`write`, or a `bash` command), announces each
//! tree on the session stream and keeps both in `step_snapshots`. A run without such
//! calls records nothing.

use crate::common;

use common::{Open, TestOptions, TestServer, files_on_disk, session_allowing};
use serde_json::json;
use spool_engine::snapshots::StepSnapshotting;
use spool_engine::store::prelude::*;
use spool_protocol::SessionId;
use spool_tools::snapshot::{ShadowRepos, SnapshotLimits};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A server recording step snapshots into `shadow` (the test reads the trees back there).
async fn server_with(shadow: &Arc<ShadowRepos>) -> TestServer {
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow.clone()));
    TestServer::start_with(options).await
}

fn tree_files(shadow: &ShadowRepos, project: &str, tree: &str) -> BTreeMap<String, Vec<u8>> {
    let files = shadow.files(project, tree).expect("the tree reads back");
    files.into_iter().map(|(path, file)| (path, file.bytes)).collect()
}

/// Runs `prompt` and returns the step's (before, after) trees from the store and the
/// files on disk before and after the run.
async fn step(
    server: &TestServer,
    session: &str,
    prompt: &str,
) -> ((String, String), (BTreeMap<String, Vec<u8>>, BTreeMap<String, Vec<u8>>)) {
    let before = files_on_disk(&server.project_dir());
    let run = server.run_prompt(session, prompt).await;
    assert_eq!(run["status"], "completed", "{run}");
    let after = files_on_disk(&server.project_dir());
    let id: SessionId = session.parse().expect("session id");
    let rows = server.store.list_step_snapshots(&id).await.expect("rows");
    let row = rows.iter().find(|r| r.run_id.as_str() == run["id"]).unwrap_or_else(|| panic!("no step of {run}"));
    let after_tree = row.after_tree.clone().expect("the step finished: its after tree is recorded");
    ((row.before_tree.clone(), after_tree), (before, after))
}

#[tokio::test]
async fn write_then_bash_sed_and_rm_record_trees_that_match_the_files_byte_for_byte() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let server = server_with(&shadow).await;
    let project = server.default_project().await;
    let session = session_allowing(&server, &["write", "bash"]).await;
    let mut stream = server.events(&session, Open::fresh()).await;

    let write = json!({"path": "notes.txt", "content": "alpha\nbeta\n"});
    let ((before, after), (disk_before, disk_after)) = step(&server, &session, &format!("tool: write {write}")).await;
    assert_eq!(tree_files(&shadow, &project, &before), disk_before);
    assert_eq!(tree_files(&shadow, &project, &after), disk_after);
    assert!(!disk_before.contains_key("notes.txt") && disk_after["notes.txt"] == b"alpha\nbeta\n");

    // The session stream announced both trees of the step, in order.
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let announced: Vec<(String, String)> = frames
        .iter()
        .filter(|f| f.event_type() == Some("step_snapshot"))
        .map(|f| {
            (
                f.json["event"]["phase"].as_str().unwrap_or("").into(),
                f.json["event"]["snapshot"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(announced, [("before".into(), before.clone()), ("after".into(), after.clone())]);

    let sed = json!({"command": "sed -i 's/beta/BETA/' notes.txt"});
    let ((before, after), (disk_before, disk_after)) = step(&server, &session, &format!("tool: bash {sed}")).await;
    assert_eq!(tree_files(&shadow, &project, &before), disk_before);
    assert_eq!(tree_files(&shadow, &project, &after), disk_after);
    assert_eq!(disk_after["notes.txt"], b"alpha\nBETA\n", "sed changed the file");

    let rm = json!({"command": "rm notes.txt src/main.rs"});
    let ((before, after), (disk_before, disk_after)) = step(&server, &session, &format!("tool: bash {rm}")).await;
    assert_eq!(tree_files(&shadow, &project, &before), disk_before);
    assert_eq!(tree_files(&shadow, &project, &after), disk_after);
    assert!(!disk_after.contains_key("notes.txt") && !disk_after.contains_key("src/main.rs"));

    // Nothing of Spool's was written into the project.
    let names: Vec<&String> = disk_after.keys().collect();
    assert_eq!(names, ["README.md"]);
}

#[tokio::test]
async fn a_run_without_file_changing_tools_takes_no_snapshot() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let server = server_with(&shadow).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    let run = server.run_prompt(&session, "tool: read {\"path\": \"README.md\"}").await;
    assert_eq!(run["status"], "completed", "{run}");
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    assert!(frames.iter().all(|f| f.event_type() != Some("step_snapshot")), "no snapshot announced");
    let id: SessionId = session.parse().expect("session id");
    assert_eq!(server.store.list_step_snapshots(&id).await.expect("rows"), []);
}

#[tokio::test]
async fn a_step_that_parks_for_approval_keeps_its_before_and_records_its_after_once_approved() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let server = server_with(&shadow).await;
    let project = server.default_project().await;
    let session = server.new_session().await;
    let disk_before = files_on_disk(&server.project_dir());
    let write = json!({"path": "approved.txt", "content": "yes\n"});
    let (run_id, approval) = server.park(&session, &format!("tool: write {write}")).await;

    let id: SessionId = session.parse().expect("session id");
    let rows = server.store.list_step_snapshots(&id).await.expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].after_tree, None, "parked: no after yet");
    assert_eq!(tree_files(&shadow, &project, &rows[0].before_tree), disk_before);

    let url = format!("/api/sessions/{session}/approvals/{}", common::id_of(&approval));
    let (status, body) = server.post(&url, json!({"decision": "once"})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");

    let rows = server.store.list_step_snapshots(&id).await.expect("rows");
    assert_eq!(rows.len(), 1, "the resumed step is the same step: {rows:?}");
    let after = rows[0].after_tree.as_deref().expect("the after tree, taken when the approved call finished");
    let files = tree_files(&shadow, &project, after);
    assert_eq!(files, files_on_disk(&server.project_dir()));
    assert_eq!(files["approved.txt"], b"yes\n");
}
