//! The node's link: one task, one PUB/SUB connection, every session that has local
//! listeners on it (one `SUBSCRIBE` per session, however many listeners).
//!
//! The task owns all listener state, so there is no lock: joins, leaves, live messages,
//! gap fills and reconnects are handled one at a time, in arrival order. Each listener
//! carries its own position (epoch, last seq it was given), and a frame is queued to a
//! listener only if it is exactly the next one — so no hole and no duplicate can reach a
//! listener by construction. A listener that cannot take a message in order (another
//! epoch, or a seq gap) is caught up from the log first; listeners at the same position
//! share one read.
//!
//! Awaiting a Redis round trip inside the task (a subscribe, a gap fill) holds up the
//! other sessions' live frames for that long. Fills are rare (a lost message, a join, a
//! reconnect, the periodic check) and reconnect fills run concurrently, so the order
//! guarantee is worth it; frames are never lost meanwhile, only queued in the link.

use crate::keys::{self, Keys};
use crate::listener::{self, Command, Feed, Item, Listener};
use crate::scripts::{self, Message, Replay, Scripts};
use crate::{BusConfig, BusError};
use futures::StreamExt;
use redis::aio::{ConnectionManager, PubSubSink, PubSubStream};
use spool_protocol::{Cursor, SessionId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, WeakUnboundedSender};
use tokio::time::Instant;

/// The PUB/SUB connection, split: the sink (un)subscribes, the stream yields messages
/// and ends when the connection does.
pub(crate) struct Link {
    sink: PubSubSink,
    stream: PubSubStream,
}

impl Link {
    pub async fn open(client: &redis::Client) -> Result<Self, BusError> {
        let (sink, stream) = client.get_async_pubsub().await?.split();
        Ok(Self { sink, stream })
    }
}

/// Reconnect backoff bounds: quick after a blip, at most one attempt every few seconds
/// while Redis is away.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a liveness `PING` on the link may take before the link is taken for dead.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

struct Slot {
    /// The last item this listener was given.
    at: Cursor,
    feed: Feed,
}

pub(crate) struct Pump {
    client: redis::Client,
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
    config: BusConfig,
    commands: UnboundedReceiver<Command>,
    /// Handed to listeners so they can leave. Weak: the task ends once no bus handle and
    /// no listener is left.
    leave: WeakUnboundedSender<Command>,
    sessions: HashMap<SessionId, HashMap<u64, Slot>>,
    next_id: u64,
    link: Option<Link>,
    /// Whether `link` is up, for readiness (`RedisBus::check`): written only here.
    linked: Arc<AtomicBool>,
    retry_at: Instant,
    retry_delay: Duration,
}

impl Pump {
    pub fn new(
        client: redis::Client,
        conn: ConnectionManager,
        scripts: Arc<Scripts>,
        config: BusConfig,
        commands: UnboundedReceiver<Command>,
        leave: WeakUnboundedSender<Command>,
        link: Link,
    ) -> Self {
        Self {
            client,
            conn,
            scripts,
            config,
            commands,
            leave,
            sessions: HashMap::new(),
            next_id: 0,
            link: Some(link),
            linked: Arc::new(AtomicBool::new(true)),
            retry_at: Instant::now(),
            retry_delay: RETRY_MIN,
        }
    }

    /// Whether the link is up, as the task keeps it: for the bus handle's readiness.
    pub fn linked(&self) -> Arc<AtomicBool> {
        self.linked.clone()
    }

    pub async fn run(mut self) {
        let mut check =
            tokio::time::interval_at(Instant::now() + self.config.check_interval, self.config.check_interval);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                command = self.commands.recv() => match command {
                    Some(command) => self.command(command).await,
                    None => break,
                },
                message = next_message(&mut self.link) => match message {
                    Some(message) => self.message(message).await,
                    None => self.lose_link("the PUB/SUB connection closed"),
                },
                () = tokio::time::sleep_until(self.retry_at), if self.link.is_none() => self.reconnect().await,
                _ = check.tick() => self.check().await,
            }
        }
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Join { session, cursor, reply } => {
                let joined = self.join(session, cursor).await;
                // A caller that gave up drops the listener here, which queues its leave.
                let _ = reply.send(joined);
            }
            Command::Leave { session, id } => {
                if let Some(slots) = self.sessions.get_mut(&session) {
                    slots.remove(&id);
                }
                self.forget_if_empty(&session).await;
            }
        }
    }

    /// Subscribe first, then read the log: every frame published after the read arrives
    /// on the link, and the ones before it that arrive too are dropped by position.
    async fn join(&mut self, session: SessionId, cursor: Option<Cursor>) -> Result<Listener, BusError> {
        let leave = self.leave.upgrade().ok_or(BusError::Closed)?;
        if !self.sessions.contains_key(&session) {
            // Without a link the session is subscribed (and caught up) on reconnect.
            if let Some(link) = &mut self.link
                && let Err(error) = link.sink.subscribe(keys::channel(&session)).await
            {
                self.lose_link(&error.to_string());
            }
            self.sessions.insert(session.clone(), HashMap::new());
        }
        let keys = Keys::of(&session);
        let replay = match self.scripts.replay(&mut self.conn, &self.config, &keys, cursor.as_ref()).await {
            Ok(replay) => replay,
            Err(error) => {
                self.forget_if_empty(&session).await;
                return Err(error);
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let (feed, listener) = listener::pair(session.clone(), id, self.config.queue_bytes, leave);
        let at = replay.head();
        // The opening replay is bounded by the history budget, not the queue's.
        for item in items(cursor.as_ref(), replay) {
            feed.force(item);
        }
        self.sessions.get_mut(&session).expect("inserted above").insert(id, Slot { at, feed });
        Ok(listener)
    }

    async fn message(&mut self, message: redis::Msg) {
        let Some(session) = keys::session_of(message.get_channel_name()) else { return };
        let Some(slots) = self.sessions.get(&session) else { return };
        let Some(mut message) = scripts::decode(message.get_payload_bytes()) else {
            // Placed nowhere, it is as good as lost: the next message or check fills it.
            tracing::warn!(%session, "undecodable bus message");
            return;
        };
        // A frame no node wrote is dropped before it can move anyone's position; if it
        // stood for a real seq, the gap is filled from the log (which verifies too).
        let Some(frame) = self.scripts.key().open(&keys::log(&session), &message.bytes) else { return };
        message.bytes = frame;
        let behind = slots.values().any(|slot| slot.at.stream_id != message.epoch || message.seq > slot.at.seq + 1);
        if behind {
            self.catch_up(std::slice::from_ref(&session)).await;
        }
        self.deliver(&session, message).await;
    }

    /// Queues a live frame to every listener for which it is the next one. Listeners
    /// already past it (caught up from the log) skip it.
    async fn deliver(&mut self, session: &SessionId, message: Message) {
        let Some(slots) = self.sessions.get_mut(session) else { return };
        let Message { epoch, seq, bytes } = message;
        slots.retain(|_, slot| {
            if slot.at.stream_id != epoch || slot.at.seq + 1 != seq {
                return true;
            }
            slot.at.seq = seq;
            slot.feed.offer(Item::Frame { epoch: epoch.clone(), seq, bytes: bytes.clone() })
        });
        self.forget_if_empty(session).await;
    }

    /// Brings every listener of `sessions` to the log's head: the frames it missed, or a
    /// reset when they are gone. A listener the bus cannot answer for (Redis failed the
    /// read) is ended; it comes back with its cursor.
    async fn catch_up(&mut self, sessions: &[SessionId]) {
        // Listeners of a session are nearly always at one or two positions: a linear
        // search per session is cheaper than hashing.
        let mut wanted: Vec<(SessionId, Cursor)> = Vec::new();
        for session in sessions {
            let first = wanted.len();
            for slot in self.sessions.get(session).into_iter().flat_map(|slots| slots.values()) {
                if !wanted[first..].iter().any(|(_, at)| *at == slot.at) {
                    wanted.push((session.clone(), slot.at.clone()));
                }
            }
        }
        let reads = wanted.iter().map(|(session, at)| {
            let (mut conn, scripts, config) = (self.conn.clone(), self.scripts.clone(), &self.config);
            async move { scripts.replay(&mut conn, config, &Keys::of(session), Some(at)).await }
        });
        let replies = futures::future::join_all(reads).await;
        for ((session, at), reply) in wanted.into_iter().zip(replies) {
            let Some(slots) = self.sessions.get_mut(&session) else { continue };
            if let Err(error) = &reply {
                tracing::warn!(%session, %error, "cannot fill a listener's gap; ending it");
            }
            slots.retain(|_, slot| {
                if slot.at != at {
                    return true;
                }
                let Ok(replay) = &reply else { return false };
                slot.at = replay.head();
                items(Some(&at), replay.clone()).into_iter().all(|item| match item {
                    Item::Reset { .. } => slot.feed.force(item),
                    Item::Frame { .. } => slot.feed.offer(item),
                })
            });
        }
        for session in sessions {
            self.forget_if_empty(session).await;
        }
    }

    /// Drops a session without listeners and its subscription.
    async fn forget_if_empty(&mut self, session: &SessionId) {
        if !self.sessions.get(session).is_some_and(HashMap::is_empty) {
            return;
        }
        self.sessions.remove(session);
        if let Some(link) = &mut self.link
            && let Err(error) = link.sink.unsubscribe(keys::channel(session)).await
        {
            // Reconnecting subscribes only the sessions still here.
            self.lose_link(&error.to_string());
        }
    }

    fn lose_link(&mut self, why: &str) {
        if self.link.take().is_some() {
            self.linked.store(false, Ordering::Relaxed);
            tracing::warn!(why, "bus link lost; reconnecting");
            self.retry_at = Instant::now();
        }
    }

    async fn reconnect(&mut self) {
        let channels: Vec<String> = self.sessions.keys().map(keys::channel).collect();
        let linked = async {
            let mut link = Link::open(&self.client).await?;
            if !channels.is_empty() {
                link.sink.subscribe(&channels).await?;
            }
            Ok::<_, BusError>(link)
        };
        match linked.await {
            Ok(link) => {
                tracing::info!(sessions = channels.len(), "bus link back");
                self.link = Some(link);
                self.linked.store(true, Ordering::Relaxed);
                self.retry_delay = RETRY_MIN;
                let sessions: Vec<SessionId> = self.sessions.keys().cloned().collect();
                self.catch_up(&sessions).await;
            }
            Err(error) => {
                tracing::warn!(%error, retry_in = ?self.retry_delay, "bus link still down");
                self.retry_at = Instant::now() + self.retry_delay;
                self.retry_delay = (self.retry_delay * 2).min(RETRY_MAX);
            }
        }
    }

    /// The periodic check: a link that does not answer a ping is replaced, and every
    /// listener is compared with its log, which finds a lost last message (no later one
    /// would reveal the gap) and a log lost while the session was quiet.
    async fn check(&mut self) {
        if let Some(link) = &mut self.link {
            let ping = tokio::time::timeout(PING_TIMEOUT, link.sink.ping::<redis::Value>()).await;
            if !matches!(ping, Ok(Ok(_))) {
                self.lose_link("the PUB/SUB connection did not answer a ping");
                return;
            }
        }
        let sessions: Vec<SessionId> = self.sessions.keys().cloned().collect();
        self.catch_up(&sessions).await;
    }
}

async fn next_message(link: &mut Option<Link>) -> Option<redis::Msg> {
    match link {
        Some(link) => link.stream.next().await,
        None => std::future::pending().await,
    }
}

/// What a listener at `from` is given for a replay answer.
fn items(from: Option<&Cursor>, replay: Replay) -> Vec<Item> {
    match replay {
        Replay::Frames { epoch, frames, .. } => {
            let after = from.map_or(0, |c| c.seq);
            (after + 1..).zip(frames).map(|(seq, bytes)| Item::Frame { epoch: epoch.clone(), seq, bytes }).collect()
        }
        Replay::Snapshot { epoch, seq } => vec![Item::Reset { epoch, seq }],
    }
}
