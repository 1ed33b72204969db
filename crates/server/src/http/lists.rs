//! The list stream `GET /api/workspaces/events` (seeds 000/001) and durable read
//! receipts (`POST /api/sessions/:id/read {index}`), which are one of its triggers.
//!
//! Every connection starts with `lists.reset` at the current seq — even with a
//! `Last-Event-ID`, since there is no replay buffer — then `sessions.changed` /
//! `projects.changed` as they happen, with the session stream's headers and heartbeat.

use super::events::sse_response;
use crate::error::ApiError;
use crate::extract::{CurrentUser, JsonBody, PathId};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use spool_protocol::{Session, SessionId};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/workspaces/events", get(stream)).route("/api/sessions/{id}/read", post(read))
}

async fn stream(State(state): State<AppState>, CurrentUser(user): CurrentUser) -> Response {
    // Only the user's own projects: the notifier keeps a sequence per owner.
    sse_response(state.engine.lists().subscribe(user), state.config.heartbeat)
}

#[derive(Deserialize)]
struct ReadBody {
    index: u64,
}

async fn read(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<ReadBody>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.engine.mark_read(&user, &id, body.index).await?))
}
