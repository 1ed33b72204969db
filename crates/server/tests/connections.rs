//! Bounded connections, through a real server on a real port: a socket that sends
//! nothing (or stops half-way through its headers, or idles between keep-alive
//! requests) is closed after the header timeout; list streams, WebSockets and OpenCode
//! `/event` streams count against the per-user stream limit like session streams; and
//! past the connection cap a new connection is answered 503 and closed. Over TLS the
//! same bounds hold from the first moment of a connection, before its handshake: a
//! socket that never shakes hands is closed after the header timeout and holds a place
//! under the cap while it is open; and plain HTTP on the TLS port gets a plain answer.

use crate::common;

use common::{Open, SseStream, TestCert, TestOptions, TestServer, WAIT};
use reqwest::StatusCode;
use spool_engine::EngineConfig;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection; returns what it sent. Panics if the
/// connection is still open after [`WAIT`].
async fn read_until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => panic!("the server kept the connection open; it sent {:?}", String::from_utf8_lossy(&got)),
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response with a `Content-Length` body; returns its head and body.
async fn read_response(tcp: &mut TcpStream) -> (String, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf)).await.expect("response in time").expect("read");
        assert!(n > 0, "closed before the response: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .expect("content-length");
            if body.len() >= length {
                return (head.to_owned(), body[..length].to_owned());
            }
        }
    }
}

fn quick_timeout() -> TestOptions {
    TestOptions { header_timeout: Duration::from_millis(300), ..TestOptions::default() }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let server = TestServer::start_with(quick_timeout()).await;
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let sent = read_until_closed(&mut silent).await;
    assert!(sent.is_empty(), "{:?}", String::from_utf8_lossy(&sent));
    // The server is fine and serves the next client.
    assert_eq!(server.get("/api/health").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_connection_that_stops_half_way_through_its_headers_is_closed() {
    let server = TestServer::start_with(quick_timeout()).await;
    let mut slow = TcpStream::connect(server.addr).await.expect("connect");
    slow.write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n").await.expect("send");
    read_until_closed(&mut slow).await;
    // A stalled first byte of the HTTP/2 preface too: no protocol chosen yet.
    let mut partial = TcpStream::connect(server.addr).await.expect("connect");
    partial.write_all(b"PRI * HTTP").await.expect("send");
    read_until_closed(&mut partial).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let server = TestServer::start_with(quick_timeout()).await;
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("send");
    let (head, _) = read_response(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Kept alive for a while, then closed while it sends nothing more.
    let sent = read_until_closed(&mut tcp).await;
    assert!(sent.is_empty(), "{:?}", String::from_utf8_lossy(&sent));
}

/// Opens a WebSocket on `/api/ws`; `Err(status)` when the upgrade is refused.
async fn websocket(server: &TestServer) -> Result<impl Sized, u16> {
    let url = format!("ws://{}/api/ws", server.addr);
    match tokio_tungstenite::connect_async(url).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => Err(res.status().as_u16()),
        Err(e) => panic!("websocket: {e}"),
    }
}

async fn open_sse(server: &TestServer, path: &str) -> reqwest::Response {
    let request = server.client.get(server.url(path)).header("accept", "text/event-stream");
    tokio::time::timeout(WAIT, request.send()).await.expect("answer in time").expect("request")
}

#[tokio::test]
async fn every_kind_of_stream_counts_against_the_per_user_limit() {
    let engine = EngineConfig { max_streams_per_user: 3, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    // No session yet: a WebSocket without channels follows every session of the user,
    // and each followed session would count as one more stream.
    let project = server.default_project().await;
    let directory = common::urlencode(server.project_dir().to_str().expect("utf-8"));
    let event_path = format!("/event?directory={directory}");

    // One of each non-session kind fills the limit of 3.
    let lists = open_sse(&server, "/api/workspaces/events").await;
    assert_eq!(lists.status(), StatusCode::OK);
    let mut lists = SseStream::new(lists);
    lists.next_event().await.expect("lists.reset");
    let socket = websocket(&server).await.expect("first websocket");
    let opencode = open_sse(&server, &event_path).await;
    assert_eq!(opencode.status(), StatusCode::OK);
    let mut opencode = SseStream::new(opencode);
    opencode.next_event().await.expect("server.connected");

    // The next stream of every kind is refused.
    let session = common::id_of(&server.create_session(&project, None).await);
    for path in ["/api/workspaces/events", &event_path, &format!("/api/sessions/{session}/events")] {
        let res = open_sse(&server, path).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        let body: serde_json::Value = res.json().await.expect("json");
        assert_eq!(body["error"]["code"], "too_many_streams", "{path}");
    }
    assert_eq!(websocket(&server).await.err(), Some(429));

    // Closing one frees its place.
    drop(socket);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let res = server.events_response(&session, &Open::fresh()).await;
        if res.status() == StatusCode::OK {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed websocket was never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_connection_over_the_cap_gets_a_503_and_is_closed() {
    let server = TestServer::start_with(TestOptions { max_connections: 2, ..TestOptions::default() }).await;
    let request = b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
        tcp.write_all(request).await.expect("send");
        let (head, _) = read_response(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(tcp);
    }
    let mut third = TcpStream::connect(server.addr).await.expect("connect");
    third.write_all(request).await.expect("send");
    let (head, body) = read_response(&mut third).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(body["error"]["code"], "too_many_connections");
    read_until_closed(&mut third).await;

    // A connection that closes frees its place.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
        tcp.write_all(request).await.expect("send");
        let (head, _) = read_response(&mut tcp).await;
        if head.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed connection was never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn tls(options: TestOptions) -> TestOptions {
    TestOptions { tls: Some(TestCert::new()), ..options }
}

#[tokio::test]
async fn a_tls_connection_that_never_finishes_its_handshake_is_closed() {
    let server = TestServer::start_with(tls(quick_timeout())).await;
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let sent = read_until_closed(&mut silent).await;
    assert!(sent.is_empty(), "{:?}", String::from_utf8_lossy(&sent));
    // The first bytes of a handshake record, then nothing.
    let mut stalled = TcpStream::connect(server.addr).await.expect("connect");
    stalled.write_all(&[0x16, 0x03, 0x01]).await.expect("send");
    read_until_closed(&mut stalled).await;
    // Neither held up the next client.
    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_tls_connection_holds_a_place_under_the_cap_before_its_handshake() {
    let server = TestServer::start_with(tls(TestOptions { max_connections: 1, ..TestOptions::default() })).await;
    // Connected first, so accepted first: it takes the one place before any handshake.
    let silent = TcpStream::connect(server.addr).await.expect("connect");
    let (status, body) = server.get("/api/health").await;
    // The 503 is read over TLS: a browser sees an answer, not a broken handshake.
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "too_many_connections", "{body}");

    drop(silent);
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.get("/api/health").await.0 != StatusCode::OK {
        assert!(tokio::time::Instant::now() < deadline, "the closed connection was never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn plain_http_on_the_tls_port_is_told_to_use_https() {
    let server = TestServer::start_with(tls(TestOptions::default())).await;
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("send");
    let answer = String::from_utf8(read_until_closed(&mut tcp).await).expect("a text answer");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("use https://"), "{answer}");
    assert_eq!(server.get("/api/health").await.0, StatusCode::OK);
}
