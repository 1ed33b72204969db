//! What every WebSocket route shares — the hub (`GET /api/ws`, `dialect/ws_hub/routes.rs`) and the stream
//! multiplexer (`GET /api/streams`, `streams.rs`): the upgrade ([`Upgrade`]: the
//! `Origin` check, the per-socket buffer and message limits), the socket's lifetime
//! ([`serve`]: its stream permit, its credential's watch, its metrics), and the one
//! socket loop ([`mux`]), so that a dialect writes only its mapping ([`Dialect`]). A
//! socket is closed with a reason the same way on every route (a revoked credential
//! gets 1008 and a stopping server 1001, said in a close frame).
//!
//! Upgrades use small read and write buffers (tungstenite's default is 128 KiB per
//! socket for reading alone), and the `Origin` is checked: a browser page may open a
//! socket only from the server's own origin; clients that send no `Origin` (not
//! browsers) are let in, as they are on every other route.

mod mux;

pub(crate) use mux::{Closing, Dialect, Feed, Heartbeat, Outbox, Polled, Subs};

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::extract::ws::{WebSocketUpgrade, close_code};
use axum::http::header::{CONTENT_TYPE, ORIGIN};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use spool_engine::StreamPermit;
use spool_engine::auth::Credential;
use tokio_util::sync::CancellationToken;

/// Per-socket buffers: enough for a client message and a few events.
const READ_BUFFER: usize = 2 * 1024;
const WRITE_BUFFER: usize = 8 * 1024;
/// Bytes a socket may hold unsent before a write fails (and the socket is dropped). One
/// message must always fit: a committed answer's `message_end` carries the whole answer,
/// and a long one is over 1 MiB (200,000 words are 1.3 MB). At 1 MiB such a frame could
/// never be written, the socket closed, and the client's reconnect replayed the same
/// frame into the same failure, for ever. A slow client is still cut by the engine's lag
/// limit and the write timeout; this buffer only grows for a message that needs it.
const MAX_WRITE_BUFFER: usize = 64 << 20;
/// Largest message a client may send; client messages are small.
const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// A reason the server closes a socket: the close frame's code and words.
pub(crate) type Why = (u16, &'static str);
/// The credential the socket was opened with was revoked (1008 policy violation).
pub(crate) const REVOKED: Why = (close_code::POLICY, "the credential was revoked");
/// The server is stopping (1001 going away).
pub(crate) const STOPPING: Why = (close_code::AWAY, "the server is stopping");

/// True when the request has no `Origin` (not a browser) or its `Origin` is the host
/// the request was sent to.
fn origin_allowed(headers: &HeaderMap, uri: &Uri) -> bool {
    !headers.contains_key(ORIGIN) || crate::guard::same_origin(headers, Some(uri))
}

/// The 403 for a browser on another site riding the user's cookie, refused before
/// upgrading.
fn bad_origin() -> Response {
    let body =
        spool_protocol::api::error_body("bad_origin", "WebSocket connections must come from this server's own pages");
    (StatusCode::FORBIDDEN, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// The upgrade with the shared buffer sizes and client message limits.
fn limited(upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
    upgrade
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_write_buffer_size(MAX_WRITE_BUFFER)
        .max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
}

/// A WebSocket upgrade from an allowed origin, with the shared limits: a browser on
/// another site is refused with [`bad_origin`], a request that is not an upgrade with
/// a 400 `websocket_required`. A route takes it as its last argument, so its other
/// refusals (the caller, the query) come first.
pub(crate) struct Upgrade(WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        if !origin_allowed(&parts.headers, &parts.uri) {
            return Err(bad_origin());
        }
        let upgrade = WebSocketUpgrade::from_request_parts(parts, state)
            .await
            .map_err(|r| ApiError::bad_request("websocket_required", r.body_text()).into_response())?;
        Ok(Upgrade(limited(upgrade)))
    }
}

/// Answers the upgrade and runs the socket's [`mux`] loop for `dialect`, `out` first.
/// The socket holds `permit` (it counts as one of the user's streams for as long as it
/// is open) and counts as an open stream of `kind` and an open connection in the
/// metrics.
pub(crate) fn serve<D: Dialect + 'static>(
    state: &AppState,
    credential: &Credential,
    Upgrade(upgrade): Upgrade,
    permit: StreamPermit,
    kind: spool_engine::metrics::Dialect,
    (dialect, out): (D, Outbox),
) -> Response {
    // The socket outlives its HTTP connection (hyper hands the stream over on upgrade),
    // so it gets a kill token of its own: revoking the credential closes the socket,
    // saying so (1008).
    let revoked = CancellationToken::new();
    let watch = state.engine.auth().watch_credential(credential, revoked.clone());
    let stops = mux::Stops { closing: state.engine.lists().closed(), revoked };
    let every = state.config.heartbeat;
    let open = state.engine.metrics().stream_opened(kind);
    // hyper stops counting the connection when it hands it over; it is still open, and
    // the memory trimmer (`spool serve`) gives memory back when this count drops.
    let connection = state.engine.metrics().http_connection();
    upgrade.on_upgrade(move |socket| async move {
        let (_watch, _open, _connection) = (watch, open, connection);
        mux::run(dialect, socket, out, every, stops).await;
        drop(permit);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn origin_must_be_the_requests_own_host_when_present() {
        assert!(
            origin_allowed(&headers(&[("host", "127.0.0.1:4747")]), &Uri::from_static("/api/ws")),
            "no Origin: not a browser"
        );
        assert!(origin_allowed(
            &headers(&[("host", "127.0.0.1:4747"), ("origin", "http://127.0.0.1:4747")]),
            &Uri::from_static("/api/ws")
        ));
        assert!(origin_allowed(
            &headers(&[("host", "Spool.example"), ("origin", "https://spool.example")]),
            &Uri::from_static("/api/ws")
        ));
        for bad in ["http://evil.example", "http://127.0.0.1:4748", "null", "127.0.0.1:4747", "ftp://127.0.0.1:4747"] {
            assert!(
                !origin_allowed(&headers(&[("host", "127.0.0.1:4747"), ("origin", bad)]), &Uri::from_static("/api/ws")),
                "{bad}"
            );
        }
        assert!(
            !origin_allowed(&headers(&[("origin", "http://127.0.0.1:4747")]), &Uri::from_static("/api/ws")),
            "Origin without Host"
        );
    }
}
