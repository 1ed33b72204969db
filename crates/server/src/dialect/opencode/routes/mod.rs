//! The OpenCode-compatible API (seed 004): the routes an `@opencode-ai/sdk` client
//! (root or `/v2`) calls, over the same engine as Spool's own API. Handlers extract,
//! call the engine, and map with `crate::dialect::opencode`; see that module for the mapping.
//!
//! | route | does |
//! |---|---|
//! | `GET /global/health` | `{healthy: true, version}` |
//! | `GET /session`, `POST /session {title?}` | the directory's sessions / a new one |
//! | `GET /session/status` | `{sessionID: {type: "busy"}}` for the directory's busy sessions |
//! | `GET`, `PATCH {title?, time?: {archived?}, permission?}`, `DELETE /session/:id` | one session |
//! | `GET /session/:id/message?limit=N&before=msgID` | `[{info, parts}]`, oldest first |
//! | `POST /session/:id/message {parts, messageID?, model?}` | prompts and answers when its run settled: the last `{info, parts}` |
//! | `POST /session/:id/prompt_async` | prompts; 204 at once |
//! | `POST /session/:id/abort` | aborts the active run; `true` |
//! | `POST /session/:id/fork {messageID?}` | a new session with the messages before `messageID`'s turn (all without it) |
//! | `POST /session/:id/revert {messageID, partID?}`, `POST /session/:id/unrevert` | takes `messageID`'s turn and the later ones back, files too / brings them back (`revert.rs`) |
//! | `GET /session/:id/todo` | the agent's todo list (`todo_write`), in order |
//! | `POST /session/:id/permissions/:permissionID {response}` | answers a permission (v1) |
//! | `GET /permission`, `POST /permission/:id/reply {reply, message?}` | pending permissions / answer one (v2) |
//! | `GET /question`, `POST /question/:id/reply {answers}`, `POST /question/:id/reject` | the agent's pending questions / answer or dismiss one (`questions.rs`) |
//! | `GET /event?deltas=legacy` | the directory's events (see `global.rs`) |
//! | `GET /global/event?deltas=legacy` | the events of every project of the user, each `{directory, payload}` (see `global.rs`) |
//!
//! A prompt while a run is going waits in the session's queue (Spool's own, the one
//! `queue: true` uses) and runs when the runs before it have settled, as OpenCode
//! queues it; `POST /session/:id/message` then answers when that prompt's run settled.
//!
//! What differs from OpenCode, deliberately: only text parts can be prompted (file,
//! agent and subtask parts are a 400), `noReply` and child sessions (`parentID`) are a
//! 400, each queued prompt is a run of its own (OpenCode answers all prompts waiting in
//! one step), and `model` (seed 004's `"provider/model"` string or the SDK's
//! `{providerID, modelID}`) switches the session's model only when it names a configured
//! model, by its whole name or the part after the provider; other values are ignored: a
//! client sends its own default provider's model, which must not break it. A prompt's
//! `messageID` becomes its `requestId`, so a retried prompt runs once. Errors carry both
//! Spool's `{error: {code, message}}` and OpenCode's `{name, data: {message}}`. A
//! directory becomes a project only through a write (`POST /session`), never by being
//! read, and only under the user's project roots; writes need a JSON body and are
//! refused from another origin (`guard.rs`), which OpenCode's own server does not check.

use crate::dialect::opencode::ids;
use crate::dialect::opencode::records::{self, Scope};
use crate::dialect::opencode::requests::{
    CreateBody, EventQuery, ListQuery, MessagesQuery, PatchBody, PromptBody, QuestionReplyBody, ReplyBody, RespondBody,
};
use crate::dialect::opencode::wire::{MessageInfo, MessageWithParts, Permission, SessionInfo, Status, Todo};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, CurrentUser, PathId, PathIds};
use crate::http::responses::{OpenCodeDecisionErrors, OpenCodeErrors};
use crate::http::sse;
use crate::http::stream_events::{OpenCodeGlobalEvent, OpenCodeStreamEvent};
use crate::serve::ConnectionToken;
use crate::state::AppState;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_LENGTH;
use axum::response::{IntoResponse, Response};
use directory::{Directory, DirectoryParams};
use futures::StreamExt;
use global::GlobalStream;
use marks::PromptMarks;
use serde::Serialize;
use spool_engine::{
    DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineError, Multitask, PromptInput, SessionPatch,
    Submitted,
};
use spool_protocol::api::PromptQueued;
use spool_protocol::frame::{FrameBody, QueueChange};
use spool_protocol::{AgentEvent, Approval, ApprovalId, IndexedMessage, ProjectId, RunId, Session, SessionId, UserId};
use std::collections::{BTreeMap, HashMap};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod directory;
mod fork;
mod global;
mod marks;
mod questions;
mod revert;

/// Page size when reading history from the store.
const PAGE: u32 = spool_engine::MAX_PAGE;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(list, create))
        .routes(routes!(status))
        .routes(routes!(get_session, update, delete))
        // A prompt may carry files inline (data URLs): a larger body than other routes.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(messages, prompt))
                .routes(routes!(prompt_async))
                .layer(axum::extract::DefaultBodyLimit::max(crate::http::attachments::INLINE_BODY_BYTES)),
        )
        .routes(routes!(abort))
        .routes(routes!(todo))
        .routes(routes!(fork::fork))
        .routes(routes!(revert::revert))
        .routes(routes!(revert::unrevert))
        .routes(routes!(respond))
        .routes(routes!(permissions))
        .routes(routes!(reply))
        .routes(routes!(questions::list))
        .routes(routes!(questions::reply))
        .routes(routes!(questions::reject))
        .routes(routes!(events))
        .routes(routes!(global_events))
        .layer(Extension(PromptMarks::default()))
        .layer(axum::middleware::map_response(opencode_errors))
}

// ---- helpers ------------------------------------------------------------------------

async fn scope(engine: &Engine, user: &UserId, session: &Session) -> Result<Scope, ApiError> {
    let project = engine.projects().get(user, &session.project_id).await?;
    Ok(Scope { session_id: session.id.clone(), directory: project.path, default_model: engine.model_name() })
}

/// The session as OpenCode shows it, with its pending revert.
async fn info(engine: &Engine, user: &UserId, session: &Session) -> Result<SessionInfo, ApiError> {
    let project = engine.projects().get(user, &session.project_id).await?;
    let pending = engine.reverts().pending(user, &session.id).await?;
    Ok(records::session_info(session, pending.as_ref(), &project.path))
}

/// The committed messages of `session` before `before` (all when `None`), oldest first:
/// enough of them for `wanted` OpenCode messages (all when `None`), and at least back to
/// index `from`.
async fn stored_messages(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    before: Option<u64>,
    wanted: Option<usize>,
    from: u64,
) -> Result<Vec<IndexedMessage>, ApiError> {
    let mut pages: Vec<Vec<IndexedMessage>> = Vec::new();
    let mut shown = 0;
    let mut cursor = before;
    loop {
        let page = engine.sessions().messages(user, session, cursor, Some(PAGE)).await?;
        let Some(first) = page.messages.first() else { break };
        let (first, at_user) = (first.index, first.message.is_user());
        // Tool results are not OpenCode messages. Reading back to a user message keeps
        // every assistant message's parent in view.
        shown +=
            page.messages.iter().filter(|m| !matches!(m.message, spool_protocol::Message::ToolResult { .. })).count();
        pages.push(page.messages);
        if first <= from || (at_user && wanted.is_some_and(|w| shown >= w)) {
            break;
        }
        cursor = Some(first);
    }
    Ok(pages.into_iter().rev().flatten().collect())
}

async fn history(
    engine: &Engine,
    user: &UserId,
    session: &Session,
    before: Option<u64>,
    limit: Option<usize>,
) -> Result<Vec<MessageWithParts>, ApiError> {
    let scope = scope(engine, user, session).await?;
    let stored = stored_messages(engine, user, &session.id, before, limit, 0).await?;
    let trees = records::StepTrees::from_rows(&engine.sessions().step_snapshots(user, &session.id).await?);
    let mut all = records::history(&scope, &stored, session.model.as_deref(), &trees);
    if let Some(limit) = limit {
        all.drain(..all.len().saturating_sub(limit));
    }
    Ok(all)
}

/// OpenCode answers an applied permission reply with `true`; a refused one is Spool's
/// 409 (with OpenCode's error shape added by [`opencode_errors`]).
fn decided(outcome: DecisionOutcome) -> Response {
    match outcome {
        DecisionOutcome::Applied { .. } => Json(true).into_response(),
        refused => crate::http::decision::decision_response(&refused),
    }
}

/// Adds OpenCode's error shape (`{name, data: {message}}`) to Spool's JSON errors, so
/// both kinds of client read them.
async fn opencode_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(serde_json::Value::Object(mut json)) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let message = json.get("error").and_then(|e| e.get("message")).and_then(|m| m.as_str()).unwrap_or_default();
    let name = match status {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::NOT_FOUND => "NotFoundError",
        _ => "UnknownError",
    };
    let named = NamedError { name, data: NamedErrorData { message: message.to_owned() } };
    let serde_json::Value::Object(named) = serde_json::to_value(named).expect("plain data serializes") else {
        unreachable!("a struct serializes to an object")
    };
    json.extend(named);
    parts.headers.remove(CONTENT_LENGTH);
    let body = serde_json::to_vec(&json).expect("a JSON value serializes");
    Response::from_parts(parts, Body::from(body))
}

/// OpenCode's half of an error body, put beside Spool's `error` by [`opencode_errors`].
/// The document's `OpenCodeErrorBody` is the two together.
#[derive(Serialize, ToSchema)]
pub(crate) struct NamedError {
    /// `BadRequest`, `NotFoundError` or `UnknownError`.
    name: &'static str,
    data: NamedErrorData,
}

#[derive(Serialize, ToSchema)]
struct NamedErrorData {
    /// The same text as `error.message`.
    message: String,
}

// ---- health and sessions --------------------------------------------------------------

#[derive(Serialize, ToSchema)]
#[schema(as = opencode::Health)]
struct Health {
    /// Always true.
    healthy: bool,
    version: &'static str,
}

#[utoipa::path(get, path = "/global/health", security(()), responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health { healthy: true, version: env!("CARGO_PKG_VERSION") })
}

/// The directory's sessions, most recently updated first.
#[utoipa::path(
    get,
    path = "/session",
    params(DirectoryParams, ListQuery),
    responses((status = 200, body = Vec<SessionInfo>), OpenCodeErrors)
)]
async fn list(
    State(state): State<AppState>,
    dir: Directory,
    crate::extract::QueryParams(query): crate::extract::QueryParams<ListQuery>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    // Not a project yet: no sessions (reading registers nothing).
    let Some(project) = &dir.project else { return Ok(Json(Vec::new())) };
    let mut sessions = state.engine.sessions().list(&dir.user, &project.id, false).await?;
    let reverts = state.engine.reverts().pending_in(&dir.user, &project.id).await?;
    sessions.sort_by_key(|s| std::cmp::Reverse(s.session.updated_at));
    let search = query.search.map(|s| s.to_lowercase());
    let infos = sessions
        .iter()
        .filter(|s| search.as_ref().is_none_or(|q| s.session.title.to_lowercase().contains(q)))
        .take(query.limit.unwrap_or(usize::MAX))
        .map(|s| records::session_info(&s.session, reverts.get(&s.session.id), &project.path))
        .collect();
    Ok(Json(infos))
}

/// A new session in the directory's project, which this registers if the directory is
/// not a project yet. The body may be absent.
#[utoipa::path(
    post,
    path = "/session",
    params(DirectoryParams),
    request_body = Option<CreateBody>,
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
async fn create(State(state): State<AppState>, dir: Directory, bytes: Bytes) -> Result<Json<SessionInfo>, ApiError> {
    let body = CreateBody::read(&bytes)?;
    let (user, project) = dir.register(&state.engine).await?;
    let session = state.engine.sessions().create(&user, &project.id, body.title).await?;
    Ok(Json(records::session_info(&session, None, &project.path)))
}

/// `{sessionID: {type: "busy"}}` for each busy session of the directory.
#[utoipa::path(
    get,
    path = "/session/status",
    params(DirectoryParams),
    responses((status = 200, body = BTreeMap<String, Status>), OpenCodeErrors)
)]
async fn status(State(state): State<AppState>, dir: Directory) -> Result<Json<BTreeMap<String, Status>>, ApiError> {
    let Some(project) = &dir.project else { return Ok(Json(BTreeMap::new())) };
    let sessions = state.engine.sessions().list(&dir.user, &project.id, false).await?;
    Ok(Json(
        sessions
            .into_iter()
            .filter(|s| s.status == spool_protocol::SessionStatus::Busy)
            .map(|s| (s.session.id.to_string(), Status::Busy))
            .collect(),
    ))
}

#[utoipa::path(
    get,
    path = "/session/{id}",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
async fn get_session(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionInfo>, ApiError> {
    let detail = engine.sessions().get(&user, &id).await?;
    Ok(Json(info(&engine, &user, &detail.session).await?))
}

/// Changes the title, the archived state or the session's permission rules. The body
/// may be absent.
#[utoipa::path(
    patch,
    path = "/session/{id}",
    params(("id" = SessionId, Path)),
    request_body = Option<PatchBody>,
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
async fn update(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    bytes: Bytes,
) -> Result<Json<SessionInfo>, ApiError> {
    let session = engine.sessions().update(&user, &id, PatchBody::read(&bytes)?).await?;
    Ok(Json(info(&engine, &user, &session).await?))
}

#[utoipa::path(
    delete,
    path = "/session/{id}",
    params(("id" = SessionId, Path)),
    responses((status = 200, description = "Deleted: `true`", content_type = "application/json", body = bool), OpenCodeErrors)
)]
async fn delete(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<bool>, ApiError> {
    engine.sessions().delete(&user, &id).await?;
    Ok(Json(true))
}

/// The session's todo list, as the agent's `todo_write` last left it (empty before).
#[utoipa::path(
    get,
    path = "/session/{id}/todo",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = Vec<Todo>), OpenCodeErrors)
)]
async fn todo(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<Vec<Todo>>, ApiError> {
    let detail = engine.sessions().get(&user, &id).await?;
    Ok(Json(detail.state.todos.iter().enumerate().map(|(i, t)| Todo::from_todo(i, t)).collect()))
}

// ---- messages and prompts -------------------------------------------------------------

/// The session's messages with their parts, oldest first.
#[utoipa::path(
    get,
    path = "/session/{id}/message",
    params(("id" = SessionId, Path), MessagesQuery),
    responses((status = 200, body = Vec<MessageWithParts>), OpenCodeErrors)
)]
async fn messages(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    crate::extract::QueryParams(query): crate::extract::QueryParams<MessagesQuery>,
) -> Result<Json<Vec<MessageWithParts>>, ApiError> {
    let detail = engine.sessions().get(&user, &id).await?;
    let before = match &query.before {
        Some(raw) => Some(
            ids::message_index(&id, raw)
                .ok_or_else(|| ApiError::bad_request("invalid_query", "before must be a message id of this session"))?,
        ),
        None => None,
    };
    let mut all = history(&engine, &user, &detail.session, before, query.limit).await?;
    records::running_client_calls(&mut all, &detail.state.pending_approvals);
    Ok(Json(all))
}

/// Checks a prompt body, applies its model choice, marks where the session's stream
/// stands (see `marks.rs`) and starts the run, or queues the prompt while a run is going.
async fn start(
    engine: &Engine,
    marks: &PromptMarks,
    user: &UserId,
    id: &SessionId,
    bytes: &Bytes,
) -> Result<Submitted, ApiError> {
    let (text, body) = PromptBody::read(bytes)?;
    let detail = engine.sessions().get(user, id).await?;
    let models = engine.models();
    if let Some(model) = body.model.as_ref().and_then(|m| m.configured(models.iter().map(|m| m.name.as_str())))
        && detail.session.model.as_deref() != Some(model)
    {
        let patch = SessionPatch { model: Some(model.to_owned()), ..SessionPatch::default() };
        engine.sessions().update(user, id, patch).await?;
    }
    let files = crate::dialect::shared::prompt_files(engine, user, body.files()).await?;
    marks.set(id.clone(), spool_protocol::Cursor { stream_id: detail.stream_id, seq: detail.seq });
    let input = PromptInput {
        text,
        request_id: body.message_id,
        multitask: Multitask::Enqueue,
        files,
        ..PromptInput::default()
    };
    Ok(engine.runs().submit(user, id, input).await?)
}

/// Starts a run (or queues the prompt while one is going) and answers at once.
#[utoipa::path(
    post,
    path = "/session/{id}/prompt_async",
    params(("id" = SessionId, Path)),
    request_body = PromptBody,
    responses((status = 204, description = "The run started, or the prompt waits in the session's queue"), OpenCodeErrors)
)]
async fn prompt_async(
    State(state): State<AppState>,
    Extension(marks): Extension<PromptMarks>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    bytes: Bytes,
) -> Result<StatusCode, ApiError> {
    start(&state.engine, &marks, &user, &id, &bytes).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Prompts and answers once its run settled — after the runs queued before it, and
/// after any permission it asks on the way has been answered — with the run's last
/// assistant message.
#[utoipa::path(
    post,
    path = "/session/{id}/message",
    params(("id" = SessionId, Path)),
    request_body = PromptBody,
    responses((status = 200, body = MessageWithParts), OpenCodeErrors)
)]
async fn prompt(
    State(state): State<AppState>,
    Extension(marks): Extension<PromptMarks>,
    CurrentUser(user): CurrentUser,
    PathId(id): PathId<SessionId>,
    bytes: Bytes,
) -> Result<Json<MessageWithParts>, ApiError> {
    let engine = &state.engine;
    // Subscribed before prompting, so the run's start and end cannot pass unseen. Its
    // first batch is the snapshot of the session before the prompt: nothing to wait on.
    // A request waiting for its answer, not a view a person answers in.
    let viewer = spool_engine::Viewer::watching(spool_protocol::ClientKind::Opencode);
    let (frames, _) = engine.sessions().subscribe(&user, &id, None, CancellationToken::new(), viewer).await?;
    let mut frames = frames.typed();
    frames.next().await;
    let run_id = match start(engine, &marks, &user, &id, &bytes).await? {
        Submitted::Started(accepted) => accepted.run_id,
        Submitted::Queued(queued) => match wait_taken(&mut frames, &queued).await {
            Some(run_id) => run_id,
            // Gone from the queue unseen (the stream fell behind): the store knows.
            None => {
                engine.runs().of_request(&user, &id, &queued.request_id).await?.map(|run| run.id).ok_or_else(|| {
                    ApiError::from(EngineError::Conflict {
                        code: "prompt_removed",
                        message:
                            "the queued prompt did not run: it was removed from the queue, or the server is stopping"
                                .into(),
                    })
                })?
            }
        },
    };
    // A repeated messageID may name a run that settled long ago.
    if !engine.runs().get(&user, &run_id).await?.status.is_terminal() {
        wait_settled(&mut frames, &run_id).await;
    }
    drop(frames);
    let run = engine.runs().get(&user, &run_id).await?;
    let session = engine.sessions().get(&user, &id).await?.session;
    let scope = scope(engine, &user, &session).await?;
    let mut stored = stored_messages(engine, &user, &id, None, None, run.user_message_index).await?;
    stored.retain(|m| m.index >= run.user_message_index);
    let trees = records::StepTrees::from_rows(&engine.sessions().step_snapshots(&user, &id).await?);
    let answer = records::history(&scope, &stored, session.model.as_deref(), &trees)
        .into_iter()
        .rev()
        .find(|m| matches!(m.info, MessageInfo::Assistant(_)));
    match answer {
        Some(answer) => Ok(Json(answer)),
        None => {
            // The run ended before the model said anything (aborted, failed to start).
            let mut info = scope.assistant_info(
                run.user_message_index + 1,
                Some(run.user_message_index),
                run.created_at,
                &engine.model_name(),
            );
            let message = run.error.map_or_else(|| format!("the run ended {}", run.status.as_str()), |e| e.message);
            let stop = if run.status == spool_protocol::RunStatus::Cancelled {
                spool_protocol::StopReason::Aborted
            } else {
                spool_protocol::StopReason::Error
            };
            records::complete(&mut info, Some(stop), Some(&message), run.usage, run.ended_at.unwrap_or(run.updated_at));
            Ok(Json(MessageWithParts { info: MessageInfo::Assistant(Box::new(info)), parts: Vec::new() }))
        }
    }
}

/// Reads a session stream until the queued prompt `queued` leaves the queue: the run
/// that took it, or `None` when it left without one (a person removed it), the stream
/// ended, or a snapshot (the reader fell behind) no longer shows it queued.
async fn wait_taken(frames: &mut spool_engine::TypedSubscription, queued: &PromptQueued) -> Option<RunId> {
    while let Some(batch) = frames.next().await {
        for frame in batch {
            match &frame.body {
                FrameBody::Queue { change: QueueChange::Taken { message_ids, run_id }, .. }
                    if message_ids.contains(&queued.message_id) =>
                {
                    return Some(run_id.clone());
                }
                FrameBody::Queue { change: QueueChange::Deleted { message_id }, .. }
                    if *message_id == queued.message_id =>
                {
                    return None;
                }
                FrameBody::Snapshot { state } if !state.queue.iter().any(|q| q.id == queued.message_id) => return None,
                _ => {}
            }
        }
    }
    None
}

/// Reads a session stream until `run` settles (or the stream ends).
async fn wait_settled(frames: &mut spool_engine::TypedSubscription, run: &spool_protocol::RunId) {
    while let Some(batch) = frames.next().await {
        for frame in batch {
            if let FrameBody::LoopEvent { run_id, event: AgentEvent::AgentSettled {}, .. } = &frame.body
                && run_id == run
            {
                return;
            }
        }
    }
}

#[utoipa::path(
    post,
    path = "/session/{id}/abort",
    params(("id" = SessionId, Path)),
    responses((status = 200, description = "`true`, whether or not a run was active", content_type = "application/json", body = bool), OpenCodeErrors)
)]
async fn abort(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<bool>, ApiError> {
    engine.runs().abort(&user, &id).await?;
    Ok(Json(true))
}

// ---- permissions ------------------------------------------------------------------------

/// Answers a permission (the v1 SDK's route).
#[utoipa::path(
    post,
    path = "/session/{id}/permissions/{permission}",
    params(("id" = SessionId, Path), ("permission" = ApprovalId, Path)),
    request_body = RespondBody,
    responses((status = 200, description = "Applied: `true`", content_type = "application/json", body = bool), OpenCodeDecisionErrors)
)]
async fn respond(
    Acting { engine, user }: Acting,
    PathIds(session, approval): PathIds<SessionId, ApprovalId>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let decision = RespondBody::read(&bytes)?.response.decision();
    let input = DecisionInput::plain(decision);
    let reply = engine.runs().decide(&user, DecisionTarget::Session(session), &approval, input).await?;
    Ok(decided(reply))
}

/// Answers a permission (the v2 SDK's route).
#[utoipa::path(
    post,
    path = "/permission/{id}/reply",
    params(("id" = ApprovalId, Path)),
    request_body = ReplyBody,
    responses((status = 200, description = "Applied: `true`", content_type = "application/json", body = bool), OpenCodeDecisionErrors)
)]
async fn reply(
    Acting { engine, user }: Acting,
    PathId(approval): PathId<ApprovalId>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let body = ReplyBody::read(&bytes)?;
    let input = DecisionInput { message: body.message, ..DecisionInput::plain(body.reply.decision()) };
    let reply = engine.runs().decide(&user, DecisionTarget::Approval, &approval, input).await?;
    Ok(decided(reply))
}

/// The pending permissions of the directory's sessions (the agent's questions are
/// listed by `GET /question`).
#[utoipa::path(
    get,
    path = "/permission",
    params(DirectoryParams),
    responses((status = 200, body = Vec<Permission>), OpenCodeErrors)
)]
async fn permissions(State(state): State<AppState>, dir: Directory) -> Result<Json<Vec<Permission>>, ApiError> {
    let Some(project) = &dir.project else { return Ok(Json(Vec::new())) };
    let pending = state.engine.runs().pending_approvals(&dir.user).await?;
    let permissions = pending.into_iter().filter(records::is_permission).collect();
    let calls = of_project(&state.engine, &dir.user, &project.id, permissions).await;
    Ok(Json(calls.iter().map(|(approval, message)| records::permission(approval, *message)).collect()))
}

/// The `approvals` of sessions of `project`, each with the index of the assistant
/// message that made its call (when that is in the session's latest rounds); another
/// project's are left out.
async fn of_project(
    engine: &Engine,
    user: &UserId,
    project: &ProjectId,
    approvals: Vec<Approval>,
) -> Vec<(Approval, Option<u64>)> {
    let mut messages: HashMap<SessionId, Option<Vec<IndexedMessage>>> = HashMap::new();
    let mut out = Vec::new();
    for approval in approvals {
        if !messages.contains_key(&approval.session_id) {
            let shown = match engine.sessions().get(user, &approval.session_id).await {
                Ok(d) if d.session.project_id == *project => Some(d.state.messages),
                _ => None,
            };
            messages.insert(approval.session_id.clone(), shown);
        }
        if let Some(Some(shown)) = messages.get(&approval.session_id) {
            let message = records::message_of_call(shown, &approval.tool_call_id);
            out.push((approval, message));
        }
    }
    out
}

// ---- events -------------------------------------------------------------------------------

/// The directory's events: `data: {"id", "type", "properties"}` per event, starting
/// with `server.connected`, with `server.heartbeat` in silences. It does not end on
/// its own.
#[utoipa::path(
    get,
    path = "/event",
    params(DirectoryParams, EventQuery),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = OpenCodeStreamEvent),
        OpenCodeErrors,
    )
)]
async fn events(
    State(state): State<AppState>,
    Extension(marks): Extension<PromptMarks>,
    dir: Directory,
    caller: crate::extract::Caller,
    ConnectionToken(connection): ConnectionToken,
    crate::extract::QueryParams(query): crate::extract::QueryParams<EventQuery>,
    request_headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let reach = global::Reach::Directory { path: dir.path, project: dir.project };
    event_stream(&state, marks, dir.user, reach, &caller, connection, &query, &request_headers)
}

/// OpenCode's global stream: the events of every project of the user, each wrapped as
/// `{directory, payload}` (`GlobalEvent`); `server.connected` and `server.heartbeat`
/// under the directory `global`. It does not end on its own.
#[utoipa::path(
    get,
    path = "/global/event",
    params(EventQuery),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = OpenCodeGlobalEvent),
        OpenCodeErrors,
    )
)]
async fn global_events(
    State(state): State<AppState>,
    Extension(marks): Extension<PromptMarks>,
    caller: crate::extract::Caller,
    ConnectionToken(connection): ConnectionToken,
    crate::extract::QueryParams(query): crate::extract::QueryParams<EventQuery>,
    request_headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let user = caller.user.clone();
    event_stream(&state, marks, user, global::Reach::All, &caller, connection, &query, &request_headers)
}

/// The response of `/event` and `/global/event`.
#[allow(clippy::too_many_arguments)]
fn event_stream(
    state: &AppState,
    marks: PromptMarks,
    user: UserId,
    reach: global::Reach,
    caller: &crate::extract::Caller,
    connection: CancellationToken,
    query: &EventQuery,
    request_headers: &axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    // A reconnecting client's last event: it is told what it missed since (global.rs).
    let since = sse::last_event_id(request_headers).and_then(global::since_of);
    // Counted like a session stream for as long as the response is open (the sessions
    // it follows count too, each as a session stream).
    let permit = state.engine.stream_permit(&user)?;
    // Closed with its connection when the credential is revoked.
    let watch = state.engine.auth().watch_credential(&caller.credential, connection.clone());
    let options = global::Options {
        legacy_deltas: query.deltas.as_deref() == Some("legacy"),
        // OpenCode's 10 s, or the server's own interval when that is shorter.
        heartbeat: state.config.heartbeat.min(global::HEARTBEAT),
        since,
    };
    let stream =
        GlobalStream::new(state.engine.clone(), state.session_forms.clone(), user, reach, connection, marks, options);
    Ok(crate::revocation::watched(sse::response(sse::EVENT_STREAM, sse::holding(stream, permit)), watch))
}

/// Each body this module reads, parsed and checked as its handler does.
pub(crate) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /session", |b| CreateBody::read(b).map(drop)),
    ("PATCH /session/{id}", |b| PatchBody::read(b).map(drop)),
    ("POST /session/{id}/fork", |b| fork::ForkBody::read(b).map(drop)),
    ("POST /session/{id}/revert", |b| revert::RevertBody::read(b).map(drop)),
    ("POST /session/{id}/message, /prompt_async", |b| PromptBody::read(b).map(drop)),
    ("POST /session/{id}/permissions/{permission}", |b| RespondBody::read(b).map(|b| drop(b.response.decision()))),
    ("POST /permission/{id}/reply", |b| ReplyBody::read(b).map(|b| drop(b.reply.decision()))),
    ("POST /question/{id}/reply", |b| QuestionReplyBody::read(b).map(|b| drop(b.answer()))),
];
