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
//! The socket runs the shared socket loop (`http/socket/mux.rs`: one task that alone
//! writes, round-robin polling, the heartbeat, slow clients and why a socket closes);
//! this file is the hub's mapping. The socket holds one engine subscription per
//! followed session — a cursor into that session's shared ring, not a queue — and
//! copies frames out when it is ready to write them. "Every session" follows each of
//! the user's sessions that is not archived (an idle followed session costs a slot in
//! its ring's subscriber map), then every session created afterwards from its stream's
//! first frame, so a run that starts and ends between the creation and the hub's
//! subscription is not lost.
//!
//! # Slow clients
//!
//! A socket that stops reading blocks only its own task, in a write; the engine cuts
//! a subscription that lags by the queue limit (1 MiB), and the socket closes (see
//! `http/socket/mux.rs`): the client comes back with its cursors. A subscription that ends
//! says why (the engine's [`Ended`]), with no store read: cut, or closed under a
//! session that is still there (this node's view went stale), closes the socket, as
//! for a stuck client; a stopping server closes it with 1001; a deleted session's
//! channel is dropped with a `channel.deleted` — the one the session list's deletion
//! change brings to every socket, or the hub's own if that has not come a moment
//! later. Nothing is ever resubscribed behind the client's back, so no event is
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
//! The upgrade, the socket's lifetime and its loop are `http/socket.rs`'s, shared with
//! `GET /api/streams`.

use crate::dialect::shared::{Behind, Follow, FormMapper};
use crate::dialect::ws_hub::{self, Author, Envelope, HubForm, RunTally, Streaming};
use crate::error::ApiError;
use crate::extract::{Caller, QueryParams};
use crate::http::responses::UpgradeResponses;
use crate::http::socket::{self, Closing, Dialect, Heartbeat, Outbox, Polled, Subs, Upgrade};
use crate::state::{AppState, SessionForms};
use axum::extract::State;
use axum::extract::ws::Utf8Bytes;
use axum::response::Response;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use spool_engine::hub::{HubSubscriber, Lagged};
use spool_engine::lists::Change;
use spool_engine::{Ended, Engine, EngineError, Start, TypedSubscription, Viewer};
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::time::now_ms;
use spool_protocol::{ClientKind, Cursor, ProjectId, SessionId, UserId};

/// Who a hub client's session subscriptions count as: a client that shows approvals and
/// answers them (`approval.request` cards, the decide route).
const HUB_VIEWER: Viewer = Viewer { kind: ClientKind::Hub, answers: true };
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
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
pub(crate) const BODIES: &[(&str, crate::extract::BodyCheck)] = &[("WS /api/ws subscribe message", |b| {
    let text =
        std::str::from_utf8(b).map_err(|_| ApiError::bad_request("invalid_message", "messages are JSON text"))?;
    client_message(text).map(drop).map_err(|(code, message)| ApiError::bad_request(code, message))
})];

/// The WebSocket hub. After the upgrade the client sends
/// `{"type":"subscribe","channels":[…],"cursors":{…}}` and receives
/// `{type, channel_id, data, timestamp}` envelopes (the `HubEvent` schema).
#[utoipa::path(get, path = "/api/ws", params(WsQuery), responses(UpgradeResponses))]
async fn upgrade(
    State(state): State<AppState>,
    Caller { user, credential }: Caller,
    QueryParams(query): QueryParams<WsQuery>,
    upgrade: Upgrade,
) -> Result<Response, ApiError> {
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
    let mut hub = Hub::new(state.engine.clone(), state.session_forms.clone(), user, author, streaming);
    let mut out = Outbox::default();
    // No cursors in a query, so nothing of the hub's to replay.
    let _ = hub.subscribe(channels, HashMap::new(), &mut out).await;
    let kind = spool_engine::metrics::Dialect::Ws;
    Ok(socket::serve(&state, &credential, upgrade, permit, kind, (hub, out)))
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

/// Each frame's event of a session's hub form, encoded once for every socket that
/// follows the session (see `dialect/shared.rs`); the forms live in
/// [`AppState::session_forms`].
impl FormMapper for HubForm {
    type Out = Option<Utf8Bytes>;

    fn map(&mut self, frame: &Frame) -> Option<Utf8Bytes> {
        ws_hub::map_frame(frame, &mut self.0, &self.1, now_ms()).map(|e| e.to_json().into())
    }
}

/// A hub event goes on the wire as its JSON text.
impl From<Envelope> for Utf8Bytes {
    fn from(envelope: Envelope) -> Self {
        envelope.to_json().into()
    }
}

/// What the hub keeps per followed session.
struct Channel {
    /// The channel's place in the session's shared hub form (its run tally).
    follow: Follow<Streaming, HubForm>,
    on_snapshot: OnSnapshot,
}

/// The socket's followed sessions. A channel that ended (its session deleted) or fell
/// behind the shared outputs is marked `ended`: judged at `judge_at`, and not polled
/// until then.
type Channels = Subs<SessionId, TypedSubscription, Channel>;

/// What the hub's sources bring.
enum Event {
    Channel(Polled<SessionId, Vec<Arc<Frame>>>),
    Change(Result<Change, RecvError>),
    Published(Result<Vec<Bytes>, Lagged>),
    /// Ended channels are due to be judged.
    Judge,
}

struct Hub {
    engine: Engine,
    /// The server's encode-once forms, the hub's among them.
    forms: Arc<SessionForms>,
    user: UserId,
    /// Who the user messages of the channels are by (only their owner follows them).
    author: Author,
    /// How the socket's growing answers stream (`?streaming=`).
    streaming: Streaming,
    filter: Filter,
    channels: Channels,
    /// The session list's changes (created, deleted sessions).
    changes: broadcast::Receiver<Change>,
    /// When ended channels are judged: deleted (dropped) or behind (the socket closes).
    judge_at: Option<Instant>,
    /// Whether a project is this user's, for the global events (ownership never changes).
    projects: HashMap<ProjectId, bool>,
    /// The published channels and global events (see "Published channels").
    published: HubSubscriber,
}

impl Dialect for Hub {
    type Key = SessionId;
    type Feed = TypedSubscription;
    type State = Channel;
    type Event = Event;
    const NAME: &'static str = "hub";
    /// A cut closes the socket without a word: the client comes back with its cursors.
    const LAGGING: Closing = Closing::Gone;

    fn subs(&mut self) -> &mut Channels {
        &mut self.channels
    }

    async fn next(&mut self) -> Event {
        let judge_at = self.judge_at;
        tokio::select! {
            polled = self.channels.next(Self::LAGGING) => Event::Channel(polled),
            change = self.changes.recv() => Event::Change(change),
            events = self.published.next() => Event::Published(events),
            _ = tokio::time::sleep_until(judge_at.unwrap_or_else(Instant::now)), if judge_at.is_some() => Event::Judge,
        }
    }

    async fn on_event(&mut self, event: Event, out: &mut Outbox) -> Result<(), Closing> {
        match event {
            Event::Channel(Polled::Item(id, frames)) => self.on_frames(&id, &frames, out),
            Event::Channel(Polled::Deleted(_)) => {
                self.judge_at.get_or_insert(Instant::now() + JUDGE_AFTER);
            }
            Event::Channel(Polled::Close(why)) => return Err(why),
            Event::Change(Ok(change)) => self.on_change(change, out).await,
            // A socket a whole ring of changes behind is cut like a slow reader.
            Event::Change(Err(RecvError::Lagged(_) | RecvError::Closed)) => return Err(Closing::Gone),
            Event::Published(Ok(events)) => out.extend(events.into_iter().filter_map(|b| Utf8Bytes::try_from(b).ok())),
            // Behind the hub's live ring: cut like a slow reader.
            Event::Published(Err(Lagged)) => return Err(Closing::Gone),
            Event::Judge => {
                if !self.judge(out) {
                    return Err(Closing::Gone);
                }
            }
        }
        Ok(())
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
        out.extend(replay.into_iter().filter_map(|b| Utf8Bytes::try_from(b).ok()));
    }

    fn on_binary(&mut self, out: &mut Outbox) {
        out.push(ws_hub::error("invalid_message", "messages are JSON text", now_ms()));
    }

    /// A WebSocket ping: the hub's events have no heartbeat of their own.
    fn heartbeat(&self) -> Heartbeat {
        Heartbeat::Ping
    }
}

impl Hub {
    fn new(engine: Engine, forms: Arc<SessionForms>, user: UserId, author: Author, streaming: Streaming) -> Self {
        let published = engine.hub().subscriber(user.clone());
        // Subscribed now: once the client sees the upgrade, every change from then on
        // reaches it.
        let changes = engine.lists().watch_changes();
        Self {
            engine,
            forms,
            user,
            author,
            streaming,
            published,
            filter: Filter::Only,
            channels: Subs::default(),
            changes,
            judge_at: None,
            projects: HashMap::new(),
        }
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
                        self.channels.remove(&id);
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
        self.channels.retain(|c| wanted.contains(&c.key) && cursor_of(&c.key).is_none());
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
            self.engine.sessions().subscribe(&self.user, id, cursor, kill.clone(), HUB_VIEWER).await?;
        Ok((subscription.typed(), kill, start))
    }

    /// Starts following a session, unless it is followed already. `quiet` skips the
    /// error for a session that is not the user's (one seen in a global change).
    async fn follow(&mut self, id: SessionId, from: StartAt, quiet: bool, out: &mut Outbox) {
        if self.channels.contains(&id) {
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
        let follow = Follow::new(self.streaming, HubForm(RunTally::new(self.streaming), self.author.clone()));
        self.channels.add(id.clone(), subscription, Some(kill), Channel { follow, on_snapshot });
        if let Some(frames) = peeked {
            self.on_frames(&id, &frames, out);
        }
    }

    fn on_frames(&mut self, id: &SessionId, frames: &[Arc<Frame>], out: &mut Outbox) {
        let Some(sub) = self.channels.get_mut(id) else {
            return;
        };
        let channel = &mut sub.state;
        for frame in frames {
            if !matches!(frame.body, FrameBody::Snapshot { .. }) {
                match channel.follow.map(&self.forms.hub, frame) {
                    Ok(text) => out.extend(text.iter().cloned()),
                    Err(Behind) => {
                        // Fell behind the shared outputs: judged like a cut subscription.
                        sub.ended = true;
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
                let followed = self.channels.contains(&session);
                self.channels.remove(&session);
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
            if channel.feed.ended() != Some(Ended::SessionDeleted) {
                return false;
            }
            out.push(ws_hub::channel_deleted(&channel.key, now_ms()));
        }
        self.channels.retain(|c| !c.ended);
        true
    }
}
