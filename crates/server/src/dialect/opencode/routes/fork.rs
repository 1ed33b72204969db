//! `POST /session/:id/fork {messageID?}`: OpenCode's fork, the native fork (see
//! `http/fork.rs`) with the message named by its OpenCode id. The fork holds the
//! messages before that one (all of them without it); the id must be a user message's
//! (a turn's start), as Spool never forks between a tool call and its result.

use super::info;
use crate::dialect::opencode::ids;
use crate::dialect::opencode::wire::SessionInfo;
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::http::responses::OpenCodeErrors;
use axum::Json;
use axum::body::Bytes;
use serde::Deserialize;
use spool_protocol::SessionId;
use utoipa::ToSchema;

#[derive(Deserialize, ToSchema, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct ForkBody {
    /// Fork before this message (an id `GET /session/:id/message` gave).
    #[serde(rename = "messageID")]
    message_id: Option<String>,
}

impl ForkBody {
    /// The body, which may be absent, `null` or `{}`.
    pub(super) fn read(bytes: &[u8]) -> Result<ForkBody, ApiError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(ForkBody::default());
        }
        serde_json::from_slice::<Option<ForkBody>>(bytes)
            .map(Option::unwrap_or_default)
            .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
    }
}

/// Forks the session before `messageID` (or after its last message) into a new one.
#[utoipa::path(
    post,
    path = "/session/{id}/fork",
    params(("id" = SessionId, Path)),
    request_body = Option<ForkBody>,
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
pub(super) async fn fork(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    bytes: Bytes,
) -> Result<Json<SessionInfo>, ApiError> {
    let body = ForkBody::read(&bytes)?;
    let before = match body.message_id {
        Some(message) => Some(ids::message_index(&id, &message).ok_or_else(|| {
            ApiError::bad_request("invalid_index", format!("{message:?} names no message of this session"))
        })?),
        None => None,
    };
    let session = engine.sessions().fork(&user, &id, before, None).await?;
    Ok(Json(info(&engine, &user, &session).await?))
}
