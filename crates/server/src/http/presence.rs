//! `GET /api/sessions/{id}/presence`: who is on a session right now, on every node (see
//! `spool_protocol::presence`). The same counts come as `session.presence` frames on
//! the session's streams when they change; this reads them fresh.

use super::responses::ReadErrors;
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::state::AppState;
use axum::Json;
use spool_protocol::SessionId;
use spool_protocol::presence::Presence;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(presence))
}

/// Who is on the session now: its open views (every dialect, every node), those that
/// can answer approvals, the visible ones among them, and the views by kind of client.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/presence",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = Presence), ReadErrors)
)]
async fn presence(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<Presence>, ApiError> {
    Ok(Json(engine.sessions().presence(&user, &id).await?))
}
