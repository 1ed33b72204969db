//! Idempotency keys: one row per `(scope, key)`, claimed before the work and
//! completed with its answer after it. A row without an answer is a claim whose
//! request is still working. The answer is opaque here: the engine's to write and read.
//!
//! The claim is the insert itself (`ON CONFLICT DO NOTHING`): of any number of
//! concurrent requests with one key, on any nodes, exactly one inserts the row. A loser
//! reads the row in a second statement, which sees the winner's commit (SQLite's
//! single writer has finished; PostgreSQL's READ COMMITTED reads what is committed).
//! No transaction spans the two, so if the winner released its claim in between the
//! row is gone, and the loser simply tries to claim again.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows;
use spool_engine::{IdempotencyClaim, StoreError};
use spool_protocol::time::Millis;

/// Claim attempts before giving up; only a key released again and again between a
/// conflict and its read needs more than one.
const CLAIM_ATTEMPTS: usize = 3;

pub(crate) async fn claim(pool: &Pool, scope: &str, key: &str, now: Millis) -> Result<IdempotencyClaim, StoreError> {
    for _ in 0..CLAIM_ATTEMPTS {
        let done = sqlx::query(
            "INSERT INTO idempotency (scope, key, answer, created_at)
             VALUES ($1, $2, NULL, $3)
             ON CONFLICT (scope, key) DO NOTHING",
        )
        .bind(scope)
        .bind(key)
        .bind(now)
        .execute(pool)
        .await
        .map_err(db_error)?;
        if done.rows_affected() > 0 {
            return Ok(IdempotencyClaim::Claimed);
        }
        let row = sqlx::query("SELECT answer FROM idempotency WHERE scope = $1 AND key = $2")
            .bind(scope)
            .bind(key)
            .fetch_optional(pool)
            .await
            .map_err(db_error)?;
        if let Some(row) = row {
            return rows::idempotency_state(&row);
        }
    }
    Err(StoreError::Backend(format!("idempotency key {scope}/{key} keeps vanishing between claim and read")))
}

/// Stores the answer of a claim that has none yet. An answer is written once: a key
/// that is not claimed (never, or released) or already completed is a `Conflict`,
/// because overwriting would let two repeats get different answers. The `IS NULL`
/// condition is checked by the one writer at a time (SQLite) or re-checked after
/// waiting on a concurrent writer (PostgreSQL).
pub(crate) async fn complete(pool: &Pool, scope: &str, key: &str, answer: &str) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE idempotency SET answer = $1
         WHERE scope = $2 AND key = $3 AND answer IS NULL",
    )
    .bind(answer)
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
pub(crate) async fn release(pool: &Pool, scope: &str, key: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM idempotency WHERE scope = $1 AND key = $2 AND answer IS NULL")
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
pub(crate) async fn release_open(pool: &Pool, made_before: Millis) -> Result<Vec<(String, String)>, StoreError> {
    let released: Vec<(String, String)> =
        sqlx::query_as("DELETE FROM idempotency WHERE answer IS NULL AND created_at < $1 RETURNING scope, key")
            .bind(made_before)
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
    Ok(released)
}
