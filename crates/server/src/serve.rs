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
//! whole connection; the client reconnects with its cursor either way. Over TLS every
//! tab of a browser shares one HTTP/2 connection, so one cut stream makes all of them
//! reconnect (a browser reads its sockets whatever a page does, so it is rarely cut).
//!
//! Bounds ([`ConnectionLimits`]): a connection must send its first request's headers
//! within the header timeout — checked here, because before hyper sees a byte the auto
//! builder is still sniffing for the HTTP/2 preface and has no timer of its own — and
//! after that hyper's HTTP/1 header timeout closes a connection that starts a request
//! and stalls or sits idle between keep-alive requests. HTTP/2 has no such timer in
//! hyper, so this loop counts each connection's requests in flight ([`idle`]: a request
//! is open until its response body is finished or dropped, so a live session stream
//! keeps its connection) and shuts a connection down gracefully once nothing has been
//! open for the same timeout; keep-alive PINGs at that interval close an HTTP/2
//! connection whose peer stopped answering. Past `max_connections` open
//! connections a new one is answered 503 `too_many_connections` and closed (over HTTP/2
//! with a GOAWAY after that answer, since HTTP/2 ignores `Connection: close`), so a flood
//! of sockets costs a file descriptor each only briefly and never reaches the API.
//!
//! TLS (`crate::tls`): each connection's handshake runs in its own task, never in this
//! loop, and spends from the same header timeout as the first request's headers, so a
//! client that opens a socket and never shakes hands is dropped like one that never sends
//! a request. It holds a `max_connections` place from the moment it is accepted. A client
//! that speaks plain HTTP to the TLS port gets a plain 400 saying to use `https://`. The
//! client picks HTTP/2 or HTTP/1.1 by ALPN. HTTP/2's extended CONNECT (WebSocket over
//! HTTP/2) is not enabled: a WebSocket takes an HTTP/1.1 connection of its own.
//!
//! Event streams: an HTTP/1.1 `GET` for `text/event-stream` is answered by
//! [`event_stream`] instead of hyper, so that an idle subscriber holds a few KiB instead
//! of hyper's buffers: as a connection's first request (plain TCP, or TLS without ALPN
//! `h2`), and between the requests of a keep-alive connection that hyper serves
//! ([`keep_alive`]). Everything else goes to hyper with the bytes read so far put back.
//! An HTTP/2 connection (ALPN `h2`, or the preface in the clear) is hyper's to the end.
//!
//! Shutdown: when the `shutdown` token fires the loop stops accepting, every connection
//! is asked to close after its in-flight requests, and after [`SHUTDOWN_GRACE`] the rest
//! are dropped. Long-lived streams end only if someone ends them: [`crate::serve_state`]
//! calls `engine.close_streams()` for that.

mod event_stream;
mod idle;
mod keep_alive;

use crate::tls::TlsConfig;
use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::Request;
use axum::http::request::Parts;
use event_stream::{Parsed, Sniffed};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use idle::{Counted, Streams};
use keep_alive::{Rewind, Tracked, Watch};
use spool_engine::metrics::Metrics;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
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

/// How long a connection may stay silent and how many may be open (from `ServerConfig`).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// For a request's headers to arrive, and for a connection to stay idle (HTTP/1.1
    /// between requests, HTTP/2 with no stream open) before it is closed.
    pub header_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        let config = crate::ServerConfig::default();
        Self { header_timeout: config.header_timeout, max_connections: config.max_connections }
    }
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then shuts down gracefully.
/// HTTP/1.1 and HTTP/2 (prior knowledge), with upgrades for WebSocket; no TLS.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) -> io::Result<()> {
    serve_with(listener, app, shutdown, ConnectionLimits::default(), None, None).await
}

/// [`serve`] with the given limits, over TLS when `tls` is given, counting open
/// connections in `metrics` when given.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
    tls: Option<TlsConfig>,
    metrics: Option<Metrics>,
) -> io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    // A PING every idle timeout, unanswered for as long, closes a connection whose peer
    // is gone even while a stream keeps it from being idle.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_timeout)
        .keep_alive_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    // The same HTTP/1.1 settings, for connections served request by request
    // (`run_http1`); the auto builder cannot hand a connection back.
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let h1 = Arc::new(h1);
    let acceptor = tls.as_ref().map(TlsConfig::acceptor);
    let connections = TaskTracker::new();
    let hard_stop = CancellationToken::new();
    // One permit per `max_connections` place, held by an admitted connection while it lives.
    let places = Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS)));

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
        // The header timeout runs from here: a TLS handshake spends from the same budget
        // as the first request's headers.
        let deadline = Instant::now() + limits.header_timeout;
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "could not set TCP_NODELAY");
        }
        // Taken here, before any handshake: a connection counts from its first moment.
        let slot = places.clone().try_acquire_owned().ok();
        let accepted = Accepted {
            peer,
            deadline,
            slot,
            builder: builder.clone(),
            h1: h1.clone(),
            app: app.clone(),
            shutdown: shutdown.clone(),
            hard_stop: hard_stop.clone(),
            metrics: metrics.clone(),
            idle_timeout: limits.header_timeout,
        };
        // The handshake happens in the connection's own task, so a client that never
        // finishes one holds up nobody else's accept. A task is the size of its largest
        // state, so plain and TLS connections get tasks of their own: a plain one is the
        // lean event stream itself (`run_plain`), and a TLS one should not pay for that
        // state on top of its own.
        match acceptor.clone() {
            None => {
                connections.spawn(accepted.run_plain(tcp));
            }
            Some(acceptor) => {
                connections.spawn(async move {
                    // Boxed, as hyper's connections in `run_plain` (see there): the
                    // handshake's and the connection's states are large and live apart,
                    // and the TLS stream is out of this task's state before it awaits.
                    let next: Pin<Box<dyn Future<Output = ()> + Send>> = {
                        let Some(stream) = Box::pin(accepted.handshake(&acceptor, tcp)).await else { return };
                        // HTTP/2 is hyper's to the end; HTTP/1.1 gets the lean path as
                        // plain TCP does, its TLS stream boxed on its own so that every
                        // level of that future holds a pointer to it, not a copy.
                        if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                            Box::pin(accepted.run(TokioIo::new(stream)))
                        } else {
                            Box::pin(accepted.run_plain(Box::new(stream)))
                        }
                    };
                    next.await;
                });
            }
        }
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

/// One accepted TCP connection and what its task needs to serve it.
struct Accepted {
    peer: SocketAddr,
    /// When the first request's headers must have arrived (handshake included).
    deadline: Instant,
    /// `None`: over `max_connections`, answered 503 and closed.
    slot: Option<OwnedSemaphorePermit>,
    builder: Arc<Builder<TokioExecutor>>,
    h1: Arc<http1::Builder>,
    app: Router,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    /// Where the connection is counted while it is open.
    metrics: Option<Metrics>,
    /// How long the connection may have no request in flight before it is closed.
    idle_timeout: Duration,
}

impl Accepted {
    /// The TLS handshake, bounded by the header timeout and given up on shutdown (a
    /// connection still shaking hands has no request in flight). A client that speaks
    /// plain HTTP to the TLS port is told so in plain HTTP instead of seeing a broken
    /// handshake.
    async fn handshake(&self, acceptor: &TlsAcceptor, tcp: TcpStream) -> Option<TlsStream<TcpStream>> {
        let peer = self.peer;
        let handshake = async {
            if !starts_with_tls_record(&tcp).await? {
                plain_http_refusal(tcp).await;
                return Ok(None);
            }
            acceptor.accept(tcp).await.map(Some)
        };
        tokio::select! {
            result = tokio::time::timeout_at(self.deadline, handshake) => match result {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "dropping connection: no TLS handshake within the header timeout");
                    None
                }
            },
            _ = self.shutdown.cancelled() => None,
        }
    }

    /// Serves a connection that speaks HTTP/1.1 (plain TCP, or TLS without ALPN `h2`): an
    /// event-stream request on the lean path ([`event_stream`]), anything else through
    /// hyper, request by request ([`Self::run_http1`]), until an event stream asked for
    /// between two requests leaves hyper too. hyper's connection futures are boxed so
    /// that this task, whose size is that of its largest state, stays small while it
    /// serves an event stream.
    async fn run_plain<I>(mut self, mut io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        if self.slot.is_none() {
            return Box::pin(self.run(TokioIo::new(io))).await;
        }
        let sniffed = tokio::select! {
            sniffed = tokio::time::timeout_at(self.deadline, event_stream::sniff(&mut io)) => sniffed,
            _ = self.shutdown.cancelled() => return,
        };
        let first = match sniffed {
            Ok(Ok(Sniffed::EventStream(request))) => First::EventStream(request),
            // HTTP/2 with prior knowledge: the auto builder's, to the end.
            Ok(Ok(Sniffed::Other(read))) if read.starts_with(b"PRI ") => {
                return Box::pin(self.run(TokioIo::new(Rewind::new(read, io)))).await;
            }
            Ok(Ok(Sniffed::Other(read))) => First::Hyper(read),
            Ok(Ok(Sniffed::Closed)) => return,
            Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "connection failed before its first request"),
            Err(_) => return tracing::debug!(%peer, "dropping connection: no request within the header timeout"),
        };
        let _open = self.metrics.as_ref().map(Metrics::http_connection);
        let _slot = self.slot.take();
        let token = CancellationToken::new();
        let (io, mut request) = match first {
            First::EventStream(request) => (io, request),
            First::Hyper(read) => match Box::pin(self.run_http1(Rewind::new(read, io), token.clone())).await {
                Some(handed) => handed,
                None => return,
            },
        };
        request.extensions_mut().insert(ConnectionToken(token.clone()));
        let (app, hard_stop) = (self.app.clone(), self.hard_stop.clone());
        if let Err(e) = event_stream::serve(io, request, app, token, hard_stop).await {
            tracing::debug!(%peer, error = %e, "event stream connection ended with an error");
        }
    }

    /// Serves HTTP/1.1 on `io` through hyper until the connection closes, is cut or shut
    /// down; or until an event-stream request arrives between two requests
    /// ([`keep_alive`]), which is returned with the socket for the lean path. `token` is
    /// the connection's: it stays the stream's.
    async fn run_http1<I>(&self, mut io: Rewind<I>, token: CancellationToken) -> Option<(I, Request<Body>)>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = self.peer;
        let streams = Streams::new();
        // Cancelled by the connection's first request (the sniff may have handed hyper
        // only part of a long head).
        let first_request = CancellationToken::new();
        loop {
            let watch = Watch::new();
            let service = hyper::service::service_fn({
                let (app, token, streams, watch) = (self.app.clone(), token.clone(), streams.clone(), watch.clone());
                let first_request = first_request.clone();
                move |mut req: Request<Incoming>| {
                    first_request.cancel();
                    let open = (streams.open(), watch.dispatched());
                    if req.headers().contains_key(axum::http::header::UPGRADE) {
                        watch.stop();
                    }
                    req.extensions_mut().insert(ConnectionToken(token.clone()));
                    let req = req.map(|body| Tracked::body(body, &watch));
                    let response = app.clone().oneshot(req);
                    async move { Ok::<_, Infallible>(response.await?.map(|body| Counted::body(body, open))) }
                }
            });
            let mut conn = self.h1.serve_connection(TokioIo::new(io.watched(watch.clone())), service).with_upgrades();
            let silent = async {
                tokio::time::sleep_until(self.deadline).await;
                if first_request.is_cancelled() {
                    std::future::pending::<()>().await;
                }
            };
            let idle_grace = tokio::select! {
                result = &mut conn => {
                    finished(peer, result.map_err(Into::into));
                    return None;
                }
                () = watch.handoff() => {
                    // hyper is between requests: it ends at once, writing nothing.
                    Pin::new(&mut conn).graceful_shutdown();
                    tokio::select! {
                        result = &mut conn => if let Err(e) = result {
                            finished(peer, Err(e.into()));
                            return None;
                        },
                        _ = self.hard_stop.cancelled() => return None,
                    }
                    let parts = conn.into_parts()?;
                    let (held, inner) = parts.io.into_inner().into_parts();
                    let mut bytes = parts.read_buf.to_vec();
                    bytes.extend_from_slice(&held);
                    match event_stream::parse(&bytes) {
                        Parsed::EventStream(request) => return Some((inner, request)),
                        // hyper had read part of a head itself: the lot goes to hyper again.
                        _ => {
                            io = Rewind::new(bytes, inner);
                            continue;
                        }
                    }
                }
                _ = token.cancelled() => {
                    tracing::debug!(%peer, "closing connection: its token fired");
                    None
                }
                _ = self.shutdown.cancelled() => None,
                () = silent => {
                    tracing::debug!(%peer, "dropping connection: no request within the header timeout");
                    return None;
                }
                () = streams.idle(self.idle_timeout) => {
                    tracing::debug!(%peer, "closing connection: nothing open for the idle timeout");
                    Some(self.idle_timeout)
                }
            };
            Pin::new(&mut conn).graceful_shutdown();
            close(peer, futures::TryFutureExt::map_err(conn, Into::into), &token, idle_grace, &self.hard_stop).await;
            return None;
        }
    }

    /// Serves HTTP on `io` (plain TCP or TLS) until it closes, is cut or shut down.
    async fn run<I>(self, io: I)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let Accepted { peer, deadline, slot, builder, app, shutdown, hard_stop, metrics, idle_timeout, .. } = self;
        let Some(slot) = slot else {
            // One answer, then closed; a client that sends nothing is dropped. HTTP/2
            // ignores `Connection: close`, so after the first request the connection is
            // shut down gracefully (a GOAWAY): otherwise a client's pool would keep
            // reusing a connection that can only ever answer 503.
            let asked = CancellationToken::new();
            let service = hyper::service::service_fn({
                let asked = asked.clone();
                move |req| {
                    asked.cancel();
                    too_many(req)
                }
            });
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            let served = async {
                tokio::select! {
                    result = conn.as_mut() => return result,
                    () = asked.cancelled() => {}
                }
                conn.as_mut().graceful_shutdown();
                conn.as_mut().await
            };
            tokio::select! {
                result = tokio::time::timeout_at(deadline, served) => {
                    if let Ok(result) = result { finished(peer, result) }
                }
                _ = hard_stop.cancelled() => {}
            }
            return;
        };
        let _open = metrics.as_ref().map(Metrics::http_connection);
        let _slot = slot;
        let token = CancellationToken::new();
        // Cancelled by the connection's first request.
        let first_request = CancellationToken::new();
        let streams = Streams::new();
        let service = hyper::service::service_fn({
            let (token, first_request, streams) = (token.clone(), first_request.clone(), streams.clone());
            move |mut req: Request<Incoming>| {
                first_request.cancel();
                let open = streams.open();
                req.extensions_mut().insert(ConnectionToken(token.clone()));
                let response = app.clone().oneshot(req.map(Body::new));
                // Boxed: hyper runs each HTTP/2 stream as a task of its own, the size of
                // its largest state, so the router's future inline would stay in a
                // stream's task for as long as its body streams (≈ 0.65 KiB of each
                // idle HTTP/2 stream's 0.9; BENCHMARKS.md, issue 43).
                Box::pin(async move { Ok::<_, Infallible>(response.await?.map(|body| Counted::body(body, open))) })
            }
        });
        // Over TLS the client chose the protocol by ALPN; the builder still tells them
        // apart by the first bytes, which agree (a client that chose `h2` starts with the
        // HTTP/2 preface), and a client that offered no ALPN gets the same sniffing.
        let conn = builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(conn);
        let silent = async {
            tokio::time::sleep_until(deadline).await;
            if first_request.is_cancelled() {
                std::future::pending::<()>().await;
            }
        };
        // Once asked to close, see `close`.
        let idle_grace = tokio::select! {
            result = conn.as_mut() => return finished(peer, result),
            _ = token.cancelled() => {
                tracing::debug!(%peer, "closing connection: its token fired");
                None
            }
            _ = shutdown.cancelled() => None,
            _ = silent => {
                tracing::debug!(%peer, "dropping connection: no request within the header timeout");
                return;
            }
            () = streams.idle(idle_timeout) => {
                tracing::debug!(%peer, "closing connection: nothing open for the idle timeout");
                Some(idle_timeout)
            }
        };
        conn.as_mut().graceful_shutdown();
        close(peer, conn, &token, idle_grace, &hard_stop).await;
    }
}

/// What a connection's first request asked for.
// Held only until it is served; see `Sniffed`.
#[allow(clippy::large_enum_variant)]
enum First {
    EventStream(Request<Body>),
    /// hyper's, from these bytes on.
    Hyper(Vec<u8>),
}

/// Waits for a connection asked to close gracefully to end. It is dropped
/// [`KILL_GRACE`] after its token fires (a stuck reader never finishes), and one closed
/// for being idle also after `idle_grace`: a peer that never answers the GOAWAY's PING
/// would otherwise keep its place.
async fn close<C>(
    peer: SocketAddr,
    conn: C,
    token: &CancellationToken,
    idle_grace: Option<Duration>,
    hard_stop: &CancellationToken,
) where
    C: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    let dropped = async {
        let fired = async {
            token.cancelled().await;
            tokio::time::sleep(KILL_GRACE).await;
        };
        match idle_grace {
            None => fired.await,
            Some(grace) => tokio::select! {
                () = fired => {}
                () = tokio::time::sleep(grace) => {}
            },
        }
    };
    tokio::select! {
        result = conn => finished(peer, result),
        () = dropped => tracing::debug!(%peer, "dropping connection that did not close in time"),
        _ = hard_stop.cancelled() => {}
    }
}

/// Whether the client's first byte opens a TLS handshake record (content type 22).
/// Waits for that byte without consuming it.
async fn starts_with_tls_record(tcp: &TcpStream) -> io::Result<bool> {
    let mut first = [0u8; 1];
    let n = tcp.peek(&mut first).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(first[0] == 0x16)
}

/// Answers a plain-HTTP request on the TLS port with a 400 that says to use `https://`.
/// The request is read (up to a bound) after the answer, so closing does not reset the
/// connection before the client has read it.
async fn plain_http_refusal(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BODY: &str = "this server speaks HTTPS only: use https:// with the same host and port\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if tcp.write_all(answer.as_bytes()).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    while left > 0 {
        match tcp.read(&mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn finished(peer: SocketAddr, result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
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

/// The answer on a connection over the cap.
async fn too_many(_: Request<Incoming>) -> Result<axum::response::Response, Infallible> {
    use axum::http::header::{CONNECTION, CONTENT_TYPE};
    use axum::response::IntoResponse;
    let body =
        spool_protocol::api::error_body("too_many_connections", "the server has too many open connections; try again");
    let headers = [(CONTENT_TYPE, "application/json"), (CONNECTION, "close")];
    Ok((axum::http::StatusCode::SERVICE_UNAVAILABLE, headers, body).into_response())
}
