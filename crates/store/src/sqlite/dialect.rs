//! What the shared record modules (`src/sql/`) need from SQLite that PostgreSQL does
//! differently; everything else in their SQL means the same on both databases.

use crate::error::db_error;
use spool_engine::StoreError;
use spool_protocol::RunId;
use sqlx::types::Json;

/// The database and pool the shared modules are compiled against here.
pub(crate) type Db = sqlx::Sqlite;
pub(crate) type Pool = sqlx::SqlitePool;

/// Fails every running run but the ones in `$4` (error code `$1`, message `$2`, at `$3`).
/// SQLite has no array parameter, so the list comes as a JSON array (see [`run_ids`])
/// and `json_each` turns it into rows.
pub(crate) const FAIL_RUNNING: &str = "UPDATE runs SET status = 'failed', error_code = $1, error_message = $2,
                                                   updated_at = $3, ended_at = $3
                                        WHERE status = 'running' AND id NOT IN (SELECT value FROM json_each($4))";

/// The run ids [`FAIL_RUNNING`] keeps, as JSON text.
pub(crate) fn run_ids(ids: &[RunId]) -> Json<Vec<&str>> {
    Json(ids.iter().map(RunId::as_str).collect())
}

/// The text of a `parts` row of kind `text` (`data` is JSON text here).
pub(crate) const PART_TEXT: &str = "json_extract(p.data, '$.text')";

/// The size in bytes of a `queued_messages` row's text (SQLite's `LENGTH` of text
/// counts characters; of a blob, bytes).
pub(crate) const QUEUED_TEXT_BYTES: &str = "LENGTH(CAST(text AS BLOB))";

/// A connection whose statements stop at a deadline (see [`time_limited`]).
pub(crate) type TimeLimited = sqlx::pool::PoolConnection<Db>;

/// Virtual-machine steps between two looks at the clock: often enough to stop within
/// a fraction of a millisecond of the deadline, rarely enough to cost nothing.
const PROGRESS_STEPS: i32 = 1000;

/// A connection of `pool` on which a statement still running at `limit` from now is
/// interrupted (SQLite's progress handler returns "stop"; the statement fails with
/// `SQLITE_INTERRUPT`). Hand it back with [`end_time_limit`].
pub(crate) async fn time_limited(pool: &Pool, limit: std::time::Duration) -> Result<TimeLimited, StoreError> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let deadline = std::time::Instant::now() + limit;
    conn.lock_handle()
        .await
        .map_err(db_error)?
        .set_progress_handler(PROGRESS_STEPS, move || std::time::Instant::now() < deadline);
    Ok(conn)
}

/// Whether `err` is the time limit's cut: `SQLITE_INTERRUPT` (code 9).
pub(crate) fn cut_by_time_limit(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("9"))
}

/// Takes the deadline off the connection before it goes back to the pool; one whose
/// handler cannot be removed is closed instead, so no later statement meets it.
pub(crate) async fn end_time_limit(mut conn: TimeLimited) {
    let removed = match conn.lock_handle().await {
        Ok(mut handle) => {
            handle.remove_progress_handler();
            true
        }
        Err(_) => false,
    };
    if !removed {
        conn.close_on_drop();
    }
}
