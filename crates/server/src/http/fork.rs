//! `POST /api/sessions/{id}/fork`: a new session that starts with the source's history
//! up to a turn and goes on alone (see `spool_engine`'s `engine/fork.rs` for what is
//! copied and why).

use super::responses::WriteErrors;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use serde::Deserialize;
use spool_protocol::{Session, SessionId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(fork))
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(rename_all = "camelCase")]
struct ForkBody {
    /// Copy the messages with an index below this one: the end of the history or a user
    /// message's index (a turn's start). Default: every committed message.
    before_index: Option<u64>,
    /// The new session's title. Default: the source's with " (fork)".
    title: Option<String>,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/fork", |b| json_body::<ForkBody>(b).map(drop))];

/// Forks the session: a new session in the same project, holding copies (new ids, same
/// indices) of the messages before `beforeIndex`, with the source's model, mode, own
/// permission rules and memory (its summary only when that covers no dropped message).
/// Allowed while the source runs: only committed messages are copied. 400
/// `invalid_index` for an index past the end or not at a turn's start; the per-user
/// session cap applies.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/fork",
    params(("id" = SessionId, Path)),
    request_body = ForkBody,
    responses((status = 201, body = Session), WriteErrors)
)]
async fn fork(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<ForkBody>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    let session = engine.sessions().fork(&user, &id, body.before_index, body.title).await?;
    Ok((StatusCode::CREATED, Json(session)))
}
