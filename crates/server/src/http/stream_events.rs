//! The schemas of the event streams' events, for `content(... = "text/event-stream")` in
//! a route's `#[utoipa::path]`: one wrapper per stream, whose schema is one event of it.
//!
//! For `text/event-stream`, OpenAPI 3.1 tools (schemathesis among them) read a media
//! type's `schema` as the schema of *each event* — `{event, data, id}` as strings —
//! which OpenAPI 3.2 names `itemSchema`. Where the `data` is JSON of a known type, the
//! event's schema says so with `contentMediaType` and `contentSchema`, and the wrapper
//! adds that type's schemas to the document.
//!
//! A leaf: the routes of `http/` and `dialect/` import it, and it imports none of them.

use crate::dialect::ag_ui::AgUiEvent;
use crate::dialect::ai_sdk::UiChunk;
use crate::dialect::run_stream::RunEvent;
use spool_protocol::frame::Frame;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

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
