//! The replay ring of a session stream: how a frame enters it (`Shared::push`), how
//! long it stays (`Inner::evict`, which also cuts a subscriber the ring left behind),
//! and what a new or reconnecting subscriber starts from (`Inner::replay_from`,
//! `Inner::snapshot`). The limits it keeps are described in the module doc of `events`.

use super::replication::BusSide;
use super::{Entry, EventLimits, Inner, Shared};
use crate::framebus::Watchers;
use crate::metrics::{FRAME_SAMPLE_EVERY, Metrics};
use crate::run_sequence::RunSequences;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{Cursor, RunId, SessionId, StreamId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
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
            log: None,
        };
        let count = tokio::sync::watch::Sender::new(0);
        let views = tokio::sync::watch::Sender::new(0);
        Self { session_id, limits, bus, count, views, lists, metrics, inner: Mutex::new(inner) }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This node's views of the session, counted.
    pub(super) fn watchers(&self) -> Watchers {
        let inner = self.lock();
        let mut watchers = Watchers::default();
        for slot in inner.subscribers.values() {
            watchers.streams += 1;
            watchers.interactive += u64::from(slot.viewer.answers);
            watchers.visible += u64::from(slot.viewer.answers && slot.visible);
            watchers.kinds[slot.viewer.kind.index()] += 1;
        }
        watchers
    }

    pub(super) fn cursor(&self) -> Cursor {
        let inner = self.lock();
        Cursor { stream_id: inner.stream_id.clone(), seq: inner.seq }
    }

    /// Appends a frame at `seq` to the ring and collects the subscribers to wake.
    /// `own`: this instance published the frame (always, without a bus); a run whose
    /// `run.accepted` is its own is the run this node executes, and only that node logs
    /// it (see [`crate::run_log`]).
    pub(super) fn push(
        &self,
        inner: &mut Inner,
        body: FrameBody,
        stream_id: StreamId,
        seq: u64,
        own: bool,
        wake: &mut Vec<Waker>,
    ) {
        let mark = inner.runs.count(&body);
        let frame = Arc::new(Frame { body, session_id: self.session_id.clone(), stream_id, seq });
        if let Some(log) = inner.log.as_mut() {
            log.frame(&frame, mark.as_ref(), &inner.runs, own);
        }
        let bytes = frame.to_sse();
        let published = (seq.is_multiple_of(FRAME_SAMPLE_EVERY) && self.metrics.is_on()).then(Instant::now);
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
    pub(super) fn view(&self) -> &SessionState {
        self.mirror.as_ref().unwrap_or(&self.state)
    }

    /// The snapshot frame at the current seq (serialized by whoever takes it, outside
    /// the lock).
    pub(super) fn snapshot(&self, shared: &Shared) -> Arc<Frame> {
        Arc::new(Frame {
            body: FrameBody::Snapshot { state: Box::new(self.view().clone()) },
            session_id: shared.session_id.clone(),
            stream_id: self.stream_id.clone(),
            seq: self.seq,
        })
    }

    pub(super) fn cursor_at(&self, seq: u64) -> Cursor {
        Cursor { stream_id: self.stream_id.clone(), seq }
    }

    /// The cursor (a seq) to replay `run`'s frames from after its event `after`: that
    /// event's frame, or for 0 the frame before the run's first. `None` when the frame
    /// has left the ring.
    pub(super) fn run_cursor(&self, run: &RunId, after: u64) -> Option<u64> {
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
    pub(super) fn replay_from(&self, shared: &Shared, cursor: Option<&Cursor>) -> Option<u64> {
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
    pub(super) fn evict(&mut self, limits: &EventLimits, metrics: &Metrics) {
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
