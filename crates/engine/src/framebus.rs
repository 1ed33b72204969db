//! The frame-bus seam: how a session's frames reach every node, so a client can follow a
//! run on any node and resume on any other with its cursor. The engine defines the
//! trait; the Redis Streams implementation is `spool_bus::RedisBus`. One node on its
//! own has no frame bus: `SessionEvents` numbers and fans out frames in process.
//!
//! # How a session uses it (see `events/mod.rs`, "Bus mode", and `events/replication.rs`)
//!
//! * Every node that has a session loaded follows it through one [`FrameBus::listen`]
//!   (one per session per node, however many clients): each frame the bus delivers is
//!   folded into the node's view (`view::apply_frame`) and put in the node's replay ring
//!   under the bus's cursor, `epoch:seq`. So a cursor any node issued is a cursor every
//!   node understands, and the ring, replay limits and slow-client cut are the
//!   single-process ones.
//! * A node that changes the session (it runs the run, or a person renamed it there)
//!   applies the change to its working state at once, as before, and hands the frame to
//!   the bus in order, from one task per session. Its own clients see the frame when it
//!   comes back from the bus, numbered like everyone else's.
//! * The bus may lose what it held (Redis restarted without persistence, `FLUSHALL`,
//!   eviction) or a node may fall behind what it keeps: the listener then says `Reset`.
//!   The node rebuilds its view from the store, hands every client an in-stream
//!   snapshot, and asks the node running the session for a full snapshot frame, which
//!   carries what the store cannot (the text streamed so far).
//!
//! * Each node records how many clients it has on each session's stream, so the node
//!   running the session counts every node's clients where a prompt's
//!   `onDisconnect: "cancel"` and `--approval-policy deny` ask "is anyone there?".
//!
//! The payload is the frame body, the publishing `SessionEvents` instance (its origin)
//! and the body's number among that instance's own: a node folds into its working state
//! only what it did not do itself, and knows when its own changes are back.

use bytes::Bytes;
use futures::stream::BoxStream;
use spool_protocol::frame::FrameBody;
use spool_protocol::presence::{ClientKind, Presence};
use spool_protocol::{Cursor, SessionId};

/// What a node's listener yields for one session, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BusItem {
    /// The frame after the previous item: same epoch, seq + 1.
    Frame { cursor: Cursor, payload: Bytes },
    /// What came before cannot be continued: take a snapshot at `cursor`; the next frame
    /// is `cursor.seq + 1` of `cursor.stream_id`.
    Reset { cursor: Cursor },
}

/// How many clients one node has on a session's stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watchers {
    /// Open streams of the session on the node.
    pub streams: u64,
    /// Of those, interactive views (`?approvals=1`): someone who can answer an approval.
    pub interactive: u64,
    /// Of the interactive views, those whose page is visible now.
    pub visible: u64,
    /// The streams by kind of client, in [`ClientKind::ALL`]'s order.
    pub kinds: [u64; ClientKind::ALL.len()],
}

impl std::ops::Add for Watchers {
    type Output = Watchers;

    fn add(self, other: Watchers) -> Watchers {
        let mut kinds = self.kinds;
        kinds.iter_mut().zip(other.kinds).for_each(|(mine, theirs)| *mine += theirs);
        Watchers {
            streams: self.streams + other.streams,
            interactive: self.interactive + other.interactive,
            visible: self.visible + other.visible,
            kinds,
        }
    }
}

impl Watchers {
    /// The counts as clients see them.
    pub fn presence(&self) -> Presence {
        Presence {
            viewers: self.streams,
            answerers: self.interactive,
            visible: self.visible,
            clients: ClientKind::ALL.into_iter().zip(self.kinds).filter(|(_, n)| *n > 0).collect(),
        }
    }
}

/// How often a node rewrites its [`Watchers`] entry for a session while it has any; the
/// bus keeps an entry valid for a good while longer, so a node that died drops out.
pub const WATCH_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// A failure of the bus, as text: the engine only logs it and retries.
pub type BusFailure = Box<dyn std::error::Error + Send + Sync>;

/// A log of frames per session shared by every node, with live delivery.
#[async_trait::async_trait]
pub trait FrameBus: Send + Sync + 'static {
    /// Appends frames to the session's log, in order, and delivers them to every
    /// listener; returns the cursors they were given, in order. A failed publish may
    /// still have appended some of them.
    async fn publish(&self, session: &SessionId, payloads: &[Bytes]) -> Result<Vec<Cursor>, BusFailure>;

    /// The payloads after `cursor` up to the log's head, or `None` when the log no longer
    /// holds all of them (or `cursor` is of another epoch): the caller takes a snapshot.
    async fn replay(&self, session: &SessionId, cursor: &Cursor) -> Result<Option<Vec<Bytes>>, BusFailure>;

    /// Records how many clients `node` has on `session`'s stream; zero removes its entry.
    async fn set_watchers(&self, session: &SessionId, node: &str, watchers: Watchers) -> Result<(), BusFailure>;

    /// Every node's recorded clients on `session`'s stream (entries of nodes that stopped
    /// refreshing them are left out).
    async fn watchers(&self, session: &SessionId) -> Result<Vec<(String, Watchers)>, BusFailure>;

    /// Listens from `cursor` (the frames after it, or a `Reset`), then live. Without a
    /// cursor the first item is a `Reset` at the log's head. The stream ends when the
    /// listener fell too far behind or the bus could not say what it missed; listening
    /// again from the last cursor continues without a hole.
    async fn listen(
        &self,
        session: &SessionId,
        cursor: Option<&Cursor>,
    ) -> Result<BoxStream<'static, BusItem>, BusFailure>;

    /// Whether this node can use the bus now, with why not: what `GET /api/ready` shows
    /// as its `bus` check. The caller bounds how long it may take.
    async fn check(&self) -> Result<(), BusFailure> {
        Ok(())
    }

    /// Messages read from the bus that failed authentication and were dropped since
    /// start (`/metrics`: `spool_bus_rejected_messages_total`).
    fn rejected_messages(&self) -> u64 {
        0
    }

    /// The same bus for published hub events (see [`crate::hub`]), if it carries them.
    fn hub_bus(&self) -> Option<std::sync::Arc<dyn crate::hub::HubBus>> {
        None
    }
}

/// Encodes a frame body for the bus with the instance that published it and the body's
/// number among that instance's own (for read-your-writes waits).
pub(crate) fn encode(origin: u64, number: u64, body: &FrameBody) -> Bytes {
    Bytes::from(serde_json::to_vec(&(origin, number, body)).expect("frame bodies always serialize"))
}

/// Decodes what [`encode`] wrote.
pub(crate) fn decode(payload: &[u8]) -> Result<(u64, u64, FrameBody), serde_json::Error> {
    serde_json::from_slice(payload)
}
