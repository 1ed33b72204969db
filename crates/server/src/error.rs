//! `ApiError`: the one error type every handler and extractor returns.
//!
//! Every error leaves the server as JSON `{"error":{"code":"…","message":"…"}}` with the
//! status that fits it, so a client can branch on `code` and show `message`. Engine
//! errors map case by case; the transport cases (a malformed body, an unknown route,
//! a panic) are the ones axum would otherwise answer with plain text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use spool_engine::{EngineError, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A request the server cannot read: bad JSON, wrong field types, bad query values.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// A body that is not `application/json` where JSON is expected.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A body over the server's limit.
    #[error("{0}")]
    BodyTooLarge(String),
    /// No route has this path.
    #[error("no route for {0}")]
    RouteNotFound(String),
    /// The route exists, but not with this method.
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    /// No valid credentials on a server that requires them.
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    /// Credentials are fine but the request may not be made this way (a cross-site
    /// write with a cookie).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// A well-formed body whose content the server refuses: a hub event of an unknown
    /// type, or whose payload does not match its type's schema (422).
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// A handler panicked. The details go to the log, never to the client.
    #[error("internal server error")]
    Internal,
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest { code, message: message.into() }
    }

    /// An id that does not parse names nothing, so it is answered like a missing one.
    pub fn not_found(what: &'static str) -> Self {
        ApiError::Engine(EngineError::NotFound(what))
    }

    /// The status and JSON body this error answers with, for a transport that reports
    /// an error inside a stream rather than as a response (`GET /api/streams`).
    pub(crate) fn status_and_body(&self) -> (StatusCode, String) {
        let (status, code, message) = self.parts();
        (status, spool_protocol::api::error_body(code, &message))
    }

    /// Status, code and the message a client may see.
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::Engine(e) => {
                let status = match e {
                    EngineError::NotFound(_) => StatusCode::NOT_FOUND,
                    EngineError::Invalid { .. } => StatusCode::BAD_REQUEST,
                    EngineError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                    EngineError::SessionBusy(_) | EngineError::Conflict { .. } => StatusCode::CONFLICT,
                    EngineError::Gone { .. } => StatusCode::GONE,
                    EngineError::Forbidden { .. } => StatusCode::FORBIDDEN,
                    EngineError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
                    EngineError::Unavailable { .. } => {
                        tracing::warn!(error = %e, "a dependency is unavailable");
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    EngineError::Store(StoreError::Conflict(_)) => {
                        // A uniqueness rule the engine did not translate: the request
                        // collided with existing data. The store's wording stays in the log.
                        tracing::warn!(error = %e, "store conflict reached the API");
                        return (StatusCode::CONFLICT, e.code(), "the request conflicts with existing data".into());
                    }
                    EngineError::Store(StoreError::Backend(_)) => {
                        tracing::error!(error = %e, "storage failure");
                        return (StatusCode::INTERNAL_SERVER_ERROR, e.code(), "internal storage error".into());
                    }
                    EngineError::Store(StoreError::Fenced(_)) => {
                        tracing::warn!(error = %e, "a write was fenced: another node took the session over");
                        let message = "another node took this session over; try again".into();
                        return (StatusCode::CONFLICT, e.code(), message);
                    }
                };
                (status, e.code(), e.to_string())
            }
            ApiError::BadRequest { code, message } => (StatusCode::BAD_REQUEST, code, message.clone()),
            ApiError::UnsupportedMediaType(m) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", m.clone())
            }
            ApiError::BodyTooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", m.clone()),
            ApiError::RouteNotFound(_) => (StatusCode::NOT_FOUND, "not_found", self.to_string()),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", self.to_string()),
            ApiError::Unauthorized { code, message } => (StatusCode::UNAUTHORIZED, code, message.clone()),
            ApiError::Forbidden { code, message } => (StatusCode::FORBIDDEN, code, message.clone()),
            ApiError::Unprocessable { code, message } => (StatusCode::UNPROCESSABLE_ENTITY, code, message.clone()),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal", self.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let body = spool_protocol::api::error_body(code, &message);
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn render(e: ApiError) -> (StatusCode, serde_json::Value) {
        let res = e.into_response();
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 16).await.expect("small body");
        (status, serde_json::from_slice(&bytes).expect("json body"))
    }

    #[tokio::test]
    async fn engine_errors_map_to_status_and_code() {
        let cases = [
            (ApiError::not_found("session"), 404, "not_found"),
            (EngineError::invalid("invalid_name", "bad").into(), 400, "invalid_name"),
            (EngineError::TooLarge { code: "prompt_too_large", message: "big".into() }.into(), 413, "prompt_too_large"),
            (EngineError::SessionBusy("run_x".into()).into(), 409, "session_busy"),
            (EngineError::Conflict { code: "project_exists", message: "dup".into() }.into(), 409, "project_exists"),
        ];
        for (err, status, code) in cases {
            let (s, body) = render(err).await;
            assert_eq!(s.as_u16(), status);
            assert_eq!(body["error"]["code"], code);
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }

    #[tokio::test]
    async fn storage_failures_do_not_leak_details() {
        let err: ApiError = EngineError::Store(StoreError::Backend("disk I/O error at /secret/path".into())).into();
        let (status, body) = render(err).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "storage_error");
        assert!(!body.to_string().contains("/secret/path"));
    }
}
