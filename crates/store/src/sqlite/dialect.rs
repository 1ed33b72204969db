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

/// Copies a session's messages from index `$2` on into branch `$3` (see `branches`),
/// each with its parts as a JSON array. `meta` is copied as the text it is, and `json()`
/// of a part's `data` is the same compact text it was written as.
pub(crate) const SHELVE_MESSAGES: &str = "INSERT INTO branch_messages
        (id, session_id, ordinal, owner_id, idx, role, meta, parts, created_at)
    SELECT m.id, m.session_id, $3, m.owner_id, m.idx, m.role, m.meta,
           (SELECT json_group_array(json_object('id', p.id, 'position', p.position, 'kind', p.kind,
                                                'data', json(p.data)) ORDER BY p.position)
            FROM parts AS p WHERE p.message_id = m.id),
           m.created_at
    FROM messages AS m WHERE m.session_id = $1 AND m.idx >= $2";

/// The `parts` rows of branch `$2`'s messages back from their JSON arrays, ids kept.
pub(crate) const UNSHELVE_PARTS: &str = "INSERT INTO parts (id, message_id, session_id, owner_id, position, kind, data)
    SELECT json_extract(j.value, '$.id'), b.id, b.session_id, b.owner_id, json_extract(j.value, '$.position'),
           json_extract(j.value, '$.kind'), json_extract(j.value, '$.data')
    FROM branch_messages AS b, json_each(b.parts) AS j
    WHERE b.session_id = $1 AND b.ordinal = $2";

/// The condition of an event no node has fanned out yet (the partial index's own, so
/// SQLite's planner uses the index).
pub(crate) const UNFANNED: &str = "fanned_out = 0";

/// Leases up to `$4` due, unleased pending deliveries to node `$1` until `$2` (due and
/// lapsed at `$3`), one attempt more each; their ids come back. One statement, and
/// SQLite runs one writer at a time, so two claimers never take one row.
pub(crate) const CLAIM_DELIVERIES: &str = "UPDATE deliveries SET lease_node = $1, lease_until = $2, attempts = attempts + 1
    WHERE id IN (SELECT id FROM deliveries
                 WHERE status = 'pending' AND next_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
                 ORDER BY next_at, id LIMIT $4)
    RETURNING id";

/// The first statement of a write held to a lease's fence (`$1` session, `$2` node, `$3`
/// epoch; see `leases`): a row back while the lease is still that taking. An `UPDATE`
/// that changes nothing, so the transaction takes SQLite's one writer lock at once:
/// a transaction that only read first would have to upgrade later, and fail at once
/// (`SQLITE_BUSY_SNAPSHOT`) if another connection wrote in between.
pub(crate) const HOLD_LEASE: &str = "UPDATE session_leases SET epoch = epoch
                                     WHERE session_id = $1 AND node_id = $2 AND epoch = $3 RETURNING epoch";
