//! What Spool keeps of a run, and for how long (issue 39): the frame log can be turned
//! off (`[frame_log] enabled = false`), step records older than their retention are
//! deleted, and a deleted project's shadow repository goes with it (at once, or at the
//! next pass when it was deleted while the server was down).

use crate::common;

use common::{TestOptions, TestServer, WAIT};
use serde_json::json;
use spool_engine::snapshots::StepSnapshotting;
use spool_engine::store::prelude::*;
use spool_protocol::{RunId, SessionId};
use spool_tools::snapshot::{ShadowRepos, SnapshotLimits};
use std::sync::Arc;
use std::time::Duration;

/// A run-stream body's event names, read to the stream's end.
async fn event_names(res: reqwest::Response) -> Vec<String> {
    assert_eq!(res.status(), 200);
    let text = tokio::time::timeout(WAIT, res.text()).await.expect("the stream ends").expect("body");
    let blocks = text.split("\n\n").filter(|b| !b.is_empty() && !b.starts_with(':'));
    blocks.filter_map(|b| b.lines().find_map(|l| l.strip_prefix("event: ")).map(str::to_owned)).collect()
}

#[tokio::test]
async fn with_the_frame_log_off_a_run_is_not_logged_and_replays_as_a_snapshot() {
    let mut options = TestOptions::default();
    options.engine.frame_log = false;
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    // More deltas than the session's buffer holds: a replay from early on must come
    // from the log, or be a snapshot.
    let res = server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": "stream: 300"}));
    let live = event_names(res.send().await.expect("chat")).await;
    assert_eq!(live.last().map(String::as_str), Some("done"), "{live:?}");
    let run: RunId =
        server.store.runs_since(&session.parse::<SessionId>().expect("id"), 0).await.expect("runs")[0].id.clone();

    // A reader of a run that just ended waits for its log's last chunk: with logging
    // on, this replay would be the live events after 5, byte for byte.
    let res = server.client.get(server.url(&format!("/api/runs/{run}/events?after=5"))).send();
    let replayed = event_names(res.await.expect("events")).await;
    assert_eq!(replayed, ["snapshot", "done"]);
    assert_eq!(server.store.run_frames(&run).await.expect("read the log"), vec![], "nothing was logged");
}

/// A server recording step snapshots into `shadow`, keeping their records `retention`.
async fn server_with(shadow: &Arc<ShadowRepos>, retention: Option<Duration>) -> TestServer {
    let mut options = TestOptions::default();
    options.engine.snapshots = Some(StepSnapshotting::new(shadow.clone()).keeping(retention));
    TestServer::start_with(options).await
}

/// A session whose `write` calls need no approval.
async fn writing_session(server: &TestServer) -> String {
    let session = server.new_session().await;
    let rules = json!({"permissions": [{"tool": "write", "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), rules).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    session
}

async fn write_a_file(server: &TestServer, session: &str) {
    let write = json!({"path": "notes.txt", "content": "alpha\n"});
    let run = server.run_prompt(session, &format!("tool: write {write}")).await;
    assert_eq!(run["status"], "completed", "{run}");
}

#[tokio::test]
async fn step_records_past_their_retention_are_deleted_and_younger_ones_kept() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let server = server_with(&shadow, Some(Duration::from_secs(3600))).await;
    let session = writing_session(&server).await;
    write_a_file(&server, &session).await;
    let id: SessionId = session.parse().expect("session id");
    let steps = server.store.list_step_snapshots(&id).await.expect("rows");
    assert_eq!(steps.len(), 1, "an hour's retention keeps a step just taken");

    // A repository whose project is gone (deleted while the server was down).
    let gone = spool_protocol::ProjectId::new().to_string();
    shadow.take(&gone, &server.project_dir()).expect("a stray repository");

    // Restarted keeping records no time at all: the pass at start takes this one.
    let mut server = server;
    server.options.engine.snapshots = Some(StepSnapshotting::new(shadow.clone()).keeping(Some(Duration::ZERO)));
    let server = server.restart().await;
    let pruned = async {
        while !server.store.list_step_snapshots(&id).await.expect("rows").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, pruned).await.expect("the step record is pruned");
    let forgotten = async {
        while shadow_dir.path().join(&gone).exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, forgotten).await.expect("the deleted project's repository goes");
    // Its objects are younger than the grace: still there for a revert saving them.
    let tree = steps[0].after_tree.clone().expect("after tree");
    let project = steps[0].project_id.to_string();
    assert_eq!(shadow.files(&project, &tree).expect("still readable")["notes.txt"].bytes, b"alpha\n");
}

#[tokio::test]
async fn deleting_a_project_deletes_its_shadow_repository() {
    let shadow_dir = tempfile::tempdir().expect("temp dir");
    let shadow = Arc::new(ShadowRepos::new(shadow_dir.path(), SnapshotLimits::default()));
    let server = server_with(&shadow, None).await;
    let project = server.default_project().await;
    let session = writing_session(&server).await;
    write_a_file(&server, &session).await;
    assert!(shadow_dir.path().join(&project).join("HEAD").is_file(), "the step was recorded");

    let (status, body) = server.delete(&format!("/api/projects/{project}")).await;
    assert_eq!(status, reqwest::StatusCode::NO_CONTENT, "{body}");
    assert!(!shadow_dir.path().join(&project).exists(), "the repository went with its project");
    assert_eq!(shadow.projects().expect("list"), Vec::<String>::new());
}
