//! Deciding approvals: the session form `POST /api/sessions/:id/approvals/:approvalId`
//! and seed 003's run form `POST /api/runs/:runId/resume`. Both reach the same engine
//! call, which answers with a typed outcome; [`decision_response`] (`decision.rs`) is how
//! every route (these two, the run stream's resume and OpenCode's permission replies)
//! puts it on the wire. The engine keeps the outcome for an idempotency key, so a repeat renders the
//! first answer again, byte for byte.

use super::decision::decision_response;
use super::responses::DecisionErrors;
use super::stream_events::RunStreamEvent;
use crate::dialect::run_stream::routes as run_stream;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, CurrentUser, JsonBody, PathId, PathIds, QueryParams, json_body, parse_id};
use crate::serve::ConnectionToken;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use spool_engine::{DecisionInput, DecisionTarget};
use spool_protocol::api::{DecideBody, Decided};
use spool_protocol::{ApprovalId, Decision, RunId, SessionId};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(decide)).routes(routes!(resume))
}

/// Seed 003's decision vocabulary: approve, reject, or fill in the arguments.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum ResumeDecision {
    Approve,
    Reject,
    Fill(serde_json::Value),
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ResumeBody {
    /// The `per_…` id of the `interrupt` event being answered.
    interrupt_id: String,
    decision: ResumeDecision,
    message: Option<String>,
    idempotency_key: String,
}

/// Decides a pending approval of the session. An idempotency key repeated gets the
/// first answer again, byte for byte.
#[utoipa::path(
    post,
    path = "/api/sessions/{id}/approvals/{approval}",
    params(("id" = SessionId, Path), ("approval" = ApprovalId, Path)),
    request_body = DecideBody,
    responses((status = 200, description = "The decision was applied; the run goes on", body = Decided), DecisionErrors)
)]
async fn decide(
    Acting { engine, user }: Acting,
    PathIds(session, approval): PathIds<SessionId, ApprovalId>,
    JsonBody(body): JsonBody<DecideBody>,
) -> Result<Response, ApiError> {
    let patterns = body.chosen_patterns().map_err(|message| ApiError::bad_request("pattern_not_offered", message))?;
    let input = DecisionInput {
        decision: body.decision,
        message: body.message,
        idempotency_key: body.idempotency_key,
        patterns,
        via: None,
    };
    let outcome = engine.runs().decide(&user, DecisionTarget::Session(session), &approval, input).await?;
    Ok(decision_response(&outcome))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ResumeQuery {
    /// With an event-stream answer: continue after this run-stream sequence.
    #[param(maximum = 9007199254740991.0)]
    after: Option<u64>,
}

/// With `Accept: text/event-stream` the answer is the run stream's continuation (see
/// `dialect/run_stream/routes.rs`); otherwise the stored JSON reply.
#[utoipa::path(
    post,
    path = "/api/runs/{id}/resume",
    params(("id" = RunId, Path), ResumeQuery),
    request_body = ResumeBody,
    responses(
        (
            status = 200,
            description = "The decision was applied. With `Accept: text/event-stream`, the run stream's \
                continuation (see `POST /api/chat`) up to the next `interrupt`, `done` or `error`",
            content((Decided = "application/json"), (RunStreamEvent = "text/event-stream"))
        ),
        DecisionErrors,
    )
)]
async fn resume(
    State(state): State<AppState>,
    CurrentUser(user): CurrentUser,
    PathId(run): PathId<RunId>,
    ConnectionToken(connection): ConnectionToken,
    headers: HeaderMap,
    QueryParams(query): QueryParams<ResumeQuery>,
    JsonBody(body): JsonBody<ResumeBody>,
) -> Result<Response, ApiError> {
    let (approval, input) = body.into_input()?;
    if run_stream::wants_event_stream(&headers) {
        return run_stream::resume_stream(&state, &user, run, approval, input, query.after, connection).await;
    }
    let outcome = state.engine.runs().decide(&user, DecisionTarget::Run(run), &approval, input).await?;
    Ok(decision_response(&outcome))
}

impl ResumeBody {
    /// The approval the body names and the decision in the engine's words.
    fn into_input(self) -> Result<(ApprovalId, DecisionInput), ApiError> {
        let approval: ApprovalId = parse_id(&self.interrupt_id)?;
        let decision = match self.decision {
            ResumeDecision::Approve => Decision::Once,
            ResumeDecision::Reject => Decision::Reject,
            ResumeDecision::Fill(args) => Decision::Fill(args),
        };
        Ok((
            approval,
            DecisionInput {
                decision,
                message: self.message,
                idempotency_key: Some(self.idempotency_key),
                patterns: None,
                via: None,
            },
        ))
    }
}

/// Each body this module reads, parsed and checked as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /api/sessions/{id}/approvals/{approval}", |b| json_body::<DecideBody>(b).map(drop)),
    ("POST /api/runs/{id}/resume", |b| json_body::<ResumeBody>(b)?.into_input().map(drop)),
];
