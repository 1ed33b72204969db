//! A lean HTTP/1.1 connection for one event stream, because an idle subscriber should
//! cost a few KiB, not hyper's per-connection buffers.
//!
//! Served through hyper, every idle SSE connection kept an 8 KiB read buffer (hyper
//! reads the socket again while the response streams, to notice the client leaving) and
//! an 8 KiB header write buffer, neither of which hyper 1.x can shrink, plus the state of
//! an auto HTTP/1+2 connection: about 26 KiB each (BENCHMARKS.md, issue 19). An event
//! stream is the simplest exchange HTTP has: one `GET` without a body, one response whose
//! body lasts as long as the connection. So the accept loop reads a plain-TCP
//! connection's first request head itself ([`sniff`]) into a short-lived buffer, and
//! when it is an HTTP/1.1 `GET` that asks for `text/event-stream` (as `EventSource`
//! does) with nothing after it, [`serve`] answers it here:
//!
//! - the request goes through the same router (auth, limits, request ids, metrics) as
//!   any other;
//! - the response is written as hyper would (status line, the handler's headers, `date`,
//!   chunked body) plus `connection: close`, because this connection serves only this
//!   request; frames that are ready together are written as one chunk in one `writev`;
//! - the client leaving is noticed by reading into a 64-byte stack buffer, so nothing
//!   but the socket, the body's own state and this task stays allocated while idle.
//!
//! A connection's first request is looked at here, before hyper exists for it; a
//! keep-alive connection's later requests are looked at between requests, as hyper
//! reads them (`keep_alive.rs`), so a stream asked for on a connection that already
//! served other requests (a browser's pooled connection) is lean too. Over TLS the same
//! holds for HTTP/1.1; an HTTP/2 connection stays hyper's (its streams share it).
//!
//! Anything else (other methods, bodies, upgrades, pipelined bytes, HTTP/2's preface,
//! heads over [`MAX_HEAD`]) is handed to hyper with the bytes already read put back in
//! front of the socket (`keep_alive::Rewind`), so hyper sees the connection exactly as
//! sent.
//!
//! The connection's kill token works as it does under hyper: when it fires (the engine
//! cut a subscriber that fell too far behind), the response gets [`KILL_GRACE`] to end
//! on its own and is then dropped; a stuck client never lets it end. Shutdown ends
//! streams through the engine (`close_streams`), and the hard stop drops what is left.

use super::KILL_GRACE;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode, Uri, Version, header};
use bytes::Bytes;
use futures::FutureExt;
use http_body_util::BodyExt;
use std::io::{self, IoSlice};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The longest request head read here. A longer one (a large cookie, say) goes to hyper,
/// whose own limits then apply.
pub const MAX_HEAD: usize = 16 * 1024;

/// At most this many headers in a head read here; more go to hyper.
const MAX_HEADERS: usize = 64;

/// Frames written together in one chunk when the body has several ready at once.
const MAX_BATCH: usize = 32;

/// What the first bytes of a connection turned out to be.
// Held only while one connection is sniffed, then taken apart: boxing the request would
// cost every stream an allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Sniffed {
    /// An event-stream request, to be answered by [`serve`].
    EventStream(Request<Body>),
    /// Anything else: these bytes, then the rest of the socket, are hyper's.
    Other(Vec<u8>),
    /// The client closed before sending a whole request.
    Closed,
}

/// Reads the connection's first request head and decides who serves it. The caller
/// bounds this by the header timeout.
pub async fn sniff<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<Sniffed> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        if buf.len() >= MAX_HEAD {
            return Ok(Sniffed::Other(buf));
        }
        buf.reserve(1024.min(MAX_HEAD - buf.len()));
        let n = io.read_buf(&mut buf).await?;
        if n == 0 {
            return Ok(if buf.is_empty() { Sniffed::Closed } else { Sniffed::Other(buf) });
        }
        match parse(&buf) {
            Parsed::Partial => continue,
            Parsed::EventStream(request) => return Ok(Sniffed::EventStream(request)),
            Parsed::Other => return Ok(Sniffed::Other(buf)),
        }
    }
}

/// Whether `buf` is exactly one request head that [`serve`] answers.
pub fn is_event_stream(buf: &[u8]) -> bool {
    matches!(parse(buf), Parsed::EventStream(_))
}

#[allow(clippy::large_enum_variant)] // as `Sniffed`
pub enum Parsed {
    Partial,
    EventStream(Request<Body>),
    Other,
}

/// Parses `buf` as a request head; only a whole, body-less HTTP/1.1 `GET` asking for
/// `text/event-stream`, with no byte after its head, is served here.
pub fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        // Malformed, HTTP/2's preface, too many headers: hyper answers those.
        Err(_) => return Parsed::Other,
    };
    if len != buf.len() || head.method != Some("GET") || head.version != Some(1) {
        return Parsed::Other;
    }
    let mut wants_events = false;
    for h in head.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            if h.value != b"0" {
                return Parsed::Other;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case("accept") {
            wants_events |= h.value.windows(17).any(|w| w.eq_ignore_ascii_case(b"text/event-stream"));
        }
    }
    if !wants_events {
        return Parsed::Other;
    }
    match build_request(&head) {
        Some(request) => Parsed::EventStream(request),
        None => Parsed::Other,
    }
}

/// The parsed head as the router's request; `None` when a part is not valid for `http`
/// (hyper then gives the client its usual 400).
fn build_request(head: &httparse::Request<'_, '_>) -> Option<Request<Body>> {
    let uri: Uri = head.path?.parse().ok()?;
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    headers.reserve(head.headers.len());
    for h in head.headers.iter() {
        let name = header::HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = header::HeaderValue::from_bytes(h.value).ok()?;
        headers.append(name, value);
    }
    Some(request)
}

/// Answers `request` on `io` and closes the connection when its body ends, the client
/// leaves, `token` fires and the grace runs out, or `hard_stop` fires.
pub async fn serve<I: AsyncRead + AsyncWrite + Unpin>(
    mut io: I,
    request: Request<Body>,
    app: Router,
    token: CancellationToken,
    hard_stop: CancellationToken,
) -> io::Result<()> {
    // Boxed: this future's size is that of its largest state, and the router's future
    // (every layer's) would otherwise stay inline for the life of the stream.
    let response = match Box::pin(app.oneshot(request)).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let answer = answer(&mut io, response);
    tokio::pin!(answer);
    tokio::select! {
        result = answer.as_mut() => return result,
        _ = token.cancelled() => tracing::debug!("closing event stream: its connection's token fired"),
        _ = hard_stop.cancelled() => return Ok(()),
    }
    tokio::select! {
        result = answer => result,
        _ = tokio::time::sleep(KILL_GRACE) => {
            tracing::debug!("dropping event stream that did not end in time");
            Ok(())
        }
        _ = hard_stop.cancelled() => Ok(()),
    }
}

/// Writes the response, then ends the connection as hyper does (over TLS with a
/// close_notify); a client that stopped reading does not get to hold that last step.
async fn answer<I: AsyncRead + AsyncWrite + Unpin>(io: &mut I, response: Response<Body>) -> io::Result<()> {
    respond(io, response).await?;
    let _ = tokio::time::timeout(KILL_GRACE, io.shutdown()).await;
    Ok(())
}

/// Writes the response: its head, then its body as chunks until it ends or the client
/// leaves.
async fn respond<I: AsyncRead + AsyncWrite + Unpin>(io: &mut I, response: Response<Body>) -> io::Result<()> {
    // The head's parts are dropped once it is encoded: held across the stream's awaits,
    // their header map would stay allocated for as long as the stream lives.
    let (head, body, bodiless) = {
        let (parts, body) = response.into_parts();
        let bodiless = parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        (response_head(&parts, bodiless), body, bodiless)
    };
    write_all(io, &mut [IoSlice::new(&head)]).await?;
    drop(head);
    if bodiless {
        return Ok(());
    }
    let mut body = std::pin::pin!(body);
    let mut batch: Vec<Bytes> = Vec::new();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            gone = client_gone(io) => return gone,
        };
        let ended = match frame {
            None => true,
            Some(Ok(frame)) => {
                push_data(&mut batch, frame);
                // Whatever else is ready now goes into the same chunk and write.
                let mut ended = false;
                while batch.len() < MAX_BATCH {
                    match body.frame().now_or_never() {
                        Some(Some(Ok(frame))) => push_data(&mut batch, frame),
                        Some(None) => {
                            ended = true;
                            break;
                        }
                        Some(Some(Err(e))) => return Err(io::Error::other(e)),
                        None => break,
                    }
                }
                ended
            }
            // A body that fails mid-way cannot be told apart from one that ended unless
            // the connection is dropped without the last chunk, as hyper does.
            Some(Err(e)) => return Err(io::Error::other(e)),
        };
        write_chunk(io, &batch, ended).await?;
        batch.clear();
        if ended {
            return Ok(());
        }
        if batch.capacity() > MAX_BATCH {
            batch = Vec::new();
        }
    }
}

fn push_data(batch: &mut Vec<Bytes>, frame: hyper::body::Frame<Bytes>) {
    // Trailers have no place in a response to a client that did not ask for them.
    if let Ok(data) = frame.into_data()
        && !data.is_empty()
    {
        batch.push(data);
    }
}

/// The status line and headers, with `date`, `transfer-encoding: chunked` (unless the
/// status has no body) and `connection: close` as this connection's own.
fn response_head(parts: &axum::http::response::Parts, bodiless: bool) -> Vec<u8> {
    use std::io::Write;
    let mut head = Vec::with_capacity(512);
    let status = parts.status;
    // Writing into a Vec cannot fail.
    let _ = write!(head, "HTTP/1.1 {} {}\r\n", status.as_str(), status.canonical_reason().unwrap_or(""));
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(header::DATE) {
        let _ = write!(head, "date: {}\r\n", httpdate::fmt_http_date(std::time::SystemTime::now()));
    }
    if !bodiless {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    head
}

/// One chunk holding every piece of `batch`, and the last chunk when `last`, in one
/// vectored write (more only if the socket takes part of it).
async fn write_chunk<I: AsyncWrite + Unpin>(io: &mut I, batch: &[Bytes], last: bool) -> io::Result<()> {
    let len: usize = batch.iter().map(Bytes::len).sum();
    let mut size = [0u8; 20];
    let size_len = {
        use std::io::Write;
        let mut cursor = io::Cursor::new(&mut size[..]);
        write!(cursor, "{len:x}\r\n").expect("a usize in hex and CRLF fit in 20 bytes");
        cursor.position() as usize
    };
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() + 3);
    if len > 0 {
        slices.push(IoSlice::new(&size[..size_len]));
        slices.extend(batch.iter().map(|b| IoSlice::new(b)));
        slices.push(IoSlice::new(b"\r\n"));
    }
    if last {
        slices.push(IoSlice::new(b"0\r\n\r\n"));
    }
    write_all(io, &mut slices).await
}

/// Writes every slice, waiting for the socket to take them, and flushes (over TLS the
/// records may wait in rustls otherwise). A client that stops reading leaves this
/// pending; the kill token and its grace end it from outside.
async fn write_all<I: AsyncWrite + Unpin>(io: &mut I, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !slices.is_empty() {
        match io.write_vectored(slices).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => IoSlice::advance_slices(&mut slices, n),
        }
    }
    io.flush().await
}

/// Resolves when the client has closed its side (or the socket failed). Bytes a client
/// sends after its request are read and dropped: this connection serves one request.
/// Cancelled whenever a frame is ready; a read is cancel-safe (plain or TLS).
async fn client_gone<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<()> {
    let mut sink = [0u8; 64];
    loop {
        if io.read(&mut sink).await? == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniffed(head: &str) -> &'static str {
        match parse(head.as_bytes()) {
            Parsed::Partial => "partial",
            Parsed::EventStream(_) => "event stream",
            Parsed::Other => "hyper",
        }
    }

    #[test]
    fn only_a_whole_bodiless_http11_get_for_event_stream_is_served_here() {
        let get = "GET /api/sessions/x/events HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\n\r\n";
        assert_eq!(sniffed(get), "event stream");
        assert_eq!(sniffed(&get.replace("text/event-stream", "TEXT/Event-Stream, */*")), "event stream");
        assert_eq!(sniffed(&get[..get.len() - 2]), "partial");
        assert_eq!(sniffed(&get.replace("Accept: text/event-stream", "Accept: application/json")), "hyper");
        assert_eq!(sniffed(&get.replace("GET", "POST")), "hyper");
        assert_eq!(sniffed(&get.replace("HTTP/1.1", "HTTP/1.0")), "hyper");
        assert_eq!(sniffed(&format!("{get}GET / HTTP/1.1\r\n\r\n")), "hyper", "pipelined bytes");
        assert_eq!(sniffed(&get.replace("Host: a", "Content-Length: 5")), "hyper");
        assert_eq!(sniffed(&get.replace("Host: a", "Content-Length: 0")), "event stream");
        assert_eq!(sniffed(&get.replace("Host: a", "Transfer-Encoding: chunked")), "hyper");
        assert_eq!(sniffed(&get.replace("Host: a", "Upgrade: websocket")), "hyper");
        assert_eq!(sniffed("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "hyper");
        assert_eq!(sniffed("GET /\x01 HTTP/1.1\r\n\r\n"), "hyper");
    }

    #[test]
    fn the_head_carries_the_handlers_headers_and_this_connections_own() {
        let response = Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("content-length", "12")
            .header("connection", "keep-alive")
            .header("x-request-id", "req_1")
            .body(())
            .expect("valid response");
        let (parts, ()) = response.into_parts();
        let head = String::from_utf8(response_head(&parts, false)).expect("ascii head");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("content-type: text/event-stream\r\n"), "{head}");
        assert!(head.contains("x-request-id: req_1\r\n"), "{head}");
        assert!(head.contains("\r\ndate: "), "{head}");
        assert!(head.ends_with("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"), "{head}");
        assert!(!head.contains("content-length") && !head.contains("keep-alive"), "{head}");
    }
}
