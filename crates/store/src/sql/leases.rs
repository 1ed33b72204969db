//! Session leases: one row per session naming the node that runs it, until when, and
//! the epoch of that taking — the row that keeps two nodes from running one session,
//! and the fence every write a run makes is held to.
//!
//! Taking a lease is one upsert whose `DO UPDATE … WHERE` only fires when the row is
//! already ours or has expired, so the statement itself decides between racing nodes
//! and the row that comes back (`RETURNING`) says who won, with its epoch. SQLite runs
//! one writer at a time; PostgreSQL guarantees an `ON CONFLICT DO UPDATE` either
//! inserts or locks and re-checks the existing row, even under concurrency.
//!
//! The epoch is drawn at random by the taker (63 bits, from a fresh ULID's random
//! part) and kept while the same node extends its own lease; a new holder, or a taking
//! after the lease was given up (the row deleted), draws a new one. It is only ever
//! compared for equality, so it needs no counter that survives the row's deletion.
//!
//! # Fenced writes
//!
//! A write held to a fence ([`begin`]) is a transaction whose first statement is
//! [`dialect::HOLD_LEASE`](super::dialect::HOLD_LEASE): it finds the lease row with the
//! fence's node and epoch and locks it until the transaction ends, or finds nothing,
//! and then the write fails `Fenced` with nothing written. A takeover (`acquire` on an
//! expired lease) or a release changes that row, so it waits for a fenced write in
//! flight to commit, and a fenced write that comes after it finds the row changed: of
//! the two, the database orders one first, and a node's write never lands after the
//! node that took its lease over settled the run.

use super::dialect::{self, Db, Pool};
use crate::error::db_error;
use crate::rows;
use spool_engine::{Lease, LeaseFence, StoreError};
use spool_protocol::SessionId;
use spool_protocol::time::Millis;
use sqlx::Transaction;

const COLUMNS: &str = "session_id, node_id, expires_at, epoch";

/// A new epoch: 63 random bits (positive, as both databases' integers are signed).
fn new_epoch() -> i64 {
    let random = ulid::Ulid::new().random() as u64;
    (random >> 1) as i64
}

pub(crate) async fn acquire(
    pool: &Pool,
    session: &SessionId,
    node: &str,
    now: Millis,
    ttl: Millis,
) -> Result<Option<LeaseFence>, StoreError> {
    // The epoch stays while the same node extends its own lease (a run's own lease
    // taken again by a request on its node must not fence the run out).
    let epoch: Option<i64> = sqlx::query_scalar(
        "INSERT INTO session_leases (session_id, node_id, expires_at, epoch) VALUES ($1, $2, $3, $5)
         ON CONFLICT (session_id) DO UPDATE SET node_id = excluded.node_id, expires_at = excluded.expires_at,
             epoch = CASE WHEN session_leases.node_id = excluded.node_id THEN session_leases.epoch
                          ELSE excluded.epoch END
         WHERE session_leases.node_id = excluded.node_id OR session_leases.expires_at <= $4
         RETURNING epoch",
    )
    .bind(session.as_str())
    .bind(node)
    .bind(now.saturating_add(ttl))
    .bind(now)
    .bind(new_epoch())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?;
    Ok(epoch.map(|epoch| LeaseFence { session_id: session.clone(), node_id: node.to_owned(), epoch }))
}

/// Only a live lease is renewed, and only by the taking that holds it: once it has
/// expired another node may already have failed this node's runs, so the holder must
/// learn it lost the session.
pub(crate) async fn renew(pool: &Pool, fence: &LeaseFence, now: Millis, ttl: Millis) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE session_leases SET expires_at = $1
         WHERE session_id = $2 AND node_id = $3 AND epoch = $4 AND expires_at > $5",
    )
    .bind(now.saturating_add(ttl))
    .bind(fence.session_id.as_str())
    .bind(&fence.node_id)
    .bind(fence.epoch)
    .bind(now)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// A transaction for a write held to `fence` (see the module doc), or a plain one
/// without a fence: the caller writes in it and commits it.
pub(crate) async fn begin(pool: &Pool, fence: Option<&LeaseFence>) -> Result<Transaction<'static, Db>, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    if let Some(fence) = fence {
        hold(&mut tx, fence).await?;
    }
    Ok(tx)
}

/// Checks, first thing in `tx`, that the session's lease is still `fence`'s taking,
/// and keeps the row locked until `tx` ends; `Fenced` (and `tx` is dropped, rolling
/// back) when it is not.
pub(crate) async fn hold(tx: &mut Transaction<'_, Db>, fence: &LeaseFence) -> Result<(), StoreError> {
    let held: Option<i64> = sqlx::query_scalar(dialect::HOLD_LEASE)
        .bind(fence.session_id.as_str())
        .bind(&fence.node_id)
        .bind(fence.epoch)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
    match held {
        Some(_) => Ok(()),
        None => Err(StoreError::Fenced(format!(
            "node {} no longer holds the lease of session {} (epoch {})",
            fence.node_id, fence.session_id, fence.epoch
        ))),
    }
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
    sqlx::query(&format!("SELECT {COLUMNS} FROM session_leases WHERE session_id = $1"))
        .bind(session.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::lease)
        .transpose()
}

pub(crate) async fn expired(pool: &Pool, now: Millis) -> Result<Vec<Lease>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM session_leases WHERE expires_at <= $1 ORDER BY expires_at, session_id"))
        .bind(now)
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::lease)
        .collect()
}
