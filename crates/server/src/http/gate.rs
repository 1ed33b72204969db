//! Seed 002's gate routes: `GET /api/gate/approvals` lists the caller's pending
//! approvals, so a hub client that reconnects can rehydrate its approval cards (and
//! dismiss the ones that are gone), and `POST /api/gate/approvals/{id}` decides one by
//! its id alone. Both go through the engine's exactly-once approval machinery, the same
//! as the session and run routes: a repeated idempotency key gets the first answer
//! again, and of two decisions one wins and the other gets 409 `already_resolved`.
//!
//! Each listed approval has the shape of the hub event that announced it
//! (`gate.approval_requested`, `agent.ask_user` for a question or `agent.exit_plan` for a
//! plan), plus its `type` and `channel_id`, so a client renders a listed card and a live
//! one with the same code.

use super::decision::decision_response;
use super::responses::{DecisionErrors, ReadErrors};
use crate::dialect::ws_hub;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::Json;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use spool_engine::{DecisionInput, DecisionTarget};
use spool_protocol::api::Decided;
use spool_protocol::{ApprovalId, Decision};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(decide))
}

/// The caller's pending approvals, oldest first.
#[derive(Serialize, ToSchema)]
struct GateApprovals {
    /// Each as its hub event's data, with `type` (`gate.approval_requested`,
    /// `agent.ask_user` or `agent.exit_plan`) and `channel_id` (the session).
    #[schema(value_type = Vec<Object>)]
    approvals: Vec<serde_json::Value>,
}

/// Seed 002's gate decisions, and Spool's: `once`, `always`, `deny` (or `reject`), or
/// `{"fill": {…}}` to run the call with edited arguments.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum GateDecision {
    Once,
    Always,
    #[serde(alias = "reject")]
    Deny,
    Fill(serde_json::Value),
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct GateBody {
    decision: GateDecision,
    /// With `deny`: the model is told the call was rejected, with this message, and the
    /// run goes on; without one the run ends.
    message: Option<String>,
    #[serde(alias = "idempotency_key")]
    idempotency_key: Option<String>,
}

impl GateBody {
    fn into_input(self) -> DecisionInput {
        let decision = match self.decision {
            GateDecision::Once => Decision::Once,
            GateDecision::Always => Decision::Always,
            GateDecision::Deny => Decision::Reject,
            GateDecision::Fill(args) => Decision::Fill(args),
        };
        DecisionInput { decision, message: self.message, idempotency_key: self.idempotency_key, patterns: None, via: None }
    }
}

/// Lists the caller's pending approvals across sessions.
#[utoipa::path(
    get,
    path = "/api/gate/approvals",
    responses((status = 200, description = "Pending approvals, oldest first", body = GateApprovals), ReadErrors)
)]
async fn list(Acting { engine, user }: Acting) -> Result<Json<GateApprovals>, ApiError> {
    let pending = engine.runs().pending_approvals(&user).await?;
    // A client tool call waits for the program that declared the tool, not for a
    // person: the gate lists only what a person decides.
    let approvals = pending
        .iter()
        .filter(|approval| !approval.is_client_call())
        .map(|approval| {
            let (kind, mut data) = ws_hub::approval_requested(approval);
            data["type"] = kind.into();
            data["channel_id"] = approval.session_id.to_string().into();
            data
        })
        .collect();
    Ok(Json(GateApprovals { approvals }))
}

/// Decides one of the caller's approvals by its id.
#[utoipa::path(
    post,
    path = "/api/gate/approvals/{id}",
    params(("id" = ApprovalId, Path)),
    request_body = GateBody,
    responses((status = 200, description = "The decision was applied; the run goes on", body = Decided), DecisionErrors)
)]
async fn decide(
    Acting { engine, user }: Acting,
    PathId(approval): PathId<ApprovalId>,
    JsonBody(body): JsonBody<GateBody>,
) -> Result<Response, ApiError> {
    let outcome = engine.runs().decide(&user, DecisionTarget::Approval, &approval, body.into_input()).await?;
    Ok(decision_response(&outcome))
}

/// Each body this module reads, parsed and checked as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/gate/approvals/{id}", |b| json_body::<GateBody>(b).map(|b| drop(b.into_input())))];
