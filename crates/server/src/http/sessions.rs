//! Sessions and their history: create, list by project, show (with the state a
//! snapshot carries), patch title/archived, delete, and page through messages; the
//! rules that decide its tool calls (the server's and its own, for the Rules panel).

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, QueryParams, json_body, parse_id};
use crate::state::AppState;
use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use spool_engine::SessionPatch;
use spool_protocol::api::{CreateSession, MessagePage, SessionDetail, SessionInfo};
use spool_protocol::{ProjectId, Session, SessionId, SessionMemory};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create))
        .routes(routes!(list))
        .routes(routes!(show, update, remove))
        .routes(routes!(messages))
        .routes(routes!(memory))
        .routes(routes!(permissions))
        .routes(routes!(remove_permission))
        .routes(routes!(confirm_fact))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// List archived sessions instead of the others.
    #[serde(default)]
    archived: bool,
}

#[derive(Deserialize, ToSchema)]
struct UpdateSession {
    title: Option<String>,
    archived: Option<bool>,
    /// Replaces the session's own permission rules.
    permissions: Option<Vec<spool_protocol::PermissionRule>>,
    /// A configured model's name.
    model: Option<String>,
    /// `agent` or `plan`; takes effect at the run's next model call.
    mode: Option<spool_protocol::SessionMode>,
    /// Replaces the session's own guardrails (`{}`: none of its own). They may only
    /// tighten the server's `[guardrails]`: a looser limit is refused (400
    /// `guardrails_loosened`). A run reads them when it starts or resumes.
    guardrails: Option<spool_protocol::Guardrails>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct HistoryQuery {
    /// Messages with an index below this one (default: the newest).
    before: Option<u64>,
    /// At most this many messages: 1 to `spool_engine::MAX_PAGE`.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// Read this shelved branch (an `ordinal` of `GET /api/sessions/{id}/branches`)
    /// instead of the active path; `total` is then the branch's count.
    #[param(minimum = 1)]
    branch: Option<u32>,
}

/// An id that does not parse names no project: the same 404 as an absent one.
fn project_of(body: &CreateSession) -> Result<ProjectId, ApiError> {
    parse_id(&body.project_id)
}

/// Starts a session in a project.
#[utoipa::path(
    post,
    path = "/api/sessions",
    request_body = CreateSession,
    responses((status = 201, body = Session), WriteErrors)
)]
async fn create(
    Acting { engine, user }: Acting,
    JsonBody(body): JsonBody<CreateSession>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    let session = engine.sessions().create(&user, &project_of(&body)?, body.title).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

/// The project's sessions, newest activity first.
#[utoipa::path(
    get,
    path = "/api/projects/{id}/sessions",
    params(("id" = ProjectId, Path), ListQuery),
    responses((status = 200, body = Vec<SessionInfo>), ReadErrors)
)]
async fn list(
    Acting { engine, user }: Acting,
    PathId(project_id): PathId<ProjectId>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    Ok(Json(engine.sessions().list(&user, &project_id, query.archived).await?))
}

/// The session with the state a snapshot carries, and the cursor of that state.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = SessionDetail), ReadErrors)
)]
async fn show(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<SessionDetail>, ApiError> {
    Ok(Json(engine.sessions().get(&user, &id).await?))
}

/// Changes title, archived flag, permission rules, model, mode or guardrails; absent fields stay.
#[utoipa::path(
    patch,
    path = "/api/sessions/{id}",
    params(("id" = SessionId, Path)),
    request_body = UpdateSession,
    responses((status = 200, body = Session), WriteErrors)
)]
async fn update(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<UpdateSession>,
) -> Result<Json<Session>, ApiError> {
    let patch = SessionPatch {
        title: body.title,
        archived: body.archived,
        permissions: body.permissions,
        model: body.model,
        mode: body.mode,
        guardrails: body.guardrails,
    };
    Ok(Json(engine.sessions().update(&user, &id, patch).await?))
}

/// Deletes the session with its messages and runs (aborting an active run).
#[utoipa::path(
    delete,
    path = "/api/sessions/{id}",
    params(("id" = SessionId, Path)),
    responses((status = 204, description = "Deleted"), WriteErrors)
)]
async fn remove(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<StatusCode, ApiError> {
    engine.sessions().delete(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A page of committed history, oldest first: the active path's, or with `branch` a
/// shelved branch's (404 for a branch the session does not have).
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/messages",
    params(("id" = SessionId, Path), HistoryQuery),
    responses((status = 200, body = MessagePage), ReadErrors)
)]
async fn messages(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<MessagePage>, ApiError> {
    let sessions = engine.sessions();
    Ok(Json(match query.branch {
        Some(ordinal) => sessions.branch_messages(&user, &id, ordinal, query.before, query.limit).await?,
        None => sessions.messages(&user, &id, query.before, query.limit).await?,
    }))
}

/// The session's confirmed facts and compaction summary.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/memory",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = SessionMemory), ReadErrors)
)]
async fn memory(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionMemory>, ApiError> {
    Ok(Json(engine.sessions().memory(&user, &id).await?))
}

/// The permission rules of a session, each list in the order it is checked (the last
/// matching rule wins).
#[derive(Serialize, ToSchema)]
struct SessionPermissions {
    /// The server's rules: the built-in defaults, then its config file's. A deny here is
    /// final; the session's rules cannot lift it.
    server: Vec<spool_protocol::PermissionRule>,
    /// The session's own rules: what "Always allow" added and `PATCH` set; they decide
    /// within what the server does not deny. Change them with `PATCH /api/sessions/{id}`,
    /// or remove one with `DELETE /api/sessions/{id}/permissions/{index}`.
    session: Vec<spool_protocol::PermissionRule>,
}

/// Which rule a `DELETE` means: the one the caller saw at that index.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RuleQuery {
    /// The rule's `tool`, exactly as listed.
    #[param(min_length = 1, max_length = 200)]
    tool: String,
    /// The rule's `action`.
    action: spool_protocol::PermissionAction,
}

/// Removes one of the session's own rules (Undo of an "Always allow" in the Rules
/// panel), leaving every other rule as it is at that moment, including one added at the
/// same instant. `tool` and `action` must be those of the rule now at `index` (from
/// 0, in `session` order), or nothing is removed and the answer is 409 `rule_changed`:
/// a page showing an older list cannot remove a rule it did not mean. A 404 names an
/// unknown session or an index past the end. Answers the rules as they are now.
#[utoipa::path(
    delete,
    path = "/api/sessions/{id}/permissions/{index}",
    params(("id" = SessionId, Path), ("index" = u32, Path, description = "The rule's place in `session`, from 0"), RuleQuery),
    responses((status = 200, body = SessionPermissions), WriteErrors)
)]
async fn remove_permission(
    Acting { engine, user }: Acting,
    Path((id, index)): Path<(String, String)>,
    QueryParams(query): QueryParams<RuleQuery>,
) -> Result<Json<SessionPermissions>, ApiError> {
    let id: SessionId = parse_id(&id)?;
    // An index that is not a number names no rule, like one past the end.
    let index: usize = index.parse().map_err(|_| ApiError::not_found("permission rule"))?;
    if query.tool.is_empty() || query.tool.len() > 200 {
        return Err(ApiError::bad_request("invalid_query", "tool must be 1 to 200 bytes"));
    }
    let (server, session) = engine.sessions().remove_permission(&user, &id, index, &query.tool, query.action).await?;
    Ok(Json(SessionPermissions { server, session }))
}

/// The rules that decide the session's tool calls, the server's and its own.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/permissions",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = SessionPermissions), ReadErrors)
)]
async fn permissions(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionPermissions>, ApiError> {
    let (server, session) = engine.sessions().permissions(&user, &id).await?;
    Ok(Json(SessionPermissions { server, session }))
}

#[derive(Deserialize, ToSchema)]
struct FactBody {
    text: String,
}

/// Each body this module reads, parsed and checked as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /api/sessions", |b| project_of(&json_body::<CreateSession>(b)?).map(drop)),
    ("PATCH /api/sessions/{id}", |b| json_body::<UpdateSession>(b).map(drop)),
    ("POST /api/sessions/{id}/facts", |b| json_body::<FactBody>(b).map(drop)),
];

/// A person confirms a fact for the model to rely on; 201 with the memory.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/facts",
    params(("id" = SessionId, Path)),
    request_body = FactBody,
    responses((status = 201, body = SessionMemory), WriteErrors)
)]
async fn confirm_fact(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<FactBody>,
) -> Result<(StatusCode, Json<SessionMemory>), ApiError> {
    Ok((StatusCode::CREATED, Json(engine.sessions().confirm_fact(&user, &id, &body.text).await?)))
}
