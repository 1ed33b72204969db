//! `GET /api/streams`: many native streams over one WebSocket, for browsers.
//!
//! A browser allows six HTTP/1.1 connections per host, and each open tab held two
//! long-lived ones (its session stream and the list stream), so the fourth tab never
//! loaded (issue 17). The web UI's `SharedWorker` holds one socket per browser instead
//! and opens, over it, the streams its tabs need. Each one is exactly its SSE twin:
//!
//! - `{"op":"open","id":"s1","session":"ses_…","cursor":"streamId:seq","approvals":true}`
//!   is `GET /api/sessions/{id}/events?cursor=…&approvals=1`;
//! - `{"op":"open","id":"l","lists":true}` is `GET /api/workspaces/events`;
//! - `{"op":"close","id":"s1"}` stops one (an unknown id is a no-op); opening an id
//!   that is open replaces it, the old subscription dropped first.
//! - `{"type":"presence","id":"s1","visible":false}` says whether the page showing a
//!   session stream is visible (the web UI sends it at `visibilitychange`; without `id`
//!   it is about every session stream of the socket). An `open` may carry
//!   `"visible":false` too. Who is on a session counts it (`session.presence`): an
//!   answerer on a hidden page is not one a person sees now. Every stream opened here
//!   counts as a `web` client.
//!
//! The server answers with text messages `"<id>\n<event>"`, where `<event>` is one SSE
//! event byte for byte as the SSE route sends it (the engine's pre-encoded, shared
//! frames, split at event boundaries, never re-encoded). A stream that ends on the
//! server's side (its session deleted) sends `event: end`; a successful open is
//! acknowledged with `event: open` before any of its events; an open that fails sends
//! `event: error` with the status and the JSON error body the SSE route would answer;
//! a message that is not a valid client message gets the same with an empty id, and
//! the socket stays open. The SSE `heartbeat` event, with an empty id, comes every
//! heartbeat interval whatever else is sent (as on the SSE routes), so the client's
//! watchdog sees a live socket.
//!
//! # Shape
//!
//! The socket runs the shared socket loop (`socket/mux.rs`: one task that alone
//! writes, round-robin polling, the heartbeat, slow clients and why a socket closes);
//! this file is the dialect's mapping. Each open stream is held as the SSE route would
//! hold it (an engine `Subscription` — a cursor into the session's shared ring — or the
//! user's list stream). A session stream that ends because its session was deleted
//! reports `end`; a cut one, or one closed under a session that is still there (a
//! node's stale view in a cluster), closes the socket with 1013, and the client comes
//! back with its cursors, as an `EventSource` would. Other sockets never notice.

use super::responses::UpgradeResponses;
use super::socket::{self, Closing, Dialect, Feed, Heartbeat, Outbox, Polled, Subs, Upgrade};
use super::sse::holding;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::AppState;
use axum::extract::State;
use axum::extract::ws::{Utf8Bytes, close_code};
use axum::response::Response;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use spool_engine::{Ended, Engine, EngineError, Subscription, Viewer};
use spool_protocol::{ClientKind, Cursor, SessionId, UserId};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most streams one socket may hold open: a browser's tabs need a few each.
const MAX_STREAMS: usize = 256;
/// Longest stream id a client may pick.
const MAX_ID: usize = 64;
/// The event that acknowledges an open, before the stream's first event.
const OPEN_EVENT: &str = "open";
/// The event that tells a client its stream ended on the server's side.
const END_EVENT: &str = "end";
/// The event that carries a refused open or client message.
const ERROR_EVENT: &str = "error";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(upgrade))
}

/// A client message as sent; [`client_message`] checks it.
#[derive(Deserialize)]
struct RawMessage {
    op: Option<String>,
    /// `presence`, for the one message that is not an `op`.
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    session: Option<String>,
    cursor: Option<String>,
    #[serde(default)]
    approvals: bool,
    #[serde(default)]
    lists: bool,
    visible: Option<bool>,
}

/// A checked client message.
#[derive(Debug, PartialEq)]
enum ClientMessage {
    Open { id: String, target: Target },
    Close { id: String },
    /// The page showing stream `id` (every session stream, without one) is visible or not.
    Presence { id: Option<String>, visible: bool },
}

/// What an `open` names.
#[derive(Debug, PartialEq)]
enum Target {
    /// A session stream: the raw id (one that does not parse is a 404 for that stream,
    /// as the SSE route's path answers), the cursor as given, and whether the stream
    /// is a place where a person answers approvals.
    Session { session: String, cursor: Option<String>, approvals: bool, visible: bool },
    /// The user's list stream.
    Lists,
}

/// Parses and checks a client's message; the error is the empty-id `error` event's.
fn client_message(text: &str) -> Result<ClientMessage, ApiError> {
    const SHAPE: &str = "expected {\"op\":\"open\",\"id\":…,\"session\":…} , {\"op\":\"open\",\"id\":…,\"lists\":true} \
                         or {\"op\":\"close\",\"id\":…}";
    let raw: RawMessage =
        serde_json::from_str(text).map_err(|e| ApiError::bad_request("invalid_message", format!("{SHAPE}: {e}")))?;
    if raw.kind.as_deref() == Some("presence") && raw.op.is_none() {
        if let Some(id) = &raw.id {
            check_id(id)?;
        }
        let Some(visible) = raw.visible else {
            return Err(ApiError::bad_request("invalid_message", "a presence message says `visible`: true or false"));
        };
        return Ok(ClientMessage::Presence { id: raw.id, visible });
    }
    let (Some(op), Some(id)) = (raw.op, raw.id) else {
        return Err(ApiError::bad_request("invalid_message", SHAPE));
    };
    check_id(&id)?;
    let visible = raw.visible.unwrap_or(true);
    match op.as_str() {
        "close" => Ok(ClientMessage::Close { id }),
        "open" => {
            let target = match (raw.session, raw.lists) {
                (Some(session), false) => Target::Session { session, cursor: raw.cursor, approvals: raw.approvals, visible },
                (None, true) => Target::Lists,
                (Some(_), true) => {
                    return Err(ApiError::bad_request(
                        "invalid_message",
                        "an open names a session or the lists, not both",
                    ));
                }
                (None, false) => return Err(ApiError::bad_request("invalid_message", SHAPE)),
            };
            Ok(ClientMessage::Open { id, target })
        }
        _ => Err(ApiError::bad_request("unknown_op", "the client messages are `open` and `close`")),
    }
}

/// A stream id: 1–64 characters of `[A-Za-z0-9_.:-]`, so it can never hold the
/// newline that ends it on the wire.
fn check_id(id: &str) -> Result<(), ApiError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if id.is_empty() || id.len() > MAX_ID || !id.chars().all(allowed) {
        return Err(ApiError::bad_request("invalid_id", format!("a stream id is 1-{MAX_ID} of [A-Za-z0-9_.:-]")));
    }
    Ok(())
}

/// The client's message, checked as the socket does (for the `request_json` fuzz
/// target; the socket answers a refusal with an empty-id `error` event, here a 400).
pub(super) const BODIES: &[(&str, crate::extract::BodyCheck)] = &[("WS /api/streams client message", |b| {
    let text =
        std::str::from_utf8(b).map_err(|_| ApiError::bad_request("invalid_message", "messages are JSON text"))?;
    client_message(text).map(drop)
})];

/// Many native streams over one WebSocket. After the upgrade the client sends
/// `{"op":"open","id":…,"session":…,"cursor":…,"approvals":…}`,
/// `{"op":"open","id":…,"lists":true}` or `{"op":"close","id":…}`, and receives text
/// messages `"<id>\n<SSE event>"`: each event exactly as `GET /api/sessions/{id}/events`
/// or `GET /api/workspaces/events` sends it, `event: end` when a stream ends on the
/// server's side, `event: error` (`{"status":…,"error":{…}}`) for a refused open, and
/// with an empty id the `heartbeat` and errors about a client message.
#[utoipa::path(get, path = "/api/streams", responses(UpgradeResponses))]
async fn upgrade(
    State(state): State<AppState>,
    Caller { user, credential }: Caller,
    upgrade: Upgrade,
) -> Result<Response, ApiError> {
    // The socket counts as one of the user's streams for as long as it is open (each
    // stream opened over it counts too, as its SSE twin does).
    let permit = state.engine.stream_permit(&user)?;
    let streams =
        Streams { engine: state.engine.clone(), user, closing: state.engine.lists().closed(), subs: Subs::default() };
    let kind = spool_engine::metrics::Dialect::StreamsSocket;
    Ok(socket::serve(&state, &credential, upgrade, permit, kind, (streams, Outbox::default())))
}

/// The SSE bytes of one open stream.
enum Frames {
    /// A session stream, which the engine may cut or close (see [`Subscription::ended`]).
    Session(Subscription),
    /// The list stream, which ends only when the server stops (`closing`) or it lags.
    Lists { events: Pin<Box<dyn Stream<Item = Bytes> + Send>>, closing: CancellationToken },
}

impl Stream for Frames {
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        match self.get_mut() {
            Frames::Session(s) => s.poll_next_unpin(cx),
            Frames::Lists { events, .. } => events.poll_next_unpin(cx),
        }
    }
}

impl Feed for Frames {
    fn ended(&self) -> Option<Ended> {
        match self {
            Frames::Session(s) => s.ended(),
            Frames::Lists { closing, .. } if closing.is_cancelled() => Some(Ended::Shutdown),
            // A list stream ends otherwise only when it fell behind its ring.
            Frames::Lists { .. } => Some(Ended::Lagged),
        }
    }

    /// Only a session stream is cut: a list stream that ends closes the socket anyway.
    fn is_cut(&self) -> bool {
        matches!(self, Frames::Session(s) if s.is_cut())
    }
}

/// One socket's streams, keyed by the client's stream ids.
struct Streams {
    engine: Engine,
    user: UserId,
    /// The server is stopping (why a list stream ends, if it does).
    closing: CancellationToken,
    subs: Subs<String, Frames, ()>,
}

impl Dialect for Streams {
    type Key = String;
    type Feed = Frames;
    type State = ();
    type Event = Polled<String, Bytes>;
    const NAME: &'static str = "streams";
    const LAGGING: Closing = Closing::Say((close_code::AGAIN, "too far behind: reconnect with your cursors"));

    fn subs(&mut self) -> &mut Subs<String, Frames, ()> {
        &mut self.subs
    }

    async fn next(&mut self) -> Polled<String, Bytes> {
        self.subs.next(Self::LAGGING).await
    }

    async fn on_event(&mut self, polled: Polled<String, Bytes>, out: &mut Outbox) -> Result<(), Closing> {
        match polled {
            Polled::Item(id, chunk) => push_events(out, &id, &chunk),
            Polled::Deleted(id) => {
                self.subs.remove(&id);
                out.push(message(&id, &spool_protocol::sse::encode(None, Some(END_EVENT), "{}")));
            }
            Polled::Close(why) => return Err(why),
        }
        Ok(())
    }

    async fn on_message(&mut self, text: &str, out: &mut Outbox) {
        match client_message(text) {
            Err(e) => push_error(out, "", &e),
            Ok(ClientMessage::Close { id }) => self.subs.remove(&id),
            Ok(ClientMessage::Presence { id, visible }) => {
                for sub in self.subs.iter() {
                    if let Frames::Session(subscription) = &sub.feed
                        && id.as_ref().is_none_or(|id| *id == sub.key)
                    {
                        subscription.set_visible(visible);
                    }
                }
            }
            Ok(ClientMessage::Open { id, target }) => {
                // The old subscription goes first: nothing of it follows the new one.
                self.subs.remove(&id);
                let (engine, user, closing) = (self.engine.clone(), self.user.clone(), self.closing.clone());
                match open(engine, user, closing, self.subs.len(), target).await {
                    Ok((frames, kill)) => {
                        // Acknowledged before any of its frames: a session stream opened
                        // at its current seq sends nothing until something happens, and
                        // the client must still know the stream is up.
                        out.push(message(&id, &spool_protocol::sse::encode(None, Some(OPEN_EVENT), "{}")));
                        self.subs.add(id, frames, kill, ());
                    }
                    Err(e) => push_error(out, &id, &e),
                }
            }
        }
    }

    fn on_binary(&mut self, out: &mut Outbox) {
        push_error(out, "", &ApiError::bad_request("invalid_message", "messages are JSON text"));
    }

    /// The SSE `heartbeat` event, with an empty id.
    fn heartbeat(&self) -> Heartbeat {
        Heartbeat::Text(message("", spool_protocol::sse::HEARTBEAT))
    }
}

/// Subscribes as the SSE route does, beside `open` streams already on the socket; a
/// session subscription comes with its kill token.
async fn open(
    engine: Engine,
    user: UserId,
    closing: CancellationToken,
    open: usize,
    target: Target,
) -> Result<(Frames, Option<CancellationToken>), ApiError> {
    if open >= MAX_STREAMS {
        let message = format!("a socket holds at most {MAX_STREAMS} streams; close one first");
        return Err(EngineError::TooMany { code: "too_many_streams", message }.into());
    }
    match target {
        Target::Session { session, cursor, approvals, visible } => {
            let id: SessionId = session.parse().map_err(|_| ApiError::not_found("session"))?;
            // A cursor that does not parse means a snapshot, as on the SSE route.
            let cursor = cursor.as_deref().and_then(Cursor::parse);
            let kill = CancellationToken::new();
            let viewer = match approvals {
                true => Viewer::answering(ClientKind::Web),
                false => Viewer::watching(ClientKind::Web),
            };
            let (subscription, start) =
                engine.sessions().subscribe(&user, &id, cursor.as_ref(), kill.clone(), viewer).await?;
            subscription.set_visible(visible);
            tracing::debug!(session = %id, ?start, "socket stream subscribed");
            Ok((Frames::Session(subscription), Some(kill)))
        }
        Target::Lists => {
            // Counted like a session stream, for as long as it is open.
            let permit = engine.stream_permit(&user)?;
            let frames: Pin<Box<dyn Stream<Item = Bytes> + Send>> =
                Box::pin(holding(engine.lists().subscribe(user), permit));
            Ok((Frames::Lists { events: frames, closing }, None))
        }
    }
}

/// `"<id>\n<event>"`.
fn message(id: &str, event: &[u8]) -> Utf8Bytes {
    let event = std::str::from_utf8(event).expect("events are encoded from strings");
    let mut text = String::with_capacity(id.len() + 1 + event.len());
    text.push_str(id);
    text.push('\n');
    text.push_str(event);
    text.into()
}

/// One message per SSE event of `chunk` (the engine batches the frames that are ready
/// into one chunk; each event ends with a blank line, which no field holds).
fn push_events(out: &mut Outbox, id: &str, chunk: &[u8]) {
    let mut rest = chunk;
    while !rest.is_empty() {
        let end = rest.windows(2).position(|w| w == b"\n\n").map_or(rest.len(), |at| at + 2);
        out.push(message(id, &rest[..end]));
        rest = &rest[end..];
    }
}

/// The `error` event for `id`: the status and the JSON body an HTTP route would answer.
fn push_error(out: &mut Outbox, id: &str, error: &ApiError) {
    let (status, body) = error.status_and_body();
    let fields = body.strip_prefix('{').expect("an error body is a JSON object");
    let data = format!("{{\"status\":{},{fields}", status.as_u16());
    out.push(message(id, &spool_protocol::sse::encode(None, Some(ERROR_EVENT), &data)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_are_checked() {
        let open = client_message(r#"{"op":"open","id":"s1","session":"ses_x","cursor":null,"approvals":true}"#);
        let target = Target::Session { session: "ses_x".into(), cursor: None, approvals: true, visible: true };
        assert_eq!(open.ok(), Some(ClientMessage::Open { id: "s1".into(), target }));
        let hidden = client_message(r#"{"op":"open","id":"s1","session":"ses_x","approvals":true,"visible":false}"#);
        let target = Target::Session { session: "ses_x".into(), cursor: None, approvals: true, visible: false };
        assert_eq!(hidden.ok(), Some(ClientMessage::Open { id: "s1".into(), target }));
        assert_eq!(
            client_message(r#"{"type":"presence","id":"s1","visible":false}"#).ok(),
            Some(ClientMessage::Presence { id: Some("s1".into()), visible: false })
        );
        assert_eq!(
            client_message(r#"{"type":"presence","visible":true}"#).ok(),
            Some(ClientMessage::Presence { id: None, visible: true })
        );
        let lists = client_message(r#"{"op":"open","id":"l","lists":true}"#);
        assert_eq!(lists.ok(), Some(ClientMessage::Open { id: "l".into(), target: Target::Lists }));
        assert_eq!(
            client_message(r#"{"op":"close","id":"a.b:c-d_9"}"#).ok(),
            Some(ClientMessage::Close { id: "a.b:c-d_9".into() })
        );
        let long = "x".repeat(MAX_ID + 1);
        for bad in [
            "",
            "[]",
            r#"{"op":"open"}"#,
            r#"{"op":"open","id":"s1"}"#,
            r#"{"op":"open","id":"s1","session":"ses_x","lists":true}"#,
            r#"{"op":"subscribe","id":"s1"}"#,
            r#"{"op":"close","id":""}"#,
            r#"{"op":"close","id":"a\nb"}"#,
            r#"{"op":"close","id":"a b"}"#,
            &format!(r#"{{"op":"close","id":"{long}"}}"#),
            r#"{"op":"open","id":"s1","session":"ses_x","cursor":5}"#,
            r#"{"type":"presence"}"#,
            r#"{"type":"presence","visible":"no"}"#,
            r#"{"type":"presence","id":"a b","visible":true}"#,
            r#"{"type":"visible","visible":true}"#,
        ] {
            let refused = client_message(bad).expect_err(bad);
            assert_eq!(refused.status_and_body().0, axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn a_chunk_becomes_one_message_per_event() {
        let mut out = Outbox::default();
        push_events(&mut out, "s1", b"id: a:1\ndata: {}\n\nid: a:2\ndata: {\"x\":1}\n\n");
        assert_eq!(out.0, ["s1\nid: a:1\ndata: {}\n\n", "s1\nid: a:2\ndata: {\"x\":1}\n\n"]);
    }

    #[test]
    fn an_error_event_carries_the_status_and_the_routes_body() {
        let mut out = Outbox::default();
        push_error(&mut out, "s1", &ApiError::not_found("session"));
        let text = out.0[0].as_str();
        let data = text.strip_prefix("s1\nevent: error\ndata: ").and_then(|d| d.strip_suffix("\n\n")).expect(text);
        let data: serde_json::Value = serde_json::from_str(data).expect("JSON");
        assert_eq!(data["status"], 404);
        assert_eq!(data["error"]["code"], "not_found");
    }
}
