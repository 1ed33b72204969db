//! The HTTP API: one file per resource, each with a `router()` (a dialect's are in
//! `dialect/<name>/`, beside its mapping: `routes.rs` for the run stream, the AI SDK,
//! AG-UI and the hub's socket, `publish.rs` for the hub's publishing, `routes/` for
//! OpenCode), assembled here with the layers every route shares (the browser trust
//! guard, body limit, panic catcher, tracing) and JSON answers for unknown routes and
//! wrong methods.
//!
//! A resource's `router()` is a `utoipa_axum` `OpenApiRouter`: registering a handler
//! also adds its operation to the OpenAPI document (`openapi.rs` holds the parts no
//! route declares), so the document this file serves at `/api/openapi.json` lists
//! exactly the routes it assembles. The document and this file are the top of `http/`:
//! the routes import the response sets and event schemas they name from two leaves,
//! `responses.rs` and `stream_events.rs`, never from here.

mod approvals;
mod assets;
pub(crate) mod attachments;
mod auth;
mod branches;
pub(crate) mod decision;
mod decision_tokens;
mod events;
mod fork;
mod gate;
mod health;
mod lists;
mod markdown;
mod mcp;
mod messages;
mod metrics;
mod models;
mod observe;
mod openapi;
mod presence;
mod projects;
mod push;
mod ready;
pub(crate) mod responses;
mod revert;
pub(crate) mod run_feed;
mod runs;
mod search;
mod sessions;
pub(crate) mod socket;
pub(crate) mod sse;
mod steer;
pub(crate) mod stream_events;
mod streams;
mod tool_calls;
mod webhooks;

use crate::dialect::{ag_ui, ai_sdk, opencode, run_stream, ws_hub};
use crate::error::ApiError;
use crate::extract::BodyCheck;
use crate::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header::CONTENT_TYPE;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::any::Any;
use std::sync::OnceLock;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The whole API over `state`.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config.max_body_bytes;
    let (routes, _document) = api().split_for_parts();
    with_layers(routes.with_state(state.clone()), body_limit, Some(state))
}

/// Every route, each with its OpenAPI operation, by the group (tag) it is shown in.
fn api() -> OpenApiRouter<AppState> {
    let document = OpenApiRouter::new().routes(routes!(document));
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(tagged("meta", [health::router(), ready::router(), models::router(), metrics::router(), document]))
        .merge(tagged("auth", [auth::router()]))
        .merge(tagged("projects", [projects::router()]))
        .merge(tagged(
            "sessions",
            [sessions::router(), fork::router(), branches::router(), revert::router(), presence::router()],
        ))
        .merge(tagged("mcp", [mcp::router()]))
        .merge(tagged("notifications", [push::router(), decision_tokens::router(), webhooks::router()]))
        .merge(tagged(
            "runs",
            [
                attachments::router(),
                runs::router(),
                messages::router(),
                approvals::router(),
                gate::router(),
                steer::router(),
                tool_calls::router(),
            ],
        ))
        .merge(tagged("ui", [markdown::router(), assets::router()]))
        .merge(tagged("hub", [ws_hub::publish::router()]))
        .merge(tagged("opencode", [opencode::routes::router()]))
        .merge(tagged(
            "streams",
            [
                events::router(),
                run_stream::routes::router(),
                ag_ui::routes::router(),
                ws_hub::routes::router(),
                streams::router(),
            ],
        ))
        // Operations of several groups: each of their handlers names its own.
        .merge(search::router())
        .merge(lists::router())
        .merge(ai_sdk::routes::router())
}

/// `routers` as one, with `tag` on each operation that names none: a module's group in
/// the document is said once, here, not on every handler.
fn tagged<const N: usize>(tag: &str, routers: [OpenApiRouter<AppState>; N]) -> OpenApiRouter<AppState> {
    let mut routes = routers.into_iter().fold(OpenApiRouter::new(), OpenApiRouter::merge);
    for item in routes.get_openapi_mut().paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            let tags = operation.tags.get_or_insert_with(Vec::new);
            if tags.is_empty() {
                tags.push(tag.to_owned());
            }
        }
    }
    routes
}

/// The document of the whole API, as [`api`] builds it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    openapi::finish(api().into_openapi())
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 description of this API", body = Object))
)]
async fn document() -> Response {
    static JSON: OnceLock<Bytes> = OnceLock::new();
    let json = JSON
        .get_or_init(|| Bytes::from(openapi().to_json().expect("the document is plain data and always serializes")));
    ([(CONTENT_TYPE, "application/json")], json.clone()).into_response()
}

/// Every JSON request body a handler reads, with its route (see `crate::fuzzing`).
pub(crate) fn request_bodies() -> impl Iterator<Item = &'static (&'static str, BodyCheck)> {
    [
        ag_ui::routes::BODIES,
        ai_sdk::routes::BODIES,
        approvals::BODIES,
        auth::BODIES,
        run_stream::routes::BODIES,
        gate::BODIES,
        lists::BODIES,
        opencode::routes::BODIES,
        projects::BODIES,
    ]
    .into_iter()
    .chain([
        ws_hub::publish::BODIES,
        markdown::BODIES,
        mcp::BODIES,
        runs::BODIES,
        sessions::BODIES,
        fork::BODIES,
        branches::BODIES,
        revert::BODIES,
        steer::BODIES,
        streams::BODIES,
        tool_calls::BODIES,
        ws_hub::routes::BODIES,
        push::BODIES,
        decision_tokens::BODIES,
    ])
    .flatten()
}

/// Fallbacks and the layers shared by every route. Separate from [`router`] so a test
/// can put the same layers around a route the API does not have (one that panics).
/// With `trust`, every request — unknown routes included — passes `crate::guard` first.
fn with_layers(routes: Router, body_limit: usize, trust: Option<AppState>) -> Router {
    let routes = routes
        .fallback(route_not_found)
        // After the routes: it applies to the method routers registered so far.
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit));
    let metrics = trust.as_ref().map(|state| state.engine.metrics().clone());
    let routes = match trust {
        Some(state) => routes.layer(axum::middleware::from_fn_with_state(state, crate::guard::guard)),
        None => routes,
    };
    // Around the panic catcher, so a handler's panic is counted as the 500 it becomes,
    // and around the trust guard, so the requests it refuses are counted too.
    let routes = routes.layer(CatchPanicLayer::custom(panic_response));
    let routes = match metrics {
        Some(metrics) => routes.layer(axum::middleware::from_fn_with_state(metrics, observe::record)),
        None => routes,
    };
    // Outermost first: a request gets its id, the id goes back on the response, and
    // the trace span (inside both) carries it, so every log line of the request names it.
    routes
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(axum::middleware::map_request(drop_unusable_request_id))
}

/// Most characters of a request id a client may choose (a UUID is 36).
const MAX_REQUEST_ID: usize = 64;

/// An `x-request-id` a client or proxy sent is kept (the response echoes it and the
/// logs name it) if it is short and plain — letters, digits, `-_.:` — and replaced by a
/// fresh UUID otherwise: it is written into every log line of the request, where a
/// long or odd value would be noise or a forged log.
async fn drop_unusable_request_id(mut request: axum::extract::Request) -> axum::extract::Request {
    let usable = request.headers().get(REQUEST_ID).map(|v| {
        let v = v.as_bytes();
        !v.is_empty() && v.len() <= MAX_REQUEST_ID && v.iter().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b))
    });
    if usable == Some(false) {
        request.headers_mut().remove(REQUEST_ID);
    }
    request
}

const REQUEST_ID: &str = "x-request-id";

/// The span of one HTTP request: its id, method and path (its first 200 characters;
/// not the query, which may carry a token). At INFO, so it is on under the default filter and what a handler
/// logs (a run accepted) carries the request id.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
    let path: String = request.uri().path().chars().take(200).collect();
    tracing::info_span!("request", request_id = %id, method = %request.method(), path = %path)
}

async fn route_not_found(method: Method, uri: Uri) -> ApiError {
    let path: String = uri.path().chars().take(200).collect();
    ApiError::RouteNotFound(format!("{method} {path}"))
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method.to_string())
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    tracing::error!(panic = %message, "a handler panicked");
    ApiError::Internal.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt;

    async fn call(app: &Router, path: &str) -> (StatusCode, serde_json::Value) {
        let res = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).expect("valid request"))
            .await
            .expect("infallible");
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 16).await.expect("small body");
        (status, serde_json::from_slice(&bytes).expect("json body"))
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_json_500_and_the_router_keeps_serving() {
        async fn boom() -> &'static str {
            panic!("boom")
        }
        let app =
            with_layers(Router::new().route("/boom", get(boom)).route("/ok", get(|| async { "{}" })), 1 << 20, None);
        let (status, body) = call(&app, "/boom").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "internal");
        assert_eq!(body["error"]["message"], "internal server error");
        let (status, _) = call(&app, "/ok").await;
        assert_eq!(status, StatusCode::OK);
    }
}
