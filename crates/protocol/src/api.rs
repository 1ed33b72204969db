//! The API's error body, `{"error": {"code", "message"}}`, defined once: the server
//! answers with it, the engine stores it verbatim for idempotent replays, and the
//! server's OpenAPI document describes it from these same types.

use serde::Serialize;
use utoipa::ToSchema;

/// What every error response of the API carries.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail<'a> {
    /// A stable machine-readable code (`not_found`, `invalid_body`, `session_busy`, …).
    pub code: &'a str,
    /// A sentence for a person.
    pub message: &'a str,
    /// With `resource_changed`: the new approval that asks for the same call against the
    /// file as it is now (the `interruptId` to resume with).
    #[serde(rename = "approvalId", skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<&'a str>,
}

/// The JSON text of an error response.
pub fn error_body(code: &str, message: &str) -> String {
    serde_json::to_string(&ErrorBody { error: ErrorDetail { code, message, approval_id: None } })
        .expect("two strings always serialize")
}

/// The JSON text of a `resource_changed` answer, naming the approval that replaced the
/// one decided.
pub fn resource_changed_body(message: &str, approval_id: &str) -> String {
    let error = ErrorDetail { code: "resource_changed", message, approval_id: Some(approval_id) };
    serde_json::to_string(&ErrorBody { error }).expect("strings always serialize")
}
