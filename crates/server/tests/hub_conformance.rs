//! Every WebSocket hub event Spool sends is true to the schema Spool publishes for it in
//! `/api/openapi.json` (`HubEvent`: one envelope per type, its `data` the type's
//! payload schema). One scripted session goes through everything a session emits —
//! text, thinking, a prompt with a file, a tool call with live output (approved), an
//! approval rejected, a question, a plan, todos, the queue with a removed prompt, a
//! cancelled run, a title, its deletion —, a second server's run fails after a retry,
//! and a third's project changes its git state; every frame a client of every session
//! receives is collected and checked. A published schema that Spool's
//! own events break fails here.
//!
//! The schemas are checked by the `jsonschema` crate, with the whole document registered
//! so that their `$ref`s resolve; an event doctored to break its schema is refused, which
//! shows the check bites.
//!
//! A second client asks for seed 002's cumulative form (`?streaming=content`); its
//! events are checked too, and its `content` is the answer so far.

use crate::common;

use common::{TestServer, WAIT, id_of};
use futures::StreamExt;
use serde_json::{Value, json};
use spool_test_support::{End, Fake, Reply, openai_delta, openai_sse};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A hub client of every session of the server's user.
async fn every_session(server: &TestServer, query: &str) -> Ws {
    let url = format!("ws://{}/api/ws{query}", server.addr);
    let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    ws
}

/// Reads events into `seen` until `stop` holds for one; returns that one.
async fn until(ws: &mut Ws, seen: &mut Vec<Value>, stop: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no hub event within {WAIT:?}; so far {seen:#?}"))
            .expect("the socket is open")
            .expect("a message");
        let Message::Text(text) = message else { continue };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        seen.push(event.clone());
        if stop(&event) {
            return event;
        }
    }
}

fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["type"] == kind
}

fn settled(e: &Value) -> bool {
    e["type"] == "agent.status" && e["data"]["status"] != "running"
}

async fn decide(server: &TestServer, session: &str, approval: &Value, decision: Value) {
    let id = approval["data"]["req_id"].as_str().expect("req_id");
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{id}"), json!({ "decision": decision })).await;
    assert_eq!(status, 200, "{body}");
}

/// Everything one scripted session emits, as a client of every session hears it.
async fn a_whole_session(server: &TestServer) -> Vec<Value> {
    let mut ws = every_session(server, "").await;
    let mut cumulative = every_session(server, "?streaming=content").await;
    let mut seen = Vec::new();
    let project = server.default_project().await;
    // Untitled: the title the model proposes arrives as `channel.updated`.
    let session = id_of(&server.create_session(&project, None).await);
    until(&mut ws, &mut seen, is("channel.created")).await;

    server.start_run(&session, "think: weighing the options | the answer is here").await;
    until(&mut ws, &mut seen, settled).await;
    if !seen.iter().any(|e| e["type"] == "channel.updated") {
        until(&mut ws, &mut seen, |e| e["type"] == "channel.updated" && e["data"]["title"].is_string()).await;
    }

    // A prompt with a file: its `message.created` lists it under `attachments`.
    let file = json!({"type": "file", "url": "data:text/plain;base64,bGluZSBvbmUK", "name": "app.log"});
    let (status, body) = server
        .post(&format!("/api/sessions/{session}/prompt"), json!({"text": "echo: seen", "parts": [file.clone()]}))
        .await;
    assert_eq!(status, 202, "{body}");
    let with_file = |e: &Value| e["type"] == "message.created" && e["data"]["attachments"].is_array();
    let created = until(&mut ws, &mut seen, with_file).await;
    let attachment = &created["data"]["attachments"][0];
    assert_eq!(
        (&attachment["name"], &attachment["mediaType"], &attachment["size"]),
        (&json!("app.log"), &json!("text/plain"), &json!(9))
    );
    until(&mut ws, &mut seen, settled).await;

    server.start_run(&session, &format!("tool: bash {}", json!({"command": "echo one; echo two"}))).await;
    let asked = until(&mut ws, &mut seen, is("gate.approval_requested")).await;
    decide(server, &session, &asked, json!("once")).await;
    until(&mut ws, &mut seen, settled).await;

    server.start_run(&session, &format!("tool: write {}", json!({"path": "no.txt", "content": "x"}))).await;
    let asked = until(&mut ws, &mut seen, is("gate.approval_requested")).await;
    decide(server, &session, &asked, json!("reject")).await;
    until(&mut ws, &mut seen, settled).await;

    let question = json!({"question": "Which colour?", "options": [{"label": "red"}, {"label": "blue"}]});
    server.start_run(&session, &format!("tool: question {question}")).await;
    let asked = until(&mut ws, &mut seen, is("agent.ask_user")).await;
    decide(server, &session, &asked, json!({"fill": {"answer": "green"}})).await;
    until(&mut ws, &mut seen, settled).await;

    let todos =
        json!({"todos": [{"content": "Read", "status": "completed"}, {"content": "Write", "status": "pending"}]});
    server.start_run(&session, &format!("tool: todo_write {todos}")).await;
    until(&mut ws, &mut seen, settled).await;

    // The queue: a parked run, two prompts queued behind it, one of them removed.
    server.start_run(&session, &format!("tool: write {}", json!({"path": "a.txt", "content": "x"}))).await;
    let parked = until(&mut ws, &mut seen, is("gate.approval_requested")).await;
    let mut queued = Vec::new();
    for (text, parts) in [("echo: never", json!([])), ("echo: kept", json!([file]))] {
        let body = json!({"text": text, "queue": true, "parts": parts});
        let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
        assert_eq!(status, 202, "{body}");
        queued.push(body["messageId"].as_str().expect("messageId").to_owned());
    }
    // The one queued with a file is announced with it.
    let kept = |e: &Value| e["type"] == "message.created" && e["data"]["msg_id"] == json!(queued[1]);
    let announced = until(&mut ws, &mut seen, kept).await;
    assert_eq!(announced["data"]["is_processed"], false);
    assert_eq!(announced["data"]["attachments"][0]["name"], "app.log", "{announced}");
    let (status, _) = server.delete(&format!("/api/messages/{}", queued[0])).await;
    assert_eq!(status, 204);
    until(&mut ws, &mut seen, is("message.deleted")).await;
    decide(server, &session, &parked, json!("once")).await;
    until(&mut ws, &mut seen, settled).await;
    until(&mut ws, &mut seen, settled).await;

    // Plan mode: the plan is an `agent.exit_plan` card, rejected here.
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "plan"})).await;
    assert_eq!(status, 200, "{body}");
    server.start_run(&session, &format!("tool: exit_plan {}", json!({"plan": "# Plan\n1. edit"}))).await;
    let asked = until(&mut ws, &mut seen, is("agent.exit_plan")).await;
    decide(server, &session, &asked, json!("reject")).await;
    until(&mut ws, &mut seen, settled).await;
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "agent"})).await;
    assert_eq!(status, 200, "{body}");

    // A cancelled run: parked at an approval, then stopped.
    server.start_run(&session, &format!("tool: write {}", json!({"path": "b.txt", "content": "x"}))).await;
    until(&mut ws, &mut seen, is("gate.approval_requested")).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    until(&mut ws, &mut seen, settled).await;

    let (status, _) = server.delete(&format!("/api/sessions/{session}")).await;
    assert!(status.is_success(), "{status}");
    until(&mut ws, &mut seen, is("channel.deleted")).await;

    let mut content = Vec::new();
    until(&mut cumulative, &mut content, is("channel.deleted")).await;
    let last = |kind: &str| content.iter().rev().find(|e| e["type"] == kind).expect(kind)["data"].clone();
    let thought = content.iter().find(|e| e["type"] == "agent.thinking" && e["data"]["text"] == "weighing the options");
    assert!(thought.is_some(), "the thinking block so far, whole: {content:#?}");
    let answer =
        content.iter().find(|e| e["type"] == "message.streaming" && e["data"]["content"] == "the answer is here");
    assert!(answer.is_some(), "the answer so far, whole: {content:#?}");
    assert!(last("message.streaming")["delta"].is_null(), "no pieces in the content form");
    seen.extend(content);
    seen
}

/// A run that fails (a provider whose stream is cut after a retried 503).
async fn a_failed_run() -> Vec<Value> {
    let busy = Reply::Status { status: 503, headers: vec![], body: r#"{"error":{"message":"overloaded"}}"#.into() };
    let partial = openai_sse(&[openai_delta(json!({"content": "The first half"}))]);
    let partial = partial.trim_end_matches("data: [DONE]\n\n").as_bytes().to_vec();
    let fake = Fake::start(vec![busy, Reply::Stream { pieces: vec![partial], end: End::Cut }]).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let session = server.new_session().await;
    let mut ws = every_session(&server, "").await;
    let mut seen = Vec::new();
    server.start_run(&session, "write a lot").await;
    let end = until(&mut ws, &mut seen, settled).await;
    assert_eq!(end["data"]["status"], "errored", "{end}");
    seen
}

/// A project's git state changing under a session (the git poller's `channel.updated`).
async fn a_git_change() -> Vec<Value> {
    let server = TestServer::start_with(common::git_polling(std::time::Duration::from_millis(50))).await;
    let dir = server.new_dir("repo");
    common::git_repo(&dir, &[("a.txt", "one\n")]);
    let project = id_of(&server.create_project(&dir).await);
    let session = id_of(&server.create_session(&project, Some("git")).await);
    let mut ws = every_session(&server, "").await;
    let mut seen = Vec::new();
    server.wait_git_primed(&session).await;
    std::fs::write(dir.join("a.txt"), "one\ntwo\n").expect("write");
    until(&mut ws, &mut seen, |e| e["type"] == "channel.updated" && e["data"]["diff_additions"] == 1).await;
    seen
}

#[tokio::test]
async fn every_hub_event_matches_its_published_schema() {
    let server = TestServer::start().await;
    let (status, doc) = server.get("/api/openapi.json").await;
    assert_eq!(status, 200);
    let mut events = a_whole_session(&server).await;
    events.extend(a_failed_run().await);
    events.extend(a_git_change().await);

    // One validator per envelope of `HubEvent`, by the type it names.
    let envelopes = doc["components"]["schemas"]["HubEvent"]["oneOf"].as_array().expect("HubEvent is a oneOf");
    let validators: std::collections::BTreeMap<&str, jsonschema::Validator> = envelopes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = s["properties"]["type"]["enum"][0].as_str().expect("an envelope names its type");
            (kind, validator(&doc, &format!("#/components/schemas/HubEvent/oneOf/{i}")))
        })
        .collect();
    let schema_of = |kind: &str| validators.get(kind).unwrap_or_else(|| panic!("no schema for {kind}"));
    let mut problems = Vec::new();
    for event in &events {
        let kind = event["type"].as_str().expect("type");
        if let Err(why) = check(schema_of(kind), event) {
            problems.push(format!("{kind}: {why}\n    {event}"));
        }
    }
    // The check bites: a message without its id, or an envelope with a field it does not
    // name, is refused.
    let created = events.iter().find(|e| e["type"] == "message.created").expect("a message.created");
    let mut doctored = created.clone();
    doctored["data"].as_object_mut().expect("data").remove("msg_id");
    assert!(check(schema_of("message.created"), &doctored).is_err(), "refused: {doctored}");
    let mut doctored = created.clone();
    doctored["extra"] = json!(1);
    assert!(check(schema_of("message.created"), &doctored).is_err(), "refused: {doctored}");
    let kinds: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    // What a publisher names and the publish route answers with: the wire names.
    let published = doc["components"]["schemas"]["HubEventType"]["enum"].as_array().expect("HubEventType's names");
    for kind in kinds.iter().filter(|k| !["channel.snapshot", "subscribed", "channel.error", "error"].contains(k)) {
        assert!(published.contains(&json!(kind)), "HubEventType lacks {kind}: {published:?}");
    }
    for expected in [
        "channel.created",
        "channel.updated",
        "channel.deleted",
        "agent.status",
        "agent.activity",
        "agent.thinking",
        "message.created",
        "message.streaming",
        "message.deleted",
        "messages.processed",
        "tool.use",
        "tool.result",
        "gate.approval_requested",
        "gate.approval_resolved",
        "agent.ask_user",
        "agent.exit_plan",
        "agent.todo_write",
    ] {
        assert!(kinds.contains(expected), "the session emitted no {expected}: {kinds:?}");
    }
    assert!(
        problems.is_empty(),
        "{} of {} events break their schema:\n{}",
        problems.len(),
        events.len(),
        problems.join("\n")
    );
}

#[tokio::test]
async fn a_queued_prompt_is_announced_unprocessed_then_processed_once() {
    let server = TestServer::start().await;
    let mut ws = every_session(&server, "").await;
    let mut seen = Vec::new();
    let session = server.new_session().await;
    server.start_run(&session, &format!("tool: write {}", json!({"path": "a.txt", "content": "x"}))).await;
    let parked = until(&mut ws, &mut seen, is("gate.approval_requested")).await;
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": "echo: later", "queue": true})).await;
    assert_eq!(status, 202, "{body}");
    let id = body["messageId"].clone();
    let created = until(&mut ws, &mut seen, is("message.created")).await;
    assert_eq!(created["channel_id"], session.as_str());
    let data = &created["data"];
    assert_eq!((&data["msg_id"], &data["content"]), (&id, &json!("echo: later")), "{created}");
    assert_eq!((&data["is_bot"], &data["is_processed"]), (&json!(false), &json!(false)), "{created}");

    decide(&server, &session, &parked, json!("once")).await;
    until(&mut ws, &mut seen, settled).await;
    let mut later = Vec::new();
    until(&mut ws, &mut later, settled).await;
    let processed = later.iter().find(|e| e["type"] == "messages.processed").expect("messages.processed");
    assert_eq!(processed["data"]["msg_ids"], json!([id]));
    let again: Vec<&Value> =
        later.iter().filter(|e| e["type"] == "message.created" && e["data"]["msg_id"] == id).collect();
    assert!(again.is_empty(), "the prompt was announced once, when queued: {again:?}");
}

// ---- the published schemas, checked by the `jsonschema` crate ---------------------------

/// Where the OpenAPI document is registered, so that its schemas' `#/components/schemas/…`
/// `$ref`s resolve in it.
const DOCUMENT: &str = "urn:spool:openapi";

/// The validator of the schema at `pointer` (`#/components/schemas/…`, a JSON pointer into
/// the OpenAPI document `doc`), as JSON Schema 2020-12, which OpenAPI 3.1 writes.
pub(crate) fn validator(doc: &Value, pointer: &str) -> jsonschema::Validator {
    assert!(doc.pointer(pointer.trim_start_matches('#')).is_some(), "no schema at {pointer}");
    let registry = jsonschema::Registry::new()
        .add(DOCUMENT, doc.clone())
        .and_then(|r| r.prepare())
        .expect("the OpenAPI document is a schema resource");
    jsonschema::options()
        .offline()
        .with_registry(&registry)
        .build(&json!({"$ref": format!("{DOCUMENT}{pointer}")}))
        .unwrap_or_else(|e| panic!("the schema at {pointer} is not valid JSON Schema: {e}"))
}

/// Checks `value` against `validator`; the error names the path of every value that breaks it.
pub(crate) fn check(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    let why: Vec<String> = validator
        .iter_errors(value)
        .map(|e| match e.instance_path().as_str() {
            "" => e.to_string(),
            path => format!("{path}: {e}"),
        })
        .collect();
    if why.is_empty() { Ok(()) } else { Err(why.join("; ")) }
}
