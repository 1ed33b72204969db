//! What the shared record modules (`src/sql/`) need from SQLite that PostgreSQL does
//! differently; everything else in their SQL means the same on both databases.

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
