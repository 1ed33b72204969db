//! What the shared record modules (`src/sql/`) need from PostgreSQL that SQLite does
//! differently; everything else in their SQL means the same on both databases.

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
