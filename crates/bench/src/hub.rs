//! `spool-bench hub`: the bare broadcast hub that `spool-bench baseline` measures Spool
//! against (issue 19: "server CPU per delivered frame within 1.5× of a bare broadcast
//! hub"). It is the least a server can do to fan one model's answer out over SSE, so
//! the gap between it and Spool is what Spool's features cost per frame.
//!
//! What it does, and nothing more: raw HTTP/1.1 over tokio TCP (no HTTP library);
//! `GET /events` subscribes to one `tokio::sync::broadcast` channel of `Bytes` and
//! writes whatever is ready in one write per wake-up (as Spool's ring does); a
//! subscriber that falls a channel's length behind is dropped, like Spool's slow-client
//! cut. `POST /prompt` calls the model (the same fake OpenAI-compatible server Spool
//! gets, `fake_model.rs`), and for each content chunk encodes one SSE frame, once,
//! shaped and sized like Spool's own `loop.event` `text_delta` frame (same keys, ids of
//! the same length), so both servers copy the same bytes per subscriber; the answer ends
//! with an `agent_settled` frame. There is no store, no run, no replay, no auth.
//!
//! It runs as a child process of the bench (`Hub::start`), so its CPU time and RSS in
//! `/proc/PID/*` are its own, measured exactly as a `spool serve` child's are.

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use memchr::memmem;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// Frames a subscriber may be behind before it is dropped: ≈ 1 MiB of delta frames,
/// Spool's per-connection queue.
const CHANNEL: usize = 4096;
/// Most bytes one write takes (Spool's body chunks are bounded the same way).
const MAX_WRITE: usize = 64 * 1024;
/// Stand-ins for Spool's ids (`stm_…`, `ses_…`, `run_…`: a prefix and 26 characters).
const STREAM_ID: &str = "hub_01JHUB00000000000000000000";
const SESSION_ID: &str = "ses_01JHUB00000000000000000000";
const RUN_ID: &str = "run_01JHUB00000000000000000000";

#[derive(clap::Args, Debug)]
pub struct HubArgs {
    /// The model's base URL (`http://127.0.0.1:PORT/v1`).
    #[arg(long)]
    model_url: String,
}

/// A running hub child process, killed when dropped.
pub struct Hub {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Hub {
    /// Starts `this-binary hub` against the model at `model_url`, on `cpus` when given
    /// (`pin::start_on`), and waits for its `hub listening on` line.
    pub fn start(model_url: &str, cpus: Option<&[usize]>) -> Result<Hub> {
        let mut cmd = Command::new(std::env::current_exe()?);
        if let Some(cpus) = cpus {
            crate::pin::start_on(&mut cmd, cpus);
        }
        let mut child = cmd
            .args(["hub", "--model-url", model_url])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the hub")?;
        let stdout = child.stdout.take().context("the hub's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(base) = line.trim().strip_prefix("hub listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("unexpected first line from the hub: {line:?}");
        };
        Ok(Hub { base: base.to_owned(), child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The hub's main: serves until killed.
pub async fn serve(args: &HubArgs) -> Result<()> {
    let model = args.model_url.strip_prefix("http://").context("the model URL must be http://")?;
    let (host, path) = model.split_once('/').unwrap_or((model, ""));
    let model = Model { host: host.to_owned(), path: format!("/{path}/chat/completions") };
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("hub listening on http://{}", listener.local_addr()?);
    run(listener, model).await
}

/// Accepts connections until the listener fails.
async fn run(listener: TcpListener, model: Model) -> Result<()> {
    let (frames, _) = broadcast::channel::<Bytes>(CHANNEL);
    loop {
        let (socket, _) = listener.accept().await?;
        let frames = frames.clone();
        let model = model.clone();
        tokio::spawn(async move {
            // A subscriber that hangs up is no fault of the hub's.
            let _ = connection(socket, frames, model).await;
        });
    }
}

#[derive(Clone)]
struct Model {
    /// `127.0.0.1:PORT`.
    host: String,
    /// `/v1/chat/completions`.
    path: String,
}

async fn connection(mut socket: TcpStream, frames: broadcast::Sender<Bytes>, model: Model) -> Result<()> {
    socket.set_nodelay(true)?;
    let head = read_head(&mut socket).await?;
    if head.starts_with("GET /events ") {
        let mut rx = frames.subscribe();
        socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n\
                  id: hub:0\ndata: {\"type\":\"session.snapshot\"}\n\n",
            )
            .await?;
        return subscriber(socket, &mut rx).await;
    }
    if head.starts_with("POST /prompt ") {
        socket.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await?;
        return answer(&model, &frames).await;
    }
    socket.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await?;
    Ok(())
}

/// Writes what the channel has, one write per wake-up, until the subscriber lags (it is
/// dropped) or the socket closes.
async fn subscriber(mut socket: TcpStream, rx: &mut broadcast::Receiver<Bytes>) -> Result<()> {
    let mut buf = BytesMut::new();
    loop {
        let first = match rx.recv().await {
            Ok(frame) => frame,
            Err(_) => return Ok(()),
        };
        let mut more = match rx.try_recv() {
            Ok(frame) => frame,
            Err(broadcast::error::TryRecvError::Empty) => {
                socket.write_all(&first).await?;
                continue;
            }
            Err(_) => return Ok(()),
        };
        buf.clear();
        buf.extend_from_slice(&first);
        loop {
            buf.extend_from_slice(&more);
            if buf.len() >= MAX_WRITE {
                break;
            }
            more = match rx.try_recv() {
                Ok(frame) => frame,
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(_) => return Ok(()),
            };
        }
        socket.write_all(&buf).await?;
    }
}

/// Streams one answer from the model and publishes a frame per content chunk, then
/// `agent_settled`.
async fn answer(model: &Model, frames: &broadcast::Sender<Bytes>) -> Result<()> {
    let mut tcp = TcpStream::connect(&model.host).await?;
    tcp.set_nodelay(true)?;
    let body = serde_json::json!({"model": crate::fake_model::MODEL, "stream": true, "messages": []}).to_string();
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        model.path,
        model.host,
        body.len()
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut seq = 0u64;
    let mut offset = 0usize;
    let mut pending = Vec::with_capacity(16 * 1024);
    let mut in_body = false;
    let mut chunk = vec![0u8; 16 * 1024];
    'read: loop {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&chunk[..n]);
        if !in_body {
            let Some(end) = memmem::find(&pending, b"\r\n\r\n") else { continue };
            pending.drain(..end + 4);
            in_body = true;
        }
        let mut start = 0;
        while let Some(end) = memmem::find(&pending[start..], b"\n\n") {
            let event = &pending[start..start + end];
            start += end + 2;
            let Some(data) = event.strip_prefix(b"data: ") else { continue };
            if data == b"[DONE]" {
                break 'read;
            }
            let chunk: serde_json::Value = serde_json::from_slice(data).context("a model chunk")?;
            let Some(text) = chunk["choices"][0]["delta"]["content"].as_str().filter(|t| !t.is_empty()) else {
                continue;
            };
            seq += 1;
            let delta = serde_json::to_string(text).expect("a string always serializes");
            let event = format!(
                r#"{{"type":"message_update","assistantMessageEvent":{{"type":"text_delta","contentIndex":0,"offset":{offset},"delta":{delta}}}}}"#
            );
            offset += text.chars().count();
            // No subscriber is no error: the frame is simply not sent.
            let _ = frames.send(frame(seq, &event));
        }
        pending.drain(..start);
    }
    seq += 1;
    let _ = frames.send(frame(seq, r#"{"type":"agent_settled"}"#));
    Ok(())
}

/// One SSE frame in Spool's `loop.event` shape, around an agent event's JSON. Written
/// out, not through `json!`, so the keys keep Spool's order (`type` first).
fn frame(seq: u64, event: &str) -> Bytes {
    Bytes::from(format!(
        "id: {STREAM_ID}:{seq}\ndata: {{\"type\":\"loop.event\",\"runId\":\"{RUN_ID}\",\"messageIndex\":1,\"event\":{event},\
         \"sessionId\":\"{SESSION_ID}\",\"streamId\":\"{STREAM_ID}\",\"seq\":{seq}}}\n\n"
    ))
}

/// Reads a request up to the end of its head (a body, if any, is not needed).
async fn read_head(socket: &mut TcpStream) -> Result<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            bail!("closed before the request head ended");
        }
        buf.extend_from_slice(&chunk[..n]);
        if memmem::find(&buf, b"\r\n\r\n").is_some() {
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        if buf.len() > 64 * 1024 {
            bail!("request head over 64 KiB");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_model::FakeModel;
    use futures::StreamExt;

    /// What a subscriber of the hub reads: its opening frame, then one frame per model
    /// delta in order, then `agent_settled` — over real sockets, model included.
    #[tokio::test]
    async fn a_subscriber_gets_every_delta_of_the_answer_then_the_end() {
        let fake = FakeModel::start(3, std::time::Duration::ZERO).await.unwrap();
        let (host, path) = fake.base_url.strip_prefix("http://").unwrap().split_once('/').unwrap();
        let model = Model { host: host.to_owned(), path: format!("/{path}/chat/completions") };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(run(listener, model));
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut body = client.get(format!("{base}/events")).send().await.unwrap().bytes_stream();
        let mut text = String::new();
        // The opening frame first: the subscriber is in the channel before the prompt.
        while !text.contains("\n\n") {
            text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
        }
        let accepted = client.post(format!("{base}/prompt")).send().await.unwrap();
        assert_eq!(accepted.status(), 202);
        while !text.contains("agent_settled") {
            text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
        }
        let deltas: Vec<String> = text
            .split("\n\n")
            .filter_map(|event| {
                let data: serde_json::Value =
                    serde_json::from_str(event.lines().nth(1)?.strip_prefix("data: ")?).ok()?;
                Some(data["event"]["assistantMessageEvent"]["delta"].as_str()?.to_owned())
            })
            .collect();
        assert_eq!(deltas, ["w0 ", "w1 ", "w2 "]);
        assert!(text.contains(&format!("id: {STREAM_ID}:4\n")), "settled is the fourth frame: {text}");
    }

    #[test]
    fn a_frame_reads_like_a_spool_text_delta() {
        let event = r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"offset":3,"delta":"w1 "}}"#;
        let text = String::from_utf8(frame(7, event).to_vec()).unwrap();
        let data: serde_json::Value =
            serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["event"]["assistantMessageEvent"]["delta"], "w1 ");
        assert!(text.starts_with(&format!("id: {STREAM_ID}:7\ndata: {{\"type\":\"loop.event\"")), "{text}");
        assert!(text.contains("\"type\":\"text_delta\"") && text.contains("\"delta\":\"w1 \""), "{text}");
        assert!(text.ends_with("}\n\n"));
    }
}
