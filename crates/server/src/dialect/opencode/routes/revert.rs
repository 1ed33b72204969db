//! `POST /session/:id/revert {messageID, partID?}` and `POST /session/:id/unrevert`:
//! OpenCode's revert over the engine's (issue 39). A revert takes the turns from a user
//! message on out of the history (kept as a shelved branch) and puts the files back as
//! they were before those turns; unrevert brings both back. Both answer the session,
//! whose `revert` names the pending revert until unrevert (or the next prompt, which
//! makes it final).
//!
//! Spool reverts whole turns, as its fork cuts them ([`super::fork::turn_start`]): an
//! assistant message's id reverts from its turn's user message, and a `partID` is
//! accepted but does not cut a message in two. OpenCode keeps reverted messages in its
//! history for the client to hide; Spool's history no longer lists them. As in
//! OpenCode, unrevert without a pending revert answers the session unchanged.

use super::fork::turn_start;
use super::info;
use crate::dialect::opencode::wire::SessionInfo;
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::http::responses::OpenCodeErrors;
use axum::Json;
use axum::body::Bytes;
use serde::Deserialize;
use spool_engine::EngineError;
use spool_protocol::SessionId;
use utoipa::ToSchema;

#[derive(Deserialize, ToSchema)]
// Named apart from the native route's `RevertBody`: one name in the document holds one schema.
#[schema(as = opencode::RevertBody)]
pub(super) struct RevertBody {
    /// Revert from this message on (an id `GET /session/:id/message` gave); an assistant
    /// message's id reverts from its turn's user message.
    #[serde(rename = "messageID")]
    message_id: String,
    /// OpenCode's revert from one part of the message; Spool reverts the whole turn.
    #[serde(rename = "partID")]
    // Declared for the document (the SDK sends it); never read, as said above.
    #[allow(dead_code)]
    part_id: Option<String>,
}

impl RevertBody {
    pub(super) fn read(bytes: &[u8]) -> Result<RevertBody, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
    }
}

/// Reverts the session from `messageID`'s turn on: the files go back to what they were
/// before it (a file changed since by someone else is left alone), and the turns leave
/// the history until unrevert. A 409 while a run is going.
#[utoipa::path(
    post,
    path = "/session/{id}/revert",
    params(("id" = SessionId, Path)),
    request_body = RevertBody,
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
pub(super) async fn revert(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
    bytes: Bytes,
) -> Result<Json<SessionInfo>, ApiError> {
    let body = RevertBody::read(&bytes)?;
    let from = turn_start(&engine, &user, &id, &body.message_id).await?;
    engine.reverts().revert(&user, &id, from).await?;
    let session = engine.sessions().get(&user, &id).await?.session;
    Ok(Json(info(&engine, &user, &session).await?))
}

/// Undoes the pending revert: the files the revert wrote go back to what they were just
/// before it (one changed since is left alone) and the reverted turns return. Without a
/// pending revert, the session as it is.
#[utoipa::path(
    post,
    path = "/session/{id}/unrevert",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = SessionInfo), OpenCodeErrors)
)]
pub(super) async fn unrevert(
    Acting { engine, user }: Acting,
    PathId(id): PathId<SessionId>,
) -> Result<Json<SessionInfo>, ApiError> {
    match engine.reverts().unrevert(&user, &id).await {
        Ok(_) | Err(EngineError::Conflict { code: "nothing_to_unrevert", .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let session = engine.sessions().get(&user, &id).await?.session;
    Ok(Json(info(&engine, &user, &session).await?))
}
