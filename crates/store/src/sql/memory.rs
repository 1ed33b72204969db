//! Session memory: one JSON document per session (confirmed facts, compaction
//! summary), replaced whole by an upsert. Small and always read and written together,
//! so a document beats a table per field.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::StoreError;
use spool_protocol::time::now_ms;
use spool_protocol::{SessionId, SessionMemory, UserId};
use sqlx::types::Json;

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<SessionMemory, StoreError> {
    let row = sqlx::query("SELECT memory FROM session_memory WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    match row {
        None => Ok(SessionMemory::default()),
        Some(row) => serde_json::from_value(row.json("memory")?)
            .map_err(|e| StoreError::Backend(format!("stored memory is unreadable: {e}"))),
    }
}

pub(crate) async fn put(
    pool: &Pool,
    session: &SessionId,
    owner: &UserId,
    memory: &SessionMemory,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO session_memory (session_id, owner_id, memory, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id) DO UPDATE SET memory = excluded.memory, updated_at = excluded.updated_at",
    )
    .bind(session.as_str())
    .bind(owner.as_str())
    .bind(Json(memory))
    .bind(now_ms())
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}
