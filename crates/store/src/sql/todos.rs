//! A session's todo list: one JSON array per session (the `todo_write` tool writes the
//! whole list each time), replaced by an upsert. Read once when a session is loaded.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::{LeaseFence, StoreError};
use spool_protocol::hub::Todo;
use spool_protocol::time::now_ms;
use spool_protocol::{SessionId, UserId};
use sqlx::types::Json;

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<Vec<Todo>, StoreError> {
    let row = sqlx::query("SELECT todos FROM session_todos WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    match row {
        None => Ok(Vec::new()),
        Some(row) => serde_json::from_value(row.json("todos")?)
            .map_err(|e| StoreError::Backend(format!("stored todo list is unreadable: {e}"))),
    }
}

/// Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn put(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    session: &SessionId,
    owner: &UserId,
    todos: &[Todo],
) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    sqlx::query(
        "INSERT INTO session_todos (session_id, owner_id, todos, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id) DO UPDATE SET todos = excluded.todos, updated_at = excluded.updated_at",
    )
    .bind(session.as_str())
    .bind(owner.as_str())
    .bind(Json(todos))
    .bind(now_ms())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}
