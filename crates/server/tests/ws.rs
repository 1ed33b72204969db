//! The WebSocket hub of seed 002 through a real server on a real port, with a real
//! WebSocket client: the envelope and event types, channel filters and their
//! replacement, global channel events, reconnecting with cursors (exactly the missed
//! events, or a snapshot), the Origin check, and a client that stops reading cut while
//! another gets every event.

use crate::common;

use common::{TestOptions, TestServer, WAIT, id_of};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn ws_url(server: &TestServer, query: &str) -> String {
    format!("ws://{}/api/ws{query}", server.addr)
}

async fn connect(server: &TestServer, query: &str) -> Ws {
    let (ws, res) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(ws_url(server, query)))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    assert_eq!(res.status(), 101);
    ws
}

/// The next hub event (pings skipped), checked to be the seed's envelope.
async fn recv(ws: &mut Ws) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no WebSocket message within {WAIT:?}"))
            .expect("the socket is open")
            .expect("a message");
        let text = match message {
            Message::Text(text) => text,
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected message {other:?}"),
        };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        assert!(event["type"].is_string() && event["channel_id"].is_string(), "{event}");
        assert!(event["timestamp"].as_i64().is_some_and(|t| t > 1_700_000_000_000), "{event}");
        assert!(event.as_object().is_some_and(|o| o.contains_key("data")), "{event}");
        return event;
    }
}

async fn recv_until(ws: &mut Ws, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = recv(ws).await;
        let done = stop(&event);
        events.push(event);
        if done {
            return events;
        }
    }
}

async fn send(ws: &mut Ws, message: Value) {
    ws.send(Message::Text(message.to_string().into())).await.expect("send");
}

fn is_settled(e: &Value) -> bool {
    e["type"] == "agent.status" && e["data"]["status"] != "running"
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().expect("type")).collect()
}

/// The `message.streaming` deltas of one message, checked to be contiguous by offset.
fn streamed_text(events: &[Value]) -> String {
    let mut text = String::new();
    for e in events.iter().filter(|e| e["type"] == "message.streaming") {
        let offset = e["data"]["offset"].as_u64().expect("offset") as usize;
        assert_eq!(offset, text.encode_utf16().count(), "no hole and no repeat: {e}");
        text.push_str(e["data"]["delta"].as_str().expect("delta"));
    }
    text
}

async fn stored_text(server: &TestServer, session: &str) -> String {
    let page = server.messages(session, "?limit=500").await;
    let last = page["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "assistant").cloned();
    let content = last.expect("an assistant message")["content"].as_array().expect("content").clone();
    content.iter().filter(|c| c["type"] == "text").map(|c| c["text"].as_str().expect("text")).collect()
}

/// A session with a title, so no asynchronous title event lands among a run's events.
async fn titled_session(server: &TestServer) -> String {
    let project = server.default_project().await;
    id_of(&server.create_session(&project, Some("hub test")).await)
}

#[tokio::test]
async fn a_runs_events_arrive_in_the_seed_002_envelope() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    server.start_run(&session, "tool: read {\"path\":\"README.md\"}").await;
    let events = recv_until(&mut ws, is_settled).await;
    for e in &events {
        assert_eq!(e["channel_id"], session.as_str());
        assert!(e["cursor"].as_str().is_some_and(|c| c.starts_with("stm_")), "{e}");
    }
    assert_eq!(streamed_text(&events), stored_text(&server, &session).await);
    let status = events.last().expect("agent.status");
    assert_eq!(status["data"]["status"], "completed");
    assert_eq!(status["data"]["num_turns"], 2);
    assert_eq!(status["data"]["stop_reason"], "end_turn");
    assert_eq!(status["data"]["model"], "scripted");
    assert!(status["data"]["duration_ms"].as_i64().is_some_and(|d| d >= 0));

    let golden: Vec<&Value> =
        events.iter().filter(|e| e["type"] != "message.streaming" || e["data"]["offset"] == 0).collect();
    let mut settings = spool_test_support::golden::settings();
    settings.add_redaction(".**.cursor", "<cursor>");
    // Token counts follow the context assembly, not this dialect.
    settings.add_redaction(".**.usage", "<usage>");
    settings.bind(|| insta::assert_json_snapshot!(golden));
}

#[tokio::test]
async fn a_question_is_an_ask_user_card_with_its_options() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    let args = json!({"question": "Which file?", "options": [{"label": "a.txt"}, {"label": "b.txt"}]});
    server.start_run(&session, &format!("tool: question {args}")).await;
    let events = recv_until(&mut ws, |e| e["type"] == "agent.ask_user").await;
    let card = &events.last().expect("agent.ask_user")["data"];
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(card["req_id"], detail["state"]["pendingApprovals"][0]["id"], "the id to answer with");
    assert_eq!(card["questions"][0]["question"], "Which file?");
    assert_eq!(
        card["questions"][0]["options"],
        json!([{"label": "a.txt", "description": null}, {"label": "b.txt", "description": null}])
    );
    assert_eq!(card["questions"][0]["multi_select"], false);
}

#[tokio::test]
async fn a_plan_to_accept_is_an_exit_plan_card() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "plan"})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    let args = json!({"plan": "# Plan\n\n1. Add notes.txt"});
    server.start_run(&session, &format!("tool: exit_plan {args}")).await;
    let events = recv_until(&mut ws, |e| e["type"] == "agent.exit_plan").await;
    let card = &events.last().expect("agent.exit_plan")["data"];
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(card["req_id"], detail["state"]["pendingApprovals"][0]["id"], "the id to answer with");
    assert_eq!(card["plan"], "# Plan\n\n1. Add notes.txt");
    assert!(!kinds(&events).contains(&"gate.approval_requested"), "a plan is not a tool gate: {:?}", kinds(&events));
}

#[tokio::test]
async fn messages_and_statuses_carry_the_seed_fields_with_the_stored_ids() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    server.start_run(&session, "echo: hello hub").await;
    let events = recv_until(&mut ws, is_settled).await;
    let page = server.messages(&session, "").await;
    let stored = page["messages"].as_array().expect("messages");
    let id_at = |role: &str| stored.iter().find(|m| m["role"] == role).expect("stored")["id"].clone();
    let (user_id, answer_id) = (id_at("user"), id_at("assistant"));
    let created: Vec<&Value> = events.iter().filter(|e| e["type"] == "message.created").collect();
    assert_eq!(created.len(), 2, "{events:?}");

    let asked = &created[0]["data"];
    assert_eq!(asked["msg_id"], user_id, "the stored message's id");
    assert_eq!(asked["author_id"], server.engine.local_user().to_string());
    assert_eq!(asked["author_name"], "local");
    assert_eq!(asked["content"], "echo: hello hub");
    assert_eq!(
        (&asked["is_bot"], &asked["is_processed"], &asked["priority"]),
        (&json!(false), &json!(true), &json!(0))
    );
    assert_eq!(asked["trigger_msg_id"], Value::Null);

    let answered = &created[1]["data"];
    assert_eq!(answered["msg_id"], answer_id);
    assert_eq!((&answered["author_id"], &answered["is_bot"]), (&json!("spool"), &json!(true)));
    assert_eq!(answered["trigger_msg_id"], user_id, "the answer names the prompt it answers");
    assert_eq!(answered["content"], stored_text(&server, &session).await);

    let status = &events.last().expect("agent.status")["data"];
    assert_eq!(status["status"], "completed");
    assert_eq!(status["trigger_content"], "echo: hello hub");
    assert_eq!(status["msg_id"], user_id);
    assert_eq!(status["num_turns"], 1);
    assert_eq!(status["model"], "scripted");
    assert!(status.as_object().is_some_and(|o| o.contains_key("thread_id")), "{status}");
}

#[tokio::test]
async fn approvals_reach_the_hub_as_gate_events() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    let run = server.start_run(&session, &format!("tool: write {}", json!({"path": "o.txt", "content": "x"}))).await;
    let events = recv_until(&mut ws, |e| e["type"] == "gate.approval_requested").await;
    let requested = events.last().expect("requested");
    assert_eq!(requested["data"]["tool"], "write");
    assert_eq!(requested["data"]["target"], "o.txt");
    let approval = requested["data"]["req_id"].as_str().expect("req_id");
    let (status, body) = server
        .post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "reject", "message": "no"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let after = recv_until(&mut ws, is_settled).await;
    let resolved = after.iter().find(|e| e["type"] == "gate.approval_resolved").expect("resolved");
    assert_eq!(resolved["data"]["req_id"], approval);
    assert_eq!(resolved["data"]["decision"], "reject");
    assert_eq!(resolved["data"]["run_id"], run.as_str());
    let result = after.iter().find(|e| e["type"] == "tool.result").expect("tool.result");
    assert_eq!(result["data"]["is_error"], true);
}

#[tokio::test]
async fn a_subscribe_message_replaces_the_filter_and_global_events_reach_everyone() {
    let server = TestServer::start().await;
    let a = titled_session(&server).await;
    let b = titled_session(&server).await;
    let mut only_a = connect(&server, &format!("?channels={a}")).await;
    let mut switcher = connect(&server, &format!("?channels={a}")).await;
    send(&mut switcher, json!({"type": "subscribe", "channels": [b]})).await;
    let ack = recv(&mut switcher).await;
    assert_eq!((ack["type"].as_str(), &ack["data"]["channels"]), (Some("subscribed"), &json!([b])));

    server.run_prompt(&b, "echo: for b").await;
    let events = recv_until(&mut switcher, is_settled).await;
    assert!(events.iter().all(|e| e["channel_id"] == b.as_str()), "{events:?}");
    // `only_a` got none of b's events: the `channel.created` below is the first thing
    // it receives after them.

    // Everything: a session created afterwards is announced and followed.
    let mut everything = connect(&server, "").await;
    send(&mut everything, json!({"type": "subscribe", "channels": []})).await;
    assert_eq!(recv(&mut everything).await["type"], "subscribed");
    let project = server.default_project().await;
    let c = id_of(&server.create_session(&project, Some("new one")).await);
    for ws in [&mut everything, &mut only_a, &mut switcher] {
        let created = recv(ws).await;
        assert_eq!(
            (created["type"].as_str(), created["channel_id"].as_str()),
            (Some("channel.created"), Some(c.as_str()))
        );
        assert_eq!(created["data"]["project_id"], project.as_str());
    }
    server.run_prompt(&c, "echo: hello c").await;
    let events = recv_until(&mut everything, is_settled).await;
    assert_eq!(kinds(&events)[0], "agent.status");
    assert_eq!(streamed_text(&events), "hello c");

    let (status, _) = server.delete(&format!("/api/sessions/{c}")).await;
    assert_eq!(status, 204);
    for ws in [&mut everything, &mut only_a, &mut switcher] {
        let deleted = recv(ws).await;
        assert_eq!(deleted["type"], "channel.deleted");
        assert_eq!(deleted["channel_id"], c.as_str());
        assert_eq!(deleted["data"], Value::Null);
    }
    // The hub that followed the deleted session goes on with the others.
    server.run_prompt(&a, "echo: still here").await;
    let events = recv_until(&mut everything, is_settled).await;
    assert!(events.iter().all(|e| e["channel_id"] == a.as_str()));
}

#[tokio::test]
async fn bad_channels_and_messages_get_error_events() {
    let server = TestServer::start().await;
    let mut ws = connect(&server, "?channels=ses_01jd0000000000000000000000,garbage!").await;
    let mut errors = vec![recv(&mut ws).await, recv(&mut ws).await];
    errors.sort_by_key(|e| e["channel_id"].as_str().map(str::to_owned));
    assert_eq!(kinds(&errors), ["channel.error", "channel.error"]);
    assert_eq!(errors[0]["channel_id"], "garbage!");
    assert_eq!(errors[1]["data"]["code"], "not_found");
    send(&mut ws, json!({"channels": "x"})).await;
    let error = recv(&mut ws).await;
    assert_eq!((error["type"].as_str(), error["data"]["code"].as_str()), (Some("error"), Some("invalid_message")));
    ws.send(Message::Binary(vec![1, 2, 3].into())).await.expect("send");
    assert_eq!(recv(&mut ws).await["data"]["code"], "invalid_message");
}

#[tokio::test]
async fn a_reconnect_with_a_cursor_gets_exactly_what_it_missed_or_a_snapshot() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    server.start_run(&session, "stream: 80").await;
    let mut seen = Vec::new();
    while seen.iter().filter(|e: &&Value| e["type"] == "message.streaming").count() < 20 {
        seen.push(recv(&mut ws).await);
    }
    ws.close(None).await.expect("close");
    drop(ws);
    let cursor = seen.last().expect("seen")["cursor"].as_str().expect("cursor").to_owned();

    // A socket that follows everything from its connection on, told to restart the
    // session at the cursor: what came before the acknowledgement is discarded.
    let mut again = connect(&server, "").await;
    send(&mut again, json!({"type": "subscribe", "channels": [session], "cursors": {session.as_str(): cursor}})).await;
    recv_until(&mut again, |e| e["type"] == "subscribed").await;
    let rest = recv_until(&mut again, is_settled).await;
    assert!(rest.iter().all(|e| e["type"] != "channel.snapshot"), "within the buffer: a replay");
    seen.extend(rest);
    assert_eq!(streamed_text(&seen), stored_text(&server, &session).await, "the deltas join with no hole or repeat");

    // A cursor the buffer cannot serve (another stream): one snapshot, then live.
    let foreign = format!("{}:3", spool_protocol::StreamId::new());
    let mut third = connect(&server, "").await;
    send(&mut third, json!({"type": "subscribe", "channels": [session], "cursors": {session.as_str(): foreign}})).await;
    recv_until(&mut third, |e| e["type"] == "subscribed").await;
    let snapshot = recv(&mut third).await;
    assert_eq!(snapshot["type"], "channel.snapshot");
    assert_eq!(snapshot["data"]["state"]["session"]["id"], session.as_str());
    assert_eq!(snapshot["data"]["state"]["status"], "idle");
    // The client cannot say which runs it saw end: the latest one's end follows the
    // snapshot (a status; its run id tells a client that knew it already).
    let end = recv(&mut third).await;
    assert_eq!((end["type"].as_str(), end["data"]["status"].as_str()), (Some("agent.status"), Some("completed")));
    server.run_prompt(&session, "echo: after the snapshot").await;
    let live = recv_until(&mut third, is_settled).await;
    assert_eq!(streamed_text(&live), "after the snapshot");
}

/// The text of the assistant drafts in a `channel.snapshot`'s state.
fn draft_text(snapshot: &Value) -> String {
    let drafts = snapshot["data"]["state"]["drafts"].as_object().expect("drafts");
    let content = drafts.values().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
    content.filter(|c| c["type"] == "text").map(|c| c["text"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn a_socket_joining_mid_run_gets_the_text_so_far_then_the_rest() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    let run = server.start_run(&session, "stream: 300").await;
    // Join once a good part of the answer has streamed.
    let mut watcher = connect(&server, &format!("?channels={session}")).await;
    recv_until(&mut watcher, |e| e["type"] == "message.streaming" && e["data"]["offset"].as_u64() > Some(400)).await;
    // No channels: every session, as with an empty subscribe message.
    let mut ws = connect(&server, "").await;
    let first = recv(&mut ws).await;
    assert_eq!(first["type"], "channel.snapshot", "the run's text so far: {first}");
    assert!(first["cursor"].is_string(), "a snapshot can be resumed from");
    let so_far = draft_text(&first);
    assert!(!so_far.is_empty(), "joined mid-answer: {first}");
    let status = recv(&mut ws).await;
    assert_eq!((status["type"].as_str(), status["data"]["status"].as_str()), (Some("agent.status"), Some("running")));
    assert_eq!(status["data"]["run_id"], run.as_str());
    let rest = recv_until(&mut ws, is_settled).await;
    assert_eq!(rest.last().expect("status")["data"]["status"], "completed");
    // The deltas continue the snapshot's text: together they are the stored answer.
    let mut text = so_far;
    for e in rest.iter().filter(|e| e["type"] == "message.streaming") {
        let offset = e["data"]["offset"].as_u64().expect("offset") as usize;
        assert_eq!(offset, text.encode_utf16().count(), "no hole and no repeat after the snapshot: {e}");
        text.push_str(e["data"]["delta"].as_str().expect("delta"));
    }
    assert_eq!(text, stored_text(&server, &session).await);
}

#[tokio::test]
async fn a_cursor_that_does_not_parse_gets_a_channel_error() {
    let server = TestServer::start().await;
    let (session, other) = (titled_session(&server).await, titled_session(&server).await);
    let mut ws = connect(&server, "").await;
    let subscribe =
        json!({"type": "subscribe", "channels": [session, other], "cursors": {session.as_str(): "yesterday"}});
    send(&mut ws, subscribe).await;
    let error = recv(&mut ws).await;
    assert_eq!((error["type"].as_str(), error["channel_id"].as_str()), (Some("channel.error"), Some(session.as_str())));
    assert_eq!(error["data"]["code"], "invalid_cursor");
    assert_eq!(recv(&mut ws).await["type"], "subscribed");
    // The channel is not followed behind the client's back: a run there, then one on
    // the other channel as a marker, and the marker's events are all that arrive.
    server.run_prompt(&session, "echo: unseen").await;
    server.run_prompt(&other, "echo: marker").await;
    let events = recv_until(&mut ws, is_settled).await;
    assert!(events.iter().all(|e| e["channel_id"] == other.as_str()), "{events:?}");
    assert_eq!(streamed_text(&events), "marker");
}

#[tokio::test]
async fn a_client_back_after_its_run_ended_beyond_the_buffer_gets_the_snapshot_and_the_runs_end() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    let run = server.start_run(&session, "stream: 400").await;
    let first = recv_until(&mut ws, |e| e["cursor"].is_string()).await;
    let cursor = first.last().expect("an event")["cursor"].as_str().expect("cursor").to_owned();
    drop(ws);
    // The run streams on past the 256-frame buffer and ends while the client is away.
    server.wait_run(&run).await;
    let mut again = connect(&server, "").await;
    send(&mut again, json!({"type": "subscribe", "channels": [session], "cursors": {session.as_str(): cursor}})).await;
    recv_until(&mut again, |e| e["type"] == "subscribed").await;
    let snapshot = recv(&mut again).await;
    assert_eq!(snapshot["type"], "channel.snapshot");
    let end = recv(&mut again).await;
    assert_eq!((end["type"].as_str(), end["data"]["status"].as_str()), (Some("agent.status"), Some("completed")));
    assert_eq!(end["data"]["run_id"], run.as_str());
}

#[tokio::test]
async fn a_client_of_every_session_learns_of_one_created_while_it_was_away() {
    let server = TestServer::start().await;
    let known = titled_session(&server).await;
    let mut ws = connect(&server, "").await;
    server.run_prompt(&known, "echo: hello").await;
    let seen = recv_until(&mut ws, is_settled).await;
    let cursor = seen.iter().rev().find_map(|e| e["cursor"].as_str()).expect("a cursor").to_owned();
    drop(ws);
    let project = server.default_project().await;
    let created = id_of(&server.create_session(&project, Some("while away")).await);
    let mut again = connect(&server, "").await;
    send(&mut again, json!({"type": "subscribe", "channels": [], "cursors": {known.as_str(): cursor}})).await;
    let events = recv_until(&mut again, |e| e["type"] == "subscribed").await;
    let announced: Vec<_> = events.iter().filter(|e| e["type"] == "channel.created").collect();
    assert_eq!(announced.len(), 1, "{events:?}");
    assert_eq!(announced[0]["channel_id"], created.as_str());
}

#[tokio::test]
async fn the_origin_must_be_this_server_when_a_browser_sends_one() {
    let server = TestServer::start().await;
    let attempt = |origin: Option<&'static str>| {
        let mut request = ws_url(&server, "").into_client_request().expect("request");
        if let Some(origin) = origin {
            request.headers_mut().insert("origin", origin.parse().expect("header"));
        }
        tokio_tungstenite::connect_async(request)
    };
    assert!(attempt(None).await.is_ok(), "no Origin: not a browser");
    let own: &'static str = Box::leak(format!("http://{}", server.addr).into_boxed_str());
    assert!(attempt(Some(own)).await.is_ok());
    match attempt(Some("http://evil.example")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), 403);
            let body: Value = serde_json::from_slice(res.body().as_deref().unwrap_or_default()).expect("JSON");
            assert_eq!(body["error"]["code"], "bad_origin");
        }
        other => panic!("a foreign origin must be refused: {other:?}"),
    }
    // A plain GET is not a WebSocket: a JSON error, not axum's text.
    let (status, body) = server.get("/api/ws").await;
    assert_eq!((status.as_u16(), body["error"]["code"].as_str()), (400, Some("websocket_required")));
}

/// The most a kernel may buffer for one TCP socket's sends (`tcp_wmem`'s maximum, which
/// autotuning grows to on loopback); 4 MiB, Linux's default, where it cannot be read.
fn max_send_buffer() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2).and_then(|max| max.parse().ok()))
        .unwrap_or(4 << 20)
}

/// `/metrics`' value for one series (the whole line before the value, labels included).
async fn metric(server: &TestServer, series: &str) -> f64 {
    let text = server.client.get(server.url("/metrics")).send().await.expect("scrape").text().await.expect("body");
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_while_another_gets_every_event() {
    const DELTAS: usize = 60_000;
    const RECV_BUFFER: u32 = 4096;
    // The model is unpaced and shares the machine with the reading client, which on a
    // busy CI box can fall a megabyte behind for a moment; 4 MiB of headroom (as in
    // stream.rs) keeps the test about cutting the client that never reads (about 15 MB
    // of hub events go by it).
    let limits = spool_engine::EventLimits { queue_bytes: 4 << 20, ..Default::default() };
    let engine = spool_engine::EngineConfig { limits, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    // The counter is process-wide: no other test in this file streams enough to be cut.
    const CUTS: &str = "spool_slow_client_disconnects_total";
    let cuts_before = metric(&server, CUTS).await;

    // A client with a tiny receive window that never reads after the handshake.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(RECV_BUFFER).expect("rcvbuf");
    let tcp = socket.connect(server.addr).await.expect("connect");
    let (mut stuck, _) = tokio_tungstenite::client_async(ws_url(&server, &format!("?channels={session}")), tcp)
        .await
        .expect("handshake");
    let mut fast = connect(&server, &format!("?channels={session}")).await;

    // Every receive is bounded by WAIT: a stuck client holding the run or the reading
    // client back fails here rather than by a clock.
    server.start_run(&session, &format!("stream: {DELTAS}")).await;
    let events = recv_until(&mut fast, is_settled).await;
    let deltas = events.iter().filter(|e| e["type"] == "message.streaming").count();
    assert_eq!(deltas, DELTAS, "the reading client got every delta");
    assert_eq!(events.last().expect("status")["data"]["status"], "completed");

    // The stuck one was disconnected: reading now drains what was buffered, then ends,
    // and it never saw the end of the run.
    let mut settled = false;
    let mut received = 0usize;
    let drained = tokio::time::timeout(WAIT, async {
        while let Some(Ok(message)) = stuck.next().await {
            if let Message::Text(text) = message {
                received += text.len();
                settled |= text.contains("\"agent.status\"") && text.contains("\"completed\"");
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the server never closed the stuck socket");
    assert!(!settled, "the stuck client cannot have kept up");
    // What reached it is what the sockets held when it stopped reading (its receive
    // buffer, which Linux doubles, and the server's send buffer) plus at most the lag
    // limit: never the rest of the answer.
    let bound = limits.queue_bytes + max_send_buffer() + 2 * RECV_BUFFER as usize;
    assert!(received <= bound, "{received} bytes reached the stuck client, more than {bound}");
    assert_eq!(metric(&server, CUTS).await - cuts_before, 1.0, "one client was cut, once");
}

/// Drops the socket at random points of a 1,500-word answer and comes back as a seed
/// 002 client with cursors does: a new socket, `subscribe` with the cursor of the last
/// event it has, appending `message.streaming` deltas and replacing its text with a
/// `channel.snapshot`'s when one comes. Every delta must continue the text exactly (no
/// hole, no repeat), and the client ends holding the stored answer.
#[tokio::test]
async fn random_drops_lose_and_repeat_no_word() {
    let mut rng = common::Rng::seeded(0x5eed_0002);
    let seed = rng.seed;
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(1), ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    server.start_run(&session, "stream: 1500").await;
    let (mut text, mut cursor, mut drops, mut snapshots) = (String::new(), None::<String>, 0, 0);
    'run: loop {
        let mut budget = 10 + rng.below(80);
        while budget > 0 {
            let event = recv(&mut ws).await;
            if let Some(c) = event["cursor"].as_str() {
                cursor = Some(c.to_owned());
            }
            match event["type"].as_str() {
                Some("message.streaming") => {
                    let offset = event["data"]["offset"].as_u64().expect("offset") as usize;
                    assert_eq!(offset, text.encode_utf16().count(), "no hole, no repeat (seed {seed}): {event}");
                    text.push_str(event["data"]["delta"].as_str().expect("delta"));
                    budget -= 1;
                }
                Some("channel.snapshot") => {
                    snapshots += 1;
                    let drafts = draft_text(&event);
                    text = if drafts.is_empty() {
                        // The answer was committed while the client was away.
                        let messages = event["data"]["state"]["messages"].as_array().cloned().unwrap_or_default();
                        let last = messages.iter().rev().find(|m| m["role"] == "assistant");
                        let content = last.map(|m| m["content"].as_array().cloned().unwrap_or_default());
                        let content = content.unwrap_or_default();
                        content.iter().filter(|c| c["type"] == "text").filter_map(|c| c["text"].as_str()).collect()
                    } else {
                        drafts
                    };
                }
                _ if is_settled(&event) => break 'run,
                _ => {}
            }
        }
        drops += 1;
        drop(ws);
        ws = connect(&server, "").await;
        let resume = cursor.clone().expect("a cursor before the first drop");
        send(&mut ws, json!({"type": "subscribe", "channels": [session], "cursors": {session.as_str(): resume}})).await;
        recv_until(&mut ws, |e| e["type"] == "subscribed").await;
    }
    assert!(drops >= 10, "only {drops} drops (seed {seed})");
    assert_eq!(text, stored_text(&server, &session).await, "{drops} drops, {snapshots} snapshots (seed {seed})");
}

#[tokio::test]
async fn a_todo_list_is_an_agent_todo_write_event_with_the_whole_list() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let mut ws = connect(&server, &format!("?channels={session}")).await;
    let args = json!({"todos": [
        {"content": "Read the code", "status": "completed", "priority": "high"},
        {"content": "Write the tool", "status": "in_progress", "id": "tool"},
    ]});
    server.start_run(&session, &format!("tool: todo_write {args}")).await;
    let events = recv_until(&mut ws, is_settled).await;
    let written: Vec<&Value> = events.iter().filter(|e| e["type"] == "agent.todo_write").collect();
    assert_eq!(written.len(), 1, "{:?}", kinds(&events));
    assert_eq!(written[0]["channel_id"], session.as_str());
    assert_eq!(
        written[0]["data"]["todos"],
        json!([
            {"content": "Read the code", "status": "completed", "priority": "high", "id": "1"},
            {"content": "Write the tool", "status": "in_progress", "id": "tool"},
        ])
    );
    // Between the tool's start and its result, and allowed without asking anyone.
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).expect(kind);
    assert!(at("tool.use") < at("agent.todo_write") && at("agent.todo_write") < at("tool.result"));
    assert!(!kinds(&events).contains(&"gate.approval_requested"));
}

#[tokio::test]
async fn a_git_change_is_channel_updated_and_the_first_reading_is_not_announced() {
    let server = TestServer::start_with(common::git_polling(Duration::from_millis(50))).await;
    let repo_dir = server.new_dir("repo");
    let repo = common::git_repo(&repo_dir, &[("a.txt", "one\ntwo\n")]);
    // Dirty before anyone looks: the first reading sees one added line, and says nothing.
    std::fs::write(repo_dir.join("a.txt"), "one\ntwo\nthree\n").expect("write");
    let repo_session =
        id_of(&server.create_session(&id_of(&server.create_project(&repo_dir).await), Some("git")).await);
    let plain_dir = server.new_dir("plain");
    let plain_session =
        id_of(&server.create_session(&id_of(&server.create_project(&plain_dir).await), Some("plain")).await);
    let mut ws = connect(&server, &format!("?channels={repo_session},{plain_session}")).await;

    let primed = server.wait_git_primed(&repo_session).await;
    let head = repo.head().expect("head").peel_to_commit().expect("commit");
    let short = head.as_object().short_id().expect("short id").as_str().expect("ASCII").to_owned();
    assert_eq!((primed["branch"].as_str(), primed["commit"].as_str()), (Some("main"), Some(short.as_str())));
    assert_eq!((primed["additions"].as_u64(), primed["deletions"].as_u64()), (Some(1), Some(0)));

    // Against HEAD ("one\ntwo\n"): `two` removed; `2`, `three`, `four` added.
    std::fs::write(repo_dir.join("a.txt"), "one\n2\nthree\nfour\n").expect("write");
    let mut seen = recv_until(&mut ws, |e| e["type"] == "channel.updated").await;
    let updated = seen.last().expect("channel.updated");
    assert_eq!(updated["channel_id"], repo_session.as_str(), "on the session's channel");
    assert_eq!(
        updated["data"],
        json!({"channel_id": repo_session, "branch": "main", "commit": short, "diff_additions": 3, "diff_deletions": 1}),
        "the change, not the first reading"
    );
    assert!(updated["cursor"].is_string(), "replayable like every session event");

    // A commit moves HEAD and empties the diff.
    let second = common::git_commit_all(&repo, "second");
    seen.extend(recv_until(&mut ws, |e| e["type"] == "channel.updated").await);
    let updated = seen.last().expect("channel.updated");
    let data = &updated["data"];
    assert_eq!((data["commit"].as_str(), data["diff_additions"].as_u64()), (Some(second.as_str()), Some(0)));
    // By now the plain directory was read at every tick too: nothing came of it.
    let (_, plain) = server.get(&format!("/api/sessions/{plain_session}")).await;
    assert!(plain["git"].is_null(), "{plain}");
    assert_eq!(kinds(&seen), ["channel.updated", "channel.updated"], "{seen:?}");
}

/// A hub socket whose token is revoked is closed with a close frame that says so (1008
/// policy violation and a reason), as `/api/streams` does — not dropped without one
/// (which a client sees as 1006, an abnormal end it would simply retry).
#[tokio::test]
async fn revoking_the_token_closes_the_hub_socket_with_1008() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let server = TestServer::start().await;
    let (token, secret) = server.engine.auth().create_token("ivy").await.expect("token");
    let mut request = ws_url(&server, "").into_client_request().expect("request");
    request.headers_mut().insert("authorization", format!("Bearer {secret}").parse().expect("header"));
    let (mut ws, res) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    assert_eq!(res.status(), 101);
    send(&mut ws, json!({"type": "subscribe", "channels": []})).await;
    recv_until(&mut ws, |e| e["type"] == "subscribed").await;

    server.engine.auth().revoke_token(&token.id).await.expect("revoke");
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| (f.code, f.reason.to_string())),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the socket closes");
    let (code, reason) = closed.expect("a close frame, not a dropped connection");
    assert_eq!(code, CloseCode::Policy);
    assert!(reason.contains("revoked"), "{reason}");
}

/// A project's deletion ends its sessions' channels with one `channel.deleted` each —
/// the subscriptions end saying the session was deleted, so the hub neither closes the
/// socket nor says it twice — and the socket goes on with the others.
#[tokio::test]
async fn deleting_a_project_drops_each_of_its_channels_once_and_the_socket_goes_on() {
    let server = TestServer::start().await;
    let project = id_of(&server.create_project(&server.new_dir("doomed")).await);
    let doomed: Vec<String> = vec![
        id_of(&server.create_session(&project, Some("one")).await),
        id_of(&server.create_session(&project, Some("two")).await),
    ];
    let kept = titled_session(&server).await;
    let mut ws = connect(&server, "").await;
    send(&mut ws, json!({"type": "subscribe", "channels": [doomed[0], doomed[1], kept]})).await;
    recv_until(&mut ws, |e| e["type"] == "subscribed").await;

    let (status, _) = server.delete(&format!("/api/projects/{project}")).await;
    assert!(status.is_success(), "{status}");
    let mut deleted = Vec::new();
    while deleted.len() < doomed.len() {
        let event = recv(&mut ws).await;
        if event["type"] == "channel.deleted" {
            deleted.push(event["channel_id"].as_str().expect("channel_id").to_owned());
        }
    }
    deleted.sort();
    let mut expected = doomed.clone();
    expected.sort();
    assert_eq!(deleted, expected);

    server.run_prompt(&kept, "echo: still here").await;
    let events = recv_until(&mut ws, is_settled).await;
    assert!(events.iter().all(|e| e["channel_id"] == kept.as_str()), "{events:?}");
    assert_eq!(streamed_text(&events), "still here");
}
