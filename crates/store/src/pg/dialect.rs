//! What the shared record modules (`src/sql/`) need from PostgreSQL that SQLite does
//! differently; everything else in their SQL means the same on both databases.

use crate::error::db_error;
use spool_engine::StoreError;
use spool_protocol::RunId;

/// The database and pool the shared modules are compiled against here.
pub(crate) type Db = sqlx::Postgres;
pub(crate) type Pool = sqlx::PgPool;

/// Fails every running run but the ones in `$4` (error code `$1`, message `$2`, at `$3`).
/// PostgreSQL takes the list as one array parameter (see [`run_ids`]).
pub(crate) const FAIL_RUNNING: &str = "UPDATE runs SET status = 'failed', error_code = $1, error_message = $2,
                                                   updated_at = $3, ended_at = $3
                                        WHERE status = 'running' AND NOT (id = ANY($4))";

/// The run ids [`FAIL_RUNNING`] keeps, as a `TEXT[]`.
pub(crate) fn run_ids(ids: &[RunId]) -> Vec<&str> {
    ids.iter().map(RunId::as_str).collect()
}

/// The text of a `parts` row of kind `text` (`data` is `JSONB` here).
pub(crate) const PART_TEXT: &str = "(p.data ->> 'text')";

/// The size in bytes of a `queued_messages` row's text.
pub(crate) const QUEUED_TEXT_BYTES: &str = "OCTET_LENGTH(text)";

/// A transaction whose statements stop at a deadline (see [`time_limited`]).
pub(crate) type TimeLimited = sqlx::Transaction<'static, Db>;

/// A transaction of `pool` whose statements PostgreSQL cancels once they have run for
/// `limit` (`statement_timeout`, local to the transaction; at least 1 ms, because 0
/// would mean none). Hand it back with [`end_time_limit`].
pub(crate) async fn time_limited(pool: &Pool, limit: std::time::Duration) -> Result<TimeLimited, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    // `SET LOCAL` takes no parameters; `set_config(…, true)` is the same, bound.
    sqlx::query("SELECT set_config('statement_timeout', $1, true)")
        .bind(format!("{}ms", limit.as_millis().max(1)))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    Ok(tx)
}

/// Whether `err` is the time limit's cut. Checked by SQLSTATE 57014 (query_canceled),
/// not the message: a scan PostgreSQL ran in parallel reports a worker's "canceling
/// statement due to user request" as often as the leader's "statement timeout".
pub(crate) fn cut_by_time_limit(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("57014"))
}

/// Ends the transaction (it only read), and with it the time limit.
pub(crate) async fn end_time_limit(tx: TimeLimited) {
    if let Err(error) = tx.rollback().await {
        tracing::debug!(%error, "ending a time-limited read");
    }
}

/// Copies a session's messages from index `$2` on into branch `$3` (see `branches`),
/// each with its parts as a JSON array.
pub(crate) const SHELVE_MESSAGES: &str = "INSERT INTO branch_messages
        (id, session_id, ordinal, owner_id, idx, role, meta, parts, created_at)
    SELECT m.id, m.session_id, $3, m.owner_id, m.idx, m.role, m.meta,
           COALESCE((SELECT jsonb_agg(jsonb_build_object('id', p.id, 'position', p.position, 'kind', p.kind,
                                                         'data', p.data) ORDER BY p.position)
                     FROM parts AS p WHERE p.message_id = m.id), '[]'::jsonb),
           m.created_at
    FROM messages AS m WHERE m.session_id = $1 AND m.idx >= $2";

/// The `parts` rows of branch `$2`'s messages back from their JSON arrays, ids kept.
pub(crate) const UNSHELVE_PARTS: &str = "INSERT INTO parts (id, message_id, session_id, owner_id, position, kind, data)
    SELECT e ->> 'id', b.id, b.session_id, b.owner_id, (e ->> 'position')::BIGINT, e ->> 'kind', e -> 'data'
    FROM branch_messages AS b, jsonb_array_elements(b.parts) AS e
    WHERE b.session_id = $1 AND b.ordinal = $2";

/// The condition of an event no node has fanned out yet (the partial index's own).
pub(crate) const UNFANNED: &str = "NOT fanned_out";

/// Leases up to `$4` due, unleased pending deliveries to node `$1` until `$2` (due and
/// lapsed at `$3`), one attempt more each; their ids come back. `FOR UPDATE SKIP
/// LOCKED` passes over the rows another claimer is taking, and the one that commits
/// first leaves them leased, so two claimers never take one row.
pub(crate) const CLAIM_DELIVERIES: &str = "UPDATE deliveries SET lease_node = $1, lease_until = $2, attempts = attempts + 1
    WHERE id IN (SELECT id FROM deliveries
                 WHERE status = 'pending' AND next_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
                 ORDER BY next_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)
    RETURNING id";

/// The first statement of a write held to a lease's fence (`$1` session, `$2` node, `$3`
/// epoch; see `leases`): a row back while the lease is still that taking. `FOR SHARE`
/// locks the row until the transaction ends, so a takeover or release (which update or
/// delete it) waits for the write to commit; one that committed first is waited for
/// and the row re-checked (READ COMMITTED), and then nothing comes back.
pub(crate) const HOLD_LEASE: &str = "SELECT epoch FROM session_leases
                                     WHERE session_id = $1 AND node_id = $2 AND epoch = $3 FOR SHARE";
