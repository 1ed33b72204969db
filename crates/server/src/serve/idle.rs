//! When a connection is idle: the requests it has in flight, counted, so that an HTTP/2
//! connection with no stream open for the idle timeout is closed like an HTTP/1.1
//! connection idle between keep-alive requests.
//!
//! hyper closes an idle HTTP/1.1 connection itself (its header timeout runs while it
//! waits for the next request), but an HTTP/2 connection has no such timer: a client
//! that made one request and then kept the socket open held a `max_connections` place
//! for ever, and sixty of them locked everyone else out. hyper cannot say whether a
//! connection has streams open, so the accept loop counts them: a request is open from
//! the moment the service is called until its response body is finished or dropped
//! (a session stream's body, live for hours, counts as open the whole time). [`Streams`]
//! holds the count in a `watch` channel, and [`Streams::idle`] resolves once it has sat
//! at zero for the timeout without any request starting in between.

use axum::body::Body;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;

/// The requests in flight on one connection.
#[derive(Clone, Debug)]
pub(super) struct Streams(watch::Sender<usize>);

impl Streams {
    pub fn new() -> Self {
        Streams(watch::Sender::new(0))
    }

    /// A request starts; it stays open while the returned guard lives.
    pub fn open(&self) -> Open {
        self.0.send_modify(|n| *n += 1);
        Open(self.0.clone())
    }

    /// Resolves when no request has been in flight for `timeout`. Every request that
    /// starts (or ends) restarts the wait, so a connection making short requests back to
    /// back is never idle.
    pub async fn idle(&self, timeout: Duration) {
        let mut count = self.0.subscribe();
        loop {
            // The sender lives in `self`, so neither wait can see it closed.
            if count.wait_for(|n| *n == 0).await.is_err() {
                return std::future::pending().await;
            }
            if tokio::time::timeout(timeout, count.changed()).await.is_err() {
                return;
            }
        }
    }
}

/// One request in flight; dropping it ends it.
#[derive(Debug)]
pub(super) struct Open(watch::Sender<usize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its request open until hyper has sent the body to the
/// end or dropped it (the client reset the stream, the connection closed). `open` is
/// an [`Open`], or a tuple of it and what else counts the request (`keep_alive::Busy`).
pub(super) struct Counted<G> {
    inner: Body,
    _open: G,
}

impl<G: Send + Unpin + 'static> Counted<G> {
    /// `inner`, counted as open until it ends or is dropped.
    pub fn body(inner: Body, open: G) -> Body {
        Body::new(Counted { inner, _open: open })
    }
}

impl<G: Unpin> HttpBody for Counted<G> {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        // `Body` is `Unpin` (a boxed body), so no pin projection is needed.
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_only_after_the_timeout_with_nothing_open() {
        let streams = Streams::new();
        let timeout = Duration::from_secs(30);
        let open = streams.open();
        let idle = streams.idle(timeout);
        tokio::pin!(idle);
        // An open request holds the connection busy however long it lasts.
        assert!(tokio::time::timeout(Duration::from_secs(3600), idle.as_mut()).await.is_err());
        drop(open);
        // Closed, then a new request just before the timeout restarts the wait.
        let another = async {
            tokio::time::sleep(Duration::from_secs(29)).await;
            drop(streams.open());
        };
        tokio::select! {
            () = idle.as_mut() => panic!("idle before the timeout"),
            () = another => {}
        }
        assert!(tokio::time::timeout(Duration::from_secs(29), idle.as_mut()).await.is_err());
        let started = tokio::time::Instant::now();
        idle.await;
        assert!(started.elapsed() <= Duration::from_secs(2), "idle a timeout after the last request ended");
    }
}
