//! The one SSE reader of the test suites: [`SseStream`] reads a `reqwest` response body
//! and decodes it with the server's own `spool_protocol::sse::Decoder`, so a test never
//! splits `\n\n` by hand and every stream a test reads is parsed the way the protocol
//! crate specifies (and fuzzes). On top of plain events it offers what most tests want:
//! the next non-heartbeat event's JSON ([`SseStream::next_json`]) and the next session
//! frame with its SSE id checked ([`SseStream::next_frame`]).
//!
//! Every wait is bounded by [`WAIT`]: a stream that does not deliver what a test waits
//! for panics with what it saw instead of hanging the run.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use spool_protocol::SessionState;
use spool_protocol::sse::{Decoder, SseEvent};
use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

/// Longest a reader waits for the next thing it expects, unless told otherwise
/// ([`SseStream::with_wait`]).
pub const WAIT: Duration = Duration::from_secs(15);

/// An SSE response being read: decoded events in arrival order.
pub struct SseStream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    decoder: Decoder,
    ready: VecDeque<SseEvent>,
    /// Every body byte received so far, for asserting on the exact wire format.
    pub raw: Vec<u8>,
    /// Set when the body ended with a transport error instead of a clean end.
    pub error: Option<String>,
    ended: bool,
    wait: Duration,
}

impl SseStream {
    pub fn new(res: reqwest::Response) -> Self {
        Self {
            status: res.status(),
            headers: res.headers().clone(),
            body: Box::pin(res.bytes_stream()),
            decoder: Decoder::new(),
            ready: VecDeque::new(),
            raw: Vec::new(),
            error: None,
            ended: false,
            wait: WAIT,
        }
    }

    /// The same reader waiting up to `wait` instead of [`WAIT`] (tests of several
    /// processes on a loaded machine allow more).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The header's value as a string ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The next event (heartbeats included), or `None` when the body ended. Panics if
    /// nothing arrives within [`WAIT`].
    pub async fn next_event(&mut self) -> Option<SseEvent> {
        match self.next_event_within(self.wait).await {
            Ok(event) => event,
            Err(_) => panic!("no SSE event within {:?}; read so far: {}", self.wait, self.tail()),
        }
    }

    /// Like [`next_event`](Self::next_event) with its own bound; `Err` on timeout, for
    /// asserting that nothing arrives.
    pub async fn next_event_within(
        &mut self,
        within: Duration,
    ) -> Result<Option<SseEvent>, tokio::time::error::Elapsed> {
        tokio::time::timeout(within, self.read_event()).await
    }

    /// The next event however long it takes, or `None` when the body ended (cleanly or
    /// not: see [`error`](Self::error)). For a reader that runs until the server goes
    /// away, such as a watcher of a server the test kills.
    pub async fn next_event_unbounded(&mut self) -> Option<SseEvent> {
        self.read_event().await
    }

    async fn read_event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.raw.extend_from_slice(&chunk);
                    self.ready.extend(self.decoder.push(&chunk));
                }
                Some(Err(e)) => {
                    self.error = Some(e.to_string());
                    self.ended = true;
                }
                None => self.ended = true,
            }
        }
    }

    /// The next event that is not a heartbeat, its data parsed as JSON; `None` when the
    /// body ended. Heartbeats do not extend the wait: panics if no such event arrives
    /// within [`WAIT`].
    pub async fn next_json(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let event = tokio::time::timeout_at(deadline, self.read_event())
                .await
                .unwrap_or_else(|_| panic!("no event within {:?}; read so far: {}", self.wait, self.tail()))?;
            if is_heartbeat(&event) {
                continue;
            }
            let json = serde_json::from_str(&event.data)
                .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", event.data));
            return Some(json);
        }
    }

    /// The next business frame (heartbeats skipped), with its SSE id checked against
    /// `streamId:seq`. `None` when the body ended.
    pub async fn next_frame(&mut self) -> Option<ReceivedFrame> {
        loop {
            let event = self.next_event().await?;
            if is_heartbeat(&event) {
                continue;
            }
            let frame = ReceivedFrame::parse(&event);
            assert_eq!(event.id.as_deref(), Some(frame.cursor().as_str()), "SSE id is streamId:seq: {}", frame.json);
            return Some(frame);
        }
    }

    /// Reads frames until `stop` holds for one (returned last); panics if the stream ends.
    pub async fn frames_until(&mut self, stop: impl Fn(&ReceivedFrame) -> bool) -> Vec<ReceivedFrame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next_frame().await.expect("stream ended before the awaited frame");
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Waits for the body to end (skipping whatever still arrives); panics if it does
    /// not end within `within`.
    pub async fn expect_end(&mut self, within: Duration) {
        let ended = tokio::time::timeout(within, async { while self.read_event().await.is_some() {} }).await;
        assert!(ended.is_ok(), "stream did not end within {within:?}");
    }

    /// The last bytes received, for a failure message.
    fn tail(&self) -> String {
        let start = self.raw.len().saturating_sub(2_000);
        String::from_utf8_lossy(&self.raw[start..]).into_owned()
    }
}

/// Whether `event` is the server's heartbeat (a named event; frames are unnamed or
/// named by their type, never `heartbeat`).
pub fn is_heartbeat(event: &SseEvent) -> bool {
    event.event.as_deref() == Some("heartbeat")
}

/// One business frame as received, kept as JSON so tests can assert on the exact
/// fields a client sees; typed views are offered per part ([`Self::state`]).
#[derive(Clone, Debug)]
pub struct ReceivedFrame {
    /// `session.snapshot`, `session.state`, `run.accepted` or `loop.event`.
    pub kind: String,
    pub session_id: String,
    pub stream_id: String,
    pub seq: u64,
    pub json: Value,
}

impl ReceivedFrame {
    fn parse(event: &SseEvent) -> Self {
        let json: Value =
            serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("frame is not JSON ({e}): {}", event.data));
        let text =
            |field: &str| json[field].as_str().unwrap_or_else(|| panic!("frame without {field}: {json}")).to_owned();
        ReceivedFrame {
            kind: text("type"),
            session_id: text("sessionId"),
            stream_id: text("streamId"),
            seq: json["seq"].as_u64().unwrap_or_else(|| panic!("frame without seq: {json}")),
            json,
        }
    }

    /// `streamId:seq`, what a client sends back to resume after this frame.
    pub fn cursor(&self) -> String {
        format!("{}:{}", self.stream_id, self.seq)
    }

    /// The state of a `session.snapshot` / `session.state` frame.
    pub fn state(&self) -> SessionState {
        serde_json::from_value(self.json["state"].clone()).unwrap_or_else(|e| panic!("bad state ({e}): {}", self.json))
    }

    /// For `loop.event` frames: the agent event's `type` (`message_update`, …).
    pub fn event_type(&self) -> Option<&str> {
        self.json["event"]["type"].as_str()
    }
}
