//! The hub of published events: what components outside Spool's own runs (an
//! orchestrator, a bot, a CI job) publish for the WebSocket hub of seed 002 — tickets,
//! workflows, containers, quality scans, reviews, or agent events of channels that are
//! not Spool sessions. Spool's own sessions keep their `SessionEvents`; this is the same
//! contract for the platform's channels:
//!
//! * **A cursor per channel.** Each channel (global events share the channel `""`) has
//!   a stream id and a dense seq; every event carries `streamId:seq`.
//! * **Replay.** A subscriber that comes back with a cursor gets exactly the events
//!   after it while the channel's ring (256 events / 4 MiB, as a session's buffer)
//!   still holds them — or, in bus mode, while the bus's log does — and otherwise one
//!   `channel.snapshot` at the channel's head (with `state: null`: Spool does not know a
//!   published channel's state, so the client refetches it from its source), then live.
//! * **Audience.** Every publish call names who may see its events: `"public"`, or
//!   the names of users that exist (an unknown name refuses the call and creates
//!   nothing: a publisher must not fill the users table). A subscriber gets an event
//!   only if it is in that audience, whatever its filter: an empty ("all") filter
//!   means every channel *granted to it*.
//! * **Fan-out without a task per subscriber.** One `tokio::sync::broadcast` ring for
//!   the whole hub; a socket holds one receiver (a cursor into it) and skips what its
//!   filter or the audience excludes. Each event is encoded once, at publish (or, in bus
//!   mode, once per node when it arrives), and every socket shares the bytes. A
//!   receiver that lags the ring by [`LIVE_RING`] events is cut like any slow client
//!   and comes back with its cursors.
//! * **Nodes.** With a [`HubBus`] the bus numbers events (so cursors are the same on
//!   every node) and every node hears every event once, folds it into its rings in seq
//!   order (a skipped seq is filled from the bus's log; a log that cannot fill it resets
//!   the channel, and its followers get a snapshot), and fans it out. A cursor the local
//!   ring cannot answer is asked of the bus's log.
//!
//! Taking a replay and registering for live events happen in the right order without a
//! lock held across an await: a subscriber's receiver exists before any replay is
//! read, and each subscriber remembers the last seq it delivered per channel, so an
//! event both replayed and received live is sent once.
//!
//! Memory is bounded: at most [`MAX_CHANNELS`] rings and [`MAX_HUB_BYTES`] of encoded
//! events on a node; past either, the channel published to least recently is dropped
//! whole (its cursors then get a snapshot).

mod broadcaster;
mod bus;

pub use broadcaster::Broadcaster;
pub use bus::{HubBus, HubBusItem, HubReplay};

use crate::error::EngineError;
use crate::store::Users;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_protocol::hub::{GLOBAL_CHANNEL, HubEvent, HubEventType, HubPayload, MAX_AUDIENCE, PublishedEnvelope};
use spool_protocol::time::{Millis, now_ms};
use spool_protocol::{Cursor, StreamId, UserId};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// Events one channel's ring keeps (a session's replay buffer's 256).
pub const RING_EVENTS: usize = 256;
/// Encoded bytes one channel's ring keeps (a session's replay buffer's 4 MiB).
pub const RING_BYTES: usize = 4 << 20;
/// Channels a node keeps rings for.
pub const MAX_CHANNELS: usize = 4096;
/// Encoded bytes a node keeps over all rings.
pub const MAX_HUB_BYTES: usize = 64 << 20;
/// Events a subscriber may fall behind the live ring before it is cut.
pub const LIVE_RING: usize = 4096;
/// The wire type of the event that stands in for a replay the hub cannot give.
pub const CHANNEL_SNAPSHOT: &str = "channel.snapshot";

/// Who may see an event, as a publisher names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Every user of the server.
    Public,
    /// These users, by name (as `spool token create --user NAME` names them).
    Users(Vec<String>),
}

/// Who may see an event, resolved to user ids (what travels on the bus).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Audience {
    Public,
    Users(Vec<UserId>),
}

impl Grant {
    /// Checks the names (see [`check_user_name`]) and their number.
    pub fn check(&self) -> Result<(), EngineError> {
        let Grant::Users(names) = self else { return Ok(()) };
        if names.len() > MAX_AUDIENCE {
            return Err(EngineError::invalid("invalid_audience", format!("audience: at most {MAX_AUDIENCE} users")));
        }
        names.iter().try_for_each(|n| check_user_name(n))
    }
}

impl Audience {
    pub fn admits(&self, user: &UserId) -> bool {
        match self {
            Audience::Public => true,
            Audience::Users(users) => users.contains(user),
        }
    }
}

/// One published event on this node: where it belongs, who may see it, and its
/// envelope's bytes, shared by every subscriber.
#[derive(Debug)]
pub struct Published {
    pub channel: String,
    pub cursor: Cursor,
    pub audience: Audience,
    pub kind: HubEventType,
    pub json: Bytes,
}

/// What the live ring carries.
#[derive(Clone, Debug)]
enum Live {
    Event(Arc<Published>),
    /// A channel's ring restarted at `cursor` (the bus lost what came before): its
    /// followers get a snapshot there.
    Reset {
        channel: String,
        cursor: Cursor,
    },
}

/// What a publishing node writes on the bus for one event.
#[derive(Serialize, Deserialize)]
struct OnBus {
    kind: HubEventType,
    data: Value,
    timestamp: Millis,
    audience: Audience,
}

#[derive(Clone)]
pub struct Hub {
    shared: Arc<Shared>,
}

struct Shared {
    /// A std mutex: no `.await` while it is held.
    state: Mutex<State>,
    live: broadcast::Sender<Live>,
    bus: Option<Arc<dyn HubBus>>,
    store: Arc<dyn Users>,
    /// User ids by name: a name's id never changes.
    users: Mutex<HashMap<String, UserId>>,
    /// True while the node's bus listener is subscribed: a socket's subscription waits
    /// for it (up to [`READY_WAIT`]), so an event published once a socket is set up
    /// reaches it even on a node that has just started.
    ready: tokio::sync::watch::Sender<bool>,
}

/// How long a subscription waits for the node's bus listener.
const READY_WAIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct State {
    channels: HashMap<String, Ring>,
    bytes: usize,
    /// Counts publishes, to find the channel published to least recently.
    tick: u64,
}

struct Ring {
    stream_id: StreamId,
    /// The last event's seq (0 before any).
    seq: u64,
    events: VecDeque<Arc<Published>>,
    bytes: usize,
    touched: u64,
}

impl Ring {
    fn new(stream_id: StreamId, seq: u64) -> Self {
        Self { stream_id, seq, events: VecDeque::new(), bytes: 0, touched: 0 }
    }

    fn head(&self) -> Cursor {
        Cursor { stream_id: self.stream_id.clone(), seq: self.seq }
    }

    /// The events after `cursor`, if this ring holds every one of them.
    fn after(&self, cursor: &Cursor) -> Option<Vec<Arc<Published>>> {
        if cursor.stream_id != self.stream_id || cursor.seq > self.seq {
            return None;
        }
        let first = self.events.front().map_or(self.seq + 1, |e| e.cursor.seq);
        if cursor.seq + 1 < first {
            return None;
        }
        Some(self.events.iter().filter(|e| e.cursor.seq > cursor.seq).cloned().collect())
    }
}

impl State {
    /// Appends the next event of its channel and trims the ring and the node's totals.
    fn push(&mut self, event: Arc<Published>) {
        self.tick += 1;
        let tick = self.tick;
        let ring = self.channels.get_mut(&event.channel).expect("the caller made the ring");
        ring.seq = event.cursor.seq;
        ring.touched = tick;
        ring.bytes += event.json.len();
        self.bytes += event.json.len();
        ring.events.push_back(event);
        let mut freed = 0;
        while ring.events.len() > 1 && (ring.events.len() > RING_EVENTS || ring.bytes > RING_BYTES) {
            let old = ring.events.pop_front().expect("the ring is not empty");
            ring.bytes -= old.json.len();
            freed += old.json.len();
        }
        self.bytes -= freed;
        self.trim();
    }

    /// Drops the channels published to least recently while over the node's bounds.
    fn trim(&mut self) {
        while self.channels.len() > MAX_CHANNELS || self.bytes > MAX_HUB_BYTES {
            let Some(oldest) = self.channels.iter().min_by_key(|(_, r)| r.touched).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some(ring) = self.channels.remove(&oldest) {
                self.bytes -= ring.bytes;
            }
        }
    }
}

fn encode(kind: HubEventType, channel: &str, payload: &HubPayload, timestamp: Millis, cursor: &Cursor) -> Bytes {
    let envelope =
        PublishedEnvelope { kind, channel_id: channel, data: payload, timestamp, cursor: cursor.to_string() };
    Bytes::from(serde_json::to_vec(&envelope).expect("hub payloads are plain data and always serialize"))
}

/// `channel.snapshot` for a published channel at `cursor`.
fn snapshot(channel: &str, cursor: &Cursor) -> Bytes {
    let envelope = serde_json::json!({
        "type": CHANNEL_SNAPSHOT,
        "channel_id": channel,
        "data": {"state": null},
        "timestamp": now_ms(),
        "cursor": cursor.to_string(),
    });
    Bytes::from(envelope.to_string())
}

fn bus_unavailable(error: crate::BusFailure) -> EngineError {
    tracing::warn!(%error, "cannot reach the hub's event bus");
    EngineError::Unavailable {
        code: "bus_unavailable",
        message: "the event bus (Redis) cannot be reached; try again shortly".into(),
    }
}

/// Checks a user name in an audience: the characters `spool token create --user`
/// accepts, so no publisher (`publisher:NAME`) can ever be granted anything.
fn check_user_name(name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
        return Err(EngineError::invalid(
            "invalid_audience",
            format!("audience: `{}` is not a user name", name.chars().take(64).collect::<String>()),
        ));
    }
    Ok(())
}

impl Hub {
    /// A hub over `store` (for user names); with `bus`, one that shares its channels
    /// with every node on that bus (a listener task starts here).
    pub fn new(store: Arc<dyn Users>, bus: Option<Arc<dyn HubBus>>) -> Self {
        let (live, _) = broadcast::channel(LIVE_RING);
        let hub = Hub {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                live,
                bus,
                store,
                users: Mutex::default(),
                ready: tokio::sync::watch::Sender::new(false),
            }),
        };
        if hub.shared.bus.is_some() {
            tokio::spawn(listen(Arc::downgrade(&hub.shared)));
        }
        hub
    }

    /// The hub bound to an audience: a [`Broadcaster`].
    pub fn to(&self, grant: Grant) -> Publisher {
        Publisher { hub: self.clone(), grant }
    }

    /// A subscriber for one socket of `user`: it receives every event published from
    /// now on that its filter and the audience let through.
    pub fn subscriber(&self, user: UserId) -> HubSubscriber {
        HubSubscriber {
            hub: self.clone(),
            user,
            filter: Some(HashSet::new()),
            positions: HashMap::new(),
            live: self.shared.live.subscribe(),
        }
    }

    async fn resolve(&self, grant: &Grant) -> Result<Audience, EngineError> {
        grant.check()?;
        let names = match grant {
            Grant::Public => return Ok(Audience::Public),
            Grant::Users(names) => names,
        };
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let known = self.shared.users.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned();
            let id = match known {
                Some(id) => id,
                None => {
                    // Only users that exist: a publisher naming whatever it likes must not
                    // fill the users table (each name made a record before). A name not
                    // found is not remembered, so a user created later can be named then.
                    let Some(id) = self.shared.store.user_id(name).await? else {
                        return Err(EngineError::invalid(
                            "unknown_audience",
                            format!(
                                "audience: there is no user named `{}` (an audience names existing users: \
                                 `spool token create --user NAME` creates one); nothing was published",
                                name.chars().take(64).collect::<String>()
                            ),
                        ));
                    };
                    self.shared.users.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), id.clone());
                    id
                }
            };
            ids.push(id);
        }
        Ok(Audience::Users(ids))
    }

    async fn publish(&self, grant: &Grant, events: Vec<HubEvent>) -> Result<Vec<Cursor>, EngineError> {
        let audience = self.resolve(grant).await?;
        let timestamp = now_ms();
        match &self.shared.bus {
            None => Ok(self.publish_here(&audience, events, timestamp)),
            Some(bus) => {
                // One call per channel, in the batch's order within each channel.
                let mut order: Vec<String> = Vec::new();
                let mut by_channel: HashMap<String, Vec<(usize, Bytes)>> = HashMap::new();
                for (i, event) in events.iter().enumerate() {
                    let data = serde_json::to_value(&event.payload).expect("hub payloads always serialize");
                    let on_bus = OnBus { kind: event.payload.kind(), data, timestamp, audience: audience.clone() };
                    let bytes = Bytes::from(serde_json::to_vec(&on_bus).expect("bus payloads always serialize"));
                    if !by_channel.contains_key(&event.channel_id) {
                        order.push(event.channel_id.clone());
                    }
                    by_channel.entry(event.channel_id.clone()).or_default().push((i, bytes));
                }
                let mut cursors: Vec<Option<Cursor>> = vec![None; events.len()];
                for channel in order {
                    let items = by_channel.remove(&channel).unwrap_or_default();
                    let payloads: Vec<Bytes> = items.iter().map(|(_, b)| b.clone()).collect();
                    let given = bus.publish(&channel, &payloads).await.map_err(bus_unavailable)?;
                    for ((i, _), cursor) in items.iter().zip(given) {
                        cursors[*i] = Some(cursor);
                    }
                }
                cursors
                    .into_iter()
                    .map(|c| {
                        c.ok_or_else(|| {
                            bus_unavailable("the bus answered fewer cursors than events were published".into())
                        })
                    })
                    .collect()
            }
        }
    }

    /// Numbers, stores and fans out events on this node alone.
    fn publish_here(&self, audience: &Audience, events: Vec<HubEvent>, timestamp: Millis) -> Vec<Cursor> {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut cursors = Vec::with_capacity(events.len());
        for event in events {
            let ring = state.channels.entry(event.channel_id.clone()).or_insert_with(|| Ring::new(StreamId::new(), 0));
            let cursor = Cursor { stream_id: ring.stream_id.clone(), seq: ring.seq + 1 };
            let kind = event.payload.kind();
            let json = encode(kind, &event.channel_id, &event.payload, timestamp, &cursor);
            let published = Arc::new(Published {
                channel: event.channel_id,
                cursor: cursor.clone(),
                audience: audience.clone(),
                kind,
                json,
            });
            state.push(published.clone());
            // Under the lock, so live order is ring order. No receivers is fine.
            let _ = self.shared.live.send(Live::Event(published));
            cursors.push(cursor);
        }
        cursors
    }

    /// Folds one event heard on the bus into this node's ring of its channel, filling a
    /// skipped seq from the bus's log first.
    async fn receive(&self, item: HubBusItem) {
        let HubBusItem { channel, cursor, payload } = item;
        let behind = {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            match state.channels.get(&channel) {
                // A channel this node has not held yet starts at this event.
                None => {
                    state
                        .channels
                        .insert(channel.clone(), Ring::new(cursor.stream_id.clone(), cursor.seq.saturating_sub(1)));
                    None
                }
                Some(ring) if ring.stream_id == cursor.stream_id && cursor.seq <= ring.seq => return,
                Some(ring) if ring.stream_id == cursor.stream_id && cursor.seq == ring.seq + 1 => None,
                Some(ring) => Some(ring.head()),
            }
        };
        if let (Some(head), Some(bus)) = (behind, &self.shared.bus) {
            let filled = match bus.replay(&channel, &head).await {
                Ok(HubReplay { head: now, payloads: Some(payloads) }) if now.stream_id == head.stream_id => {
                    Some(payloads)
                }
                Ok(_) => None,
                Err(error) => {
                    tracing::warn!(%error, channel, "cannot fill a gap in a hub channel from the bus");
                    None
                }
            };
            match filled {
                Some(payloads) => {
                    for (k, bytes) in payloads.into_iter().enumerate() {
                        let at = Cursor { stream_id: head.stream_id.clone(), seq: head.seq + 1 + k as u64 };
                        self.fold(&channel, at, &bytes);
                    }
                }
                None => self
                    .reset(&channel, Cursor { stream_id: cursor.stream_id.clone(), seq: cursor.seq.saturating_sub(1) }),
            }
        }
        self.fold(&channel, cursor, &payload);
    }

    /// Appends an event that follows its ring's head; anything else is a duplicate.
    fn fold(&self, channel: &str, cursor: Cursor, payload: &[u8]) {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let ring = state
            .channels
            .entry(channel.to_owned())
            .or_insert_with(|| Ring::new(cursor.stream_id.clone(), cursor.seq.saturating_sub(1)));
        if ring.stream_id != cursor.stream_id || cursor.seq != ring.seq + 1 {
            return;
        }
        let Some(published) = decode(channel, &cursor, payload) else {
            // Written by a node this one cannot read (another version): skipped, but
            // counted, so the seqs that follow still line up.
            ring.seq = cursor.seq;
            return;
        };
        let published = Arc::new(published);
        state.push(published.clone());
        let _ = self.shared.live.send(Live::Event(published));
    }

    /// Restarts a channel's ring at `cursor`: what came before is lost to this node.
    fn reset(&self, channel: &str, cursor: Cursor) {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = state.channels.insert(channel.to_owned(), Ring::new(cursor.stream_id.clone(), cursor.seq)) {
            state.bytes -= old.bytes;
        }
        let _ = self.shared.live.send(Live::Reset { channel: channel.to_owned(), cursor });
    }

    /// What a subscriber with `cursor` on `channel` gets: the events after it (all of
    /// them, before the audience check), or `Err(head)` for a snapshot there.
    async fn replay(&self, channel: &str, cursor: &Cursor) -> Result<Vec<Arc<Published>>, Cursor> {
        let local = {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            match state.channels.get(channel) {
                Some(ring) => ring.after(cursor).ok_or_else(|| ring.head()),
                None if self.shared.bus.is_none() => {
                    // Nothing published here since the start (or dropped): a stream from
                    // now, so the snapshot's cursor is one later events continue.
                    let ring = Ring::new(StreamId::new(), 0);
                    let head = ring.head();
                    state.channels.insert(channel.to_owned(), ring);
                    // Subscribers name channels too: they count against the bound.
                    state.trim();
                    Err(head)
                }
                None => Err(cursor.clone()),
            }
        };
        let (Err(head), Some(bus)) = (&local, &self.shared.bus) else { return local };
        // The bus's log may hold what this node's ring does not (it joined later).
        match bus.replay(channel, cursor).await {
            Ok(HubReplay { payloads: Some(payloads), .. }) => Ok(payloads
                .iter()
                .enumerate()
                .filter_map(|(k, bytes)| {
                    let at = Cursor { stream_id: cursor.stream_id.clone(), seq: cursor.seq + 1 + k as u64 };
                    decode(channel, &at, bytes).map(Arc::new)
                })
                .collect()),
            Ok(HubReplay { head, payloads: None }) => Err(head),
            Err(error) => {
                tracing::warn!(%error, channel, "cannot read a hub channel's log from the bus");
                Err(head.clone())
            }
        }
    }
}

fn decode(channel: &str, cursor: &Cursor, payload: &[u8]) -> Option<Published> {
    let on_bus: OnBus = match serde_json::from_slice(payload) {
        Ok(e) => e,
        Err(error) => {
            tracing::warn!(%error, channel, "skipped a hub event this node cannot read");
            return None;
        }
    };
    let payload = on_bus.kind.parse(on_bus.data).ok()?;
    let json = encode(on_bus.kind, channel, &payload, on_bus.timestamp, cursor);
    Some(Published {
        channel: channel.to_owned(),
        cursor: cursor.clone(),
        audience: on_bus.audience,
        kind: on_bus.kind,
        json,
    })
}

/// The node's one listener on the bus: every event of every channel, in each
/// channel's seq order. Relistens with backoff when the link drops; holds the hub only
/// weakly, so it ends with the engine.
async fn listen(shared: std::sync::Weak<Shared>) {
    const RETRY_MIN: Duration = Duration::from_millis(100);
    const RETRY_MAX: Duration = Duration::from_secs(5);
    let mut delay = RETRY_MIN;
    loop {
        let Some(bus) = shared.upgrade().and_then(|s| s.bus.clone()) else { return };
        let stream = bus.listen().await;
        drop(bus);
        match stream {
            Ok(mut items) => {
                delay = RETRY_MIN;
                if let Some(shared) = shared.upgrade() {
                    shared.ready.send_replace(true);
                }
                while let Some(item) = items.next().await {
                    let Some(shared) = shared.upgrade() else { return };
                    Hub { shared }.receive(item).await;
                }
                if let Some(shared) = shared.upgrade() {
                    shared.ready.send_replace(false);
                }
                tracing::warn!("the hub's bus link dropped; listening again");
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?delay, "cannot listen to the hub's bus");
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

/// The hub bound to an audience: every event it publishes is granted to it.
#[derive(Clone)]
pub struct Publisher {
    hub: Hub,
    grant: Grant,
}

impl Broadcaster for Publisher {
    fn publish(&self, events: Vec<HubEvent>) -> BoxFuture<'_, Result<Vec<Cursor>, EngineError>> {
        Box::pin(self.hub.publish(&self.grant, events))
    }
}

/// A subscriber fell so far behind the live ring that events it should have had are
/// gone: close it; it comes back with its cursors.
#[derive(Debug, thiserror::Error)]
#[error("the subscriber fell behind the hub's live events")]
pub struct Lagged;

/// One socket's view of the hub: its filter of published channels, the last cursor it
/// delivered per channel, and its place in the live ring.
pub struct HubSubscriber {
    hub: Hub,
    user: UserId,
    /// The published channels followed; `None`: every channel granted to the user.
    /// Global events pass any filter.
    filter: Option<HashSet<String>>,
    positions: HashMap<String, Cursor>,
    live: broadcast::Receiver<Live>,
}

/// Most events one [`HubSubscriber::next`] returns at once.
const BATCH: usize = 64;

impl HubSubscriber {
    /// Replaces the filter (`None`: all channels granted) and resumes the channels named
    /// in `cursors`; returns what the socket sends for them, in order (replayed events,
    /// or a `channel.snapshot`), to go after its acknowledgement.
    pub async fn set_filter(&mut self, filter: Option<Vec<String>>, cursors: Vec<(String, Cursor)>) -> Vec<Bytes> {
        self.filter = filter.map(|f| f.into_iter().collect());
        if self.hub.shared.bus.is_some() {
            let mut ready = self.hub.shared.ready.subscribe();
            if tokio::time::timeout(READY_WAIT, ready.wait_for(|r| *r)).await.is_err() {
                tracing::warn!("the hub's bus listener is not subscribed yet; events may be missed until it is");
            }
        }
        let mut out = Vec::new();
        for (channel, cursor) in cursors {
            match self.hub.replay(&channel, &cursor).await {
                Ok(events) => {
                    let mut at = cursor.clone();
                    for event in events {
                        at = event.cursor.clone();
                        if event.audience.admits(&self.user) {
                            out.push(event.json.clone());
                        }
                    }
                    self.positions.insert(channel, at);
                }
                Err(head) => {
                    out.push(snapshot(&channel, &head));
                    self.positions.insert(channel, head);
                }
            }
        }
        out
    }

    /// Whether the socket wants `channel`'s events.
    fn wants(&self, channel: &str) -> bool {
        channel == GLOBAL_CHANNEL || self.filter.as_ref().is_none_or(|f| f.contains(channel))
    }

    fn deliver(&mut self, item: Live) -> Option<Bytes> {
        match item {
            Live::Event(event) => {
                if !self.wants(&event.channel) || !event.audience.admits(&self.user) {
                    return None;
                }
                if let Some(at) = self.positions.get(&event.channel)
                    && at.stream_id == event.cursor.stream_id
                    && event.cursor.seq <= at.seq
                {
                    return None;
                }
                self.positions.insert(event.channel.clone(), event.cursor.clone());
                Some(event.json.clone())
            }
            Live::Reset { channel, cursor } => {
                // Only a channel this socket has delivered from lost something it knew.
                if !self.wants(&channel) || !self.positions.contains_key(&channel) {
                    return None;
                }
                let bytes = snapshot(&channel, &cursor);
                self.positions.insert(channel, cursor);
                Some(bytes)
            }
        }
    }

    /// The next events for this socket (waits for at least one).
    pub async fn next(&mut self) -> Result<Vec<Bytes>, Lagged> {
        loop {
            let item = match self.live.recv().await {
                Ok(item) => item,
                Err(broadcast::error::RecvError::Lagged(_)) => return Err(Lagged),
                Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
            };
            let mut out: Vec<Bytes> = self.deliver(item).into_iter().collect();
            while out.len() < BATCH {
                match self.live.try_recv() {
                    Ok(item) => out.extend(self.deliver(item)),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => return Err(Lagged),
                    Err(_) => break,
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}
