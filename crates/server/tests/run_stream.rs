//! The run stream of seed 003 through a real server on a real port: `POST /api/chat`
//! answers with `event:` / `data:` SSE numbered 1, 2, 3 …, ends after `interrupt`,
//! `done` or `error`, and `GET /api/runs/:id/events?after=N` re-attaches with exactly
//! the missed events — or, once the run's frames left the buffer, a snapshot.

mod common;

use common::{SseStream, TestOptions, TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;
use std::collections::HashMap;
use std::time::Duration;

/// One received run-stream event.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    kind: String,
    data: Value,
}

impl Event {
    fn sequence(&self) -> u64 {
        self.data["sequence"].as_u64().unwrap_or_else(|| panic!("no sequence: {}", self.data))
    }
}

async fn open_chat(server: &TestServer, body: Value) -> reqwest::Response {
    let request = server.client.post(server.url("/api/chat")).json(&body).send();
    tokio::time::timeout(WAIT, request).await.expect("chat answers in time").expect("chat request")
}

async fn open_events(server: &TestServer, run: &str, query: &str) -> reqwest::Response {
    let request = server.client.get(server.url(&format!("/api/runs/{run}/events{query}"))).send();
    tokio::time::timeout(WAIT, request).await.expect("re-attach answers in time").expect("re-attach request")
}

/// Checks the stream's headers and returns it for reading.
fn run_stream(res: reqwest::Response) -> SseStream {
    assert_eq!(res.status(), StatusCode::OK);
    let stream = SseStream::new(res);
    assert_eq!(stream.header("content-type"), "text/event-stream; charset=utf-8");
    assert_eq!(stream.header("cache-control"), "no-cache, no-transform");
    stream
}

/// The next event, with its SSE framing checked: `event:` is the JSON `type` and the
/// SSE id is the sequence. `None` when the stream ended.
async fn next(stream: &mut SseStream) -> Option<Event> {
    let raw = stream.next_event().await?;
    let data: Value = serde_json::from_str(&raw.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", raw.data));
    let kind = raw.event.unwrap_or_else(|| panic!("an event without `event:`: {data}"));
    assert_eq!(data["type"], kind.as_str(), "event: matches the JSON type");
    assert_eq!(raw.id, Some(data["sequence"].to_string()), "the SSE id is the sequence");
    assert!(data["runId"].as_str().is_some_and(|r| r.starts_with("run_")), "{data}");
    Some(Event { kind, data })
}

async fn read_to_end(stream: &mut SseStream) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(e) = next(stream).await {
        events.push(e);
    }
    events
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

fn assert_dense(events: &[Event], from: u64) {
    let got: Vec<u64> = events.iter().map(Event::sequence).collect();
    let want: Vec<u64> = (from..from + events.len() as u64).collect();
    assert_eq!(got, want, "dense sequence: {:?}", kinds(events));
}

fn text_of(events: &[Event]) -> String {
    events.iter().filter(|e| e.kind == "text_delta").map(|e| e.data["delta"].as_str().expect("delta")).collect()
}

fn run_id(events: &[Event]) -> String {
    events[0].data["runId"].as_str().expect("runId").to_owned()
}

/// The text of the run's assistant messages as stored, and the id of the last one.
async fn stored_answer(server: &TestServer, session: &str) -> (String, String) {
    let page = server.messages(session, "?limit=500").await;
    let messages = page["messages"].as_array().expect("messages");
    let start = messages.iter().rposition(|m| m["role"] == "user").expect("a user message");
    let assistants: Vec<&Value> = messages[start..].iter().filter(|m| m["role"] == "assistant").collect();
    let text = assistants
        .iter()
        .flat_map(|m| m["content"].as_array().expect("content").iter())
        .filter(|c| c["type"] == "text")
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    (text, id_of(assistants.last().expect("an assistant message")))
}

/// Replaces ids and clock values with stable placeholders, for golden snapshots.
fn normalize(value: &Value, ids: &mut HashMap<String, String>) -> Value {
    match value {
        Value::String(s) if s.len() == 30 && s.as_bytes()[3] == b'_' => {
            let n = ids.len() + 1;
            Value::String(ids.entry(s.clone()).or_insert_with(|| format!("<{} {n}>", &s[..3])).clone())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let clock = matches!(k.as_str(), "expiresAt" | "timestamp" | "duration_ms");
                    (k.clone(), if clock && v.is_number() { json!("<ms>") } else { normalize(v, ids) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| normalize(v, ids)).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn chat_streams_a_run_as_seed_003_events_ending_with_done() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let res = open_chat(
        &server,
        json!({"projectId": project, "text": "tool: read {\"path\":\"README.md\"}", "requestId": "golden-1"}),
    )
    .await;
    let mut stream = run_stream(res);
    let events = read_to_end(&mut stream).await;
    assert_dense(&events, 1);
    assert_eq!(kinds(&events).first(), Some(&"run_started"));
    assert_eq!(kinds(&events).last(), Some(&"done"));
    let session = events[0].data["sessionId"].as_str().expect("sessionId").to_owned();
    let (text, message_id) = stored_answer(&server, &session).await;
    assert_eq!(text_of(&events), text, "the deltas add up to the stored answer");
    assert_eq!(events.last().expect("done").data["messageId"], message_id.as_str());
    let finished = events.iter().find(|e| e.kind == "tool_finished").expect("tool_finished");
    assert_eq!(finished.data["status"], "success");
    assert_eq!(finished.data["summary"], "# Test project (+1 more line)");

    let mut ids = HashMap::new();
    let golden: Vec<Value> = events
        .iter()
        .filter(|e| e.kind != "text_delta" || e.sequence() <= 4)
        .map(|e| normalize(&e.data, &mut ids))
        .collect();
    insta::assert_json_snapshot!(golden);
}

#[tokio::test]
async fn chat_refusals_are_json_and_leave_nothing_behind() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let cases = [
        (json!({"text": "hi"}), StatusCode::BAD_REQUEST, "missing_session"),
        (json!({"projectId": project, "text": "  "}), StatusCode::BAD_REQUEST, "empty_prompt"),
        (json!({"sessionId": "ses_01jd0000000000000000000000", "text": "hi"}), StatusCode::NOT_FOUND, "not_found"),
        (json!({"projectId": "prj_nope", "text": "hi"}), StatusCode::NOT_FOUND, "not_found"),
        (json!({"projectId": project}), StatusCode::BAD_REQUEST, "invalid_body"),
    ];
    for (body, status, code) in cases {
        let (got, error) = server.send(server.client.post(server.url("/api/chat")).json(&body)).await;
        assert_eq!((got, error["error"]["code"].as_str()), (status, Some(code)), "{body}");
    }
    let (_, sessions) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(sessions, json!([]), "a refused chat creates no session");

    // A prompt while a run is active is refused the same way.
    let session = server.new_session().await;
    let mut view = server.events(&session, common::Open { approvals: true, ..Default::default() }).await;
    view.next_frame().await.expect("snapshot");
    let parked =
        open_chat(&server, json!({"sessionId": session, "text": "tool: write {\"path\":\"a\",\"content\":\"b\"}"}))
            .await;
    let events = read_to_end(&mut run_stream(parked)).await;
    assert_eq!(kinds(&events).last(), Some(&"interrupt"));
    let (status, error) = server
        .send(server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": "hi"})))
        .await;
    assert_eq!((status, error["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("session_busy")));
}

#[tokio::test]
async fn an_interrupt_ends_the_stream_and_the_continuation_follows_the_decision() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut view = server.events(&session, common::Open { approvals: true, ..Default::default() }).await;
    view.next_frame().await.expect("snapshot");
    let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    assert_dense(&first, 1);
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    assert_eq!(interrupt.data["kind"], "confirm_action");
    assert!(interrupt.data["payload"]["change"].as_str().is_some_and(|c| c.contains("out.txt")), "{}", interrupt.data);
    let run = run_id(&first);

    // Re-attaching while it waits: the same events, the same numbers, the same end.
    let again = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    assert_eq!(again, first);
    let nothing =
        read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={}", interrupt.sequence())).await))
            .await;
    assert_eq!(nothing, vec![], "nothing after the interrupt yet, and the run still waits");

    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let (status, body) = server
        .post(
            &format!("/api/runs/{run}/resume"),
            json!({"interruptId": approval, "decision": "approve", "idempotencyKey": "once"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = interrupt.sequence();
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={after}")).await)).await;
    assert_dense(&rest, after + 1);
    assert_eq!(kinds(&rest)[..2], ["tool_started", "tool_finished"]);
    assert_eq!(kinds(&rest).last(), Some(&"done"));
    assert_eq!(std::fs::read_to_string(server.project_dir().join("out.txt")).expect("written"), "hello");

    // From the start, a decided interrupt no longer ends the stream.
    let whole = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    let mut joined = first.clone();
    joined.extend(rest);
    assert_eq!(whole, joined);
}

/// Seed 003: a plain reject only changes states. The run ends `cancelled` with an
/// `error` event, and the call that never ran is never said to have started.
#[tokio::test]
async fn a_plain_reject_cancels_the_run_and_no_tool_starts() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt = format!("tool: write {}", json!({"path": "no.txt", "content": "x"}));
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    let run = run_id(&first);
    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let (status, body) = server
        .post(
            &format!("/api/runs/{run}/resume"),
            json!({"interruptId": approval, "decision": "reject", "idempotencyKey": "no"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = interrupt.sequence();
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={after}")).await)).await;
    assert_eq!(kinds(&rest), ["tool_finished", "error"], "nothing starts; the call ends, then the run");
    assert_eq!(rest[0].data["status"], "error", "{}", rest[0].data);
    assert_eq!(rest[1].data["code"], "approval_rejected", "{}", rest[1].data);
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    assert!(!server.project_dir().join("no.txt").exists());
}

#[tokio::test]
async fn a_client_that_drops_mid_run_reattaches_to_exactly_what_it_missed() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 60", "requestId": "drop-1"})).await,
    );
    let mut seen = Vec::new();
    while seen.len() < 10 {
        seen.push(next(&mut stream).await.expect("an event"));
    }
    drop(stream);
    let run = run_id(&seen);

    // Last-Event-ID (what an EventSource sends) beats the query.
    let request = server
        .client
        .get(server.url(&format!("/api/runs/{run}/events?after=1")))
        .header("last-event-id", seen.last().expect("seen").sequence().to_string());
    let res = tokio::time::timeout(WAIT, request.send()).await.expect("in time").expect("re-attach");
    let rest = read_to_end(&mut run_stream(res)).await;
    assert_dense(&rest, 11);
    seen.extend(rest);
    assert_eq!(kinds(&seen).last(), Some(&"done"));
    let (text, _) = stored_answer(&server, &session).await;
    assert_eq!(text_of(&seen), text, "no delta repeated, none missing");

    // A retried POST with the same requestId follows the same run: the same events.
    let retried = read_to_end(&mut run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 60", "requestId": "drop-1"})).await,
    ))
    .await;
    assert_eq!(retried, seen);
}

#[tokio::test]
async fn once_the_runs_frames_left_the_buffer_a_reattach_gets_a_snapshot() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(1), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    // 600 deltas: far more than the 256-frame replay buffer.
    let mut stream = run_stream(open_chat(&server, json!({"sessionId": session, "text": "stream: 600"})).await);
    let mut seen = Vec::new();
    while seen.len() < 400 {
        seen.push(next(&mut stream).await.expect("an event"));
    }
    drop(stream);
    let run = run_id(&seen);
    let mut again = run_stream(open_events(&server, &run, "?after=400").await);
    let snapshot = next(&mut again).await.expect("snapshot");
    assert_eq!(snapshot.kind, "snapshot");
    assert_eq!(snapshot.sequence(), 401, "numbered after the client's own last event");
    assert!(matches!(snapshot.data["status"].as_str(), Some("running" | "completed")), "{}", snapshot.data);
    let text_so_far = snapshot.data["text"].as_str().expect("text").to_owned();
    assert!(text_so_far.starts_with(&text_of(&seen)), "the snapshot covers what the client drew");
    let rest = read_to_end(&mut again).await;
    let mut after_snapshot = vec![snapshot];
    after_snapshot.extend(rest);
    assert_dense(&after_snapshot, 401);
    assert_eq!(kinds(&after_snapshot).last(), Some(&"done"));
    let (text, _) = stored_answer(&server, &session).await;
    assert_eq!(text_so_far + &text_of(&after_snapshot), text, "snapshot text plus live deltas is the answer");

    // Long after: snapshot, then done, then the end.
    let settled = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    assert_eq!(kinds(&settled), ["snapshot", "done"]);
    assert_eq!(settled[0].data["status"], "completed");
    assert_eq!(settled[0].data["text"], text.as_str());
    assert_eq!(settled[0].sequence(), 1);
}

#[tokio::test]
async fn a_failed_run_ends_with_its_error_and_keep_alives_fill_the_silence() {
    let engine = EngineConfig { max_turns: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions {
        engine,
        heartbeat: Duration::from_millis(50),
        model_delay: Duration::from_millis(150),
        ..TestOptions::default()
    })
    .await;
    let session = server.new_session().await;
    // One model call is allowed; the tool result needs a second.
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "tool: read {\"path\":\"README.md\"}"})).await,
    );
    let events = read_to_end(&mut stream).await;
    assert_dense(&events, 1);
    let error = events.last().expect("events");
    assert_eq!(error.kind, "error", "{:?}", kinds(&events));
    assert_eq!(error.data["code"], "max_turns_exceeded");
    assert!(error.data["message"].as_str().is_some_and(|m| !m.is_empty()));
    let raw = String::from_utf8_lossy(&stream.raw);
    assert!(raw.contains("\n\n: keep-alive\n\n") || raw.starts_with(": keep-alive\n\n"), "{raw}");
}

#[tokio::test]
async fn on_disconnect_cancel_cancels_the_run_when_the_chat_stream_goes() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 2000", "onDisconnect": "cancel"})).await,
    );
    let started = next(&mut stream).await.expect("run_started");
    next(&mut stream).await.expect("a delta");
    drop(stream);
    let run = server.wait_run(started.data["runId"].as_str().expect("runId")).await;
    assert_eq!(run["status"], "cancelled");
    // The re-attach tells how it ended.
    let after = read_to_end(&mut run_stream(open_events(&server, &id_of(&run), "?after=2").await)).await;
    assert_eq!(kinds(&after).last(), Some(&"error"));
    assert_eq!(after.last().expect("error").data["code"], "cancelled");
}

#[tokio::test]
async fn reattaching_to_someone_elses_or_no_run_is_a_404() {
    let server = TestServer::start().await;
    for id in ["run_01jd0000000000000000000000", "nope"] {
        let (status, body) = server.get(&format!("/api/runs/{id}/events")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    }
    let (status, body) = server.get("/api/runs/run_01jd0000000000000000000000/events?after=x").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_query")));
}
