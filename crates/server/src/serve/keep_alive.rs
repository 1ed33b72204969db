//! HTTP/1.1 keep-alive connections watched between requests, so that an event stream
//! asked for on a connection that already served other requests (a browser's pooled
//! connection, an HTTPS client's) leaves hyper for the lean path too.
//!
//! hyper cannot hand a connection back while it serves a request, but it can while the
//! connection is idle between two: asked to shut down gracefully then, an HTTP/1.1
//! connection ends at once without writing a byte, and `into_parts` gives back the
//! socket and what hyper had read of it but not parsed. So the socket hyper reads is a
//! [`Rewind`] with a [`Watch`]: at each request boundary after the first, the bytes of
//! hyper's next read are looked at before hyper sees them. An event-stream request (the
//! test the connection's first request gets, [`event_stream::parse`]) is held back —
//! hyper's read stays pending — and the connection task is told ([`Watch::handoff`]); it
//! shuts hyper's connection down, takes the socket back and serves the stream on the
//! lean path. Any other bytes go to hyper as read, and are not looked at again until
//! the next boundary: a keep-alive request costs one parse of its head and nothing else.
//!
//! A boundary is certain, not guessed: every request hyper handed to the service has
//! had its response body sent to the end (or dropped) and its own body read to the end
//! ([`Tracked`]); only then is hyper's state idle, waiting for the next head. A request
//! body dropped unread (a refusal before reading it) is drained or the connection
//! closed by hyper, which nothing outside hyper can see end, so such a connection is
//! never watched again; nor is one that upgraded. Should hyper still hold bytes it read
//! itself (a client that pipelined a partial head), they come back in `into_parts`, and
//! the connection task puts them in front of the held bytes and lets a new hyper
//! connection serve the lot: nothing is lost or reordered either way.

use super::event_stream;
use axum::body::Body;
use bytes::{Bytes, BytesMut};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// What the service and the socket know of one hyper connection's requests.
#[derive(Debug, Default)]
pub struct Watch {
    // A std mutex: held for a few instructions, never across an `.await`; every user is
    // the one connection task, so it is never contended.
    state: Mutex<State>,
    handoff: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Responses not yet ended and request bodies not yet read to their end.
    busy: usize,
    /// A request was handed to the service since the socket's bytes were last looked at.
    dispatched: bool,
    /// Not watched any more: a request body was dropped unread, or the connection upgraded.
    tainted: bool,
}

impl Watch {
    pub fn new() -> Arc<Watch> {
        Arc::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned state is still a valid one.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// hyper handed a request to the service: its response holds the connection busy
    /// while the returned guard lives (it goes into the response body).
    pub fn dispatched(self: &Arc<Self>) -> Busy {
        let mut state = self.state();
        state.dispatched = true;
        state.busy += 1;
        Busy(self.clone())
    }

    /// This connection is never watched again (it upgraded, or hyper drains a body).
    pub fn stop(&self) {
        self.state().tainted = true;
    }

    /// Resolves when an event-stream request was held back from hyper.
    pub async fn handoff(&self) {
        self.handoff.notified().await
    }

    /// Whether hyper is between requests and the next bytes it reads start a request.
    fn at_boundary(&self) -> bool {
        let state = self.state();
        state.busy == 0 && state.dispatched && !state.tainted
    }

    /// The bytes read at a boundary went to hyper: nothing more is looked at until the
    /// next request has been served.
    fn passed(&self) {
        self.state().dispatched = false;
    }

    fn busy(self: &Arc<Self>) -> Busy {
        self.state().busy += 1;
        Busy(self.clone())
    }
}

/// Keeps its [`Watch`] busy while it lives.
#[derive(Debug)]
pub struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.busy = state.busy.saturating_sub(1);
    }
}

/// A request body, counted busy until it has been read to its end.
pub struct Tracked {
    inner: Incoming,
    busy: Option<Busy>,
}

impl Tracked {
    /// `inner` as the router's body, busy on `watch` unless it is empty.
    pub fn body(inner: Incoming, watch: &Arc<Watch>) -> Body {
        let busy = (!inner.is_end_stream()).then(|| watch.busy());
        Body::new(Tracked { inner, busy })
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || this.inner.is_end_stream() {
            this.busy = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(busy) = &self.busy {
            // Dropped before its end: hyper drains the rest or closes, unseen from here.
            busy.0.stop();
        }
    }
}

/// A socket with bytes already read from it put back in front, so hyper reads the
/// connection from its first unparsed byte; with a [`Watch`], the first read at each
/// request boundary is looked at before hyper gets it.
pub struct Rewind<I> {
    prefix: Bytes,
    inner: I,
    watch: Option<Arc<Watch>>,
    /// An event-stream request was held back (in front of `prefix`); hyper reads nothing
    /// more and its shutdown leaves the socket open for the lean path.
    held: bool,
}

impl<I> Rewind<I> {
    pub fn new(prefix: impl Into<Bytes>, inner: I) -> Self {
        Self { prefix: prefix.into(), inner, watch: None, held: false }
    }

    /// `self`, watched by `watch` from now on.
    pub fn watched(self, watch: Arc<Watch>) -> Self {
        Self { watch: Some(watch), ..self }
    }

    /// The bytes not yet read (those held back first) and the socket.
    pub fn into_parts(self) -> (Bytes, I) {
        (self.prefix, self.inner)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.held {
            // The connection task was told and shuts hyper down; it wakes this task.
            return Poll::Pending;
        }
        let at_boundary = this.watch.as_ref().is_some_and(|w| w.at_boundary());
        let before = buf.filled().len();
        if this.prefix.is_empty() {
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        } else {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
        }
        if let (true, Some(watch)) = (at_boundary, &this.watch) {
            watch.passed();
            let read = &buf.filled()[before..];
            if !read.is_empty() && event_stream::is_event_stream(read) {
                let mut held = BytesMut::with_capacity(read.len() + this.prefix.len());
                held.extend_from_slice(read);
                held.extend_from_slice(&this.prefix);
                this.prefix = held.freeze();
                buf.set_filled(before);
                this.held = true;
                watch.handoff.notify_one();
                return Poll::Pending;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.held {
            // hyper ending its part; the socket goes on to the lean path.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const STREAM: &[u8] = b"GET /api/sessions/x/events HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\n\r\n";
    const OTHER: &[u8] = b"GET /api/health HTTP/1.1\r\nHost: a\r\n\r\n";

    /// A watched socket whose peer writes `bytes`; the watch is at a boundary.
    async fn watched(bytes: &[u8]) -> (Rewind<tokio::io::DuplexStream>, Arc<Watch>) {
        let (near, mut far) = tokio::io::duplex(4096);
        far.write_all(bytes).await.expect("write");
        std::mem::forget(far);
        let watch = Watch::new();
        drop(watch.dispatched());
        (Rewind::new(Bytes::new(), near).watched(watch.clone()), watch)
    }

    #[tokio::test]
    async fn an_event_stream_at_a_boundary_is_held_back_whole() {
        let (mut io, watch) = watched(STREAM).await;
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(std::time::Duration::from_millis(50), io.read(&mut buf)).await;
        assert!(read.is_err(), "hyper must not get the held request");
        tokio::time::timeout(std::time::Duration::from_secs(5), watch.handoff()).await.expect("told");
        let (held, _) = io.into_parts();
        assert_eq!(&held[..], STREAM);
    }

    #[tokio::test]
    async fn other_requests_and_reads_off_a_boundary_go_to_hyper() {
        let (mut io, _) = watched(OTHER).await;
        let mut buf = [0u8; 1024];
        let n = io.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], OTHER);

        // Busy (a response in flight): even an event stream is hyper's.
        let (mut io, watch) = watched(STREAM).await;
        let busy = watch.dispatched();
        let n = io.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], STREAM);
        drop(busy);

        // A dropped unread body stops the watch for good.
        let (mut io, watch) = watched(STREAM).await;
        watch.busy().0.stop();
        let n = io.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], STREAM);
    }
}
