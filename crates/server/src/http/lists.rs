//! The list stream `GET /api/workspaces/events` (seeds 000/001) and durable read
//! receipts (`POST /api/sessions/:id/read {index}`), which are one of its triggers.
//!
//! Every connection starts with `lists.reset` at the current seq — even with a
//! `Last-Event-ID`, since there is no replay buffer — then `sessions.changed` /
//! `projects.changed` as they happen, with the session stream's headers and heartbeat.

use super::events::sse_response;
use super::responses::{StreamErrors, WriteErrors};
use super::sse::holding;
use super::stream_events::ListStreamEvent;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use spool_protocol::{Session, SessionId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream)).routes(routes!(read))
}

/// The list stream: `lists.reset`, then `sessions.changed` / `projects.changed`, and a
/// `heartbeat` event in silences. It does not end on its own.
#[utoipa::path(
    get,
    path = "/api/workspaces/events",
    tag = "streams",
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = ListStreamEvent),
        StreamErrors,
    )
)]
async fn stream(
    State(state): State<AppState>,
    StreamCaller { user, watch, .. }: StreamCaller,
) -> Result<Response, ApiError> {
    // Counted like a session stream, for as long as the response is open.
    let permit = state.engine.stream_permit(&user)?;
    // Only the user's own projects: the notifier keeps a sequence per owner.
    let frames = holding(state.engine.lists().subscribe(user), permit);
    Ok(watched(sse_response(Box::pin(frames), state.config.heartbeat), watch))
}

#[derive(Deserialize, ToSchema)]
struct ReadBody {
    /// The highest message index the person has seen.
    index: u64,
}

/// Records a read receipt.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/read",
    tag = "sessions",
    params(("id" = SessionId, Path)),
    request_body = ReadBody,
    responses((status = 200, body = Session), WriteErrors)
)]
async fn read(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<ReadBody>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(engine.sessions().mark_read(&user, &id, body.index).await?))
}

/// The body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/read", |b| json_body::<ReadBody>(b).map(drop))];
