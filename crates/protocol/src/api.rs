//! The API's error body, `{"error": {"code", "message"}}`, defined once: the server
//! answers with it, and the engine stores it verbatim for idempotent replays.

use serde::Serialize;

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
}

/// The JSON text of an error response.
pub fn error_body(code: &str, message: &str) -> String {
    serde_json::to_string(&Body { error: Inner { code, message } }).expect("two strings always serialize")
}
