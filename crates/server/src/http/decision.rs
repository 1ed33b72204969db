//! A decision's outcome on the wire, one answer for every route that decides an
//! approval: the session and run forms (`approvals.rs`), the run stream's resume, the
//! AI SDK's approval replies, the gate's and OpenCode's permission replies. The engine
//! keeps the outcome for an idempotency key, so a repeat renders the same bytes again.
//!
//! A leaf of `http/`, so those routes share it without importing each other.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use spool_engine::DecisionOutcome;
use spool_protocol::api::Decided;

/// A decision's outcome on the wire: 200 with [`Decided`] when it was applied, else
/// 409 with `already_resolved`, or `resource_changed` naming the approval that asks
/// again.
pub(crate) fn decision_response(outcome: &DecisionOutcome) -> Response {
    use spool_protocol::api::{error_body, resource_changed_body};
    let (status, body) = match outcome {
        DecisionOutcome::Applied { approval_id, run_id, decision } => {
            let decided = Decided {
                approval_id: approval_id.clone(),
                run_id: run_id.clone(),
                decision: decision.clone(),
                status: "resolved".into(),
            };
            (StatusCode::OK, serde_json::to_string(&decided).expect("plain data serializes"))
        }
        DecisionOutcome::AlreadyResolved => (
            StatusCode::CONFLICT,
            error_body("already_resolved", "this approval was already decided, expired or cancelled"),
        ),
        DecisionOutcome::ResourceChanged { message, replacement } => {
            (StatusCode::CONFLICT, resource_changed_body(message, replacement.as_str()))
        }
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
