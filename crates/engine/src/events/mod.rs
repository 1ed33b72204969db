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
//!   current seq.
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
//! One listener task per session folds the bus's frames into the ring and both states.
//! When the bus says `Reset`, the node rebuilds from the store, every subscriber gets an
//! in-stream snapshot, and the node running the session is asked to publish a full
//! snapshot frame (the publisher then drops the bodies still queued: the snapshot has
//! them). The publisher does the same when a publish lands in a new epoch (the bus lost
//! its log) or fails (a frame that may be missing must not become a hole).

use crate::framebus::Watchers;
use crate::metrics::{FRAME_SAMPLE_EVERY, Metrics};
use crate::run_sequence::{RunCount, RunSequences};
use crate::view::apply_frame;
use bytes::{Bytes, BytesMut};
use futures::Stream;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{ApprovalId, Cursor, RunId, SessionId, StreamId};
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod replication;

use replication::{BusSide, Outbound};
pub(crate) use replication::{Follower, Opened};

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
    /// When it entered the ring, for one frame in [`FRAME_SAMPLE_EVERY`] (by seq) while
    /// metrics are on: what the frame delivery histogram samples.
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
    /// Opened with `?approvals=1`: a view where a person can answer approvals.
    interactive: bool,
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
                    self.shared.push(&mut inner, body, stream_id, seq, &mut wake);
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
    /// `interactive` marks a view where a person can answer approvals (`?approvals=1`).
    pub fn subscribe(
        &self,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        interactive: bool,
    ) -> (Subscription, Start) {
        self.subscribe_locked(self.lock(), cursor, kill, interactive)
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
    ) -> (Subscription, RunStart) {
        let inner = self.lock();
        let count = inner.runs.get(run).cloned();
        let after = match after {
            RunAfter::Seq(n) => n,
            RunAfter::Interrupt(approval) => count.as_ref().and_then(|c| c.interrupt(&approval)).unwrap_or(0),
        };
        let waiting = inner.view().pending_approvals.iter().find(|a| a.run_id == *run).map(|a| a.id.clone());
        let replay = match &count {
            Some(count) if after == count.sequence() => Some((inner.seq, count.clone())),
            Some(_) => inner
                .run_cursor(run, after)
                .filter(|&seq| inner.replay_from(&self.shared, Some(&inner.cursor_at(seq))).is_some())
                .map(|seq| (seq, RunCount::after(run.clone(), after))),
            None => None,
        };
        if let Some((seq, count)) = replay {
            let cursor = inner.cursor_at(seq);
            let (subscription, start) = self.subscribe_locked(inner, Some(&cursor), kill, false);
            debug_assert!(matches!(start, Start::Replay { .. }), "checked under the same lock");
            return (subscription, RunStart { after, waiting, from: RunFrom::Replay(count) });
        }
        // A snapshot sent later (bus mode, awaiting a full one) is not at this count.
        let count = count.filter(|_| inner.awaiting.is_none());
        let (subscription, _) = self.subscribe_locked(inner, None, kill, false);
        (subscription, RunStart { after, waiting, from: RunFrom::Snapshot(count) })
    }

    fn subscribe_locked(
        &self,
        mut inner: std::sync::MutexGuard<'_, Inner>,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        interactive: bool,
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
        let slot = Slot { cursor: cursor_seq, waker: None, kill, cut: false, resync, interactive };
        inner.subscribers.insert(id, slot);
        self.shared.metrics.session_streams(1);
        self.shared.metrics.stream_started(matches!(start, Start::Replay { .. }));
        inner.interactive += usize::from(interactive);
        let count = inner.subscribers.len();
        drop(inner);
        self.shared.count.send_replace(count);
        (Subscription { events: self.clone(), id, first, guard: None }, start)
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

impl Shared {
    #[allow(clippy::too_many_arguments)]
    fn new(
        session_id: SessionId,
        state: SessionState,
        limits: EventLimits,
        lists: Option<(crate::lists::ListNotifier, spool_protocol::ProjectId, spool_protocol::UserId)>,
        metrics: Metrics,
        stream_id: StreamId,
        seq: u64,
        bus: Option<BusSide>,
    ) -> Self {
        let mirror = bus.as_ref().map(|_| state.clone());
        let inner = Inner {
            seq,
            stream_id,
            ring: VecDeque::new(),
            ring_bytes: 0,
            runs: RunSequences::default(),
            state,
            mirror,
            sent: 0,
            awaiting: None,
            waits: 0,
            subscribers: HashMap::new(),
            next_subscriber: 0,
            interactive: 0,
            min_cursor_hint: seq,
            closed: None,
        };
        let count = tokio::sync::watch::Sender::new(0);
        Self { session_id, limits, bus, count, lists, metrics, inner: Mutex::new(inner) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn watchers(&self) -> Watchers {
        let inner = self.lock();
        Watchers { streams: inner.subscribers.len() as u64, interactive: inner.interactive as u64 }
    }

    fn cursor(&self) -> Cursor {
        let inner = self.lock();
        Cursor { stream_id: inner.stream_id.clone(), seq: inner.seq }
    }

    /// Appends a frame at `seq` to the ring and collects the subscribers to wake.
    fn push(&self, inner: &mut Inner, body: FrameBody, stream_id: StreamId, seq: u64, wake: &mut Vec<Waker>) {
        let mark = inner.runs.count(&body);
        let frame = Arc::new(Frame { body, session_id: self.session_id.clone(), stream_id, seq });
        let bytes = frame.to_sse();
        let published = (seq % FRAME_SAMPLE_EVERY == 0 && self.metrics.is_on()).then(Instant::now);
        inner.seq = seq;
        inner.ring_bytes += bytes.len();
        inner.ring.push_back(Entry { seq, frame, bytes, mark, published });
        inner.evict(&self.limits, &self.metrics);
        for slot in inner.subscribers.values_mut() {
            if let Some(w) = slot.waker.take() {
                wake.push(w);
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(bus) = &self.bus {
            bus.stop.cancel();
        }
    }
}

impl Inner {
    /// What a snapshot shows: the mirror in bus mode, else the state.
    fn view(&self) -> &SessionState {
        self.mirror.as_ref().unwrap_or(&self.state)
    }

    /// The snapshot frame at the current seq (serialized by whoever takes it, outside
    /// the lock).
    fn snapshot(&self, shared: &Shared) -> Arc<Frame> {
        Arc::new(Frame {
            body: FrameBody::Snapshot { state: Box::new(self.view().clone()) },
            session_id: shared.session_id.clone(),
            stream_id: self.stream_id.clone(),
            seq: self.seq,
        })
    }

    fn cursor_at(&self, seq: u64) -> Cursor {
        Cursor { stream_id: self.stream_id.clone(), seq }
    }

    /// The cursor (a seq) to replay `run`'s frames from after its event `after`: that
    /// event's frame, or for 0 the frame before the run's first. `None` when the frame
    /// has left the ring.
    fn run_cursor(&self, run: &RunId, after: u64) -> Option<u64> {
        let wanted = after.max(1);
        let entry = self.ring.iter().find(|e| e.mark.as_ref().is_some_and(|(r, s)| r == run && *s == wanted));
        match entry {
            Some(entry) => Some(if after == 0 { entry.seq - 1 } else { entry.seq }),
            // Counted from the middle (a parked run after a restart): its event `after`
            // came before this stream, and every frame since the anchor is counted.
            None => self.runs.anchor(run, after),
        }
    }

    /// The seq to replay after, if the cursor allows a replay (seed 000): same stream,
    /// not ahead of the current seq, and every following frame still in the replay
    /// window. A cursor at the current seq replays zero frames: the client has seen
    /// everything, and a snapshot would resend the whole session for nothing.
    fn replay_from(&self, shared: &Shared, cursor: Option<&Cursor>) -> Option<u64> {
        let cursor = cursor?;
        if cursor.stream_id != self.stream_id || cursor.seq > self.seq {
            return None;
        }
        let needed = self.seq - cursor.seq;
        let mut bytes = 0usize;
        let mut frames = 0u64;
        for entry in self.ring.iter().rev() {
            if entry.seq <= cursor.seq {
                break;
            }
            frames += 1;
            bytes += entry.bytes.len();
            if frames as usize > shared.limits.replay_frames || bytes > shared.limits.replay_bytes {
                return None;
            }
        }
        (frames == needed).then_some(cursor.seq)
    }

    /// Drops the oldest frames that neither the replay window nor any subscriber within
    /// its queue limit needs, and cuts subscribers that needed them.
    fn evict(&mut self, limits: &EventLimits, metrics: &Metrics) {
        let mut evicted_to = None;
        while self.ring.len() > 1 {
            let front = &self.ring[0];
            let in_replay = self.ring.len() <= limits.replay_frames && self.ring_bytes <= limits.replay_bytes;
            // Bytes a subscriber still waiting for `front` has queued: front … head.
            let within_queue = self.ring_bytes <= limits.queue_bytes;
            if in_replay || within_queue {
                break;
            }
            let (seq, len) = (front.seq, front.bytes.len());
            self.ring.pop_front();
            self.ring_bytes -= len;
            evicted_to = Some(seq);
        }
        if let Some(seq) = evicted_to
            && self.min_cursor_hint < seq
        {
            // Someone may still need a frame that is gone: recompute the bound exactly and
            // cut whoever is behind the ring.
            let mut min = self.seq;
            for slot in self.subscribers.values_mut() {
                if slot.cursor < seq && !slot.cut {
                    slot.cut = true;
                    metrics.slow_client_cut();
                    slot.kill.cancel();
                    if let Some(w) = slot.waker.take() {
                        w.wake();
                    }
                } else if !slot.cut {
                    min = min.min(slot.cursor);
                }
            }
            self.min_cursor_hint = min;
        }
    }
}

/// A live subscription: a snapshot or replay first, then live frames. It ends when the
/// subscriber is cut or the session is closed. As a `Stream` it yields the native SSE
/// bytes (shared with every native subscriber); [`typed`](Self::typed) turns it into a
/// stream of the frames themselves, for a transport that maps them into another dialect
/// and must not parse what Spool produced.
pub struct Subscription {
    events: SessionEvents,
    id: u64,
    /// The snapshot taken at subscribe, sent first.
    first: Option<Arc<Frame>>,
    /// Held for the subscription's life (the per-user connection count); dropped with it.
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// Most frames a typed subscriber takes in one poll (the typed twin of [`MAX_CHUNK`]).
const MAX_TYPED: usize = 256;

impl Subscription {
    /// Attaches something released when the subscription ends.
    pub(crate) fn hold(&mut self, guard: impl std::any::Any + Send + Sync) {
        self.guard = Some(Box::new(guard));
    }

    /// Why the subscription ended, once it has (`None` while it is live): cut for
    /// lagging, or its session's stream closed for the reason given there.
    pub fn ended(&self) -> Option<Ended> {
        let inner = self.events.lock();
        match inner.subscribers.get(&self.id) {
            Some(slot) if slot.cut => Some(Ended::Lagged),
            _ => inner.closed,
        }
    }

    /// Whether the engine cut this subscriber for lagging: what a write racing the
    /// kill tokens asks (a closed stream is not the socket's fault).
    pub fn is_cut(&self) -> bool {
        self.ended() == Some(Ended::Lagged)
    }

    /// The same subscription, yielding typed frames in order instead of SSE bytes.
    pub fn typed(self) -> TypedSubscription {
        TypedSubscription(self)
    }

    /// Takes what comes next for this subscriber: a snapshot (handed to `snapshot`) or
    /// the ring entries after its cursor (handed to `frames`, under the lock, which
    /// returns its output and the seq of the last entry it took). The one place that
    /// moves a cursor, for both the native and the typed form.
    fn poll_take<T>(
        &mut self,
        cx: &mut Context<'_>,
        snapshot: impl FnOnce(Arc<Frame>) -> T,
        frames: impl FnOnce(&mut dyn Iterator<Item = &Entry>) -> (T, u64),
    ) -> Poll<Option<T>> {
        let metrics = &self.events.shared.metrics;
        if let Some(first) = self.first.take() {
            metrics.frames_sent(1);
            return Poll::Ready(Some(snapshot(first)));
        }
        let mut inner = self.events.lock();
        let inner = &mut *inner;
        let Some(slot) = inner.subscribers.get_mut(&self.id) else {
            return Poll::Ready(None);
        };
        if slot.cut || inner.closed.is_some() {
            return Poll::Ready(None);
        }
        if slot.resync && inner.awaiting.is_some() {
            slot.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if slot.resync {
            // The stream restarted (bus mode): a snapshot of where it is now.
            slot.resync = false;
            slot.cursor = inner.seq;
            let frame = inner.snapshot(&self.events.shared);
            metrics.frames_sent(1);
            return Poll::Ready(Some(snapshot(frame)));
        }
        if slot.cursor >= inner.seq {
            slot.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let first_seq = inner.ring.front().map_or(inner.seq + 1, |e| e.seq);
        if slot.cursor + 1 < first_seq {
            // Lagged past the ring: treated exactly like a slow client.
            slot.cut = true;
            metrics.slow_client_cut();
            slot.kill.cancel();
            return Poll::Ready(None);
        }
        let start = (slot.cursor + 1 - first_seq) as usize;
        let (out, last) = frames(&mut inner.ring.range(start..));
        metrics.frames_sent(last - slot.cursor);
        // The newest sampled frame of this batch, if it holds one (see
        // `FRAME_SAMPLE_EVERY`): integer arithmetic, no walk over the batch.
        let sampled = last / FRAME_SAMPLE_EVERY * FRAME_SAMPLE_EVERY;
        if sampled > slot.cursor
            && let Some(published) = inner.ring.get((sampled - first_seq) as usize).and_then(|e| e.published)
        {
            metrics.frame_delivered(published.elapsed());
        }
        slot.cursor = last;
        Poll::Ready(Some(out))
    }
}

impl Stream for Subscription {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let out = self.poll_take(
            cx,
            |snapshot| snapshot.to_sse(),
            |entries| {
                let head = entries.next().expect("cursor < seq, so the ring holds the next frame");
                let mut last = head.seq;
                let out = match entries.next() {
                    // One frame ready: share its bytes without copying.
                    None => head.bytes.clone(),
                    Some(second) => {
                        let mut buf = BytesMut::with_capacity(MAX_CHUNK.min(head.bytes.len() * 8));
                        buf.extend_from_slice(&head.bytes);
                        buf.extend_from_slice(&second.bytes);
                        last = second.seq;
                        for entry in entries {
                            if buf.len() + entry.bytes.len() > MAX_CHUNK {
                                break;
                            }
                            buf.extend_from_slice(&entry.bytes);
                            last = entry.seq;
                        }
                        buf.freeze()
                    }
                };
                (out, last)
            },
        );
        if let Poll::Ready(Some(bytes)) = &out {
            self.events.shared.metrics.bytes_sent(bytes.len() as u64);
        }
        out
    }
}

/// A [`Subscription`] that yields the frames themselves, in order, a batch per poll:
/// the snapshot alone, or up to [`MAX_TYPED`] frames that follow one another. The
/// frames are the ring's own (`Arc`), so a transport maps them without a copy or a
/// parse.
pub struct TypedSubscription(Subscription);

impl TypedSubscription {
    /// See [`Subscription::ended`].
    pub fn ended(&self) -> Option<Ended> {
        self.0.ended()
    }
}

impl Stream for TypedSubscription {
    type Item = Vec<Arc<Frame>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_take(
            cx,
            |snapshot| vec![snapshot],
            |entries| {
                let frames: Vec<Arc<Frame>> = entries.take(MAX_TYPED).map(|e| e.frame.clone()).collect();
                let last = frames.last().expect("cursor < seq, so the ring holds the next frame").seq;
                (frames, last)
            },
        )
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut inner = self.events.lock();
        if let Some(slot) = inner.subscribers.remove(&self.id) {
            inner.interactive -= usize::from(slot.interactive);
            self.events.shared.metrics.session_streams(-1);
        }
        let count = inner.subscribers.len();
        drop(inner);
        self.events.shared.count.send_replace(count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::initial_state;
    use futures::{FutureExt, StreamExt};
    use spool_protocol::sse::Decoder;
    use spool_protocol::*;

    fn events(limits: EventLimits) -> SessionEvents {
        let session = Session {
            id: SessionId::new(),
            project_id: ProjectId::new(),
            owner_id: UserId::new(),
            title: "t".into(),
            title_set: true,
            archived: false,
            permissions: vec![],
            model: None,
            mode: Default::default(),
            read_index: None,
            created_at: 0,
            updated_at: 0,
        };
        SessionEvents::new(session.id.clone(), initial_state(session, vec![], 0), limits)
    }

    fn publish_n(ev: &SessionEvents, n: usize, payload: usize) {
        for _ in 0..n {
            ev.publish_body(FrameBody::RunAccepted { request_id: "x".repeat(payload), run_id: RunId::new() });
        }
    }

    /// Everything the subscription has ready now, decoded into frames.
    fn drain(sub: &mut Subscription) -> (Vec<Frame>, bool) {
        let mut dec = Decoder::new();
        let mut frames = Vec::new();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            match Pin::new(&mut *sub).poll_next(&mut cx) {
                Poll::Ready(Some(bytes)) => {
                    for ev in dec.push(&bytes) {
                        let frame: Frame = serde_json::from_str(&ev.data).unwrap();
                        assert_eq!(ev.id, Some(frame.cursor().to_string()));
                        frames.push(frame);
                    }
                }
                Poll::Ready(None) => return (frames, true),
                Poll::Pending => return (frames, false),
            }
        }
    }

    fn cursor(ev: &SessionEvents, seq: u64) -> Cursor {
        Cursor { stream_id: ev.stream_id(), seq }
    }

    #[test]
    fn replays_exactly_the_missed_frames_within_the_buffer() {
        let ev = events(EventLimits::default());
        publish_n(&ev, 10, 10);
        let (mut sub, start) = ev.subscribe(Some(&cursor(&ev, 4)), CancellationToken::new(), false);
        assert_eq!(start, Start::Replay { from_seq: 4, frames: 6 });
        let (frames, ended) = drain(&mut sub);
        assert!(!ended);
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), (5..=10).collect::<Vec<_>>());
        publish_n(&ev, 1, 10);
        assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![11]);
    }

    #[test]
    fn unusable_cursors_get_one_snapshot_at_the_current_seq() {
        let ev = events(EventLimits::default());
        publish_n(&ev, 300, 10);
        let other = Cursor { stream_id: StreamId::new(), seq: 299 };
        for (c, why) in [
            (Some(cursor(&ev, 10)), "older than the 256-frame buffer"),
            (Some(other), "foreign stream"),
            (Some(cursor(&ev, 301)), "ahead of seq"),
            (None, "no cursor"),
        ] {
            let (mut sub, start) = ev.subscribe(c.as_ref(), CancellationToken::new(), false);
            assert_eq!(start, Start::Snapshot { seq: 300 }, "{why}");
            let (frames, _) = drain(&mut sub);
            assert_eq!(frames.len(), 1, "{why}");
            assert_eq!(frames[0].seq, 300);
            assert!(matches!(frames[0].body, FrameBody::Snapshot { .. }), "{why}");
        }
        // The oldest frame still replayable: 256 frames behind.
        let (_, start) = ev.subscribe(Some(&cursor(&ev, 44)), CancellationToken::new(), false);
        assert_eq!(start, Start::Replay { from_seq: 44, frames: 256 });
        // A client at the current seq missed nothing: zero frames, then live.
        let (mut sub, start) = ev.subscribe(Some(&cursor(&ev, 300)), CancellationToken::new(), false);
        assert_eq!(start, Start::Replay { from_seq: 300, frames: 0 });
        assert_eq!(drain(&mut sub), (Vec::new(), false));
        publish_n(&ev, 1, 10);
        assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![301]);
    }

    #[test]
    fn replay_window_is_also_bounded_by_bytes() {
        let ev = events(EventLimits { replay_frames: 256, replay_bytes: 4096, queue_bytes: 1 << 20 });
        publish_n(&ev, 20, 400);
        let (_, start) = ev.subscribe(Some(&cursor(&ev, 5)), CancellationToken::new(), false);
        assert_eq!(start, Start::Snapshot { seq: 20 });
        let (_, start) = ev.subscribe(Some(&cursor(&ev, 15)), CancellationToken::new(), false);
        assert!(matches!(start, Start::Replay { .. }));
    }

    #[test]
    fn a_lagging_subscriber_is_cut_while_a_reading_one_gets_every_frame() {
        let limits = EventLimits { replay_frames: 16, replay_bytes: 1 << 20, queue_bytes: 16 * 1024 };
        let ev = events(limits);
        let slow_kill = CancellationToken::new();
        let (mut slow, _) = ev.subscribe(None, slow_kill.clone(), false);
        let (mut fast, _) = ev.subscribe(None, CancellationToken::new(), false);
        drain(&mut slow);
        let mut seen = drain(&mut fast).0.len();
        for _ in 0..200 {
            publish_n(&ev, 1, 500);
            seen += drain(&mut fast).0.len();
        }
        assert_eq!(seen, 201, "snapshot plus every published frame");
        assert!(slow_kill.is_cancelled(), "the lagging subscriber's connection is killed");
        assert!(drain(&mut slow).1, "and its stream ends");
        assert!(slow.is_cut() && !fast.is_cut(), "it knows it was cut, the reader that it was not");
        assert_eq!((slow.ended(), fast.ended()), (Some(Ended::Lagged), None));
        // The ring stays bounded by the queue limit, not by the slow reader.
        let inner = ev.lock();
        assert!(inner.ring_bytes <= limits.queue_bytes + 1024, "{}", inner.ring_bytes);
        assert_eq!(inner.subscribers.len(), 2);
    }

    #[test]
    fn a_run_subscription_starts_at_the_clients_last_event_or_a_snapshot_at_the_runs_count() {
        let ev = events(EventLimits::default());
        let run = RunId::new();
        let delta = |i: usize| FrameBody::LoopEvent {
            run_id: run.clone(),
            message_index: Some(1),
            message_id: None,
            event: AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::TextDelta { content_index: 0, offset: i, delta: "w".into() },
            },
        };
        publish_n(&ev, 3, 10);
        ev.publish_body(FrameBody::RunAccepted { request_id: "r".into(), run_id: run.clone() });
        for i in 0..10 {
            ev.publish_body(delta(i));
        }
        // Event 6 is the sixth frame of the run (seq 9): the replay starts after it.
        let (mut sub, start) = ev.subscribe_from_run(&run, RunAfter::Seq(6), CancellationToken::new());
        assert_eq!(start.from, RunFrom::Replay(RunCount::after(run.clone(), 6)));
        assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), (10..=14).collect::<Vec<_>>());
        // From the start: the frame before `run.accepted`.
        let (mut sub, _) = ev.subscribe_from_run(&run, RunAfter::Seq(0), CancellationToken::new());
        assert_eq!(drain(&mut sub).0.first().map(|f| f.seq), Some(4));
        // 300 deltas later, event 6 is gone: a snapshot, at the run's count.
        for i in 10..310 {
            ev.publish_body(delta(i));
        }
        let (mut sub, start) = ev.subscribe_from_run(&run, RunAfter::Seq(6), CancellationToken::new());
        let RunFrom::Snapshot(Some(count)) = &start.from else { panic!("{start:?}") };
        assert_eq!(count.sequence(), 311);
        assert!(matches!(drain(&mut sub).0[0].body, FrameBody::Snapshot { .. }));
        // A run this stream never saw start: a snapshot, numbers unknown.
        let (_, start) = ev.subscribe_from_run(&RunId::new(), RunAfter::Seq(6), CancellationToken::new());
        assert_eq!(start.from, RunFrom::Snapshot(None));
    }

    #[test]
    fn a_parked_run_counted_on_after_a_reload_replays_from_its_interrupt() {
        let ev = events(EventLimits::default());
        let run = RunId::new();
        let approval = ApprovalId::new();
        publish_n(&ev, 2, 10);
        // Loaded after a restart: the run's events 1‥7 (7 its interrupt) are no frames here.
        ev.resume_run_count(RunCount::parked(run.clone(), 7, approval.clone()));
        publish_n(&ev, 1, 10);
        let start_tool = AgentEvent::ToolExecutionStart {
            tool_call_id: "c".into(),
            tool_name: "write".into(),
            args: serde_json::Value::Null,
        };
        ev.publish_body(FrameBody::LoopEvent {
            run_id: run.clone(),
            message_index: None,
            message_id: None,
            event: start_tool,
        });
        // The continuation numbers on from the interrupt, and a client with it replays
        // every frame counted since, by sequence or by the approval it decided.
        for after in [RunAfter::Seq(7), RunAfter::Interrupt(approval)] {
            let (mut sub, start) = ev.subscribe_from_run(&run, after, CancellationToken::new());
            assert_eq!((start.after, &start.from), (7, &RunFrom::Replay(RunCount::after(run.clone(), 7))));
            let frames = drain(&mut sub).0;
            assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), [3, 4]);
            let mut count = RunCount::after(run.clone(), 7);
            assert_eq!(frames.iter().filter_map(|f| count.step(&f.body)).collect::<Vec<_>>(), [8]);
        }
    }

    #[tokio::test]
    async fn close_ends_streams_and_drop_unregisters() {
        let ev = events(EventLimits::default());
        let kill = CancellationToken::new();
        let (mut sub, _) = ev.subscribe(None, kill.clone(), true);
        assert!(sub.next().await.is_some());
        let (other, _) = ev.subscribe(None, CancellationToken::new(), false);
        assert_eq!(ev.interactive_views(), 1);
        drop(other);
        assert_eq!(ev.subscriber_count(), 1);
        assert_eq!(*ev.watch_subscribers().borrow(), 1);
        let waiter = tokio::spawn(async move { (sub.next().await, sub) });
        tokio::task::yield_now().await;
        ev.close(Ended::SessionDeleted);
        let (last, sub) = waiter.await.unwrap();
        assert_eq!(last, None);
        assert!(kill.is_cancelled());
        assert!(!sub.is_cut(), "closed, not cut");
        assert_eq!(sub.ended(), Some(Ended::SessionDeleted));
        assert!(!ev.publish_body(FrameBody::RunAccepted { request_id: "r".into(), run_id: RunId::new() }));
    }

    /// Every way the engine closes a stream reaches its subscribers, native and typed,
    /// as the reason it was closed with; a subscriber cut before keeps its own.
    #[tokio::test]
    async fn a_closed_stream_tells_each_subscriber_why() {
        for why in [Ended::SessionDeleted, Ended::Unloaded, Ended::Shutdown] {
            let limits = EventLimits { replay_frames: 4, replay_bytes: 1 << 20, queue_bytes: 4 * 1024 };
            let ev = events(limits);
            let (mut native, _) = ev.subscribe(None, CancellationToken::new(), false);
            let (typed, _) = ev.subscribe(None, CancellationToken::new(), false);
            let mut typed = typed.typed();
            let (mut lagging, _) = ev.subscribe(None, CancellationToken::new(), false);
            drain(&mut native);
            drain(&mut lagging);
            assert!(typed.next().await.is_some());
            for _ in 0..40 {
                publish_n(&ev, 1, 500);
                drain(&mut native);
                while typed.next().now_or_never().flatten().is_some() {}
            }
            assert_eq!((native.ended(), typed.ended()), (None, None), "live: no reason yet");
            ev.close(why);
            ev.close(Ended::Shutdown);
            assert!(drain(&mut native).1 && typed.next().await.is_none(), "{why:?}: both end");
            assert_eq!((native.ended(), typed.ended()), (Some(why), Some(why)), "the first reason stays");
            assert_eq!(lagging.ended(), Some(Ended::Lagged), "{why:?}: cut before the close");
            let (late, _) = ev.subscribe(None, CancellationToken::new(), false);
            assert_eq!(late.ended(), Some(why), "subscribed after the close");
        }
    }

    #[test]
    fn a_published_loop_event_changes_the_state_by_its_fold() {
        let ev = events(EventLimits::default());
        let run = RunId::new();
        let frame = |event| FrameBody::LoopEvent { run_id: run.clone(), message_index: None, message_id: None, event };
        let (tool_call_id, tool_name) = ("c1".to_owned(), "bash".to_owned());
        let args = serde_json::json!({"command": "ls"});
        ev.publish_body(frame(AgentEvent::ToolExecutionStart {
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            args,
        }));
        assert_eq!(
            ev.state().1.tool_executions["c1"].status,
            frame::ToolStatus::Running,
            "a snapshot shows it running"
        );
        ev.publish_body(frame(AgentEvent::ToolExecutionEnd {
            tool_call_id,
            tool_name,
            result: "a.txt".into(),
            is_error: false,
        }));
        let (_, state) = ev.state();
        assert_eq!(state.tool_executions["c1"].status, frame::ToolStatus::Success);
        assert_eq!(state.tool_executions["c1"].result.as_deref(), Some("a.txt"));
    }
}
