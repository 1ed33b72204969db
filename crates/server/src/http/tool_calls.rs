//! `POST /api/tool-calls/{approvalId}/result`: the result of a client-side tool call
//! (issue 40). A prompt may declare tools the client runs itself (`tools` on the
//! prompt); a call of one parks the run at an approval marked `"client": true` (see
//! `Approval::is_client_call`), and this route hands the engine what the client's tool
//! returned. It goes through the same engine call as every other decision (a
//! `Decision::Output`), so the result is taken exactly once: the store's conditional
//! update picks one winner, anyone later gets 409 `already_resolved`, and a repeat with
//! the same idempotency key gets the first answer again, byte for byte. Without a key
//! the key is a digest of the result, so a retried identical POST is answered 200 again
//! while a different result is refused.

use super::decision::decision_response;
use super::responses::DecisionErrors;
use crate::error::ApiError;
use crate::extract::{Acting, BodyCheck, JsonBody, PathId, json_body};
use crate::state::AppState;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_engine::{DecisionInput, DecisionOutcome, DecisionTarget, EngineError};
use spool_protocol::approval::ClientOutput;
use spool_protocol::{ApprovalId, Decision, RunId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(result))
}

/// What the client's tool returned.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ClientToolResultBody {
    /// The tool's output: a string is given to the model as it is, anything else as
    /// compact JSON. At most 256 KiB.
    #[schema(value_type = Object)]
    output: serde_json::Value,
    /// The tool failed: the model is told so, with `output` as the error.
    #[serde(default)]
    is_error: bool,
    /// Makes a retry safe: the same key gets the first answer again. Without one, the
    /// result itself is the key (the same result again is answered 200 again).
    idempotency_key: Option<String>,
}

/// The result was taken: the run goes on with it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ClientToolResultTaken {
    /// The model's id of the call.
    tool_call_id: String,
    approval_id: ApprovalId,
    run_id: RunId,
    /// Always `running`: the run continues with the result.
    status: &'static str,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/tool-calls/{approvalId}/result", |b| json_body::<ClientToolResultBody>(b).map(drop))];

/// Posts the result of a client-side tool call, named by the `per_…` id of its
/// `approval_requested` event (payload `{"client": true, tool, arguments,
/// description}`): the run goes on with it. Taken exactly once: 409 `already_resolved`
/// once the call has a result (or was cancelled); the same `idempotencyKey` (or, without
/// one, the same result) again gets the first answer, byte for byte. 404 for a call that
/// is not yours or not a client call, 410 `client_tool_expired` past its time (the run
/// was cancelled), 413 `output_too_large` past 256 KiB.
#[utoipa::path(
    post,
    path = "/api/tool-calls/{approvalId}/result",
    params(("approvalId" = ApprovalId, Path)),
    request_body = ClientToolResultBody,
    responses(
        (status = 200, description = "The result was taken; the run goes on with it", body = ClientToolResultTaken),
        DecisionErrors,
    )
)]
async fn result(
    Acting { engine, user }: Acting,
    PathId(id): PathId<ApprovalId>,
    JsonBody(body): JsonBody<ClientToolResultBody>,
) -> Result<Response, ApiError> {
    let runs = engine.runs();
    // Only a client call can take a result; any other approval is not one of these.
    let approval = runs.approval(&user, &id).await?;
    if !approval.is_client_call() {
        return Err(ApiError::Engine(EngineError::NotFound("tool call")));
    }
    let output = ClientOutput { output: body.output, is_error: body.is_error };
    let key = body.idempotency_key.unwrap_or_else(|| digest_key(&id, &output));
    let input =
        DecisionInput { decision: Decision::Output(output), message: None, idempotency_key: Some(key), patterns: None, via: None };
    let outcome = runs.decide(&user, DecisionTarget::Approval, &id, input).await?;
    Ok(match outcome {
        DecisionOutcome::Applied { approval_id, run_id, .. } => {
            let taken =
                ClientToolResultTaken { tool_call_id: approval.tool_call_id, approval_id, run_id, status: "running" };
            let json = serde_json::to_string(&taken).expect("plain data serializes");
            (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], json).into_response()
        }
        DecisionOutcome::AlreadyResolved => {
            let body = spool_protocol::api::error_body(
                "already_resolved",
                "this tool call already has its result, or it was cancelled or expired",
            );
            (StatusCode::CONFLICT, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        other => decision_response(&other),
    })
}

/// The idempotency key of a result posted without one: `tool-call:<id>:<digest>`, the
/// digest (16 hex digits of SHA-256) of the result as JSON, so the same result again is
/// a repeat and a different one is a second answer.
fn digest_key(id: &ApprovalId, output: &ClientOutput) -> String {
    format!("tool-call:{id}:{}", crate::dialect::shared::output_digest(output))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_without_a_key_is_keyed_by_its_digest() {
        let id: ApprovalId = "per_01jd0000000000000000000006".parse().expect("an id");
        let sunny = ClientOutput { output: "sunny".into(), is_error: false };
        let key = digest_key(&id, &sunny);
        let (prefix, hex) = key.rsplit_once(':').expect("a digest");
        assert_eq!(prefix, format!("tool-call:{id}"));
        assert_eq!(hex.len(), 16);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key, digest_key(&id, &sunny.clone()), "the same result, the same key");
        let failed = ClientOutput { is_error: true, ..sunny };
        assert_ne!(key, digest_key(&id, &failed), "an error is another result");
    }
}
