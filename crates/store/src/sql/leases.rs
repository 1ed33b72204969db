//! Session leases: one row per session naming the node that runs it and until when,
//! the row that keeps two nodes from running one session.
//!
//! Taking a lease is one upsert whose `DO UPDATE … WHERE` only fires when the row is
//! already ours or has expired, so the statement itself decides between racing nodes
//! and the row count says who won. SQLite runs one writer at a time; PostgreSQL
//! guarantees an `ON CONFLICT DO UPDATE` either inserts or locks and re-checks the
//! existing row, even under concurrency.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows;
use spool_engine::{Lease, StoreError};
use spool_protocol::SessionId;
use spool_protocol::time::Millis;

pub(crate) async fn acquire(
    pool: &Pool,
    session: &SessionId,
    node: &str,
    now: Millis,
    ttl: Millis,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO session_leases (session_id, node_id, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO UPDATE SET node_id = excluded.node_id, expires_at = excluded.expires_at
         WHERE session_leases.node_id = excluded.node_id OR session_leases.expires_at <= $4",
    )
    .bind(session.as_str())
    .bind(node)
    .bind(now.saturating_add(ttl))
    .bind(now)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// Only a live lease is renewed: once it has expired another node may already have
/// failed this node's runs, so the holder must learn it lost the session.
pub(crate) async fn renew(
    pool: &Pool,
    session: &SessionId,
    node: &str,
    now: Millis,
    ttl: Millis,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE session_leases SET expires_at = $1 WHERE session_id = $2 AND node_id = $3 AND expires_at > $4",
    )
    .bind(now.saturating_add(ttl))
    .bind(session.as_str())
    .bind(node)
    .bind(now)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn release(pool: &Pool, session: &SessionId, node: &str) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM session_leases WHERE session_id = $1 AND node_id = $2")
        .bind(session.as_str())
        .bind(node)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn get(pool: &Pool, session: &SessionId) -> Result<Option<Lease>, StoreError> {
    sqlx::query("SELECT session_id, node_id, expires_at FROM session_leases WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::lease)
        .transpose()
}

pub(crate) async fn expired(pool: &Pool, now: Millis) -> Result<Vec<Lease>, StoreError> {
    sqlx::query(
        "SELECT session_id, node_id, expires_at FROM session_leases WHERE expires_at <= $1
         ORDER BY expires_at, session_id",
    )
    .bind(now)
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::lease)
    .collect()
}
