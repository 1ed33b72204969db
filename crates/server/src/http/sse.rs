//! What every Server-Sent Events transport shares: the response headers, the
//! `Last-Event-ID` a reconnecting client sends, the heartbeat in silences, and holding
//! the user's stream permit for as long as the body lives.
//!
//! The native session stream, the list stream, OpenCode's `/event` and the run stream
//! all answer through [`response`]; none uses axum's `Sse` type, which would encode
//! every event again per subscriber where the engine and `dialect/shared.rs` already
//! hand over encoded, shared `Bytes`. Cutting a slow client is not here: a subscriber
//! that falls behind is cut where its frames are queued (the engine's ring, or
//! `dialect::shared::Follow` for a mapped dialect), and its body then ends.

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// The header a reconnecting `EventSource` sends with the id of the last event it had.
pub(crate) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// Tells nginx-style proxies not to buffer the stream.
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// `Content-Type` of the native, list and OpenCode streams.
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
/// `Content-Type` of the run stream, as seed 003 writes it.
pub(crate) const EVENT_STREAM_UTF8: &str = "text/event-stream; charset=utf-8";

/// The `Last-Event-ID` header, when present and not blank.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// An SSE response over `body` (encoded events), with the headers every stream sends:
/// no caching or transforming, no proxy buffering.
pub(crate) fn response<S>(content_type: &'static str, body: S) -> Response
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let headers = [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache, no-transform"), (X_ACCEL_BUFFERING, "no")];
    (headers, Body::from_stream(body)).into_response()
}

/// A heartbeat timer: first tick one period from now, and after a stall one tick, not
/// a burst to catch up.
pub(crate) fn heartbeat(every: Duration) -> Interval {
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// `stream`, holding `permit` (one of the user's counted streams) until it is dropped:
/// when the connection goes, the body goes, and the count with it.
pub(crate) fn holding<S: Stream>(stream: S, permit: spool_engine::StreamPermit) -> impl Stream<Item = S::Item> {
    use futures::StreamExt;
    stream.map(move |item| {
        let _held = &permit;
        item
    })
}

/// Pre-encoded events with `beat` written whenever the heartbeat interval elapses.
/// Ends when `events` ends (the subscriber was cut or the stream closed).
///
/// The interval is not reset by events: on a busy stream an extra heartbeat every
/// period costs one small write, while resetting it would cost a clock read per batch
/// on the hottest path there is.
pub(crate) struct WithHeartbeat<S> {
    events: S,
    ticks: Interval,
    beat: Bytes,
}

impl<S> WithHeartbeat<S> {
    pub(crate) fn new(events: S, every: Duration, beat: Bytes) -> Self {
        Self { events, ticks: heartbeat(every), beat }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for WithHeartbeat<S> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.events).poll_next(cx) {
            Poll::Ready(Some(events)) => return Poll::Ready(Some(Ok(events))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match self.ticks.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(self.beat.clone()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The snapshot a subscription without a replay starts with (the run-following
/// dialects draw a run from it when its frames have left the buffer).
pub(crate) fn first_frame(
    subscription: &mut spool_engine::TypedSubscription,
) -> Option<std::sync::Arc<spool_protocol::frame::Frame>> {
    use futures::{FutureExt, StreamExt};
    subscription.next().now_or_never()??.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use futures::{FutureExt, StreamExt};

    /// What the stream has ready now, without waiting.
    fn ready(stream: &mut (impl Stream<Item = Result<Bytes, Infallible>> + Unpin)) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Some(Some(Ok(bytes))) = stream.next().now_or_never() {
            out.push(bytes);
        }
        out
    }

    /// On tokio's paused clock: the first beat one period after the start, events in
    /// between do not move it, and a stall of several periods gives one beat, not a burst.
    #[tokio::test(start_paused = true)]
    async fn a_beat_comes_every_period_and_once_after_a_stall() {
        let (tx, rx) = mpsc::unbounded();
        let beat = Bytes::from_static(b"beat");
        let mut stream = WithHeartbeat::new(rx, Duration::from_secs(10), beat.clone());
        assert!(ready(&mut stream).is_empty());
        tokio::time::advance(Duration::from_millis(9_999)).await;
        tx.unbounded_send(Bytes::from_static(b"event")).expect("send");
        assert_eq!(ready(&mut stream), [Bytes::from_static(b"event")], "no beat before the period");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(ready(&mut stream), std::slice::from_ref(&beat), "the beat at the period, events or not");
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(ready(&mut stream), std::slice::from_ref(&beat), "one beat after a stall");
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(ready(&mut stream).is_empty(), "the next one period after the last");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(ready(&mut stream), [beat]);
        drop(tx);
        assert!(stream.next().await.is_none(), "ends with its events");
    }
}
