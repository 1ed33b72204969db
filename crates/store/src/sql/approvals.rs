//! Approvals: a run stopped on one tool call until a person decides.
//!
//! An approval is written together with its run and the run's checkpoint in one
//! transaction (`interrupt`), so a crash can never leave an interrupted run without
//! the approval that would resume it, or an approval for a run that is still running.
//! Deciding is one conditional `UPDATE … WHERE status = 'pending'` (`settle`), and the
//! row count is the verdict: among any number of racing deciders (a person, a second
//! tab, the expiry timer, another node) exactly one sees a changed row and the others
//! write nothing. SQLite gets there by running one writer at a time; PostgreSQL (READ
//! COMMITTED) makes a second updater wait on the first one's row lock, then re-check
//! the condition against the committed row and find it no longer pending. Superseding
//! (the call's file changed before it ran) is the same conditional update, together
//! with the replacing approval, in one transaction.
//!
//! Each of these writes its outbox event in its own transaction (issue 41): a request
//! (`approval.requested` or `question.asked`) with the insert, `approval.resolved` with
//! the settle or supersede that won, and none for a loser, which wrote nothing.

use super::dialect::Db;
use super::dialect::Pool;
use super::outbox;
use super::runs;
use crate::error::{db_error, parse_id};
use crate::rows::{self, Columns, approval_kind_str};
use spool_engine::{DecidedCall, LeaseFence, StoreError, Supersede};
use spool_protocol::time::Millis;
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, Decision, ProjectId, Run, SessionId, UserId};
use sqlx::types::Json;

const COLUMNS: &str = "id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision, message,
                       actor, created_at, expires_at, resolved_at";

pub(crate) async fn interrupt(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    run: &Run,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    insert(&mut tx, approval, checkpoint).await?;
    runs::update(&mut *tx, run).await?;
    outbox::write_requested(&mut tx, approval).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(())
}

/// The old approval's conditional update (atomic for the same reasons as `settle`, so of
/// two supersedes, or a supersede and a settle, exactly one sees a changed row), the
/// new approval and the run, all or nothing.
pub(crate) async fn supersede(
    pool: &Pool,
    old: &Supersede<'_>,
    run: &Run,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let replaced = sqlx::query(&format!(
        "UPDATE approvals SET status = 'superseded', actor = $1, resolved_at = $2
         WHERE id = $3 AND status = $4 AND started_at IS NULL
         RETURNING {COLUMNS}"
    ))
    .bind(old.actor.map(|a| a.as_str()))
    .bind(old.at)
    .bind(old.id.as_str())
    .bind(old.from.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    let Some(replaced) = replaced else {
        return Ok(false);
    };
    // Told as resolved only when a person had not decided it yet: a decision a crash
    // kept from running was told when it was made.
    if old.from == ApprovalStatus::Pending {
        outbox::write_resolved(&mut tx, &rows::approval(&replaced)?).await?;
    }
    insert(&mut tx, approval, checkpoint).await?;
    runs::update(&mut *tx, run).await?;
    outbox::write_requested(&mut tx, approval).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(true)
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, Db>,
    approval: &Approval,
    checkpoint: &serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO approvals (id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status,
                                decision, message, actor, created_at, expires_at, resolved_at, checkpoint)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    )
    .bind(approval.id.as_str())
    .bind(approval.run_id.as_str())
    .bind(approval.session_id.as_str())
    .bind(approval.owner_id.as_str())
    .bind(&approval.tool_call_id)
    .bind(&approval.tool)
    .bind(approval_kind_str(approval.kind))
    .bind(Json(&approval.payload))
    .bind(approval.status.as_str())
    .bind(approval.decision.as_ref().map(Json))
    .bind(approval.message.as_deref())
    .bind(approval.actor.as_ref().map(|a| a.as_str()))
    .bind(approval.created_at)
    .bind(approval.expires_at)
    .bind(approval.resolved_at)
    .bind(Json(checkpoint))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn get(pool: &Pool, id: &ApprovalId) -> Result<Option<(Approval, serde_json::Value)>, StoreError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS}, checkpoint FROM approvals WHERE id = $1"))
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
    row.map(|row| Ok((rows::approval(&row)?, row.json("checkpoint")?))).transpose()
}

/// Oldest first; the id breaks ties within a millisecond (ids sort by creation).
pub(crate) async fn pending(pool: &Pool, session: &SessionId) -> Result<Vec<Approval>, StoreError> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE session_id = $1 AND status = 'pending' ORDER BY created_at, id"
    ))
    .bind(session.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::approval)
    .collect()
}

/// The project's sessions with a pending approval. Pending approvals are few (each
/// parks a run), so this walks `approvals_by_status` and joins, whatever the project's size.
pub(crate) async fn waiting_sessions(pool: &Pool, project: &ProjectId) -> Result<Vec<SessionId>, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT a.session_id FROM approvals a JOIN sessions s ON s.id = a.session_id
         WHERE a.status = 'pending' AND s.project_id = $1",
    )
    .bind(project.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    ids.iter().map(|id| parse_id(id)).collect()
}

pub(crate) async fn all_pending(pool: &Pool) -> Result<Vec<Approval>, StoreError> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM approvals WHERE status = 'pending' ORDER BY created_at, id"))
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(rows::approval)
        .collect()
}

/// True iff this call moved the approval out of `pending`; the row the one conditional
/// statement returns is the verdict, and what the `approval.resolved` event written in
/// the same transaction tells (a loser gets no row and writes nothing). Settling *to*
/// `pending` with a time is refused by the table's CHECK (a pending approval has no
/// outcome).
pub(crate) async fn settle(
    pool: &Pool,
    id: &ApprovalId,
    status: ApprovalStatus,
    decision: Option<&Decision>,
    message: Option<&str>,
    actor: Option<&UserId>,
    at: Millis,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let settled = sqlx::query(&format!(
        "UPDATE approvals SET status = $1, decision = $2, message = $3, actor = $4, resolved_at = $5
         WHERE id = $6 AND status = 'pending'
         RETURNING {COLUMNS}"
    ))
    .bind(status.as_str())
    // The decision as its wire JSON (`"once"`, `{"fill": {…}}`), so the column reads
    // the same as the API.
    .bind(decision.map(Json))
    .bind(message)
    .bind(actor.map(|a| a.as_str()))
    .bind(at)
    .bind(id.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    let Some(settled) = settled else {
        return Ok(false);
    };
    outbox::write_resolved(&mut tx, &rows::approval(&settled)?).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(true)
}

/// The latest approval of every `running` run, when it is resolved (see the trait).
pub(crate) async fn decided_calls(pool: &Pool) -> Result<Vec<DecidedCall>, StoreError> {
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
/// Held to `fence` when a run writes it (see `leases`).
pub(crate) async fn mark_started(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    id: &ApprovalId,
    at: Millis,
) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    sqlx::query("UPDATE approvals SET started_at = $1 WHERE id = $2 AND started_at IS NULL")
        .bind(at)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

/// The approval columns of `rows::approval`, read through the alias `a`.
const PREFIXED_COLUMNS: &str = "a.id, a.run_id, a.session_id, a.owner_id, a.tool_call_id, a.tool, a.kind, a.payload, \
    a.status, a.decision, a.message, a.actor, a.created_at, a.expires_at, a.resolved_at";
