//! A run-stream client as the tests in `run_stream.rs` play it: the requests that open
//! a stream, each event read with its SSE framing checked, and a seed 003 client that
//! rebuilds one run from however many streams it takes.

use crate::common::{SseStream, TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One received run-stream event.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Event {
    pub(super) kind: String,
    pub(super) data: Value,
}

impl Event {
    pub(super) fn sequence(&self) -> u64 {
        self.data["sequence"].as_u64().unwrap_or_else(|| panic!("no sequence: {}", self.data))
    }
}

pub(super) async fn open_chat(server: &TestServer, body: Value) -> reqwest::Response {
    let request = server.client.post(server.url("/api/chat")).json(&body).send();
    tokio::time::timeout(WAIT, request).await.expect("chat answers in time").expect("chat request")
}

pub(super) async fn open_events(server: &TestServer, run: &str, query: &str) -> reqwest::Response {
    let request = server.client.get(server.url(&format!("/api/runs/{run}/events{query}"))).send();
    tokio::time::timeout(WAIT, request).await.expect("re-attach answers in time").expect("re-attach request")
}

/// Checks the stream's headers and returns it for reading.
pub(super) fn run_stream(res: reqwest::Response) -> SseStream {
    assert_eq!(res.status(), StatusCode::OK);
    let stream = SseStream::new(res);
    assert_eq!(stream.header("content-type"), "text/event-stream; charset=utf-8");
    assert_eq!(stream.header("cache-control"), "no-cache, no-transform");
    stream
}

/// The next event, with its SSE framing checked: `event:` is the JSON `type` and the
/// SSE id is the sequence. `None` when the stream ended.
pub(super) async fn next(stream: &mut SseStream) -> Option<Event> {
    let raw = stream.next_event().await?;
    let data: Value = serde_json::from_str(&raw.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", raw.data));
    let kind = raw.event.unwrap_or_else(|| panic!("an event without `event:`: {data}"));
    assert_eq!(data["type"], kind.as_str(), "event: matches the JSON type");
    assert_eq!(raw.id, Some(data["sequence"].to_string()), "the SSE id is the sequence");
    assert!(data["runId"].as_str().is_some_and(|r| r.starts_with("run_")), "{data}");
    Some(Event { kind, data })
}

pub(super) async fn read_to_end(stream: &mut SseStream) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(e) = next(stream).await {
        events.push(e);
    }
    events
}

pub(super) fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

pub(super) fn assert_dense(events: &[Event], from: u64) {
    let got: Vec<u64> = events.iter().map(Event::sequence).collect();
    let want: Vec<u64> = (from..from + events.len() as u64).collect();
    assert_eq!(got, want, "dense sequence: {:?}", kinds(events));
}

pub(super) fn text_of(events: &[Event]) -> String {
    events.iter().filter(|e| e.kind == "text_delta").map(|e| e.data["delta"].as_str().expect("delta")).collect()
}

pub(super) fn run_id(events: &[Event]) -> String {
    events[0].data["runId"].as_str().expect("runId").to_owned()
}

/// The text of the run's assistant messages as stored, and the id of the last one.
pub(super) async fn stored_answer(server: &TestServer, session: &str) -> (String, String) {
    let page = server.messages(session, "?limit=500").await;
    let messages = page["messages"].as_array().expect("messages");
    let start = messages.iter().rposition(|m| m["role"] == "user").expect("a user message");
    let assistants: Vec<&Value> = messages[start..].iter().filter(|m| m["role"] == "assistant").collect();
    let text = assistants
        .iter()
        .flat_map(|m| m["content"].as_array().expect("content").iter())
        .filter(|c| c["type"] == "text")
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    (text, id_of(assistants.last().expect("an assistant message")))
}
/// A seed 003 client rebuilding one run from however many streams it takes: it keeps
/// the last sequence it has, drops every event numbered at or below it, lets a
/// `snapshot` replace its text and tool calls, appends deltas and tracks tool calls by
/// id. It never asks the server anything but `after`.
#[derive(Debug, Default)]
pub(super) struct Client {
    pub(super) last: u64,
    pub(super) text: String,
    /// Tool call id → `running`, `success` or `error`.
    pub(super) tools: BTreeMap<String, String>,
    /// The `done` or `error` that ended the run.
    pub(super) end: Option<Event>,
    pub(super) snapshots: usize,
}

impl Client {
    /// Takes one event; `false` when it was dropped as already had.
    pub(super) fn take(&mut self, e: &Event) -> bool {
        if e.sequence() <= self.last {
            return false;
        }
        self.last = e.sequence();
        let field = |name: &str| e.data[name].as_str().unwrap_or_else(|| panic!("no {name}: {}", e.data)).to_owned();
        match e.kind.as_str() {
            "snapshot" => {
                self.snapshots += 1;
                self.text = field("text");
                let tools = e.data["tools"].as_array().cloned().unwrap_or_default();
                self.tools = tools
                    .iter()
                    .map(|t| {
                        (t["callId"].as_str().expect("callId").into(), t["status"].as_str().expect("status").into())
                    })
                    .collect();
            }
            "text_delta" => self.text.push_str(&field("delta")),
            "tool_started" => {
                self.tools.insert(field("callId"), "running".into());
            }
            "tool_finished" => {
                self.tools.insert(field("callId"), field("status"));
            }
            "done" | "error" => self.end = Some(e.clone()),
            _ => {}
        }
        true
    }

    /// Asserts the client holds the run as stored: the whole answer, every tool call
    /// the run made, ended as it ended, and `done`.
    pub(super) async fn assert_holds_the_stored_run(&self, server: &TestServer, session: &str) {
        assert_eq!(self.end.as_ref().map(|e| e.kind.as_str()), Some("done"), "{:?}", self.end);
        let (text, message_id) = stored_answer(server, session).await;
        assert_eq!(self.text.len(), text.len(), "no word lost or repeated");
        assert!(self.text == text, "the assembled text is the stored answer");
        assert_eq!(self.end.as_ref().expect("done").data["messageId"], message_id.as_str());
        let page = server.messages(session, "?limit=500").await;
        let messages = page["messages"].as_array().expect("messages");
        let start = messages.iter().rposition(|m| m["role"] == "user").expect("a user message");
        let stored: BTreeMap<String, String> = messages[start..]
            .iter()
            .filter(|m| m["role"] == "toolResult")
            .map(|m| {
                let status = if m["isError"] == true { "error" } else { "success" };
                (m["toolCallId"].as_str().expect("toolCallId").to_owned(), status.to_owned())
            })
            .collect();
        assert_eq!(self.tools, stored, "every tool call the run made ended, as it ended");
    }
}

/// `POST /api/runs/:id/resume` asking for the continuation as a stream.
pub(super) async fn resume_stream(server: &TestServer, run: &str, approval: &str, key: &str) -> SseStream {
    let request = server
        .client
        .post(server.url(&format!("/api/runs/{run}/resume")))
        .header("accept", "text/event-stream")
        .json(&json!({"interruptId": approval, "decision": "approve", "idempotencyKey": key}))
        .send();
    run_stream(tokio::time::timeout(WAIT, request).await.expect("resume answers in time").expect("resume"))
}

/// Publishes `n` frames in the session that are none of the run's events (title
/// changes), pushing the run's earlier frames out of the 256-frame buffer.
pub(super) async fn push_out_of_the_buffer(server: &TestServer, session: &str, n: usize) {
    for i in 0..n {
        let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"title": format!("t{i}")})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}
