//! Messages by id: removing a queued prompt before a run takes it (seed 002's
//! `DELETE /api/messages/{id}`). Committed history is never deleted one message at a
//! time, so a message a run took is as unknown here as another user's.

use super::responses::WriteErrors;
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::state::AppState;
use axum::http::StatusCode;
use spool_protocol::MessageId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(remove))
}

/// Removes one of the caller's queued prompts (the hub says `message.deleted`, the
/// session stream sends its new queue); it never runs. 404 `not_found` for anything
/// else: a message a run already took, another user's, an unknown id.
#[utoipa::path(
    delete,
    path = "/api/messages/{id}",
    params(("id" = MessageId, Path)),
    responses((status = 204, description = "Removed from the queue"), WriteErrors)
)]
async fn remove(Acting { engine, user }: Acting, PathId(id): PathId<MessageId>) -> Result<StatusCode, ApiError> {
    engine.runs().delete_queued(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
