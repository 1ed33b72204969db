//! Streaming drafts: the assistant message a run is producing, one row per session,
//! rewritten whole at each checkpoint (the run coalesces them; the store just keeps the
//! last). Kept apart from `messages` so history, counts and checkpoints never see a
//! message that is still being written.

use super::dialect::Pool;
use crate::error::{db_error, to_db_int};
use crate::rows;
use spool_engine::{Draft, StoreError};
use spool_protocol::SessionId;
use spool_protocol::time::now_ms;
use sqlx::types::Json;

pub(crate) async fn put(pool: &Pool, draft: &Draft) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO message_drafts (session_id, run_id, owner_id, message_id, idx, message, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, message_id = excluded.message_id,
             idx = excluded.idx, message = excluded.message, updated_at = excluded.updated_at",
    )
    .bind(draft.session_id.as_str())
    .bind(draft.run_id.as_str())
    .bind(draft.owner_id.as_str())
    .bind(draft.message.id.as_str())
    .bind(to_db_int(draft.message.index, "message index")?)
    .bind(Json(&draft.message.message))
    .bind(now_ms())
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn delete(pool: &Pool, session: &SessionId) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM message_drafts WHERE session_id = $1")
        .bind(session.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Drafts whose run is neither running nor waiting for an approval.
pub(crate) async fn orphaned(pool: &Pool) -> Result<Vec<Draft>, StoreError> {
    sqlx::query(
        "SELECT d.session_id, d.run_id, d.owner_id, d.message_id, d.idx, d.message
         FROM message_drafts AS d JOIN runs AS r ON r.id = d.run_id
         WHERE r.status NOT IN ('running', 'interrupted')",
    )
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::draft)
    .collect()
}
