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
use crate::dialect::run_stream::RunStreamData;
use spool_protocol::frame::Frame;
use std::borrow::Cow;
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

/// Declares a wrapper whose schema is one event of a stream: its description, the
/// `event` names it may carry (any when empty), and, where `data` is JSON of a known
/// type, that type, whose schemas the wrapper adds to the document. Seven streams, one
/// shape: the macro keeps each to what differs.
macro_rules! stream_event {
    ($(#[$doc:meta])* $name:ident, $description:expr, $kinds:expr $(, data = $data:ty)?) => {
        $(#[$doc])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                // The data type's name, or none when the stream declares no type.
                let data: Option<Cow<'static, str>> = [$(<$data>::name())?].into_iter().next();
                sse_event($description, $kinds, data.as_deref())
            }
        }

        impl ToSchema for $name {
            fn schemas(_schemas: &mut Vec<(String, RefOr<Schema>)>) {
                $(
                    _schemas.push((<$data>::name().into(), <$data>::schema()));
                    <$data>::schemas(_schemas);
                )?
            }
        }
    };
}

stream_event!(
    /// An event of the run stream (`POST /api/chat`, `GET /api/runs/{id}/events`, a
    /// resume with `Accept: text/event-stream`).
    RunStreamEvent,
    "`event` is the run event's `type`; `id` its `sequence` (`presence` has none)",
    &["run_started", "text_delta", "tool_started", "tool_finished", "interrupt", "done", "error", "snapshot", "presence"],
    data = RunStreamData
);

stream_event!(
    /// An event of the AI SDK's UI message stream (`POST /api/ai-sdk/chat`, `GET
    /// /api/ai-sdk/chat/{id}/stream`): no `event` name, `data` one UI message chunk, the
    /// last one's `data` the literal `[DONE]`.
    UiMessageStreamEvent,
    "A UI message chunk (no `event`, no `id`); the stream's last `data` is `[DONE]`",
    &[],
    data = UiChunk
);

stream_event!(
    /// An event of the AG-UI stream (`POST /api/ag-ui`): no `event` name, no `id`, `data`
    /// one AG-UI event.
    AgUiStreamEvent,
    "An AG-UI event (no `event`, no `id`)",
    &[],
    data = AgUiEvent
);

stream_event!(
    /// An event of the native session stream: a frame (`session.snapshot`,
    /// `session.state`, `run.accepted`, `loop.event`) with no `event` name and the id
    /// `streamId:seq`, or an `event: heartbeat` with `data: {}`.
    SessionStreamEvent,
    "A frame (no `event`; `id` is `streamId:seq`) or a `heartbeat`",
    &["heartbeat"],
    data = Frame
);

stream_event!(
    /// An event of the list stream: `lists.reset`, `sessions.changed`,
    /// `projects.changed` or `heartbeat`.
    ListStreamEvent,
    "A list notification (no `event`: its type is in `data`) or a `heartbeat`",
    &["heartbeat"]
);

stream_event!(
    /// An event of OpenCode's `GET /event`: `data` is `{id, type, properties}`, no
    /// `event`.
    OpenCodeStreamEvent,
    "An OpenCode event: `data` is `{id, type, properties}`",
    &[]
);

stream_event!(
    /// An event of OpenCode's `GET /global/event`: `data` is `{directory, payload}`, the
    /// payload an event of `GET /event`.
    OpenCodeGlobalEvent,
    "An OpenCode global event: `data` is `{directory, payload: {id, type, properties}}`",
    &[]
);
