//! What the test suites share: [`Fake`], a scriptable model provider; the test
//! services ([`services`]: a database of a test's own, the Redis URL); the `spool`
//! process harness ([`process`]); the one SSE reader ([`sse`]); the redactions of
//! golden-frame snapshots ([`golden`]); a test run again in a process of its own
//! ([`own_process`]); and a TCP proxy that cuts, stalls, delays and heals a process's
//! connections to a service ([`proxy`]).
//!
//! `Fake` is a plain HTTP/1.1 server on a loopback port that answers each connection
//! with the next scripted [`Reply`], written byte for byte. It is hand-written on a
//! `TcpListener` rather than built on a web framework because the tests need control a
//! framework hides: a streamed body split at chosen byte offsets with a flush after each
//! piece, a chunked body that stops without its last chunk (a cut connection), and
//! knowing the moment the client closes its end. The provider tests of `spool-model`
//! drive the model clients with it; the server's tests drive whole runs through it.

pub mod ag_ui;
pub mod golden;
pub mod own_process;
pub mod process;
pub mod proxy;
pub mod push_service;
pub mod services;
pub mod sse;

pub use own_process::in_own_process;
pub use services::{TestDb, redis_url};
pub use sse::{ReceivedFrame, SseStream};

use std::collections::HashMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the fake received.
#[derive(Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: serde_json::Value,
}

#[derive(Clone)]
pub enum Reply {
    /// A whole response with this status, extra headers and body.
    Status { status: u16, headers: Vec<(&'static str, String)>, body: String },
    /// A 200 `text/event-stream` response, chunked, one HTTP chunk per piece.
    Stream { pieces: Vec<Vec<u8>>, end: End },
}

#[derive(Clone, Copy)]
pub enum End {
    /// The last chunk is sent: the body is complete.
    Complete,
    /// The connection is closed without the last chunk, as when a proxy or the
    /// provider dies mid-answer.
    Cut,
    /// The connection is kept open until the client closes it; `closed` reports that.
    Hold,
}

pub struct Fake {
    pub base_url: String,
    requests: mpsc::UnboundedReceiver<Recorded>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl Fake {
    /// Serves `replies` in order, one connection each.
    pub async fn start(replies: Vec<Reply>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let address = listener.local_addr().expect("a bound address");
        let (request_tx, requests) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for reply in replies {
                let Ok((socket, _)) = listener.accept().await else { return };
                let request_tx = request_tx.clone();
                let closed_tx = closed_tx.clone();
                tokio::spawn(async move { serve(socket, reply, request_tx, closed_tx).await });
            }
        });
        Fake { base_url: format!("http://{address}"), requests, closed }
    }

    /// Serves `reply` to every connection, for as long as the test runs.
    pub async fn always(reply: Reply) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let address = listener.local_addr().expect("a bound address");
        let (request_tx, requests) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (reply, request_tx, closed_tx) = (reply.clone(), request_tx.clone(), closed_tx.clone());
                tokio::spawn(async move { serve(socket, reply, request_tx, closed_tx).await });
            }
        });
        Fake { base_url: format!("http://{address}"), requests, closed }
    }

    /// The next request the fake received.
    pub async fn request(&mut self) -> Recorded {
        tokio::time::timeout(Duration::from_secs(10), self.requests.recv())
            .await
            .expect("the fake receives a request within 10 s")
            .expect("the fake is running")
    }

    /// How many requests arrived so far.
    pub fn requests_so_far(&mut self) -> usize {
        let mut n = 0;
        while self.requests.try_recv().is_ok() {
            n += 1;
        }
        n
    }

    /// Resolves when a held connection is closed by the client; panics after `within`.
    pub async fn connection_closed(&mut self, within: Duration) {
        tokio::time::timeout(within, self.closed.recv())
            .await
            .expect("the client closes the connection in time")
            .expect("the fake is running");
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    requests: mpsc::UnboundedSender<Recorded>,
    closed: mpsc::UnboundedSender<()>,
) {
    socket.set_nodelay(true).expect("nodelay on a loopback socket");
    let recorded = read_request(&mut socket).await;
    let _ = requests.send(recorded);
    match reply {
        Reply::Status { status, headers, body } => {
            let mut head = format!(
                "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
        Reply::Stream { pieces, end } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for piece in pieces {
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(&piece);
                chunk.extend_from_slice(b"\r\n");
                if socket.write_all(&chunk).await.is_err() || socket.flush().await.is_err() {
                    return;
                }
            }
            match end {
                End::Complete => {
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                    let _ = socket.shutdown().await;
                }
                End::Cut => drop(socket),
                End::Hold => {
                    // Reading returns 0 (or fails) only once the client has closed.
                    let mut buffer = [0u8; 1024];
                    while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                    let _ = closed.send(());
                }
            }
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> Recorded {
    let mut data = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut buffer).await.expect("the client sends a request");
        assert!(n > 0, "the client closed before sending a whole request");
        data.extend_from_slice(&buffer[..n]);
    };
    let head = String::from_utf8(data[..head_end].to_vec()).expect("request headers are UTF-8");
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().expect("a request line").split(' ');
    let method = request_line.next().expect("a method").to_owned();
    let path = request_line.next().expect("a path").to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").map_or(0, |v| v.parse().expect("a numeric content-length"));
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut buffer).await.expect("the client sends the body");
        assert!(n > 0, "the client closed before sending the whole body");
        body.extend_from_slice(&buffer[..n]);
    }
    let body = serde_json::from_slice(&body).expect("the request body is JSON");
    Recorded { method, path, headers, body }
}

/// Splits `body` into pieces of 1, 2, 3, 5, 7, 11 and 13 bytes in turn, so piece
/// boundaries fall inside multi-byte characters, inside JSON strings and inside
/// `data:` prefixes.
pub fn split_awkwardly(body: &str) -> Vec<Vec<u8>> {
    let bytes = body.as_bytes();
    let sizes = [1, 2, 3, 5, 7, 11, 13];
    let mut pieces = Vec::new();
    let mut start = 0;
    for size in sizes.iter().cycle() {
        if start >= bytes.len() {
            break;
        }
        let end = (start + size).min(bytes.len());
        pieces.push(bytes[start..end].to_vec());
        start = end;
    }
    pieces
}

/// An OpenAI chat-completions stream body: each chunk as a `data:` event, then
/// `[DONE]`.
pub fn openai_sse(chunks: &[serde_json::Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

/// One OpenAI stream chunk carrying `delta` (e.g. `{"content": "Hel"}`).
pub fn openai_delta(delta: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
           "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]})
}

/// The OpenAI stream chunk that ends an answer with `reason` (`stop`, `tool_calls` …).
pub fn openai_finish(reason: &str) -> serde_json::Value {
    serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
           "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason}]})
}
