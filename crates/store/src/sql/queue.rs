//! Queued prompts: sent with `queue: true` while their session had a run going, and
//! waiting, in `seq` order, for a run to take them.
//!
//! Two writes decide between racers. Queueing is one `INSERT … SELECT … WHERE` whose
//! condition counts the session's queue, with `ON CONFLICT DO NOTHING` on the request
//! id: a retried prompt never queues twice. Taking deletes the row and inserts its run
//! in one transaction, and the delete's row count is the verdict: of two takers (two
//! nodes after a restart) the second finds the row gone — SQLite runs one writer at a
//! time, and PostgreSQL (READ COMMITTED) makes the second `DELETE` wait for the first
//! to commit, then re-check and find nothing — so a prompt becomes at most one run.
//! Because the run and its user message go in with the delete, a crash between them
//! cannot lose the prompt.
//!
//! The same condition bounds the owner's prompts across all their sessions, by count
//! and by bytes of text (so one user cannot fill the store through many sessions).
//! The limits are exact on SQLite (one writer at a time); on PostgreSQL two nodes
//! queueing at the very same moment may each see room for one more, so a queue can
//! pass a limit by the number of such racers, never more.
//!
//! A paused queue (`queue_pauses`, Stop with prompts waiting) is left out of
//! [`sessions`], the list start-up and the reaper go through.
//!
//! A queued message's files (`files`, a JSON array; NULL for none) are attachments the
//! engine bound to the session before queueing it; they count against the owner's
//! attachment quota, not the queue's bytes of text.

use super::dialect::{Pool, QUEUED_TEXT_BYTES};
use super::{messages, runs};
use crate::error::{db_error, to_db_int};
use crate::rows;
use spool_engine::{LeaseFence, QueueInsert, QueueLimits, QueuedPrompt, RunInsert, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{IndexedMessage, MessageId, Run, SessionId, UserId};
use sqlx::types::Json;

const COLUMNS: &str = "id, session_id, owner_id, request_id, text, approval_policy, on_disconnect, created_at, files";

/// A limit as a database integer; "unbounded" (`usize::MAX`) becomes the largest one.
fn db_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

pub(crate) async fn insert(pool: &Pool, prompt: &QueuedPrompt, limits: QueueLimits) -> Result<QueueInsert, StoreError> {
    insert_as(pool, prompt, limits, false).await
}

/// Queues `prompt` (a steer when `steer`) unless a limit is reached: the session's
/// queue (for a steer, its steers) holds `limits.per_session` at most, the owner's
/// queues `per_owner` prompts and `per_owner_bytes` of text. A prompt whose request id
/// is queued already answers that one.
async fn insert_as(
    pool: &Pool,
    prompt: &QueuedPrompt,
    limits: QueueLimits,
    steer: bool,
) -> Result<QueueInsert, StoreError> {
    let message = &prompt.message;
    // The session's share of the queue (its steers, for a steer), with the session's
    // id bound as `p`.
    let of_session = |p: &str| match steer {
        true => format!("session_id = {p} AND steer = TRUE"),
        false => format!("session_id = {p}"),
    };
    let sql = format!(
        "INSERT INTO queued_messages (id, session_id, owner_id, request_id, text, approval_policy, on_disconnect,
                                      created_at, steer, files)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $13, $14
         WHERE (SELECT COUNT(*) FROM queued_messages WHERE {}) < $9
           AND (SELECT COUNT(*) FROM queued_messages WHERE owner_id = $3) < $10
           AND (SELECT COALESCE(SUM({QUEUED_TEXT_BYTES}), 0) FROM queued_messages WHERE owner_id = $3) <= $11 - $12
         ON CONFLICT (session_id, request_id) DO NOTHING",
        of_session("$2")
    );
    let done = sqlx::query(&sql)
        .bind(message.id.as_str())
        .bind(prompt.session_id.as_str())
        .bind(prompt.owner_id.as_str())
        .bind(&message.request_id)
        .bind(&message.text)
        .bind(prompt.approval_policy.map(|p| p.as_str()))
        .bind(prompt.on_disconnect.as_str())
        .bind(message.created_at)
        .bind(db_limit(limits.per_session))
        .bind(db_limit(limits.per_owner))
        .bind(db_limit(limits.per_owner_bytes))
        .bind(to_db_int(message.text.len() as u64, "prompt length")?)
        .bind(steer)
        // NULL for none: what every row queued before files could be had.
        .bind(Some(Json(&message.files)).filter(|f| !f.0.is_empty()))
        .execute(pool)
        .await
        .map_err(db_error)?;
    if done.rows_affected() > 0 {
        return Ok(QueueInsert::Queued);
    }
    let existing =
        sqlx::query(&format!("SELECT {COLUMNS} FROM queued_messages WHERE session_id = $1 AND request_id = $2"))
            .bind(prompt.session_id.as_str())
            .bind(&message.request_id)
            .fetch_optional(pool)
            .await
            .map_err(db_error)?;
    if let Some(row) = existing {
        return Ok(QueueInsert::Existing(rows::queued(&row)?));
    }
    // Refused: say which limit, the session's or the owner's.
    let in_session: i64 =
        sqlx::query_scalar(&format!("SELECT COUNT(*) FROM queued_messages WHERE {}", of_session("$1")))
            .bind(prompt.session_id.as_str())
            .fetch_one(pool)
            .await
            .map_err(db_error)?;
    Ok(if in_session >= db_limit(limits.per_session) { QueueInsert::Full } else { QueueInsert::OwnerFull })
}

pub(crate) async fn list(pool: &Pool, session: &SessionId) -> Result<Vec<QueuedPrompt>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM queued_messages WHERE session_id = $1 ORDER BY seq"))
        .bind(session.as_str())
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::queued)
        .collect()
}

pub(crate) async fn get(pool: &Pool, id: &MessageId) -> Result<Option<QueuedPrompt>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM queued_messages WHERE id = $1"))
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::queued)
        .transpose()
}

pub(crate) async fn delete(pool: &Pool, id: &MessageId) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM queued_messages WHERE id = $1")
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn take(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    id: &MessageId,
    run: &Run,
    prompt: &IndexedMessage,
) -> Result<Option<RunInsert>, StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    let done = sqlx::query("DELETE FROM queued_messages WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    if done.rows_affected() == 0 {
        // Dropping the transaction rolls it back; it wrote nothing anyway.
        return Ok(None);
    }
    let created = runs::insert_row(&mut *tx, run).await?;
    if created {
        // The prompt becomes the run's user message in the same transaction.
        messages::insert_in(&mut tx, &run.session_id, &run.owner_id, prompt).await?;
    }
    tx.commit().await.map_err(db_error)?;
    if created {
        return Ok(Some(RunInsert::Created));
    }
    match runs::find_by_request(pool, &run.session_id, &run.request_id).await? {
        Some(existing) => Ok(Some(RunInsert::Existing(existing))),
        None => {
            Err(StoreError::Backend(format!("run for request {} conflicted but cannot be read back", run.request_id)))
        }
    }
}

/// Queues a steer: as [`insert`], marked `steer`, bounded by the session's steers
/// (`limits.per_session`) rather than its whole queue.
pub(crate) async fn insert_steer(
    pool: &Pool,
    prompt: &QueuedPrompt,
    limits: QueueLimits,
) -> Result<QueueInsert, StoreError> {
    insert_as(pool, prompt, limits, true).await
}

pub(crate) async fn steers(pool: &Pool, session: &SessionId) -> Result<Vec<QueuedPrompt>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM queued_messages WHERE session_id = $1 AND steer = TRUE ORDER BY seq"))
        .bind(session.as_str())
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::queued)
        .collect()
}

/// Takes a steer into the running run: the delete's row count decides between takers,
/// and the user message goes in with it, so a steer lands once and is never lost.
pub(crate) async fn take_steer(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    id: &MessageId,
    session: &SessionId,
    owner: &UserId,
    message: &IndexedMessage,
) -> Result<bool, StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    let done = sqlx::query("DELETE FROM queued_messages WHERE id = $1 AND steer = TRUE")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    messages::insert_in(&mut tx, session, owner, message).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(true)
}

pub(crate) async fn sessions(pool: &Pool, limit: u32) -> Result<Vec<SessionId>, StoreError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT session_id FROM queued_messages
             WHERE session_id NOT IN (SELECT session_id FROM queue_pauses)
             GROUP BY session_id ORDER BY MIN(seq) LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.into_iter()
        .map(|(id,)| id.parse().map_err(|_| StoreError::Backend(format!("a stored session id does not parse: {id}"))))
        .collect()
}

/// Pauses the session's queue (Stop with prompts waiting); pausing twice keeps the first.
pub(crate) async fn pause(pool: &Pool, session: &SessionId, at: Millis) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO queue_pauses (session_id, paused_at) VALUES ($1, $2) ON CONFLICT (session_id) DO NOTHING")
        .bind(session.as_str())
        .bind(at)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Lets the session's queue go on; false when it was not paused.
pub(crate) async fn resume(pool: &Pool, session: &SessionId) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM queue_pauses WHERE session_id = $1")
        .bind(session.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn paused(pool: &Pool, session: &SessionId) -> Result<bool, StoreError> {
    let row: Option<(String,)> = sqlx::query_as("SELECT session_id FROM queue_pauses WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    Ok(row.is_some())
}
