//! Idempotency keys: one row per `(scope, key)`, claimed before the work and
//! completed with the response after it.
//!
//! The claim is the insert itself (`ON CONFLICT DO NOTHING`), so of any number of
//! concurrent requests with one key exactly one inserts the row; the rest read it in
//! the same transaction, where it cannot have been released in between. A row without
//! a response is a claim whose request is still working.

use crate::error::db_error;
use crate::rows;
use spool_engine::{IdempotencyClaim, StoreError, StoredResponse};
use spool_protocol::time::Millis;
use sqlx::SqlitePool;

pub(crate) async fn claim(
    pool: &SqlitePool,
    scope: &str,
    key: &str,
    now: Millis,
) -> Result<IdempotencyClaim, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let done = sqlx::query(
        "INSERT INTO idempotency (scope, key, response_status, response_body, created_at) VALUES (?, ?, NULL, NULL, ?)
         ON CONFLICT (scope, key) DO NOTHING",
    )
    .bind(scope)
    .bind(key)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    if done.rows_affected() > 0 {
        tx.commit().await.map_err(db_error)?;
        return Ok(IdempotencyClaim::Claimed);
    }
    let row = sqlx::query("SELECT response_status, response_body FROM idempotency WHERE scope = ? AND key = ?")
        .bind(scope)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    // The insert conflicted on this very key inside this transaction, so the row is there.
    let row = row.ok_or_else(|| {
        StoreError::Backend(format!("idempotency key {scope}/{key} conflicted but cannot be read back"))
    })?;
    rows::idempotency_state(&row, scope, key)
}

/// Stores the response of a claim that has none yet. A response is written once: a
/// key that is not claimed (never, or released) or already completed is a
/// `Conflict`, because overwriting would let two repeats see different bytes.
pub(crate) async fn complete(
    pool: &SqlitePool,
    scope: &str,
    key: &str,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE idempotency SET response_status = ?, response_body = ?
         WHERE scope = ? AND key = ? AND response_status IS NULL",
    )
    .bind(i64::from(response.status))
    .bind(&response.body)
    .bind(scope)
    .bind(key)
    .execute(pool)
    .await
    .map_err(db_error)?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "idempotency key {scope}/{key} is not claimed or already has a response"
        )));
    }
    Ok(())
}

/// Deletes a claim that has no response; a completed key stays, so a late release
/// cannot make a finished request run twice.
pub(crate) async fn release(pool: &SqlitePool, scope: &str, key: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM idempotency WHERE scope = ? AND key = ? AND response_status IS NULL")
        .bind(scope)
        .bind(key)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Deletes every claim without a response made before `made_before` and returns
/// their keys: the requests that held them are gone (see the engine's start-up and
/// reaper), and a key left claimed would answer `request_in_progress` for ever.
pub(crate) async fn release_open(pool: &SqlitePool, made_before: Millis) -> Result<Vec<(String, String)>, StoreError> {
    let released: Vec<(String, String)> =
        sqlx::query_as("DELETE FROM idempotency WHERE response_status IS NULL AND created_at < ? RETURNING scope, key")
            .bind(made_before)
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
    Ok(released)
}
