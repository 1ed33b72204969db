//! The records that keep auth on and let it be ended: the sticky auth flag, browser
//! login sessions (hashes only, like tokens) and the listen address of each node.
//! Running servers poll `ended_since` twice a second, so it reads only indexed time
//! columns and returns ids, nothing else.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows;
use spool_engine::{Listener, LoginSession, StoreError};
use spool_protocol::LoginId;
use spool_protocol::time::Millis;
use sqlx::Row;

pub(crate) async fn enabled(pool: &Pool) -> Result<bool, StoreError> {
    let row =
        sqlx::query("SELECT enabled FROM auth_settings WHERE id = 1").fetch_optional(pool).await.map_err(db_error)?;
    row.map_or(Ok(false), |r| r.try_get::<bool, _>("enabled").map_err(db_error))
}

pub(crate) async fn set_enabled(pool: &Pool, enabled: bool, at: Millis) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO auth_settings (id, enabled, updated_at) VALUES (1, $1, $2)
         ON CONFLICT (id) DO UPDATE SET enabled = excluded.enabled, updated_at = excluded.updated_at",
    )
    .bind(enabled)
    .bind(at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn insert_login(pool: &Pool, login: &LoginSession) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO login_sessions (id, token_id, user_id, hash, created_at, expires_at, ended_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(login.id.as_str())
    .bind(login.token_id.as_str())
    .bind(login.user_id.as_str())
    .bind(&login.hash)
    .bind(login.created_at)
    .bind(login.expires_at)
    .bind(login.ended_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn find_login(pool: &Pool, hash: &str, now: Millis) -> Result<Option<LoginSession>, StoreError> {
    let row = sqlx::query(
        "SELECT l.* FROM login_sessions l JOIN tokens t ON t.id = l.token_id
         WHERE l.hash = $1 AND l.ended_at IS NULL AND l.expires_at > $2 AND t.revoked_at IS NULL",
    )
    .bind(hash)
    .bind(now)
    .fetch_optional(pool)
    .await
    .map_err(db_error)?;
    row.as_ref().map(rows::login).transpose()
}

pub(crate) async fn end_login(pool: &Pool, id: &LoginId, at: Millis) -> Result<bool, StoreError> {
    let done = sqlx::query("UPDATE login_sessions SET ended_at = $1 WHERE id = $2 AND ended_at IS NULL")
        .bind(at)
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn ended_since(pool: &Pool, since: Millis, now: Millis) -> Result<Vec<String>, StoreError> {
    let found = sqlx::query(
        "SELECT id FROM tokens WHERE revoked_at > $1
         UNION ALL SELECT id FROM login_sessions WHERE ended_at > $1
         UNION ALL SELECT id FROM login_sessions WHERE expires_at > $1 AND expires_at <= $2",
    )
    .bind(since)
    .bind(now)
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    found.iter().map(|r| r.try_get::<String, _>("id").map_err(db_error)).collect()
}

pub(crate) async fn record_listener(pool: &Pool, listener: &Listener) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO listeners (node_id, addr, public, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id) DO UPDATE SET addr = excluded.addr, public = excluded.public,
         updated_at = excluded.updated_at",
    )
    .bind(&listener.node_id)
    .bind(&listener.addr)
    .bind(listener.public)
    .bind(listener.updated_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn remove_listener(pool: &Pool, node: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM listeners WHERE node_id = $1").bind(node).execute(pool).await.map_err(db_error)?;
    Ok(())
}

pub(crate) async fn listeners(pool: &Pool) -> Result<Vec<Listener>, StoreError> {
    let found = sqlx::query("SELECT * FROM listeners ORDER BY node_id").fetch_all(pool).await.map_err(db_error)?;
    found.iter().map(rows::listener).collect()
}
