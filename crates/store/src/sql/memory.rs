//! Session memory: one JSON document per session (confirmed facts, compaction
//! summary), replaced whole by an upsert. Small and always read and written together,
//! so a document beats a table per field.

use super::dialect::{Db, Pool};
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::{LeaseFence, StoreError};
use spool_protocol::time::now_ms;
use spool_protocol::{SessionId, SessionMemory, UserId};
use sqlx::types::Json;

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<SessionMemory, StoreError> {
    Ok(get_with(pool, session).await?.unwrap_or_default())
}

/// The session's memory as `exec` (a pool or a transaction) sees it; `None` when it has
/// none.
pub(crate) async fn get_with<'e>(
    exec: impl sqlx::Executor<'e, Database = Db>,
    session: &SessionId,
) -> Result<Option<SessionMemory>, StoreError> {
    let row = sqlx::query("SELECT memory FROM session_memory WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(exec)
        .await
        .map_err(db_error)?;
    row.map(|row| {
        serde_json::from_value(row.json("memory")?)
            .map_err(|e| StoreError::Backend(format!("stored memory is unreadable: {e}")))
    })
    .transpose()
}

/// Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn put(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    session: &SessionId,
    owner: &UserId,
    memory: &SessionMemory,
) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    put_with(&mut *tx, session, owner.as_str(), memory).await?;
    tx.commit().await.map_err(db_error)
}

/// Replaces the session's memory through `exec` (a pool or a transaction).
pub(crate) async fn put_with<'e>(
    exec: impl sqlx::Executor<'e, Database = Db>,
    session: &SessionId,
    owner: &str,
    memory: &SessionMemory,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO session_memory (session_id, owner_id, memory, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id) DO UPDATE SET memory = excluded.memory, updated_at = excluded.updated_at",
    )
    .bind(session.as_str())
    .bind(owner)
    .bind(Json(memory))
    .bind(now_ms())
    .execute(exec)
    .await
    .map_err(db_error)?;
    Ok(())
}
