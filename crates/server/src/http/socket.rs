//! What the two WebSocket routes share — the hub (`GET /api/ws`, `ws.rs`) and the
//! stream multiplexer (`GET /api/streams`, `streams.rs`): the `Origin` check, the
//! per-socket buffer and message limits, the one write that races a kill token and a
//! timeout, and the one way a socket is closed with a reason (a revoked credential
//! gets 1008 and a stopping server 1001 on both routes, said in a close frame).
//!
//! Upgrades use small read and write buffers (tungstenite's default is 128 KiB per
//! socket for reading alone), and the `Origin` is checked: a browser page may open a
//! socket only from the server's own origin; clients that send no `Origin` (not
//! browsers) are let in, as they are on every other route.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::header::{CONTENT_TYPE, ORIGIN};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::stream::{FuturesUnordered, SplitSink};
use futures::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_util::sync::WaitForCancellationFutureOwned;

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
/// A write that makes no progress for this long closes the socket.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing socket waits to say why (a client that stopped reading never
/// takes the close frame, and must not hold the task).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A reason the server closes a socket: the close frame's code and words.
pub(super) type Why = (u16, &'static str);
/// The credential the socket was opened with was revoked (1008 policy violation).
pub(super) const REVOKED: Why = (close_code::POLICY, "the credential was revoked");
/// The server is stopping (1001 going away).
pub(super) const STOPPING: Why = (close_code::AWAY, "the server is stopping");

/// Says why the socket closes, in a close frame, within [`CLOSE_GRACE`].
pub(super) async fn close_with(tx: &mut SplitSink<WebSocket, Message>, (code, reason): Why) {
    let close = Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    let _ = tokio::time::timeout(CLOSE_GRACE, tx.send(close)).await;
}

/// True when the request has no `Origin` (not a browser) or its `Origin` is the host
/// the request was sent to.
pub(super) fn origin_allowed(headers: &HeaderMap, uri: &Uri) -> bool {
    !headers.contains_key(ORIGIN) || crate::guard::same_origin(headers, Some(uri))
}

/// The 403 for a browser on another site riding the user's cookie, refused before
/// upgrading.
pub(super) fn bad_origin() -> Response {
    let body =
        spool_protocol::api::error_body("bad_origin", "WebSocket connections must come from this server's own pages");
    (StatusCode::FORBIDDEN, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// The upgrade with the shared buffer sizes and client message limits.
pub(super) fn limited(upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
    upgrade
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_write_buffer_size(MAX_WRITE_BUFFER)
        .max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
}

/// Writes messages and flushes once, unless a kill token fires first and `cut` says
/// a subscription was cut (a write that cannot finish while a subscription is being
/// cut means the client stopped reading), or the write takes longer than
/// [`WRITE_TIMEOUT`]. A token that fires for another reason (a session's stream
/// closing) lets the write go on. False closes the socket.
pub(super) async fn write(
    tx: &mut SplitSink<WebSocket, Message>,
    kills: &mut FuturesUnordered<WaitForCancellationFutureOwned>,
    messages: impl Iterator<Item = Message>,
    cut: impl Fn() -> bool,
) -> bool {
    let mut messages = messages.peekable();
    if messages.peek().is_none() {
        return true;
    }
    let write = tokio::time::timeout(WRITE_TIMEOUT, async {
        for message in messages {
            tx.feed(message).await?;
        }
        tx.flush().await
    });
    tokio::pin!(write);
    loop {
        tokio::select! {
            biased;
            written = &mut write => return matches!(written, Ok(Ok(()))),
            Some(()) = kills.next() => {
                if cut() {
                    return false;
                }
            }
        }
    }
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
