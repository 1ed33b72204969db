//! MCP servers (issue 38) as a signed-in person sees them: every configured server
//! with its state and tools, and, for one of their sessions, whether that session is
//! offered it; and turning one on or off for a session (the Rules panel's switch).
//!
//! What is shown is built from the engine's typed [`SourceStatus`], which names a
//! server's command or URL and never a token or a header's value: a config's secrets
//! stay where the config put them (an environment variable, a file).

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, QueryParams, json_body, parse_id};
use crate::state::AppState;
use axum::Json;
use axum::extract::Path;
use serde::{Deserialize, Serialize};
use spool_engine::{SourceState, SourceView};
use spool_protocol::SessionId;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(choose)).routes(routes!(retry))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// One of the caller's sessions: each server then says whether it is offered.
    session: Option<String>,
}

/// One configured MCP server.
#[derive(Serialize, ToSchema)]
struct McpServer {
    /// The name in the config; its tools are offered as `name_tool`.
    name: String,
    /// `stdio` or `http`.
    transport: String,
    /// The command (stdio) or the URL (http).
    target: String,
    state: McpState,
    /// Why it failed (with `state` `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// When it is tried again, in ms since the epoch (with `state` `failed`; absent:
    /// not before Spool restarts).
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at_ms: Option<i64>,
    /// Its tools as last listed, on any session.
    tools: Vec<McpTool>,
    /// How many sessions have it running or connected.
    connections: u64,
    /// With `?session=`: whether that session is offered it.
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<McpSessionUse>,
}

/// Where a server stands. A stdio server runs per session: `idle` until one starts it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum McpState {
    Idle,
    Starting,
    Ready,
    Failed,
}

#[derive(Serialize, ToSchema)]
struct McpTool {
    /// The name the model sees (`server_tool`).
    name: String,
    description: String,
    /// The server says it changes nothing.
    read_only: bool,
}

/// Whether one session is offered a server.
#[derive(Serialize, ToSchema)]
struct McpSessionUse {
    /// Whether its next turn offers the server's tools.
    enabled: bool,
    /// What the config says for the session's project (its `projects` list) when the
    /// person chose nothing for the session.
    by_default: bool,
    /// The person's choice for this session, if they made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    choice: Option<bool>,
}

impl From<SourceView> for McpServer {
    fn from(view: SourceView) -> McpServer {
        let status = view.status;
        let (state, reason, retry_at_ms) = match status.state {
            SourceState::Idle => (McpState::Idle, None, None),
            SourceState::Starting => (McpState::Starting, None, None),
            SourceState::Ready => (McpState::Ready, None, None),
            SourceState::Failed { reason, retry_at_ms } => (McpState::Failed, Some(reason), retry_at_ms),
        };
        let tools = status.tools.into_iter();
        McpServer {
            name: status.name,
            transport: status.transport,
            target: status.target,
            state,
            reason,
            retry_at_ms,
            tools: tools
                .map(|t| McpTool { name: t.name, description: t.description, read_only: t.read_only })
                .collect(),
            connections: status.connections as u64,
            session: view.session.map(|u| McpSessionUse {
                enabled: u.enabled,
                by_default: u.by_default,
                choice: u.choice,
            }),
        }
    }
}

/// Every configured MCP server, in the order turns ask them, with its state and tools;
/// with `session`, whether that session is offered each.
#[utoipa::path(
    get,
    path = "/api/mcp",
    params(ListQuery),
    responses((status = 200, body = Vec<McpServer>), ReadErrors)
)]
async fn list(
    Acting { engine, user }: Acting,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Vec<McpServer>>, ApiError> {
    let session: Option<SessionId> = query.session.as_deref().map(parse_id).transpose()?;
    let views = engine.tool_sources().list(&user, session.as_ref()).await?;
    Ok(Json(views.into_iter().map(McpServer::from).collect()))
}

#[derive(Deserialize, ToSchema)]
struct Choice {
    /// Offer the server's tools to this session (true) or not (false), whatever its
    /// project's default.
    enabled: bool,
}

/// Each body this module reads, parsed and checked as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("PUT /api/sessions/{id}/mcp/{server}", |b| json_body::<Choice>(b).map(drop))];

/// Turns an MCP server on or off for one session, from its next model turn on (a run
/// going on now included); kept with the session. Answers the server as `GET
/// /api/mcp?session=` lists it. A 404 names an unknown session or server.
#[utoipa::path(
    put,
    path = "/api/sessions/{id}/mcp/{server}",
    params(("id" = SessionId, Path), ("server" = String, Path, description = "The server's configured name")),
    request_body = Choice,
    responses((status = 200, body = McpServer), WriteErrors)
)]
async fn choose(
    Acting { engine, user }: Acting,
    Path((id, server)): Path<(String, String)>,
    JsonBody(body): JsonBody<Choice>,
) -> Result<Json<McpServer>, ApiError> {
    let id: SessionId = parse_id(&id)?;
    let view = engine.tool_sources().choose(&user, &id, &server, body.enabled).await?;
    Ok(Json(view.into()))
}

/// What `POST /api/mcp/{server}/retry` answers.
#[derive(Serialize, ToSchema)]
struct Retried {
    /// Whether the server had been given up on and now will be started again by the
    /// next turn that needs it (false: it was not given up, nothing changed).
    retried: bool,
    server: McpServer,
}

/// Tries a server again that was given up on after failing again and again (the Rules
/// panel's "Try again", once what was wrong is fixed): the next turn that needs it
/// starts it. A server not given up is left as it is. A 404 names an unknown server.
#[utoipa::path(
    post,
    path = "/api/mcp/{server}/retry",
    params(("server" = String, Path, description = "The server's configured name")),
    responses((status = 200, body = Retried), WriteErrors)
)]
async fn retry(Acting { engine, .. }: Acting, Path(server): Path<String>) -> Result<Json<Retried>, ApiError> {
    let (retried, view) = engine.tool_sources().retry(&server)?;
    Ok(Json(Retried { retried, server: view.into() }))
}
