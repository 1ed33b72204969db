//! Approvals: a run stopped on one tool call until a person decides.
//!
//! An approval is written together with its run and the run's checkpoint in one
//! transaction (`interrupt`), so a crash can never leave an interrupted run without
//! the approval that would resume it, or an approval for a run that is still running.
//! Deciding is a conditional update from `pending` (`settle`): SQLite applies it to
//! one row at a time, so among any number of racing deciders (a person, a second tab,
//! the expiry timer) exactly one sees a changed row and the others write nothing.
//! Superseding (the call's file changed before it ran) is the same conditional update,
//! together with the replacing approval, in one transaction.

use crate::error::db_error;
use crate::rows::{self, Columns, approval_kind_str};
use crate::sqlite::runs;
use spool_engine::{DecidedCall, StoreError, Supersede};
use spool_protocol::time::Millis;
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, Decision, Run, SessionId, UserId};
use sqlx::SqlitePool;

pub(crate) async fn interrupt(
    pool: &SqlitePool,
    run: &Run,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    insert(&mut tx, approval, checkpoint).await?;
    runs::update(&mut *tx, run).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(())
}

/// The old approval's conditional update, the new approval and the run, all or nothing.
/// SQLite applies the update to one row at a time, so of two supersedes (or a supersede
/// and a settle) of the same approval exactly one sees a changed row.
pub(crate) async fn supersede(
    pool: &SqlitePool,
    old: &Supersede<'_>,
    run: &Run,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let done = sqlx::query(
        "UPDATE approvals SET status = 'superseded', actor = ?, resolved_at = ?
         WHERE id = ? AND status = ? AND started_at IS NULL",
    )
    .bind(old.actor.map(|a| a.as_str()))
    .bind(old.at)
    .bind(old.id.as_str())
    .bind(old.from.as_str())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    insert(&mut tx, approval, checkpoint).await?;
    runs::update(&mut *tx, run).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(true)
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<(), StoreError> {
    let decision = approval.decision.as_ref().map(encode_decision).transpose()?;
    let payload = to_json(&approval.payload, "approval payload")?;
    let checkpoint = to_json(checkpoint, "checkpoint")?;
    sqlx::query(
        "INSERT INTO approvals (id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status,
                                decision, message, actor, created_at, expires_at, resolved_at, checkpoint)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(approval.id.as_str())
    .bind(approval.run_id.as_str())
    .bind(approval.session_id.as_str())
    .bind(approval.owner_id.as_str())
    .bind(&approval.tool_call_id)
    .bind(&approval.tool)
    .bind(approval_kind_str(approval.kind))
    .bind(payload)
    .bind(approval.status.as_str())
    .bind(decision)
    .bind(approval.message.as_deref())
    .bind(approval.actor.as_ref().map(|a| a.as_str()))
    .bind(approval.created_at)
    .bind(approval.expires_at)
    .bind(approval.resolved_at)
    .bind(checkpoint)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn get(
    pool: &SqlitePool,
    id: &ApprovalId,
) -> Result<Option<(Approval, serde_json::Value)>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision, message,
                actor, created_at, expires_at, resolved_at, checkpoint
         FROM approvals WHERE id = ?",
    )
    .bind(id.as_str())
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    else {
        return Ok(None);
    };
    Ok(Some((rows::approval(&row)?, row.json("checkpoint")?)))
}

/// Oldest first; the id breaks ties within a millisecond (ids sort by creation).
pub(crate) async fn pending(pool: &SqlitePool, session: &SessionId) -> Result<Vec<Approval>, StoreError> {
    sqlx::query(
        "SELECT id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision, message,
                actor, created_at, expires_at, resolved_at
         FROM approvals WHERE session_id = ? AND status = 'pending' ORDER BY created_at, id",
    )
    .bind(session.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::approval)
    .collect()
}

pub(crate) async fn all_pending(pool: &SqlitePool) -> Result<Vec<Approval>, StoreError> {
    sqlx::query(
        "SELECT id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision, message,
                actor, created_at, expires_at, resolved_at
         FROM approvals WHERE status = 'pending' ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::approval)
    .collect()
}

/// True iff this call moved the approval out of `pending`. Settling *to* `pending`
/// with a time is refused by the table's CHECK (a pending approval has no outcome).
pub(crate) async fn settle(
    pool: &SqlitePool,
    id: &ApprovalId,
    status: ApprovalStatus,
    decision: Option<&Decision>,
    message: Option<&str>,
    actor: Option<&UserId>,
    at: Millis,
) -> Result<bool, StoreError> {
    let decision = decision.map(encode_decision).transpose()?;
    let done = sqlx::query(
        "UPDATE approvals SET status = ?, decision = ?, message = ?, actor = ?, resolved_at = ?
         WHERE id = ? AND status = 'pending'",
    )
    .bind(status.as_str())
    .bind(decision)
    .bind(message)
    .bind(actor.map(|a| a.as_str()))
    .bind(at)
    .bind(id.as_str())
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// The decision as its wire JSON (`"once"`, `{"fill": {…}}`), so the column reads the
/// same as the API.
fn encode_decision(decision: &Decision) -> Result<String, StoreError> {
    serde_json::to_string(decision).map_err(|e| StoreError::Backend(format!("encoding a decision: {e}")))
}

fn to_json(value: &serde_json::Value, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Backend(format!("encoding the {what}: {e}")))
}

/// The latest approval of every `running` run, when it is resolved (see the trait).
pub(crate) async fn decided_calls(pool: &SqlitePool) -> Result<Vec<DecidedCall>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {}, a.checkpoint, a.started_at
         FROM approvals a JOIN runs r ON r.id = a.run_id
         WHERE r.status IN ('running', 'interrupted') AND a.status = 'resolved'
           AND NOT EXISTS (SELECT 1 FROM approvals b WHERE b.run_id = a.run_id AND b.created_at > a.created_at)",
        PREFIXED_COLUMNS
    ))
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            Ok(DecidedCall {
                approval: rows::approval(row)?,
                checkpoint: row.json("checkpoint")?,
                started_at: row.int_opt("started_at")?,
            })
        })
        .collect()
}

/// Sets the "tool call started" mark once; a second mark keeps the first time.
pub(crate) async fn mark_started(pool: &SqlitePool, id: &ApprovalId, at: Millis) -> Result<(), StoreError> {
    sqlx::query("UPDATE approvals SET started_at = ? WHERE id = ? AND started_at IS NULL")
        .bind(at)
        .bind(id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// The approval columns of `rows::approval`, read through the alias `a`.
const PREFIXED_COLUMNS: &str = "a.id, a.run_id, a.session_id, a.owner_id, a.tool_call_id, a.tool, a.kind, a.payload, \
    a.status, a.decision, a.message, a.actor, a.created_at, a.expires_at, a.resolved_at";
