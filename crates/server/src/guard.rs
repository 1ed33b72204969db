//! The browser trust boundary: one middleware in front of every route (API, OpenCode
//! routes, web assets, streams, WebSocket upgrades) that refuses what a web page could
//! make a browser send on its own.
//!
//! A page cannot read Spool's answers across origins, but it can *send*: a form POST, a
//! `fetch` with `mode: "no-cors"` or a `text/plain` body, and, after rebinding its own
//! DNS name to 127.0.0.1, ordinary same-origin requests to a local server. So:
//!
//! * **Host** (DNS rebinding). With auth off (no token exists) only loopback names are
//!   served — `localhost`, `127.0.0.1` and other loopback addresses, `[::1]`, any port —
//!   plus the names given with `--allowed-host` (a reverse proxy's). Anything else is a
//!   403 `bad_host`. A rebound page sends its own name as `Host`, so it is refused before
//!   any handler runs. With auth on, a rebound page has no token and no cookie for its
//!   name, so the token check already stops it. A request without any host (HTTP/1.0) is
//!   not a browser's — browsers always send one — and passes. HTTP/2 names the host in
//!   `:authority`, which hyper puts in the URI; every host a request names is checked.
//! * **State changes** (simple-request CSRF), in every auth mode: a POST, PUT, PATCH or
//!   DELETE that carries `Sec-Fetch-Site` other than `same-origin`/`none`, or an `Origin`
//!   that is not the host it was sent to, is a 403 `bad_origin` (a page on another port
//!   of the same machine is another origin, so `same-site` is refused too). A body must
//!   be JSON (`application/json` or `…+json`), a 415 otherwise: a browser sends those
//!   only after a CORS preflight, which Spool never grants. Clients that send neither
//!   header (curl, SDKs) are not browsers and pass.
//!
//! GET requests are not checked for origin: none of them changes state, and a page
//! cannot read their answers. The WebSocket upgrade (a GET that opens a two-way channel)
//! checks its `Origin` in `http/socket.rs` with [`same_origin`].

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use axum::http::{HeaderMap, HeaderName, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// The middleware: checks the request, then hands it on.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // Asked before looking at the request: the body is not `Sync`, so no reference to
    // the request may be held across an await.
    let auth_off = match state.engine.auth().auth_required().await {
        Ok(required) => !required,
        Err(e) => return ApiError::from(e).into_response(),
    };
    match check(auth_off, &state.config.allowed_hosts, &request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::debug!(method = %request.method(), path = request.uri().path(), error = %refusal, "request refused");
            refusal.into_response()
        }
    }
}

fn check(auth_off: bool, allowed_hosts: &[String], request: &Request) -> Result<(), ApiError> {
    if auth_off {
        check_host(request, allowed_hosts)?;
    }
    if matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
        check_origin(request.headers(), request_host(request))?;
        check_body_type(request.headers(), request.body(), request.uri().path())?;
    }
    Ok(())
}

/// The host a request was sent to: its `Host` header, else the URI's authority (HTTP/2).
pub fn request_host(request: &Request) -> Option<&str> {
    host_of(request.headers(), request.uri())
}

fn host_of<'a>(headers: &'a HeaderMap, uri: &'a axum::http::Uri) -> Option<&'a str> {
    headers.get(HOST).and_then(|h| h.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()))
}

fn check_host(request: &Request, allowed: &[String]) -> Result<(), ApiError> {
    let headers = request.headers().get_all(HOST).iter().map(|h| h.to_str().ok());
    let authority = request.uri().authority().map(|a| Some(a.as_str()));
    for host in headers.chain(authority) {
        if !host.is_some_and(|h| host_allowed(h, allowed)) {
            return Err(ApiError::Forbidden {
                code: "bad_host",
                message: "this server answers only to localhost and the names given with --allowed-host \
                          while auth is off (a page that rebinds its DNS name to this machine is not the user)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// True when `host` (`name[:port]`) is a loopback name or one of `allowed`.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
    if literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
        return true;
    }
    // A name configured with a port must match with that port; without one, any port.
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
}

/// `host` without its port: `[::1]:80` → `[::1]`, `example.com:80` → `example.com`.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn bad_origin() -> ApiError {
    ApiError::Forbidden {
        code: "bad_origin",
        message: "a change must come from this server's own pages or from a client that is not a browser".into(),
    }
}

fn check_origin(headers: &HeaderMap, host: Option<&str>) -> Result<(), ApiError> {
    if let Some(site) = headers.get(SEC_FETCH_SITE) {
        // `none`: the person did it (typed the address); `same-origin`: this server's page.
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return Err(bad_origin());
        }
    }
    if let Some(origin) = headers.get(ORIGIN)
        && !origin.to_str().is_ok_and(|o| host.is_some_and(|h| origin_is(o, h)))
    {
        return Err(bad_origin());
    }
    Ok(())
}

/// True when `Origin` names the host the request was sent to. A missing Origin is not
/// same-origin: browsers send it on every cross-origin and every POST request. Used
/// where a browser's credentials (the login cookie) make the request, and for the
/// WebSocket upgrade.
pub fn same_origin(headers: &HeaderMap, uri: Option<&axum::http::Uri>) -> bool {
    let origin = headers.get(ORIGIN).and_then(|v| v.to_str().ok());
    let host = match uri {
        Some(uri) => host_of(headers, uri),
        None => headers.get(HOST).and_then(|v| v.to_str().ok()),
    };
    match (origin, host) {
        (Some(origin), Some(host)) => origin_is(origin, host),
        _ => false,
    }
}

/// `origin` (`scheme://host[:port]`) is `host`. The scheme is not compared: behind a TLS
/// proxy the page is `https://` while the request reaching Spool is plain HTTP.
fn origin_is(origin: &str, host: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o.eq_ignore_ascii_case(host))
}

fn check_body_type(headers: &HeaderMap, body: &Body, path: &str) -> Result<(), ApiError> {
    let length = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    let has_body = match length {
        Some(n) => n > 0,
        None => headers.contains_key(TRANSFER_ENCODING) || !body.is_end_stream(),
    };
    if !has_body {
        return Ok(());
    }
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type.is_some_and(is_json) {
        return Ok(());
    }
    // An upload is the file's raw bytes. `application/octet-stream` is not a type a
    // form can send, so a cross-site page still needs the preflight Spool never grants.
    if path == "/api/uploads" && content_type.is_some_and(is_octet_stream) {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType("a request body must be JSON, with `Content-Type: application/json`".into()))
}

fn is_octet_stream(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/octet-stream")
}

/// `application/json` or `application/…+json`, with any parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_configured_ones_are_allowed() {
        let none: &[String] = &[];
        for host in ["localhost", "LOCALHOST:4747", "127.0.0.1", "127.0.0.1:80", "[::1]", "[::1]:4747", "127.0.0.2:1"] {
            assert!(host_allowed(host, none), "{host}");
        }
        for host in ["rebind.attacker.example:4747", "localhost.attacker.example", "10.0.0.1:4747", "[::2]:1", ""] {
            assert!(!host_allowed(host, none), "{host}");
        }
        let proxy = ["Spool.Example.com".to_owned(), "other.example:8443".to_owned()];
        assert!(host_allowed("spool.example.com", &proxy));
        assert!(host_allowed("spool.example.com:443", &proxy));
        assert!(host_allowed("other.example:8443", &proxy));
        assert!(!host_allowed("other.example:9999", &proxy));
    }

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("multipart/form-data; boundary=x"));
        assert!(!is_json("text/json+json"));
    }

    #[test]
    fn origins_compare_with_the_host() {
        assert!(origin_is("http://127.0.0.1:4747", "127.0.0.1:4747"));
        assert!(origin_is("https://Spool.example", "spool.example"));
        assert!(!origin_is("http://127.0.0.1:9999", "127.0.0.1:4747"));
        assert!(!origin_is("null", "127.0.0.1:4747"));
    }
}
