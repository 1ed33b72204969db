//! The Redis Streams event bus: how several Spool nodes share one session's frames, so
//! that any node can serve any client. It is the engine's `FrameBus` (`frames.rs`);
//! with one node and no Redis, `SessionEvents` keeps the single-process path.
//!
//! # Keys
//!
//! Per session, with the session id as a hash tag so all of them sit on one Redis
//! Cluster slot (and one script may touch them):
//!
//! * `spool:{ses_…}:meta` — hash: `epoch` (a `StreamId`), `seq` (the last published
//!   frame's), `bytes` (frame bytes held in the log).
//! * `spool:{ses_…}:log` — stream: entry `<seq>-0` per frame, field `f` = the frame.
//! * `spool:{ses_…}:live` — PUB/SUB channel: `<epoch>:<seq>\n<frame>`. The header is the
//!   frame's cursor.
//!
//! # Publishing: one script
//!
//! [`RedisBus::publish`] runs one Lua script (atomic in Redis): start an epoch if the
//! session has none, `HINCRBY seq`, `XADD` with the seq as the explicit entry id, trim the
//! oldest entries while the log holds more than [`BusConfig::history_frames`] (256) or
//! more than [`BusConfig::history_bytes`] (4 MiB), reset the keys' TTL, and `PUBLISH`.
//! The answer is the frame's cursor (epoch, seq). Two nodes publishing to one session get
//! a dense seq with no coordination beyond Redis running scripts one at a time. The
//! limits are the in-process replay buffer's, so a cursor goes exactly as far back on
//! either path; bytes are bounded as well as entries because one tool output can weigh
//! megabytes, and a session's history must not.
//!
//! # Epochs
//!
//! The epoch plays the part of `streamId` in cursors (`epoch:seq`). It is created the
//! first time a session publishes or is read, and again whenever Redis no longer has the
//! session's `meta` hash: a restart without persistence, eviction, `FLUSHALL`, or the TTL
//! running out. A new epoch restarts seq at 1 and deletes any leftover log, so a cursor
//! of the old epoch can never be continued with frames of the new one: it gets a
//! snapshot. A log lost on its own (evicted alone) leaves the epoch; replays over the
//! lost stretch find the entries missing and answer with a snapshot too.
//!
//! The TTL ([`BusConfig::ttl`], one hour, renewed by every publish) makes abandoned
//! sessions expire. An hour covers a client that reconnects after a dropped network or a
//! closed laptop lid over lunch; past that it gets a snapshot, which every client must
//! handle anyway, and Redis holds history only for sessions active in the last hour.
//!
//! # Replay
//!
//! [`RedisBus::replay`] answers a cursor with exactly the frames after it (read in one
//! script with the epoch and seq, so the answer is one consistent point), or with
//! "snapshot needed at (epoch, seq)" when the epoch differs, the log no longer holds every
//! frame after the cursor, or the cursor is ahead of the log. Never a hole, never a
//! duplicate: frames are returned only when their count is exactly `seq - cursor.seq`.
//!
//! # Listening: one link per node
//!
//! Each [`RedisBus`] holds one PUB/SUB connection (its link), owned by one task. A
//! session is subscribed once, when its first local listener joins, and unsubscribed
//! when its last one leaves. A [`Listener`] yields [`Item`]s with this contract:
//!
//! * Items come in order: after `Frame`/`Reset` at (epoch, n), the next `Frame` is
//!   (epoch, n + 1). A `Reset { epoch, seq }` means: take a snapshot at `seq`; frames of
//!   `epoch` after it follow.
//! * A listener opened with a cursor first gets the frames after it (or a `Reset`), then
//!   live frames, with no hole and no duplicate across the subscribe race: the link
//!   subscribes first, then reads the log, and drops what arrives live but was already
//!   read (every listener carries its own position; a frame is queued only if it is the
//!   next one). Without a cursor the first item is a `Reset` at the current head.
//! * A gap (a lost message, or messages published around a subscribe) is filled from the
//!   log before later frames are delivered; if the frames are trimmed or the epoch
//!   changed, the listener gets a `Reset`. A periodic check ([`BusConfig::check_interval`])
//!   finds a gap that no later message would reveal (the session went quiet).
//! * A listener whose queue holds more than [`BusConfig::queue_bytes`] is cut: its stream
//!   ends at once and [`Listener::was_cut`] says why. The link never waits for a
//!   listener, so a stuck one does not slow the others. The opening replay does not count
//!   against the budget (it is bounded by the history budget).
//!
//! # Failure modes
//!
//! * The link drops (Redis restart, network, Redis cutting a PUB/SUB client whose output
//!   buffer overflowed): the link task reconnects with backoff (100 ms up to 5 s),
//!   subscribes every session with listeners and catches each listener up from the log,
//!   or resets it. Listeners stay open meanwhile. A link that stops answering pings is
//!   treated the same way.
//! * Redis loses data: the next publish or read starts a new epoch; listeners and cursors
//!   of the old one get a `Reset`, never frames that do not follow what they had.
//! * Redis cannot answer a gap fill: the listeners concerned are ended (their stream
//!   ends after what they were already given), to come back with their cursors.
//! * Publishing while Redis is down (or slower than 2 s) fails with [`BusError::Redis`];
//!   nothing is retried behind the caller's back, since a publish whose reply was lost
//!   may have been appended, and a retry would append the frame twice.
//! * Redis Cluster: the keys share a slot, but `PUBLISH` goes to every node of the
//!   cluster; sharded PUB/SUB (`SPUBLISH`/`SSUBSCRIBE`) would keep it on the slot's node.
//!   Not done yet: one Redis (with replicas) is the supported setup.
//!
//! # Authenticity
//!
//! Everything a node writes — frames in logs and on channels, hub events, cluster
//! messages — is sealed with an HMAC under the deployment's [`ClusterKey`], bound to the
//! Redis name it belongs to, and a node drops what does not verify (`seal.rs`). Nodes of
//! one deployment must share the key; `spool serve` takes it from the configuration or
//! from the shared database.
//!
//! # Published hub events
//!
//! The same scripts carry the hub's published events, one log per channel and one
//! PUB/SUB channel for all of them (`hub.rs`).
//!
//! # Between nodes
//!
//! [`RedisCluster`] is the engine's `Cluster` over one PUB/SUB channel: aborts for the
//! node running a session, and list notifications (see the `cluster` module).

mod cluster;
mod frames;
mod hub;
mod keys;
mod listener;
mod pump;
mod scripts;
mod seal;
mod watchers;

pub use cluster::{CHANNEL, RedisCluster, channel_of};
pub use listener::{Item, Listener};
pub use scripts::Replay;
pub use seal::{ClusterKey, KeyTooShort, MIN_KEY_LEN, TAG_LEN};

use bytes::Bytes;
use listener::Command;
use pump::{Link, Pump};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use scripts::Scripts;
use spool_protocol::{Cursor, SessionId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

/// How long a publish or a read may wait for Redis. The client's default (500 ms) is
/// short for a 4 MiB replay on a busy network; much longer would hold a run's publish.
/// A publish that times out may still have been appended: the caller must not retry it
/// blindly (see the failure modes above).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Reconnect attempts of the command connection per failing command (100 + 200 ms).
const RECONNECT_ATTEMPTS: usize = 2;

/// The bus's limits and timings.
#[derive(Clone, Debug)]
pub struct BusConfig {
    /// Most frames a session's log keeps (the in-process replay buffer's 256).
    pub history_frames: usize,
    /// Most frame bytes a session's log keeps (the in-process replay buffer's 4 MiB).
    pub history_bytes: usize,
    /// How long a session's keys outlive its last publish.
    pub ttl: Duration,
    /// How far (in queued bytes) a listener may lag before it is cut (1 MiB, as a
    /// connection's queue in the single-process path).
    pub queue_bytes: usize,
    /// How often the link compares every listener with its log and pings Redis.
    pub check_interval: Duration,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            history_frames: 256,
            history_bytes: 4 << 20,
            ttl: Duration::from_secs(60 * 60),
            queue_bytes: 1 << 20,
            check_interval: Duration::from_secs(15),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis answered something the bus did not write: {0}")]
    Malformed(String),
    #[error("the bus has shut down")]
    Closed,
    #[error("the PUB/SUB link to Redis is down (reconnecting)")]
    LinkDown,
}

/// A node's handle on the bus: cheap to clone, one link (PUB/SUB connection) and one
/// command connection shared by all clones. The link task ends when the last handle and
/// the last listener are gone.
#[derive(Clone)]
pub struct RedisBus {
    shared: Arc<Shared>,
}

struct Shared {
    conn: ConnectionManager,
    /// For the hub's PUB/SUB listeners (see `hub.rs`).
    client: redis::Client,
    /// The PUB/SUB channel of published hub events in this deployment.
    hub_live: String,
    scripts: Arc<Scripts>,
    config: BusConfig,
    commands: UnboundedSender<Command>,
    /// Whether the link task holds a live PUB/SUB connection (it reconnects on its own).
    linked: Arc<AtomicBool>,
}

impl RedisBus {
    /// Connects both connections (so a wrong URL fails here, not at the first frame) and
    /// starts the link task. Must be called inside a tokio runtime. Frames are sealed
    /// with `key` and only frames sealed with it are taken.
    pub async fn connect(url: &str, config: BusConfig, key: ClusterKey) -> Result<Self, BusError> {
        let client = redis::Client::open(url)?;
        let hub_live = hub::live_channel(client.get_connection_info().redis_settings().db());
        // Few reconnect attempts per command (the client's default, six with doubling
        // delays, holds a failing command ~9 s): while Redis is away a caller learns it
        // in well under a second, and the node's link task, which awaits some of these
        // reads, is not held up. The next command tries again anyway.
        let manager = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RECONNECT_ATTEMPTS);
        let conn = ConnectionManager::new_with_config(client.clone(), manager).await?;
        let link = Link::open(&client).await?;
        let scripts = Arc::new(Scripts::new(key));
        let (commands, receiver) = unbounded_channel();
        let pump = Pump::new(
            client.clone(),
            conn.clone(),
            scripts.clone(),
            config.clone(),
            receiver,
            commands.downgrade(),
            link,
        );
        let linked = pump.linked();
        tokio::spawn(pump.run());
        Ok(Self { shared: Arc::new(Shared { conn, client, hub_live, scripts, config, commands, linked }) })
    }

    /// Whether this node can use the bus now, for readiness: its link (the PUB/SUB
    /// connection live frames arrive on) is up and Redis answers a `PING` on the command
    /// connection. The link may be down while commands work (it is reconnecting) and the
    /// other way round, and either breaks streaming, so both are asked. Not bounded
    /// here beyond the command timeout: the caller puts its own limit around it.
    pub async fn check(&self) -> Result<(), BusError> {
        if !self.shared.linked.load(Ordering::Relaxed) {
            return Err(BusError::LinkDown);
        }
        let mut conn = self.shared.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Messages read from Redis that failed verification and were dropped, since start
    /// (this node's bus and cluster channel together when they share the key).
    pub fn rejected(&self) -> u64 {
        self.shared.scripts.key().rejected()
    }

    /// The shared command connection (a cheap clone).
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.shared.conn.clone()
    }

    /// Appends a frame to the session's log and sends it to every node listening.
    /// Returns the frame's cursor: the epoch and the seq it was given.
    pub async fn publish(&self, session: &SessionId, frame: Bytes) -> Result<Cursor, BusError> {
        let mut conn = self.shared.conn.clone();
        self.shared.scripts.publish(&mut conn, &self.shared.config, &keys::Keys::of(session), &frame).await
    }

    /// Publishes several frames of one session in order, in one round trip; their
    /// cursors, in order. See [`publish`](Self::publish).
    pub async fn publish_many(&self, session: &SessionId, frames: &[Bytes]) -> Result<Vec<Cursor>, BusError> {
        let mut conn = self.shared.conn.clone();
        self.shared.scripts.publish_many(&mut conn, &self.shared.config, &keys::Keys::of(session), frames).await
    }

    /// The frames after `cursor`, or "snapshot needed" at the current head (always so
    /// without a cursor). Works the same on every node.
    pub async fn replay(&self, session: &SessionId, cursor: Option<&Cursor>) -> Result<Replay, BusError> {
        let mut conn = self.shared.conn.clone();
        self.shared.scripts.replay(&mut conn, &self.shared.config, &keys::Keys::of(session), cursor).await
    }

    /// A new local listener: replay (or reset) from `cursor`, then live frames. Returns
    /// once the session is subscribed on this node's link and the replay is queued.
    pub async fn listen(&self, session: &SessionId, cursor: Option<&Cursor>) -> Result<Listener, BusError> {
        let (reply, joined) = oneshot::channel();
        let join = Command::Join { session: session.clone(), cursor: cursor.cloned(), reply };
        self.shared.commands.send(join).map_err(|_| BusError::Closed)?;
        joined.await.map_err(|_| BusError::Closed)?
    }
}
