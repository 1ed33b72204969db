//! Projects: registered directories. Deleting a project deletes its sessions (with
//! their messages and runs, aborting an active run first); files on disk are never
//! touched. See `Projects::delete` (`engine.projects().delete`).

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use serde::Deserialize;
use spool_protocol::api::CreateProject;
use spool_protocol::{Project, ProjectId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list, create)).routes(routes!(show, rename, remove))
}

#[derive(Deserialize, ToSchema)]
struct RenameProject {
    name: String,
}

/// The caller's projects.
#[utoipa::path(get, path = "/api/projects", responses((status = 200, body = Vec<Project>), ReadErrors))]
async fn list(Acting { engine, user }: Acting) -> Result<Json<Vec<Project>>, ApiError> {
    Ok(Json(engine.projects().list(&user).await?))
}

/// Registers a directory.
#[utoipa::path(
    post,
    path = "/api/projects",
    request_body = CreateProject,
    responses((status = 201, body = Project), WriteErrors)
)]
async fn create(
    Acting { engine, user }: Acting,
    JsonBody(body): JsonBody<CreateProject>,
) -> Result<(StatusCode, Json<Project>), ApiError> {
    let path = expand_home(&body.path, std::env::var_os("HOME").as_deref())?;
    let project = engine.projects().create(&user, &path, body.name).await?;
    Ok((StatusCode::CREATED, Json(project)))
}

/// `~` and `~/…` name the server's home directory: a person types them in the page's
/// "Add a project" dialog, and only the server knows what they mean. Other paths pass
/// as they are; `~user` is refused rather than looked up. The project fence (workspace
/// roots) judges the expanded path like any other.
fn expand_home(path: &str, home: Option<&std::ffi::OsStr>) -> Result<String, ApiError> {
    let trimmed = path.trim();
    let rest = match trimmed.strip_prefix('~') {
        None => return Ok(path.to_owned()),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_path",
                "only ~ and ~/… are expanded (the server's home directory), not ~user",
            ));
        }
    };
    let home = home.and_then(|h| h.to_str()).filter(|h| !h.is_empty()).ok_or_else(|| {
        ApiError::bad_request("invalid_path", "~ cannot be expanded: the server has no HOME; give an absolute path")
    })?;
    Ok(format!("{}{rest}", home.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::expand_home;
    use std::ffi::OsStr;

    #[test]
    fn a_tilde_names_the_home_directory() {
        let home = Some(OsStr::new("/home/ada"));
        assert_eq!(expand_home("~", home).ok().as_deref(), Some("/home/ada"));
        assert_eq!(expand_home("~/code/app", home).ok().as_deref(), Some("/home/ada/code/app"));
        assert_eq!(expand_home(" ~/x ", home).ok().as_deref(), Some("/home/ada/x"));
        assert_eq!(expand_home("~/x", Some(OsStr::new("/"))).ok().as_deref(), Some("/x"));
        assert_eq!(expand_home("/srv/~/x", home).ok().as_deref(), Some("/srv/~/x"), "only a leading tilde");
        assert_eq!(expand_home("rel/path", home).ok().as_deref(), Some("rel/path"));
    }

    #[test]
    fn other_users_and_a_missing_home_are_refused() {
        assert!(expand_home("~bob/x", Some(OsStr::new("/home/ada"))).is_err());
        assert!(expand_home("~/x", None).is_err());
        assert!(expand_home("~/x", Some(OsStr::new(""))).is_err());
    }
}

#[utoipa::path(
    get,
    path = "/api/projects/{id}",
    params(("id" = ProjectId, Path)),
    responses((status = 200, body = Project), ReadErrors)
)]
async fn show(Acting { engine, user }: Acting, PathId(id): PathId<ProjectId>) -> Result<Json<Project>, ApiError> {
    Ok(Json(engine.projects().get(&user, &id).await?))
}

#[utoipa::path(
    patch,
    path = "/api/projects/{id}",
    params(("id" = ProjectId, Path)),
    request_body = RenameProject,
    responses((status = 200, body = Project), WriteErrors)
)]
async fn rename(
    Acting { engine, user }: Acting,
    PathId(id): PathId<ProjectId>,
    JsonBody(body): JsonBody<RenameProject>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(engine.projects().rename(&user, &id, &body.name).await?))
}

/// Deletes the project and its sessions; files on disk are not touched.
#[utoipa::path(
    delete,
    path = "/api/projects/{id}",
    params(("id" = ProjectId, Path)),
    responses((status = 204, description = "Deleted"), WriteErrors)
)]
async fn remove(Acting { engine, user }: Acting, PathId(id): PathId<ProjectId>) -> Result<StatusCode, ApiError> {
    engine.projects().delete(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Each body this module reads, parsed as its handler does (the engine checks the rest).
pub(super) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /api/projects", |b| json_body::<CreateProject>(b).map(drop)),
    ("PATCH /api/projects/{id}", |b| json_body::<RenameProject>(b).map(drop)),
];
