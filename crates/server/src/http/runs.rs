//! Runs: accept a prompt (idempotent by `requestId`), abort the active run (pausing the
//! session's queue when prompts wait), resume a paused queue, show a run.

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use spool_engine::{PromptInput, Submitted};
use spool_protocol::api::{Aborted, PromptAnswer, PromptBody};
use spool_protocol::{Run, RunId, SessionId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // A prompt may carry files inline (data URLs): a larger body than other routes.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(prompt))
                .layer(axum::extract::DefaultBodyLimit::max(super::attachments::INLINE_BODY_BYTES)),
        )
        .routes(routes!(abort))
        .routes(routes!(resume_queue))
        .routes(routes!(show))
}

/// 202 whether the run is new or the `requestId` named an earlier one: either way the
/// client gets the run to follow, and nothing started twice. While a run is going,
/// `multitask` decides: `reject` (the default) is 409 `session_busy`; `enqueue` (or the
/// older `queue: true`) is 202 `{queued: true, requestId, messageId, position}`: the
/// prompt runs when the runs before it have settled (the same `requestId` again answers
/// the same message, or its run once one took it; a full queue is 429 `queue_full`);
/// `interrupt` cancels the run, keeping its messages, and starts this prompt after
/// them; `rollback` cancels it, shelves its turn as a branch of kind `rollback` and
/// starts this prompt in its place. Both start ahead of queued prompts.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/prompt",
    params(("id" = SessionId, Path)),
    request_body = PromptBody,
    responses(
        (status = 202, description = "The run to follow on the session stream, or the queued message", body = PromptAnswer),
        WriteErrors
    )
)]
async fn prompt(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<PromptBody>,
) -> Result<(StatusCode, Json<PromptAnswer>), ApiError> {
    let Some(multitask) = body.strategy() else {
        return Err(ApiError::bad_request(
            "invalid_prompt",
            "`queue: true` means `multitask: \"enqueue\"`; this prompt asks for both it and another strategy",
        ));
    };
    let (text, files) = super::attachments::prompt_files(&engine, &user, body.text, body.parts).await?;
    let input = PromptInput {
        text,
        request_id: body.request_id,
        approval_policy: body.approval_policy,
        on_disconnect: body.on_disconnect,
        multitask,
        at: body.at,
        regenerate: body.regenerate,
        client_tools: body.tools,
        files,
    };
    let answer = match engine.runs().submit(&user, &id, input).await? {
        Submitted::Started(accepted) => PromptAnswer::Started(accepted),
        Submitted::Queued(queued) => PromptAnswer::Queued(queued),
    };
    Ok((StatusCode::ACCEPTED, Json(answer)))
}

/// Returns once the run is settled as `cancelled`; with nothing running it is a no-op.
/// With prompts in the session's queue, the queue is paused first: none of them starts
/// until `POST /api/sessions/{id}/queue/resume` or a prompt sent with `queue: true`.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/abort",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = Aborted), WriteErrors)
)]
async fn abort(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<Aborted>, ApiError> {
    let run_id = engine.runs().abort(&user, &id).await?;
    Ok(Json(Aborted { aborted: run_id.is_some(), run_id }))
}

/// Lets a queue that Stop paused go on: its next prompt starts when no run is going.
/// A queue that is not paused is left as it is (204 all the same).
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/queue/resume",
    params(("id" = SessionId, Path)),
    responses((status = 204, description = "The queue goes on"), WriteErrors)
)]
async fn resume_queue(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<StatusCode, ApiError> {
    engine.runs().resume_queue(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/api/runs/{id}",
    params(("id" = RunId, Path)),
    responses((status = 200, body = Run), ReadErrors)
)]
async fn show(Acting { engine, user }: Acting, PathId(id): PathId<RunId>) -> Result<Json<Run>, ApiError> {
    Ok(Json(engine.runs().get(&user, &id).await?))
}

/// The body this module reads, parsed as its handler does (the engine checks the text).
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/prompt", |b| json_body::<PromptBody>(b).map(drop))];
