//! Messages: a session's committed history, addressed by absolute index.
//!
//! A message is one `messages` row plus one `parts` row per content block (see
//! [`message_codec`]). Writes put both in one transaction so a
//! reader never sees a message without its content. Reads fetch a message and its
//! parts with one `LEFT JOIN` statement, which either database answers from a single
//! snapshot, so no read transaction is needed; rows arrive grouped by message and
//! ordered by part position, and [`rows::messages`] folds them back into messages.

use super::dialect::{Db, Pool};
use crate::error::{db_error, from_db_int, to_db_int};
use crate::message_codec::{self, message_timestamp, new_part_id};
use crate::rows;
use spool_engine::{LeaseFence, StoreError};
use spool_protocol::{IndexedMessage, MessageId, SessionId, UserId};
use sqlx::Transaction;
use sqlx::types::Json;

/// Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn insert(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    session: &SessionId,
    owner: &UserId,
    message: &IndexedMessage,
) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    insert_in(&mut tx, session, owner, message).await?;
    // Dropping `tx` on an early return above rolls the message row back.
    tx.commit().await.map_err(db_error)
}

/// Writes one message (its row and its parts) inside the caller's transaction: a run
/// and its prompt go in together (see `runs::start`), so a crash cannot keep one
/// without the other.
pub(crate) async fn insert_in(
    tx: &mut Transaction<'_, Db>,
    session: &SessionId,
    owner: &UserId,
    message: &IndexedMessage,
) -> Result<(), StoreError> {
    let encoded = message_codec::encode(&message.message)?;
    let index = to_db_int(message.index, "message index")?;
    sqlx::query(
        "INSERT INTO messages (id, session_id, owner_id, idx, role, meta, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(message.id.as_str())
    .bind(session.as_str())
    .bind(owner.as_str())
    .bind(index)
    .bind(encoded.role)
    .bind(Json(&encoded.meta))
    .bind(message_timestamp(&message.message))
    .execute(&mut **tx)
    .await
    .map_err(|e| match db_error(e) {
        StoreError::Conflict(_) => StoreError::Conflict(format!(
            "message {} or index {} already exists in session {session}",
            message.id, message.index
        )),
        other => other,
    })?;
    for (position, part) in encoded.parts.iter().enumerate() {
        let position = i64::try_from(position).expect("a message has fewer than i64::MAX content blocks");
        sqlx::query(
            "INSERT INTO parts (id, message_id, session_id, owner_id, position, kind, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(new_part_id())
        .bind(message.id.as_str())
        .bind(session.as_str())
        .bind(owner.as_str())
        .bind(position)
        .bind(&part.kind)
        .bind(Json(&part.data))
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

/// Copies the messages below `before` into another session (a fork), same indices, new
/// ids. Committed messages are never rewritten, so reading them before the transaction
/// cannot see a version that later changes; the writes are one transaction so a failed
/// fork leaves no partial history behind.
pub(crate) async fn copy(
    pool: &Pool,
    from: &SessionId,
    to: &SessionId,
    owner: &UserId,
    before: u64,
) -> Result<u64, StoreError> {
    let messages = list(pool, from, Some(before), u32::MAX).await?;
    let mut tx = pool.begin().await.map_err(db_error)?;
    for message in &messages {
        let copy = IndexedMessage { id: MessageId::new(), index: message.index, message: message.message.clone() };
        insert_in(&mut tx, to, owner, &copy).await?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(messages.len() as u64)
}

/// The latest `limit` messages below `before`, ascending.
pub(crate) async fn list(
    pool: &Pool,
    session: &SessionId,
    before: Option<u64>,
    limit: u32,
) -> Result<Vec<IndexedMessage>, StoreError> {
    // `idx < before` is written as `idx <= last` so that "no bound" is an ordinary
    // value (the largest storable index) and one statement serves both cases.
    let last = match before {
        Some(0) => return Ok(Vec::new()),
        Some(before) => i64::try_from(before - 1).unwrap_or(i64::MAX),
        None => i64::MAX,
    };
    // The inner query picks the latest `limit` messages (walking the
    // (session_id, idx) index backwards); the outer one attaches their parts and
    // puts them back in ascending order.
    let joined = sqlx::query(
        "SELECT m.id, m.idx, m.role, m.meta, p.kind, p.data
         FROM (SELECT id, idx, role, meta FROM messages
               WHERE session_id = $1 AND idx <= $2
               ORDER BY idx DESC LIMIT $3) AS m
         LEFT JOIN parts AS p ON p.message_id = m.id
         ORDER BY m.idx, p.position",
    )
    .bind(session.as_str())
    .bind(last)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows::messages(&joined)
}

pub(crate) async fn count(pool: &Pool, session: &SessionId) -> Result<u64, StoreError> {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    from_db_int(count, "message count")
}

/// Everything from the `rounds`-th last user message on; none asked for is nothing,
/// fewer user messages than asked for is everything.
pub(crate) async fn latest_rounds(
    pool: &Pool,
    session: &SessionId,
    rounds: usize,
) -> Result<Vec<IndexedMessage>, StoreError> {
    let Some(skip) = rounds.checked_sub(1) else {
        return Ok(Vec::new());
    };
    // A skip beyond any real count finds no user message, which means "everything".
    let skip = i64::try_from(skip).unwrap_or(i64::MAX);
    // When the session has fewer user messages the subquery is NULL and the start
    // falls back to -1, below every index: the whole session.
    let joined = sqlx::query(
        "SELECT m.id, m.idx, m.role, m.meta, p.kind, p.data
         FROM messages AS m
         LEFT JOIN parts AS p ON p.message_id = m.id
         WHERE m.session_id = $1
           AND m.idx >= COALESCE(
                 (SELECT idx FROM messages WHERE session_id = $1 AND role = 'user'
                  ORDER BY idx DESC LIMIT 1 OFFSET $2),
                 -1)
         ORDER BY m.idx, p.position",
    )
    .bind(session.as_str())
    .bind(skip)
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows::messages(&joined)
}
