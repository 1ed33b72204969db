//! Every frame of the native session stream (`GET /api/sessions/:id/events`) is true to
//! the schema Spool publishes for it in `/api/openapi.json`: the `contentSchema` of the
//! stream event's `data`. One scripted session goes through text, thinking, a bash call
//! approved with its live output, an approval rejected, a question answered, todos, the
//! queue with a removed prompt, plan mode's `exit_plan`, a cancelled run and a title; a
//! second server's run fails (more answer than it allows), and a third's project changes
//! its git state. Every frame is checked (issue 37: a published schema that Spool's own
//! frames break fails here), with the hub conformance test's validator (the `jsonschema` crate).

use crate::common;
use crate::hub_conformance::{check, validator};

use common::{Open, TestServer, id_of};
use serde_json::{Value, json};
use spool_test_support::SseStream;

/// Reads frames into `seen` until `stop` holds for one; returns that one.
async fn until(stream: &mut SseStream, seen: &mut Vec<Value>, stop: impl Fn(&Value) -> bool) -> Value {
    loop {
        let frame = stream.next_json().await.unwrap_or_else(|| panic!("the stream ended; so far {seen:#?}"));
        seen.push(frame.clone());
        if stop(&frame) {
            return frame;
        }
    }
}

fn event(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |f| f["type"] == "loop.event" && f["event"]["type"] == kind
}

async fn decide(server: &TestServer, session: &str, asked: &Value, decision: Value) {
    let id = asked["event"]["approval"]["id"].as_str().expect("approval id");
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{id}"), json!({ "decision": decision })).await;
    assert_eq!(status, 200, "{body}");
}

/// Everything one scripted session streams.
async fn a_whole_session(server: &TestServer) -> Vec<Value> {
    let project = server.default_project().await;
    // Untitled: the title the model proposes arrives as `session_title`.
    let session = id_of(&server.create_session(&project, None).await);
    let mut stream = server.events(&session, Open::fresh()).await;
    let mut seen = Vec::new();
    let settled = event("agent_settled");

    server.start_run(&session, "think: weighing the options | the answer is here").await;
    until(&mut stream, &mut seen, &settled).await;
    if !seen.iter().any(event("session_title")) {
        until(&mut stream, &mut seen, event("session_title")).await;
    }

    server.start_run(&session, &format!("tool: bash {}", json!({"command": "echo one; echo two"}))).await;
    let asked = until(&mut stream, &mut seen, event("approval_requested")).await;
    decide(server, &session, &asked, json!("once")).await;
    until(&mut stream, &mut seen, &settled).await;
    assert!(seen.iter().any(event("tool_execution_update")), "the command's live output");

    server.start_run(&session, &format!("tool: write {}", json!({"path": "no.txt", "content": "x"}))).await;
    let asked = until(&mut stream, &mut seen, event("approval_requested")).await;
    decide(server, &session, &asked, json!("reject")).await;
    until(&mut stream, &mut seen, &settled).await;

    let question = json!({"question": "Pick", "options": [{"label": "A"}]});
    server.start_run(&session, &format!("tool: question {question}")).await;
    let asked = until(&mut stream, &mut seen, event("approval_requested")).await;
    decide(server, &session, &asked, json!({"fill": {"answer": "A"}})).await;
    until(&mut stream, &mut seen, &settled).await;

    let todos = json!({"todos": [{"content": "Read", "status": "completed"}, {"content": "Write", "status": "pending"}]});
    server.start_run(&session, &format!("tool: todo_write {todos}")).await;
    until(&mut stream, &mut seen, &settled).await;

    // The queue: a parked run, two prompts queued behind it, one of them removed.
    server.start_run(&session, &format!("tool: write {}", json!({"path": "a.txt", "content": "x"}))).await;
    let parked = until(&mut stream, &mut seen, event("approval_requested")).await;
    let mut queued = Vec::new();
    for text in ["echo: never", "echo: kept"] {
        let (status, body) =
            server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": text, "queue": true})).await;
        assert_eq!(status, 202, "{body}");
        queued.push(body["messageId"].as_str().expect("messageId").to_owned());
    }
    let (status, _) = server.delete(&format!("/api/messages/{}", queued[0])).await;
    assert_eq!(status, 204);
    until(&mut stream, &mut seen, |f| f["type"] == "session.queue" && f["change"]["kind"] == "deleted").await;
    decide(server, &session, &parked, json!("once")).await;
    until(&mut stream, &mut seen, &settled).await;
    until(&mut stream, &mut seen, &settled).await;

    // Plan mode: the plan asks through `exit_plan`, rejected here.
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "plan"})).await;
    assert_eq!(status, 200, "{body}");
    server.start_run(&session, &format!("tool: exit_plan {}", json!({"plan": "# Plan\n1. edit"}))).await;
    let asked = until(&mut stream, &mut seen, event("approval_requested")).await;
    decide(server, &session, &asked, json!("reject")).await;
    until(&mut stream, &mut seen, &settled).await;
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "agent"})).await;
    assert_eq!(status, 200, "{body}");

    // A cancelled run: parked at an approval, then stopped.
    server.start_run(&session, &format!("tool: write {}", json!({"path": "b.txt", "content": "x"}))).await;
    until(&mut stream, &mut seen, event("approval_requested")).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    until(&mut stream, &mut seen, &settled).await;
    seen
}

/// A run that fails: more answer than the server allows.
async fn a_failed_run() -> Vec<Value> {
    let engine = spool_engine::EngineConfig { max_answer_bytes: 64, ..Default::default() };
    let server = TestServer::start_with(common::TestOptions { engine, ..Default::default() }).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    let mut seen = Vec::new();
    server.start_run(&session, "stream: 500").await;
    let end = until(&mut stream, &mut seen, event("agent_end")).await;
    assert_eq!(end["event"]["status"], "failed", "{end}");
    until(&mut stream, &mut seen, event("agent_settled")).await;
    seen
}

/// A project's git state changing under a session (`session.git`).
async fn a_git_change() -> Vec<Value> {
    let server = TestServer::start_with(common::git_polling(std::time::Duration::from_millis(50))).await;
    let dir = server.new_dir("repo");
    common::git_repo(&dir, &[("a.txt", "one\n")]);
    let project = id_of(&server.create_project(&dir).await);
    let session = id_of(&server.create_session(&project, Some("git")).await);
    server.wait_git_primed(&session).await;
    let mut stream = server.events(&session, Open::fresh()).await;
    let mut seen = Vec::new();
    std::fs::write(dir.join("a.txt"), "one\ntwo\n").expect("write");
    until(&mut stream, &mut seen, |f| f["type"] == "session.git").await;
    seen
}

#[tokio::test]
async fn every_native_frame_matches_its_published_schema() {
    let server = TestServer::start().await;
    let (status, doc) = server.get("/api/openapi.json").await;
    assert_eq!(status, 200);
    let response = &doc["paths"]["/api/sessions/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"];
    let reference = response["schema"]["$ref"].as_str().expect("the stream event is a $ref");
    let stream_event = doc.pointer(reference.trim_start_matches('#')).expect("the stream event's schema");
    assert!(
        stream_event["properties"]["data"]["contentSchema"].is_object(),
        "the stream event's `data` names no frame schema: {stream_event:#}"
    );
    let frame = validator(&doc, &format!("{reference}/properties/data/contentSchema"));

    let mut frames = a_whole_session(&server).await;
    frames.extend(a_failed_run().await);
    frames.extend(a_git_change().await);

    let mut broken = Vec::new();
    for f in &frames {
        if let Err(why) = check(&frame, f) {
            broken.push(format!("{} {}: {why}", f["type"], f["event"]["type"]));
        }
    }
    // The check bites: a delta without its stream event is refused.
    let update = frames.iter().find(|f| event("message_update")(f)).expect("a message_update");
    let mut doctored = update.clone();
    doctored["event"].as_object_mut().expect("event").remove("assistantMessageEvent");
    assert!(check(&frame, &doctored).is_err(), "refused: {doctored}");
    broken.dedup();
    assert!(broken.is_empty(), "frames the published schema refuses:\n{}", broken.join("\n"));

    // The scenario reached every frame and loop event a session sends.
    let kinds: std::collections::BTreeSet<String> = frames
        .iter()
        .map(|f| match f["event"]["type"].as_str() {
            Some(event) => event.to_owned(),
            None => f["type"].as_str().expect("type").to_owned(),
        })
        .collect();
    for kind in [
        "session.snapshot", "session.state", "run.accepted", "session.queue", "session.git", "agent_start",
        "turn_start", "message_start", "message_update", "message_end", "tool_execution_start",
        "tool_execution_update", "tool_execution_end", "turn_end", "agent_end", "prompt_timing", "agent_settled",
        "session_title", "todo_write", "approval_requested", "approval_resolved",
    ] {
        assert!(kinds.contains(kind), "no {kind} was seen: {kinds:?}");
    }
}
