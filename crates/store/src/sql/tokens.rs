//! API tokens: hashes only, looked up by hash on every authenticated request (the
//! UNIQUE index on `hash` serves that), revoked by timestamp rather than deleted so a
//! listing shows what existed.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows;
use spool_engine::StoreError;
use spool_protocol::time::Millis;
use spool_protocol::{ApiToken, TokenId};

const COLUMNS: &str = "t.id, t.user_id, u.name AS user_name, t.hash, t.created_at, t.revoked_at";

pub(crate) async fn insert(pool: &Pool, token: &ApiToken) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO tokens (id, user_id, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(token.id.as_str())
        .bind(token.user_id.as_str())
        .bind(&token.hash)
        .bind(token.created_at)
        .bind(token.revoked_at)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn find(pool: &Pool, hash: &str) -> Result<Option<ApiToken>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1 AND t.revoked_at IS NULL"
    );
    let row = sqlx::query(&sql).bind(hash).fetch_optional(pool).await.map_err(db_error)?;
    row.as_ref().map(rows::token).transpose()
}

pub(crate) async fn list(pool: &Pool) -> Result<Vec<ApiToken>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id ORDER BY t.created_at, t.id");
    let found = sqlx::query(&sql).fetch_all(pool).await.map_err(db_error)?;
    found.iter().map(rows::token).collect()
}

pub(crate) async fn revoke(pool: &Pool, id: &TokenId, at: Millis) -> Result<bool, StoreError> {
    let done = sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
        .bind(at)
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() == 1)
}
