//! Streams that close when their credential stops working.
//!
//! A stream handler registers a kill token under the credential the request came with
//! (`Engine::watch_credential`) and wraps its response with [`watched`], whose body
//! keeps that registration alive exactly as long as the stream: when hyper drops the
//! body (the client left, the stream ended) the registration goes with it, so the
//! registry never holds streams that are gone. For an SSE response the kill token is
//! the connection's own ([`crate::ConnectionToken`]): revoking the credential fires it,
//! and the accept loop closes the connection even when the client has stopped reading.

use axum::body::{Body, BodyDataStream};
use axum::response::Response;
use bytes::Bytes;
use futures::Stream;
use spool_engine::auth::CredentialWatch;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `response` with its body holding `watch` until the body is dropped.
pub(crate) fn watched(response: Response, watch: CredentialWatch) -> Response {
    response.map(|body| Body::from_stream(Watched { body: body.into_data_stream(), _watch: watch }))
}

/// A stream body (it has no trailers to lose) with the registration beside it.
struct Watched {
    body: BodyDataStream,
    _watch: CredentialWatch,
}

impl Stream for Watched {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.body).poll_next(cx)
    }
}
