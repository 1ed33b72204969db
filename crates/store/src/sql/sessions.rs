//! Sessions: the conversations of a project.
//!
//! A session's permission rules are one JSON array column: they are always read and
//! written whole, and nothing queries inside them. Removing one rule ([`remove_rule`])
//! reads, checks and writes the list in one transaction that takes the write lock
//! first, so a rule added meanwhile by another writer is never lost.

use super::dialect::Pool;
use crate::error::{db_error, from_db_int, to_db_int};
use crate::rows;
use spool_engine::{LeaseFence, RuleRemoval, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{Guardrails, PermissionAction, ProjectId, Session, SessionId, UserId};
use sqlx::types::Json;

const COLUMNS: &str = "id, project_id, owner_id, title, title_set, archived, permissions, model, mode, read_index, created_at, updated_at";

/// The session and its `session.created` event, in one transaction.
pub(crate) async fn insert(pool: &Pool, session: &Session) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query(
        "INSERT INTO sessions (id, project_id, owner_id, title, title_set, archived, permissions, model, mode,
                               read_index, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(session.id.as_str())
    .bind(session.project_id.as_str())
    .bind(session.owner_id.as_str())
    .bind(&session.title)
    .bind(session.title_set)
    .bind(session.archived)
    .bind(Json(&session.permissions))
    .bind(session.model.as_deref())
    .bind(session.mode.as_str())
    .bind(session.read_index.map(|i| to_db_int(i, "read index")).transpose()?)
    .bind(session.created_at)
    .bind(session.updated_at)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    super::outbox::write_session_created(&mut tx, session).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(())
}

/// Most recently updated first. Ties on `updated_at` fall back to the id, newest first
/// like the primary order, so the list is stable between two reads.
pub(crate) async fn list(pool: &Pool, project: &ProjectId, archived: bool) -> Result<Vec<Session>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions WHERE project_id = $1 AND archived = $2 ORDER BY updated_at DESC, id DESC"
    );
    sqlx::query(&sql)
        .bind(project.as_str())
        .bind(archived)
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::session)
        .collect()
}

/// The owner's sessions with this archived flag, in every project (the per-user cap).
pub(crate) async fn count(pool: &Pool, owner: &UserId, archived: bool) -> Result<u64, StoreError> {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE owner_id = $1 AND archived = $2")
        .bind(owner.as_str())
        .bind(archived)
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    from_db_int(count, "session count")
}

pub(crate) async fn get(pool: &Pool, id: &SessionId) -> Result<Option<Session>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE id = $1");
    sqlx::query(&sql)
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::session)
        .transpose()
}

/// Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn update(pool: &Pool, fence: Option<&LeaseFence>, session: &Session) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    sqlx::query(
        "UPDATE sessions SET title = $1, title_set = $2, archived = $3, permissions = $4, model = $5, mode = $6,
                             read_index = $7, updated_at = $8
         WHERE id = $9",
    )
    .bind(&session.title)
    .bind(session.title_set)
    .bind(session.archived)
    .bind(Json(&session.permissions))
    .bind(session.model.as_deref())
    .bind(session.mode.as_str())
    .bind(session.read_index.map(|i| to_db_int(i, "read index")).transpose()?)
    .bind(session.updated_at)
    .bind(session.id.as_str())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

/// Messages, parts, runs, approvals, memory and the lease go by `ON DELETE CASCADE`.
pub(crate) async fn delete(pool: &Pool, id: &SessionId) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM sessions WHERE id = $1").bind(id.as_str()).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// Removes the rule at `index` if it is a rule for `tool` with `action` (see
/// `Sessions::remove_session_rule`).
///
/// The transaction writes before it reads: the no-op `UPDATE` takes the row's lock on
/// PostgreSQL (a concurrent writer waits for the commit) and the database's write lock
/// on SQLite (one writer at a time), so the list read next is the one the final write
/// replaces, and a rule another writer adds meanwhile lands after this commit, on top
/// of its result.
pub(crate) async fn remove_rule(
    pool: &Pool,
    id: &SessionId,
    index: usize,
    tool: &str,
    action: PermissionAction,
    updated_at: Millis,
) -> Result<RuleRemoval, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let locked = sqlx::query("UPDATE sessions SET updated_at = updated_at WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    if locked.rows_affected() == 0 {
        return Ok(RuleRemoval::NoSession);
    }
    let row = sqlx::query("SELECT permissions FROM sessions WHERE id = $1")
        .bind(id.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
    let mut rules = rows::permissions(&row)?;
    match rules.get(index) {
        Some(rule) if rule.tool == tool && rule.action == action => {}
        other => return Ok(RuleRemoval::Mismatch(other.cloned())),
    }
    rules.remove(index);
    sqlx::query("UPDATE sessions SET permissions = $1, updated_at = $2 WHERE id = $3")
        .bind(Json(&rules))
        .bind(updated_at)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok(RuleRemoval::Removed(rules))
}

/// The session's own guardrails; `None` when it has none (or does not exist).
pub(crate) async fn guardrails(pool: &Pool, id: &SessionId) -> Result<Option<Guardrails>, StoreError> {
    let Some(row) = sqlx::query("SELECT guardrails FROM sessions WHERE id = $1")
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
    else {
        return Ok(None);
    };
    rows::guardrails(&row)
}

pub(crate) async fn set_guardrails(
    pool: &Pool,
    id: &SessionId,
    guardrails: Option<&Guardrails>,
    updated_at: Millis,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE sessions SET guardrails = $1, updated_at = $2 WHERE id = $3")
        .bind(guardrails.map(Json))
        .bind(updated_at)
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}
