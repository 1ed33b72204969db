//! Decision tokens spent (issue 41): what a notification's Approve and Deny buttons,
//! and a chat's decision links, send. No login: the token is the capability, signed by
//! the server, bound to one approval, one user and the subscription or webhook that
//! carried it, expiring, good once (`spool_reach::token`).
//!
//! `POST /api/decision-tokens/peek {token}` says what the token would decide (the
//! card's redacted summary, the decisions it allows, the approval's status) and spends
//! nothing; `POST /api/decision-tokens/decide {token, decision}` decides through the
//! same exactly-once path as every other decision route. The checks, in order:
//!
//! 1. the signature — 401 `invalid_token` (forged, altered, or the key was rotated);
//! 2. the token's expiry — 410 `token_expired`;
//! 3. its source still exists (the push subscription, the configured webhook) — 401
//!    `token_revoked`;
//! 4. the decision is one it allows — 400 `decision_not_allowed`;
//! 5. a login cookie, if the request carries one, is the token's user — 403
//!    `wrong_user`;
//! 6. single use: its nonce is claimed once (idempotency scope `decision-token`) — a
//!    second tap is 409 `token_used`, refused rather than replayed;
//! 7. the decision: another user's approval is 404, one decided elsewhere first (another
//!    device, a page) 409 `already_resolved`, an expired one 410. An engine error
//!    releases the claim, so the tap may be tried again.

use super::decision::decision_response;
use crate::error::ApiError;
use crate::extract::{BodyCheck, JsonBody, Presented, json_body, presented};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_engine::{DecisionInput, DecisionTarget, IdempotencyClaim};
use spool_protocol::api::{Decided, error_body};
use spool_protocol::{ApprovalId, Decision, UserId};
use spool_reach::push::TokenCheck;
use spool_reach::token::{DecisionClaims, USED_SCOPE};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(peek)).routes(routes!(decide))
}

#[derive(Deserialize, ToSchema)]
#[schema(as = decision_tokens::PeekBody)]
struct PeekBody {
    token: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = decision_tokens::TokenDecision)]
enum TokenDecision {
    /// Run the call this once.
    Once,
    /// Deny it: the model is told, the run goes on.
    Reject,
}

#[derive(Deserialize, ToSchema)]
#[schema(as = decision_tokens::DecideBody)]
struct DecideBody {
    token: String,
    decision: TokenDecision,
}

/// What a token would decide.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = decision_tokens::Peeked)]
struct Peeked {
    approval_id: String,
    session_id: String,
    tool: String,
    kind: String,
    /// The card's redacted one-line summary.
    summary: String,
    /// `pending` while it can still be decided.
    status: String,
    /// What the token allows: `once`, `reject`.
    decisions: Vec<String>,
    /// When the token stops working (Unix ms).
    expires_at: i64,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] = &[
    ("POST /api/decision-tokens/peek", |b| json_body::<PeekBody>(b).map(drop)),
    ("POST /api/decision-tokens/decide", |b| json_body::<DecideBody>(b).map(drop)),
];

/// What a decision token would decide; spends nothing.
#[utoipa::path(
    post,
    path = "/api/decision-tokens/peek",
    security(()),
    request_body = PeekBody,
    responses(
        (status = 200, body = Peeked),
        (status = 400, description = "A body that is not JSON or has wrong fields (`malformed_json`, `invalid_body`)", body = spool_protocol::api::ErrorBody),
        (status = 401, description = "`invalid_token` or `token_revoked`", body = spool_protocol::api::ErrorBody),
        (status = 404, description = "The approval is not the token's user's", body = spool_protocol::api::ErrorBody),
        (status = 410, description = "`token_expired`", body = spool_protocol::api::ErrorBody),
        (status = 413, description = "A body over the server's limit (`body_too_large`)", body = spool_protocol::api::ErrorBody),
        (status = 415, description = "A body without `Content-Type: application/json` (`unsupported_media_type`)", body = spool_protocol::api::ErrorBody),
    )
)]
async fn peek(State(state): State<AppState>, JsonBody(body): JsonBody<PeekBody>) -> Result<Response, ApiError> {
    let claims = match checked(&state, &body.token).await? {
        Ok(claims) => claims,
        Err(refused) => return Ok(refused),
    };
    let approval: Option<ApprovalId> = claims.approval.parse().ok();
    let found = match approval {
        Some(id) => state.push.store().get_approval(&id).await.map_err(|e| ApiError::Engine(e.into()))?,
        None => None,
    };
    let Some((approval, _)) = found.filter(|(a, _)| a.owner_id.as_str() == claims.user) else {
        return Err(ApiError::not_found("approval"));
    };
    let peeked = Peeked {
        approval_id: approval.id.to_string(),
        session_id: approval.session_id.to_string(),
        tool: approval.tool.clone(),
        kind: serde_json::to_value(approval.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        summary: spool_protocol::reach::summary(&approval),
        status: approval.status.as_str().to_owned(),
        decisions: claims.decisions.clone(),
        expires_at: claims.expires_at,
    };
    Ok(Json(peeked).into_response())
}

/// Decides the token's approval, once.
#[utoipa::path(
    post,
    path = "/api/decision-tokens/decide",
    security(()),
    request_body = DecideBody,
    responses(
        (status = 200, description = "Decided; the run goes on", body = Decided),
        (status = 400, description = "A decision the token does not allow (`decision_not_allowed`), or a bad body", body = spool_protocol::api::ErrorBody),
        (status = 401, description = "`invalid_token` or `token_revoked`", body = spool_protocol::api::ErrorBody),
        (status = 403, description = "A login cookie of another user (`wrong_user`)", body = spool_protocol::api::ErrorBody),
        (status = 404, description = "The approval is not the token's user's", body = spool_protocol::api::ErrorBody),
        (status = 409, description = "The token was used (`token_used`), or the approval was decided elsewhere first (`already_resolved`)", body = spool_protocol::api::ErrorBody),
        (status = 410, description = "The token expired (`token_expired`), or the approval did (`approval_expired`)", body = spool_protocol::api::ErrorBody),
        (status = 413, description = "A body over the server's limit (`body_too_large`)", body = spool_protocol::api::ErrorBody),
        (status = 415, description = "A body without `Content-Type: application/json` (`unsupported_media_type`)", body = spool_protocol::api::ErrorBody),
    )
)]
async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<DecideBody>,
) -> Result<Response, ApiError> {
    let claims = match checked(&state, &body.token).await? {
        Ok(claims) => claims,
        Err(refused) => return Ok(refused),
    };
    let (decision, name) = match body.decision {
        TokenDecision::Once => (Decision::Once, "once"),
        TokenDecision::Reject => (Decision::Reject, "reject"),
    };
    if !claims.decisions.iter().any(|d| d == name) {
        return Ok(refuse(StatusCode::BAD_REQUEST, "decision_not_allowed", "this token does not allow that decision"));
    }
    // A browser that is logged in as someone else is not the person the token was
    // sent to: refuse rather than decide as the token's user from their browser.
    if let Presented::Known { user, via_cookie: true, .. } = presented(&state, &headers).await?
        && user.as_str() != claims.user
    {
        return Ok(refuse(StatusCode::FORBIDDEN, "wrong_user", "this token is another user's"));
    }
    let (Ok(user), Ok(approval)) = (claims.user.parse::<UserId>(), claims.approval.parse::<ApprovalId>()) else {
        return Err(ApiError::not_found("approval"));
    };
    let store = state.push.store().clone();
    let now = spool_protocol::time::now_ms();
    match store.claim_idempotency(USED_SCOPE, &claims.nonce, now).await.map_err(|e| ApiError::Engine(e.into()))? {
        IdempotencyClaim::Claimed => {}
        IdempotencyClaim::InProgress | IdempotencyClaim::Done(_) => {
            return Ok(refuse(StatusCode::CONFLICT, "token_used", "this token was already used"));
        }
    }
    let via = match claims.source.starts_with("webhook:") {
        true => "link",
        false => "push",
    };
    let input = DecisionInput { via: Some(via), ..DecisionInput::plain(decision) };
    match state.engine.runs().decide(&user, DecisionTarget::Approval, &approval, input).await {
        Ok(outcome) => {
            let response = decision_response(&outcome);
            if let Err(e) = store.complete_idempotency(USED_SCOPE, &claims.nonce, response.status().as_str()).await {
                tracing::warn!(error = %e, "marking a decision token used");
            }
            Ok(response)
        }
        Err(e) => {
            // Not decided: the token may be tried again (a 404 or 410 will say the
            // same again; a store hiccup may not).
            if let Err(e) = store.release_idempotency(USED_SCOPE, &claims.nonce).await {
                tracing::warn!(error = %e, "releasing a decision token");
            }
            Err(e.into())
        }
    }
}

/// Checks 1–3: the token's claims, or the answer that refuses it.
async fn checked(state: &AppState, token: &str) -> Result<Result<DecisionClaims, Response>, ApiError> {
    let check = state.push.check_token(token, spool_protocol::time::now_ms()).await.map_err(|e| {
        tracing::error!(error = %format!("{e:#}"), "checking a decision token");
        ApiError::Internal
    })?;
    Ok(match check {
        TokenCheck::Valid(claims) => Ok(claims),
        TokenCheck::Invalid => {
            Err(refuse(StatusCode::UNAUTHORIZED, "invalid_token", "this is not a valid decision token"))
        }
        TokenCheck::Expired => Err(refuse(StatusCode::GONE, "token_expired", "this decision token has expired")),
        TokenCheck::Revoked => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "token_revoked",
            "the notification or link this token came with was removed",
        )),
    })
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], error_body(code, message)).into_response()
}
