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
//! One task per socket, and it alone writes, so each stream's events go out in its
//! order. It holds each open stream as the SSE route would (an engine `Subscription` —
//! a cursor into the session's shared ring — or the user's list stream) and polls them
//! round-robin, so a busy stream cannot starve the others.
//!
//! # Slow clients
//!
//! Every session subscription carries a kill token, and every write races the
//! socket's tokens. When the engine cuts a subscription for lagging (a queue limit
//! behind), its token fires: a write blocked on the socket gives up, and the socket
//! closes with 1013 — the client comes back with its cursors, as an `EventSource`
//! would. The engine fires the tokens of a session's subscribers when it closes the
//! session's stream too, so a fired token is judged by asking the subscription whether
//! it was cut: a closed stream is not the socket's fault. A stream that ends says why
//! (the engine's [`Ended`]), and that alone picks the ending, with no store read: a
//! deleted session's stream reports `end`; a stopping server closes the socket with
//! 1001; one closed under a session that is still there (a node's stale view in a
//! cluster) closes the socket like a cut, since only a reconnect with cursors can pick
//! it up without a hole. Other sockets never notice. A write that makes no progress for
//! 30 s closes the socket too.

use super::responses::UpgradeResponses;
use super::socket::{REVOKED, STOPPING, Why, bad_origin, close_with, limited, origin_allowed, write};
use super::sse::{heartbeat, holding};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::state::AppState;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, SelectAll};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use spool_engine::{Ended, Engine, EngineError, Subscription};
use spool_protocol::{Cursor, SessionId, UserId};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
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
    op: String,
    id: String,
    session: Option<String>,
    cursor: Option<String>,
    #[serde(default)]
    approvals: bool,
    #[serde(default)]
    lists: bool,
}

/// A checked client message.
#[derive(Debug, PartialEq)]
enum ClientMessage {
    Open { id: String, target: Target },
    Close { id: String },
}

/// What an `open` names.
#[derive(Debug, PartialEq)]
enum Target {
    /// A session stream: the raw id (one that does not parse is a 404 for that stream,
    /// as the SSE route's path answers), the cursor as given, and whether the stream
    /// is a place where a person answers approvals.
    Session { session: String, cursor: Option<String>, approvals: bool },
    /// The user's list stream.
    Lists,
}

/// Parses and checks a client's message; the error is the empty-id `error` event's.
fn client_message(text: &str) -> Result<ClientMessage, ApiError> {
    const SHAPE: &str = "expected {\"op\":\"open\",\"id\":…,\"session\":…} , {\"op\":\"open\",\"id\":…,\"lists\":true} \
                         or {\"op\":\"close\",\"id\":…}";
    let raw: RawMessage =
        serde_json::from_str(text).map_err(|e| ApiError::bad_request("invalid_message", format!("{SHAPE}: {e}")))?;
    check_id(&raw.id)?;
    match raw.op.as_str() {
        "close" => Ok(ClientMessage::Close { id: raw.id }),
        "open" => {
            let target = match (raw.session, raw.lists) {
                (Some(session), false) => Target::Session { session, cursor: raw.cursor, approvals: raw.approvals },
                (None, true) => Target::Lists,
                (Some(_), true) => {
                    return Err(ApiError::bad_request(
                        "invalid_message",
                        "an open names a session or the lists, not both",
                    ));
                }
                (None, false) => return Err(ApiError::bad_request("invalid_message", SHAPE)),
            };
            Ok(ClientMessage::Open { id: raw.id, target })
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
#[utoipa::path(
    get,
    path = "/api/streams",
    tag = "streams",
    responses(UpgradeResponses)
)]
async fn upgrade(
    State(state): State<AppState>,
    Caller { user, credential }: Caller,
    headers: HeaderMap,
    uri: Uri,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    if !origin_allowed(&headers, &uri) {
        return Ok(bad_origin());
    }
    let upgrade = upgrade.map_err(|r| ApiError::bad_request("websocket_required", r.body_text()))?;
    // The socket counts as one of the user's streams for as long as it is open (each
    // stream opened over it counts too, as its SSE twin does).
    let permit = state.engine.stream_permit(&user)?;
    // The socket outlives its HTTP connection (hyper hands the stream over on upgrade),
    // so it gets a kill token of its own: revoking the credential closes the socket.
    let revoked = CancellationToken::new();
    let watch = state.engine.auth().watch_credential(&credential, revoked.clone());
    let mux =
        Mux { engine: state.engine.clone(), user, streams: SelectAll::new(), kills: FuturesUnordered::new() };
    let every = state.config.heartbeat;
    let closing = state.engine.lists().closed();
    let open = state.engine.metrics().stream_opened(spool_engine::metrics::Dialect::StreamsSocket);
    // hyper stops counting the connection when it hands it over; it is still open, and
    // the memory trimmer (`spool serve`) gives memory back when this count drops.
    let connection = state.engine.metrics().http_connection();
    Ok(limited(upgrade).on_upgrade(move |socket| async move {
        let (_watch, _open, _connection) = (watch, open, connection);
        mux.run(socket, every, closing, revoked).await;
        drop(permit);
    }))
}

/// The SSE bytes of one open stream.
enum Frames {
    /// A session stream, which the engine may cut or close (see [`Subscription::ended`]).
    Session(Subscription),
    /// The list stream, which ends only when the server stops or it lags. In a mutex
    /// only to be `Sync` (a write borrows the streams to ask about cuts); the task
    /// alone owns it and polls it through `get_mut`, which never locks.
    Lists(std::sync::Mutex<Pin<Box<dyn Stream<Item = Bytes> + Send>>>),
}

impl Frames {
    fn is_cut(&self) -> bool {
        matches!(self, Frames::Session(s) if s.is_cut())
    }
}

/// One stream open on a socket.
struct Open {
    id: String,
    frames: Frames,
    /// The session subscription's kill token.
    kill: Option<CancellationToken>,
    /// Its frames ended and the end was told (`(id, None)`).
    ended: bool,
}

/// `(id, Some(bytes))` for each chunk, then one `(id, None)` when the frames end: the
/// end is an item of its own, so the socket hears which stream ended while the stream
/// (and why it ended) is still in the set.
impl Stream for Open {
    type Item = (String, Option<Bytes>);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        let polled = match &mut this.frames {
            Frames::Session(s) => s.poll_next_unpin(cx),
            Frames::Lists(s) => s.get_mut().unwrap_or_else(|p| p.into_inner()).poll_next_unpin(cx),
        };
        polled.map(|chunk| {
            this.ended = chunk.is_none();
            Some((this.id.clone(), chunk))
        })
    }
}

/// Why the task stopped.
enum Closing {
    /// The client went away, or a write failed: nothing more can be said.
    Gone,
    /// Said to the client in a close frame.
    Say(Why),
}

/// One socket's state, owned by its task.
struct Mux {
    engine: Engine,
    user: UserId,
    /// Polled as one: a stream that gave a chunk goes to the back of the queue, so a
    /// busy stream cannot starve the others.
    streams: SelectAll<Open>,
    /// The kill tokens of the session subscriptions (and of some closed since).
    kills: FuturesUnordered<WaitForCancellationFutureOwned>,
}

/// What the task writes next, in order.
type Outbox = Vec<Utf8Bytes>;

impl Mux {
    async fn run(mut self, socket: WebSocket, every: Duration, closing: CancellationToken, revoked: CancellationToken) {
        let (mut tx, mut rx) = socket.split();
        let mut beats = heartbeat(every);
        let mut out = Outbox::new();
        const LAGGING: Closing = Closing::Say((close_code::AGAIN, "too far behind: reconnect with your cursors"));
        let why = loop {
            let streams = &self.streams;
            let cut = || streams.iter().any(|s| s.frames.is_cut());
            // The write and a client message are boxed: this task's
            // future is as large as its largest state, and an idle socket sits in the
            // `select!` below, which needs none of theirs (issue 19: per-socket RSS).
            if !Box::pin(write(&mut tx, &mut self.kills, out.drain(..).map(Message::Text), cut)).await {
                // Stuck for the write timeout, or cut while a write was blocked.
                break Closing::Gone;
            }
            tokio::select! {
                message = rx.next() => match message {
                    Some(Ok(Message::Text(text))) => Box::pin(self.on_message(text.as_str(), &mut out)).await,
                    Some(Ok(Message::Binary(_))) => {
                        push_error(&mut out, "", &ApiError::bad_request("invalid_message", "messages are JSON text"));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break Closing::Gone,
                },
                Some((id, item)) = self.streams.next() => match item {
                    Some(chunk) => push_events(&mut out, &id, &chunk),
                    None => match self.streams.iter().find(|s| s.id == id).map(|s| &s.frames) {
                        None => {}
                        Some(Frames::Lists(_)) if closing.is_cancelled() => {
                            break Closing::Say(STOPPING);
                        }
                        // A list stream ends otherwise only when it fell behind its ring.
                        Some(Frames::Lists(_)) => break LAGGING,
                        Some(Frames::Session(subscription)) => match subscription.ended() {
                            Some(Ended::SessionDeleted) => {
                                self.close(&id);
                                out.push(message(&id, &spool_protocol::sse::encode(None, Some(END_EVENT), "{}")));
                                self.forget_dropped_kills();
                            }
                            Some(Ended::Shutdown) => break Closing::Say(STOPPING),
                            // Cut for lagging, or closed under a session that is still
                            // there (this node's view of it went stale): the client comes
                            // back with its cursors, as an SSE client would.
                            Some(Ended::Lagged | Ended::Unloaded) | None => break LAGGING,
                        },
                    },
                },
                // A token that fired outside a write: a cut closes the socket now (its
                // stream's end would say the same a poll later); a closed stream's end
                // says the rest.
                Some(()) = self.kills.next() => {
                    if self.streams.iter().any(|s| s.frames.is_cut()) {
                        break LAGGING;
                    }
                }
                // The server is stopping: say goodbye (1001 going away) rather than
                // vanish when the process ends.
                () = closing.cancelled() => break Closing::Say(STOPPING),
                () = revoked.cancelled() => {
                    tracing::debug!("closing a stream socket: its credential was revoked");
                    break Closing::Say(REVOKED);
                }
                _ = beats.tick() => out.push(message("", spool_protocol::sse::HEARTBEAT)),
            }
        };
        // Subscriptions go first: nothing of theirs is queued for a socket that closes.
        self.streams.clear();
        if let Closing::Say(why) = why {
            close_with(&mut tx, why).await;
        }
    }

    async fn on_message(&mut self, text: &str, out: &mut Outbox) {
        match client_message(text) {
            Err(e) => push_error(out, "", &e),
            Ok(ClientMessage::Close { id }) => self.close(&id),
            Ok(ClientMessage::Open { id, target }) => {
                // The old subscription goes first: nothing of it follows the new one.
                self.close(&id);
                // Owned, not borrowed from `self`: the streams it holds are not `Sync`.
                let (engine, user) = (self.engine.clone(), self.user.clone());
                match open(engine, user, self.streams.len(), target).await {
                    Ok((frames, kill)) => {
                        if let Some(kill) = &kill {
                            self.kills.push(kill.clone().cancelled_owned());
                        }
                        // Acknowledged before any of its frames: a session stream opened
                        // at its current seq sends nothing until something happens, and
                        // the client must still know the stream is up.
                        out.push(message(&id, &spool_protocol::sse::encode(None, Some(OPEN_EVENT), "{}")));
                        self.streams.push(Open { id, frames, kill, ended: false });
                    }
                    Err(e) => push_error(out, &id, &e),
                }
            }
        }
        self.forget_dropped_kills();
    }

    /// Drops the stream `id`, if it is open.
    fn close(&mut self, id: &str) {
        if self.streams.iter().any(|s| s.id == id) {
            self.streams = std::mem::take(&mut self.streams).into_iter().filter(|s| s.id != id).collect();
        }
    }

    /// Rebuilds the kill set when closed streams' tokens pile up in it.
    fn forget_dropped_kills(&mut self) {
        if self.kills.len() > 2 * self.streams.len() + 16 {
            self.kills = self.streams.iter().filter_map(|s| s.kill.clone()).map(|k| k.cancelled_owned()).collect();
        }
    }
}

/// Subscribes as the SSE route does, beside `open` streams already on the socket; a
/// session subscription comes with its kill token.
async fn open(
    engine: Engine,
    user: UserId,
    open: usize,
    target: Target,
) -> Result<(Frames, Option<CancellationToken>), ApiError> {
    if open >= MAX_STREAMS {
        let message = format!("a socket holds at most {MAX_STREAMS} streams; close one first");
        return Err(EngineError::TooMany { code: "too_many_streams", message }.into());
    }
    match target {
        Target::Session { session, cursor, approvals } => {
            let id: SessionId = session.parse().map_err(|_| ApiError::not_found("session"))?;
            // A cursor that does not parse means a snapshot, as on the SSE route.
            let cursor = cursor.as_deref().and_then(Cursor::parse);
            let kill = CancellationToken::new();
            let (subscription, start) =
                engine.sessions().subscribe(&user, &id, cursor.as_ref(), kill.clone(), approvals).await?;
            tracing::debug!(session = %id, ?start, "socket stream subscribed");
            Ok((Frames::Session(subscription), Some(kill)))
        }
        Target::Lists => {
            // Counted like a session stream, for as long as it is open.
            let permit = engine.stream_permit(&user)?;
            let frames: Pin<Box<dyn Stream<Item = Bytes> + Send>> =
                Box::pin(holding(engine.lists().subscribe(user), permit));
            Ok((Frames::Lists(std::sync::Mutex::new(frames)), None))
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
        let target = Target::Session { session: "ses_x".into(), cursor: None, approvals: true };
        assert_eq!(open.ok(), Some(ClientMessage::Open { id: "s1".into(), target }));
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
        ] {
            let refused = client_message(bad).expect_err(bad);
            assert_eq!(refused.status_and_body().0, axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn a_chunk_becomes_one_message_per_event() {
        let mut out = Outbox::new();
        push_events(&mut out, "s1", b"id: a:1\ndata: {}\n\nid: a:2\ndata: {\"x\":1}\n\n");
        assert_eq!(out, ["s1\nid: a:1\ndata: {}\n\n", "s1\nid: a:2\ndata: {\"x\":1}\n\n"]);
    }

    #[test]
    fn an_error_event_carries_the_status_and_the_routes_body() {
        let mut out = Outbox::new();
        push_error(&mut out, "s1", &ApiError::not_found("session"));
        let text = out[0].as_str();
        let data = text.strip_prefix("s1\nevent: error\ndata: ").and_then(|d| d.strip_suffix("\n\n")).expect(text);
        let data: serde_json::Value = serde_json::from_str(data).expect("JSON");
        assert_eq!(data["status"], 404);
        assert_eq!(data["error"]["code"], "not_found");
    }
}
