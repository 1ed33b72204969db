//! Projects: registered directories. Deleting a project deletes its sessions (with
//! their messages and runs, aborting an active run first); files on disk are never
//! touched. See `Engine::delete_project`.

use super::openapi::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{CurrentUser, JsonBody, PathId, json_body};
use crate::fuzzing::BodyCheck;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use spool_protocol::{Project, ProjectId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list, create)).routes(routes!(show, rename, remove))
}

#[derive(Deserialize, ToSchema)]
struct CreateProject {
    /// An existing directory; stored as its canonical absolute path.
    path: String,
    /// Defaults to the directory's name.
    name: Option<String>,
}

#[derive(Deserialize, ToSchema)]
struct RenameProject {
    name: String,
}

/// The caller's projects.
#[utoipa::path(get, path = "/api/projects", tag = "projects", responses((status = 200, body = Vec<Project>), ReadErrors))]
async fn list(State(state): State<AppState>, CurrentUser(user): CurrentUser) -> Result<Json<Vec<Project>>, ApiError> {
    Ok(Json(state.engine.list_projects(&user).await?))
}

/// Registers a directory.
#[utoipa::path(
    post,
    path = "/api/projects",
    tag = "projects",
    request_body = CreateProject,
    responses((status = 201, body = Project), WriteErrors)
)]
async fn create(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    JsonBody(body): JsonBody<CreateProject>,
) -> Result<(StatusCode, Json<Project>), ApiError> {
    let project = state.engine.create_project(&user, &body.path, body.name).await?;
    Ok((StatusCode::CREATED, Json(project)))
}

#[utoipa::path(
    get,
    path = "/api/projects/{id}",
    tag = "projects",
    params(("id" = ProjectId, Path)),
    responses((status = 200, body = Project), ReadErrors)
)]
async fn show(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(state.engine.project(&user, &id).await?))
}

#[utoipa::path(
    patch,
    path = "/api/projects/{id}",
    tag = "projects",
    params(("id" = ProjectId, Path)),
    request_body = RenameProject,
    responses((status = 200, body = Project), WriteErrors)
)]
async fn rename(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
    JsonBody(body): JsonBody<RenameProject>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(state.engine.rename_project(&user, &id, &body.name).await?))
}

/// Deletes the project and its sessions; files on disk are not touched.
#[utoipa::path(
    delete,
    path = "/api/projects/{id}",
    tag = "projects",
    params(("id" = ProjectId, Path)),
    responses((status = 204, description = "Deleted"), WriteErrors)
)]
async fn remove(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<ProjectId>,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_project(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Each body this module reads, parsed as its handler does (the engine checks the rest).
pub(super) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /api/projects", |b| json_body::<CreateProject>(b).map(drop)),
    ("PATCH /api/projects/{id}", |b| json_body::<RenameProject>(b).map(drop)),
];
