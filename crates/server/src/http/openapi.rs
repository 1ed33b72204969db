//! `GET /api/openapi.json`: the OpenAPI 3.1 description of the whole HTTP API.
//!
//! The document is built from the router itself, not written by hand: every resource's
//! `router()` registers its handlers with `utoipa_axum::routes!`, which adds the route
//! to axum and the handler's `#[utoipa::path]` operation to the document in one step,
//! so a route cannot be served without being described. The schemas derive from the
//! same serde types the handlers read and return.
//!
//! What lives here is what every route shares: the error responses (one JSON body for
//! all of them, [`ErrorBody`]), the security schemes, and the handler that serves the
//! document, serialized once per process.

use super::hub::HubEventSchema;
use crate::dialect::ag_ui::AgUiEvent;
use crate::dialect::ai_sdk::UiChunk;
use crate::dialect::run_stream::RunEvent;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use spool_protocol::api::ErrorBody;
use spool_protocol::frame::Frame;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Content, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoResponses, Modify, OpenApi, PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

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
    components(schemas(ErrorBody, super::opencode::NamedError, spool_protocol::AlwaysOption)),
    security(("bearer" = []), ("cookie" = [])),
    tags(
        (name = "meta", description = "Health, models, metrics and this document"),
        (name = "auth", description = "Browser login sessions: an HttpOnly cookie that is never the token"),
        (name = "projects", description = "Registered directories"),
        (name = "sessions", description = "Conversations and their history"),
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
            .item(Ref::from_schema_name(super::opencode::NamedError::name()));
        let components = openapi.components.get_or_insert_with(Default::default);
        components.schemas.insert("OpenCodeErrorBody".into(), RefOr::T(Schema::AllOf(both.build())));
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(document))
}

/// The document of the whole API, as [`super::api`] builds it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = super::api().into_openapi();
    name_operations(&mut doc);
    shared_responses(&mut doc);
    doc
}

/// Adds what any route can answer before its handler runs: 403 from the browser trust
/// guard (`crate::guard`: `bad_host`, `bad_origin`) and 503 from the accept loop
/// (`too_many_connections`).
fn shared_responses(doc: &mut utoipa::openapi::OpenApi) {
    let shared = error_responses("ErrorBody", &[(403, FORBIDDEN), (503, UNAVAILABLE)]);
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

/// This document.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 description of this API", body = Object))
)]
async fn document() -> Response {
    static JSON: OnceLock<Bytes> = OnceLock::new();
    let json = JSON
        .get_or_init(|| Bytes::from(openapi().to_json().expect("the document is plain data and always serializes")));
    ([(CONTENT_TYPE, "application/json")], json.clone()).into_response()
}

// ---- event streams --------------------------------------------------------------------
//
// For `text/event-stream`, OpenAPI 3.1 tools (schemathesis among them) read a media
// type's `schema` as the schema of *each event* — `{event, data, id}` as strings —
// which OpenAPI 3.2 names `itemSchema`. Where the `data` is JSON of a known type, the
// event's schema says so with `contentMediaType` and `contentSchema`.

/// The schema of one event: `event` is one of `kinds` (any name when empty), `data`
/// is JSON, of schema `data` when given.
fn sse_event(description: &str, kinds: &[&str], data: Option<&str>) -> RefOr<Schema> {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let event = if kinds.is_empty() { string() } else { string().enum_values(Some(kinds.iter().copied())) };
    let mut payload = string().content_media_type("application/json");
    if let Some(name) = data {
        // `contentSchema` is a JSON Schema keyword utoipa's builder lacks; the extension
        // map writes any key into the object as is.
        let reference = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
        payload = payload.extensions(Some([("contentSchema", reference)].into_iter().collect()));
    }
    ObjectBuilder::new()
        .description(Some(description))
        .property("event", event)
        .property("data", payload)
        .property("id", string().description(Some("The event's id, where the stream can resume after it")))
        .required("data")
        .into()
}

/// An event of the run stream (`POST /api/chat`, `GET /api/runs/{id}/events`, a resume
/// with `Accept: text/event-stream`).
pub struct RunStreamEvent;

impl PartialSchema for RunStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event(
            "`event` is the run event's `type`; `id` its `sequence`",
            &["run_started", "text_delta", "tool_started", "tool_finished", "interrupt", "done", "error", "snapshot"],
            Some(&RunEvent::name()),
        )
    }
}

impl ToSchema for RunStreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((RunEvent::name().into(), RunEvent::schema()));
        RunEvent::schemas(schemas);
    }
}

/// An event of the AI SDK's UI message stream (`POST /api/ai-sdk/chat`, `GET
/// /api/ai-sdk/chat/{id}/stream`): no `event` name, `data` one UI message chunk, the last
/// one's `data` the literal `[DONE]`.
pub struct UiMessageStreamEvent;

impl PartialSchema for UiMessageStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event(
            "A UI message chunk (no `event`, no `id`); the stream's last `data` is `[DONE]`",
            &[],
            Some(&UiChunk::name()),
        )
    }
}

impl ToSchema for UiMessageStreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((UiChunk::name().into(), UiChunk::schema()));
        UiChunk::schemas(schemas);
    }
}

/// An event of the AG-UI stream (`POST /api/ag-ui`): no `event` name, no `id`, `data`
/// one AG-UI event.
pub struct AgUiStreamEvent;

impl PartialSchema for AgUiStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event("An AG-UI event (no `event`, no `id`)", &[], Some(&AgUiEvent::name()))
    }
}

impl ToSchema for AgUiStreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((AgUiEvent::name().into(), AgUiEvent::schema()));
        AgUiEvent::schemas(schemas);
    }
}

/// An event of the native session stream: a frame (`session.snapshot`,
/// `session.state`, `run.accepted`, `loop.event`) with no `event` name and the id
/// `streamId:seq`, or an `event: heartbeat` with `data: {}`.
pub struct SessionStreamEvent;

impl PartialSchema for SessionStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event("A frame (no `event`; `id` is `streamId:seq`) or a `heartbeat`", &["heartbeat"], Some(&Frame::name()))
    }
}

impl ToSchema for SessionStreamEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Frame::name().into(), Frame::schema()));
        Frame::schemas(schemas);
    }
}

/// An event of the list stream: `lists.reset`, `sessions.changed`, `projects.changed`
/// or `heartbeat`.
pub struct ListStreamEvent;

impl PartialSchema for ListStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event("A list notification (no `event`: its type is in `data`) or a `heartbeat`", &["heartbeat"], None)
    }
}

impl ToSchema for ListStreamEvent {}

/// An event of OpenCode's `GET /event`: `data` is `{id, type, properties}`, no `event`.
pub struct OpenCodeStreamEvent;

impl PartialSchema for OpenCodeStreamEvent {
    fn schema() -> RefOr<Schema> {
        sse_event("An OpenCode event: `data` is `{id, type, properties}`", &[], None)
    }
}

impl ToSchema for OpenCodeStreamEvent {}

/// An event of OpenCode's `GET /global/event`: `data` is `{directory, payload}`, the
/// payload an event of `GET /event`.
pub struct OpenCodeGlobalEvent;

impl PartialSchema for OpenCodeGlobalEvent {
    fn schema() -> RefOr<Schema> {
        sse_event("An OpenCode global event: `data` is `{directory, payload: {id, type, properties}}`", &[], None)
    }
}

impl ToSchema for OpenCodeGlobalEvent {}

// ---- error responses ----------------------------------------------------------------
//
// Sets of error responses, named by the kind of route, for `responses(...)` in a
// `#[utoipa::path]`. Each status is one the route's extractors or the engine can
// answer with; all carry the shared error body.

const BAD_QUERY: &str = "A query value the server cannot read (`invalid_query`)";
const BAD_BODY: &str = "A body that is not valid JSON or has wrong fields (`malformed_json`, `invalid_body`), \
    or a value the server refuses";
const UNAUTHORIZED: &str = "No valid token or login session on a server that requires one (`unauthorized`, \
    `invalid_token`: unknown, revoked, logged out or expired)";
const FORBIDDEN: &str = "A `Host` that is neither loopback nor given with `--allowed-host` while auth is off \
    (`bad_host`); a change a browser page of another origin sent: a foreign `Origin` or `Sec-Fetch-Site` other \
    than `same-origin` (`bad_origin`); a project directory outside the user's project roots (`outside_roots`, the \
    same answer whether or not the path exists) or holding or inside Spool's data directory (`data_dir`), on \
    registration or on a prompt in such a project";
const UPGRADE_FORBIDDEN: &str = "A browser page of another origin (`bad_origin`), or a `Host` this server does not \
    serve while auth is off (`bad_host`)";
const NOT_FOUND: &str = "No such resource, or one that belongs to another user (`not_found`)";
const CONFLICT: &str = "The request collides with the current state (`session_busy`, `already_resolved`, …)";
const DECISION_CONFLICT: &str = "The decision was not applied: the approval was already decided, expired or \
    cancelled (`already_resolved`); a request with this idempotency key is still being processed \
    (`request_in_progress`); or, on an approving decision, the file the `write` or `edit` would change was changed \
    after the approval was asked (`resource_changed`): nothing ran, the approval is now `superseded`, and \
    `error.approvalId` names the new approval that asks for the same call with a preview of the change against the \
    file as it is now. A reject is never refused for a changed file. Repeating the idempotency key returns this \
    same answer";
const DECISION_BAD: &str = "A body that is not valid JSON or has wrong fields (`malformed_json`, \
    `invalid_body`), a message or idempotency key past its limit, or an `always` whose `pattern`/`patterns` is \
    not one of the approval's `payload.alwaysOptions` (`pattern_not_offered`, naming the choices; nothing is \
    decided)";
const GONE: &str = "The approval expired (`approval_expired`)";
const TOO_LARGE: &str = "The body or prompt is over the server's limit (`body_too_large`, `prompt_too_large`)";
const MEDIA_TYPE: &str =
    "A body without a JSON `Content-Type` (`application/json` or `…+json`) (`unsupported_media_type`)";
const UNAVAILABLE: &str = "The server is at its connection cap (`too_many_connections`, `--max-connections`) \
    or a dependency it needs is unavailable";
const TOO_MANY: &str = "Too many open streams or active runs for this user (`too_many_streams`, `too_many_runs`)";

fn error_responses(schema: &str, cases: &[(u16, &str)]) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
    cases
        .iter()
        .map(|(status, description)| {
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/json", Content::new(Some(Ref::from_schema_name(schema))))
                .build();
            (status.to_string(), response.into())
        })
        .collect()
}

/// A route that reads a user's data: `GET` with an id and perhaps a query.
pub struct ReadErrors;

impl IntoResponses for ReadErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("ErrorBody", &[(400, BAD_QUERY), (401, UNAUTHORIZED), (404, NOT_FOUND)])
    }
}

/// A stream: a read that also counts against the user's open streams.
pub struct StreamErrors;

impl IntoResponses for StreamErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("ErrorBody", &[(400, BAD_QUERY), (401, UNAUTHORIZED), (404, NOT_FOUND), (429, TOO_MANY)])
    }
}

/// A WebSocket upgrade: `101` when the socket opens, `403` for a page or `Host` the
/// server refuses, and a stream's errors.
pub struct UpgradeResponses;

impl IntoResponses for UpgradeResponses {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        let opened = ResponseBuilder::new().description("Switching protocols: the socket is open").build();
        let mut responses = error_responses("ErrorBody", &[(403, UPGRADE_FORBIDDEN)]);
        responses.insert("101".into(), opened.into());
        responses.extend(StreamErrors::responses());
        responses
    }
}

/// A route that changes something, with or without a JSON body.
pub struct WriteErrors;

impl IntoResponses for WriteErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("ErrorBody", WRITE)
    }
}

const WRITE: &[(u16, &str)] = &[
    (400, BAD_BODY),
    (401, UNAUTHORIZED),
    (403, FORBIDDEN),
    (404, NOT_FOUND),
    (409, CONFLICT),
    (410, GONE),
    (413, TOO_LARGE),
    (415, MEDIA_TYPE),
    (429, TOO_MANY),
];

/// `POST /api/markdown`: a batch of texts to render, refused whole.
pub struct MarkdownErrors;

impl IntoResponses for MarkdownErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses(
            "ErrorBody",
            &[
                (
                    400,
                    "A body that is not valid JSON or has wrong fields (`malformed_json`, `invalid_body`), or more \
                    than 64 texts (`too_many_texts`)",
                ),
                (401, UNAUTHORIZED),
                (403, FORBIDDEN),
                (
                    413,
                    "The body is over the server's limit (`body_too_large`), or one text is over 256 KiB \
                    (`text_too_large`, the message names its index)",
                ),
                (415, MEDIA_TYPE),
            ],
        )
    }
}

/// `POST /api/hub/events`: a publish, refused whole.
pub struct PublishErrors;

impl IntoResponses for PublishErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses(
            "ErrorBody",
            &[
                (400, "A body that is not valid JSON (`malformed_json`)"),
                (
                    401,
                    "No token, or an unknown or revoked one, on a server that requires auth (`unauthorized`, \
                    `invalid_token`)",
                ),
                (
                    403,
                    "A user's token: only publisher tokens publish (`not_a_publisher`); or the browser guard \
                    (`bad_host`, `bad_origin`)",
                ),
                (413, TOO_LARGE),
                (415, MEDIA_TYPE),
                (
                    422,
                    "An event of an unknown type, a payload that does not match its type's schema, a bad \
                    channel id or audience, or a limit broken (`invalid_event`, `invalid_audience`): the \
                    message names the field and the event's index in `events`; nothing of the request was \
                    published",
                ),
                (503, "The event bus (Redis) cannot be reached (`bus_unavailable`)"),
            ],
        )
    }
}

/// A decision on an approval: a write whose 409 says which conflicts a decision meets.
pub struct DecisionErrors;

impl IntoResponses for DecisionErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("ErrorBody", &decision(WRITE))
    }
}

/// An OpenCode permission reply: [`OpenCodeErrors`] with a decision's 409.
pub struct OpenCodeDecisionErrors;

impl IntoResponses for OpenCodeDecisionErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("OpenCodeErrorBody", &decision(WRITE))
    }
}

fn decision(cases: &[(u16, &'static str)]) -> Vec<(u16, &'static str)> {
    let text = |status, text| match status {
        400 => DECISION_BAD,
        409 => DECISION_CONFLICT,
        _ => text,
    };
    cases.iter().map(|&(status, t)| (status, text(status, t))).collect()
}

/// Any OpenCode-compatible route: the same statuses as a write, with OpenCode's error
/// fields beside Spool's.
pub struct OpenCodeErrors;

impl IntoResponses for OpenCodeErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        error_responses("OpenCodeErrorBody", WRITE)
    }
}
