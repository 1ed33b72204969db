//! A session's choices about tool sources (MCP servers turned on or off for it): one
//! row per source, set by an upsert, so two choices made at once about two servers
//! both stay. Read at the start of every model turn that has sources to ask.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::StoreError;
use spool_protocol::time::now_ms;
use spool_protocol::{SessionId, UserId};
use std::collections::BTreeMap;

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<BTreeMap<String, bool>, StoreError> {
    let rows = sqlx::query("SELECT source, enabled FROM session_tool_sources WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_all(pool)
        .await
        .map_err(db_error)?;
    rows.iter().map(|row| Ok((row.text("source")?, row.flag("enabled")?))).collect()
}

pub(crate) async fn set(
    pool: &Pool,
    session: &SessionId,
    owner: &UserId,
    source: &str,
    enabled: bool,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO session_tool_sources (session_id, source, owner_id, enabled, updated_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (session_id, source) DO UPDATE SET enabled = excluded.enabled, updated_at = excluded.updated_at",
    )
    .bind(session.as_str())
    .bind(source)
    .bind(owner.as_str())
    .bind(enabled)
    .bind(now_ms())
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}
