//! Bus mode: a session's ring and state replicated through a [`FrameBus`], so every
//! node serves the same stream (see the parent module's doc, "Bus mode", and
//! `framebus.rs`). The ring itself is in `events/mod.rs`; this file is what feeds it
//! from the bus and what feeds the bus from the session: the per-session publisher,
//! listener and watcher-report tasks, folding the bus's frames in, rebuilding on a
//! reset, and filling a ring's front from the bus's log for a cursor older than it.

use super::{BUS_LAG_WAIT, Entry, EventLimits, SessionEvents, Shared};
use crate::framebus::{self, BusItem, FrameBus, Watchers};
use crate::metrics::Metrics;
use crate::run_sequence::RunSequences;
use crate::view::apply_frame;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{Cursor, SessionId, StreamId};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A bus-mode session's link to its publisher and listener tasks.
pub(super) struct BusSide {
    pub(super) bus: Arc<dyn FrameBus>,
    /// This instance's id in the payloads it publishes.
    pub(super) origin: u64,
    pub(super) outbound: UnboundedSender<Outbound>,
    /// Stops the listener task (on close or drop).
    pub(super) stop: CancellationToken,
    /// The number of the last own body the mirror has folded (or a snapshot covered).
    pub(super) echoed: tokio::sync::watch::Sender<u64>,
}

/// What the publisher task is handed.
pub(super) enum Outbound {
    /// A frame body, numbered among this instance's own.
    Body(u64, Box<FrameBody>),
    /// Publish a full snapshot of the working state now.
    Resync,
}

impl SessionEvents {
    /// Bus mode: a session followed through `bus` from `opened` (see the module doc).
    /// `state` is the store's, read after `opened` was taken, so the frames the bus
    /// delivers from there on apply to it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn followed(
        state: SessionState,
        limits: EventLimits,
        lists: crate::lists::ListNotifier,
        metrics: Metrics,
        bus: Arc<dyn FrameBus>,
        follower: Arc<dyn Follower>,
        opened: Opened,
        node: String,
    ) -> Self {
        let Opened { session, listener, head } = opened;
        let (project, owner) = (state.session.project_id.clone(), state.session.owner_id.clone());
        let (outbound, queue) = unbounded_channel();
        let side = BusSide {
            bus: bus.clone(),
            origin: rand::random(),
            outbound,
            stop: CancellationToken::new(),
            echoed: tokio::sync::watch::Sender::new(0),
        };
        let stop = side.stop.clone();
        let shared = Arc::new(Shared::new(
            session.clone(),
            state,
            limits,
            Some((lists, project, owner)),
            metrics,
            head.stream_id.clone(),
            head.seq,
            Some(side),
        ));
        let weak = Arc::downgrade(&shared);
        tokio::spawn(publish_task(weak.clone(), session.clone(), bus.clone(), queue, head.stream_id));
        let views = shared.views.subscribe();
        tokio::spawn(report_task(weak.clone(), session.clone(), bus.clone(), node, views, stop.clone()));
        tokio::spawn(follow_task(weak, session, bus, follower, listener, stop));
        Self { shared }
    }

    /// Bus mode: how many of this instance's own frames went to the bus and have not
    /// come back through it yet (queued for the publisher, in flight, or published and
    /// not yet heard on the PUB/SUB link). `None` without a bus.
    pub(crate) fn bus_lag(&self) -> Option<u64> {
        let bus = self.shared.bus.as_ref()?;
        let sent = self.lock().sent;
        Some(sent.saturating_sub(*bus.echoed.borrow()))
    }

    /// Bus mode: when `cursor` is of this stream but older than the ring holds (this node
    /// began following the session after the client's frames, which perhaps another
    /// node served), fills the ring's front from the bus's log, so the subscription that
    /// follows replays instead of taking a snapshot. On any failure it simply does not.
    pub async fn backfill(&self, cursor: &Cursor) {
        let Some(side) = &self.shared.bus else { return };
        self.wait_for_bus(cursor).await;
        {
            let inner = self.lock();
            let front = inner.ring.front().map_or(inner.seq + 1, |e| e.seq);
            if cursor.stream_id != inner.stream_id
                || cursor.seq + 1 >= front
                || inner.seq - cursor.seq > self.shared.limits.replay_frames as u64
            {
                return;
            }
        }
        let payloads = match side.bus.replay(&self.shared.session_id, cursor).await {
            Ok(Some(payloads)) => payloads,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(session = %self.shared.session_id, %error, "cannot read the frame bus's log");
                return;
            }
        };
        let mut inner = self.lock();
        let front = inner.ring.front().map_or(inner.seq + 1, |e| e.seq);
        if cursor.stream_id != inner.stream_id || cursor.seq + 1 >= front {
            return;
        }
        let wanted = (front - cursor.seq - 1) as usize;
        if payloads.len() < wanted {
            return;
        }
        let mut entries = Vec::with_capacity(wanted);
        for (seq, payload) in (cursor.seq + 1..front).zip(payloads) {
            let Ok((_, _, body)) = framebus::decode(&payload) else { return };
            let stream_id = cursor.stream_id.clone();
            let frame = Arc::new(Frame { body, session_id: self.shared.session_id.clone(), stream_id, seq });
            // Older than the counting: these frames carry no run sequence.
            entries.push(Entry { seq, bytes: frame.to_sse(), frame, mark: None, published: None });
        }
        for entry in entries.into_iter().rev() {
            inner.ring_bytes += entry.bytes.len();
            inner.ring.push_front(entry);
        }
    }

    /// Bus mode: a cursor of this stream ahead of this node's seq comes from a node the
    /// bus reached first; the frames are on their way here. Waits for them (at most
    /// [`BUS_LAG_WAIT`]) instead of answering with a snapshot older than what the client
    /// already has. Polls: this runs once per reconnect that is ahead, which is rare, and
    /// keeps the fold path free of another notifier.
    async fn wait_for_bus(&self, cursor: &Cursor) {
        let deadline = tokio::time::Instant::now() + BUS_LAG_WAIT;
        loop {
            {
                let inner = self.lock();
                if inner.closed.is_some() || cursor.stream_id != inner.stream_id || cursor.seq <= inner.seq {
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Bus mode: for a session this node begins following, asks the node running it (if
    /// any) for a full snapshot frame, which carries what the store lacks (the text
    /// streamed so far); snapshots for new subscribers wait for it.
    pub(crate) async fn catch_up_with_runner(&self, follower: &dyn Follower) {
        if self.shared.bus.is_some() {
            self.shared.catch_up_with_runner(follower).await;
        }
    }

    /// Bus mode: asks the publisher for a full snapshot frame of the working state (the
    /// node running the session does this when another node lost its place).
    pub(crate) fn resync(&self) {
        if let Some(bus) = &self.shared.bus {
            let _ = bus.outbound.send(Outbound::Resync);
        }
    }
}

/// What a followed session asks of the engine (bus mode).
#[async_trait::async_trait]
pub(crate) trait Follower: Send + Sync + 'static {
    /// The session's state as the store has it now, for a view that lost its place.
    async fn reload(&self, session: &SessionId) -> Option<SessionState>;
    /// Whether this node executes a run of the session (its working state is then the
    /// truth, and a reload must not replace it).
    fn runs_here(&self, session: &SessionId) -> bool;
    /// Asks whichever node runs the session for a full snapshot frame; `false` when no
    /// node runs it (the store's view is then whole).
    async fn request_snapshot(&self, session: &SessionId) -> bool;
}

/// A session's listener, opened before the store is read (see [`SessionEvents::followed`]).
pub(crate) struct Opened {
    session: SessionId,
    listener: BoxStream<'static, BusItem>,
    head: Cursor,
}

impl Opened {
    /// Listens to `session` from the bus's head.
    pub async fn open(bus: &dyn FrameBus, session: &SessionId) -> Result<Self, framebus::BusFailure> {
        let mut listener = bus.listen(session, None).await?;
        match listener.next().await {
            Some(BusItem::Reset { cursor }) => Ok(Self { session: session.clone(), listener, head: cursor }),
            Some(BusItem::Frame { .. }) => Err("the bus began a listener without a cursor with a frame".into()),
            None => Err("the bus ended a new listener at once".into()),
        }
    }
}

/// Reconnect backoff of a session's bus tasks.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Most frames the publisher sends to the bus in one round trip.
const PUBLISH_BATCH: usize = 64;

/// Bus mode: hands the session's frame bodies to the bus in order, as many as are
/// queued (up to [`PUBLISH_BATCH`]) per round trip, so a fast model is not held to one
/// frame per Redis round trip. It replaces what is queued with one snapshot of the
/// working state when the bus lost its log (a publish lands in another epoch), when a
/// publish failed (its frames may be missing), and when asked. Ends when the
/// `SessionEvents` is gone and its queue is drained.
async fn publish_task(
    weak: Weak<Shared>,
    session: SessionId,
    bus: Arc<dyn FrameBus>,
    mut queue: UnboundedReceiver<Outbound>,
    mut epoch: StreamId,
) {
    let mut snapshot_due = false;
    let mut delay = RETRY_MIN;
    let mut batch: Vec<(u64, FrameBody)> = Vec::with_capacity(PUBLISH_BATCH);
    loop {
        batch.clear();
        let mut next = match snapshot_due {
            true => Some(Outbound::Resync),
            false => match queue.recv().await {
                Some(next) => Some(next),
                None => return,
            },
        };
        while let Some(item) = next.take() {
            match item {
                Outbound::Body(number, body) => batch.push((number, *body)),
                Outbound::Resync => {
                    let Some(shared) = weak.upgrade() else { return };
                    let inner = shared.lock();
                    // Everything queued is in the working state already: the snapshot
                    // has it.
                    let mut number = inner.sent;
                    while let Ok(queued) = queue.try_recv() {
                        if let Outbound::Body(n, _) = queued {
                            number = n;
                        }
                    }
                    batch.push((number, FrameBody::Snapshot { state: Box::new(inner.state.clone()) }));
                    break;
                }
            }
            if batch.len() < PUBLISH_BATCH {
                next = queue.try_recv().ok();
            }
        }
        let ends_in_snapshot = matches!(batch.last(), Some((_, FrameBody::Snapshot { .. })));
        let origin = match weak.upgrade() {
            Some(shared) => shared.bus.as_ref().map_or(0, |b| b.origin),
            None if ends_in_snapshot => return,
            // Gone, with bodies still queued: publish them (a settled run's last frames).
            None => 0,
        };
        snapshot_due = false;
        let payloads: Vec<Bytes> = batch.iter().map(|(number, body)| framebus::encode(origin, *number, body)).collect();
        match bus.publish(&session, &payloads).await {
            Ok(cursors) => {
                delay = RETRY_MIN;
                if let Some(last) = cursors.last()
                    && cursors.iter().any(|c| c.stream_id != epoch)
                {
                    // The bus lost the log: the frames before the new epoch are gone
                    // for whoever follows, so a whole snapshot follows.
                    tracing::info!(%session, "the frame bus restarted the session's stream; publishing a snapshot");
                    snapshot_due = !(ends_in_snapshot && last.stream_id == cursors[0].stream_id);
                    epoch = last.stream_id.clone();
                }
            }
            Err(error) => {
                tracing::warn!(%session, %error, "cannot publish frames; will publish a snapshot instead");
                snapshot_due = true;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Bus mode: keeps this node's entry of the session's watchers (see
/// [`FrameBus::set_watchers`]) current: rewritten shortly after the clients change, at
/// most once a [`WATCH_WRITE_GAP`], and every [`framebus::WATCH_REFRESH`]; removed when
/// the session is closed or dropped.
async fn report_task(
    weak: Weak<Shared>,
    session: SessionId,
    bus: Arc<dyn FrameBus>,
    node: String,
    mut count: tokio::sync::watch::Receiver<u64>,
    stop: CancellationToken,
) {
    // Clients come and go in bursts (a page reload, a thousand browsers): one write per
    // burst, shortly after it begins.
    const SETTLE: Duration = Duration::from_millis(50);
    let mut refresh = tokio::time::interval(framebus::WATCH_REFRESH);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut written = Watchers::default();
    let mut last_write: Option<Instant> = None;
    loop {
        let refreshing = tokio::select! {
            () = stop.cancelled() => break,
            changed = count.changed() => match changed {
                // A burst that lasts: a write a gap after the last one, with the counts
                // of that moment.
                Ok(()) => {
                    let settled = Instant::now() + SETTLE;
                    let due = last_write.map_or(settled, |at| settled.max(at + WATCH_WRITE_GAP));
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep_until(due) => false,
                    }
                }
                Err(_) => break,
            },
            _ = refresh.tick() => true,
        };
        // What changed while waiting is in the count taken now.
        count.borrow_and_update();
        let Some(shared) = weak.upgrade() else { break };
        let now = shared.watchers();
        drop(shared);
        // Unchanged (a reload within the wait) needs no write; a refresh keeps a live
        // entry from expiring.
        if now == written && !(refreshing && now != Watchers::default()) {
            continue;
        }
        last_write = Some(Instant::now());
        match bus.set_watchers(&session, &node, now).await {
            Ok(()) => {
                written = now;
                // The entry was just written: the next refresh is a full period away.
                refresh.reset();
            }
            Err(error) => tracing::warn!(%session, %error, "cannot record the session's watchers"),
        }
    }
    if written != Watchers::default()
        && let Err(error) = bus.set_watchers(&session, &node, Watchers::default()).await
    {
        tracing::warn!(%session, %error, "cannot clear the session's watchers; the entry will expire");
    }
}

/// The least time between two writes of one node's watchers entry for a session: a
/// burst of thousands of joins is a write a second, not one per settled change
/// (BENCHMARKS.md, "across nodes": those writes and the reads behind them timed Redis
/// out). Readers of the entry (presence, "nobody anywhere", "no person who could
/// answer") see a change a second later at most.
const WATCH_WRITE_GAP: Duration = Duration::from_secs(1);

/// Bus mode: folds the bus's frames for one session into the ring, the mirror and the
/// working state; rebuilds on `Reset`; listens again from its cursor when the bus ends
/// its listener. Ends when the session is closed or dropped.
async fn follow_task(
    weak: Weak<Shared>,
    session: SessionId,
    bus: Arc<dyn FrameBus>,
    follower: Arc<dyn Follower>,
    mut listener: BoxStream<'static, BusItem>,
    stop: CancellationToken,
) {
    let mut delay = RETRY_MIN;
    loop {
        let item = tokio::select! {
            () = stop.cancelled() => return,
            item = listener.next() => item,
        };
        let Some(shared) = weak.upgrade() else { return };
        let reset_at = match item {
            Some(BusItem::Frame { cursor, payload }) => {
                delay = RETRY_MIN;
                match framebus::decode(&payload) {
                    Ok((origin, number, body)) => {
                        if shared.fold(&cursor, origin, number, body) {
                            continue;
                        }
                        tracing::warn!(%session, %cursor, "a bus frame out of order; rebuilding the view");
                    }
                    Err(error) => tracing::warn!(%session, %error, "an unreadable bus frame; rebuilding the view"),
                }
                cursor
            }
            Some(BusItem::Reset { cursor }) => cursor,
            None => {
                // Cut for lagging, or the bus could not fill a gap: come back from here.
                let at = shared.cursor();
                drop(shared);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(RETRY_MAX);
                    match bus.listen(&session, Some(&at)).await {
                        Ok(again) => break listener = again,
                        Err(error) => tracing::warn!(%session, %error, "cannot listen to the frame bus; retrying"),
                    }
                }
                continue;
            }
        };
        drop(shared);
        let state = follower.reload(&session).await;
        let keep_working = follower.runs_here(&session);
        let Some(shared) = weak.upgrade() else { return };
        shared.reset(reset_at, state, keep_working);
        shared.catch_up_with_runner(&*follower).await;
    }
}

/// How long subscribers wait for a full snapshot frame before they take the store's view.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(3);

impl Shared {
    /// Bus mode: asks the node running the session for a full snapshot frame and holds
    /// new snapshots back until it comes (at most [`SNAPSHOT_WAIT`]). Without a run
    /// anywhere the store's view is whole, and nothing waits.
    async fn catch_up_with_runner(self: &Arc<Self>, follower: &dyn Follower) {
        let wait = {
            let mut inner = self.lock();
            inner.waits += 1;
            inner.awaiting = Some(inner.waits);
            inner.waits
        };
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(SNAPSHOT_WAIT).await;
            if let Some(shared) = weak.upgrade()
                && shared.stop_awaiting(wait)
            {
                tracing::warn!(session = %shared.session_id, "no snapshot frame came; clients get the store's view");
            }
        });
        if !follower.request_snapshot(&self.session_id).await {
            self.stop_awaiting(wait);
        }
    }

    /// Ends the wait `wait` if it is still on, releasing the subscribers held for it.
    fn stop_awaiting(&self, wait: u64) -> bool {
        let mut inner = self.lock();
        if inner.awaiting != Some(wait) {
            return false;
        }
        inner.awaiting = None;
        let wake: Vec<Waker> = inner.subscribers.values_mut().filter_map(|s| s.waker.take()).collect();
        drop(inner);
        wake.into_iter().for_each(Waker::wake);
        true
    }

    /// Folds one frame from the bus. `false` if it does not follow the last one.
    fn fold(&self, cursor: &Cursor, origin: u64, number: u64, body: FrameBody) -> bool {
        let Some(bus) = &self.bus else { return false };
        let mut wake = Vec::new();
        {
            let mut inner = self.lock();
            if inner.closed.is_some() {
                return true;
            }
            if cursor.stream_id != inner.stream_id || cursor.seq != inner.seq + 1 {
                return false;
            }
            let own = origin == bus.origin;
            if own {
                bus.echoed.send_if_modified(|n| {
                    let newer = number > *n;
                    *n = (*n).max(number);
                    newer
                });
            } else {
                apply_frame(&mut inner.state, &body);
            }
            if let Some(mirror) = &mut inner.mirror {
                apply_frame(mirror, &body);
            }
            if matches!(body, FrameBody::Snapshot { .. }) {
                // What the subscribers waiting for a snapshot were waiting for (`push`
                // wakes them).
                inner.awaiting = None;
            }
            self.push(&mut inner, body, cursor.stream_id.clone(), cursor.seq, own, &mut wake);
        }
        wake.into_iter().for_each(Waker::wake);
        true
    }

    /// Restarts the stream at `cursor` from the store's `state` (bus mode, `Reset`):
    /// the ring empties and every subscriber's next item is a snapshot.
    fn reset(&self, cursor: Cursor, state: Option<SessionState>, keep_working: bool) {
        let mut wake = Vec::new();
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.stream_id = cursor.stream_id;
        inner.seq = cursor.seq;
        inner.ring.clear();
        inner.ring_bytes = 0;
        // Frames may be missing from here: the run numbers are unknown, and a run being
        // logged here cannot be logged whole.
        inner.runs = RunSequences::default();
        if let Some(log) = inner.log.as_mut() {
            log.abandon();
        }
        inner.min_cursor_hint = cursor.seq;
        match state {
            Some(state) => {
                if !keep_working {
                    inner.state = state.clone();
                }
                inner.mirror = Some(state);
            }
            // The store did not answer: the old view, now at the new seq, is the best
            // there is until the snapshot frame comes.
            None => tracing::warn!(session = %self.session_id, "cannot reload a session's view after a bus reset"),
        }
        for slot in inner.subscribers.values_mut() {
            slot.resync = true;
            slot.cursor = cursor.seq;
            wake.extend(slot.waker.take());
        }
        self.metrics.snapshots(inner.subscribers.len() as u64);
        drop(guard);
        wake.into_iter().for_each(Waker::wake);
    }
}
