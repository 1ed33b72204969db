//! The browser UI: `web/app` embedded in the binary at compile time and served at `/`
//! (the page) and `/ui/…` (its ES modules, styles and icons), so `spool serve` shows the
//! UI with no files on disk and nothing fetched from anywhere else.
//!
//! Why it is shaped this way:
//! * `include_dir!` expands to one `include_bytes!` per file, so cargo rebuilds when a
//!   file changes. A file *added* to `web/app` needs this file touched (or any rebuild).
//! * Every answer says `Cache-Control: no-cache` with a content hash as `ETag`: a browser
//!   revalidates (a cheap 304) and never runs an old module against a new server.
//! * The Content-Security-Policy allows only this origin, so the page cannot load or
//!   send anything elsewhere even if some text in a message tried to.
//! * `--ui-dir DIR` serves the files from disk instead, read on every request, for
//!   working on the UI without rebuilding; only plain relative paths are looked up.
//! * The page routes sessions in the URL fragment (`/#/s/ses_…`), so the server needs
//!   no catch-all route that would hide the API's JSON 404s.
//! * Two more files have a path of their own: the service worker at `/sw.js`, since a
//!   worker's scope is at most its own folder and push notifications need the whole
//!   site (`/`); and the one-decision page at `/d`, short because it goes in chat
//!   messages (`/d#t=<token>`, the token in the fragment, which no request carries).

use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use include_dir::{Dir, include_dir};
use std::borrow::Cow;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

static APP: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../web/app");

// `blob:` images: the composer's thumbnails of files about to be sent (object URLs of the
// local files; an <img> never runs what it shows, and only raster types get one).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
    connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; \
    form-action 'self'";
const NOSNIFF: HeaderName = HeaderName::from_static("x-content-type-options");

pub fn router() -> OpenApiRouter<AppState> {
    // axum's catch-all `{*path}` is not an OpenAPI path template, so the asset route is
    // described under `/ui/{path}` by hand (its operation still comes from `asset`).
    #[derive(OpenApi)]
    #[openapi(paths(asset))]
    struct Assets;
    OpenApiRouter::with_openapi(Assets::openapi())
        .routes(routes!(index))
        .routes(routes!(service_worker))
        .routes(routes!(decide_page))
        .route("/ui/{*path}", get(asset))
}

/// The browser UI's page.
#[utoipa::path(
    get,
    path = "/",
    security(()),
    responses(
        (status = 200, description = "The page", content_type = "text/html; charset=utf-8", body = String),
        (status = 304, description = "Not modified (`If-None-Match` matched the `ETag`)"),
    )
)]
async fn index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    serve(&state, "index.html", &headers)
}

/// The UI's service worker: shows push notifications and answers their buttons.
#[utoipa::path(
    get,
    path = "/sw.js",
    security(()),
    responses(
        (status = 200, description = "The worker's script", content_type = "text/javascript; charset=utf-8", body = String),
        (status = 304, description = "Not modified (`If-None-Match` matched the `ETag`)"),
    )
)]
async fn service_worker(State(state): State<AppState>, headers: HeaderMap) -> Response {
    serve(&state, "sw.js", &headers)
}

/// The one-decision page: `/d#t=<token>` shows the approval a decision token is for and
/// decides it when a button is pressed (loading it decides nothing).
#[utoipa::path(
    get,
    path = "/d",
    security(()),
    responses(
        (status = 200, description = "The page", content_type = "text/html; charset=utf-8", body = String),
        (status = 304, description = "Not modified (`If-None-Match` matched the `ETag`)"),
    )
)]
async fn decide_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    serve(&state, "decide.html", &headers)
}

/// One of the UI's files (ES modules, styles, icons).
#[utoipa::path(
    get,
    path = "/ui/{path}",
    security(()),
    params(("path" = String, Path, description = "The file's path under `web/app`, `/` included")),
    responses(
        (status = 200, description = "The file, with its own content type", content_type = "*/*", body = String),
        (status = 304, description = "Not modified (`If-None-Match` matched the `ETag`)"),
        (status = 404, description = "No such file", body = spool_protocol::api::ErrorBody),
    )
)]
async fn asset(State(state): State<AppState>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&state, &path, &headers)
}

fn serve(state: &AppState, path: &str, request: &HeaderMap) -> Response {
    let body: Option<Cow<'static, [u8]>> = match &state.config.ui_dir {
        // `include_dir` looks paths up literally: `..` or a leading `/` finds nothing.
        None => APP.get_file(path).map(|f| Cow::Borrowed(f.contents())),
        Some(dir) => from_disk(dir, path).map(Cow::Owned),
    };
    let Some(body) = body else {
        return crate::ApiError::RouteNotFound(format!("GET /ui/{}", path.chars().take(200).collect::<String>()))
            .into_response();
    };
    let etag = format!("\"{:016x}\"", fnv1a(&body));
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static(content_type(path))),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (ETAG, HeaderValue::from_str(&etag).expect("hex digits and quotes are a valid header value")),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (NOSNIFF, HeaderValue::from_static("nosniff")),
    ];
    let fresh = request.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(&etag));
    if fresh { (StatusCode::NOT_MODIFIED, headers).into_response() } else { (headers, body).into_response() }
}

/// A file under `dir`, for `--ui-dir`: plain relative paths only (no `..`, no root).
fn from_disk(dir: &std::path::Path, path: &str) -> Option<Vec<u8>> {
    let relative = std::path::Path::new(path);
    let plain = relative.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain {
        return None;
    }
    std::fs::read(dir.join(relative)).ok()
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// A content hash for the `ETag`: stable across builds of the same bytes, no dependency.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
