//! A subscriber's side of a session stream: a cursor into the shared ring plus a
//! waker, not a task or a channel. `Subscription` yields the native SSE bytes;
//! `TypedSubscription` the frames themselves. Both take what comes next through one
//! `poll_take`, the only place that moves a cursor.

use super::{Ended, Entry, MAX_CHUNK, SessionEvents};
use crate::metrics::FRAME_SAMPLE_EVERY;
use bytes::{Bytes, BytesMut};
use futures::Stream;
use spool_protocol::frame::Frame;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A live subscription: a snapshot or replay first, then live frames. It ends when the
/// subscriber is cut or the session is closed. As a `Stream` it yields the native SSE
/// bytes (shared with every native subscriber); [`typed`](Self::typed) turns it into a
/// stream of the frames themselves, for a transport that maps them into another dialect
/// and must not parse what Spool produced.
pub struct Subscription {
    pub(super) events: SessionEvents,
    pub(super) id: u64,
    /// Frames read from the run frame log, sent before anything else: the ones after
    /// the client's cursor that had left the ring (see `SessionEvents::subscribe_logged`).
    pub(super) logged: VecDeque<Arc<Frame>>,
    /// The snapshot taken at subscribe, sent first (after `logged`).
    pub(super) first: Option<Arc<Frame>>,
    /// Held for the subscription's life (the per-user connection count); dropped with it.
    pub(super) guard: Option<Box<dyn std::any::Any + Send + Sync>>,
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

    /// Says whether the page showing this view is visible (the web UI tells its socket
    /// at `visibilitychange`): a hidden page's answerer is not one a person sees now.
    pub fn set_visible(&self, visible: bool) {
        let mut inner = self.events.lock();
        let changed = match inner.subscribers.get_mut(&self.id) {
            Some(slot) if slot.visible != visible => {
                slot.visible = visible;
                true
            }
            _ => false,
        };
        drop(inner);
        if changed {
            self.events.shared.views.send_modify(|n| *n += 1);
        }
    }

    /// The same subscription, yielding typed frames in order instead of SSE bytes.
    pub fn typed(self) -> TypedSubscription {
        TypedSubscription(self)
    }

    /// Takes what comes next for this subscriber: logged frames (handed to `logged`,
    /// which takes a batch off the front), a snapshot (handed to `snapshot`) or the ring
    /// entries after its cursor (handed to `frames`, under the lock, which returns its
    /// output and the seq of the last entry it took). The one place that moves a
    /// cursor, for both the native and the typed form.
    fn poll_take<T>(
        &mut self,
        cx: &mut Context<'_>,
        logged: impl FnOnce(&mut VecDeque<Arc<Frame>>) -> T,
        snapshot: impl FnOnce(Arc<Frame>) -> T,
        frames: impl FnOnce(&mut dyn Iterator<Item = &Entry>) -> (T, u64),
    ) -> Poll<Option<T>> {
        let metrics = &self.events.shared.metrics;
        if !self.logged.is_empty() {
            // The subscriber's cursor already stands after the last of them.
            let before = self.logged.len();
            let out = logged(&mut self.logged);
            metrics.frames_sent((before - self.logged.len()) as u64);
            return Poll::Ready(Some(out));
        }
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
            |logged| {
                let mut buf = BytesMut::new();
                while let Some(frame) = logged.front() {
                    let bytes = frame.to_sse();
                    if !buf.is_empty() && buf.len() + bytes.len() > MAX_CHUNK {
                        break;
                    }
                    buf.extend_from_slice(&bytes);
                    logged.pop_front();
                }
                buf.freeze()
            },
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
            |logged| {
                let take = logged.len().min(MAX_TYPED);
                logged.drain(..take).collect()
            },
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
            inner.interactive -= usize::from(slot.viewer.answers);
            self.events.shared.metrics.session_streams(-1);
        }
        let count = inner.subscribers.len();
        drop(inner);
        self.events.shared.count.send_replace(count);
        self.events.shared.views.send_modify(|n| *n += 1);
    }
}
