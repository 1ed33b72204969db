//! Users: a name and the id every other record's `owner_id` points at.

use crate::error::{db_error, parse_id};
use spool_engine::StoreError;
use spool_protocol::UserId;
use spool_protocol::time::now_ms;
use sqlx::SqlitePool;

/// Returns the id for `name`, creating the user on first use. Insert-or-ignore then
/// read, in one transaction, so two first requests for the same name agree on one id.
pub(crate) async fn ensure(pool: &SqlitePool, name: &str) -> Result<UserId, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query("INSERT INTO users (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING")
        .bind(UserId::new().as_str())
        .bind(name)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let id: String = sqlx::query_scalar("SELECT id FROM users WHERE name = ?")
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    parse_id(&id)
}
