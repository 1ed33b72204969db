//! Steering (issue 40): `POST /api/sessions/{id}/steer` puts a user message into the
//! running run at its next safe boundary, so the model's next request holds it; once,
//! also across a restart; and after the run settled it is an ordinary prompt.

use crate::common;

use async_trait::async_trait;
use common::{
    ModelsOverride, SseStream, TestOptions, TestServer, WAIT, message_rows, recording_server, session_allowing,
    settle_in_store, urlencode,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, Model, ModelError, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use spool_protocol::Message;
use spool_test_support::ag_ui::user_texts;
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

fn write_prompt(path: &str) -> String {
    format!("tool: write {}", json!({"path": path, "content": "x"}))
}

async fn approve(server: &TestServer, session: &str, approval: &Value) {
    let id = approval["id"].as_str().expect("approval id");
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{id}"), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "decide: {body}");
}

/// What a run parked at an approval does with a steer, the server restarted at `when`:
/// the steer enters the resumed run once, after the tool's result, the model's next
/// request ends with it, and no run of its own follows.
async fn a_steer_enters_the_resumed_run(restart_before_steer: bool, restart_after_steer: bool) {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("steered.txt")).await;
    let server = if restart_before_steer { server.restart().await } else { server };
    let answer = steer(&server, &session, "echo: and then this").await;
    assert_eq!(answer["runId"], run_id, "the parked run takes it: {answer}");
    let server = if restart_after_steer { server.restart().await } else { server };
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"].as_array().map_or(0, Vec::len), 1, "still parked: {detail}");

    approve(&server, &session, &approval).await;
    let done = server.wait_run(&run_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let rows = message_rows(&server.messages(&session, "").await);
    let roles: Vec<&str> = rows.iter().map(|(_, role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "toolResult", "user", "assistant"],
        "the steer sits after the tool's result, answered by the same run: {rows:?}"
    );
    assert_eq!(rows[3].2, "echo: and then this");
    assert_eq!(rows[4].2, "and then this");

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2, "two model calls: the tool call and the answer to the steer");
    assert_eq!(last_user_text(&seen[1]), "echo: and then this", "the resumed run's next request holds the steer");
    assert!(matches!(seen[1].messages.last(), Some(Message::User { .. })));

    // No prompt run of its own follows, and the queue is empty.
    let (status, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    assert_eq!(runs.as_array().map_or(0, Vec::len), 1, "one run: {runs}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["queue"].as_array().map_or(0, Vec::len), 0, "{detail}");
    // The session is free: a new prompt is answered at once.
    assert_eq!(server.run_prompt(&session, "echo: free").await["status"], "completed");
    let rows = message_rows(&server.messages(&session, "").await);
    assert_eq!(rows.iter().filter(|(_, _, text)| text == "echo: and then this").count(), 1, "{rows:?}");
}

#[tokio::test]
async fn a_steer_to_a_parked_run_enters_it_when_its_approval_is_decided() {
    a_steer_enters_the_resumed_run(false, false).await;
}

#[tokio::test]
async fn a_steer_to_a_parked_run_enters_it_after_a_restart() {
    a_steer_enters_the_resumed_run(false, true).await;
}

#[tokio::test]
async fn a_steer_sent_after_a_restart_to_the_still_parked_run_enters_it() {
    a_steer_enters_the_resumed_run(true, false).await;
}

/// A run that was executing when the server stopped fails `server_restarted`; its
/// waiting steer is then an ordinary prompt: one run of its own, once.
#[tokio::test]
async fn a_steer_to_a_run_the_restart_ended_runs_once_as_a_prompt() {
    let Gated { server, seen, .. } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let run = server.start_run(&session, "look around").await;
    first_call(&seen).await;
    let answer = steer(&server, &session, "echo: after the crash").await;
    assert_eq!(answer["runId"], run, "{answer}");

    let server = server.restart().await;
    let failed = server.wait_run(&run).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "server_restarted", "{failed}");
    let rows = rows_until(&server, &session, |rows| {
        rows.last().is_some_and(|(_, role, text)| role == "assistant" && text == "after the crash")
    })
    .await;
    let (_, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    let runs = runs.as_array().expect("runs").clone();
    assert_eq!(runs.len(), 2, "the failed run and the steer's own: {runs:?}");
    let own = &server.wait_run(runs[1]["id"].as_str().expect("id")).await;
    assert_eq!(own["status"], "completed", "{own}");
    assert_eq!(rows.iter().filter(|(_, _, text)| text == "echo: after the crash").count(), 1, "{rows:?}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["queue"].as_array().map_or(0, Vec::len), 0, "{detail}");
    // Another prompt afterwards is the third run: nothing else was left to run.
    assert_eq!(server.run_prompt(&session, "echo: next").await["status"], "completed");
    let (_, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    assert_eq!(runs.as_array().map_or(0, Vec::len), 3, "{runs}");
}

/// The crash window: the decision was stored, the process stopped before the run went on.
/// The restarted server resumes the decided call, and the run takes the steer after it.
#[tokio::test]
async fn a_steer_enters_a_run_resumed_from_a_decision_stored_before_a_restart() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("steered.txt")).await;
    steer(&server, &session, "echo: and then this").await;
    settle_in_store(&server, &approval, spool_protocol::Decision::Once).await;
    let server = server.restart().await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let rows = message_rows(&server.messages(&session, "").await);
    let roles: Vec<&str> = rows.iter().map(|(_, role, _)| role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "toolResult", "user", "assistant"], "{rows:?}");
    assert_eq!(rows[3].2, "echo: and then this");
    assert_eq!(last_user_text(seen.lock().expect("lock").last().expect("a request")), "echo: and then this");
    let (_, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    assert_eq!(runs.as_array().map_or(0, Vec::len), 1, "no run of its own: {runs}");
}

/// Every event of an SSE stream that ends by itself, as JSON with its `event:` name.
async fn stream_to_end(res: reqwest::Response) -> Vec<(Option<String>, Value)> {
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let mut out = Vec::new();
    while let Some(event) = stream.next_event().await {
        let data = serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", event.data));
        out.push((event.event, data));
    }
    out
}

fn ag_ui_input(thread: &str, text: &str) -> Value {
    json!({
        "threadId": thread,
        "runId": "client-run",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    })
}

#[tokio::test]
async fn an_ag_ui_stream_shows_the_steer_as_a_user_message_where_the_run_took_it() {
    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let request = server.client.post(server.url("/api/ag-ui")).json(&ag_ui_input(&session, "look around")).send();
    let res = tokio::time::timeout(WAIT, request).await.expect("answers in time").expect("request");
    let reading = tokio::spawn(stream_to_end(res));
    first_call(&seen).await;
    steer(&server, &session, "also check the src folder").await;
    gate.add_permits(1);
    let events: Vec<Value> = reading.await.expect("the stream").into_iter().map(|(_, e)| e).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"), "{kinds:?}");

    let users = user_texts(&events);
    assert_eq!(users.len(), 1, "the steer once, the client's own prompt not sent back: {users:?}");
    assert_eq!(users[0].1, "also check the src folder");
    let start = events.iter().position(|e| e["type"] == "TEXT_MESSAGE_START" && e["role"] == "user").expect("start");
    assert_eq!(events[start - 1]["type"], "TOOL_CALL_RESULT", "after the first tool batch: {kinds:?}");
    assert!(events[start..].iter().any(|e| e["type"] == "TOOL_CALL_START"), "and before the second: {kinds:?}");
}

#[tokio::test]
async fn an_ag_ui_continuation_after_an_interrupt_shows_the_steer_the_resumed_run_took() {
    let (server, _) = recording_server(EngineConfig::default()).await;
    let project = server.default_project().await;
    let mut body = ag_ui_input("thread-steer", &write_prompt("steered.txt"));
    body["forwardedProps"] = json!({"projectId": project});
    let res = server.client.post(server.url("/api/ag-ui")).json(&body).send().await.expect("request");
    let asked: Vec<Value> = stream_to_end(res).await.into_iter().map(|(_, e)| e).collect();
    let end = asked.last().expect("an end");
    assert_eq!(end["outcome"]["type"], "interrupt", "{end}");
    let approval = end["outcome"]["interrupts"][0]["id"].clone();
    let session = asked[1]["snapshot"]["sessionId"].as_str().expect("sessionId").to_owned();
    steer(&server, &session, "echo: and then this").await;

    body["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);
    let res = server.client.post(server.url("/api/ag-ui")).json(&body).send().await.expect("request");
    let rest: Vec<Value> = stream_to_end(res).await.into_iter().map(|(_, e)| e).collect();
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}), "{rest:#?}");
    let users = user_texts(&rest);
    assert_eq!(users.len(), 1, "{rest:#?}");
    assert_eq!(users[0].1, "echo: and then this");
    let answered: String = rest
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["messageId"] != users[0].0.as_str())
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(answered, "and then this", "the run answered the steer: {rest:#?}");
}

#[tokio::test]
async fn a_run_stream_shows_the_steer_as_a_user_message_event_numbered_with_the_run() {
    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let request =
        server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": "look around"}));
    let res = tokio::time::timeout(WAIT, request.send()).await.expect("answers in time").expect("request");
    let reading = tokio::spawn(stream_to_end(res));
    first_call(&seen).await;
    let answer = steer(&server, &session, "also check the src folder").await;
    gate.add_permits(1);
    let events = reading.await.expect("the stream");
    let sequences: Vec<u64> = events.iter().map(|(_, e)| e["sequence"].as_u64().expect("sequence")).collect();
    assert_eq!(sequences, (1..=events.len() as u64).collect::<Vec<_>>(), "dense: {events:#?}");
    assert_eq!(events.last().expect("an end").1["type"], "done");
    let users: Vec<&(Option<String>, Value)> = events.iter().filter(|(_, e)| e["type"] == "user_message").collect();
    assert_eq!(users.len(), 1, "the steer once, the prompt not: {events:#?}");
    let (name, steered) = users[0];
    assert_eq!(name.as_deref(), Some("user_message"));
    assert_eq!(steered["text"], "also check the src folder");
    assert_eq!(steered["messageId"], answer["messageId"]);
    let at = events.iter().position(|(_, e)| e["type"] == "user_message").expect("at");
    assert_eq!(events[at - 1].1["type"], "tool_finished", "after the first tool batch");

    // A re-attach after the event before it gets it under the same number.
    let run = events[0].1["runId"].as_str().expect("runId");
    let after = steered["sequence"].as_u64().expect("sequence") - 1;
    let res =
        server.client.get(server.url(&format!("/api/runs/{run}/events?after={after}"))).send().await.expect("get");
    let again = stream_to_end(res).await;
    assert_eq!(again[0].1, *steered, "{again:#?}");
    assert_eq!(again.len(), events.len() - at, "{again:#?}");
}

fn ai_sdk_chat(chat: &str, text: &str) -> Value {
    json!({
        "id": chat,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    })
}

fn steer_parts(chunks: &[Value]) -> Vec<&Value> {
    chunks.iter().filter(|c| c["type"] == "data-spool-steer").collect()
}

#[tokio::test]
async fn an_ai_sdk_stream_shows_the_steer_as_a_data_part_where_the_run_took_it() {
    let Gated { server, gate, seen } = gated_server().await;
    let session = session_allowing(&server, &["list"]).await;
    let request = server.client.post(server.url("/api/ai-sdk/chat")).json(&ai_sdk_chat(&session, "look around"));
    let res = tokio::time::timeout(WAIT, request.send()).await.expect("answers in time").expect("request");
    let reading = tokio::spawn(read_ai_sdk(res));
    first_call(&seen).await;
    let answer = steer(&server, &session, "also check the src folder").await;
    gate.add_permits(1);
    let chunks = reading.await.expect("the stream");
    assert_eq!(chunks.last().expect("an end")["type"], "finish", "{chunks:#?}");
    let steers = steer_parts(&chunks);
    assert_eq!(steers.len(), 1, "the steer once, the client's own prompt not sent back: {chunks:#?}");
    assert_eq!(steers[0]["data"], json!({"messageId": answer["messageId"], "text": "also check the src folder"}));
    assert!(steers[0]["id"].as_str().is_some_and(|id| !id.is_empty()), "{}", steers[0]);
    let at = chunks.iter().position(|c| c["type"] == "data-spool-steer").expect("at");
    assert!(chunks[..at].iter().any(|c| c["type"] == "tool-output-available"), "after the first tool batch");
    assert!(chunks[at..].iter().any(|c| c["type"] == "tool-input-available"), "and before the second");
}

#[tokio::test]
async fn an_ai_sdk_continuation_after_an_approval_shows_the_steer_the_resumed_run_took() {
    let (server, _) = recording_server(EngineConfig::default()).await;
    let project = server.default_project().await;
    let mut body = ai_sdk_chat("chat-steer", &write_prompt("steered.txt"));
    body["projectId"] = json!(project);
    let res = server.client.post(server.url("/api/ai-sdk/chat")).json(&body).send().await.expect("request");
    let asked = read_ai_sdk(res).await;
    let request = asked.iter().find(|c| c["type"] == "tool-approval-request").expect("an approval request");
    assert!(steer_parts(&asked).is_empty(), "the prompt is the client's own: {asked:#?}");
    let run_id = asked[0]["messageId"].clone();
    let (_, run) = server.get(&format!("/api/runs/{}", run_id.as_str().expect("run id"))).await;
    let session = run["sessionId"].as_str().expect("sessionId").to_owned();
    let answer = steer(&server, &session, "echo: and then this").await;

    let part = json!({
        "type": "dynamic-tool",
        "toolName": "write",
        "toolCallId": request["toolCallId"],
        "state": "approval-responded",
        "input": {},
        "approval": {"id": request["approvalId"], "approved": true},
    });
    body["messages"]
        .as_array_mut()
        .expect("messages")
        .push(json!({"id": run_id, "role": "assistant", "parts": [part]}));
    let res = server.client.post(server.url("/api/ai-sdk/chat")).json(&body).send().await.expect("request");
    let rest = read_ai_sdk(res).await;
    assert_eq!(rest.last().expect("an end"), &json!({"type": "finish", "finishReason": "stop"}), "{rest:#?}");
    let steers = steer_parts(&rest);
    assert_eq!(steers.len(), 1, "{rest:#?}");
    assert_eq!(steers[0]["data"], json!({"messageId": answer["messageId"], "text": "echo: and then this"}));
    let at = rest.iter().position(|c| c["type"] == "data-spool-steer").expect("at");
    let answered: String =
        rest[at..].iter().filter(|c| c["type"] == "text-delta").filter_map(|c| c["delta"].as_str()).collect();
    assert_eq!(answered, "and then this", "the run answered the steer after it: {rest:#?}");
}

/// The chunks of an AI SDK chat stream, up to `[DONE]`.
async fn read_ai_sdk(res: reqwest::Response) -> Vec<Value> {
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let mut out = Vec::new();
    while let Some(event) = tokio::time::timeout(WAIT, stream.next_event()).await.expect("a chunk in time") {
        if event.data == "[DONE]" {
            return out;
        }
        out.push(serde_json::from_str::<Value>(&event.data).expect("a JSON chunk"));
    }
    panic!("the stream ended without [DONE]: {out:#?}")
}
