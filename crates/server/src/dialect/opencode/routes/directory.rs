//! Which project an OpenCode request means.
//!
//! An OpenCode server serves one directory per "instance", chosen per request by the
//! `x-opencode-directory` header (the SDK percent-encodes it, and moves it to
//! `?directory=` on GET requests) and defaulting to the server's working directory.
//! Spool's counterpart of a directory is a project, so: header, else query, else the
//! server's working directory; resolved to its canonical path; the project registered
//! for that path. Only a write registers one — `POST /session` in a directory that is
//! not a project yet registers it, provided the directory exists and lies under the
//! user's project roots (the engine decides, see `roots.rs`) — so a GET cannot
//! change state: reading a directory that is not a project answers as for an empty one
//! (and `/event` watches for it to become one). Routes that name a session by id do not
//! need this: the session knows its project.

use crate::error::ApiError;
use crate::extract::CurrentUser;
use crate::state::AppState;
use axum::extract::{FromRequestParts, Query};
use axum::http::HeaderName;
use axum::http::request::Parts;
use spool_engine::{Engine, EngineError};
use spool_protocol::{Project, UserId};
use std::collections::HashMap;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{Object, Required, Type};

pub const HEADER: HeaderName = HeaderName::from_static("x-opencode-directory");

/// The two ways a request names its directory, as OpenAPI parameters of the routes
/// that take a [`Directory`].
pub struct DirectoryParams;

impl utoipa::IntoParams for DirectoryParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let param = |name: &str, at: ParameterIn, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(at)
                .required(Required::False)
                .description(Some(description))
                .schema(Some(Object::with_type(Type::String)))
                .build()
        };
        vec![
            param(HEADER.as_str(), ParameterIn::Header, "The directory, percent-encoded (default: the server's)"),
            param("directory", ParameterIn::Query, "The directory, when the header is absent"),
        ]
    }
}

/// The directory a request names, its project if it is one, and who is asking.
pub struct Directory {
    pub user: UserId,
    /// The canonical path.
    pub path: String,
    /// `None` while no project is registered for the path.
    pub project: Option<Project>,
}

impl Directory {
    /// The directory's project, registering it now if it is not one yet (for writes).
    pub async fn register(self, engine: &Engine) -> Result<(UserId, Project), ApiError> {
        let project = match self.project {
            Some(project) => project,
            None => register(engine, &self.user, &self.path).await?,
        };
        Ok((self.user, project))
    }
}

impl FromRequestParts<AppState> for Directory {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let CurrentUser(user) = CurrentUser::from_request_parts(parts, state).await?;
        let header = match parts.headers.get(HEADER) {
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(percent_decode)
                    .ok_or_else(|| ApiError::bad_request("invalid_directory", "x-opencode-directory is not a path"))?,
            ),
            None => None,
        };
        let query = || {
            Query::<HashMap<String, String>>::try_from_uri(&parts.uri).ok().and_then(|q| q.0.get("directory").cloned())
        };
        let raw = header.or_else(query).filter(|d| !d.trim().is_empty());
        let path = canonical(&state.engine, &user, raw).await?;
        let project = find(&state.engine, &user, &path).await?;
        Ok(Directory { user, path, project })
    }
}

/// The canonical path of `raw` (or the working directory), which must exist and be a
/// place `owner` may have a project: the engine decides (project roots, never the data
/// directory) without telling whether a path outside the roots exists.
async fn canonical(engine: &Engine, owner: &UserId, raw: Option<String>) -> Result<String, ApiError> {
    let path = match raw {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::current_dir()
            .map_err(|e| ApiError::bad_request("invalid_directory", format!("no working directory: {e}")))?,
    };
    let raw = path.to_str().ok_or_else(|| ApiError::bad_request("invalid_directory", "the directory is not UTF-8"))?;
    engine.projects().dir(owner, raw).await.map_err(|e| match e {
        EngineError::Invalid { message, .. } => ApiError::bad_request("invalid_directory", message),
        other => other.into(),
    })
}

/// `owner`'s project at `path`, if there is one.
async fn find(engine: &Engine, owner: &UserId, path: &str) -> Result<Option<Project>, ApiError> {
    Ok(engine.projects().list(owner).await?.into_iter().find(|p| p.path == path))
}

/// Registers `path` as a project of `owner`.
async fn register(engine: &Engine, owner: &UserId, path: &str) -> Result<Project, ApiError> {
    match engine.projects().create(owner, path, None).await {
        Ok(project) => Ok(project),
        // Registered by a concurrent request a moment ago.
        Err(EngineError::Conflict { .. }) => find(engine, owner, path).await?.ok_or(ApiError::not_found("project")),
        Err(e) => Err(e.into()),
    }
}

/// Decodes `%XX` escapes (what `encodeURIComponent` produces); `None` if the result is
/// not UTF-8 or an escape is malformed.
fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_what_encode_uri_component_produces() {
        assert_eq!(percent_decode("%2Ftmp%2Fa%20b%C3%A9").as_deref(), Some("/tmp/a bé"));
        assert_eq!(percent_decode("/plain/path").as_deref(), Some("/plain/path"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%+1"), None);
        assert_eq!(percent_decode("%FF"), None);
    }
}
