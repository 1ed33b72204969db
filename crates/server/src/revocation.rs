//! Streams that close when their credential stops working.
//!
//! A stream handler registers a kill token under the credential the request came with
//! (`Engine::watch_credential`) and wraps its response with [`watched`], whose body
//! keeps that registration alive exactly as long as the stream: when hyper drops the
//! body (the client left, the stream ended) the registration goes with it, so the
//! registry never holds streams that are gone. For an SSE response the kill token is
//! the connection's own ([`crate::ConnectionToken`]): revoking the credential fires it,
//! and the accept loop closes the connection even when the client has stopped reading.
//! [`StreamCaller`] is that registration made as a handler's extractor, so an SSE
//! handler names who is calling and gets the watch with it.

use crate::error::ApiError;
use crate::extract::Caller;
use crate::serve::ConnectionToken;
use crate::state::AppState;
use axum::body::{Body, BodyDataStream};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::Response;
use bytes::Bytes;
use futures::Stream;
use spool_engine::auth::CredentialWatch;
use spool_protocol::UserId;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;

/// The caller of an SSE stream that closes with its connection when the credential it
/// came with is revoked: the user, the connection's own token (the kill token, which
/// the handler also gives what it follows), and the registration, which the handler
/// hands to its response with [`watched`]. A handler that fails drops the registration.
pub(crate) struct StreamCaller {
    pub user: UserId,
    pub connection: CancellationToken,
    pub watch: CredentialWatch,
}

impl FromRequestParts<AppState> for StreamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Caller { user, credential } = Caller::from_request_parts(parts, state).await?;
        let Ok(ConnectionToken(connection)) = ConnectionToken::from_request_parts(parts, state).await;
        let watch = state.engine.auth().watch_credential(&credential, connection.clone());
        Ok(StreamCaller { user, connection, watch })
    }
}

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
