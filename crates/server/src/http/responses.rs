//! Sets of error responses, named by the kind of route, for `responses(...)` in a
//! `#[utoipa::path]`. Each status is one the route's extractors or the engine can answer
//! with; all carry the shared error body (`ErrorBody`, or `OpenCodeErrorBody` on the
//! OpenCode routes).
//!
//! A leaf: the routes of `http/` and `dialect/` import it, and it imports none of them.

use std::collections::BTreeMap;
use utoipa::IntoResponses;
use utoipa::openapi::{Content, Ref, RefOr, Response, ResponseBuilder};

const BAD_QUERY: &str = "A query value the server cannot read (`invalid_query`)";
const BAD_BODY: &str = "A body that is not valid JSON or has wrong fields (`malformed_json`, `invalid_body`), \
    or a value the server refuses";
const UNAUTHORIZED: &str = "No valid token or login session on a server that requires one (`unauthorized`, \
    `invalid_token`: unknown, revoked, logged out or expired)";
const FORBIDDEN: &str = "A `Host` that is neither loopback nor given with `--allowed-host` while auth is off \
    (`bad_host`); a change a browser page of another origin sent: a foreign `Origin` or `Sec-Fetch-Site` other \
    than `same-origin` (`bad_origin`); a project directory outside the user's project roots (`outside_roots`, the \
    same answer whether or not the path exists) or holding or inside Spool's data directory (`data_dir`), on \
    registration or on a prompt in such a project";
const UPGRADE_FORBIDDEN: &str = "A browser page of another origin (`bad_origin`), or a `Host` this server does not \
    serve while auth is off (`bad_host`)";
const NOT_FOUND: &str = "No such resource, or one that belongs to another user (`not_found`)";
const CONFLICT: &str = "The request collides with the current state (`session_busy`, `already_resolved`, …)";
const DECISION_CONFLICT: &str = "The decision was not applied: the approval was already decided, expired or \
    cancelled (`already_resolved`); a request with this idempotency key is still being processed \
    (`request_in_progress`); or, on an approving decision, the file the `write` or `edit` would change was changed \
    after the approval was asked (`resource_changed`): nothing ran, the approval is now `superseded`, and \
    `error.approvalId` names the new approval that asks for the same call with a preview of the change against the \
    file as it is now. A reject is never refused for a changed file. Repeating the idempotency key returns this \
    same answer";
const DECISION_BAD: &str = "A body that is not valid JSON or has wrong fields (`malformed_json`, \
    `invalid_body`), a message or idempotency key past its limit, or an `always` whose `pattern`/`patterns` is \
    not one of the approval's `payload.alwaysOptions` (`pattern_not_offered`, naming the choices; nothing is \
    decided)";
const GONE: &str = "The approval expired (`approval_expired`)";
const TOO_LARGE: &str = "The body or prompt is over the server's limit (`body_too_large`, `prompt_too_large`)";
const MEDIA_TYPE: &str =
    "A body without a JSON `Content-Type` (`application/json` or `…+json`) (`unsupported_media_type`)";
const UNAVAILABLE: &str = "The server is at its connection cap (`too_many_connections`, `--max-connections`) \
    or a dependency it needs is unavailable";
const TOO_MANY: &str = "Too many open streams or active runs for this user (`too_many_streams`, `too_many_runs`)";

/// What any route can answer before its handler runs: 403 from the browser trust guard
/// (`crate::guard`: `bad_host`, `bad_origin`) and 503 from the accept loop
/// (`too_many_connections`). The document adds them to every operation.
pub(super) fn before_handler() -> BTreeMap<String, RefOr<Response>> {
    error_responses("ErrorBody", &[(403, FORBIDDEN), (503, UNAVAILABLE)])
}

fn error_responses(schema: &str, cases: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    cases
        .iter()
        .map(|(status, description)| {
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/json", Content::new(Some(Ref::from_schema_name(schema))))
                .build();
            (status.to_string(), response.into())
        })
        .collect()
}

/// A route that reads a user's data: `GET` with an id and perhaps a query.
pub struct ReadErrors;

impl IntoResponses for ReadErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("ErrorBody", &[(400, BAD_QUERY), (401, UNAUTHORIZED), (404, NOT_FOUND)])
    }
}

/// A stream: a read that also counts against the user's open streams.
pub struct StreamErrors;

impl IntoResponses for StreamErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("ErrorBody", &[(400, BAD_QUERY), (401, UNAUTHORIZED), (404, NOT_FOUND), (429, TOO_MANY)])
    }
}

/// A WebSocket upgrade: `101` when the socket opens, `403` for a page or `Host` the
/// server refuses, and a stream's errors.
pub struct UpgradeResponses;

impl IntoResponses for UpgradeResponses {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let opened = ResponseBuilder::new().description("Switching protocols: the socket is open").build();
        let mut responses = error_responses("ErrorBody", &[(403, UPGRADE_FORBIDDEN)]);
        responses.insert("101".into(), opened.into());
        responses.extend(StreamErrors::responses());
        responses
    }
}

/// A route that changes something, with or without a JSON body.
pub struct WriteErrors;

impl IntoResponses for WriteErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("ErrorBody", WRITE)
    }
}

const WRITE: &[(u16, &str)] = &[
    (400, BAD_BODY),
    (401, UNAUTHORIZED),
    (403, FORBIDDEN),
    (404, NOT_FOUND),
    (409, CONFLICT),
    (410, GONE),
    (413, TOO_LARGE),
    (415, MEDIA_TYPE),
    (429, TOO_MANY),
];

/// `POST /api/markdown`: a batch of texts to render, refused whole.
pub struct MarkdownErrors;

impl IntoResponses for MarkdownErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses(
            "ErrorBody",
            &[
                (
                    400,
                    "A body that is not valid JSON or has wrong fields (`malformed_json`, `invalid_body`), or more \
                    than 64 texts (`too_many_texts`)",
                ),
                (401, UNAUTHORIZED),
                (403, FORBIDDEN),
                (
                    413,
                    "The body is over the server's limit (`body_too_large`), or one text is over 256 KiB \
                    (`text_too_large`, the message names its index)",
                ),
                (415, MEDIA_TYPE),
            ],
        )
    }
}

/// `POST /api/hub/events`: a publish, refused whole.
pub struct PublishErrors;

impl IntoResponses for PublishErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses(
            "ErrorBody",
            &[
                (400, "A body that is not valid JSON (`malformed_json`)"),
                (
                    401,
                    "No token, or an unknown or revoked one, on a server that requires auth (`unauthorized`, \
                    `invalid_token`)",
                ),
                (
                    403,
                    "A user's token: only publisher tokens publish (`not_a_publisher`); or the browser guard \
                    (`bad_host`, `bad_origin`)",
                ),
                (413, TOO_LARGE),
                (415, MEDIA_TYPE),
                (
                    422,
                    "An event of an unknown type, a payload that does not match its type's schema, a bad \
                    channel id or audience, or a limit broken (`invalid_event`, `invalid_audience`): the \
                    message names the field and the event's index in `events`; nothing of the request was \
                    published",
                ),
                (503, "The event bus (Redis) cannot be reached (`bus_unavailable`)"),
            ],
        )
    }
}

/// A decision on an approval: a write whose 409 says which conflicts a decision meets.
pub struct DecisionErrors;

impl IntoResponses for DecisionErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("ErrorBody", &decision(WRITE))
    }
}

/// An OpenCode permission reply: [`OpenCodeErrors`] with a decision's 409.
pub struct OpenCodeDecisionErrors;

impl IntoResponses for OpenCodeDecisionErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("OpenCodeErrorBody", &decision(WRITE))
    }
}

fn decision(cases: &[(u16, &'static str)]) -> Vec<(u16, &'static str)> {
    let text = |status, text| match status {
        400 => DECISION_BAD,
        409 => DECISION_CONFLICT,
        _ => text,
    };
    cases.iter().map(|&(status, t)| (status, text(status, t))).collect()
}

/// Any OpenCode-compatible route: the same statuses as a write, with OpenCode's error
/// fields beside Spool's.
pub struct OpenCodeErrors;

impl IntoResponses for OpenCodeErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_responses("OpenCodeErrorBody", WRITE)
    }
}
