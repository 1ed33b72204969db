//! `GET /api/streams` — many native streams over one WebSocket — through a real server
//! on a real port with a real WebSocket client: each stream carries byte for byte what
//! its SSE twin sends, resuming at a cursor loses and repeats nothing, the list stream,
//! `end`, `close`, refused opens and messages, the per-socket limit, the `Origin` check,
//! revocation, and a socket that stops reading closed while another gets every frame.

use crate::common;

use common::{Open, TestOptions, TestServer, WAIT, id_of};
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_protocol::sse::Decoder;
use std::collections::HashMap;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn url(server: &TestServer) -> String {
    format!("ws://{}/api/streams", server.addr)
}

async fn connect(server: &TestServer) -> Ws {
    connect_as(server, None).await
}

/// Opens a socket, as the holder of `token` when given (a header, as a non-browser).
async fn connect_as(server: &TestServer, token: Option<&str>) -> Ws {
    let mut request = url(server).into_client_request().expect("request");
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    }
    let (ws, res) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    assert_eq!(res.status(), 101);
    ws
}

async fn send(ws: &mut Ws, message: Value) {
    ws.send(Message::Text(message.to_string().into())).await.expect("send");
}

/// One server message: the stream id and the SSE event it carries.
#[derive(Clone, Debug)]
struct Received {
    id: String,
    event: String,
}

impl Received {
    /// The event decoded, checked to be exactly one SSE event.
    fn decoded(&self) -> spool_protocol::sse::SseEvent {
        let mut events = Decoder::new().push(self.event.as_bytes());
        assert_eq!(events.len(), 1, "one SSE event per message: {:?}", self.event);
        events.remove(0)
    }

    fn kind(&self) -> Option<String> {
        self.decoded().event
    }

    fn data(&self) -> Value {
        serde_json::from_str(&self.decoded().data).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.event))
    }

    /// A `loop.event` frame's agent event type.
    fn event_type(&self) -> Option<String> {
        self.data()["event"]["type"].as_str().map(str::to_owned)
    }

    fn is_heartbeat(&self) -> bool {
        self.id.is_empty() && self.kind().as_deref() == Some("heartbeat")
    }

    /// The acknowledgement of an open, which comes before the stream's first event.
    fn is_ack(&self) -> bool {
        self.kind().as_deref() == Some("open")
    }
}

/// The next text message (pings skipped), split at its first newline; panics if none
/// comes within [`WAIT`] or the socket closes.
async fn recv(ws: &mut Ws) -> Received {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no message within {WAIT:?}"))
            .expect("the socket is open")
            .expect("a message");
        let text = match message {
            Message::Text(text) => text,
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected message {other:?}"),
        };
        let (id, event) = text.split_once('\n').unwrap_or_else(|| panic!("no newline after the id: {text:?}"));
        return Received { id: id.to_owned(), event: event.to_owned() };
    }
}

/// The next message that is not a heartbeat or an open's acknowledgement (checked on
/// its own in `an_open_is_acknowledged_before_anything_else`).
async fn recv_event(ws: &mut Ws) -> Received {
    loop {
        let message = recv(ws).await;
        if !message.is_heartbeat() && !message.is_ack() {
            return message;
        }
    }
}

/// Messages until `stop` holds for one (returned last), heartbeats skipped.
async fn recv_until(ws: &mut Ws, stop: impl Fn(&Received) -> bool) -> Vec<Received> {
    let mut seen = Vec::new();
    loop {
        let message = recv_event(ws).await;
        let done = stop(&message);
        seen.push(message);
        if done {
            return seen;
        }
    }
}

fn settled(id: &str) -> impl Fn(&Received) -> bool + '_ {
    move |m| m.id == id && m.event_type().as_deref() == Some("agent_settled")
}

/// The SSE events of a raw body, one string each, heartbeats left out.
fn sse_events(raw: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(raw).expect("UTF-8");
    text.split_inclusive("\n\n")
        .filter(|e| *e != std::str::from_utf8(spool_protocol::sse::HEARTBEAT).expect("UTF-8"))
        .map(str::to_owned)
        .collect()
}

/// The events up to the first `agent_settled` (included): what follows it may or may
/// not have arrived when a reader stopped.
fn through_settled(events: Vec<String>) -> Vec<String> {
    let end = events.iter().position(|e| e.contains("\"agent_settled\"")).expect("a settled frame");
    events[..=end].to_vec()
}

/// A TCP buffer size the kernel gives sockets: `tcp_wmem` or `tcp_rmem`, `nth` 1 for
/// the default, 2 for the most it grows to.
fn kernel_buffer(which: &str, nth: usize) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{which}"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(nth).and_then(|max| max.parse().ok()))
        .unwrap_or(4 << 20)
}

/// `streamId:seq` of a frame event.
fn cursor_of(message: &Received) -> String {
    message.decoded().id.unwrap_or_else(|| panic!("a frame has an SSE id: {:?}", message.event))
}

fn open_session(id: &str, session: &str, cursor: Option<&str>) -> Value {
    json!({"op": "open", "id": id, "session": session, "cursor": cursor})
}

#[tokio::test]
async fn an_answer_over_a_mebibyte_arrives_whole() {
    // 200,000 words: the answer's `message_end` is one frame of about 1.3 MB. A socket
    // whose write buffer could not hold one such message closed on it, and every
    // reconnect replayed the same frame into the same failure.
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("s", &session, None)).await;
    recv_event(&mut ws).await; // the snapshot
    server.start_run(&session, "stream: 200000").await;
    let seen = recv_until(&mut ws, settled("s")).await;
    let end = seen
        .iter()
        .find(|m| m.event_type().as_deref() == Some("message_end") && m.event.len() > 1 << 20)
        .expect("the answer's message_end, over 1 MiB");
    let text = end.data()["event"]["message"]["content"][0]["text"].as_str().map(str::len);
    assert!(text.is_some_and(|n| n > 1 << 20), "the whole answer: {text:?} bytes");
}

#[tokio::test]
async fn two_sessions_over_one_socket_get_exactly_what_their_sse_streams_get() {
    let server = TestServer::start().await;
    let (a, b) = (server.new_session().await, server.new_session().await);
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("a", &a, None)).await;
    send(&mut ws, open_session("b", &b, None)).await;
    // Each starts with its session's snapshot, as a fresh SSE stream does.
    let mut snapshots = HashMap::new();
    for _ in 0..2 {
        let first = recv_event(&mut ws).await;
        assert_eq!(first.data()["type"], "session.snapshot", "{first:?}");
        snapshots.insert(first.id.clone(), cursor_of(&first));
    }
    // SSE readers from the same cursors: what follows must be the same bytes.
    let mut sse_a = server.events(&a, Open::cursor(snapshots["a"].clone())).await;
    let mut sse_b = server.events(&b, Open::cursor(snapshots["b"].clone())).await;

    server.start_run(&a, "stream: 40").await;
    server.start_run(&b, "tool: read {\"path\":\"README.md\"}").await;
    let mut got: HashMap<String, Vec<String>> = HashMap::new();
    let mut done = 0;
    while done < 2 {
        let message = recv_event(&mut ws).await;
        assert!(message.id == "a" || message.id == "b", "{message:?}");
        done += usize::from(settled(&message.id.clone())(&message));
        got.entry(message.id.clone()).or_default().push(message.event);
    }
    sse_a.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    sse_b.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let (got_a, got_b) = (through_settled(got["a"].clone()), through_settled(got["b"].clone()));
    assert_eq!(got_a, through_settled(sse_events(&sse_a.raw)), "session a");
    assert_eq!(got_b, through_settled(sse_events(&sse_b.raw)), "session b");
    assert!(got["a"].len() > 40 && got["b"].iter().any(|e| e.contains("tool_execution_end")), "{got:?}");
}

/// The next message that is not a heartbeat.
async fn recv_beatless(ws: &mut Ws) -> Received {
    loop {
        let message = recv(ws).await;
        if !message.is_heartbeat() {
            return message;
        }
    }
}

#[tokio::test]
async fn an_open_is_acknowledged_before_anything_else() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("first", &session, None)).await;
    let ack = recv_beatless(&mut ws).await;
    assert_eq!((ack.id.as_str(), ack.kind().as_deref()), ("first", Some("open")), "{ack:?}");
    let snapshot = recv_beatless(&mut ws).await;
    assert_eq!(snapshot.data()["type"], "session.snapshot");
    // Opened at its current seq, a stream has nothing to send: the acknowledgement is
    // the only sign that it is up, and the run's frames follow it.
    let cursor = cursor_of(&snapshot);
    send(&mut ws, open_session("again", &session, Some(&cursor))).await;
    let ack = recv_beatless(&mut ws).await;
    assert_eq!((ack.id.as_str(), ack.kind().as_deref()), ("again", Some("open")), "{ack:?}");
    server.start_run(&session, "echo: after the ack").await;
    let next = recv_beatless(&mut ws).await;
    assert!(next.id == "first" || next.id == "again", "{next:?}");
    assert_ne!(next.kind().as_deref(), Some("open"));
    // A refused open is not acknowledged: its error is the first thing said about it.
    send(&mut ws, open_session("missing", "ses_00000000000000000000000000", None)).await;
    let refused = loop {
        let message = recv_beatless(&mut ws).await;
        if message.id == "missing" {
            break message;
        }
    };
    assert_eq!(refused.kind().as_deref(), Some("error"), "{refused:?}");
}

#[tokio::test]
async fn resuming_at_a_cursor_replays_exactly_the_missed_frames() {
    let server = TestServer::start_with(TestOptions {
        model_delay: std::time::Duration::from_millis(2),
        ..TestOptions::default()
    })
    .await;
    let session = server.new_session().await;
    let mut reference = server.events(&session, Open::fresh()).await;
    let snapshot = reference.next_frame().await.expect("snapshot");
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("s", &session, Some(&snapshot.cursor()))).await;
    server.start_run(&session, "stream: 200").await;
    // Part of the answer over the first socket, then it goes away.
    let mut got = Vec::new();
    for _ in 0..30 {
        got.push(recv_event(&mut ws).await);
    }
    drop(ws);
    let last = cursor_of(got.last().expect("frames"));
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("s", &session, Some(&last))).await;
    got.extend(recv_until(&mut ws, settled("s")).await);

    let expected = reference.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let seqs: Vec<u64> = got.iter().map(|m| m.data()["seq"].as_u64().expect("seq")).collect();
    let expected_seqs: Vec<u64> = expected.iter().map(|f| f.seq).collect();
    assert_eq!(seqs, expected_seqs, "no frame twice, none missing");
    let events: Vec<String> = got.iter().map(|m| m.event.clone()).collect();
    let sse = through_settled(sse_events(&reference.raw)[1..].to_vec());
    assert_eq!(events, sse, "byte for byte the SSE stream's frames");
}

#[tokio::test]
async fn the_list_stream_starts_with_a_reset_then_tells_of_a_new_session() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let mut ws = connect(&server).await;
    send(&mut ws, json!({"op": "open", "id": "lists", "lists": true})).await;
    let reset = recv_event(&mut ws).await;
    assert_eq!((reset.id.as_str(), reset.data()["type"].as_str()), ("lists", Some("lists.reset")), "{reset:?}");
    server.create_session(&project, None).await;
    let changed = recv_event(&mut ws).await;
    assert_eq!(changed.id, "lists");
    assert_eq!(changed.data()["type"], "sessions.changed", "{changed:?}");
    assert_eq!(changed.data()["workspaceId"], project.as_str());
}

/// Writes `path` as `token`'s holder; the JSON answer.
async fn post_as(server: &TestServer, token: &str, path: &str, body: Value) -> Value {
    let res = server.client.post(server.url(path)).bearer_auth(token).json(&body).send().await.expect("post");
    assert!(res.status().is_success(), "{path}: {}", res.status());
    res.json().await.expect("JSON")
}

#[tokio::test]
async fn another_users_session_is_a_404_error_and_sends_nothing() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let project = post_as(&server, &alice, "/api/projects", json!({"path": server.project_dir()})).await;
    let session = post_as(&server, &alice, "/api/sessions", json!({"projectId": id_of(&project)})).await;
    let session = id_of(&session);

    let mut ws = connect_as(&server, Some(&bob)).await;
    send(&mut ws, open_session("theirs", &session, None)).await;
    let refused = recv_event(&mut ws).await;
    assert_eq!((refused.id.as_str(), refused.kind().as_deref()), ("theirs", Some("error")), "{refused:?}");
    assert_eq!(refused.data()["status"], 404);
    assert_eq!(refused.data()["error"]["code"], "not_found");
    // The same for an id that is no session's at all, as the SSE route answers it.
    send(&mut ws, open_session("junk", "not-a-session", None)).await;
    let junk = recv_event(&mut ws).await;
    assert_eq!((junk.id.as_str(), junk.data()["status"].as_u64()), ("junk", Some(404)), "{junk:?}");

    // Alice's run goes by; Bob's socket only ever hears of his own list stream.
    send(&mut ws, json!({"op": "open", "id": "mine", "lists": true})).await;
    let mut alices = connect_as(&server, Some(&alice)).await;
    send(&mut alices, open_session("s", &session, None)).await;
    recv_event(&mut alices).await;
    post_as(&server, &alice, &format!("/api/sessions/{session}/prompt"), json!({"text": "stream: 5"})).await;
    recv_until(&mut alices, settled("s")).await;
    let reset = recv_event(&mut ws).await;
    assert_eq!((reset.id.as_str(), reset.data()["type"].as_str()), ("mine", Some("lists.reset")));
    // A marker after Alice's run: Bob's own new project. Had anything of Alice's reached
    // his socket, it would have come before its notification.
    let bobs = post_as(&server, &bob, "/api/projects", json!({"path": server.new_dir("bobs")})).await;
    let next = recv_event(&mut ws).await;
    assert_eq!((next.id.as_str(), next.data()["type"].as_str()), ("mine", Some("projects.changed")), "{next:?}");
    assert_eq!(next.data()["workspaceId"], id_of(&bobs).as_str(), "{next:?}");
}

#[tokio::test]
async fn a_deleted_sessions_stream_ends() {
    let server = TestServer::start().await;
    let (doomed, kept) = (server.new_session().await, server.new_session().await);
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("doomed", &doomed, None)).await;
    send(&mut ws, open_session("kept", &kept, None)).await;
    recv_event(&mut ws).await;
    recv_event(&mut ws).await;
    let (status, _) = server.delete(&format!("/api/sessions/{doomed}")).await;
    assert!(status.is_success(), "{status}");
    let seen = recv_until(&mut ws, |m| m.kind().as_deref() == Some("end")).await;
    let end = seen.last().expect("end");
    assert_eq!((end.id.as_str(), end.event.as_str()), ("doomed", "event: end\ndata: {}\n\n"));
    // The other stream goes on.
    server.start_run(&kept, "echo: still here").await;
    let after = recv_until(&mut ws, settled("kept")).await;
    assert!(after.iter().all(|m| m.id == "kept"), "{after:?}");
}

#[tokio::test]
async fn close_stops_one_stream_and_the_other_keeps_going() {
    let server = TestServer::start().await;
    let (closed, open) = (server.new_session().await, server.new_session().await);
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("closed", &closed, None)).await;
    send(&mut ws, json!({"op": "close", "id": "closed"})).await;
    send(&mut ws, json!({"op": "close", "id": "never-opened"})).await;
    send(&mut ws, open_session("open", &open, None)).await;
    // Messages are handled in order: once `open`'s snapshot is here, `closed` is closed.
    let before = recv_until(&mut ws, |m| m.id == "open").await;
    let closed_before = &before[..before.len() - 1];
    assert!(closed_before.iter().all(|m| m.id == "closed" && m.data()["type"] == "session.snapshot"), "{before:?}");
    let run = server.start_run(&closed, "stream: 30").await;
    server.wait_run(&run).await;
    server.start_run(&open, "stream: 30").await;
    let after = recv_until(&mut ws, settled("open")).await;
    assert!(after.iter().all(|m| m.id == "open"), "{:?}", after.iter().map(|m| &m.id).collect::<Vec<_>>());
}

#[tokio::test]
async fn opening_an_open_id_replaces_its_stream() {
    let server = TestServer::start().await;
    let (first, second) = (server.new_session().await, server.new_session().await);
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("tab", &first, None)).await;
    send(&mut ws, open_session("tab", &second, None)).await;
    let seen = recv_until(&mut ws, |m| m.data()["sessionId"] == second.as_str()).await;
    assert!(seen[..seen.len() - 1].iter().all(|m| m.data()["sessionId"] == first.as_str()), "{seen:?}");
    let run = server.start_run(&first, "stream: 20").await;
    server.wait_run(&run).await;
    server.start_run(&second, "echo: second").await;
    let after = recv_until(&mut ws, settled("tab")).await;
    assert!(after.iter().all(|m| m.data()["sessionId"] == second.as_str()), "{after:?}");
}

#[tokio::test]
async fn a_malformed_message_is_a_400_error_and_the_socket_stays_open() {
    let server = TestServer::start().await;
    let mut ws = connect(&server).await;
    for bad in [
        "not json".to_owned(),
        json!({"op": "open", "id": "x"}).to_string(),
        json!({"op": "open", "id": "two words", "lists": true}).to_string(),
        json!({"op": "subscribe", "id": "x"}).to_string(),
    ] {
        ws.send(Message::Text(bad.clone().into())).await.expect("send");
        let refused = recv_event(&mut ws).await;
        assert_eq!((refused.id.as_str(), refused.kind().as_deref()), ("", Some("error")), "{bad}: {refused:?}");
        assert_eq!(refused.data()["status"], 400, "{bad}");
        assert!(refused.data()["error"]["code"].is_string(), "{bad}: {refused:?}");
    }
    ws.send(Message::Binary(vec![1, 2, 3].into())).await.expect("send");
    assert_eq!(recv_event(&mut ws).await.data()["status"], 400);
    send(&mut ws, json!({"op": "open", "id": "l", "lists": true})).await;
    assert_eq!(recv_event(&mut ws).await.data()["type"], "lists.reset", "still serving");
}

#[tokio::test]
async fn a_socket_holds_at_most_256_streams() {
    let engine = spool_engine::EngineConfig { max_streams_per_user: 1000, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let mut ws = connect(&server).await;
    for i in 0..256 {
        send(&mut ws, json!({"op": "open", "id": format!("l{i}"), "lists": true})).await;
    }
    for _ in 0..256 {
        assert_eq!(recv_event(&mut ws).await.data()["type"], "lists.reset");
    }
    send(&mut ws, json!({"op": "open", "id": "one-more", "lists": true})).await;
    let refused = recv_event(&mut ws).await;
    assert_eq!((refused.id.as_str(), refused.kind().as_deref()), ("one-more", Some("error")), "{refused:?}");
    assert_eq!(refused.data()["status"], 429);
    assert_eq!(refused.data()["error"]["code"], "too_many_streams");
    // Reopening an open id replaces it, so it fits.
    send(&mut ws, json!({"op": "open", "id": "l7", "lists": true})).await;
    let again = recv_event(&mut ws).await;
    assert_eq!((again.id.as_str(), again.data()["type"].as_str()), ("l7", Some("lists.reset")));
}

#[tokio::test]
async fn the_users_stream_limit_refuses_an_open_over_it() {
    let engine = spool_engine::EngineConfig { max_streams_per_user: 2, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    // The socket is one stream, the first open the second.
    let mut ws = connect(&server).await;
    send(&mut ws, json!({"op": "open", "id": "l", "lists": true})).await;
    recv_event(&mut ws).await;
    send(&mut ws, open_session("s", &session, None)).await;
    let refused = recv_event(&mut ws).await;
    assert_eq!((refused.id.as_str(), refused.data()["status"].as_u64()), ("s", Some(429)), "{refused:?}");
    assert_eq!(refused.data()["error"]["code"], "too_many_streams");
}

#[tokio::test]
async fn a_page_of_another_origin_is_refused() {
    let server = TestServer::start().await;
    let mut request = url(&server).into_client_request().expect("request");
    request.headers_mut().insert("origin", "http://evil.example".parse().expect("header"));
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), StatusCode::FORBIDDEN);
            let body: Value = serde_json::from_slice(res.body().as_deref().unwrap_or_default()).expect("JSON");
            assert_eq!(body["error"]["code"], "bad_origin");
        }
        other => panic!("a foreign origin must be refused: {other:?}"),
    }
    // The server's own page gets in.
    let mut request = url(&server).into_client_request().expect("request");
    request.headers_mut().insert("origin", format!("http://{}", server.addr).parse().expect("header"));
    assert!(tokio_tungstenite::connect_async(request).await.is_ok());
}

#[tokio::test]
async fn revoking_the_token_closes_the_socket() {
    let server = TestServer::start().await;
    let (token, secret) = server.engine.auth().create_token("erin").await.expect("token");
    let mut ws = connect_as(&server, Some(&secret)).await;
    send(&mut ws, json!({"op": "open", "id": "l", "lists": true})).await;
    recv_event(&mut ws).await;
    server.engine.auth().revoke_token(&token.id).await.expect("revoke");
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the socket closes");
    assert_eq!(closed, Some(CloseCode::Policy));
}

/// `/metrics`' value for one series.
async fn metric(server: &TestServer, series: &str) -> f64 {
    let text = server.client.get(server.url("/metrics")).send().await.expect("scrape").text().await.expect("body");
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test]
async fn a_socket_that_stops_reading_is_closed_while_another_gets_every_frame() {
    const DELTAS: usize = 60_000;
    // Headroom for the reading client on a busy machine, as in ws.rs: the test is
    // about the socket that never reads (about 10 MB of frames go by it).
    let limits = spool_engine::EventLimits { queue_bytes: 4 << 20, ..Default::default() };
    let engine = spool_engine::EngineConfig { limits, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    const CUTS: &str = "spool_slow_client_disconnects_total";
    let cuts_before = metric(&server, CUTS).await;

    // A client that stops reading after its open messages. (Not with a tiny receive
    // buffer: through a window smaller than a loopback segment, what the server's
    // kernel still holds for it after the close would trickle out one zero-window
    // probe at a time, and the drain below would not see the end in time.)
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let (mut stuck, _) =
        tokio_tungstenite::client_async(url(&server), MaybeTlsStream::Plain(tcp)).await.expect("handshake");
    send(&mut stuck, open_session("s", &session, None)).await;
    send(&mut stuck, json!({"op": "open", "id": "l", "lists": true})).await;
    let mut fast = connect(&server).await;
    send(&mut fast, open_session("s", &session, None)).await;
    let snapshot = recv_event(&mut fast).await;

    server.start_run(&session, &format!("stream: {DELTAS}")).await;
    let frames = recv_until(&mut fast, settled("s")).await;
    let mut seq = snapshot.data()["seq"].as_u64().expect("seq");
    for frame in &frames {
        seq += 1;
        assert_eq!(frame.data()["seq"], seq, "every frame, in order");
    }
    let deltas = frames.iter().filter(|m| m.data()["event"]["assistantMessageEvent"]["type"] == "text_delta").count();
    assert_eq!(deltas, DELTAS, "the reading client got every delta");

    // The stuck one was closed: reading now drains what was buffered, then ends, and
    // it never saw the end of the run.
    let (mut settled_seen, mut received, mut code) = (false, 0usize, None);
    let drained = tokio::time::timeout(WAIT, async {
        while let Some(Ok(message)) = stuck.next().await {
            match message {
                Message::Text(text) => {
                    received += text.len();
                    settled_seen |= text.contains("\"agent_settled\"");
                }
                Message::Close(frame) => code = frame.map(|f| f.code),
                _ => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the server never closed the stuck socket ({received} bytes, {code:?})");
    assert!(!settled_seen, "the stuck client cannot have kept up");
    assert!(code.is_none() || code == Some(CloseCode::Again), "{code:?}");
    // What reached it is what the sockets held when it stopped reading (its receive
    // buffer, which does not grow while nothing is read and which Linux doubles, and
    // the server's send buffer) plus at most the lag limit: never the rest.
    let bound = limits.queue_bytes + kernel_buffer("tcp_wmem", 2) + 2 * kernel_buffer("tcp_rmem", 1);
    assert!(received <= bound, "{received} bytes reached the stuck client, more than {bound}");
    assert_eq!(metric(&server, CUTS).await - cuts_before, 1.0, "one client was cut, once");
}

#[tokio::test]
async fn the_heartbeat_comes_with_an_empty_id() {
    let heartbeat = std::time::Duration::from_millis(100);
    let server = TestServer::start_with(TestOptions { heartbeat, ..TestOptions::default() }).await;
    let mut ws = connect(&server).await;
    let beat = recv(&mut ws).await;
    assert_eq!((beat.id.as_str(), beat.event.as_bytes()), ("", spool_protocol::sse::HEARTBEAT));
}

#[tokio::test]
async fn approvals_true_makes_the_socket_a_place_to_answer_approvals() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt = |file: &str| {
        let text = format!("tool: write {}", json!({"path": file, "content": "x"}));
        json!({"text": text, "approvalPolicy": "deny"})
    };
    // Without `approvals`, a viewer only: under the deny policy the call fails closed.
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("view", &session, None)).await;
    recv_event(&mut ws).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), prompt("a.txt")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let frames = recv_until(&mut ws, settled("view")).await;
    assert!(!frames.iter().any(|m| m.event_type().as_deref() == Some("approval_requested")), "{frames:?}");
    assert!(frames.iter().any(|m| m.event.contains("no one is connected")), "the call was refused");

    // With it, the same run waits for the person, and the socket shows the approval.
    send(&mut ws, json!({"op": "open", "id": "view", "session": session, "approvals": true})).await;
    recv_until(&mut ws, |m| m.data()["type"] == "session.snapshot").await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), prompt("b.txt")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    recv_until(&mut ws, |m| m.id == "view" && m.event_type().as_deref() == Some("approval_requested")).await;
}

#[tokio::test]
async fn deleting_a_project_ends_its_sessions_streams() {
    let server = TestServer::start().await;
    let project = id_of(&server.create_project(&server.new_dir("doomed")).await);
    let session = id_of(&server.create_session(&project, None).await);
    let mut ws = connect(&server).await;
    send(&mut ws, open_session("s", &session, None)).await;
    recv_event(&mut ws).await;
    let (status, _) = server.delete(&format!("/api/projects/{project}")).await;
    assert!(status.is_success(), "{status}");
    let seen = recv_until(&mut ws, |m| m.kind().as_deref() == Some("end")).await;
    assert_eq!(seen.last().map(|m| m.id.as_str()), Some("s"));
    // The socket stays open.
    send(&mut ws, json!({"op": "open", "id": "l", "lists": true})).await;
    assert_eq!(recv_event(&mut ws).await.data()["type"], "lists.reset");
}
