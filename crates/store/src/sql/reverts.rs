//! A session's pending revert (the engine's `SessionReverts`): one row per session,
//! replaced by a new revert and deleted by unrevert or once stale.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::StoreError;
use spool_engine::store::SessionRevert;
use spool_protocol::{ProjectId, SessionId};
use sqlx::types::Json;

pub(crate) async fn put(pool: &Pool, r: &SessionRevert) -> Result<(), StoreError> {
    let index = i64::try_from(r.message_index)
        .map_err(|_| StoreError::Backend(format!("{} does not fit a stored integer", r.message_index)))?;
    sqlx::query(
        "INSERT INTO session_reverts (session_id, owner_id, message_index, ordinal, state, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (session_id) DO UPDATE SET owner_id = $2, message_index = $3, ordinal = $4, state = $5,
             created_at = $6",
    )
    .bind(r.session_id.as_str())
    .bind(r.owner_id.as_str())
    .bind(index)
    .bind(r.ordinal.map(i64::from))
    .bind(Json(&r.state))
    .bind(r.created_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<Option<SessionRevert>, StoreError> {
    let row = sqlx::query(
        "SELECT session_id, owner_id, message_index, ordinal, state, created_at
         FROM session_reverts WHERE session_id = $1",
    )
    .bind(session.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?;
    row.as_ref().map(from_row).transpose()
}

/// The project's pending reverts whose session holds no message at their index (the
/// engine's rule for a revert that a prompt has not made final), in one query.
pub(crate) async fn pending_in(pool: &Pool, project: &ProjectId) -> Result<Vec<SessionRevert>, StoreError> {
    let rows = sqlx::query(
        "SELECT r.session_id, r.owner_id, r.message_index, r.ordinal, r.state, r.created_at
         FROM session_reverts r JOIN sessions s ON s.id = r.session_id
         WHERE s.project_id = $1
           AND r.message_index >= (SELECT COUNT(*) FROM messages m WHERE m.session_id = r.session_id)",
    )
    .bind(project.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter().map(from_row).collect()
}

fn from_row<R: Columns>(row: &R) -> Result<SessionRevert, StoreError> {
    let bad = |what: &str| StoreError::Backend(format!("a stored revert's {what} does not parse"));
    Ok(SessionRevert {
        session_id: row.text("session_id")?.parse().map_err(|_| bad("session id"))?,
        owner_id: row.text("owner_id")?.parse().map_err(|_| bad("owner id"))?,
        message_index: u64::try_from(row.int("message_index")?).map_err(|_| bad("message index"))?,
        ordinal: row.int_opt("ordinal")?.map(u32::try_from).transpose().map_err(|_| bad("ordinal"))?,
        state: row.json("state")?,
        created_at: row.int("created_at")?,
    })
}

pub(crate) async fn delete(pool: &Pool, session: &SessionId) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM session_reverts WHERE session_id = $1")
        .bind(session.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}
