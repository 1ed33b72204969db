//! Subscribers of the other wire dialects, for `--dialect`: the OpenCode `GET /event`
//! stream, the WebSocket hub (`/api/ws`) and the run stream (`GET /api/runs/:id/events`).
//! The native session stream keeps its own, stricter reader (`subscriber.rs`: seq
//! checks, latency samples).
//!
//! Like that reader, these look at bytes, not JSON: per event they ask only "is this a
//! text delta" and "is this the end of the run", with a substring search, so the client
//! takes as little as possible of the cores it shares with the server. What they report
//! is what the per-dialect comparison needs: how many events arrived (the server's
//! delivered frames in that dialect), how many were text deltas, and whether the end
//! came.
//!
//! | dialect | connects | a delta | the end |
//! |---|---|---|---|
//! | `opencode` | `GET /event?directory=…` before the prompt, ready at its first event | `message.part.delta` | `session.idle` |
//! | `ws` | `/api/ws`, `subscribe` to the session, ready at `subscribed` | `message.streaming` | `agent.status` other than `running` |
//! | `run-stream` | `GET /api/runs/:id/events?after=0` once the run exists | `text_delta` | `done` / `error` |
//! | `ai-sdk` | `GET /api/ai-sdk/chat/:session/stream` once the run exists | `text-delta` | `finish` / `error` / `abort` |
//!
//! AG-UI has no route that attaches to a run it did not start (its stream is the
//! answer to its own `POST`), so it has no subscriber here.
//!
//! A run-stream (or AI SDK) client can only attach once the prompt has made the run, so it arrives
//! late and catches up: from the session's buffer while the run's first frame is among
//! the last 256, else from a `snapshot` holding the text so far (counted apart: such a
//! subscriber has every word but fewer deltas, and fewer events to divide the CPU by).
//! With 1,000 subscribers attaching takes longer than 256 frames at `--delay-ms 2`, so
//! how many get a snapshot depends on how fast the server streams while they attach.
//! The report also gives the server's CPU up to the moment every subscriber was
//! attached, which the other dialects spend before the prompt.

use crate::subscriber::Outcome;
use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use memchr::memmem::{self, Finder};
use std::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// The wire dialects the bench can subscribe with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// `GET /api/sessions/:id/events` (seed 000).
    Native,
    /// OpenCode's `GET /event` for the project's directory (seed 004).
    Opencode,
    /// The WebSocket hub `/api/ws` (seed 002).
    Ws,
    /// The run stream `GET /api/runs/:id/events` (seed 003).
    RunStream,
    /// The AI SDK's resumable stream `GET /api/ai-sdk/chat/:id/stream`: the chat's
    /// active run from its start, in the UI message stream protocol.
    AiSdk,
}

impl Dialect {
    /// Whether subscribers connect before the prompt (all but the run-following
    /// streams, which need a run to follow).
    pub fn connects_first(self) -> bool {
        !matches!(self, Dialect::RunStream | Dialect::AiSdk)
    }

    fn markers(self) -> (&'static [u8], &'static [&'static [u8]]) {
        match self {
            Dialect::Native => (b"\"type\":\"text_delta\"", &[b"\"type\":\"agent_settled\""]),
            Dialect::Opencode => (b"\"type\":\"message.part.delta\"", &[b"\"type\":\"session.idle\""]),
            // `agent.status` `running` comes first; a run's end is any other status.
            Dialect::Ws => (
                b"\"type\":\"message.streaming\"",
                &[b"\"status\":\"completed\"", b"\"status\":\"errored\"", b"\"status\":\"cancelled\""],
            ),
            Dialect::RunStream => (b"\"type\":\"text_delta\"", &[b"\"type\":\"done\"", b"\"type\":\"error\""]),
            // A completed run ends with `finish`; a failed one with `error`, a stopped one `abort`.
            Dialect::AiSdk => {
                (b"\"type\":\"text-delta\"", &[b"\"type\":\"finish\"", b"\"type\":\"error\"", b"\"type\":\"abort\""])
            }
        }
    }
}

/// Where and how one subscriber connects.
pub struct Target {
    pub dialect: Dialect,
    /// `http://127.0.0.1:PORT` of the node.
    pub base: String,
    pub session: String,
    /// The project's directory (OpenCode `/event`).
    pub directory: String,
    /// The run (run stream only).
    pub run: Option<String>,
    pub node: usize,
}

/// Counts events and deltas of one connection until the run's end. One connection: a
/// dialect client that is cut shows up as unfinished, which is what the comparison
/// should see.
pub async fn run(
    client: reqwest::Client,
    target: Target,
    ready: tokio::sync::mpsc::Sender<Result<(), String>>,
    deadline: tokio::time::Instant,
) -> Result<Outcome> {
    let mut counter = Counter::new(target.dialect, target.node);
    let result = match target.dialect {
        Dialect::Ws => ws(&target, &mut counter, &ready, deadline).await,
        _ => sse(&client, &target, &mut counter, &ready, deadline).await,
    };
    if let Err(e) = &result {
        let _ = ready.send(Err(format!("{e:#}"))).await;
    }
    result.map(|()| counter.outcome)
}

async fn sse(
    client: &reqwest::Client,
    target: &Target,
    counter: &mut Counter,
    ready: &tokio::sync::mpsc::Sender<Result<(), String>>,
    deadline: tokio::time::Instant,
) -> Result<()> {
    let base = &target.base;
    let url = match target.dialect {
        Dialect::Opencode => format!("{base}/event?directory={}", urlencode(&target.directory)),
        Dialect::RunStream => format!("{base}/api/runs/{}/events?after=0", target.run.as_deref().context("a run id")?),
        // The session's id is a chat id; the route answers its active run from its start.
        Dialect::AiSdk => format!("{base}/api/ai-sdk/chat/{}/stream", target.session),
        _ => format!("{base}/api/sessions/{}/events", target.session),
    };
    let resp = client.get(&url).header("accept", "text/event-stream").send().await?;
    let status = resp.status();
    if !status.is_success() {
        bail!("GET {url}: {status}: {}", resp.text().await.unwrap_or_default());
    }
    // The headers are the server's word that the stream is open; OpenCode's is its
    // first event (`server.connected`): OpenCode itself may send the headers before it
    // has joined its bus.
    let mut announced = target.dialect != Dialect::Opencode;
    if announced {
        let _ = ready.send(Ok(())).await;
    }
    let mut body = resp.bytes_stream();
    let mut pending = Vec::new();
    while !counter.done {
        let chunk = match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            Err(_) | Ok(None | Some(Err(_))) => return Ok(()),
        };
        let at = Instant::now();
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        for end in memmem::find_iter(&pending, b"\n\n") {
            counter.event(&pending[start..end], at);
            start = end + 2;
        }
        pending.drain(..start);
        if !announced && counter.outcome.frames > 0 {
            announced = true;
            let _ = ready.send(Ok(())).await;
        }
    }
    Ok(())
}

async fn ws(
    target: &Target,
    counter: &mut Counter,
    ready: &tokio::sync::mpsc::Sender<Result<(), String>>,
    deadline: tokio::time::Instant,
) -> Result<()> {
    let url = format!("{}/api/ws", target.base.replacen("http://", "ws://", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.with_context(|| format!("connect {url}"))?;
    let subscribe = serde_json::json!({"type": "subscribe", "channels": [target.session]}).to_string();
    socket.send(Message::text(subscribe)).await?;
    let subscribed = Finder::new(b"\"type\":\"subscribed\"");
    let mut announced = false;
    while !counter.done {
        let message = match tokio::time::timeout_at(deadline, socket.next()).await {
            Ok(Some(Ok(message))) => message,
            Err(_) | Ok(None | Some(Err(_))) => return Ok(()),
        };
        let Message::Text(text) = message else { continue };
        if !announced && subscribed.find(text.as_bytes()).is_some() {
            announced = true;
            let _ = ready.send(Ok(())).await;
            continue;
        }
        counter.event(text.as_bytes(), Instant::now());
    }
    Ok(())
}

struct Counter {
    delta: Finder<'static>,
    snapshot: Finder<'static>,
    ends: Vec<Finder<'static>>,
    outcome: Outcome,
    done: bool,
}

impl Counter {
    fn new(dialect: Dialect, node: usize) -> Self {
        let (delta, ends) = dialect.markers();
        Self {
            delta: Finder::new(delta),
            snapshot: Finder::new(b"\"type\":\"snapshot\""),
            ends: ends.iter().map(|e| Finder::new(*e)).collect(),
            outcome: Outcome::new(node),
            done: false,
        }
    }

    /// One event: an SSE event (comments and heartbeats without `data:` are skipped)
    /// or one WebSocket message.
    fn event(&mut self, event: &[u8], at: Instant) {
        if memmem::find(event, b"data:").is_none() && event.first() != Some(&b'{') {
            return;
        }
        self.outcome.frames += 1;
        if self.delta.find(event).is_some() {
            self.outcome.deltas += 1;
            self.outcome.first_delta.get_or_insert(at);
            self.outcome.last_delta = Some(at);
        } else if self.snapshot.find(event).is_some() {
            self.outcome.snapshots += 1;
        } else if self.ends.iter().any(|end| end.find(event).is_some()) {
            self.done = true;
            self.outcome.finished = true;
        }
    }
}

/// Percent-encodes a path for a query value (the bytes a URL may not carry as is).
pub fn urlencode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_deltas_and_stops_at_the_dialects_end() {
        let mut c = Counter::new(Dialect::Opencode, 0);
        let at = Instant::now();
        c.event(b": heartbeat", at);
        c.event(b"data: {\"type\":\"message.part.delta\",\"properties\":{}}", at);
        c.event(b"data: {\"type\":\"message.part.updated\",\"properties\":{}}", at);
        assert!(!c.done);
        c.event(b"data: {\"type\":\"session.idle\",\"properties\":{}}", at);
        assert!(c.done && c.outcome.finished);
        assert_eq!((c.outcome.frames, c.outcome.deltas), (3, 1));

        let mut c = Counter::new(Dialect::RunStream, 0);
        c.event(b"id: 3\nevent: snapshot\ndata: {\"type\":\"snapshot\",\"text\":\"w\"}", at);
        c.event(b"id: 4\nevent: error\ndata: {\"type\":\"error\"}", at);
        assert!(c.done);
        assert_eq!((c.outcome.frames, c.outcome.snapshots), (2, 1));
    }

    #[test]
    fn directories_are_percent_encoded() {
        assert_eq!(urlencode("/tmp/a b&c"), "/tmp/a%20b%26c");
    }
}
