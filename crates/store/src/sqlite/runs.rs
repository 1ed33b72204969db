//! Runs: one prompt's execution, unique per `(session_id, request_id)`.

use crate::error::{db_error, to_db_int};
use crate::rows;
use spool_engine::{RunInsert, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{ProjectId, Run, RunError, RunId, SessionId, Usage};
use sqlx::SqlitePool;

/// Inserts `run` unless its requestId is already used in the session, in which case
/// the existing run comes back and nothing is written. The insert itself decides
/// (`ON CONFLICT DO NOTHING`), so two concurrent retries cannot both create a run;
/// the read that follows is in the same transaction as the insert that saw the
/// conflicting row, so that row is still there.
pub(crate) async fn insert(pool: &SqlitePool, run: &Run) -> Result<RunInsert, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let done = sqlx::query(
        "INSERT INTO runs (id, session_id, owner_id, request_id, status, user_message_index, created_at,
                           updated_at, first_token_at, ended_at, usage_input, usage_output, usage, error_code,
                           error_message)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (session_id, request_id) DO NOTHING",
    )
    .bind(run.id.as_str())
    .bind(run.session_id.as_str())
    .bind(run.owner_id.as_str())
    .bind(&run.request_id)
    .bind(run.status.as_str())
    .bind(to_db_int(run.user_message_index, "user message index")?)
    .bind(run.created_at)
    .bind(run.updated_at)
    .bind(run.first_token_at)
    .bind(run.ended_at)
    .bind(to_db_int(run.usage.input, "input tokens")?)
    .bind(to_db_int(run.usage.output, "output tokens")?)
    .bind(encode_usage(&run.usage)?)
    .bind(run.error.as_ref().map(|e| e.code.as_str()))
    .bind(run.error.as_ref().map(|e| e.message.as_str()))
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    if done.rows_affected() > 0 {
        tx.commit().await.map_err(db_error)?;
        return Ok(RunInsert::Created);
    }
    let existing = find_by_request(&mut *tx, &run.session_id, &run.request_id).await?;
    tx.commit().await.map_err(db_error)?;
    match existing {
        Some(existing) => Ok(RunInsert::Existing(existing)),
        // The insert conflicted on this very pair inside this transaction, so the row
        // cannot have vanished; if it did, the database is not behaving as SQLite.
        None => {
            Err(StoreError::Backend(format!("run for request {} conflicted but cannot be read back", run.request_id)))
        }
    }
}

pub(crate) async fn find_by_request<'e, E>(
    executor: E,
    session: &SessionId,
    request_id: &str,
) -> Result<Option<Run>, StoreError>
where
    E: sqlx::SqliteExecutor<'e>,
{
    sqlx::query(
        "SELECT id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                first_token_at, ended_at, usage_input, usage_output, usage, error_code, error_message
         FROM runs WHERE session_id = ? AND request_id = ?",
    )
    .bind(session.as_str())
    .bind(request_id)
    .fetch_optional(executor)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(rows::run)
    .transpose()
}

pub(crate) async fn get(pool: &SqlitePool, id: &RunId) -> Result<Option<Run>, StoreError> {
    sqlx::query(
        "SELECT id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                first_token_at, ended_at, usage_input, usage_output, usage, error_code, error_message
         FROM runs WHERE id = ?",
    )
    .bind(id.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(rows::run)
    .transpose()
}

/// Generic over the executor so `interrupt_run` can write the run inside the
/// transaction that inserts its approval.
pub(crate) async fn update<'e, E>(executor: E, run: &Run) -> Result<(), StoreError>
where
    E: sqlx::SqliteExecutor<'e>,
{
    sqlx::query(
        "UPDATE runs SET status = ?, updated_at = ?, first_token_at = ?, ended_at = ?, usage_input = ?,
                         usage_output = ?, usage = ?, error_code = ?, error_message = ?
         WHERE id = ?",
    )
    .bind(run.status.as_str())
    .bind(run.updated_at)
    .bind(run.first_token_at)
    .bind(run.ended_at)
    .bind(to_db_int(run.usage.input, "input tokens")?)
    .bind(to_db_int(run.usage.output, "output tokens")?)
    .bind(encode_usage(&run.usage)?)
    .bind(run.error.as_ref().map(|e| e.code.as_str()))
    .bind(run.error.as_ref().map(|e| e.message.as_str()))
    .bind(run.id.as_str())
    .execute(executor)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The session's interrupted run. The engine keeps at most one per session; should
/// there ever be more, the newest is the one still worth resuming. The lookup uses
/// the `(session_id, request_id)` unique index, and a session has few runs.
/// The session's runs started at or after message `from_index`, in message order.
pub(crate) async fn since(pool: &SqlitePool, session: &SessionId, from_index: u64) -> Result<Vec<Run>, StoreError> {
    sqlx::query(
        "SELECT id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                first_token_at, ended_at, usage_input, usage_output, usage, error_code, error_message
         FROM runs WHERE session_id = ? AND user_message_index >= ? ORDER BY user_message_index, created_at",
    )
    .bind(session.as_str())
    .bind(to_db_int(from_index, "message index")?)
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::run)
    .collect()
}

/// Sessions of `project` with a run that ended after `after` (ms), latest ended first, at
/// most `limit`: what a reconnecting OpenCode client missed (`opencode/global.rs`).
pub(crate) async fn ended_after(
    pool: &SqlitePool,
    project: &ProjectId,
    after: Millis,
    limit: u32,
) -> Result<Vec<SessionId>, StoreError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT r.session_id FROM runs r JOIN sessions s ON s.id = r.session_id
         WHERE s.project_id = ? AND r.ended_at > ?
         GROUP BY r.session_id ORDER BY MAX(r.ended_at) DESC LIMIT ?",
    )
    .bind(project.as_str())
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.into_iter()
        .map(|(id,)| id.parse().map_err(|_| StoreError::Backend(format!("a stored session id does not parse: {id}"))))
        .collect()
}

pub(crate) async fn interrupted(pool: &SqlitePool, session: &SessionId) -> Result<Option<Run>, StoreError> {
    sqlx::query(
        "SELECT id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                first_token_at, ended_at, usage_input, usage_output, usage, error_code, error_message
         FROM runs WHERE session_id = ? AND status = 'interrupted' ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(session.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(rows::run)
    .transpose()
}

pub(crate) async fn fail_running(
    pool: &SqlitePool,
    error: &RunError,
    now: Millis,
    keep: &[RunId],
) -> Result<u64, StoreError> {
    let keep = serde_json::to_string(&keep.iter().map(RunId::as_str).collect::<Vec<_>>())
        .map_err(|e| StoreError::Backend(format!("cannot encode run ids: {e}")))?;
    let done = sqlx::query(
        "UPDATE runs SET status = 'failed', error_code = ?, error_message = ?, updated_at = ?, ended_at = ?
         WHERE status = 'running' AND id NOT IN (SELECT value FROM json_each(?))",
    )
    .bind(&error.code)
    .bind(&error.message)
    .bind(now)
    .bind(now)
    .bind(keep)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected())
}

fn encode_usage(usage: &Usage) -> Result<String, StoreError> {
    serde_json::to_string(usage).map_err(|e| StoreError::Backend(format!("cannot encode usage: {e}")))
}
