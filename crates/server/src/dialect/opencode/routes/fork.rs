//! `POST /session/:id/fork {messageID?}`: OpenCode's fork, the native fork (see
//! `http/fork.rs`) with the message named by its OpenCode id. The fork holds the
//! messages before that one (all of them without it).
//!
//! OpenCode copies every message whose id sorts before `messageID`, so an assistant
//! message's id keeps its user message and the steps before it: a turn cut in two.
//! Spool never cuts a turn (the fork's next prompt would follow a question without its
//! answer, or a tool call without its result), so an assistant message's id forks
//! before the user message that started its turn: the whole turn stays behind, and
//! the fork holds nothing OpenCode's would not. `revert` reads a message id the same way.

use super::{PAGE, info};
use crate::dialect::opencode::ids;
use crate::dialect::opencode::wire::SessionInfo;
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::http::responses::OpenCodeErrors;
use axum::Json;
use axum::body::Bytes;
use serde::Deserialize;
use spool_engine::Engine;
use spool_protocol::{SessionId, UserId};
use utoipa::ToSchema;

#[derive(Deserialize, ToSchema, Default)]
#[serde(rename_all = "camelCase")]
// Named apart from the native route's `ForkBody`: one name in the document holds one schema.
#[schema(as = opencode::ForkBody)]
pub(super) struct ForkBody {
    /// Fork before this message (an id `GET /session/:id/message` gave); an assistant
    /// message's id forks before its turn's user message.
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
        Some(message) => Some(turn_start(&engine, &user, &id, &message).await?),
        None => None,
    };
    let session = engine.sessions().fork(&user, &id, before, None).await?;
    Ok(Json(info(&engine, &user, &session).await?))
}

/// The index of the user message that starts the turn holding `message` (an OpenCode
/// message id of `session`): the message itself when it is a user message. A 400 when
/// the id names no stored message of the session.
pub(super) async fn turn_start(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    message: &str,
) -> Result<u64, ApiError> {
    let unknown = || ApiError::bad_request("invalid_index", format!("{message:?} names no message of this session"));
    let Some(index) = ids::message_index(session, message) else {
        // Another user's session is a 404 whatever the body says: read one message of
        // it (as its owner may) before saying the id is not one of its messages.
        engine.sessions().messages(user, session, None, Some(1)).await?;
        return Err(unknown());
    };
    let mut before = index + 1;
    let mut first_page = true;
    loop {
        let page = engine.sessions().messages(user, session, Some(before), Some(PAGE)).await?.messages;
        // The newest message of the first page must be the one named, or it is not stored.
        if first_page && page.last().is_none_or(|m| m.index != index) {
            return Err(unknown());
        }
        first_page = false;
        if let Some(start) = page.iter().rev().find(|m| m.message.is_user()) {
            return Ok(start.index);
        }
        match page.first() {
            Some(oldest) if oldest.index > 0 => before = oldest.index,
            // No user message before it: a history that does not start with one.
            _ => return Err(unknown()),
        }
    }
}
