//! A local listener: the ordered items one client gets from a session, through a queue
//! bounded in bytes. The node's link task is the only writer; the listener's owner reads.
//!
//! A listener is not given a task. Its queue is an unbounded channel plus a byte count
//! that the writer checks before every live frame: past the budget the listener is cut
//! (its stream ends at once) instead of the writer waiting, so one stuck client never
//! holds up the others or the node's link. It comes back with its cursor.

use crate::BusError;
use bytes::Bytes;
use futures::Stream;
use spool_protocol::{Cursor, SessionId, StreamId};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

/// What the bus handle and listeners ask of the link task (a join answers with a
/// [`Listener`]; a dropped listener leaves).
pub(crate) enum Command {
    Join { session: SessionId, cursor: Option<Cursor>, reply: oneshot::Sender<Result<Listener, BusError>> },
    Leave { session: SessionId, id: u64 },
}

/// What a listener gets, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The frame after the previous one: `seq` is the previous seq + 1 in the same epoch.
    Frame { epoch: StreamId, seq: u64, bytes: Bytes },
    /// What came before cannot be continued (the listener started without a usable
    /// cursor, the epoch changed, or frames it missed were trimmed): take a snapshot at
    /// `seq`. The next frame, if any, is `seq + 1` of `epoch`.
    Reset { epoch: StreamId, seq: u64 },
}

impl Item {
    /// The cursor a client holds once it has taken this item.
    pub fn cursor(&self) -> Cursor {
        match self {
            Item::Frame { epoch, seq, .. } | Item::Reset { epoch, seq } => {
                Cursor { stream_id: epoch.clone(), seq: *seq }
            }
        }
    }

    /// What the item weighs in a queue: its bytes plus a fixed cost for the item itself,
    /// so a flood of tiny frames is bounded too.
    fn cost(&self) -> usize {
        const ITEM: usize = 64;
        match self {
            Item::Frame { bytes, .. } => bytes.len() + ITEM,
            Item::Reset { .. } => ITEM,
        }
    }
}

/// Shared between the writer's [`Feed`] and the reader's [`Listener`].
struct Gauge {
    queued: AtomicUsize,
    cut: AtomicBool,
}

/// The writer's end, held by the link task.
pub(crate) struct Feed {
    sender: UnboundedSender<Item>,
    gauge: Arc<Gauge>,
    budget: usize,
}

impl Feed {
    /// Queues an item that the listener must get however large the queue is (its opening
    /// replay, bounded by the history budget, or a reset, which carries no bytes).
    pub fn force(&self, item: Item) -> bool {
        self.gauge.queued.fetch_add(item.cost(), Ordering::Relaxed);
        self.sender.send(item).is_ok()
    }

    /// Queues a live item, unless the listener has fallen `budget` bytes behind. `false`
    /// means the listener is gone (cut now, or dropped by its owner): forget it.
    pub fn offer(&self, item: Item) -> bool {
        let cost = item.cost();
        if self.gauge.queued.load(Ordering::Relaxed) + cost > self.budget {
            self.gauge.cut.store(true, Ordering::Relaxed);
            return false;
        }
        self.force(item)
    }
}

/// An ordered stream of [`Item`]s for one client. It ends when the listener was cut
/// (too slow) or the bus could not tell what it missed; the client then comes back with
/// its last cursor and gets a replay or a snapshot.
pub struct Listener {
    receiver: UnboundedReceiver<Item>,
    gauge: Arc<Gauge>,
    leave: UnboundedSender<Command>,
    session: SessionId,
    id: u64,
}

pub(crate) fn pair(session: SessionId, id: u64, budget: usize, leave: UnboundedSender<Command>) -> (Feed, Listener) {
    let (sender, receiver) = unbounded_channel();
    let gauge = Arc::new(Gauge { queued: AtomicUsize::new(0), cut: AtomicBool::new(false) });
    (Feed { sender, gauge: gauge.clone(), budget }, Listener { receiver, gauge, leave, session, id })
}

impl Listener {
    /// Whether the listener was cut for falling behind (rather than ending with the bus).
    pub fn was_cut(&self) -> bool {
        self.gauge.cut.load(Ordering::Relaxed)
    }
}

impl Stream for Listener {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        // A cut listener ends at once, even with frames still queued: they are behind
        // by more than the budget, and the client's cursor takes it to them again.
        if self.gauge.cut.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        let polled = self.receiver.poll_recv(cx);
        if let Poll::Ready(Some(item)) = &polled {
            if self.gauge.cut.load(Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            self.gauge.queued.fetch_sub(item.cost(), Ordering::Relaxed);
        }
        polled
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // The link task may already be gone (the bus was dropped): nothing to tell.
        let _ = self.leave.send(Command::Leave { session: self.session.clone(), id: self.id });
    }
}
