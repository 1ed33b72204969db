//! Run frame chunks (the engine's `run_log`): one row per chunk, written once (a
//! retry of the same chunk replaces it) and read back whole, in chunk order. The bytes
//! are the engine's; the columns around them say which frames a chunk holds, so a
//! reader can tell a gap or a missing end without opening them.

use super::dialect::Pool;
use crate::error::db_error;
use spool_engine::StoreError;
use spool_engine::store::RunFrameChunk;
use spool_protocol::RunId;
use spool_protocol::time::Millis;
use sqlx::Row;

pub(crate) async fn append(pool: &Pool, c: &RunFrameChunk) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO run_frames
             (run_id, chunk, session_id, stream_id, first_seq, last_seq, frames, complete, data, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (run_id, chunk) DO UPDATE SET
             session_id = excluded.session_id, stream_id = excluded.stream_id,
             first_seq = excluded.first_seq, last_seq = excluded.last_seq, frames = excluded.frames,
             complete = excluded.complete, data = excluded.data, created_at = excluded.created_at",
    )
    .bind(c.run_id.as_str())
    .bind(number(c.chunk)?)
    .bind(c.session_id.as_str())
    .bind(c.stream_id.as_str())
    .bind(number(c.first_seq)?)
    .bind(number(c.last_seq)?)
    .bind(number(c.frames)?)
    .bind(c.complete)
    .bind(c.data.as_slice())
    .bind(c.created_at)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn read(pool: &Pool, run: &RunId) -> Result<Vec<RunFrameChunk>, StoreError> {
    let rows = sqlx::query(
        "SELECT chunk, session_id, stream_id, first_seq, last_seq, frames, complete, data, created_at
         FROM run_frames WHERE run_id = $1 ORDER BY chunk",
    )
    .bind(run.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let text = |name: &str| row.try_get::<String, _>(name).map_err(db_error);
            let count = |name: &str| {
                let n: i64 = row.try_get(name).map_err(db_error)?;
                u64::try_from(n).map_err(|_| StoreError::Backend(format!("run_frames.{name} is negative")))
            };
            let bad = |what: &str| StoreError::Backend(format!("a stored {what} id does not parse"));
            Ok(RunFrameChunk {
                run_id: run.clone(),
                chunk: count("chunk")?,
                session_id: text("session_id")?.parse().map_err(|_| bad("session"))?,
                stream_id: text("stream_id")?.parse().map_err(|_| bad("stream"))?,
                first_seq: count("first_seq")?,
                last_seq: count("last_seq")?,
                frames: count("frames")?,
                complete: row.try_get("complete").map_err(db_error)?,
                data: row.try_get("data").map_err(db_error)?,
                created_at: row.try_get("created_at").map_err(db_error)?,
            })
        })
        .collect()
}

pub(crate) async fn prune(pool: &Pool, before: Millis) -> Result<u64, StoreError> {
    let done = sqlx::query("DELETE FROM run_frames WHERE created_at < $1")
        .bind(before)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected())
}

/// A count as the databases' signed 64-bit integer.
fn number(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("{n} does not fit a stored integer")))
}
