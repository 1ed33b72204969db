//! `SessionEvents`: one per loaded session. It gives every frame its `seq`, keeps the
//! replay buffer, holds the session's live state (what a snapshot shows) and fans
//! frames out to subscribers.
//!
//! # Shape
//!
//! A frame is serialized once, when it is published, into the complete SSE event
//! (`id: streamId:seq` + `data: json`). The bytes go into a ring shared by everyone.
//! A subscriber is not a task and owns no channel: it is a cursor (the last seq it
//! took) plus a waker. Its response body, when the socket can take more, copies the
//! frames after its cursor out of the ring. An idle subscriber therefore costs a slot
//! in a map, not a buffer.
//!
//! # Limits
//!
//! * Replay: a reconnecting client whose cursor is within the last 256 frames and
//!   4 MiB (`EventLimits::replay_*`) gets exactly the frames it missed (none, when its
//!   cursor is the current seq); any other cursor gets one `session.snapshot` at the
//!   current seq, unless the run frame log can replay it exactly (`from_log.rs`, for
//!   the native session stream).
//! * Slow clients: a subscriber may fall behind by at most `queue_bytes` (1 MiB) of
//!   frames. The ring keeps what the replay window needs plus the last `queue_bytes`;
//!   when it drops a frame that a subscriber still needs, that subscriber is cut: its
//!   stream ends and its kill token fires, so the server drops the connection even if
//!   the socket is stuck. It comes back with its cursor. The publisher never waits.
//!
//! # Ends
//!
//! A subscription that ends says why ([`Ended`]), set where the engine ends it: a cut
//! for lagging, or the stream closed because the session was deleted, unloaded or the
//! server is stopping. A transport maps the reason to its own wire ending (a WebSocket
//! close code, an `end` event, dropping one session from a multiplexed stream) and
//! never asks the store why.
//!
//! The state mutation and the frame that announces it happen under one lock, and so do
//! taking a snapshot (or choosing a replay) and registering the subscriber: no frame
//! can fall between a snapshot and the live stream.
//!
//! # Bus mode (several nodes; see `framebus.rs` and `replication.rs`)
//!
//! With a frame bus the seq and the stream id are the bus's (`epoch:seq`), so a cursor
//! from any node replays on any other. The state splits in two:
//!
//! * the *working* state, which the run loop and the API read and change (`read`,
//!   `publish`). A change applies to it at once; its frame body goes to a per-session
//!   publisher task, in order, and from there to the bus. Frames other nodes published
//!   are folded into it too, so a node that takes the session over next has it current.
//! * the *mirror*: the fold of exactly the frames in the ring, up to `seq`. Snapshots
//!   and `state()` show the mirror, so a snapshot at seq N followed by frames N+1… never
//!   repeats or skips a change.
//!
//! The node running a run logs its frames as they come back from the bus, under the
//! bus's seqs (see [`crate::run_log`], "Bus mode"); every node reads those logs.
//!
//! One listener task per session folds the bus's frames into the ring and both states.
//! When the bus says `Reset`, the node rebuilds from the store, every subscriber gets an
//! in-stream snapshot, and the node running the session is asked to publish a full
//! snapshot frame (the publisher then drops the bodies still queued: the snapshot has
//! them). The publisher does the same when a publish lands in a new epoch (the bus lost
//! its log) or fails (a frame that may be missing must not become a hole).

use crate::metrics::Metrics;
use crate::run_sequence::{RunCount, RunSequences};
use crate::view::apply_frame;
use bytes::Bytes;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::presence::ClientKind;
use spool_protocol::{ApprovalId, Cursor, RunId, SessionId, StreamId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod from_log;
mod presence;
mod replication;
mod ring;
mod subscription;
#[cfg(test)]
mod tests;

pub use presence::PRESENCE_REFRESH;
pub(crate) use presence::watchers_elsewhere;
use replication::{BusSide, Outbound};
pub(crate) use replication::{Follower, Opened};
pub use subscription::{Subscription, TypedSubscription};

/// Who holds a subscription: the kind of client, and whether a person there can answer
/// the session's approvals (what presence counts; see `presence.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewer {
    pub kind: ClientKind,
    /// A view that shows approvals and sends decisions (`?approvals=1`, the web UI's
    /// socket, the hub, AG-UI, AI SDK and OpenCode streams).
    pub answers: bool,
}

impl Viewer {
    /// A view that follows the session and answers nothing.
    pub fn watching(kind: ClientKind) -> Viewer {
        Viewer { kind, answers: false }
    }

    /// A view where a person can answer the session's approvals.
    pub fn answering(kind: ClientKind) -> Viewer {
        Viewer { kind, answers: true }
    }
}

/// Buffer and queue limits of a session stream.
#[derive(Clone, Copy, Debug)]
pub struct EventLimits {
    /// Most frames a replay can span.
    pub replay_frames: usize,
    /// Most serialized bytes a replay can span.
    pub replay_bytes: usize,
    /// How far (in bytes of frames) a subscriber may lag before it is disconnected.
    pub queue_bytes: usize,
}

impl Default for EventLimits {
    fn default() -> Self {
        Self { replay_frames: 256, replay_bytes: 4 << 20, queue_bytes: 1 << 20 }
    }
}

/// How a new subscription starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Frames after the client's cursor are replayed from the buffer.
    Replay { from_seq: u64, frames: u64 },
    /// The client gets a snapshot at this seq.
    Snapshot { seq: u64 },
}

/// Why a subscription ended ([`Subscription::ended`]). Each transport maps it to its
/// wire ending, so none has to ask the store or the loaded sessions what happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The subscriber fell a queue limit behind, or past the ring, and was cut. The
    /// session is fine: its client comes back with its cursor.
    Lagged,
    /// The session was deleted (alone or with its project). Nothing follows.
    SessionDeleted,
    /// This node dropped its view of the session (stale after another node ran it, or
    /// idle). The session is still there: a client comes back with its cursor, and
    /// the next subscription loads it afresh.
    Unloaded,
    /// The server is stopping.
    Shutdown,
}

/// Where a run-stream client says it is in a run (see [`SessionEvents::subscribe_from_run`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunAfter {
    /// It has the run's events up to this sequence (0: none).
    Seq(u64),
    /// It has the run's events up to this approval's `interrupt` (a resume's
    /// continuation starts after it).
    Interrupt(ApprovalId),
}

/// How a subscription to one run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStart {
    /// The client's `after` as a sequence (an interrupt this stream did not count: 0).
    pub after: u64,
    /// The approval the run waits for now, if any.
    pub waiting: Option<ApprovalId>,
    pub from: RunFrom,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunFrom {
    /// The subscription replays the session's frames from the one of the run's event
    /// `after` (from just before the run's first frame when `after` is 0); fold them
    /// with this counter.
    Replay(RunCount),
    /// The frames after `after` are gone (or `after` is past the run's last event): the
    /// subscription starts with a session snapshot, at which the run's counter stood
    /// as given — `None` when this stream does not know the run's numbers (the session
    /// was loaded, or followed from the bus, after the run began).
    Snapshot(Option<RunCount>),
}

/// Bus mode: how long a reconnect whose cursor is ahead of this node waits for the bus
/// to bring the frames before it gets a snapshot.
pub const BUS_LAG_WAIT: Duration = Duration::from_millis(1500);

/// Largest body chunk a subscriber copies out of the ring in one poll. Big enough to
/// amortize a write, small enough not to starve other connections on the same thread.
const MAX_CHUNK: usize = 64 * 1024;

#[derive(Clone)]
pub struct SessionEvents {
    shared: Arc<Shared>,
}

struct Shared {
    session_id: SessionId,
    limits: EventLimits,
    /// Set in bus mode.
    bus: Option<BusSide>,
    /// Number of subscribers, for runs that end when their last listener leaves.
    count: tokio::sync::watch::Sender<usize>,
    /// Bumped whenever a view comes, goes or turns visible or hidden: what presence and
    /// this node's watcher entry follow.
    views: tokio::sync::watch::Sender<u64>,
    /// Told when the session's list entry may have changed (state frames, accepted
    /// runs, a first user message) — never for deltas or tool events.
    /// Where to announce list changes, and the project (and its owner) this session is in.
    lists: Option<(crate::lists::ListNotifier, spool_protocol::ProjectId, spool_protocol::UserId)>,
    /// The engine's metrics (a fresh, unread set for a stream built alone, in tests).
    metrics: Metrics,
    /// A std mutex: nothing awaits while it is held, and every critical section is a
    /// few pointer moves plus at most one frame's serialization.
    inner: Mutex<Inner>,
}

/// One frame of the ring: the typed frame, for dialects that map it, and its native
/// SSE encoding, made once at publish and shared by every native subscriber.
struct Entry {
    seq: u64,
    frame: Arc<Frame>,
    bytes: Bytes,
    /// The run and run-stream sequence this frame is the event of, if any.
    mark: Option<(RunId, u64)>,
    /// When it entered the ring, for one frame in
    /// [`FRAME_SAMPLE_EVERY`](crate::metrics::FRAME_SAMPLE_EVERY) (by seq) while metrics
    /// are on: what the frame delivery histogram samples.
    published: Option<Instant>,
}

struct Slot {
    /// Last seq this subscriber has taken.
    cursor: u64,
    waker: Option<Waker>,
    kill: CancellationToken,
    cut: bool,
    /// The stream restarted under it (bus mode, `Reset`): its next item is a snapshot.
    resync: bool,
    /// What kind of client holds it, and whether it can answer approvals.
    viewer: Viewer,
    /// The page showing it is visible (only the web UI says otherwise).
    visible: bool,
}

struct Inner {
    /// Seq of the last published frame; 0 before the first.
    seq: u64,
    /// The stream the seqs belong to: random per instance, or the bus's epoch.
    stream_id: StreamId,
    ring: VecDeque<Entry>,
    ring_bytes: usize,
    /// The run-stream sequence of the session's recent runs, counted as frames enter
    /// the ring.
    runs: RunSequences,
    /// The working state (see the module doc).
    state: SessionState,
    /// Bus mode: the fold of the frames up to `seq`, which snapshots show.
    mirror: Option<SessionState>,
    /// Bus mode: own bodies handed to the publisher so far.
    sent: u64,
    /// Bus mode: set while a full snapshot frame is on its way (after a `Reset`, or on
    /// following a session mid-run); the number tells one wait from the next. Snapshots
    /// for subscribers wait for it, so a client never sees the streamed text vanish.
    awaiting: Option<u64>,
    waits: u64,
    subscribers: HashMap<u64, Slot>,
    next_subscriber: u64,
    interactive: usize,
    /// A lower bound of every subscriber's cursor. Recomputed only when eviction passes
    /// it, so publishing stays O(1) however many subscribers there are.
    min_cursor_hint: u64,
    /// Set when the stream was closed, with why: no more publishes, every subscription
    /// ends with this reason (a cut one keeps [`Ended::Lagged`]).
    closed: Option<Ended>,
    /// Set when the session's runs are logged ([`SessionEvents::log_runs`]).
    log: Option<crate::run_log::RunLogger>,
}

impl SessionEvents {
    pub fn new(session_id: SessionId, state: SessionState, limits: EventLimits) -> Self {
        Self::build(session_id, state, limits, None, Metrics::default())
    }

    /// Like [`new`](Self::new), telling `lists` whenever the session's list entry may
    /// have changed.
    pub fn observed(
        session_id: SessionId,
        state: SessionState,
        limits: EventLimits,
        lists: crate::lists::ListNotifier,
        metrics: Metrics,
    ) -> Self {
        let (project, owner) = (state.session.project_id.clone(), state.session.owner_id.clone());
        Self::build(session_id, state, limits, Some((lists, project, owner)), metrics)
    }

    fn build(
        session_id: SessionId,
        state: SessionState,
        limits: EventLimits,
        lists: Option<(crate::lists::ListNotifier, spool_protocol::ProjectId, spool_protocol::UserId)>,
        metrics: Metrics,
    ) -> Self {
        let shared = Shared::new(session_id, state, limits, lists, metrics, StreamId::new(), 0, None);
        Self { shared: Arc::new(shared) }
    }

    pub fn stream_id(&self) -> StreamId {
        self.lock().stream_id.clone()
    }

    pub fn session_id(&self) -> &SessionId {
        &self.shared.session_id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    /// The current seq and a copy of the state, consistent with each other (in bus
    /// mode, the mirror: what a snapshot at this seq shows).
    pub fn state(&self) -> (u64, SessionState) {
        let inner = self.lock();
        (inner.seq, inner.view().clone())
    }

    /// Like [`state`](Self::state), after this node's own changes so far are back from
    /// the bus (read your writes), or after `wait` at most. Immediate without a bus.
    pub async fn settled_state(&self, wait: Duration) -> (u64, SessionState) {
        if let Some(bus) = &self.shared.bus {
            let target = self.lock().sent;
            let mut echoed = bus.echoed.subscribe();
            let _ = tokio::time::timeout(wait, echoed.wait_for(|n| *n >= target)).await;
        }
        self.state()
    }

    /// Reads the state under the lock without copying all of it.
    pub fn read<R>(&self, f: impl FnOnce(&SessionState) -> R) -> R {
        f(&self.lock().state)
    }

    /// Mutates the state and publishes the frame the closure returns (if any), as one
    /// step. Returns whether a frame was published (in bus mode: handed to the bus, in
    /// order; its seq comes when it is back).
    pub fn publish(&self, f: impl FnOnce(&mut SessionState) -> Option<FrameBody>) -> bool {
        let mut wake = Vec::new();
        let notify_lists;
        {
            let mut inner = self.lock();
            if inner.closed.is_some() {
                return false;
            }
            let Some(body) = f(&mut inner.state) else { return false };
            notify_lists = match &body {
                // A git change too: streams that follow only a directory's active
                // sessions (OpenCode's `/event`) hear of an idle session's new diff.
                FrameBody::State { .. } | FrameBody::RunAccepted { .. } | FrameBody::Git { .. } => true,
                FrameBody::LoopEvent { event: spool_protocol::AgentEvent::MessageEnd { message }, .. } => {
                    message.is_user()
                }
                _ => false,
            };
            match &self.shared.bus {
                Some(bus) => {
                    inner.sent += 1;
                    // The receiver lives as long as the publisher task, which outlives us.
                    let _ = bus.outbound.send(Outbound::Body(inner.sent, Box::new(body)));
                }
                None => {
                    let seq = inner.seq + 1;
                    let stream_id = inner.stream_id.clone();
                    self.shared.push(&mut inner, body, stream_id, seq, true, &mut wake);
                }
            }
        }
        // Wake outside the lock so woken tasks do not immediately contend for it.
        wake.into_iter().for_each(Waker::wake);
        if notify_lists && let Some((lists, project, owner)) = &self.shared.lists {
            lists.change(
                owner,
                crate::lists::Change::SessionChanged {
                    session: self.shared.session_id.clone(),
                    project: project.clone(),
                },
            );
        }
        true
    }

    /// Publishes a frame and folds it into the state with [`apply_frame`], the fold every
    /// client and a following node use: the frame is the change, written once. (A frame
    /// the fold ignores — `run_accepted`, `git`, most loop events — changes nothing.)
    pub fn publish_body(&self, body: FrameBody) -> bool {
        self.publish(|state| {
            apply_frame(state, &body);
            Some(body)
        })
    }

    /// Subscribes from an optional cursor. `kill` is cancelled if this subscriber is cut
    /// for falling too far behind, so the transport can drop a stuck connection.
    ///
    /// `viewer` says who holds it, for presence: the kind of client, and whether it is
    /// a view where a person can answer approvals (`?approvals=1`).
    pub fn subscribe(&self, cursor: Option<&Cursor>, kill: CancellationToken, viewer: Viewer) -> (Subscription, Start) {
        self.subscribe_locked(self.lock(), cursor, kill, viewer)
    }

    /// The sequence the run's next event will have, once this node's own frames so far
    /// are counted (bus mode: back from the bus, waiting `wait` at most); `None` when this
    /// stream does not count the run. What a parked run's checkpoint keeps of its
    /// numbering (see [`RunCount::parked`]).
    pub async fn next_run_sequence(&self, run: &RunId, wait: Duration) -> Option<u64> {
        if let Some(bus) = &self.shared.bus {
            let target = self.lock().sent;
            let mut echoed = bus.echoed.subscribe();
            let _ = tokio::time::timeout(wait, echoed.wait_for(|n| *n >= target)).await;
        }
        let inner = self.lock();
        inner.runs.get(run).filter(|c| !c.ended()).map(|c| c.sequence() + 1)
    }

    /// Counts `count`'s run on from where it stands: a run this stream did not see
    /// start (a session loaded after a restart with a run parked at an approval).
    pub fn resume_run_count(&self, count: RunCount) {
        let mut inner = self.lock();
        let seq = inner.seq;
        inner.runs.resume(count, seq);
    }

    /// Subscribes a run-stream client to the frames of `run` after its event `after`:
    /// positioned at that event's frame when every frame after it is still in the
    /// replay window (or at the current seq when the client has all the run's events
    /// so far), else at a session snapshot. Chosen and registered under one lock, so
    /// the run's counter in [`RunStart`] is exactly where the subscription starts.
    pub fn subscribe_from_run(
        &self,
        run: &RunId,
        after: RunAfter,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> (Subscription, RunStart) {
        let inner = self.lock();
        let count = inner.runs.get(run).cloned();
        let interrupt = matches!(after, RunAfter::Interrupt(_));
        let after = match after {
            RunAfter::Seq(n) => n,
            RunAfter::Interrupt(approval) => count.as_ref().and_then(|c| c.interrupt(&approval)).unwrap_or(0),
        };
        let waiting = inner.view().pending_approvals.iter().find(|a| a.run_id == *run).map(|a| a.id.clone());
        let at_frame = || {
            inner
                .run_cursor(run, after)
                .filter(|&seq| inner.replay_from(&self.shared, Some(&inner.cursor_at(seq))).is_some())
                .map(|seq| (seq, RunCount::after(run.clone(), after)))
        };
        let replay = match &count {
            // A continuation starts right after its interrupt's frame while the ring
            // holds it, not at the head: the frames between (a title, the decision) are
            // then the same every time it is followed.
            Some(count) if after == count.sequence() => {
                interrupt.then(at_frame).flatten().or_else(|| Some((inner.seq, count.clone())))
            }
            Some(_) => at_frame(),
            None => None,
        };
        if let Some((seq, count)) = replay {
            let cursor = inner.cursor_at(seq);
            let (subscription, start) = self.subscribe_locked(inner, Some(&cursor), kill, viewer);
            debug_assert!(matches!(start, Start::Replay { .. }), "checked under the same lock");
            return (subscription, RunStart { after, waiting, from: RunFrom::Replay(count) });
        }
        // A snapshot sent later (bus mode, awaiting a full one) is not at this count.
        let count = count.filter(|_| inner.awaiting.is_none());
        let (subscription, _) = self.subscribe_locked(inner, None, kill, viewer);
        (subscription, RunStart { after, waiting, from: RunFrom::Snapshot(count) })
    }

    fn subscribe_locked(
        &self,
        mut inner: std::sync::MutexGuard<'_, Inner>,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> (Subscription, Start) {
        let (first, cursor_seq, start) = match inner.replay_from(&self.shared, cursor) {
            Some(from) => (None, from, Start::Replay { from_seq: from, frames: inner.seq - from }),
            // A full snapshot is on its way: this one is sent when it has come.
            None if inner.awaiting.is_some() => (None, inner.seq, Start::Snapshot { seq: inner.seq }),
            None => (Some(inner.snapshot(&self.shared)), inner.seq, Start::Snapshot { seq: inner.seq }),
        };
        let resync = first.is_none() && matches!(start, Start::Snapshot { .. });
        let id = inner.next_subscriber;
        inner.next_subscriber += 1;
        inner.min_cursor_hint = inner.min_cursor_hint.min(cursor_seq);
        if inner.closed.is_some() {
            kill.cancel();
        }
        let slot = Slot { cursor: cursor_seq, waker: None, kill, cut: false, resync, viewer, visible: true };
        inner.subscribers.insert(id, slot);
        self.shared.metrics.session_streams(1);
        self.shared.metrics.stream_started(matches!(start, Start::Replay { .. }));
        inner.interactive += usize::from(viewer.answers);
        let count = inner.subscribers.len();
        drop(inner);
        self.shared.count.send_replace(count);
        self.shared.views.send_modify(|n| *n += 1);
        (Subscription { events: self.clone(), id, logged: Default::default(), first, guard: None }, start)
    }

    /// Logs every run of this stream from the next `run.accepted` on (see
    /// [`crate::run_log`]).
    pub fn log_runs(&self, log: crate::run_log::RunLog) {
        self.lock().log = Some(crate::run_log::RunLogger::new(log));
    }

    /// Number of connected subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Number of connected interactive views (`?approvals=1`).
    pub fn interactive_views(&self) -> usize {
        self.lock().interactive
    }

    /// Follows the number of subscribers as it changes.
    pub fn watch_subscribers(&self) -> tokio::sync::watch::Receiver<usize> {
        self.shared.count.subscribe()
    }

    /// Ends every subscription with `why` (the session was deleted or unloaded, or the
    /// server is stopping) and refuses further publishes. The first reason stays.
    pub fn close(&self, why: Ended) {
        if let Some(bus) = &self.shared.bus {
            bus.stop.cancel();
        }
        let mut inner = self.lock();
        inner.closed.get_or_insert(why);
        let wake: Vec<Waker> = inner
            .subscribers
            .values_mut()
            .filter_map(|s| {
                s.kill.cancel();
                s.waker.take()
            })
            .collect();
        drop(inner);
        wake.into_iter().for_each(Waker::wake);
    }
}
