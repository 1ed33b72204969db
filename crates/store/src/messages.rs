//! Messages: a session's committed history, addressed by absolute index.
//!
//! A message is one `messages` row plus one `parts` row per content block (see
//! [`message_codec`](crate::message_codec)). Writes put both in one transaction so a
//! reader never sees a message without its content. Reads fetch a message and its
//! parts with one `LEFT JOIN` statement, which SQLite answers from a single snapshot,
//! so no read transaction is needed; rows arrive grouped by message and ordered by
//! part position, and [`collect`] folds them back into messages.

use crate::error::{db_error, from_db_int, parse_id, to_db_int};
use crate::message_codec;
use spool_engine::StoreError;
use spool_protocol::{IndexedMessage, SessionId, UserId};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

pub(crate) async fn insert(
    pool: &SqlitePool,
    session: &SessionId,
    owner: &UserId,
    message: &IndexedMessage,
) -> Result<(), StoreError> {
    let encoded = message_codec::encode(&message.message)?;
    let index = to_db_int(message.index, "message index")?;
    let created_at = message_timestamp(&message.message);

    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query(
        "INSERT INTO messages (id, session_id, owner_id, idx, role, meta, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(message.id.as_str())
    .bind(session.as_str())
    .bind(owner.as_str())
    .bind(index)
    .bind(encoded.role)
    .bind(&encoded.meta)
    .bind(created_at)
    .execute(&mut *tx)
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
            "INSERT INTO parts (id, message_id, session_id, owner_id, position, kind, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(new_part_id())
        .bind(message.id.as_str())
        .bind(session.as_str())
        .bind(owner.as_str())
        .bind(position)
        .bind(&part.kind)
        .bind(&part.data)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    // Dropping `tx` on an early return above rolls the message row back.
    tx.commit().await.map_err(db_error)?;
    Ok(())
}

pub(crate) async fn list(
    pool: &SqlitePool,
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
    let rows = sqlx::query(
        "SELECT m.id, m.idx, m.role, m.meta, p.kind, p.data
         FROM (SELECT id, idx, role, meta FROM messages
               WHERE session_id = ? AND idx <= ?
               ORDER BY idx DESC LIMIT ?) AS m
         LEFT JOIN parts AS p ON p.message_id = m.id
         ORDER BY m.idx, p.position",
    )
    .bind(session.as_str())
    .bind(last)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    collect(rows)
}

pub(crate) async fn count(pool: &SqlitePool, session: &SessionId) -> Result<u64, StoreError> {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?")
        .bind(session.as_str())
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    from_db_int(count, "message count")
}

/// Everything from the `rounds`-th last user message on. No rounds asked for is an
/// empty history (the trait leaves 0 open; nothing is the only reading where more
/// rounds never means fewer messages).
pub(crate) async fn latest_rounds(
    pool: &SqlitePool,
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
    let rows = sqlx::query(
        "SELECT m.id, m.idx, m.role, m.meta, p.kind, p.data
         FROM messages AS m
         LEFT JOIN parts AS p ON p.message_id = m.id
         WHERE m.session_id = ?1
           AND m.idx >= COALESCE(
                 (SELECT idx FROM messages WHERE session_id = ?1 AND role = 'user'
                  ORDER BY idx DESC LIMIT 1 OFFSET ?2),
                 -1)
         ORDER BY m.idx, p.position",
    )
    .bind(session.as_str())
    .bind(skip)
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    collect(rows)
}

/// Folds joined rows (one per part, or one with NULL part columns for a message
/// without content) into messages, keeping the query's order.
fn collect(rows: Vec<SqliteRow>) -> Result<Vec<IndexedMessage>, StoreError> {
    struct Pending {
        id: String,
        index: i64,
        role: String,
        meta: String,
        parts: Vec<(String, String)>,
    }
    fn finish(p: Pending) -> Result<IndexedMessage, StoreError> {
        Ok(IndexedMessage {
            id: parse_id(&p.id)?,
            index: from_db_int(p.index, "message index")?,
            message: message_codec::decode(&p.role, &p.meta, p.parts)?,
        })
    }

    let mut messages = Vec::new();
    let mut pending: Option<Pending> = None;
    for row in &rows {
        let id: &str = row.try_get("id").map_err(db_error)?;
        if pending.as_ref().is_none_or(|p| p.id != id) {
            if let Some(done) = pending.take() {
                messages.push(finish(done)?);
            }
            pending = Some(Pending {
                id: id.to_owned(),
                index: row.try_get("idx").map_err(db_error)?,
                role: row.try_get("role").map_err(db_error)?,
                meta: row.try_get("meta").map_err(db_error)?,
                parts: Vec::new(),
            });
        }
        let kind: Option<String> = row.try_get("kind").map_err(db_error)?;
        let data: Option<String> = row.try_get("data").map_err(db_error)?;
        if let (Some(kind), Some(data), Some(p)) = (kind, data, pending.as_mut()) {
            p.parts.push((kind, data));
        }
    }
    if let Some(done) = pending {
        messages.push(finish(done)?);
    }
    Ok(messages)
}

/// The message's own time, stored as the row's `created_at`: it is when the message
/// came to be, which is what a reader of the table wants, and needs no second clock.
fn message_timestamp(message: &spool_protocol::Message) -> i64 {
    use spool_protocol::Message;
    match message {
        Message::User { timestamp, .. }
        | Message::Assistant { timestamp, .. }
        | Message::ToolResult { timestamp, .. } => *timestamp,
    }
}

/// Parts have no typed id in the protocol (nothing outside the store names one), so
/// the store mints them in the same shape: a `prt_` prefix and a lower-case ULID.
fn new_part_id() -> String {
    format!("prt_{}", ulid::Ulid::new().to_string().to_ascii_lowercase())
}
