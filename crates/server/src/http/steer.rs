//! `POST /api/sessions/{id}/steer`: a user message for the running run (issue 40). The
//! run takes it at its next safe boundary — after its current model call or tool
//! batch, before the next model call — so the model's next request holds it; it lands
//! once, also across a restart (see `spool_engine`'s `engine/queue.rs` and
//! `run/steers.rs`). With no run going it is an ordinary prompt in the session's queue.

use super::responses::WriteErrors;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use spool_protocol::api::PromptPart;
use spool_protocol::{MessageId, RunId, SessionId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    // A steer may carry files inline (data URLs), as a prompt may.
    OpenApiRouter::new()
        .routes(routes!(steer))
        .layer(axum::extract::DefaultBodyLimit::max(super::attachments::INLINE_BODY_BYTES))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SteerBody {
    /// The message, as a prompt's text (the same size limit); may be empty (`""`) when
    /// `parts` carries a file.
    text: String,
    /// Files sent with it, and more text, as a prompt's `parts` (README "Attachments"):
    /// its user message holds the files first, then the text.
    #[serde(default)]
    parts: Vec<PromptPart>,
    /// Makes a retry safe: the same id returns the steer sent before.
    request_id: Option<String>,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/sessions/{id}/steer", |b| json_body::<SteerBody>(b).map(drop))];

/// What the steer became.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SteerAnswer {
    /// The user message's id, in the queue until the run takes it and in the
    /// conversation after.
    message_id: MessageId,
    request_id: String,
    /// The run that takes it; `null` when no run was going: the message is then an
    /// ordinary prompt, queued behind any prompts already waiting.
    run_id: Option<RunId>,
}

/// Sends a user message into the session's running run: it joins the conversation at
/// the run's next safe boundary (after the current model call or tool batch), and the
/// model's next request holds it. Sent when no run is going — or when the run settles
/// before taking it — it is an ordinary prompt that runs in its queue order. 429
/// `too_many_steers` past 8 waiting in one session; 413 `prompt_too_large` as a prompt.
/// Files in `parts` are read, limited and refused as a prompt's.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/steer",
    params(("id" = SessionId, Path)),
    request_body = SteerBody,
    responses((status = 202, description = "The steer, waiting for the run to take it", body = SteerAnswer), WriteErrors)
)]
async fn steer(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    JsonBody(body): JsonBody<SteerBody>,
) -> Result<(StatusCode, Json<SteerAnswer>), ApiError> {
    let (text, files) = super::attachments::prompt_files(&engine, &user, body.text, body.parts).await?;
    let steered = engine.runs().steer(&user, &id, text, body.request_id, files).await?;
    let answer = SteerAnswer { message_id: steered.message_id, request_id: steered.request_id, run_id: steered.run_id };
    Ok((StatusCode::ACCEPTED, Json(answer)))
}
