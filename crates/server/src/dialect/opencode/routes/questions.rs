//! The agent's questions, the way OpenCode asks them: a call of Spool's `question` tool
//! parks its run at a `select_option` / `provide_input` approval, which OpenCode clients
//! see as a question request (`question.asked` on `/event`, listed by `GET /question`),
//! not as a permission. `POST /question/:id/reply {answers}` is Spool's `fill`
//! decision with `{answer}` — the labels the person picked, or their own words — so the
//! model reads the answer exactly as from the web UI; `POST /question/:id/reject` is a
//! plain `reject`, which stops the run, as dismissing a question stops OpenCode's.
//!
//! A question is answered once. A reply or reject naming one that is not pending any
//! more (answered, dismissed, expired, its run stopped), a permission, or nothing is
//! OpenCode's 404 `QuestionNotFoundError` (`{_tag, requestID, message}`, beside
//! Spool's `error` and OpenCode's `name`), also for the loser of two replies at once.

use super::directory::{Directory, DirectoryParams};
use super::{OpenCodeErrors, of_project};
use crate::dialect::opencode::requests::QuestionReplyBody;
use crate::dialect::opencode::wire::QuestionRequest;
use crate::dialect::opencode::{live_ask, records};
use crate::error::ApiError;
use crate::extract::Acting;
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use spool_engine::{DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineError};
use spool_protocol::api::ErrorDetail;
use spool_protocol::{ApprovalId, ApprovalStatus, Decision, UserId};

/// The pending questions of the directory's sessions, oldest first.
#[utoipa::path(
    get,
    path = "/question",
    params(DirectoryParams),
    responses((status = 200, body = Vec<QuestionRequest>), OpenCodeErrors)
)]
pub(super) async fn list(
    State(state): State<AppState>,
    dir: Directory,
) -> Result<Json<Vec<QuestionRequest>>, ApiError> {
    let Some(project) = &dir.project else { return Ok(Json(Vec::new())) };
    let pending = state.engine.runs().pending_approvals(&dir.user).await?;
    let questions = pending.into_iter().filter(records::is_question).collect();
    let calls = of_project(&state.engine, &dir.user, &project.id, questions).await;
    Ok(Json(calls.iter().map(|(approval, message)| records::question(approval, *message)).collect()))
}

/// Answers a question: one list of labels (or the person's own words) per question.
#[utoipa::path(
    post,
    path = "/question/{id}/reply",
    params(("id" = ApprovalId, Path)),
    request_body = QuestionReplyBody,
    responses((status = 200, description = "Answered: `true`", content_type = "application/json", body = bool), OpenCodeErrors)
)]
pub(super) async fn reply(
    Acting { engine, user }: Acting,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let body = QuestionReplyBody::read(&bytes)?;
    // A server's question (a live ask) takes one answer per field; the model's, one.
    let fill = |approval: &spool_protocol::Approval| match approval.is_live_ask() {
        true => Decision::Fill(live_ask::fill(approval, &body.answers)),
        false => Decision::Fill(serde_json::json!({ "answer": body.answer() })),
    };
    settle(&engine, &user, &id, fill).await
}

/// Dismisses a question: the run stops, as OpenCode's does.
#[utoipa::path(
    post,
    path = "/question/{id}/reject",
    params(("id" = ApprovalId, Path)),
    responses((status = 200, description = "Dismissed: `true`", content_type = "application/json", body = bool), OpenCodeErrors)
)]
pub(super) async fn reject(Acting { engine, user }: Acting, Path(id): Path<String>) -> Result<Response, ApiError> {
    settle(&engine, &user, &id, |_: &spool_protocol::Approval| Decision::Reject).await
}

/// Decides the pending question `raw`: `true`, or 404 when it is not a pending question.
async fn settle(
    engine: &Engine,
    user: &UserId,
    raw: &str,
    decide: impl FnOnce(&spool_protocol::Approval) -> Decision,
) -> Result<Response, ApiError> {
    let Ok(id) = raw.parse::<ApprovalId>() else { return Ok(not_found(raw)) };
    let decision = match engine.runs().approval(user, &id).await {
        Ok(approval) if records::is_question(&approval) && approval.status == ApprovalStatus::Pending => {
            decide(&approval)
        }
        Ok(_) | Err(EngineError::NotFound(_)) => return Ok(not_found(raw)),
        Err(e) => return Err(e.into()),
    };
    match engine.runs().decide(user, DecisionTarget::Approval, &id, DecisionInput::plain(decision)).await {
        Ok(DecisionOutcome::Applied { .. }) => Ok(Json(true).into_response()),
        // Someone answered first, or it expired meanwhile: no longer pending.
        Ok(DecisionOutcome::AlreadyResolved | DecisionOutcome::ResourceChanged { .. })
        | Err(EngineError::NotFound(_) | EngineError::Gone { .. }) => Ok(not_found(raw)),
        Err(e) => Err(e.into()),
    }
}

/// OpenCode's `QuestionNotFoundError`, with Spool's `error` beside it.
#[derive(Serialize)]
struct QuestionNotFound<'a> {
    error: ErrorDetail<'a>,
    #[serde(rename = "_tag")]
    tag: &'static str,
    #[serde(rename = "requestID")]
    request_id: &'a str,
    message: &'a str,
}

fn not_found(id: &str) -> Response {
    let message = "no pending question has this id: it was answered, dismissed or never asked";
    let error = ErrorDetail { code: "not_found".into(), message: message.into(), approval_id: None };
    let body = QuestionNotFound { error, tag: "QuestionNotFoundError", request_id: id, message };
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}
