//! `POST /api/hub/events`: components outside the process publish seed 002 hub events.
//! A thin adapter: it reads the body into typed events (every payload checked against
//! its type's schema before anything is published, so a refused batch delivers
//! nothing), and hands them to the hub's [`Broadcaster`], the same path an embedded
//! component takes.
//!
//! Who may publish: a publisher token (`spool token create --publisher NAME`) — not a
//! user's token nor a browser login, since publishing speaks for whole channels and
//! their audiences, which no one user owns. While auth is off (one local user on
//! loopback) anyone who can reach the server may publish, as they may do everything
//! else.
//!
//! The body is one event `{type, channel_id?, data, audience}` or a batch
//! `{events: [{type, channel_id?, data}, …], audience}`. `audience` grants the events
//! to `"public"` or to a list of existing users' names. No event may speak on a Spool
//! session's channel, however spelled (`protocol::hub::is_session_namespace`). The
//! answer names each event's cursor.

use crate::error::ApiError;
use crate::extract::{BodyCheck, JsonBody, bearer, json_body};
use crate::http::responses::PublishErrors;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Serialize;
use serde_json::{Map, Value};
use spool_engine::EngineError;
use spool_engine::auth::Principal;
use spool_engine::hub::{Broadcaster, Grant};
use spool_protocol::hub::{FieldError, HubEvent, HubEventType, HubPayload, MAX_BATCH};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(publish))
}

/// One event as published (for the OpenAPI document; the handler reads the body
/// itself, to name the field and batch index of what it refuses).
#[derive(ToSchema)]
#[allow(dead_code)]
struct PublishEvent {
    /// The event type; `data` must match its payload schema.
    #[schema(rename = "type")]
    kind: HubEventType,
    /// The channel, for channel types (letters, digits and `_-.:@`, at most 128 bytes;
    /// not beginning with `ses` and a separator, in any case: sessions' channels). Global
    /// types ignore it.
    channel_id: Option<String>,
    /// The payload of `type` (`null` or absent for `channel.deleted`).
    data: HubPayload,
}

/// Who may see the events: `"public"`, or user names.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
#[serde(untagged)]
enum AudienceDoc {
    #[schema(example = "public")]
    Public(String),
    Users(Vec<String>),
}

/// One event with its audience, or `events` (1 to 100) with theirs.
#[derive(ToSchema)]
#[allow(dead_code)]
struct PublishRequest {
    audience: AudienceDoc,
    events: Option<Vec<PublishEvent>>,
    #[schema(rename = "type")]
    kind: Option<HubEventType>,
    channel_id: Option<String>,
    data: Option<HubPayload>,
}

#[derive(Serialize, ToSchema)]
struct PublishedEvent {
    #[serde(rename = "type")]
    kind: HubEventType,
    /// `""` for a global event.
    channel_id: String,
    /// `streamId:seq` of the event in its channel.
    cursor: String,
}

#[derive(Serialize, ToSchema)]
struct Published {
    /// In the order given.
    events: Vec<PublishedEvent>,
}

/// Publishes hub events to the WebSocket hub's subscribers (needs a publisher token).
#[utoipa::path(
    post,
    path = "/api/hub/events",
    request_body = PublishRequest,
    responses((status = 200, body = Published), PublishErrors)
)]
async fn publish(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Published>, ApiError> {
    authorize(&state, &headers).await?;
    let (grant, events) = read(body)?;
    grant.check().map_err(|e| ApiError::Unprocessable { code: e.code(), message: e.to_string() })?;
    let placed: Vec<(HubEventType, String)> = events.iter().map(|e| (e.payload.kind(), e.channel_id.clone())).collect();
    // What the hub refuses at publish is the audience (a user that does not exist): a
    // 422 like every other refused part of the body.
    let cursors = state.engine.hub().to(grant).publish(events).await.map_err(|e| match e {
        EngineError::Invalid { code, message } => ApiError::Unprocessable { code, message },
        e => ApiError::from(e),
    })?;
    let events = placed
        .into_iter()
        .zip(cursors)
        .map(|((kind, channel_id), cursor)| PublishedEvent { kind, channel_id, cursor: cursor.to_string() })
        .collect();
    Ok(Json(Published { events }))
}

/// A publisher token, or anyone while auth is off. Cookies never publish.
async fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let auth = state.engine.auth();
    if !auth.auth_required().await? {
        return Ok(());
    }
    let Some(secret) = bearer(headers) else {
        return Err(ApiError::Unauthorized {
            code: "unauthorized",
            message: "publishing needs a publisher token: `Authorization: Bearer <token>` from \
                `spool token create --publisher NAME`"
                .into(),
        });
    };
    match auth.authenticate_principal(secret).await? {
        Some(Principal::Publisher { .. }) => Ok(()),
        Some(Principal::User { .. }) => Err(ApiError::Forbidden {
            code: "not_a_publisher",
            message: "a user's token cannot publish hub events; use a publisher token \
                (`spool token create --publisher NAME`)"
                .into(),
        }),
        None => {
            Err(ApiError::Unauthorized { code: "invalid_token", message: "the token is unknown or revoked".into() })
        }
    }
}

fn refuse(at: Option<usize>, error: FieldError) -> ApiError {
    let message = match at {
        Some(i) => format!("events[{i}].{error}"),
        None => error.to_string(),
    };
    ApiError::Unprocessable { code: "invalid_event", message }
}

/// Reads the body into its audience and checked events; the first problem refuses it.
/// The body this module reads, parsed and checked as its handler does: every event of
/// the batch against its payload schema, and the audience.
pub(crate) const BODIES: &[(&str, BodyCheck)] = &[("POST /api/hub/events", |b| read(json_body::<Value>(b)?).map(drop))];

fn read(body: Value) -> Result<(Grant, Vec<HubEvent>), ApiError> {
    let Value::Object(mut body) = body else {
        let message = "the body is one event {type, channel_id?, data, audience} or {events: [...], audience}";
        return Err(ApiError::Unprocessable { code: "invalid_event", message: message.into() });
    };
    let grant = match body.remove("audience") {
        Some(Value::String(s)) if s == "public" => Grant::Public,
        Some(Value::Array(names)) => Grant::Users(
            names
                .into_iter()
                .map(|n| match n {
                    Value::String(s) => Ok(s),
                    _ => Err(refuse(None, FieldError::new("audience", "user names are strings"))),
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(refuse(None, FieldError::new("audience", "\"public\" or a list of user names"))),
        None => {
            return Err(refuse(None, FieldError::new("audience", "required: \"public\" or a list of user names")));
        }
    };
    let Some(events) = body.remove("events") else {
        return Ok((grant, vec![event(None, body)?]));
    };
    if let Some(key) = body.keys().next() {
        let problem = format!("unknown field `{}` beside `events`", clip(key));
        return Err(refuse(None, FieldError::new(clip(key), problem)));
    }
    let Value::Array(events) = events else {
        return Err(refuse(None, FieldError::new("events", "a list of events")));
    };
    if events.is_empty() || events.len() > MAX_BATCH {
        let problem = format!("1 to {MAX_BATCH} events (this has {})", events.len());
        return Err(refuse(None, FieldError::new("events", problem)));
    }
    let events = events
        .into_iter()
        .enumerate()
        .map(|(i, e)| match e {
            Value::Object(e) => event(Some(i), e),
            _ => Err(refuse(Some(i), FieldError::new("type", "an event is an object {type, channel_id?, data}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((grant, events))
}

fn event(at: Option<usize>, mut event: Map<String, Value>) -> Result<HubEvent, ApiError> {
    let kind = match event.remove("type") {
        Some(Value::String(kind)) => kind,
        Some(_) => return Err(refuse(at, FieldError::new("type", "a string"))),
        None => return Err(refuse(at, FieldError::new("type", "required"))),
    };
    let channel = match event.remove("channel_id") {
        Some(Value::String(c)) => Some(c),
        Some(Value::Null) | None => None,
        Some(_) => return Err(refuse(at, FieldError::new("channel_id", "a string"))),
    };
    let data = event.remove("data").unwrap_or(Value::Null);
    if let Some(key) = event.keys().next() {
        return Err(refuse(at, FieldError::new(clip(key), "unknown field (an event is {type, channel_id?, data})")));
    }
    HubEvent::parse(&kind, channel.as_deref(), data).map_err(|e| refuse(at, e))
}

fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

/// `HubEvent` in the OpenAPI document: every event a `GET /api/ws` client receives, in
/// the seed's envelope — one schema per type, its `data` the type's payload schema (the
/// one publishers are held to), plus the hub's own `channel.snapshot`,
/// `channel.presence`, `subscribed`, `channel.error` and `error`. Built from [`HubEventType::ALL`] and [`HubPayload`]'s
/// schema, whose variants are in the same order, so a new type is described here by
/// construction.
pub(crate) struct HubEventSchema;

impl utoipa::Modify for HubEventSchema {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::PartialSchema;
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, Type};
        let RefOr::T(Schema::OneOf(payloads)) = HubPayload::schema() else {
            unreachable!("HubPayload is an untagged enum: a oneOf of its variants' payloads")
        };
        let string = || ObjectBuilder::new().schema_type(Type::String);
        let envelope = |kind: &str, data: RefOr<Schema>| {
            ObjectBuilder::new()
                .property("type", string().enum_values(Some([kind])))
                .required("type")
                .property("channel_id", string().description(Some("`\"\"` for a global event")))
                .required("channel_id")
                .property("data", data)
                .required("data")
                .property(
                    "timestamp",
                    ObjectBuilder::new().schema_type(Type::Integer).description(Some("When the hub sent it (ms)")),
                )
                .required("timestamp")
                .property(
                    "cursor",
                    string().description(Some("`streamId:seq`: send it back in a subscribe message's `cursors`")),
                )
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
                .build()
        };
        let object = |required: &[&str]| {
            let mut data = ObjectBuilder::new().schema_type(Type::Object);
            for name in required {
                data = data.required(*name);
            }
            RefOr::T(Schema::Object(data.build()))
        };
        let mut all = OneOfBuilder::new().description(Some(
            "An event of the WebSocket hub (`GET /api/ws`): the seed 002 envelope; `data` is the payload of `type`",
        ));
        for (kind, data) in HubEventType::ALL.iter().zip(payloads.items) {
            all = all.item(envelope(kind.name(), data));
        }
        let own = [
            (crate::dialect::ws_hub::CHANNEL_SNAPSHOT, object(&["state"])),
            (crate::dialect::ws_hub::CHANNEL_PRESENCE, object(&["viewers", "answerers", "visible"])),
            (crate::dialect::ws_hub::SUBSCRIBED, object(&["channels"])),
            (crate::dialect::ws_hub::CHANNEL_ERROR, object(&["code", "message"])),
            (crate::dialect::ws_hub::ERROR, object(&["code", "message"])),
        ];
        for (kind, data) in own {
            all = all.item(envelope(kind, data));
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        components.schemas.insert("HubEvent".into(), RefOr::T(Schema::OneOf(all.build())));
    }
}
