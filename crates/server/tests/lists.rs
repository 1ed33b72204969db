//! The list stream `GET /api/workspaces/events` through a real server: a reset first
//! (even with a cursor), notifications for the changes seed 000 lists and none for
//! token deltas, durable read receipts, the shared heartbeat, and the rows' `waiting`
//! flag (a run parked at an approval or question).

use crate::common;

use common::{SseStream, TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

async fn open(server: &TestServer, last_event_id: Option<&str>) -> SseStream {
    let mut req = server.client.get(server.url("/api/workspaces/events"));
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let res = req.send().await.expect("open list stream");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    SseStream::new(res)
}

/// The next list frame (heartbeats skipped), checked against its SSE id.
async fn next(stream: &mut SseStream) -> Value {
    loop {
        let event = stream.next_event().await.expect("list stream ended");
        if event.event.as_deref() == Some("heartbeat") {
            continue;
        }
        let frame: Value = serde_json::from_str(&event.data).expect("JSON frame");
        let id = format!("{}:{}", frame["streamId"].as_str().expect("streamId"), frame["seq"]);
        assert_eq!(event.id.as_deref(), Some(id.as_str()));
        assert!(event.event.is_none(), "business frames have no event field");
        return frame;
    }
}

async fn expect(stream: &mut SseStream, kind: &str, workspace: &str) -> Value {
    let frame = next(stream).await;
    assert_eq!((frame["type"].as_str(), frame["workspaceId"].as_str()), (Some(kind), Some(workspace)), "{frame}");
    frame
}

#[tokio::test]
async fn every_connection_starts_with_a_reset_even_with_a_cursor() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let mut first = open(&server, None).await;
    let reset = next(&mut first).await;
    assert_eq!(reset["type"], "lists.reset");
    server.create_session(&project, Some("one")).await;
    let changed = expect(&mut first, "sessions.changed", &project).await;
    assert_eq!(changed["seq"], reset["seq"].as_u64().expect("seq") + 1);

    let cursor = format!("{}:{}", changed["streamId"].as_str().expect("stream"), changed["seq"]);
    let mut again = open(&server, Some(&cursor)).await;
    let reset = next(&mut again).await;
    assert_eq!(reset["type"], "lists.reset", "no replay buffer: always a reset");
    assert_eq!(reset["seq"], changed["seq"], "at the current seq, without incrementing it");
}

#[tokio::test]
async fn project_and_session_changes_notify_and_deltas_do_not() {
    let server = TestServer::start().await;
    let mut stream = open(&server, None).await;
    next(&mut stream).await;

    let dir = server.new_dir("other");
    let project = id_of(&server.create_project(&dir).await);
    expect(&mut stream, "projects.changed", &project).await;
    server.patch(&format!("/api/projects/{project}"), json!({"name": "Renamed"})).await;
    expect(&mut stream, "projects.changed", &project).await;

    let session = id_of(&server.create_session(&project, Some("s")).await);
    expect(&mut stream, "sessions.changed", &project).await;
    server.patch(&format!("/api/sessions/{session}"), json!({"archived": true})).await;
    expect(&mut stream, "sessions.changed", &project).await;
    server.patch(&format!("/api/sessions/{session}"), json!({"archived": false})).await;
    expect(&mut stream, "sessions.changed", &project).await;

    // A run of 300 deltas: accepted, first user message, state changes, settlement —
    // a handful of notifications, none per delta.
    // A change of another project afterwards marks the end: everything before it is
    // what the run caused.
    server.run_prompt(&session, "stream: 300").await;
    let marker = id_of(&server.create_project(&server.new_dir("marker")).await);
    let mut during = 0;
    loop {
        let frame = next(&mut stream).await;
        if frame["workspaceId"] == marker.as_str() {
            assert_eq!(frame["type"], "projects.changed");
            break;
        }
        assert_eq!(
            (frame["type"].as_str(), frame["workspaceId"].as_str()),
            (Some("sessions.changed"), Some(project.as_str()))
        );
        during += 1;
    }
    assert!((2..=8).contains(&during), "{during} notifications for one run");

    // A read receipt is durable and notifies.
    let (status, body) = server.post(&format!("/api/sessions/{session}/read"), json!({"index": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["readIndex"], 1);
    expect(&mut stream, "sessions.changed", &project).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/read"), json!({"index": 99})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid_index");

    server.delete(&format!("/api/sessions/{session}")).await;
    expect(&mut stream, "sessions.changed", &project).await;
    server.delete(&format!("/api/projects/{project}")).await;
    expect(&mut stream, "projects.changed", &project).await;
}

#[tokio::test]
async fn the_list_stream_has_the_heartbeat() {
    let server =
        TestServer::start_with(TestOptions { heartbeat: Duration::from_millis(300), ..TestOptions::default() }).await;
    let mut stream = open(&server, None).await;
    next(&mut stream).await;
    let event = stream.next_event().await.expect("heartbeat");
    assert_eq!(event.event.as_deref(), Some("heartbeat"));
    assert_eq!(event.data, "{}");
    assert_eq!(event.id, None);
}

/// Whether the session lists as waiting for a person, in its project's list and in a
/// search that finds it.
async fn listed_waiting(server: &TestServer, project: &str, session: &str) -> (bool, bool) {
    let (status, list) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let row = list.as_array().expect("rows").iter().find(|s| s["id"] == session).cloned().expect("listed");
    let (status, found) = server.get("/api/sessions/search?q=parked").await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let hit = found["sessions"].as_array().expect("hits").iter().find(|s| s["id"] == session).cloned().expect("found");
    (row["waiting"].as_bool().expect("a waiting flag"), hit["waiting"].as_bool().expect("a waiting flag"))
}

#[tokio::test]
async fn a_session_parked_at_an_approval_lists_as_waiting_until_it_is_decided() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let parked = id_of(&server.create_session(&project, Some("parked here")).await);
    let other = id_of(&server.create_session(&project, Some("parked not")).await);
    assert_eq!(listed_waiting(&server, &project, &parked).await, (false, false));

    let mut stream = open(&server, None).await;
    next(&mut stream).await;
    let (run_id, approval) = server.park(&parked, "tool: bash {\"command\": \"rm -f x\"}").await;
    // The sidebars hear of it: the list changed.
    expect(&mut stream, "sessions.changed", &project).await;
    assert_eq!(listed_waiting(&server, &project, &parked).await, (true, true));
    assert_eq!(listed_waiting(&server, &project, &other).await, (false, false), "only the parked one waits");

    let (status, body) = server
        .post(&format!("/api/sessions/{parked}/approvals/{}", id_of(&approval)), json!({"decision": "reject"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.wait_run(&run_id).await;
    assert_eq!(listed_waiting(&server, &project, &parked).await, (false, false));
}
