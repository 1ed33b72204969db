//! Branches (the engine's `store::Branches`): turns moved off the active path into
//! `branches` / `branch_messages`, and back.
//!
//! Each move is one transaction, on both databases: the rows are copied to the other
//! side, then deleted from where they were, so a failure anywhere leaves the session as
//! it was. A message keeps its id both ways, and its parts keep theirs: a shelved
//! message holds its parts as one JSON array (`[{id, position, kind, data}]`), which
//! `dialect` builds from the `parts` rows and unpacks into them again, because the two
//! databases name their JSON aggregates differently. The message's `meta` is copied
//! column to column, never through Rust, so it comes back byte for byte.
//!
//! Two shelves of one session at once would pick the same ordinal; the second fails
//! with `Conflict` on the primary key and changes nothing. The engine never races them
//! (it shelves under the session's control lock).

use super::dialect::{self, Db, Pool};
use crate::error::{db_error, from_db_int, parse_id, to_db_int};
use crate::message_codec;
use crate::rows::Columns;
use serde_json::Value;
use spool_engine::StoreError;
use spool_protocol::time::now_ms;
use spool_protocol::{BRANCH_PREVIEW_CHARS, Branch, BranchKind, IndexedMessage, SessionId, SessionMemory, VariantSet};
use sqlx::Transaction;
use sqlx::types::Json;

pub(crate) async fn shelve(
    pool: &Pool,
    session: &SessionId,
    from_index: u64,
    kind: BranchKind,
) -> Result<Option<u32>, StoreError> {
    let mut tx = begin_writing(pool, session).await?;
    let shelved = shelve_in(&mut tx, session, from_index, kind).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(shelved)
}

/// A transaction that writes first: a no-op update of the session's row. Shelving and
/// unshelving read the session's messages and branches and then rewrite them; on SQLite
/// a transaction that reads first and writes later fails at once with
/// `SQLITE_BUSY_SNAPSHOT` (code 517, "database is locked", no busy wait) when another
/// connection wrote in between, as the run a rollback just cancelled still does while
/// it winds down. Writing first takes SQLite's one writer lock (waiting for it as any
/// write does), and on PostgreSQL locks the session's row, so two shelvings of one
/// session take turns.
async fn begin_writing(pool: &Pool, session: &SessionId) -> Result<Transaction<'static, Db>, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query("UPDATE sessions SET owner_id = owner_id WHERE id = $1")
        .bind(session.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    Ok(tx)
}

/// [`shelve`] inside the caller's transaction (an unshelve shelves the path first).
async fn shelve_in(
    tx: &mut Transaction<'_, Db>,
    session: &SessionId,
    from_index: u64,
    kind: BranchKind,
) -> Result<Option<u32>, StoreError> {
    let from = to_db_int(from_index, "message index")?;
    let tail: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = $1 AND idx >= $2")
        .bind(session.as_str())
        .bind(from)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
    if tail == 0 {
        return Ok(None);
    }
    let owner: String = sqlx::query_scalar("SELECT owner_id FROM sessions WHERE id = $1")
        .bind(session.as_str())
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
    let last: Option<i64> = sqlx::query_scalar("SELECT MAX(ordinal) FROM branches WHERE session_id = $1")
        .bind(session.as_str())
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
    let ordinal = last.unwrap_or(0) + 1;
    let anchor: Option<String> = if from == 0 {
        None
    } else {
        sqlx::query_scalar("SELECT id FROM messages WHERE session_id = $1 AND idx = $2")
            .bind(session.as_str())
            .bind(from - 1)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?
    };

    // A summary that covers shelved turns would tell the model about turns it no longer
    // has: the branch keeps the memory, the path loses the summary (facts are about the
    // session, not the turns, and stay).
    let mut memory = super::memory::get_with(&mut **tx, session).await?;
    let kept = match &mut memory {
        Some(memory) if memory.summarized_before > from_index => {
            let kept = memory.clone();
            memory.summary = None;
            memory.summarized_before = 0;
            Some(kept)
        }
        _ => None,
    };

    sqlx::query(
        "INSERT INTO branches (session_id, ordinal, owner_id, fork_index, anchor, kind, memory, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(session.as_str())
    .bind(ordinal)
    .bind(&owner)
    .bind(from)
    .bind(anchor)
    .bind(kind.as_str())
    .bind(kept.as_ref().map(Json))
    .bind(now_ms())
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    sqlx::query(dialect::SHELVE_MESSAGES)
        .bind(session.as_str())
        .bind(from)
        .bind(ordinal)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    // Their parts go with them (`ON DELETE CASCADE`).
    sqlx::query("DELETE FROM messages WHERE session_id = $1 AND idx >= $2")
        .bind(session.as_str())
        .bind(from)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    sqlx::query("UPDATE step_snapshots SET branch = $3 WHERE session_id = $1 AND branch = 0 AND message_index >= $2")
        .bind(session.as_str())
        .bind(from)
        .bind(ordinal)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    if let (Some(memory), Some(_)) = (&memory, &kept) {
        super::memory::put_with(&mut **tx, session, &owner, memory).await?;
    }
    Ok(Some(u32::try_from(ordinal).map_err(|_| StoreError::Backend(format!("branch ordinal {ordinal} is too large")))?))
}

pub(crate) async fn unshelve(pool: &Pool, session: &SessionId, ordinal: u32) -> Result<Option<u32>, StoreError> {
    let mut tx = begin_writing(pool, session).await?;
    let branch =
        sqlx::query("SELECT owner_id, fork_index, memory FROM branches WHERE session_id = $1 AND ordinal = $2")
            .bind(session.as_str())
            .bind(i64::from(ordinal))
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::Conflict(format!("session {session} has no branch {ordinal}")))?;
    let owner = branch.text("owner_id")?;
    let fork_index = from_db_int(branch.int("fork_index")?, "fork index")?;
    let saved: Option<SessionMemory> = branch
        .json_opt("memory")?
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Backend(format!("a branch's stored memory does not decode: {e}")))?;

    let switched = shelve_in(&mut tx, session, fork_index, BranchKind::Switch).await?;
    on_branch(
        &mut tx,
        "INSERT INTO messages (id, session_id, owner_id, idx, role, meta, created_at)
         SELECT id, session_id, owner_id, idx, role, meta, created_at
         FROM branch_messages WHERE session_id = $1 AND ordinal = $2",
        session,
        ordinal,
    )
    .await?;
    on_branch(&mut tx, dialect::UNSHELVE_PARTS, session, ordinal).await?;
    on_branch(&mut tx, "UPDATE step_snapshots SET branch = 0 WHERE session_id = $1 AND branch = $2", session, ordinal)
        .await?;
    if let Some(saved) = saved {
        // The summary comes back with the turns it covers; the facts are the session's
        // as they are now.
        let mut memory = super::memory::get_with(&mut *tx, session).await?.unwrap_or_default();
        memory.summary = saved.summary;
        memory.summarized_before = saved.summarized_before;
        super::memory::put_with(&mut *tx, session, &owner, &memory).await?;
    }
    // Its messages go with it (`ON DELETE CASCADE`), deleted by hand too so a database
    // without the cascade cannot keep two copies of a message.
    on_branch(&mut tx, "DELETE FROM branch_messages WHERE session_id = $1 AND ordinal = $2", session, ordinal).await?;
    on_branch(&mut tx, "DELETE FROM branches WHERE session_id = $1 AND ordinal = $2", session, ordinal).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(switched)
}

pub(crate) async fn variants(pool: &Pool, session: &SessionId, from_index: u64) -> Result<Vec<VariantSet>, StoreError> {
    let rows = sqlx::query(
        "SELECT b.ordinal, b.fork_index, b.anchor, m.created_at
         FROM branches AS b
         JOIN branch_messages AS m ON m.session_id = b.session_id AND m.ordinal = b.ordinal AND m.idx = b.fork_index
         WHERE b.session_id = $1 AND b.fork_index >= $2
         ORDER BY b.fork_index, b.ordinal",
    )
    .bind(session.as_str())
    .bind(to_db_int(from_index, "message index")?)
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    struct Shelved {
        ordinal: u32,
        fork_index: u64,
        anchor: Option<String>,
        created_at: i64,
    }
    let shelved = rows
        .iter()
        .map(|row| {
            Ok(Shelved {
                ordinal: ordinal(row.int("ordinal")?)?,
                fork_index: from_db_int(row.int("fork_index")?, "fork index")?,
                anchor: row.text_opt("anchor")?,
                created_at: row.int("created_at")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;

    let mut sets = Vec::new();
    for group in shelved.chunk_by(|a, b| a.fork_index == b.fork_index) {
        let index = group[0].fork_index;
        let at = to_db_int(index, "message index")?;
        let path = sqlx::query("SELECT id, idx, created_at FROM messages WHERE session_id = $1 AND idx IN ($2, $3)")
            .bind(session.as_str())
            .bind(at - 1)
            .bind(at)
            .fetch_all(pool)
            .await
            .map_err(db_error)?;
        let mut anchor = None;
        let mut own = None;
        for row in &path {
            if row.int("idx")? == at {
                own = Some(row.int("created_at")?);
            } else {
                anchor = Some(row.text("id")?);
            }
        }
        // A turn the path no longer reaches (a revert ended it before) shows no switcher.
        let Some(own) = own else { continue };
        // Branches shelved from a path whose earlier turns were different versions are
        // versions of another turn; they share the index but not the anchor.
        let mut versions: Vec<(i64, u32, Option<u32>)> =
            group.iter().filter(|b| b.anchor == anchor).map(|b| (b.created_at, b.ordinal, Some(b.ordinal))).collect();
        if versions.is_empty() {
            continue;
        }
        versions.push((own, u32::MAX, None));
        versions.sort();
        let position = versions.iter().position(|v| v.2.is_none()).expect("the path's own version was just added");
        sets.push(VariantSet {
            index,
            position: u32::try_from(position + 1).unwrap_or(u32::MAX),
            versions: versions.into_iter().map(|v| v.2).collect(),
        });
    }
    Ok(sets)
}

pub(crate) async fn list(pool: &Pool, session: &SessionId) -> Result<Vec<Branch>, StoreError> {
    let rows = sqlx::query(
        "SELECT b.ordinal, b.fork_index, b.kind, b.created_at,
                (SELECT m.parts FROM branch_messages AS m
                 WHERE m.session_id = b.session_id AND m.ordinal = b.ordinal AND m.role = 'user'
                 ORDER BY m.idx LIMIT 1) AS first_parts
         FROM branches AS b WHERE b.session_id = $1 ORDER BY b.ordinal",
    )
    .bind(session.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let kind = row.text("kind")?;
            let text = match row.json_opt("first_parts")? {
                Some(parts) => shelved_parts(parts)?
                    .into_iter()
                    .filter(|(kind, _)| kind == "text")
                    .filter_map(|(_, data)| data.get("text").and_then(Value::as_str).map(str::to_owned))
                    .collect::<Vec<_>>()
                    .join("\n"),
                None => String::new(),
            };
            Ok(Branch {
                ordinal: ordinal(row.int("ordinal")?)?,
                fork_index: from_db_int(row.int("fork_index")?, "fork index")?,
                kind: BranchKind::parse(&kind)
                    .ok_or_else(|| StoreError::Backend(format!("a stored branch kind is unknown: {kind}")))?,
                created_at: row.int("created_at")?,
                preview: text.chars().take(BRANCH_PREVIEW_CHARS).collect(),
            })
        })
        .collect()
}

pub(crate) async fn messages(
    pool: &Pool,
    session: &SessionId,
    ordinal: u32,
) -> Result<Option<Vec<IndexedMessage>>, StoreError> {
    let exists: Option<i64> = sqlx::query_scalar("SELECT ordinal FROM branches WHERE session_id = $1 AND ordinal = $2")
        .bind(session.as_str())
        .bind(i64::from(ordinal))
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows = sqlx::query(
        "SELECT id, idx, role, meta, parts FROM branch_messages
         WHERE session_id = $1 AND ordinal = $2 ORDER BY idx",
    )
    .bind(session.as_str())
    .bind(i64::from(ordinal))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            Ok(IndexedMessage {
                id: parse_id(&row.text("id")?)?,
                index: from_db_int(row.int("idx")?, "message index")?,
                message: message_codec::decode(
                    &row.text("role")?,
                    row.json("meta")?,
                    shelved_parts(row.json("parts")?)?,
                )?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()
        .map(Some)
}

/// A shelved message's parts (`[{id, position, kind, data}]`) as `(kind, data)` in
/// position order, what the message codec reads.
fn shelved_parts(parts: Value) -> Result<Vec<(String, Value)>, StoreError> {
    let bad = || StoreError::Backend("a shelved message's parts do not decode".into());
    let Value::Array(parts) = parts else { return Err(bad()) };
    let mut parts = parts
        .into_iter()
        .map(|mut part| {
            let position = part.get("position").and_then(Value::as_i64).ok_or_else(bad)?;
            let kind = part.get("kind").and_then(Value::as_str).ok_or_else(bad)?.to_owned();
            let data = part.get_mut("data").map(Value::take).ok_or_else(bad)?;
            Ok((position, kind, data))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    parts.sort_by_key(|p| p.0);
    Ok(parts.into_iter().map(|(_, kind, data)| (kind, data)).collect())
}

/// Runs `sql` in the transaction with `$1` the session and `$2` the branch.
async fn on_branch(
    tx: &mut Transaction<'_, Db>,
    sql: &str,
    session: &SessionId,
    ordinal: u32,
) -> Result<(), StoreError> {
    sqlx::query(sql).bind(session.as_str()).bind(i64::from(ordinal)).execute(&mut **tx).await.map_err(db_error)?;
    Ok(())
}

fn ordinal(n: i64) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|_| StoreError::Backend(format!("a stored branch ordinal is out of range: {n}")))
}
