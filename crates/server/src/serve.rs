//! The accept loop: our own instead of `axum::serve`, because a stuck client can only be
//! disconnected by dropping its connection.
//!
//! A session stream is a response body that hyper polls when the socket can take more.
//! When a client stops reading, the socket stays full, hyper never polls the body again,
//! and nothing inside the body can notice that the engine cut the subscriber (it fell
//! more than 1 MiB behind). So every connection gets a [`ConnectionToken`], put into the
//! extensions of each of its requests; the SSE handler hands it to `engine.subscribe`
//! as the subscriber's kill token, and this loop drives the connection in a `select!`
//! against it. When it fires, the connection is asked to close gracefully (a stream that
//! merely ended — session deleted, a slow reader that is still reading — finishes its
//! body cleanly) and dropped if it has not closed after [`KILL_GRACE`].
//!
//! Because the token belongs to the connection, cutting one HTTP/2 stream closes the
//! whole connection; the client reconnects with its cursor either way.
//!
//! Shutdown: when the `shutdown` token fires the loop stops accepting, every connection
//! is asked to close after its in-flight requests, and after [`SHUTDOWN_GRACE`] the rest
//! are dropped. Long-lived streams end only if someone ends them: [`crate::serve_state`]
//! calls `engine.close_streams()` for that.

use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::Request;
use axum::http::request::Parts;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::convert::Infallible;
use std::io;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How long a shutdown waits for in-flight requests before dropping their connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a connection whose token fired may take to finish its response and close
/// before it is dropped. A stuck client never finishes; a reading one needs a moment.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// Cancelling this token disconnects the connection the request arrived on. It is in
/// every request's extensions when served by [`serve`].
#[derive(Clone, Debug)]
pub struct ConnectionToken(pub CancellationToken);

impl<S: Send + Sync> FromRequestParts<S> for ConnectionToken {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        // Outside `serve` (a router driven directly, as in unit tests) there is no
        // connection to drop; a fresh token keeps the handler working.
        Ok(parts
            .extensions
            .get::<ConnectionToken>()
            .cloned()
            .unwrap_or_else(|| ConnectionToken(CancellationToken::new())))
    }
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then shuts down gracefully.
/// HTTP/1.1 and HTTP/2 (prior knowledge), with upgrades for WebSocket.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) -> io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let connections = TaskTracker::new();
    let hard_stop = CancellationToken::new();

    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "could not set TCP_NODELAY");
        }
        let token = CancellationToken::new();
        let service = hyper::service::service_fn({
            let (app, token) = (app.clone(), token.clone());
            move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectionToken(token.clone()));
                app.clone().oneshot(req.map(Body::new))
            }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned();
        let (shutdown, hard_stop) = (shutdown.clone(), hard_stop.clone());
        connections.spawn(async move {
            let _open = OpenConnection::count();
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => return finished(peer, result),
                _ = token.cancelled() => tracing::debug!(%peer, "closing connection: its token fired"),
                _ = shutdown.cancelled() => {}
            }
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                result = conn.as_mut() => finished(peer, result),
                _ = async { token.cancelled().await; tokio::time::sleep(KILL_GRACE).await } => {
                    tracing::debug!(%peer, "dropping connection that did not close in time");
                }
                _ = hard_stop.cancelled() => {}
            }
        });
    }

    drop(listener);
    connections.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait()).await.is_err() {
        tracing::warn!(open = connections.len(), "dropping connections still open after the shutdown grace period");
        hard_stop.cancel();
        connections.wait().await;
    }
    Ok(())
}

fn finished(peer: std::net::SocketAddr, result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(e) = result {
        // Clients hang up mid-request all the time; that is not the server's problem.
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Per-connection accept errors are skipped; others (out of file descriptors) are
/// logged and retried after a pause instead of spinning or ending the server.
async fn accept_error(e: io::Error) {
    use io::ErrorKind::*;
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Counts an open HTTP connection in `/metrics` for as long as it lives.
struct OpenConnection;

impl OpenConnection {
    fn count() -> Self {
        spool_engine::metrics::METRICS.http_connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenConnection
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        spool_engine::metrics::METRICS.http_connections.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
