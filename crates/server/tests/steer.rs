//! Steering (issue 40): `POST /api/sessions/{id}/steer` puts a user message into the
//! running run at its next safe boundary, so the model's next request holds it; once,
//! also across a restart; and after the run settled it is an ordinary prompt.

use crate::common;

use async_trait::async_trait;
use common::{ModelsOverride, SseStream, TestOptions, TestServer, WAIT, message_rows, session_allowing, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Model, ModelError, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use spool_protocol::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// A model whose first chat call waits at a gate the test opens, whose first two chat
/// calls each ask for the `list` tool (unless the last prompt is an `echo:`), and which then answers as the scripted model
/// does; it keeps every chat request it was sent.
struct TwoCalls {
    gate: Arc<Semaphore>,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for TwoCalls {
    fn name(&self) -> String {
        "two-calls".into()
    }
    async fn stream(&self, mut request: ModelRequest) -> Result<ModelStream, ModelError> {
        // Title and summary calls offer no tools: answered plainly, not recorded.
        if request.tools.is_empty() {
            return ScriptedModel::default().stream(request).await;
        }
        let n = {
            let mut seen = self.seen.lock().expect("lock");
            seen.push(request.clone());
            seen.len()
        };
        if n == 1 {
            self.gate.acquire().await.expect("gate").forget();
        }
        if n <= 2 && !last_user_text(&request).starts_with("echo:") {
            // The scripted model names each call after the calls before it.
            request.messages.push(Message::user_text("tool: list {}", 0));
        }
        ScriptedModel::default().stream(request).await
    }
}

struct Gated {
    server: TestServer,
    gate: Arc<Semaphore>,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
}

async fn gated_server() -> Gated {
    let (gate, seen) = (Arc::new(Semaphore::new(0)), Arc::new(Mutex::new(Vec::new())));
    let model = Arc::new(TwoCalls { gate: gate.clone(), seen: seen.clone() });
    let options = TestOptions { models: Some(ModelsOverride(Models::new(model))), ..TestOptions::default() };
    Gated { server: TestServer::start_with(options).await, gate, seen }
}

/// Waits until the first chat request reached the model (the run is in its first call).
async fn first_call(seen: &Mutex<Vec<ModelRequest>>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while seen.lock().expect("lock").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the run never called the model");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn steer(server: &TestServer, session: &str, text: &str) -> Value {
    let (status, body) = server.post(&format!("/api/sessions/{session}/steer"), json!({"text": text})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "steer: {body}");
    body
}

/// Polls the session's messages until `done` holds for their rows.
async fn rows_until(
    server: &TestServer,
    session: &str,
    done: impl Fn(&[(u64, String, String)]) -> bool,
) -> Vec<(u64, String, String)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = message_rows(&server.messages(session, "").await);
        if done(&rows) {
            return rows;
        }
        assert!(tokio::time::Instant::now() < deadline, "the conversation never got there: {rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn last_user_text(request: &ModelRequest) -> String {
    request.messages.iter().rev().find(|m| matches!(m, Message::User { .. })).map(Message::text).unwrap_or_default()
}

#[tokio::test]
async fn a_steer_lands_between_two_tool_calls_and_the_next_model_request_holds_it() {
    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let run = server.start_run(&session, "look around").await;
    first_call(&seen).await;

    let answer = steer(&server, &session, "also check the src folder").await;
    assert_eq!(answer["runId"], run, "the running run takes it: {answer}");
    gate.add_permits(1);
    let done = server.wait_run(&run).await;
    assert_eq!(done["status"], "completed", "{done}");

    let rows = message_rows(&server.messages(&session, "").await);
    let roles: Vec<&str> = rows.iter().map(|(_, role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "toolResult", "user", "assistant", "toolResult", "assistant"],
        "the steer sits after the first tool batch, before the second call: {rows:?}"
    );
    assert_eq!(rows[3].2, "also check the src folder");
    let steered = rows.iter().filter(|(_, _, text)| text == "also check the src folder").count();
    assert_eq!(steered, 1, "the steer lands once: {rows:?}");

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 3, "three model calls");
    assert_eq!(last_user_text(&seen[0]), "look around", "the first call was made before the steer");
    let second = &seen[1];
    assert!(
        matches!(second.messages.last(), Some(Message::User { .. })),
        "the next request ends with the steer: {:?}",
        second.messages.last()
    );
    assert_eq!(last_user_text(second), "also check the src folder");
    // The queue holds nothing any more: the steer was taken, not left as a prompt.
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["queue"].as_array().map_or(0, Vec::len), 0, "{detail}");
}

#[tokio::test]
async fn a_steer_after_the_run_settled_is_an_ordinary_prompt() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let done = server.run_prompt(&session, "echo: first").await;
    assert_eq!(done["status"], "completed", "{done}");

    let answer = steer(&server, &session, "echo: afterwards").await;
    assert_eq!(answer["runId"], Value::Null, "no run was going: {answer}");
    let rows = rows_until(&server, &session, |rows| rows.len() == 4).await;
    assert_eq!(rows[2].1, "user");
    assert_eq!(rows[2].2, "echo: afterwards");
    assert_eq!(rows[2].0, 2);
    assert_eq!(rows[3].1, "assistant");
    assert_eq!(rows[3].2, "afterwards", "it ran as a prompt of its own: {rows:?}");
}

#[tokio::test]
async fn a_steer_survives_a_restart() {
    let Gated { server, seen, .. } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    server.start_run(&session, "look around").await;
    first_call(&seen).await;
    steer(&server, &session, "echo: still there").await;

    // The run never passes its gate: the server stops with the steer untaken.
    let server = server.restart().await;
    let rows = rows_until(&server, &session, |rows| {
        rows.last().is_some_and(|(_, role, text)| role == "assistant" && text == "still there")
    })
    .await;
    let steered = rows.iter().filter(|(_, _, text)| text == "echo: still there").count();
    assert_eq!(steered, 1, "the steer lands once after the restart: {rows:?}");
}

#[tokio::test]
async fn an_opencode_event_client_sees_the_steered_user_message() {
    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let directory = urlencode(&server.project_dir().canonicalize().expect("project").to_string_lossy());
    let res = server.client.get(server.url(&format!("/event?directory={directory}"))).send().await.expect("/event");
    assert_eq!(res.status(), StatusCode::OK);
    let mut events = SseStream::new(res);

    let run = server.start_run(&session, "look around").await;
    first_call(&seen).await;
    steer(&server, &session, "mind the tests too").await;
    gate.add_permits(1);

    // OpenCode names messages its own way: the steer is the user message whose text
    // part says it.
    let seen_steer = async {
        let mut users = Vec::new();
        loop {
            let event = events.next_json().await.expect("OpenCode events go on until the steer shows");
            let properties = &event["properties"];
            match event["type"].as_str() {
                Some("message.updated") if properties["info"]["role"] == "user" => {
                    users.push(properties["info"]["id"].clone());
                }
                Some("message.part.updated") if properties["part"]["text"] == "mind the tests too" => {
                    return (users, properties["part"]["messageID"].clone());
                }
                _ => {}
            }
        }
    };
    let (users, steer_id) = tokio::time::timeout(WAIT, seen_steer).await.expect("the steer shows on /event");
    assert!(users.contains(&steer_id), "its message is a user message: {users:?} {steer_id}");
    assert_eq!(users.len(), 2, "the prompt and the steer: {users:?}");
    assert_eq!(server.wait_run(&run).await["status"], "completed");
}

#[tokio::test]
async fn a_hub_client_hears_the_steer_once_and_taken_by_the_running_run() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message as WsMessage;

    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let url = format!("ws://{}/api/ws?channels={session}", server.addr);
    let (mut ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    let run = server.start_run(&session, "look around").await;
    first_call(&seen).await;
    let answer = steer(&server, &session, "mind the tests too").await;
    let steer_id = answer["messageId"].clone();
    gate.add_permits(1);

    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("the run never finished on the hub: {events:#?}"))
            .expect("the socket is open")
            .expect("a message");
        let WsMessage::Text(text) = message else { continue };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        let done = event["type"] == "agent.status" && event["data"]["status"] == "completed";
        events.push(event);
        if done {
            break;
        }
    }
    let created: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "message.created" && e["data"]["msg_id"] == steer_id).collect();
    assert_eq!(created.len(), 1, "announced once, as it was sent: {created:#?}");
    assert_eq!(created[0]["data"]["content"], "mind the tests too");
    let processed = events
        .iter()
        .find(|e| e["type"] == "messages.processed" && e["data"]["msg_ids"] == json!([steer_id]))
        .expect("messages.processed for the steer");
    assert_eq!(processed["data"]["run_id"], run, "taken by the running run");
}

/// Steers wait at most 8 to a session while its run is busy elsewhere; the ninth is 429
/// `too_many_steers`, and prompts queued behind the run do not count against them.
#[tokio::test]
async fn a_ninth_waiting_steer_is_refused_and_queued_prompts_do_not_count() {
    let Gated { server, seen, .. } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    server.start_run(&session, "look around").await;
    first_call(&seen).await;
    let queued = json!({"text": "echo: later", "queue": true});
    let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), queued).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for n in 0..8 {
        steer(&server, &session, &format!("echo: steer {n}")).await;
    }
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/steer"), json!({"text": "echo: one too many"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "too_many_steers", "{body}");
}
