//! Attachment rows (the engine's `Attachments`): who holds which blob, in which session.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::StoreError;
use spool_engine::store::Attachment;
use spool_protocol::time::Millis;
use spool_protocol::{AttachmentId, SessionId, UserId};

const COLUMNS: &str = "id, owner_id, session_id, sha256, size, media_type, name, created_at";

pub(crate) async fn insert(pool: &Pool, a: &Attachment) -> Result<(), StoreError> {
    let size = i64::try_from(a.size).map_err(|_| StoreError::Backend(format!("{} bytes do not fit", a.size)))?;
    sqlx::query(
        "INSERT INTO attachments (id, owner_id, session_id, sha256, size, media_type, name, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(a.id.as_str())
    .bind(a.owner_id.as_str())
    .bind(a.session_id.as_ref().map(SessionId::as_str))
    .bind(&a.sha256)
    .bind(size)
    .bind(&a.media_type)
    .bind(&a.name)
    .bind(a.created_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn get(pool: &Pool, id: &AttachmentId) -> Result<Option<Attachment>, StoreError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM attachments WHERE id = $1"))
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    row.as_ref().map(from_row).transpose()
}

/// One statement, so two prompts racing for the same upload bind it once.
pub(crate) async fn bind(pool: &Pool, id: &AttachmentId, session: &SessionId) -> Result<bool, StoreError> {
    let done = sqlx::query("UPDATE attachments SET session_id = $2 WHERE id = $1 AND session_id IS NULL")
        .bind(id.as_str())
        .bind(session.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn delete(pool: &Pool, id: &AttachmentId) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM attachments WHERE id = $1").bind(id.as_str()).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// Deletes an upload no prompt has used; one statement, so a prompt binding it at the
/// same moment either binds it first (nothing deleted) or finds it gone.
pub(crate) async fn delete_unbound(pool: &Pool, id: &AttachmentId) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM attachments WHERE id = $1 AND session_id IS NULL")
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// Deletes the uploads never sent that were made before `before`; the SHA-256 of each
/// (the blobs that may now be unused).
pub(crate) async fn delete_unbound_before(pool: &Pool, before: Millis) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar("DELETE FROM attachments WHERE session_id IS NULL AND created_at < $1 RETURNING sha256")
        .bind(before)
        .fetch_all(pool)
        .await
        .map_err(db_error)
}

pub(crate) async fn bytes_of(pool: &Pool, owner: &UserId) -> Result<u64, StoreError> {
    let total: Option<i64> =
        sqlx::query_scalar("SELECT CAST(SUM(size) AS BIGINT) FROM attachments WHERE owner_id = $1")
            .bind(owner.as_str())
            .fetch_one(pool)
            .await
            .map_err(db_error)?;
    Ok(total.map_or(0, |t| u64::try_from(t).unwrap_or(0)))
}

pub(crate) async fn shas_of_session(pool: &Pool, session: &SessionId) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar("SELECT DISTINCT sha256 FROM attachments WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_all(pool)
        .await
        .map_err(db_error)
}

pub(crate) async fn blob_in_use(pool: &Pool, sha256: &str) -> Result<bool, StoreError> {
    let found: Option<String> = sqlx::query_scalar("SELECT id FROM attachments WHERE sha256 = $1 LIMIT 1")
        .bind(sha256)
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    Ok(found.is_some())
}

fn from_row<R: Columns>(row: &R) -> Result<Attachment, StoreError> {
    let bad = |what: &str| StoreError::Backend(format!("a stored attachment's {what} does not parse"));
    Ok(Attachment {
        id: row.text("id")?.parse().map_err(|_| bad("id"))?,
        owner_id: row.text("owner_id")?.parse().map_err(|_| bad("owner id"))?,
        session_id: row.text_opt("session_id")?.map(|s| s.parse()).transpose().map_err(|_| bad("session id"))?,
        sha256: row.text("sha256")?,
        size: u64::try_from(row.int("size")?).map_err(|_| bad("size"))?,
        media_type: row.text("media_type")?,
        name: row.text("name")?,
        created_at: row.int("created_at")?,
    })
}
