//! Projects: registered directories. Deleting a project deletes its sessions (with
//! their messages and runs, aborting an active run first); files on disk are never
//! touched. See `Engine::delete_project`.

use crate::error::ApiError;
use crate::extract::{CurrentUser, JsonBody, PathId};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use spool_protocol::{Project, ProjectId};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/projects", get(list).post(create))
        .route("/api/projects/{id}", get(show).patch(rename).delete(remove))
}

#[derive(Deserialize)]
struct CreateProject {
    path: String,
    name: Option<String>,
}

#[derive(Deserialize)]
struct RenameProject {
    name: String,
}

async fn list(State(state): State<AppState>, CurrentUser(user): CurrentUser) -> Result<Json<Vec<Project>>, ApiError> {
    Ok(Json(state.engine.list_projects(&user).await?))
}

async fn create(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    JsonBody(body): JsonBody<CreateProject>,
) -> Result<(StatusCode, Json<Project>), ApiError> {
    let project = state.engine.create_project(&user, &body.path, body.name).await?;
    Ok((StatusCode::CREATED, Json(project)))
}

async fn show(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(state.engine.project(&user, &id).await?))
}

async fn rename(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
    JsonBody(body): JsonBody<RenameProject>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(state.engine.rename_project(&user, &id, &body.name).await?))
}

async fn remove(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_project(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
