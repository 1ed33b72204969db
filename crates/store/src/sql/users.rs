//! Users: a name and the id every other record's `owner_id` points at.

use super::dialect::Pool;
use crate::error::{db_error, parse_id};
use spool_engine::StoreError;
use spool_protocol::UserId;
use spool_protocol::time::now_ms;

/// Returns the id for `name`, creating the user on first use. Insert-or-ignore then
/// read: users are never deleted, so the row the insert conflicted with is there for
/// the read, and two first requests for one name agree on one id without a transaction.
pub(crate) async fn ensure(pool: &Pool, name: &str) -> Result<UserId, StoreError> {
    sqlx::query("INSERT INTO users (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
        .bind(UserId::new().as_str())
        .bind(name)
        .bind(now_ms())
        .execute(pool)
        .await
        .map_err(db_error)?;
    let id: String = sqlx::query_scalar("SELECT id FROM users WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    parse_id(&id)
}

/// The id of the user named `name`, if there is one.
pub(crate) async fn id(pool: &Pool, name: &str) -> Result<Option<UserId>, StoreError> {
    let id: Option<String> = sqlx::query_scalar("SELECT id FROM users WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    id.as_deref().map(parse_id).transpose()
}

/// The name of user `id`, if there is one.
pub(crate) async fn name(pool: &Pool, id: &UserId) -> Result<Option<String>, StoreError> {
    sqlx::query_scalar("SELECT name FROM users WHERE id = $1")
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)
}
