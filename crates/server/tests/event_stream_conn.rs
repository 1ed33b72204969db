//! The lean event-stream connection (`serve/event_stream.rs`), through a real server on a
//! real port: a `GET` that asks for `text/event-stream` is answered outside hyper, and a
//! client must not be able to tell except by `connection: close`. The same stream read
//! with and without the `Accept` header (hyper's path) carries the same frames; a
//! refusal carries the same JSON; a stuck client on the lean path is cut like one on
//! hyper's; and what the accept loop hands to hyper after reading it (requests sent in
//! pieces, pipelined, with a head over the lean path's limit) arrives whole.
//!
//! A stream asked for on a keep-alive connection after other requests (a browser's
//! pooled connection, `serve/keep_alive.rs`), and over TLS with HTTP/1.1, takes the
//! lean path too: the same frames as hyper's path (HTTP/2 over TLS), resumable from a
//! cursor, and the server goes on serving ordinary requests.

use crate::common;

use common::{Open, SseStream, TestCert, TestOptions, TestServer, WAIT};
use futures::TryStreamExt;
use http_body_util::BodyStream;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use reqwest::StatusCode;
use spool_engine::{EngineConfig, EventLimits};
use spool_test_support::sse::ReceivedFrame;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

fn is_settled(frame: &ReceivedFrame) -> bool {
    frame.event_type() == Some("agent_settled")
}

/// Opens a session stream with or without `Accept: text/event-stream`, on a connection
/// of its own: only a connection's first request can take the lean path (a keep-alive
/// connection that served other requests stays hyper's).
async fn open(server: &TestServer, session: &str, accept: bool) -> reqwest::Response {
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let mut request = client.get(server.url(&format!("/api/sessions/{session}/events")));
    if accept {
        request = request.header("accept", "text/event-stream");
    }
    tokio::time::timeout(WAIT, request.send()).await.expect("answer in time").expect("request")
}

/// A frame as a client keeps it: its SSE id and data, heartbeats aside.
fn wire(frames: &[ReceivedFrame]) -> Vec<String> {
    frames.iter().map(|f| f.json.to_string()).collect()
}

#[tokio::test]
async fn the_lean_path_and_hypers_carry_the_same_frames() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let lean = open(&server, &session, true).await;
    let hyper = open(&server, &session, false).await;
    assert_eq!(lean.status(), StatusCode::OK);
    assert_eq!(hyper.status(), StatusCode::OK);
    // How a client can tell the two apart: only the lean path closes after its stream.
    assert_eq!(lean.headers()["connection"], "close");
    assert!(hyper.headers().get("connection").is_none(), "{:?}", hyper.headers());
    for header in ["content-type", "cache-control", "x-request-id"] {
        assert_eq!(
            lean.headers().contains_key(header),
            hyper.headers().contains_key(header),
            "{header}: lean {:?}, hyper {:?}",
            lean.headers(),
            hyper.headers()
        );
    }
    assert_eq!(lean.headers()["content-type"], hyper.headers()["content-type"]);

    same_frames(&server, &session, vec![SseStream::new(lean), SseStream::new(hyper)]).await;
}

/// Each stream, opened on `session` and read from its start, gets the same snapshot
/// and then every frame of a 3,000-delta run, in the same order.
async fn same_frames(server: &TestServer, session: &str, mut streams: Vec<SseStream>) {
    let mut snapshots = Vec::new();
    for stream in &mut streams {
        snapshots.push(stream.next_frame().await.expect("snapshot").json);
    }
    assert!(snapshots.iter().all(|s| *s == snapshots[0]), "the same snapshot: {snapshots:?}");
    server.start_run(session, "stream: 3000").await;
    let mut runs = Vec::new();
    for stream in &mut streams {
        runs.push(wire(&stream.frames_until(is_settled).await));
    }
    let deltas = runs[0].iter().filter(|f| f.contains(r#""type":"text_delta""#)).count();
    assert_eq!(deltas, 3000, "every delta");
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert!(*run == runs[0], "stream {i}: the same frames in the same order as stream 0");
    }
}

#[tokio::test]
async fn a_refusal_on_the_lean_path_is_the_same_json_error() {
    let server = TestServer::start().await;
    let missing = "ses_01jd0000000000000000000009";
    let lean = open(&server, missing, true).await;
    let hyper = open(&server, missing, false).await;
    assert_eq!(lean.status(), StatusCode::NOT_FOUND);
    assert_eq!(hyper.status(), StatusCode::NOT_FOUND);
    assert_eq!(lean.headers()["connection"], "close");
    let lean: serde_json::Value = lean.json().await.expect("a JSON body");
    let hyper: serde_json::Value = hyper.json().await.expect("a JSON body");
    assert_eq!(lean["error"], hyper["error"]);
    assert_eq!(lean["message"], hyper["message"]);
}

#[tokio::test]
async fn a_stuck_client_on_the_lean_path_is_cut_and_others_get_every_frame() {
    // A small queue, so a few thousand deltas put the stuck client over it; one stream
    // per user would hide the cut behind a 429, so the limit stays at its default.
    let limits = EventLimits { queue_bytes: 64 * 1024, ..Default::default() };
    let engine = EngineConfig { limits, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let cuts_before = metric(&server, "spool_slow_client_disconnects_total").await;

    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stuck = socket.connect(server.addr).await.expect("connect");
    let request =
        format!("GET /api/sessions/{session}/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n");
    stuck.write_all(request.as_bytes()).await.expect("send request");

    let mut reader = server.events(&session, Open::fresh()).await;
    reader.next_frame().await.expect("snapshot");
    server.start_run(&session, "stream: 20000").await;
    let frames = reader.frames_until(is_settled).await;
    let deltas = frames.iter().filter(|f| f.json["event"]["assistantMessageEvent"]["type"] == "text_delta").count();
    assert_eq!(deltas, 20000, "the reading client got every delta");

    // Drained now, the stuck connection ends without the chunked terminator: dropped.
    let mut received = Vec::new();
    let drained = tokio::time::timeout(WAIT, async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stuck.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the server never closed the stuck connection");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("\r\nconnection: close\r\n"), "{text:.300}");
    assert!(!text.contains("agent_settled"), "the stuck client cannot have kept up");
    assert!(!received.ends_with(b"\r\n0\r\n\r\n"), "the body finished normally instead of being cut");
    assert_eq!(metric(&server, "spool_slow_client_disconnects_total").await, cuts_before + 1.0);
}

/// One counter's value on `/metrics` (0 when absent).
async fn metric(server: &TestServer, name: &str) -> f64 {
    let text = server.client.get(server.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().split(' ').next()?.parse().ok()))
        .unwrap_or(0.0)
}

/// Reads one response with a `Content-Length` body from `tcp`; returns its head and body.
async fn read_response(tcp: &mut TcpStream, got: &mut Vec<u8>) -> (String, String) {
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(got).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse().ok())
                .expect("content-length");
            if rest.len() >= length {
                let consumed = head.len() + 4 + length;
                got.drain(..consumed);
                return (head.to_owned(), rest[..length].to_owned());
            }
        }
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf)).await.expect("response in time").expect("read");
        assert!(n > 0, "closed before a whole response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn what_is_handed_to_hyper_after_the_sniff_arrives_whole() {
    let server = TestServer::start().await;

    // A head in three pieces, the last after a pause the sniff must wait out.
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    for piece in ["GET /api/hea", "lth HTTP/1.1\r\nHo", "st: localhost\r\n\r\n"] {
        tcp.write_all(piece.as_bytes()).await.expect("send");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got = Vec::new();
    let (head, _) = read_response(&mut tcp, &mut got).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // Two pipelined requests in one write; the connection stays open between them.
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    let two = "GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /api/nope HTTP/1.1\r\nHost: localhost\r\n\r\n";
    tcp.write_all(two.as_bytes()).await.expect("send");
    let mut got = Vec::new();
    let (first, _) = read_response(&mut tcp, &mut got).await;
    let (second, body) = read_response(&mut tcp, &mut got).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(second.starts_with("HTTP/1.1 404"), "{second}");
    assert!(body.contains("not_found"), "{body}");

    // A POST whose body comes in a second write.
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    let body = r#"{"texts":["**hi**"]}"#;
    let head = format!(
        "POST /api/markdown HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("send head");
    tokio::time::sleep(Duration::from_millis(20)).await;
    tcp.write_all(body.as_bytes()).await.expect("send body");
    let mut got = Vec::new();
    let (head, answer) = read_response(&mut tcp, &mut got).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head} {answer}");
    assert!(answer.contains("<strong>hi</strong>"), "{answer}");

    // An event-stream request whose head is over the lean path's 16 KiB goes to hyper
    // and is still a stream.
    let session = server.new_session().await;
    let res = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .get(server.url(&format!("/api/sessions/{session}/events")))
        .header("accept", "text/event-stream")
        .header("x-padding", "p".repeat(20 * 1024))
        .send()
        .await
        .expect("request");
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().get("connection").is_none(), "served by hyper: {:?}", res.headers());
    SseStream::new(res).next_frame().await.expect("snapshot");
}

/// One HTTP/1.1 connection (plain, or TLS with ALPN `http/1.1`) driven by hyper's own
/// client: its requests go one after another on the same socket, as a browser's pooled
/// keep-alive connection carries them.
struct KeptAlive {
    send: SendRequest<String>,
    host: String,
}

impl KeptAlive {
    async fn plain(server: &TestServer) -> Self {
        Self::over(TcpStream::connect(server.addr).await.expect("connect"), server).await
    }

    /// Over TLS, offering only `http/1.1` (as a client without HTTP/2 does).
    async fn tls(server: &TestServer, cert: &TestCert) -> Self {
        use tokio_rustls::rustls::{self, pki_types::CertificateDer, pki_types::pem::PemObject};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(cert.pem.as_bytes()).expect("the PEM certificate")).expect("trusted");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = TcpStream::connect(server.addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        Self::over(tls, server).await
    }

    async fn over<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I, server: &TestServer) -> Self {
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.expect("HTTP/1.1");
        tokio::spawn(conn);
        KeptAlive { send, host: server.addr.to_string() }
    }

    /// A request on this connection, its answer as a `reqwest` response (so the test
    /// toolkit's SSE reader can read it).
    async fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> reqwest::Response {
        self.send.ready().await.expect("the connection is still open for another request");
        let mut request = axum::http::Request::builder().method(method).uri(path).header("host", &self.host);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.to_owned()).expect("a request");
        let answer =
            tokio::time::timeout(WAIT, self.send.send_request(request)).await.expect("in time").expect("answer");
        let answer = answer.map(|body| {
            reqwest::Body::wrap_stream(
                BodyStream::new(body).try_filter_map(|frame| async move { Ok(frame.into_data().ok()) }),
            )
        });
        reqwest::Response::from(answer)
    }

    async fn events(&mut self, session: &str, headers: &[(&str, &str)]) -> SseStream {
        let mut with_accept = vec![("accept", "text/event-stream")];
        with_accept.extend_from_slice(headers);
        let res = self.request("GET", &format!("/api/sessions/{session}/events"), &with_accept, "").await;
        assert_eq!(res.status(), StatusCode::OK);
        SseStream::new(res)
    }

    /// Ordinary requests, each answered in full: a GET, and a POST whose body the
    /// handler reads.
    async fn ordinary_requests(&mut self) {
        let health = self.request("GET", "/api/health", &[], "").await;
        assert_eq!(health.status(), StatusCode::OK);
        health.bytes().await.expect("the whole answer");
        let json = [("content-type", "application/json")];
        let markdown = self.request("POST", "/api/markdown", &json, r#"{"texts":["**hi**"]}"#).await;
        assert_eq!(markdown.status(), StatusCode::OK);
        assert!(markdown.text().await.expect("text").contains("<strong>hi</strong>"));
    }
}

#[tokio::test]
async fn a_stream_after_other_requests_on_a_kept_alive_connection_is_lean_with_the_same_frames() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut conn = KeptAlive::plain(&server).await;
    conn.ordinary_requests().await;
    let lean = conn.events(&session, &[]).await;
    // The lean path's mark: it serves this one request, then closes.
    assert_eq!(lean.header("connection"), "close", "{:?}", lean.headers);
    let hyper = open(&server, &session, false).await;
    assert!(hyper.headers().get("connection").is_none(), "hyper's path: {:?}", hyper.headers());
    same_frames(&server, &session, vec![lean, SseStream::new(hyper)]).await;
    // And the server goes on serving.
    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut again = KeptAlive::plain(&server).await;
    again.ordinary_requests().await;
    again.ordinary_requests().await;
}

#[tokio::test]
async fn a_stream_resumed_on_a_kept_alive_connection_replays_after_its_cursor_then_goes_on_live() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stayed = server.events(&session, Open::fresh()).await;
    stayed.next_frame().await.expect("snapshot");
    server.start_run(&session, "stream: 40").await;
    let sent = stayed.frames_until(is_settled).await;
    let cursor = sent[10].cursor();
    let mut conn = KeptAlive::plain(&server).await;
    conn.ordinary_requests().await;
    let mut back = conn.events(&session, &[("last-event-id", &cursor)]).await;
    assert_eq!(back.header("connection"), "close", "lean: {:?}", back.headers);
    let last = sent.last().expect("frames").cursor();
    let replayed = back.frames_until(|f| f.cursor() == last).await;
    assert_eq!(wire(&replayed), wire(&sent[11..]), "the frames after the cursor");
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), serde_json::json!({"title": "t"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let live = stayed.next_frame().await.expect("a live frame");
    assert_eq!(back.next_frame().await.expect("the live frame").json, live.json);
    // The cursor as a query parameter, as a client that cannot set headers sends it.
    let query = format!("/api/sessions/{session}/events?cursor={cursor}");
    let mut conn = KeptAlive::plain(&server).await;
    conn.ordinary_requests().await;
    let res = conn.request("GET", &query, &[("accept", "text/event-stream")], "").await;
    assert_eq!(res.headers()["connection"], "close");
    let mut back = SseStream::new(res);
    assert_eq!(back.next_frame().await.expect("the frame after the cursor").json, sent[11].json);
}

#[tokio::test]
async fn over_tls_a_stream_on_http11_is_lean_first_or_after_other_requests_with_hypers_frames() {
    let cert = TestCert::new();
    let server = TestServer::start_with(TestOptions { tls: Some(cert.clone()), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    // The test client speaks HTTP/2 over TLS: hyper's path, the reference.
    let h2 = server.events_response(&session, &Open::fresh()).await;
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
    let mut first = KeptAlive::tls(&server, &cert).await;
    let lean_first = first.events(&session, &[]).await;
    assert_eq!(lean_first.header("connection"), "close", "{:?}", lean_first.headers);
    let mut later = KeptAlive::tls(&server, &cert).await;
    later.ordinary_requests().await;
    let lean_later = later.events(&session, &[]).await;
    assert_eq!(lean_later.header("connection"), "close", "{:?}", lean_later.headers);
    same_frames(&server, &session, vec![SseStream::new(h2), lean_first, lean_later]).await;

    // Resumed over TLS on a kept-alive connection.
    let mut stayed = server.events(&session, Open::fresh()).await;
    stayed.next_frame().await.expect("snapshot");
    server.start_run(&session, "stream: 20").await;
    let sent = stayed.frames_until(is_settled).await;
    let mut conn = KeptAlive::tls(&server, &cert).await;
    conn.ordinary_requests().await;
    let mut back = conn.events(&session, &[("last-event-id", &sent[5].cursor())]).await;
    let replayed = back.frames_until(is_settled).await;
    assert_eq!(wire(&replayed), wire(&sent[6..]), "the frames after the cursor");

    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut again = KeptAlive::tls(&server, &cert).await;
    again.ordinary_requests().await;
}
