//! A fake OpenAI-compatible model server for `spool-bench opencode-vs`: the one model
//! both servers under comparison talk to, so each gets the same deltas at the same pace.
//!
//! It also remembers when it wrote each delta of its latest answer
//! ([`FakeModel::written`]): `spool-bench baseline` measures a delivery's latency from
//! that instant (bench and servers share one machine, so one monotonic clock).
//!
//! `POST …/chat/completions` answers with server-sent `chat.completion.chunk`s: a role
//! chunk, `deltas` one-word content deltas (`--delay-ms` apart on average), a `stop` chunk, a usage
//! chunk and `data: [DONE]`, whatever the request asked. `GET …/models` lists the one
//! model, `bench`. Anything else is a 404.
//!
//! It speaks just enough HTTP/1.1 for that: one request per connection, read up to its
//! `content-length`, and a streamed answer delimited by closing the connection
//! (`connection: close`, no chunked encoding), which every HTTP client accepts. The
//! model's work is a sleep and a write, so its own CPU is small next to the servers'.

use anyhow::{Context, Result, bail};
use memchr::memmem;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The model's name in requests, in `GET /models` and in the servers' configuration.
pub const MODEL: &str = "bench";

/// A running fake model; it stops when dropped.
pub struct FakeModel {
    /// `http://127.0.0.1:PORT/v1`: the base URL OpenAI clients append
    /// `/chat/completions` to.
    pub base_url: String,
    calls: Arc<AtomicU64>,
    /// When each delta of the latest answer was written, by index.
    written: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeModel {
    /// Listens on a free loopback port; every chat completion streams `deltas` words,
    /// `delay` apart (zero: as fast as the socket takes them).
    pub async fn start(deltas: usize, delay: Duration) -> Result<FakeModel> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let calls = Arc::new(AtomicU64::new(0));
        let written = Arc::new(Mutex::new(Vec::new()));
        let (counted, stamps) = (calls.clone(), written.clone());
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (calls, written) = (counted.clone(), stamps.clone());
                tokio::spawn(async move {
                    // A client that hangs up mid-answer (an aborted run) is no fault here.
                    let _ = serve(socket, deltas, delay, &calls, &written).await;
                });
            }
        });
        Ok(FakeModel { base_url, calls, written, task })
    }

    /// Chat completions answered so far (a server making calls the bench did not expect,
    /// such as a title, shows here).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// When each delta (`w{i}`, by `i`) of the latest answer was handed to the socket.
    pub fn written(&self) -> Vec<Instant> {
        self.written.lock().expect("no panic holds this lock").clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    deltas: usize,
    delay: Duration,
    calls: &AtomicU64,
    written: &Mutex<Vec<Instant>>,
) -> Result<()> {
    socket.set_nodelay(true)?;
    let (method, path) = read_request(&mut socket).await?;
    if method == "GET" && path.ends_with("/models") {
        let body =
            serde_json::json!({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]})
                .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(body.as_bytes()).await?;
        return Ok(());
    }
    if method != "POST" || !path.ends_with("/chat/completions") {
        socket.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await?;
        return Ok(());
    }
    calls.fetch_add(1, Ordering::Relaxed);
    let mut stamps = Vec::with_capacity(deltas);
    socket
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
        .await?;
    socket.write_all(&chunk(&serde_json::json!({"role": "assistant", "content": ""}), None)).await?;
    // Paced against the answer's start, not the previous write: a timer wakes up to a
    // millisecond late, and `delay` apart should mean `delay` apart on average.
    let start = tokio::time::Instant::now();
    for i in 0..deltas {
        if !delay.is_zero() && i > 0 {
            tokio::time::sleep_until(start + delay * i as u32).await;
        }
        socket.write_all(&chunk(&serde_json::json!({"content": word(i)}), None)).await?;
        stamps.push(Instant::now());
    }
    *written.lock().expect("no panic holds this lock") = stamps;
    socket.write_all(&chunk(&serde_json::json!({}), Some("stop"))).await?;
    socket.write_all(&usage(deltas)).await?;
    socket.write_all(b"data: [DONE]\n\n").await?;
    socket.shutdown().await?;
    Ok(())
}

/// Reads one request's head and body; returns its method and path.
async fn read_request(socket: &mut TcpStream) -> Result<(String, String)> {
    let mut buf = Vec::with_capacity(8192);
    let head_end = loop {
        if let Some(end) = memmem::find(&buf, b"\r\n\r\n") {
            break end;
        }
        if buf.len() > 1 << 20 {
            bail!("request head over 1 MiB");
        }
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the request head ended");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).context("request head is not UTF-8")?;
    let (method, path, length) = parse_head(head)?;
    let mut have = buf.len() - (head_end + 4);
    let mut chunk = [0u8; 8192];
    while have < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the request body ended");
        }
        have += n;
    }
    Ok((method, path))
}

/// The method, path and `content-length` (0 when absent) of a request head.
fn parse_head(head: &str) -> Result<(String, String, usize)> {
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(path)) = (request_line.next(), request_line.next()) else {
        bail!("not an HTTP request line: {head:?}");
    };
    let mut length = 0;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().context("content-length")?;
        }
    }
    Ok((method.to_owned(), path.to_owned(), length))
}

/// The `i`th word the model says: one word and a space, so the answer reads as text.
fn word(i: usize) -> String {
    format!("w{i} ")
}

fn chunk(delta: &serde_json::Value, finish_reason: Option<&str>) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    });
    format!("data: {chunk}\n\n").into_bytes()
}

fn usage(deltas: usize) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": deltas, "total_tokens": 10 + deltas},
    });
    format!("data: {chunk}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_gives_method_path_and_length() {
        let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\naccept: */*";
        assert_eq!(parse_head(head).unwrap(), ("POST".into(), "/v1/chat/completions".into(), 42));
        assert_eq!(parse_head("GET /v1/models HTTP/1.1").unwrap(), ("GET".into(), "/v1/models".into(), 0));
        assert!(parse_head("").is_err());
    }

    /// What an OpenAI client reads back: the words in order, then a stop, usage and
    /// `[DONE]` — over a real socket, as the servers under test read it.
    #[tokio::test]
    async fn streams_the_words_as_chat_completion_chunks() {
        let fake = FakeModel::start(3, Duration::ZERO).await.unwrap();
        let body = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{}/chat/completions", fake.base_url))
            .json(&serde_json::json!({"model": MODEL, "stream": true, "messages": []}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.last(), Some(&"data: [DONE]"));
        let chunks: Vec<serde_json::Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
        assert_eq!(text, "w0 w1 w2 ");
        assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[chunks.len() - 1]["usage"]["completion_tokens"], 3);
        assert_eq!(fake.calls(), 1);
        assert_eq!(fake.written().len(), 3, "one instant per delta");
    }
}
