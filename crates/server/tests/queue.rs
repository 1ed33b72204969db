//! The message queue (issue 16) through a real server: prompts sent with `queue: true`
//! while a run is going wait in the session's state, run in order, each once, and a
//! WebSocket hub client hears `messages.processed` as each is taken; a removed one never
//! runs and the hub hears `message.deleted`; Stop pauses the queue until Resume or the
//! next queued prompt (issue 36); a full
//! queue and an oversized prompt are refused; the queue survives a restart.
//!
//! A run that parks at an approval (`tool: write …`) keeps the session busy for as long
//! as the test wants, so nothing here depends on timing: every wait is on an event.

use crate::common;

use common::{TestOptions, TestServer, WAIT, id_of};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::store::Runs;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A prompt that parks its run at an approval: the session stays busy until it is decided.
const PARKS: &str = "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}";

/// The server's options here. The reaper passes every half lease and also starts
/// queues no run took (the fallback after a crash); a long lease keeps it out of these
/// tests, so what starts each queued prompt is the run before it settling.
fn options() -> TestOptions {
    let engine = spool_engine::EngineConfig { lease_ttl: Duration::from_secs(3600), ..Default::default() };
    TestOptions { engine, ..TestOptions::default() }
}

async fn hub(server: &TestServer, session: &str) -> Ws {
    let url = format!("ws://{}/api/ws?channels={session}", server.addr);
    let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    ws
}

/// Hub events until `stop` holds for one (pings skipped), that one included.
async fn hub_until(ws: &mut Ws, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no hub event within {WAIT:?}; so far {events:#?}"))
            .expect("the socket is open")
            .expect("a message");
        let Message::Text(text) = message else { continue };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        let done = stop(&event);
        events.push(event);
        if done {
            return events;
        }
    }
}

fn is_type(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["type"] == kind
}

fn finished(e: &Value) -> bool {
    e["type"] == "agent.status" && e["data"]["status"] != "running"
}

async fn titled_session(server: &TestServer) -> String {
    let project = server.default_project().await;
    id_of(&server.create_session(&project, Some("queue test")).await)
}

async fn queue(server: &TestServer, session: &str, text: &str, request_id: Option<&str>) -> (StatusCode, Value) {
    let mut body = json!({"text": text, "queue": true});
    if let Some(r) = request_id {
        body["requestId"] = json!(r);
    }
    server.post(&format!("/api/sessions/{session}/prompt"), body).await
}

/// Queues `text` and returns the queued message's id; panics unless it was queued.
async fn queued(server: &TestServer, session: &str, text: &str, position: u64) -> String {
    let (status, answer) = queue(server, session, text, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!((answer["queued"].clone(), answer["position"].clone()), (json!(true), json!(position)), "{answer}");
    answer["messageId"].as_str().expect("messageId").to_owned()
}

/// Starts a run that parks at an approval; returns the approval's id once the hub says so.
async fn park(server: &TestServer, session: &str, ws: &mut Ws) -> String {
    let (status, body) = server.prompt(session, PARKS, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let events = hub_until(ws, is_type("gate.approval_requested")).await;
    events.last().expect("an event")["data"]["req_id"].as_str().expect("req_id").to_owned()
}

async fn approve(server: &TestServer, session: &str, approval: &str) {
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn queue_texts(server: &TestServer, session: &str) -> Vec<String> {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let queue = detail["state"]["queue"].as_array().cloned().unwrap_or_default();
    queue.iter().map(|q| q["text"].as_str().expect("text").to_owned()).collect()
}

/// The user messages of the session's history, in order.
async fn prompts(server: &TestServer, session: &str) -> Vec<(String, String)> {
    let page = server.messages(session, "?limit=500").await;
    let messages = page["messages"].as_array().expect("messages").clone();
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| (id_of(m), m["content"][0]["text"].as_str().expect("text").to_owned()))
        .collect()
}

#[tokio::test]
async fn queued_prompts_run_in_order_each_once_and_the_hub_hears_each_taken() {
    let server = TestServer::start_with(options()).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    let approval = park(&server, &session, &mut ws).await;

    // Busy: without `queue` it is still refused; with it, it waits.
    let (status, refused) = server.prompt(&session, "echo: not now", None).await;
    assert_eq!((status, refused["error"]["code"].clone()), (StatusCode::CONFLICT, json!("session_busy")));
    let (status, second) = queue(&server, &session, "echo: second", Some("q-2")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{second}");
    assert_eq!(second["queued"], true);
    assert_eq!((second["requestId"].clone(), second["position"].clone()), (json!("q-2"), json!(1)));
    let second_id = second["messageId"].as_str().expect("messageId").to_owned();
    // The same requestId again queues nothing: the same message, at the same place.
    assert_eq!(queue(&server, &session, "echo: second", Some("q-2")).await, (StatusCode::ACCEPTED, second.clone()));
    let third_id = queued(&server, &session, "echo: third", 2).await;
    assert_eq!(queue_texts(&server, &session).await, ["echo: second", "echo: third"]);

    approve(&server, &session, &approval).await;
    let mut events = Vec::new();
    for _ in 0..3 {
        events.extend(hub_until(&mut ws, finished).await);
    }
    let seen: Vec<(String, Value)> = events
        .iter()
        .filter(|e| {
            e["type"] == "messages.processed"
                || e["type"] == "agent.status"
                || (e["type"] == "message.created" && e["data"]["role"] == "user")
        })
        .map(|e| {
            let what = match e["type"].as_str() {
                Some("messages.processed") => e["data"]["msg_ids"].clone(),
                Some("agent.status") => e["data"]["status"].clone(),
                _ => json!([e["data"]["msg_id"], e["data"]["content"]]),
            };
            (e["type"].as_str().expect("type").to_owned(), what)
        })
        .collect();
    let event = |kind: &str, what: Value| (kind.to_owned(), what);
    assert_eq!(
        seen,
        [
            // Announced as they are queued (seed 002: `is_processed: false`), once.
            event("message.created", json!([second_id, "echo: second"])),
            event("message.created", json!([third_id, "echo: third"])),
            event("agent.status", json!("completed")),
            event("messages.processed", json!([second_id])),
            event("agent.status", json!("running")),
            event("agent.status", json!("completed")),
            event("messages.processed", json!([third_id])),
            event("agent.status", json!("running")),
            event("agent.status", json!("completed")),
        ]
    );
    // The runs are the queued prompts' own, under their request ids.
    let processed: Vec<&Value> = events.iter().filter(|e| e["type"] == "messages.processed").collect();
    let (status, run) =
        server.get(&format!("/api/runs/{}", processed[0]["data"]["run_id"].as_str().expect("run"))).await;
    assert_eq!(
        (status, run["requestId"].clone(), run["status"].clone()),
        (StatusCode::OK, json!("q-2"), json!("completed"))
    );

    // Each ran once, in order, as the message it was queued as; the queue is empty.
    let history = prompts(&server, &session).await;
    let expected = [(second_id, "echo: second".to_owned()), (third_id, "echo: third".to_owned())];
    assert_eq!(history[1..], expected);
    assert_eq!(history.len(), 3);
    assert_eq!(queue_texts(&server, &session).await, Vec::<String>::new());
    // A retry of a prompt that ran gets its run, not a second one.
    let (status, again) = queue(&server, &session, "echo: second", Some("q-2")).await;
    assert_eq!((status, again["runId"].clone()), (StatusCode::ACCEPTED, run["id"].clone()));
    assert_eq!(prompts(&server, &session).await.len(), 3);
}

#[tokio::test]
async fn a_removed_message_never_runs_and_only_a_queued_one_can_be_removed() {
    let server = TestServer::start_with(options()).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    let approval = park(&server, &session, &mut ws).await;
    let doomed = queued(&server, &session, "echo: never", 1).await;
    let kept = queued(&server, &session, "echo: kept", 2).await;

    let (status, _) = server.delete(&format!("/api/messages/{doomed}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deleted = hub_until(&mut ws, is_type("message.deleted")).await;
    assert_eq!(deleted.last().expect("event")["data"]["msg_id"], json!(doomed));
    assert_eq!(deleted.last().expect("event")["channel_id"], json!(session));
    assert_eq!(queue_texts(&server, &session).await, ["echo: kept"]);
    // Gone is gone: a second delete, an unknown id and a malformed one are all 404.
    for id in [doomed.clone(), "msg_00000000000000000000000000".into(), "nope".into()] {
        let (status, body) = server.delete(&format!("/api/messages/{id}")).await;
        assert_eq!((status, body["error"]["code"].clone()), (StatusCode::NOT_FOUND, json!("not_found")), "{id}");
    }

    approve(&server, &session, &approval).await;
    let mut events = hub_until(&mut ws, finished).await;
    events.extend(hub_until(&mut ws, finished).await);
    let processed: Vec<Value> =
        events.iter().filter(|e| e["type"] == "messages.processed").map(|e| e["data"]["msg_ids"].clone()).collect();
    assert_eq!(processed, [json!([kept])]);
    let texts: Vec<String> = prompts(&server, &session).await.into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, [PARKS, "echo: kept"], "the removed prompt never ran");

    // A message a run took is history now: not removable, and removing it changes nothing.
    let (status, body) = server.delete(&format!("/api/messages/{kept}")).await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::NOT_FOUND, json!("not_found")));
    let after: Vec<String> = prompts(&server, &session).await.into_iter().map(|(_, t)| t).collect();
    assert_eq!(after, texts);
    // No `message.deleted` went out for it: the next hub event is the next run's.
    server.start_run(&session, "echo: last").await;
    let next = hub_until(&mut ws, |_| true).await;
    assert_eq!((next[0]["type"].clone(), next[0]["data"]["status"].clone()), (json!("agent.status"), json!("running")));
}

/// The session's queue and whether it is paused, as `GET /api/sessions/:id` has them.
async fn queue_state(server: &TestServer, session: &str) -> (Vec<String>, bool) {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    (queue_texts(server, session).await, detail["state"]["queuePaused"] == json!(true))
}

/// Stop (issue 36): the queued prompt does not start behind the person's back — not
/// when the stopped run settles, not after a restart — until Resume, which runs it.
#[tokio::test]
async fn stop_pauses_the_queue_until_it_is_resumed() {
    let server = TestServer::start_with(options()).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    park(&server, &session, &mut ws).await;
    let next = queued(&server, &session, "echo: after the stop", 1).await;

    let (status, aborted) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!((status, aborted["aborted"].clone()), (StatusCode::OK, json!(true)));
    let stopped = hub_until(&mut ws, finished).await;
    assert_eq!(stopped.last().expect("event")["data"]["status"], "cancelled");
    assert_eq!(queue_state(&server, &session).await, (vec!["echo: after the stop".to_owned()], true));
    // The stopped run's settling would start the queue within milliseconds: for a
    // second, it never does.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while tokio::time::Instant::now() < deadline {
        let texts: Vec<String> = prompts(&server, &session).await.into_iter().map(|(_, t)| t).collect();
        assert_eq!(texts, [PARKS], "nothing started after Stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nor does a restart (start-up starts the queues no run took).
    drop(ws);
    let server = server.restart().await;
    assert_eq!(queue_state(&server, &session).await, (vec!["echo: after the stop".to_owned()], true));

    let mut ws = hub(&server, &session).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/queue/resume"), json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let taken = hub_until(&mut ws, is_type("messages.processed")).await;
    assert_eq!(taken.last().expect("event")["data"]["msg_ids"], json!([next]));
    let ran = hub_until(&mut ws, finished).await;
    assert_eq!(ran.last().expect("event")["data"]["status"], "completed");
    let texts: Vec<String> = prompts(&server, &session).await.into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, [PARKS, "echo: after the stop"]);
    assert_eq!(queue_state(&server, &session).await, (vec![], false));
}

/// A prompt sent with `queue: true` to a paused queue joins its end and lets it go on,
/// in order; Stop with an empty queue pauses nothing.
#[tokio::test]
async fn a_prompt_sent_to_a_paused_queue_joins_it_and_the_queue_goes_on() {
    let server = TestServer::start_with(options()).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    park(&server, &session, &mut ws).await;
    queued(&server, &session, "echo: waiting", 1).await;
    let (status, _) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    hub_until(&mut ws, finished).await;
    assert_eq!(queue_state(&server, &session).await, (vec!["echo: waiting".to_owned()], true));

    queued(&server, &session, "echo: new", 2).await;
    for _ in 0..2 {
        let ran = hub_until(&mut ws, finished).await;
        assert_eq!(ran.last().expect("event")["data"]["status"], "completed");
    }
    let texts: Vec<String> = prompts(&server, &session).await.into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, [PARKS, "echo: waiting", "echo: new"]);

    park(&server, &session, &mut ws).await;
    server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    hub_until(&mut ws, finished).await;
    assert_eq!(queue_state(&server, &session).await, (vec![], false), "nothing queued, nothing paused");
}

#[tokio::test]
async fn a_full_queue_and_an_oversized_prompt_are_refused_and_change_nothing() {
    let mut options = options();
    (options.engine.max_queued, options.engine.max_prompt_bytes) = (2, 1000);
    let server = TestServer::start_with(options).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    park(&server, &session, &mut ws).await;
    queued(&server, &session, "echo: one", 1).await;
    queued(&server, &session, "echo: two", 2).await;

    let (status, full) = queue(&server, &session, "echo: three", None).await;
    assert_eq!((status, full["error"]["code"].clone()), (StatusCode::TOO_MANY_REQUESTS, json!("queue_full")), "{full}");
    let (status, large) = queue(&server, &session, &"x".repeat(1001), None).await;
    assert_eq!((status, large["error"]["code"].clone()), (StatusCode::PAYLOAD_TOO_LARGE, json!("prompt_too_large")));
    let (status, empty) = queue(&server, &session, "  ", None).await;
    assert_eq!((status, empty["error"]["code"].clone()), (StatusCode::BAD_REQUEST, json!("empty_prompt")));
    assert_eq!(queue_texts(&server, &session).await, ["echo: one", "echo: two"]);
}

/// A graceful stop while a run streams (what `spool serve` does on SIGTERM): the
/// stopping server starts nothing from the queue, and the restarted one runs the queued
/// prompt, once. (A SIGKILL is `crates/cli/tests/crash.rs`.)
#[tokio::test]
async fn the_queue_survives_a_restart_and_runs_after_it() {
    let options = TestOptions { model_delay: Duration::from_millis(20), ..options() };
    let server = TestServer::start_with(options).await;
    let session = titled_session(&server).await;
    let mut ws = hub(&server, &session).await;
    let run = server.start_run(&session, "stream: 5000").await;
    hub_until(&mut ws, is_type("message.streaming")).await;
    let waiting = queued(&server, &session, "echo: after the restart", 1).await;
    drop(ws);

    assert_eq!(server.engine.stop_runs(WAIT).await, 1);
    let stopped = server.wait_run(&run).await;
    assert_eq!(
        (stopped["status"].clone(), stopped["error"]["code"].clone()),
        (json!("failed"), json!("server_stopped"))
    );
    assert_eq!(queue_texts(&server, &session).await, ["echo: after the restart"], "a stopping server starts nothing");
    let server = server.restart().await;
    assert_eq!(queue_texts(&server, &session).await.len(), 0, "taken at start-up");
    let deadline = tokio::time::Instant::now() + WAIT;
    let ran = loop {
        let history = prompts(&server, &session).await;
        if let Some(ran) = history.iter().find(|(id, _)| id == &waiting).cloned() {
            break ran;
        }
        assert!(tokio::time::Instant::now() < deadline, "the queued prompt never ran: {history:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ran.1, "echo: after the restart");
    let runs = server.store.runs_since(&session.parse().expect("id"), 0).await.expect("runs");
    assert_eq!(runs.len(), 2, "the stopped run and the queued prompt's, once: {runs:?}");
    let taken = runs.iter().find(|r| r.id.as_str() != run).expect("the queued prompt's run");
    assert_eq!(server.wait_run(taken.id.as_str()).await["status"], "completed");
}
