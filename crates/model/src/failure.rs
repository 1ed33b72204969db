//! How a provider call goes wrong, in one place for both providers: a [`Failure`] is a
//! `ModelError` plus whether trying again could help. Status codes and error bodies are
//! classified here, so `bad_credentials`, `context_overflow` and the rest mean the same
//! thing whichever provider said them.
//!
//! Every text that may reach a person passes through [`scrub`], because providers
//! sometimes echo the API key back ("Incorrect API key provided: sk-…"), and a key in a
//! run record or an event is a leak.

use spool_engine::ModelError;
use std::time::Duration;

/// Error bodies are read up to this size; the message a person needs is at the start,
/// and a misbehaving server must not make us buffer without bound.
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;

/// Provider text quoted in an error is cut to this many characters.
const MAX_QUOTED: usize = 500;

/// A failed attempt: the error to report and whether a retry could help.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: ModelError,
    pub retryable: bool,
    /// What the provider asked for (`retry-after`), when it did.
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn fatal(code: &str, message: impl Into<String>) -> Self {
        Self { error: ModelError::new(code, message), retryable: false, retry_after: None }
    }

    pub fn retryable(code: &str, message: impl Into<String>) -> Self {
        Self { error: ModelError::new(code, message), retryable: true, retry_after: None }
    }

    /// The chunk could not be understood. Not retried: the same request most likely gets
    /// the same answer, and a person should see what the provider sent.
    pub fn malformed(what: &str, data: &str) -> Self {
        Self::fatal("malformed_chunk", format!("the provider sent {what}: {}", quote(data)))
    }
}

/// Classifies a non-success HTTP answer from its status and body.
pub(crate) fn from_status(status: u16, body: &str, retry_after: Option<Duration>) -> Failure {
    let message = provider_message(body);
    let mut failure = match status {
        401 | 403 => {
            Failure::fatal("bad_credentials", format!("the provider refused the API key ({status}): {message}"))
        }
        429 => Failure::retryable("rate_limited", format!("rate limited by the provider (429): {message}")),
        // 529 is Anthropic's "overloaded"; it is in the 5xx range with the rest.
        500..=599 => Failure::retryable("provider_error", format!("the provider failed ({status}): {message}")),
        400 | 413 if mentions_context_overflow(body) => Failure::fatal(
            "context_overflow",
            format!("the conversation is too long for the model ({status}): {message}"),
        ),
        404 => Failure::fatal(
            "model_unavailable",
            format!("the provider does not know this model or endpoint (404): {message}"),
        ),
        _ => Failure::fatal("bad_request", format!("the provider rejected the request ({status}): {message}")),
    };
    failure.retry_after = retry_after;
    failure
}

/// Classifies an error the provider reported inside a 200 event stream (OpenAI-style
/// `{"error": …}` chunks, Anthropic's `error` event). `kind` is the provider's error
/// type or code, when it gave one.
pub(crate) fn from_stream_error(kind: &str, message: &str) -> Failure {
    let text = format!("{kind} {message}");
    let quoted = quote(message);
    if mentions_context_overflow(&text) {
        return Failure::fatal("context_overflow", format!("the conversation is too long for the model: {quoted}"));
    }
    match kind {
        "rate_limit_error" | "rate_limit_exceeded" | "rate_limited" => {
            Failure::retryable("rate_limited", format!("rate limited by the provider: {quoted}"))
        }
        "overloaded_error" | "api_error" | "server_error" | "internal_server_error" => {
            Failure::retryable("provider_error", format!("the provider failed ({kind}): {quoted}"))
        }
        "authentication_error" | "permission_error" | "invalid_api_key" => {
            Failure::fatal("bad_credentials", format!("the provider refused the API key: {quoted}"))
        }
        "" => Failure::fatal("provider_error", format!("the provider reported an error: {quoted}")),
        _ => Failure::fatal("provider_error", format!("the provider reported an error ({kind}): {quoted}")),
    }
}

/// The wording providers use for "the prompt does not fit": OpenAI's error code and
/// message, vLLM's and llama.cpp's messages, Anthropic's message.
fn mentions_context_overflow(text: &str) -> bool {
    let text = text.to_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "context window",
        "exceeds the available context size",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// The human part of an error body: `error.message` (OpenAI, Anthropic), `error` as a
/// string (Ollama), `message`, or else the body itself, quoted and cut.
pub(crate) fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let picked = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message").or_else(|| v.get("error").filter(|e| e.is_string())).or_else(|| v.get("message"))
    });
    match picked.and_then(|m| m.as_str()) {
        Some(message) => quote(message),
        None if body.trim().is_empty() => "(no details)".to_owned(),
        None => quote(body.trim()),
    }
}

/// Cuts provider text to a readable length, on a character boundary.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A reqwest error with its causes ("error sending request: … connection refused"),
/// without the URL: the base URL is configuration and may carry credentials.
pub(crate) fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Any run of at least this many characters of the secret is taken out, not only the
/// whole key: providers echo keys partly masked (`sk-abc…wxyz`), and a long enough
/// piece of a key still narrows it down.
const MIN_SECRET_PIECE: usize = 8;

/// Replaces every piece of `secret` of [`MIN_SECRET_PIECE`] characters or more in
/// `text` with `[redacted]`. Quadratic, but only ever run on short error texts.
pub(crate) fn scrub(text: &str, secret: Option<&str>) -> String {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return text.to_owned();
    };
    let key: Vec<char> = secret.chars().collect();
    let chars: Vec<char> = text.chars().collect();
    // A key shorter than a piece is taken out only whole.
    let min = MIN_SECRET_PIECE.min(key.len());
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let longest = (0..key.len())
            .map(|start| chars[i..].iter().zip(&key[start..]).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        if longest >= min {
            out.push_str("[redacted]");
            i += longest;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

pub(crate) fn scrub_error(error: ModelError, secret: Option<&str>) -> ModelError {
    ModelError { code: error.code, message: scrub(&error.message, secret) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_takes_out_the_key_and_long_pieces_of_it() {
        let key = "sk-proj-abcdefghijklmnop1234";
        let text = format!("Incorrect API key provided: {key}. Also sk-proj-abc****1234 and ghijklmnop.");
        let scrubbed = scrub(&text, Some(key));
        assert_eq!(scrubbed, "Incorrect API key provided: [redacted]. Also [redacted]****1234 and [redacted].");
        assert_eq!(scrub("no secret here", Some(key)), "no secret here");
        assert_eq!(scrub("key: abc", Some("abc")), "key: [redacted]");
        assert_eq!(scrub("anything", None), "anything");
    }

    #[test]
    fn statuses_map_to_stable_codes() {
        let openai_overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        let anthropic_overflow = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        let cases = [
            (401, r#"{"error":{"message":"bad key"}}"#, "bad_credentials", false),
            (403, "", "bad_credentials", false),
            (429, r#"{"error":{"message":"slow down"}}"#, "rate_limited", true),
            (503, "upstream down", "provider_error", true),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "provider_error",
                true,
            ),
            (400, openai_overflow, "context_overflow", false),
            (400, anthropic_overflow, "context_overflow", false),
            (413, "Prompt is too long", "context_overflow", false),
            (400, r#"{"error":"tools not supported"}"#, "bad_request", false),
            (404, r#"{"error":{"message":"model 'nope' not found"}}"#, "model_unavailable", false),
        ];
        for (status, body, code, retryable) in cases {
            let failure = from_status(status, body, None);
            assert_eq!((failure.error.code.as_str(), failure.retryable), (code, retryable), "{status} {body}");
        }
        assert_eq!(
            from_status(400, r#"{"error":"tools not supported"}"#, None).error.message,
            "the provider rejected the request (400): tools not supported"
        );
    }

    #[test]
    fn quotes_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_QUOTED + 10);
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), MAX_QUOTED + 1);
        assert!(quoted.ends_with('…'));
    }
}
