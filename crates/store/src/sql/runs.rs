//! Runs: one prompt's execution, unique per `(session_id, request_id)`.

use super::dialect::{self, Db, Pool};
use super::messages;
use crate::error::{db_error, to_db_int};
use crate::rows;
use spool_engine::{LeaseFence, RunInsert, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{IndexedMessage, ProjectId, Run, RunError, RunId, SessionId};
use sqlx::Executor;
use sqlx::types::Json;

const COLUMNS: &str = "id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                       first_token_at, ended_at, usage_input, usage_output, usage, error_code, error_message";

/// How often `insert` tries again when the run it conflicted with is gone before it
/// can be read (its session was deleted in between; the next insert then fails on the
/// foreign key). More than one retry would mean the database is misbehaving.
const INSERT_ATTEMPTS: usize = 2;

/// Inserts `run` unless its requestId is already used in the session; then the existing
/// run comes back and nothing is written. `ON CONFLICT DO NOTHING` decides, so two
/// concurrent retries cannot both create a run: of racing inserts exactly one writes
/// (SQLite's second writer waits for the first; PostgreSQL's waits for the first to
/// commit, then sees the conflict). The read that follows is a statement of its own
/// and sees that committed row, unless it was deleted in between (see
/// [`INSERT_ATTEMPTS`]).
pub(crate) async fn insert(pool: &Pool, run: &Run) -> Result<RunInsert, StoreError> {
    for _ in 0..INSERT_ATTEMPTS {
        if insert_row(pool, run).await? {
            return Ok(RunInsert::Created);
        }
        if let Some(existing) = find_by_request(pool, &run.session_id, &run.request_id).await? {
            return Ok(RunInsert::Existing(existing));
        }
    }
    Err(StoreError::Backend(format!("run for request {} conflicted but cannot be read back", run.request_id)))
}

/// Starts a run: inserts it together with `prompt`, the user message it answers, in
/// one transaction, unless its requestId is already used in the session (then, as in
/// [`insert`], the existing run comes back and nothing is written, the prompt neither).
/// The engine answers "accepted" only after this commits, so a prompt a client was told
/// is accepted survives a crash that comes before its run gets going.
pub(crate) async fn start(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    run: &Run,
    prompt: &IndexedMessage,
) -> Result<RunInsert, StoreError> {
    for _ in 0..INSERT_ATTEMPTS {
        let mut tx = super::leases::begin(pool, fence).await?;
        if insert_row(&mut *tx, run).await? {
            messages::insert_in(&mut tx, &run.session_id, &run.owner_id, prompt).await?;
            tx.commit().await.map_err(db_error)?;
            return Ok(RunInsert::Created);
        }
        // Nothing was written: dropping the transaction ends it.
        drop(tx);
        if let Some(existing) = find_by_request(pool, &run.session_id, &run.request_id).await? {
            return Ok(RunInsert::Existing(existing));
        }
    }
    Err(StoreError::Backend(format!("run for request {} conflicted but cannot be read back", run.request_id)))
}

/// The insert itself: true when it wrote the run, false when its requestId is taken.
/// Generic over the executor so taking a queued prompt can insert its run inside the
/// transaction that removes the prompt.
pub(crate) async fn insert_row<'e, E: Executor<'e, Database = Db>>(executor: E, run: &Run) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO runs (id, session_id, owner_id, request_id, status, user_message_index, created_at,
                           updated_at, first_token_at, ended_at, usage_input, usage_output, usage, error_code,
                           error_message)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         ON CONFLICT (session_id, request_id) DO NOTHING",
    )
    .bind(run.id.as_str())
    .bind(run.session_id.as_str())
    .bind(run.owner_id.as_str())
    .bind(&run.request_id)
    .bind(run.status.as_str())
    .bind(to_db_int(run.user_message_index, "user message index")?)
    .bind(run.created_at)
    .bind(run.updated_at)
    .bind(run.first_token_at)
    .bind(run.ended_at)
    .bind(to_db_int(run.usage.input, "input tokens")?)
    .bind(to_db_int(run.usage.output, "output tokens")?)
    .bind(Json(&run.usage))
    .bind(run.error.as_ref().map(|e| e.code.as_str()))
    .bind(run.error.as_ref().map(|e| e.message.as_str()))
    .execute(executor)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn find_by_request(
    pool: &Pool,
    session: &SessionId,
    request_id: &str,
) -> Result<Option<Run>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM runs WHERE session_id = $1 AND request_id = $2"))
        .bind(session.as_str())
        .bind(request_id)
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::run)
        .transpose()
}

pub(crate) async fn get(pool: &Pool, id: &RunId) -> Result<Option<Run>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM runs WHERE id = $1"))
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::run)
        .transpose()
}

/// What `update_run` does: a run with a terminal status is settled ([`settle`]), any
/// other is written as it is. Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn write(pool: &Pool, fence: Option<&LeaseFence>, run: &Run) -> Result<(), StoreError> {
    if run.status.is_terminal() {
        settle(pool, fence, run).await?;
        return Ok(());
    }
    let mut tx = super::leases::begin(pool, fence).await?;
    update(&mut *tx, run).await?;
    tx.commit().await.map_err(db_error)
}

/// Settles `run` with its `run.settled` event, in one transaction, only while the
/// stored run is not settled: of two settles (a node's end of the run and another's
/// reaper, a stop racing the end) exactly one changes the row, the same way
/// `approvals::settle` picks one winner, and the other writes nothing.
pub(crate) async fn settle(pool: &Pool, fence: Option<&LeaseFence>, run: &Run) -> Result<bool, StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    let sql = format!("{UPDATE_RUN} AND status NOT IN ('completed', 'failed', 'cancelled')");
    let done = bound(&sql, run)?.execute(&mut *tx).await.map_err(db_error)?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    if run.status.is_terminal() {
        super::outbox::write_settled(&mut tx, run).await?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(true)
}

/// Generic over the executor so `interrupt_run` can write the run inside the
/// transaction that inserts its approval.
pub(crate) async fn update<'e, E: Executor<'e, Database = Db>>(executor: E, run: &Run) -> Result<(), StoreError> {
    bound(UPDATE_RUN, run)?.execute(executor).await.map_err(db_error)?;
    Ok(())
}

/// Writes every field a run's life changes; `settle` adds its condition.
const UPDATE_RUN: &str = "UPDATE runs SET status = $1, updated_at = $2, first_token_at = $3, ended_at = $4,
                         usage_input = $5, usage_output = $6, usage = $7, error_code = $8, error_message = $9
                         WHERE id = $10";

/// `sql` (an [`UPDATE_RUN`]) with `run`'s fields bound to `$1`–`$10`.
fn bound<'q>(
    sql: &'q str,
    run: &'q Run,
) -> Result<sqlx::query::Query<'q, Db, <Db as sqlx::Database>::Arguments<'q>>, StoreError> {
    Ok(sqlx::query(sql)
        .bind(run.status.as_str())
        .bind(run.updated_at)
        .bind(run.first_token_at)
        .bind(run.ended_at)
        .bind(to_db_int(run.usage.input, "input tokens")?)
        .bind(to_db_int(run.usage.output, "output tokens")?)
        .bind(Json(&run.usage))
        .bind(run.error.as_ref().map(|e| e.code.as_str()))
        .bind(run.error.as_ref().map(|e| e.message.as_str()))
        .bind(run.id.as_str()))
}

/// The session's runs started at or after message `from_index`, in message order.
pub(crate) async fn since(pool: &Pool, session: &SessionId, from_index: u64) -> Result<Vec<Run>, StoreError> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM runs WHERE session_id = $1 AND user_message_index >= $2
         ORDER BY user_message_index, created_at"
    ))
    .bind(session.as_str())
    .bind(to_db_int(from_index, "message index")?)
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::run)
    .collect()
}

/// Sessions of `project` with a run that ended after `after` (ms), latest ended first, at
/// most `limit`: what a reconnecting OpenCode client missed (`dialect/opencode/routes/global.rs` in the server).
pub(crate) async fn ended_after(
    pool: &Pool,
    project: &ProjectId,
    after: Millis,
    limit: u32,
) -> Result<Vec<SessionId>, StoreError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT r.session_id FROM runs r JOIN sessions s ON s.id = r.session_id
         WHERE s.project_id = $1 AND r.ended_at > $2
         GROUP BY r.session_id ORDER BY MAX(r.ended_at) DESC LIMIT $3",
    )
    .bind(project.as_str())
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.into_iter()
        .map(|(id,)| id.parse().map_err(|_| StoreError::Backend(format!("a stored session id does not parse: {id}"))))
        .collect()
}

/// The session's interrupted run. The engine keeps at most one per session; should
/// there ever be more, the newest is the one still worth resuming.
pub(crate) async fn interrupted(pool: &Pool, session: &SessionId) -> Result<Option<Run>, StoreError> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM runs WHERE session_id = $1 AND status = 'interrupted'
         ORDER BY created_at DESC, id DESC LIMIT 1"
    ))
    .bind(session.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(rows::run)
    .transpose()
}

/// Fails every running run but `keep` (the ones this node still runs), each with its
/// `run.settled` event, in one transaction; the list is the one parameter the two
/// databases bind differently, so the statement is the dialect's.
pub(crate) async fn fail_running(
    pool: &Pool,
    error: &RunError,
    now: Millis,
    keep: &[RunId],
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let failed = sqlx::query(&format!("{} RETURNING {COLUMNS}", dialect::FAIL_RUNNING))
        .bind(&error.code)
        .bind(&error.message)
        .bind(now)
        .bind(dialect::run_ids(keep))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
    for row in &failed {
        super::outbox::write_settled(&mut tx, &rows::run(row)?).await?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(failed.len() as u64)
}
