//! Sessions: the conversations of a project.
//!
//! A session's permission rules are one JSON array column: they are always read and
//! written whole, and nothing queries inside them.

use crate::error::db_error;
use crate::rows;
use spool_engine::StoreError;
use spool_protocol::{PermissionRule, ProjectId, Session, SessionId};
use sqlx::SqlitePool;

pub(crate) async fn insert(pool: &SqlitePool, session: &Session) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO sessions (id, project_id, owner_id, title, title_set, archived, permissions, model, read_index, created_at,
                               updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(session.id.as_str())
    .bind(session.project_id.as_str())
    .bind(session.owner_id.as_str())
    .bind(&session.title)
    .bind(session.title_set)
    .bind(session.archived)
    .bind(encode_permissions(&session.permissions)?)
    .bind(session.model.as_deref())
    .bind(session.read_index.map(|i| i as i64))
    .bind(session.created_at)
    .bind(session.updated_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn list(pool: &SqlitePool, project: &ProjectId, archived: bool) -> Result<Vec<Session>, StoreError> {
    // Ties on updated_at fall back to the id, newest first like the primary order,
    // so the list is stable between two reads.
    sqlx::query(
        "SELECT id, project_id, owner_id, title, title_set, archived, permissions, model, read_index, created_at, updated_at
         FROM sessions
         WHERE project_id = ? AND archived = ? ORDER BY updated_at DESC, id DESC",
    )
    .bind(project.as_str())
    .bind(archived)
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::session)
    .collect()
}

pub(crate) async fn get(pool: &SqlitePool, id: &SessionId) -> Result<Option<Session>, StoreError> {
    sqlx::query(
        "SELECT id, project_id, owner_id, title, title_set, archived, permissions, model, read_index, created_at, updated_at
         FROM sessions
         WHERE id = ?",
    )
    .bind(id.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(rows::session)
    .transpose()
}

pub(crate) async fn update(pool: &SqlitePool, session: &Session) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE sessions SET title = ?, title_set = ?, archived = ?, permissions = ?, model = ?, read_index = ?, updated_at = ? WHERE id = ?",
    )
    .bind(&session.title)
    .bind(session.title_set)
    .bind(session.archived)
    .bind(encode_permissions(&session.permissions)?)
    .bind(session.model.as_deref())
    .bind(session.read_index.map(|i| i as i64))
    .bind(session.updated_at)
    .bind(session.id.as_str())
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Messages, their parts, runs and approvals go with the session by `ON DELETE CASCADE`.
pub(crate) async fn delete(pool: &SqlitePool, id: &SessionId) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM sessions WHERE id = ?").bind(id.as_str()).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

fn encode_permissions(rules: &[PermissionRule]) -> Result<String, StoreError> {
    serde_json::to_string(rules).map_err(|e| StoreError::Backend(format!("encoding permission rules: {e}")))
}
