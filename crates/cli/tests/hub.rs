//! Published hub events through the real binary: `spool token create --publisher` and
//! `spool hub publish` against a `spool serve` on SQLite, read by a WebSocket client;
//! and two nodes on one PostgreSQL database and one Redis, where an event published on
//! the first reaches a subscriber of the second, and a cursor the first gave replays on
//! the second.
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`;
//! without them the two-node test prints a notice and passes, except under CI.

use crate::common;

use common::{TestDb, WAIT, redis_url, serve, spool, start_with};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(base: &str, token: Option<&str>) -> Ws {
    let url = format!("{}/api/ws", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().expect("request");
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    }
    let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    ws
}

async fn recv(ws: &mut Ws) -> Value {
    loop {
        let message =
            tokio::time::timeout(WAIT, ws.next()).await.expect("a message in time").expect("open").expect("ok");
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).expect("JSON");
        }
    }
}

/// The next event on `channel` (other tests sharing the Redis may publish global ones).
async fn recv_on(ws: &mut Ws, channel: &str) -> Value {
    loop {
        let event = recv(ws).await;
        if event["channel_id"] == channel {
            return event;
        }
    }
}

async fn subscribe(ws: &mut Ws, channels: &[&str], cursors: Value) {
    let message = json!({"type": "subscribe", "channels": channels, "cursors": cursors});
    ws.send(Message::Text(message.to_string().into())).await.expect("send");
    while recv(ws).await["type"] != "subscribed" {}
}

/// `spool ARGS…`: its stdout, or its stderr as the error.
fn run(args: &[&str]) -> Result<String, String> {
    let out = spool().args(args).output().expect("run spool");
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    if out.status.success() { Ok(text(&out.stdout)) } else { Err(text(&out.stderr)) }
}

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

#[tokio::test]
async fn spool_hub_publish_reaches_a_websocket_subscriber() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let (server, base) = serve(&["--addr", "127.0.0.1:0", "--data-dir", data]);
    let publisher = run(&["token", "create", "--publisher", "ci", "--data-dir", data]).expect("publisher token");
    let alice = run(&["token", "create", "--user", "alice", "--data-dir", data]).expect("alice's token");
    let mut ws = connect(&base, Some(&alice)).await;
    subscribe(&mut ws, &["chan_cli"], json!({})).await;

    let published = |kind: &str, data: &str, extra: &[&str]| {
        let mut args = vec!["hub", "publish", kind, data, "--server", &base, "--token", &publisher];
        args.extend_from_slice(extra);
        run(&args)
    };
    // A bad payload is refused with the field named, and nothing is delivered.
    let refused =
        published("review.comment", r#"{"id":"r1","path":"a.rs"}"#, &["--channel", "chan_cli", "--to", "alice"])
            .expect_err("body is missing");
    assert!(refused.contains("422") && refused.contains("data") && refused.contains("body"), "{refused}");
    let not_json = published("ticket.created", "{nope", &["--to", "alice"]).expect_err("not JSON");
    assert!(not_json.contains("JSON"), "{not_json}");
    // A user's token cannot publish.
    let user = run(&[
        "hub",
        "publish",
        "ticket.created",
        r#"{"ticket_id":"t"}"#,
        "--to",
        "public",
        "--server",
        &base,
        "--token",
        &alice,
    ])
    .expect_err("a user token");
    assert!(user.contains("not_a_publisher"), "{user}");

    let cursor = published(
        "review.comment",
        r#"{"id":"r1","path":"a.rs","line":3,"body":"looks good"}"#,
        &["--channel", "chan_cli", "--to", "alice"],
    )
    .expect("published");
    let global = published("ticket.created", r#"{"ticket_id":"t1"}"#, &["--to", "public"]).expect("published");
    let got = recv(&mut ws).await;
    assert_eq!(got["type"], "review.comment", "the refused one never arrived: {got}");
    assert_eq!(got["channel_id"], "chan_cli");
    assert_eq!(got["data"], json!({"id": "r1", "path": "a.rs", "line": 3, "body": "looks good"}));
    assert_eq!(got["cursor"], cursor.as_str());
    let got = recv(&mut ws).await;
    assert_eq!((got["type"].as_str(), got["channel_id"].as_str()), (Some("ticket.created"), Some("")));
    assert_eq!(got["cursor"], global.as_str());
    server.stop();
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_second_node_delivers_and_replays_what_the_first_published() {
    let redis = redis_url();
    let db = TestDb::create().await;
    let (dir_a, dir_b) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let (node_a, a) = start_with(&db.url, dir_a.path(), &["--redis-url", &redis, "--node-id", "a"]);
    let (node_b, b) = start_with(&db.url, dir_b.path(), &["--redis-url", &redis, "--node-id", "b"]);
    let channel = unique("chan");
    let mut on_b = connect(&b, None).await;
    subscribe(&mut on_b, &[&channel], json!({})).await;

    let client = reqwest::Client::new();
    let publish = |n: u32| {
        let body = json!({"type": "agent.thinking", "channel_id": channel, "data": {"text": format!("thought {n}")},
                          "audience": "public"});
        let request = client.post(format!("{a}/api/hub/events")).json(&body);
        async move {
            let res = request.send().await.expect("publish on a");
            assert!(res.status().is_success(), "{}", res.status());
            let answer: Value = res.json().await.expect("JSON");
            answer["events"][0]["cursor"].as_str().expect("cursor").to_owned()
        }
    };
    let first = publish(1).await;
    let got = recv_on(&mut on_b, &channel).await;
    assert_eq!((got["type"].as_str(), got["data"]["text"].as_str()), (Some("agent.thinking"), Some("thought 1")));
    assert_eq!(got["cursor"], first.as_str(), "one cursor on every node");
    drop(on_b);

    // Missed while away, replayed on the other node from the first node's cursor.
    publish(2).await;
    publish(3).await;
    let mut again = connect(&b, None).await;
    subscribe(&mut again, &[&channel], json!({ channel.clone(): first })).await;
    for n in 2..=3 {
        assert_eq!(recv_on(&mut again, &channel).await["data"]["text"], format!("thought {n}"));
    }
    node_a.stop();
    node_b.stop();
}
