//! `GET /api/ws`: the WebSocket hub of seed 002. Channels are session ids; a client
//! picks them with `?channels=a,b` or `{"type":"subscribe","channels":[…]}` (which
//! replaces the filter; an empty list means every session), and may add
//! `"cursors": {"ses_…": "streamId:seq"}` to get what it missed since (a replay, or a
//! `channel.snapshot` when the buffer no longer holds it). The events are
//! `dialect::ws_hub`'s mapping of the native frames; `channel.created` and
//! `channel.deleted` go to every subscriber whatever its filter. A subscribe message is
//! acknowledged with `subscribed`. A channel it names with a cursor restarts at that
//! cursor: the client discards what the channel sent before the acknowledgement and
//! gets, after it, every event after its cursor exactly once, in order.
//!
//! # Shape
//!
//! One task per socket, and it alone writes: writes to a socket are serialized by
//! construction, and a failed write ends the task, which unregisters everything. The
//! task holds one engine [`Subscription`] per followed session — a cursor into that
//! session's shared ring, not a queue — and copies frames out when it is ready to
//! write them. "Every session" follows each of the user's sessions that is not
//! archived (an idle followed session costs a slot in its ring's subscriber map), then
//! every session created afterwards from its stream's first frame, so a run that starts
//! and ends between the creation and the hub's subscription is not lost.
//!
//! # Slow clients
//!
//! A socket that stops reading blocks only its own task, in a write. Its subscriptions
//! fall behind, and the engine cuts one once it lags by the queue limit (1 MiB),
//! firing that subscription's kill token. Every write races the tokens of the socket's
//! subscriptions: one that fires first ends the task and closes the socket, and the
//! client comes back with its cursors. A subscription can also end outside a write,
//! and then it says why (the engine's [`Ended`]), with no store read: cut, or closed
//! under a session that is still there (this node's view went stale), closes the
//! socket, as for a stuck client; a stopping server closes it with 1001; a deleted
//! session's channel is dropped with a `channel.deleted` — the one the session list's
//! deletion change brings to every socket, or the hub's own if that has not come a
//! moment later. Nothing is ever resubscribed behind the client's back, so no event is
//! repeated or skipped within one connection.
//!
//! # Published channels
//!
//! A channel id that is not a session's names a channel of published events
//! (`POST /api/hub/events`, or an embedded component through the engine's
//! `Broadcaster`), and `""` the global ones; both live in the engine's hub, which
//! keeps their cursors and replay. The socket holds one hub subscriber beside its
//! session subscriptions: a cursor into the hub's one live ring, filtered by the
//! socket's channels (global events pass every filter) and by each event's audience —
//! with an empty filter the socket gets every channel granted to its user, never one
//! that was not. A cursor for a published channel in `cursors` replays after the
//! acknowledgement, like a session's.
//!
//! The `Origin` check, buffer sizes, message limits and the racing write are
//! `socket.rs`'s, shared with `GET /api/streams`.

use super::responses::UpgradeResponses;
use super::socket::{REVOKED, STOPPING, bad_origin, close_with, limited, origin_allowed, write};
use crate::dialect::shared::{Behind, Follow, FormMapper, Forms};
use crate::dialect::ws_hub::{self, Author, Envelope, RunTally, Streaming};
use crate::error::ApiError;
use crate::extract::{Caller, QueryParams};
use crate::state::AppState;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, SelectAll};
use futures::{FutureExt, Stream, StreamExt};
use serde::Deserialize;
use spool_engine::hub::HubSubscriber;
use spool_engine::lists::Change;
use spool_engine::{Ended, Engine, EngineError, Start, TypedSubscription};
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::time::now_ms;
use spool_protocol::{Cursor, ProjectId, SessionId, UserId};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most channels one filter may name.
const MAX_CHANNELS: usize = 1000;
/// How long after a deleted session's subscription ends the hub waits for the deletion
/// change (whose `channel.deleted` every socket gets) before saying it itself.
const JUDGE_AFTER: Duration = Duration::from_millis(500);

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(upgrade))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WsQuery {
    /// Comma-separated session ids to follow (default: every session).
    channels: Option<String>,
    /// How a growing answer streams: `delta` (the default: `message.streaming` carries
    /// each piece as `delta` at its `offset`, `agent.thinking` likewise in `text`) or
    /// `content` (seed 002's form: the whole text so far in every event, which costs
    /// O(n²) bytes for an answer of n pieces).
    #[param(inline, value_type = Option<String>, pattern = "^(delta|content)$")]
    streaming: Option<String>,
}

/// What a client sends: `{"type":"subscribe","channels":[…],"cursors":{…}}`.
#[derive(Deserialize)]
struct ClientMessage {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    channels: Vec<String>,
    #[serde(default)]
    cursors: HashMap<String, String>,
}

/// Parses and checks a client's message; the error is the `error` event's code and text.
fn client_message(text: &str) -> Result<ClientMessage, (&'static str, String)> {
    let message: ClientMessage = serde_json::from_str(text)
        .map_err(|e| ("invalid_message", format!("expected {{\"type\":\"subscribe\",\"channels\":[…]}}: {e}")))?;
    if message.kind != "subscribe" {
        return Err(("unknown_type", "the only client message is `subscribe`".into()));
    }
    if message.channels.len() > MAX_CHANNELS || message.cursors.len() > MAX_CHANNELS {
        return Err(("too_many_channels", format!("at most {MAX_CHANNELS} channels")));
    }
    Ok(message)
}

/// The client's message, checked as the hub does (for the `request_json` fuzz target;
/// the hub answers a refusal with an `error` event, here a 400).
pub(super) const BODIES: &[(&str, crate::extract::BodyCheck)] = &[("WS /api/ws subscribe message", |b| {
    let text =
        std::str::from_utf8(b).map_err(|_| ApiError::bad_request("invalid_message", "messages are JSON text"))?;
    client_message(text).map(drop).map_err(|(code, message)| ApiError::bad_request(code, message))
})];

/// The WebSocket hub. After the upgrade the client sends
/// `{"type":"subscribe","channels":[…],"cursors":{…}}` and receives
/// `{type, channel_id, data, timestamp}` envelopes (the `HubEvent` schema).
#[utoipa::path(
    get,
    path = "/api/ws",
    tag = "streams",
    params(WsQuery),
    responses(UpgradeResponses)
)]
async fn upgrade(
    State(state): State<AppState>,
    Caller { user, credential }: Caller,
    headers: HeaderMap,
    uri: Uri,
    QueryParams(query): QueryParams<WsQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    if !origin_allowed(&headers, &uri) {
        return Ok(bad_origin());
    }
    let upgrade = upgrade.map_err(|r| ApiError::bad_request("websocket_required", r.body_text()))?;
    let channels: Vec<String> = query
        .channels
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    if channels.len() > MAX_CHANNELS {
        return Err(ApiError::bad_request("too_many_channels", format!("at most {MAX_CHANNELS} channels")));
    }
    let streaming = match query.streaming.as_deref() {
        None | Some("delta") => Streaming::Delta,
        Some("content") => Streaming::Content,
        Some(_) => return Err(ApiError::bad_request("invalid_query", "streaming is `delta` or `content`")),
    };
    // The socket counts as one of the user's streams for as long as it is open (its
    // followed sessions count too, each as a session stream).
    let permit = state.engine.stream_permit(&user)?;
    // Subscribed before answering: once the client sees the upgrade, every event of
    // its channels from then on reaches it.
    // The author of the user messages of every channel it may follow: the user.
    let name = state.engine.user_name(&user).await?;
    let author = Author { id: user.to_string(), name };
    let mut hub = Hub::new(state.engine.clone(), user, author, streaming);
    let changes = state.engine.lists().watch_changes();
    let closing = state.engine.lists().closed();
    let mut out = Outbox::default();
    // No cursors in a query, so nothing of the hub's to replay.
    let _ = hub.subscribe(channels, HashMap::new(), &mut out).await;
    let heartbeat = state.config.heartbeat;
    // The socket outlives its HTTP connection (hyper hands the stream over on upgrade),
    // so it gets a kill token of its own: revoking the credential closes the socket,
    // saying so (1008), as `/api/streams` does.
    let revoked = CancellationToken::new();
    let watch = state.engine.auth().watch_credential(&credential, revoked.clone());
    let open = state.engine.metrics().stream_opened(spool_engine::metrics::Dialect::Ws);
    // hyper stops counting the connection when it hands it over; it is still open, and
    // the memory trimmer (`spool serve`) gives memory back when this count drops.
    let connection = state.engine.metrics().http_connection();
    Ok(limited(upgrade).on_upgrade(move |socket| async move {
        let (_watch, _open, _connection) = (watch, open, connection);
        hub.run(socket, changes, out, heartbeat, closing, revoked).await;
        drop(permit);
    }))
}

/// Whether a channel id that is not a session's can name a published channel: the
/// global channel `""`, or an id the publish API accepts.
fn published_channel(raw: &str) -> bool {
    raw == spool_protocol::hub::GLOBAL_CHANNEL || spool_protocol::hub::check_channel_id(raw).is_ok()
}

/// Which channels a socket wants.
#[derive(Clone, Debug, PartialEq)]
enum Filter {
    /// Every session of the user.
    All,
    /// These sessions (the followed channels are exactly these).
    Only,
}

/// What a channel's first frame, a `session.snapshot`, becomes.
#[derive(Clone, Debug, PartialEq)]
enum OnSnapshot {
    /// Followed without a cursor: announce a run in progress, nothing else (seed 002
    /// has no history).
    Join,
    /// The client's cursor could not be replayed: send the snapshot — unless it is
    /// at that very cursor (nothing was missed; the engine itself answers a cursor at
    /// its current seq with zero frames, so this only guards an in-stream snapshot).
    Report(Option<Cursor>),
}

/// Where a newly followed channel starts.
#[derive(Clone, Debug, PartialEq)]
enum StartAt {
    /// Now, without history.
    Live,
    /// After the client's cursor: a replay, or a snapshot.
    Cursor(Cursor),
    /// At the first frame of a session created just now.
    Birth,
}

impl StartAt {
    fn cursor(cursor: Option<Cursor>) -> Self {
        cursor.map_or(StartAt::Live, StartAt::Cursor)
    }
}

/// The hub's output form of a session (see `dialect/shared.rs`): the run tally, and each
/// frame's event encoded once for every socket that follows the session.
#[derive(Clone)]
struct HubForm(RunTally, Author);

impl FormMapper for HubForm {
    type Out = Option<Utf8Bytes>;

    fn map(&mut self, frame: &Frame) -> Option<Utf8Bytes> {
        ws_hub::map_frame(frame, &mut self.0, &self.1, now_ms()).map(|e| e.to_json().into())
    }
}

static HUB_FORMS: LazyLock<Forms<Streaming, HubForm>> = LazyLock::new(Forms::default);

/// What the socket writes next, in order: events made for this socket, and events shared
/// with every socket that follows the same session (already encoded).
#[derive(Default)]
struct Outbox(Vec<Utf8Bytes>);

impl Outbox {
    fn push(&mut self, envelope: Envelope) {
        self.0.push(envelope.to_json().into());
    }

    fn extend(&mut self, envelopes: impl IntoIterator<Item = Envelope>) {
        envelopes.into_iter().for_each(|e| self.push(e));
    }
}

struct Channel {
    id: SessionId,
    subscription: TypedSubscription,
    /// Fired by the engine when it cuts this subscription or closes the session.
    kill: CancellationToken,
    /// The channel's place in the session's shared hub form (its run tally).
    follow: Follow<Streaming, HubForm>,
    on_snapshot: OnSnapshot,
    /// The subscription ended (its session deleted), or the channel fell behind the
    /// shared outputs: judged at `judge_at`, and not polled until then.
    ended: bool,
}

/// `(id, Some(frames))` for each batch, then one `(id, None)` when the subscription
/// ends. An ended channel stays pending (never `None`), so it stays in the socket's
/// set until it is judged.
impl Stream for Channel {
    type Item = (SessionId, Option<Vec<Arc<Frame>>>);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Pending;
        }
        this.subscription.poll_next_unpin(cx).map(|frames| {
            this.ended = frames.is_none();
            Some((this.id.clone(), frames))
        })
    }
}

struct Hub {
    engine: Engine,
    user: UserId,
    /// Who the user messages of the channels are by (only their owner follows them).
    author: Author,
    /// How the socket's growing answers stream (`?streaming=`).
    streaming: Streaming,
    filter: Filter,
    /// Polled as one: a channel that gave frames goes to the back of the queue, so one
    /// busy channel cannot starve the others.
    channels: SelectAll<Channel>,
    /// The channels' kill tokens, raced against every write.
    kills: FuturesUnordered<WaitForCancellationFutureOwned>,
    /// When ended channels are judged: deleted (dropped) or behind (the socket closes).
    judge_at: Option<Instant>,
    /// Whether a project is this user's, for the global events (ownership never changes).
    projects: HashMap<ProjectId, bool>,
    /// The published channels and global events (see "Published channels").
    published: HubSubscriber,
}

impl Hub {
    fn new(engine: Engine, user: UserId, author: Author, streaming: Streaming) -> Self {
        let published = engine.hub().subscriber(user.clone());
        Self {
            engine,
            user,
            author,
            streaming,
            published,
            filter: Filter::Only,
            channels: SelectAll::new(),
            kills: FuturesUnordered::new(),
            judge_at: None,
            projects: HashMap::new(),
        }
    }

    /// Serves the socket until it closes, a write fails, or the client is cut. `out`
    /// holds what the initial subscription already has to say.
    async fn run(
        mut self,
        socket: WebSocket,
        mut changes: tokio::sync::broadcast::Receiver<Change>,
        mut out: Outbox,
        heartbeat: Duration,
        closing: CancellationToken,
        revoked: CancellationToken,
    ) {
        let (mut tx, mut rx) = socket.split();
        let mut ping = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        loop {
            let messages = out.0.drain(..).map(Message::Text);
            // A cut ends a blocked write (the client stopped reading); a token that
            // fired because a session's stream closed lets it go on, and that
            // subscription's end says the rest.
            let channels = &self.channels;
            let cut = || channels.iter().any(|c| c.subscription.ended() == Some(Ended::Lagged));
            if !write(&mut tx, &mut self.kills, messages, cut).await {
                return;
            }
            let judge_at = self.judge_at;
            tokio::select! {
                message = rx.next() => match message {
                    Some(Ok(Message::Text(text))) => self.on_message(text.as_str(), &mut out).await,
                    Some(Ok(Message::Binary(_))) => {
                        out.push(ws_hub::error("invalid_message", "messages are JSON text", now_ms()));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                },
                change = changes.recv() => match change {
                    Ok(change) => self.on_change(change, &mut out).await,
                    // A socket a whole ring of changes behind is cut like a slow reader.
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return,
                },
                Some((id, item)) = self.channels.next() => match item {
                    Some(frames) => self.on_frames(&id, &frames, &mut out),
                    None => match self.channels.iter().find(|c| c.id == id).and_then(|c| c.subscription.ended()) {
                        Some(Ended::SessionDeleted) => {
                            self.judge_at.get_or_insert(Instant::now() + JUDGE_AFTER);
                        }
                        Some(Ended::Shutdown) => {
                            close_with(&mut tx, STOPPING).await;
                            return;
                        }
                        // Cut for lagging, or closed under a session that is still there:
                        // the client comes back with its cursors.
                        Some(Ended::Lagged | Ended::Unloaded) | None => return,
                    },
                },
                events = self.published.next() => match events {
                    Ok(events) => out.0.extend(events.into_iter().filter_map(|b| Utf8Bytes::try_from(b).ok())),
                    // Behind the hub's live ring: cut like a slow reader.
                    Err(_) => return,
                },
                // A token that fired outside a write: its subscription's end says the rest.
                Some(()) = self.kills.next() => {}
                _ = tokio::time::sleep_until(judge_at.unwrap_or_else(Instant::now)), if judge_at.is_some() => {
                    if !self.judge(&mut out) {
                        return;
                    }
                }
                // The server is stopping: say goodbye (1001 going away) rather than
                // vanish when the process ends.
                () = closing.cancelled() => {
                    close_with(&mut tx, STOPPING).await;
                    return;
                }
                () = revoked.cancelled() => {
                    tracing::debug!("closing a WebSocket: its credential was revoked");
                    close_with(&mut tx, REVOKED).await;
                    return;
                }
                _ = ping.tick() => {
                    if !write(&mut tx, &mut self.kills, std::iter::once(Message::Ping(Bytes::new())), || true).await {
                        return;
                    }
                }
            }
        }
    }

    async fn on_message(&mut self, text: &str, out: &mut Outbox) {
        let message = match client_message(text) {
            Ok(m) => m,
            Err((code, message)) => {
                out.push(ws_hub::error(code, &message, now_ms()));
                return;
            }
        };
        let channels = message.channels.clone();
        let replay = self.subscribe(message.channels, message.cursors, out).await;
        out.push(ws_hub::subscribed(&channels, now_ms()));
        out.0.extend(replay.into_iter().filter_map(|b| Utf8Bytes::try_from(b).ok()));
    }

    /// Replaces the filter (seed 002: it does not merge). Channels kept from the old
    /// filter go on where they are; new ones start at their cursor, if one is given.
    /// Returns what the published channels named with cursors replay, to be sent after
    /// the acknowledgement.
    async fn subscribe(
        &mut self,
        channels: Vec<String>,
        mut cursors: HashMap<String, String>,
        out: &mut Outbox,
    ) -> Vec<Bytes> {
        // A cursor that does not parse is refused out loud: following the channel live
        // instead would leave the client a hole it cannot see.
        let refused: Vec<String> =
            cursors.iter().filter(|(_, c)| Cursor::parse(c).is_none()).map(|(k, _)| k.clone()).collect();
        for raw in &refused {
            cursors.remove(raw);
            let message = "a cursor is `streamId:seq`, as the hub's events carry it";
            out.push(ws_hub::channel_error(raw, "invalid_cursor", message, now_ms()));
        }
        // Channel ids that are not sessions' are the hub's published channels.
        let is_session = |raw: &str| raw.parse::<SessionId>().is_ok();
        let mut published_cursors = Vec::new();
        for (raw, cursor) in &cursors {
            if is_session(raw) {
                continue;
            }
            match (published_channel(raw), Cursor::parse(cursor)) {
                (true, Some(cursor)) => published_cursors.push((raw.clone(), cursor)),
                _ => out.push(ws_hub::channel_error(raw, "not_found", "no such channel", now_ms())),
            }
        }
        cursors.retain(|raw, _| is_session(raw));
        let mut published = Vec::new();
        let mut sessions = Vec::new();
        for raw in channels.iter().filter(|c| !refused.contains(c)) {
            if is_session(raw) {
                sessions.push(raw.clone());
            } else if published_channel(raw) {
                published.push(raw.clone());
            } else {
                out.push(ws_hub::channel_error(raw, "not_found", "no such channel", now_ms()));
            }
        }
        let filter = (!channels.is_empty()).then_some(published);
        let replay = self.published.set_filter(filter, published_cursors).await;
        self.subscribe_sessions(channels.is_empty(), sessions, cursors, &refused, out).await;
        replay
    }

    /// The session part of [`subscribe`](Self::subscribe): `all` follows every session.
    async fn subscribe_sessions(
        &mut self,
        all: bool,
        channels: Vec<String>,
        cursors: HashMap<String, String>,
        refused: &[String],
        out: &mut Outbox,
    ) {
        let cursor_of = |id: &SessionId| cursors.get(id.as_str()).and_then(|c| Cursor::parse(c));
        if all {
            self.filter = Filter::All;
            for (raw, cursor) in &cursors {
                match raw.parse::<SessionId>() {
                    Ok(id) => {
                        self.keep_channels(|c| c.id != id);
                        self.follow(id, StartAt::cursor(Cursor::parse(cursor)), false, out).await;
                    }
                    Err(_) => out.push(ws_hub::channel_error(raw, "not_found", "session not found", now_ms())),
                }
            }
            // A client that names cursors is coming back: the sessions it has no cursor
            // for are announced, so one created while it was away is not missed.
            let returning = !cursors.is_empty();
            for (id, project) in self.all_sessions().await {
                if refused.iter().any(|r| r == id.as_str()) {
                    continue;
                }
                if returning && !cursors.contains_key(id.as_str()) {
                    out.push(ws_hub::channel_created(&id, &project, now_ms()));
                }
                self.follow(id, StartAt::Live, true, out).await;
            }
            return;
        }
        self.filter = Filter::Only;
        let mut wanted = Vec::new();
        for raw in &channels {
            match raw.parse::<SessionId>() {
                Ok(id) => wanted.push(id),
                Err(_) => out.push(ws_hub::channel_error(raw, "not_found", "session not found", now_ms())),
            }
        }
        // A channel named with a cursor restarts at it, even one followed already: the
        // client discards what the channel sent before the acknowledgement, and gets
        // everything after its cursor, in order, once, after it.
        self.keep_channels(|c| wanted.contains(&c.id) && cursor_of(&c.id).is_none());
        self.forget_dropped_kills();
        for id in wanted {
            let from = StartAt::cursor(cursor_of(&id));
            self.follow(id, from, false, out).await;
        }
    }

    /// Every session of the user that is not archived, for "every session".
    async fn all_sessions(&self) -> Vec<(SessionId, ProjectId)> {
        let Ok(projects) = self.engine.projects().list(&self.user).await else {
            return Vec::new();
        };
        let mut all = Vec::new();
        for project in projects {
            if let Ok(sessions) = self.engine.sessions().list(&self.user, &project.id, false).await {
                all.extend(sessions.into_iter().map(|s| (s.session.id, project.id.clone())));
            }
        }
        all
    }

    /// Subscribes to a session with a token of its own.
    async fn open(
        &self,
        id: &SessionId,
        cursor: Option<&Cursor>,
    ) -> Result<(TypedSubscription, CancellationToken, Start), EngineError> {
        let kill = CancellationToken::new();
        let (subscription, start) =
            self.engine.sessions().subscribe(&self.user, id, cursor, kill.clone(), false).await?;
        Ok((subscription.typed(), kill, start))
    }

    /// Starts following a session, unless it is followed already. `quiet` skips the
    /// error for a session that is not the user's (one seen in a global change).
    async fn follow(&mut self, id: SessionId, from: StartAt, quiet: bool, out: &mut Outbox) {
        if self.channels.iter().any(|c| c.id == id) {
            return;
        }
        let cursor = match &from {
            StartAt::Cursor(cursor) => Some(cursor),
            StartAt::Live | StartAt::Birth => None,
        };
        let (mut subscription, mut kill, _) = match self.open(&id, cursor).await {
            Ok(opened) => opened,
            Err(EngineError::NotFound(_)) if quiet => return,
            Err(e) => {
                out.push(ws_hub::channel_error(id.as_str(), e.code(), &e.to_string(), now_ms()));
                return;
            }
        };
        let mut on_snapshot = if cursor.is_some() { OnSnapshot::Report(cursor.cloned()) } else { OnSnapshot::Join };
        let mut peeked = None;
        if from == StartAt::Birth {
            // A new session's stream began after it was created: if a prompt already
            // published into it, replay from its first frame instead of joining late.
            peeked = subscription.next().now_or_never().flatten();
            let start = peeked.as_ref().and_then(|frames| frames.first()).cloned();
            if let Some(start) = start.filter(|f| f.seq > 0) {
                let first = Cursor { stream_id: start.stream_id.clone(), seq: 0 };
                if let Ok((replay, replay_kill, Start::Replay { .. })) = self.open(&id, Some(&first)).await {
                    (subscription, kill, on_snapshot, peeked) = (replay, replay_kill, OnSnapshot::Report(None), None);
                }
            }
        }
        self.kills.push(kill.clone().cancelled_owned());
        self.channels.push(Channel {
            id: id.clone(),
            subscription,
            kill,
            follow: Follow::new(self.streaming, HubForm(RunTally::new(self.streaming), self.author.clone())),
            on_snapshot,
            ended: false,
        });
        if let Some(frames) = peeked {
            self.on_frames(&id, &frames, out);
        }
    }

    fn on_frames(&mut self, id: &SessionId, frames: &[Arc<Frame>], out: &mut Outbox) {
        let Some(channel) = self.channels.iter_mut().find(|c| c.id == *id) else {
            return;
        };
        for frame in frames {
            if !matches!(frame.body, FrameBody::Snapshot { .. }) {
                match channel.follow.map(&HUB_FORMS, frame) {
                    Ok(text) => out.0.extend(text.iter().cloned()),
                    Err(Behind) => {
                        // Fell behind the shared outputs: judged like a cut subscription.
                        channel.ended = true;
                        self.judge_at.get_or_insert(Instant::now());
                        return;
                    }
                }
                continue;
            }
            // A snapshot is this socket's own: what it says depends on how the channel
            // was followed, and it re-anchors the channel's tally.
            let now = now_ms();
            let fresh = || HubForm(RunTally::new(self.streaming), self.author.clone());
            let mut form = channel.follow.take_mapper(None).unwrap_or_else(fresh);
            let envelope = match std::mem::replace(&mut channel.on_snapshot, OnSnapshot::Report(None)) {
                OnSnapshot::Join => ws_hub::joined(frame, &mut form.0, now),
                OnSnapshot::Report(Some(at)) if at == frame.cursor() => Vec::new(),
                OnSnapshot::Report(at) => ws_hub::snapshot(frame, &mut form.0, at.is_some(), now),
            };
            channel.follow.reanchor(form);
            out.extend(envelope);
        }
    }

    async fn on_change(&mut self, change: Change, out: &mut Outbox) {
        match change {
            Change::SessionCreated { session, project } => {
                if self.owns(&project).await {
                    out.push(ws_hub::channel_created(&session, &project, now_ms()));
                    if self.filter == Filter::All {
                        self.follow(session, StartAt::Birth, true, out).await;
                    }
                }
            }
            Change::SessionChanged { session, .. } => {
                // One the hub does not follow yet (restored from the archive).
                if self.filter == Filter::All {
                    self.follow(session, StartAt::Live, true, out).await;
                }
            }
            Change::SessionDeleted { session, project } => {
                // A followed session is the user's: its project, deleted with it, can no
                // longer be asked about.
                let followed = self.channels.iter().any(|c| c.id == session);
                self.keep_channels(|c| c.id != session);
                self.forget_dropped_kills();
                if followed || self.owns(&project).await {
                    out.push(ws_hub::channel_deleted(&session, now_ms()));
                }
            }
            Change::ProjectChanged { .. } => {}
        }
    }

    async fn owns(&mut self, project: &ProjectId) -> bool {
        if let Some(owned) = self.projects.get(project) {
            return *owned;
        }
        let owned = match self.engine.projects().get(&self.user, project).await {
            Ok(_) => true,
            Err(EngineError::NotFound(_)) => false,
            // Unknown for now: do not remember.
            Err(_) => return false,
        };
        self.projects.insert(project.clone(), owned);
        owned
    }

    /// Some channels ended a moment ago. A deleted session's channel whose deletion
    /// change has not come (that change drops it and says `channel.deleted`) is dropped
    /// with the hub's own `channel.deleted`; one that fell behind the shared outputs
    /// closes the socket, so the client comes back with its cursors. Returns false to
    /// close the socket.
    fn judge(&mut self, out: &mut Outbox) -> bool {
        self.judge_at = None;
        for channel in self.channels.iter().filter(|c| c.ended) {
            if channel.subscription.ended() != Some(Ended::SessionDeleted) {
                return false;
            }
            out.push(ws_hub::channel_deleted(&channel.id, now_ms()));
        }
        self.keep_channels(|c| !c.ended);
        self.forget_dropped_kills();
        true
    }

    /// Drops every channel `keep` refuses.
    fn keep_channels(&mut self, keep: impl Fn(&Channel) -> bool) {
        if !self.channels.iter().all(&keep) {
            self.channels = std::mem::take(&mut self.channels).into_iter().filter(|c| keep(c)).collect();
        }
    }

    /// Rebuilds the kill set when dropped channels' tokens pile up in it.
    fn forget_dropped_kills(&mut self) {
        if self.kills.len() > 2 * self.channels.len() + 16 {
            self.kills = self.channels.iter().map(|c| c.kill.clone().cancelled_owned()).collect();
        }
    }
}

