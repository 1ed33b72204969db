//! Sessions and their history: create, list by project, show (with the state a
//! snapshot carries), patch title/archived, delete, and page through messages.

use crate::error::ApiError;
use crate::extract::{ApiId, CurrentUser, JsonBody, PathId, QueryParams};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use spool_engine::{MessagePage, SessionDetail, SessionInfo, SessionPatch};
use spool_protocol::{ProjectId, Session, SessionId, SessionMemory};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/sessions", post(create))
        .route("/api/projects/{id}/sessions", get(list))
        .route("/api/sessions/{id}", get(show).patch(update).delete(remove))
        .route("/api/sessions/{id}/messages", get(messages))
        .route("/api/sessions/{id}/memory", get(memory))
        .route("/api/sessions/{id}/facts", post(confirm_fact))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateSession {
    project_id: String,
    title: Option<String>,
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    archived: bool,
}

#[derive(Deserialize)]
struct UpdateSession {
    title: Option<String>,
    archived: Option<bool>,
    permissions: Option<Vec<spool_protocol::PermissionRule>>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct HistoryQuery {
    before: Option<u64>,
    limit: Option<u32>,
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    JsonBody(body): JsonBody<CreateSession>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    // An id that does not parse names no project: the same 404 as an absent one.
    let project_id: ProjectId = body.project_id.parse().map_err(|_| ApiError::not_found(ProjectId::WHAT))?;
    let session = state.engine.create_session(&user, &project_id, body.title).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

async fn list(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(project_id): PathId<ProjectId>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    Ok(Json(state.engine.list_sessions(&user, &project_id, query.archived).await?))
}

async fn show(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionDetail>, ApiError> {
    Ok(Json(state.engine.session(&user, &id).await?))
}

async fn update(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<UpdateSession>,
) -> Result<Json<Session>, ApiError> {
    let patch =
        SessionPatch { title: body.title, archived: body.archived, permissions: body.permissions, model: body.model };
    Ok(Json(state.engine.update_session(&user, &id, patch).await?))
}

async fn remove(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_session(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn messages(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<MessagePage>, ApiError> {
    Ok(Json(state.engine.messages(&user, &id, query.before, query.limit).await?))
}

/// The session's confirmed facts and compaction summary.
async fn memory(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionMemory>, ApiError> {
    Ok(Json(state.engine.memory(&user, &id).await?))
}

#[derive(Deserialize)]
struct FactBody {
    text: String,
}

/// A person confirms a fact for the model to rely on; 201 with the memory.
async fn confirm_fact(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<FactBody>,
) -> Result<(StatusCode, Json<SessionMemory>), ApiError> {
    Ok((StatusCode::CREATED, Json(state.engine.confirm_fact(&user, &id, &body.text).await?)))
}
