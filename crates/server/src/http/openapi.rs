//! The OpenAPI 3.1 description of the whole HTTP API: the parts no route declares.
//!
//! The document is built from the router itself, not written by hand: every resource's
//! `router()` registers its handlers with `utoipa_axum::routes!`, which adds the route
//! to axum and the handler's `#[utoipa::path]` operation to the document in one step,
//! so a route cannot be served without being described. The schemas derive from the
//! same serde types the handlers read and return. `http/mod.rs` assembles the routes
//! over [`ApiDoc`] and serves the result at `GET /api/openapi.json`.
//!
//! What lives here is what the routes share: the title and tags, the security schemes,
//! the error bodies ([`ErrorBody`], and OpenCode's beside it), the hub's event schemas,
//! the responses any route can give before its handler runs, and the operation ids.
//! The response sets a route names are in `responses.rs`, the event streams' schemas
//! in `stream_events.rs`: leaves every route can import without importing the document.

use super::responses;
use crate::dialect::opencode::routes::NamedError;
use crate::dialect::ws_hub::publish::HubEventSchema;
use spool_protocol::api::ErrorBody;
use utoipa::openapi::schema::{AllOfBuilder, Schema};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

/// The parts of the document no route declares: title, security, shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Spool",
        description = "Hosts AI-agent sessions and streams them over SSE and WebSocket. Every error is JSON \
            `{\"error\": {\"code\", \"message\"}}`; the OpenCode-compatible routes add OpenCode's \
            `{\"name\", \"data\": {\"message\"}}` beside it.",
        license(name = "MIT", identifier = "MIT")
    ),
    modifiers(&SecuritySchemes, &OpenCodeErrorSchema, &HubEventSchema),
    components(schemas(ErrorBody, NamedError, spool_protocol::AlwaysOption)),
    security(("bearer" = []), ("cookie" = [])),
    tags(
        (name = "meta", description = "Health, models, metrics and this document"),
        (name = "auth", description = "Browser login sessions: an HttpOnly cookie that is never the token"),
        (name = "projects", description = "Registered directories"),
        (name = "sessions", description = "Conversations and their history"),
        (name = "mcp", description = "MCP servers: their state and tools, and which a session is offered"),
        (name = "runs", description = "Prompts, runs and approvals"),
        (name = "streams", description = "The session, list and run streams (SSE), the WebSocket hub, and many session and list streams over one WebSocket"),
        (name = "hub", description = "Publishing seed 002 hub events (publisher tokens)"),
        (name = "ui", description = "The embedded browser UI"),
        (name = "opencode", description = "The OpenCode-compatible API (seed 004)"),
    )
)]
pub struct ApiDoc;

/// The two ways to authenticate (see `extract::CurrentUser`). A server with no tokens
/// (loopback only) needs neither.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        let cookie = ApiKeyValue::with_description(
            crate::extract::AUTH_COOKIE,
            "A login session's secret (not a token), set by `POST /api/login` and ended by `POST /api/logout`, \
             by revoking its token or after 7 days; what EventSource and WebSocket connections carry.",
        );
        components.add_security_scheme("cookie", SecurityScheme::ApiKey(ApiKey::Cookie(cookie)));
    }
}

/// `OpenCodeErrorBody`: Spool's error body with OpenCode's `name` and `data` beside it,
/// as the OpenCode routes' error layer builds it.
struct OpenCodeErrorSchema;

impl Modify for OpenCodeErrorSchema {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let both = AllOfBuilder::new()
            .item(Ref::from_schema_name(ErrorBody::name()))
            .item(Ref::from_schema_name(NamedError::name()));
        let components = openapi.components.get_or_insert_with(Default::default);
        components.schemas.insert("OpenCodeErrorBody".into(), RefOr::T(Schema::AllOf(both.build())));
    }
}

/// `doc`, the routes' operations over [`ApiDoc`], made whole: every operation named and
/// given the responses any route can answer with.
pub(super) fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    name_operations(&mut doc);
    shared_responses(&mut doc);
    doc
}

/// Adds what any route can answer before its handler runs (see
/// [`responses::before_handler`]) to every operation.
fn shared_responses(doc: &mut utoipa::openapi::OpenApi) {
    let shared = responses::before_handler();
    for item in doc.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete];
        for operation in operations.into_iter().flatten() {
            for (status, response) in &shared {
                operation.responses.responses.entry(status.clone()).or_insert_with(|| response.clone());
            }
        }
    }
}

/// Gives every operation an `operationId` made of its method and path
/// (`GET /api/sessions/{id}/messages` → `get_api_sessions_id_messages`). utoipa names
/// an operation after its handler, and handlers in different files share names
/// (`list`, `show`, …); an id must be unique in the document.
fn name_operations(doc: &mut utoipa::openapi::OpenApi) {
    for (path, item) in doc.paths.paths.iter_mut() {
        let words: Vec<&str> = path.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
        let operations = [
            ("get", &mut item.get),
            ("post", &mut item.post),
            ("put", &mut item.put),
            ("patch", &mut item.patch),
            ("delete", &mut item.delete),
        ];
        for (method, operation) in operations {
            if let Some(operation) = operation {
                let name = std::iter::once(method).chain(words.iter().copied()).collect::<Vec<_>>().join("_");
                operation.operation_id = Some(name);
            }
        }
    }
}
