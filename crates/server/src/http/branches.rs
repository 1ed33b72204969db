//! Branches (issue 39): the versions of a session's turns that an edit or a regenerate
//! (`POST /api/sessions/{id}/prompt` with `at`) took off the active path. Listing them,
//! switching to one, and reading one's messages (`GET /api/sessions/{id}/messages?branch=N`,
//! in `sessions.rs` beside the active path's history).

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use serde::Deserialize;
use spool_protocol::{Branch, SessionId, SessionState};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(switch))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SwitchBody {
    /// The branch to show: an `ordinal` from `GET /api/sessions/{id}/branches` or a
    /// `versions` entry of the state's `variants`.
    #[schema(minimum = 1)]
    ordinal: u32,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/branch", |b| json_body::<SwitchBody>(b).map(drop))];

/// The session's shelved branches, oldest first: each a version of the turn at
/// `forkIndex` that is not on the active path, with the start of its prompt.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/branches",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = Vec<Branch>), ReadErrors)
)]
async fn list(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<Vec<Branch>>, ApiError> {
    Ok(Json(engine.sessions().branches(&user, &id).await?))
}

/// Switches the session to another version of a turn: branch `ordinal`'s turns come
/// back on the active path and the ones they replace become a branch (kind `switch`).
/// Answers the session's new state, which every open view of the session is sent too
/// (a `state` frame). The model's next request holds the new path only. 409
/// `session_busy` while a run is going or parked or prompts are queued; 404 for a
/// branch the session does not have.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/branch",
    params(("id" = SessionId, Path)),
    request_body = SwitchBody,
    responses((status = 200, body = SessionState), WriteErrors)
)]
async fn switch(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<SwitchBody>,
) -> Result<Json<SessionState>, ApiError> {
    Ok(Json(engine.sessions().switch_branch(&user, &id, body.ordinal).await?))
}
