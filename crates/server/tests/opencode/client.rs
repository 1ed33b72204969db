//! An OpenCode client as the tests in `opencode.rs` play it: a `GET /event` connection
//! that checks each event's framing and keeps what it saw, the text a client assembles
//! from deltas (and from a replaced part), and the routes that create, prompt and read
//! a session.

use crate::common::{SseStream, TestServer, WAIT, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// An open `GET /event` connection, decoded.
pub(super) struct Events {
    pub(super) stream: SseStream,
    /// Every event received, as JSON, in order.
    pub(super) seen: Vec<Value>,
}

impl Events {
    pub(super) async fn open(server: &TestServer, directory: &Path, query: &str) -> Events {
        Events::reopen(server, directory, None).await.with_query(server, directory, query).await
    }

    /// Opens `/event` as a reconnecting client: with the id of the last event it had.
    pub(super) async fn reopen(server: &TestServer, directory: &Path, last_event_id: Option<&str>) -> Events {
        Events::connect(server, directory, "", last_event_id).await
    }

    async fn with_query(self, server: &TestServer, directory: &Path, query: &str) -> Events {
        if query.is_empty() {
            return self;
        }
        Events::connect(server, directory, query, None).await
    }

    async fn connect(server: &TestServer, directory: &Path, query: &str, last_event_id: Option<&str>) -> Events {
        let url = server.url(&format!("/event?directory={}{query}", urlencode(&directory.to_string_lossy())));
        let mut request = server.client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let res = request.send().await.expect("open /event");
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        Events { stream: SseStream::new(res), seen: Vec::new() }
    }

    pub(super) async fn next(&mut self) -> Option<Value> {
        let e = match self.stream.next_event_within(WAIT).await {
            Ok(e) => e?,
            Err(_) => panic!("no event within {WAIT:?}; saw {}", types(&self.seen)),
        };
        assert_eq!(e.event, None, "no SSE event field: the type is in the JSON");
        assert_eq!(e.id, None, "no SSE id: there is nothing to resume from");
        let json: Value = serde_json::from_str(&e.data).expect("event is JSON");
        assert!(json["id"].as_str().is_some_and(|id| id.starts_with("evt_")), "{json}");
        self.seen.push(json.clone());
        Some(json)
    }

    /// Reads until `stop` holds for an event (returned), panicking if the stream ends or
    /// nothing matches within [`WAIT`] (heartbeats do not extend the wait).
    pub(super) async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.next()).await;
            let e = match next {
                Ok(Some(e)) => e,
                Ok(None) => panic!("stream ended; saw {}", types(&self.seen)),
                Err(_) => panic!("nothing awaited within {WAIT:?}; saw {}", types(&self.seen)),
            };
            if stop(&e) {
                return e;
            }
        }
    }

    pub(super) async fn until_idle(&mut self, session: &str) -> Value {
        self.until(|e| e["type"] == "session.idle" && e["properties"]["sessionID"] == session).await
    }
}

pub(super) fn types(events: &[Value]) -> String {
    let name = |e: &Value| {
        let session = session_of(e).map_or(String::new(), |s| format!("@{}", &s[s.len() - 4..]));
        format!("{}{session}", e["type"].as_str().unwrap_or("?"))
    };
    events.iter().map(name).collect::<Vec<_>>().join(", ")
}

/// The session an event is about, wherever the event carries it.
pub(super) fn session_of(e: &Value) -> Option<&str> {
    let p = &e["properties"];
    p["sessionID"].as_str().or(p["part"]["sessionID"].as_str()).or(p["info"]["sessionID"].as_str())
}

/// Text per part id, assembled from `message.part.delta` events of one message.
pub(super) fn deltas(events: &[Value], message: &str) -> String {
    let mut parts: BTreeMap<String, String> = BTreeMap::new();
    for e in events.iter().filter(|e| e["type"] == "message.part.delta" && e["properties"]["messageID"] == message) {
        assert_eq!(e["properties"]["field"], "text");
        let part = parts.entry(e["properties"]["partID"].as_str().expect("partID").to_owned()).or_default();
        part.push_str(e["properties"]["delta"].as_str().expect("delta"));
    }
    parts.into_values().collect()
}

pub(super) fn stored_text(message: &Value) -> String {
    message["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().expect("text"))
        .collect()
}

pub(super) async fn create(server: &TestServer, directory: &Path, title: &str) -> String {
    let request = server
        .client
        .post(server.url("/session"))
        .header("x-opencode-directory", urlencode(&directory.to_string_lossy()))
        .json(&json!({ "title": title }));
    let (status, session) = server.send(request).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    session["id"].as_str().expect("id").to_owned()
}

pub(super) async fn prompt_async(server: &TestServer, session: &str, text: &str) {
    let body = json!({ "parts": [{ "type": "text", "text": text }] });
    let (status, reply) = server.post(&format!("/session/{session}/prompt_async"), body).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{reply}");
}

pub(super) async fn messages(server: &TestServer, session: &str) -> Vec<Value> {
    let (status, list) = server.get(&format!("/session/{session}/message")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list.as_array().expect("a list").clone()
}

/// A canonical project directory, as OpenCode reports it back.
pub(super) fn directory(server: &TestServer, name: &str) -> std::path::PathBuf {
    std::fs::canonicalize(server.new_dir(name)).expect("canonical")
}
/// What a seed 004 client holds per part: `message.part.delta` appends,
/// `message.part.updated` replaces. Returns the text parts of `message`, and how many
/// characters came as deltas (a delta the client already had would count twice).
pub(super) fn assembled(events: &[Value], message: &str) -> (String, usize) {
    let mut parts: BTreeMap<String, String> = BTreeMap::new();
    let mut by_delta = 0;
    for e in events {
        let p = &e["properties"];
        match e["type"].as_str() {
            Some("message.part.delta") if p["messageID"] == message => {
                let delta = p["delta"].as_str().expect("delta");
                by_delta += delta.chars().count();
                parts.entry(p["partID"].as_str().expect("partID").to_owned()).or_default().push_str(delta);
            }
            Some("message.part.updated") if p["part"]["messageID"] == message && p["part"]["type"] == "text" => {
                let text = p["part"]["text"].as_str().unwrap_or_default().to_owned();
                parts.insert(p["part"]["id"].as_str().expect("part id").to_owned(), text);
            }
            _ => {}
        }
    }
    (parts.into_values().collect(), by_delta)
}

pub(super) fn last_id(events: &Events) -> String {
    events.seen.last().expect("an event")["id"].as_str().expect("id").to_owned()
}
/// The next event of a `/global/event` stream, kept in `seen`.
pub(super) async fn next_global(stream: &mut SseStream, seen: &mut Vec<Value>) -> Value {
    let e = stream.next_event_within(WAIT).await.expect("an event in time").expect("the stream goes on");
    let json: Value = serde_json::from_str(&e.data).expect("JSON");
    seen.push(json.clone());
    json
}
