//! Web Push (issue 41): browsers' push subscriptions and the secrets every node shares.
//!
//! `server_keys` is written the way the cluster key is: `INSERT … ON CONFLICT DO
//! NOTHING`, then a read, so nodes starting together all keep the first writer's secret.
//! A subscription is keyed by its endpoint (UNIQUE): a browser subscribing again, or
//! after another login on the same browser, updates its row and keeps the row's id.

use super::dialect::Pool;
use crate::error::{db_error, from_db_int, parse_id};
use crate::rows::Columns;
use spool_engine::StoreError;
use spool_engine::store::PushSubscription;
use spool_protocol::UserId;
use spool_protocol::time::Millis;

const COLUMNS: &str = "id, owner_id, login_id, endpoint, p256dh, auth, user_agent, created_at, last_ok_at, failures";

pub(crate) async fn server_key(pool: &Pool, name: &str, fresh: &[u8], now: Millis) -> Result<Vec<u8>, StoreError> {
    sqlx::query("INSERT INTO server_keys (name, secret, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
        .bind(name)
        .bind(fresh)
        .bind(now)
        .execute(pool)
        .await
        .map_err(db_error)?;
    let (secret,): (Vec<u8>,) = sqlx::query_as("SELECT secret FROM server_keys WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    Ok(secret)
}

pub(crate) async fn delete_server_key(pool: &Pool, name: &str) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM server_keys WHERE name = $1").bind(name).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn save(pool: &Pool, s: &PushSubscription) -> Result<PushSubscription, StoreError> {
    let sql = format!(
        "INSERT INTO push_subscriptions (id, owner_id, login_id, endpoint, p256dh, auth, user_agent, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (endpoint) DO UPDATE SET owner_id = excluded.owner_id, login_id = excluded.login_id,
             p256dh = excluded.p256dh, auth = excluded.auth, user_agent = excluded.user_agent, failures = 0
         RETURNING {COLUMNS}"
    );
    let row = sqlx::query(&sql)
        .bind(&s.id)
        .bind(s.owner_id.as_str())
        .bind(&s.login_id)
        .bind(&s.endpoint)
        .bind(&s.p256dh)
        .bind(&s.auth)
        .bind(&s.user_agent)
        .bind(s.created_at)
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    subscription(&row)
}

pub(crate) async fn get(pool: &Pool, id: &str) -> Result<Option<PushSubscription>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM push_subscriptions WHERE id = $1");
    let row = sqlx::query(&sql).bind(id).fetch_optional(pool).await.map_err(db_error)?;
    row.as_ref().map(subscription).transpose()
}

pub(crate) async fn list(pool: &Pool, owner: &UserId) -> Result<Vec<PushSubscription>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM push_subscriptions WHERE owner_id = $1 ORDER BY created_at, id");
    let found = sqlx::query(&sql).bind(owner.as_str()).fetch_all(pool).await.map_err(db_error)?;
    found.iter().map(subscription).collect()
}

pub(crate) async fn delete(pool: &Pool, id: &str) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM push_subscriptions WHERE id = $1").bind(id).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn delete_of(pool: &Pool, login_id: &str) -> Result<u64, StoreError> {
    // A token's revocation ends its login sessions too: their subscriptions go with it.
    let done = sqlx::query(
        "DELETE FROM push_subscriptions
         WHERE login_id = $1 OR login_id IN (SELECT id FROM login_sessions WHERE token_id = $1)",
    )
    .bind(login_id)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected())
}

pub(crate) async fn record_attempt(pool: &Pool, id: &str, ok: bool, at: Millis) -> Result<(), StoreError> {
    let query = match ok {
        true => {
            sqlx::query("UPDATE push_subscriptions SET last_ok_at = $2, failures = 0 WHERE id = $1").bind(id).bind(at)
        }
        false => sqlx::query("UPDATE push_subscriptions SET failures = failures + 1 WHERE id = $1").bind(id),
    };
    query.execute(pool).await.map_err(db_error)?;
    Ok(())
}

fn subscription(row: &impl Columns) -> Result<PushSubscription, StoreError> {
    Ok(PushSubscription {
        id: row.text("id")?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        login_id: row.text_opt("login_id")?,
        endpoint: row.text("endpoint")?,
        p256dh: row.text("p256dh")?,
        auth: row.text("auth")?,
        user_agent: row.text_opt("user_agent")?,
        created_at: row.int("created_at")?,
        last_ok_at: row.int_opt("last_ok_at")?,
        failures: from_db_int(row.int("failures")?, "failures")? as u32,
    })
}
