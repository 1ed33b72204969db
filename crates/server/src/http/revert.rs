//! `GET/POST /api/sessions/{id}/revert` and `POST /api/sessions/{id}/unrevert`: undo what
//! the agent did to the files since a prompt, and the turns with it, then take that
//! back (see `spool_engine`'s `engine/reverts.rs` for what is restored, what is a
//! conflict and when a revert becomes final).

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, QueryParams, json_body};
use crate::state::AppState;
use axum::Json;
use serde::{Deserialize, Serialize};
use spool_protocol::{PendingRevert, RevertReport, SessionId};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(look, revert)).routes(routes!(unrevert))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RevertQuery {
    /// Preview a revert to this user message. Without it: the pending revert.
    index: Option<u64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RevertBody {
    /// The user message to go back to: it and every later message leave the path.
    index: u64,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/revert", |b| json_body::<RevertBody>(b).map(drop))];

/// A preview (with `index`), or the pending revert (without; `null` when there is none).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum Looked {
    Preview(RevertReport),
    Pending(Option<PendingRevert>),
}

/// With `index`: what a revert to that user message would do to the files (nothing
/// changes; 400 `invalid_index` when it is not a user message). Without: the revert an
/// unrevert would undo, or `null` (none, or a prompt since made it final).
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/revert",
    params(("id" = SessionId, Path), RevertQuery),
    responses((status = 200, body = Looked), ReadErrors)
)]
async fn look(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    QueryParams(query): QueryParams<RevertQuery>,
) -> Result<Json<Looked>, ApiError> {
    Ok(Json(match query.index {
        Some(index) => Looked::Preview(engine.reverts().preview(&user, &id, index).await?),
        None => Looked::Pending(engine.reverts().pending(&user, &id).await?),
    }))
}

/// Reverts the session to a user message: the files the agent changed from there on
/// go back byte for byte (a file it created is deleted), except conflicts (changed by
/// someone else since: reported with a diff, left alone) and files no snapshot
/// covered; the turns from there on leave the path, kept as a branch. The next prompt
/// makes it final. 409 `session_busy` while a run is going or parked.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/revert",
    params(("id" = SessionId, Path)),
    request_body = RevertBody,
    responses((status = 200, body = RevertReport), WriteErrors)
)]
async fn revert(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<RevertBody>,
) -> Result<Json<RevertReport>, ApiError> {
    Ok(Json(engine.reverts().revert(&user, &id, body.index).await?))
}

/// Undoes the pending revert: each file it put back and nobody changed since returns
/// to what it held before (the others are conflicts, left alone), and the turns come
/// back. 409 `nothing_to_unrevert` when there is none, `session_busy` while busy.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/unrevert",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = RevertReport), WriteErrors)
)]
async fn unrevert(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
) -> Result<Json<RevertReport>, ApiError> {
    Ok(Json(engine.reverts().unrevert(&user, &id).await?))
}
