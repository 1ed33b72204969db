//! The stream carries the whole state: a client that takes a snapshot and applies every
//! frame after it (`view::apply_frame`) ends with exactly the state a fresh snapshot
//! shows — over streamed text, tool calls that succeed and fail, an approval decided,
//! an aborted run, a message queue, and enough rounds that old ones leave the snapshot.
//! A state change that published no frame, or a frame a client cannot apply, fails here.

use crate::common;

use common::{Open, ReceivedFrame, SseStream, TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::view::apply_frame;
use spool_protocol::SessionState;
use spool_protocol::frame::Frame;
use std::time::Duration;

/// A client's view: a snapshot plus every frame since.
struct Follower {
    stream: SseStream,
    state: SessionState,
    /// The seq of the last frame applied.
    seq: u64,
    frames: usize,
}

impl Follower {
    async fn open(server: &TestServer, session: &str) -> Follower {
        let mut stream = server.events(session, Open::fresh()).await;
        let snapshot = stream.next_frame().await.expect("snapshot");
        assert_eq!(snapshot.kind, "session.snapshot");
        let state = serde_json::from_value(snapshot.json["state"].clone()).expect("snapshot state");
        Follower { stream, state, seq: snapshot.seq, frames: 0 }
    }

    /// Applies frames up to and including the first for which `stop` holds.
    async fn follow_until(&mut self, stop: impl Fn(&ReceivedFrame) -> bool) {
        for frame in self.stream.frames_until(stop).await {
            let parsed: Frame = serde_json::from_value(frame.json.clone()).expect("a frame a client can read");
            apply_frame(&mut self.state, &parsed.body);
            self.seq = parsed.seq;
            self.frames += 1;
        }
    }

    async fn follow_run(&mut self) {
        self.follow_until(|f| f.event_type() == Some("agent_settled")).await;
    }
}

fn comparable(state: &SessionState) -> Value {
    serde_json::to_value(state).expect("state")
}

/// Takes a fresh snapshot (at some seq, mid-run or not), brings the follower to that
/// same seq and compares. Frames are dense, so "the same seq" is one exact point.
async fn assert_matches_a_fresh_snapshot(server: &TestServer, session: &str, follower: &mut Follower) -> Value {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK);
    let seq = detail["seq"].as_u64().expect("seq");
    if follower.seq < seq {
        follower.follow_until(|f| f.seq >= seq).await;
    }
    assert_eq!(follower.seq, seq, "the follower passed the snapshot's seq");
    let fresh: SessionState = serde_json::from_value(detail["state"].clone()).expect("state");
    assert_eq!(
        comparable(&follower.state),
        comparable(&fresh),
        "at seq {seq}, after {} frames, the folded state differs from a fresh snapshot",
        follower.frames
    );
    detail
}

/// Runs `prompt` and compares the follower with fresh snapshots all through the run.
async fn run_checking(server: &TestServer, session: &str, follower: &mut Follower, prompt: &str) -> Value {
    let run = server.start_run(session, prompt).await;
    loop {
        let detail = assert_matches_a_fresh_snapshot(server, session, follower).await;
        if detail["status"] == "idle" {
            let (_, run) = server.get(&format!("/api/runs/{run}")).await;
            return run;
        }
    }
}

async fn titled(server: &TestServer) -> String {
    let project = server.default_project().await;
    id_of(&server.create_session(&project, Some("fold")).await)
}

#[tokio::test]
async fn text_tools_and_old_rounds_fold_to_the_snapshot() {
    let options = TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = titled(&server).await;
    let (status, _) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut follower = Follower::open(&server, &session).await;
    let prompts = [
        "stream: 40".to_owned(),
        "echo: a short answer".to_owned(),
        format!("tool: bash {}", json!({"command": "echo from the tool"})),
        format!("tool: bash {}", json!({"command": "echo failing >&2; exit 3"})),
        "tool: read {\"path\": \"README.md\"}".to_owned(),
        format!("tool: todo_write {}", json!({"todos": [{"content": "fold it", "status": "in_progress"}]})),
    ];
    for prompt in &prompts {
        let run = run_checking(&server, &session, &mut follower, prompt).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    assert!(follower.state.first_index > 0, "old rounds left the snapshot: {}", follower.state.first_index);
    assert_eq!(follower.state.todos.len(), 1, "the todo list folded in");
}

#[tokio::test]
async fn an_approval_decided_and_an_aborted_run_fold_to_the_snapshot() {
    let options = TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = titled(&server).await;
    let mut follower = Follower::open(&server, &session).await;

    let write = format!("tool: write {}", json!({"path": "folded.txt", "content": "x"}));
    let run = server.start_run(&session, &write).await;
    follower.follow_until(|f| f.event_type() == Some("approval_requested")).await;
    // The parked state (a pending card, an interrupted run) is a state too.
    if follower.state.pending_approvals.is_empty() {
        follower
            .follow_until(|f| f.kind == "session.state" && f.json["state"]["pendingApprovals"][0].is_object())
            .await;
    }
    assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;
    let approval = id_of(&follower.state.pending_approvals.first().map(|a| json!({"id": a.id})).expect("card"));
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "always"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    follower.follow_run().await;
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;

    let run = server.start_run(&session, "stream: 5000").await;
    follower.follow_until(|f| f.event_type() == Some("message_update")).await;
    let (status, _) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    follower.follow_run().await;
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;
}

#[tokio::test]
async fn a_queue_that_grows_shrinks_and_runs_folds_to_the_snapshot() {
    let server = TestServer::start().await;
    let session = titled(&server).await;
    let mut follower = Follower::open(&server, &session).await;
    let write = format!("tool: write {}", json!({"path": "queued.txt", "content": "x"}));
    let run = server.start_run(&session, &write).await;
    follower.follow_until(|f| f.event_type() == Some("approval_requested")).await;
    let queue = |text: &'static str| {
        let server = &server;
        let session = &session;
        async move {
            let body = json!({"text": text, "queue": true});
            let (status, answer) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
            assert_eq!((status, answer["queued"].clone()), (StatusCode::ACCEPTED, json!(true)), "{answer}");
            answer["messageId"].as_str().expect("messageId").to_owned()
        }
    };
    queue("echo: first queued").await;
    let second = queue("echo: second queued").await;
    let detail = assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;
    assert_eq!(detail["state"]["queue"].as_array().map(Vec::len), Some(2), "{detail}");
    let (status, _) = server.delete(&format!("/api/messages/{second}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;

    let approval = id_of(&follower.state.pending_approvals.first().map(|a| json!({"id": a.id})).expect("card"));
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    follower.follow_run().await;
    follower.follow_run().await;
    let detail = assert_matches_a_fresh_snapshot(&server, &session, &mut follower).await;
    assert!(detail["state"]["queue"].is_null(), "{detail}");
    let texts: Vec<String> =
        follower.state.messages.iter().filter(|m| m.message.is_user()).map(|m| m.message.text()).collect();
    assert_eq!(texts, [write, "echo: first queued".to_owned()]);
}
