//! Presence: who is on a session. A terminal's SSE stream (`?approvals=1&client=cli`), a
//! web page's socket (`/api/streams`, `approvals`) and a hub client each count as a view
//! that can answer, by kind; the page hiding itself takes it out of `visible`; every
//! view's stream hears `session.presence` (the hub's `channel.presence`) once the counts
//! settle; and as each goes, the counts fall. (Across nodes, with Redis: the bus's
//! `tests/presence.rs`.)

use crate::common;

use common::{SseStream, TestOptions, TestServer, WAIT};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A server that announces presence (the binary's default; off in other tests, whose
/// exact frame sequences a frame on a timer would interleave).
async fn announcing() -> TestServer {
    let mut options = TestOptions::default();
    options.engine.presence = Some(Duration::from_millis(50));
    TestServer::start_with(options).await
}

async fn connect(server: &TestServer, path: &str) -> Ws {
    let url = format!("ws://{}{path}", server.addr);
    let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    ws
}

/// The next text message of a socket (pings skipped).
async fn text(ws: &mut Ws) -> String {
    loop {
        let message =
            tokio::time::timeout(WAIT, ws.next()).await.expect("a message in time").expect("open").expect("ok");
        if let Message::Text(text) = message {
            return text.to_string();
        }
    }
}

/// `GET /api/sessions/{id}/presence`, asked until `done` holds (the route counts at once;
/// a socket's message or its closing reaches the server a moment after it is sent).
async fn presence_until(server: &TestServer, session: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, presence) = server.get(&format!("/api/sessions/{session}/presence")).await;
        assert_eq!(status, 200, "{presence}");
        if done(&presence) {
            return presence;
        }
        assert!(tokio::time::Instant::now() < deadline, "presence still {presence} after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn counts(p: &Value) -> (u64, u64, u64) {
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    (n("viewers"), n("answerers"), n("visible"))
}

#[tokio::test]
async fn views_and_answerers_rise_and_fall_over_sse_the_socket_and_the_hub() {
    let server = announcing().await;
    let session = server.new_session().await;
    let nobody = presence_until(&server, &session, |_| true).await;
    assert_eq!(nobody, json!({"viewers": 0, "answerers": 0, "visible": 0}), "nobody yet");

    // A terminal that answers approvals.
    let url = server.url(&format!("/api/sessions/{session}/events?approvals=1&client=cli"));
    let mut terminal = SseStream::new(server.client.get(url).send().await.expect("events"));
    terminal.next_frame().await.expect("snapshot");
    let one = presence_until(&server, &session, |_| true).await;
    assert_eq!(counts(&one), (1, 1, 1));
    assert_eq!(one["clients"], json!({"cli": 1}));

    // A web page's socket, then the page hidden.
    let mut page = connect(&server, "/api/streams").await;
    let open = json!({"op": "open", "id": "s1", "session": session, "approvals": true});
    page.send(Message::Text(open.to_string().into())).await.expect("open");
    while !text(&mut page).await.starts_with("s1\nevent: open") {}
    let two = presence_until(&server, &session, |_| true).await;
    assert_eq!(counts(&two), (2, 2, 2));
    assert_eq!(two["clients"], json!({"web": 1, "cli": 1}));
    let hide = json!({"type": "presence", "id": "s1", "visible": false});
    page.send(Message::Text(hide.to_string().into())).await.expect("hide");
    presence_until(&server, &session, |p| counts(p) == (2, 2, 1)).await;

    // A hub client following the session's channel.
    let mut hub = connect(&server, &format!("/api/ws?channels={session}")).await;
    let three = presence_until(&server, &session, |p| p["viewers"] == 3).await;
    assert_eq!(counts(&three), (3, 3, 2));
    assert_eq!(three["clients"], json!({"web": 1, "cli": 1, "hub": 1}));

    // Every view hears it once it settles: the native frame, the hub's event.
    let settled = |p: &Value| counts(p) == (3, 3, 2);
    loop {
        let frame = terminal.next_json().await.expect("a frame");
        if frame["type"] == "session.presence" && settled(&frame["presence"]) {
            break;
        }
    }
    loop {
        let event: Value = serde_json::from_str(&text(&mut hub).await).expect("JSON");
        if event["type"] == "channel.presence" && settled(&event["data"]) {
            assert_eq!(event["channel_id"], session);
            break;
        }
    }
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(counts(&detail["state"]["presence"]), (3, 3, 2), "snapshots carry it");

    // And they fall as each goes.
    drop(page);
    let after_page = presence_until(&server, &session, |p| p["viewers"] == 2).await;
    assert_eq!(counts(&after_page), (2, 2, 2));
    assert_eq!(after_page["clients"], json!({"cli": 1, "hub": 1}));
    drop(hub);
    presence_until(&server, &session, |p| counts(p) == (1, 1, 1)).await;
    loop {
        let frame = terminal.next_json().await.expect("a frame");
        if frame["type"] == "session.presence" && counts(&frame["presence"]) == (1, 1, 1) {
            break;
        }
    }
    drop(terminal);
    let gone = presence_until(&server, &session, |p| p["viewers"] == 0).await;
    assert_eq!(gone, json!({"viewers": 0, "answerers": 0, "visible": 0}));
}

#[tokio::test]
async fn a_plain_viewer_answers_nothing_and_another_users_session_is_not_found() {
    let server = announcing().await;
    let session = server.new_session().await;
    let url = server.url(&format!("/api/sessions/{session}/events"));
    let mut viewer = SseStream::new(server.client.get(url).send().await.expect("events"));
    viewer.next_frame().await.expect("snapshot");
    let one = presence_until(&server, &session, |_| true).await;
    assert_eq!(counts(&one), (1, 0, 0));
    assert_eq!(one["clients"], json!({"other": 1}));
    let (status, _) = server.get("/api/sessions/ses_01jd0000000000000000000000/presence").await;
    assert_eq!(status, 404);
}
