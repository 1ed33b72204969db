//! The outbox (issue 41): events written with the changes they tell of, and their
//! deliveries, one row per (event, target), drained by every node under leases.
//!
//! The `write_*` functions take the transaction of the change (the session's insert,
//! the approval's settle, the run's settle): an event exists exactly when its change
//! committed. Their `data` comes from `spool_protocol::reach`, the one place that
//! decides what leaves Spool.
//!
//! Draining is three conditional statements, atomic on both databases for the reasons
//! `sql/mod.rs` gives: fan-out inserts `ON CONFLICT (event_id, target) DO NOTHING`, so
//! two nodes fanning one event out write each row once; a claim takes due, unleased
//! rows and leases them in one `UPDATE` (PostgreSQL skips rows another claimer has
//! locked, `FOR UPDATE SKIP LOCKED`, where SQLite runs one writer at a time); a record
//! changes the row only while the claim's lease holds (same node, same attempt, not
//! lapsed), so a node that took too long cannot overwrite what the next claimer did.

use super::dialect::{self, Db, Pool};
use crate::error::{db_error, from_db_int, parse_id};
use crate::rows::Columns;
use spool_engine::{
    ClaimedDelivery, Delivery, DeliveryClaim, DeliveryOutcome, DeliveryStatus, DisabledWebhook, StoreError, StoredEvent,
};
use spool_protocol::reach::{self, EventType};
use spool_protocol::time::Millis;
use spool_protocol::{Approval, ApprovalId, DeliveryId, EventId, Run, RunId, Session, SessionId, UserId};
use sqlx::types::Json;

const EVENT_COLUMNS: &str = "id, type, owner_id, session_id, run_id, approval_id, data, created_at";

/// A delivery's columns through `d` and its event's through `e`, the event's `id` and
/// `created_at` renamed so the two do not clash (see [`delivery`]).
const JOINED_COLUMNS: &str = "d.id, d.target, d.status, d.attempts, d.next_at, d.last_status, d.last_error,
    d.created_at, d.delivered_at, e.id AS event_id, e.type, e.owner_id, e.session_id, e.run_id, e.approval_id,
    e.data, e.created_at AS event_created_at";

/// An event about to be written: who it is for and what it tells.
struct NewEvent<'a> {
    kind: EventType,
    owner: &'a UserId,
    session: Option<&'a SessionId>,
    run: Option<&'a RunId>,
    approval: Option<&'a ApprovalId>,
    data: serde_json::Value,
    at: Millis,
}

async fn write(tx: &mut sqlx::Transaction<'_, Db>, event: NewEvent<'_>) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO events (id, type, owner_id, session_id, run_id, approval_id, data, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(EventId::new().as_str())
    .bind(event.kind.as_str())
    .bind(event.owner.as_str())
    .bind(event.session.map(SessionId::as_str))
    .bind(event.run.map(RunId::as_str))
    .bind(event.approval.map(ApprovalId::as_str))
    .bind(Json(&event.data))
    .bind(event.at)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// `session.created`, in the session's insert.
pub(crate) async fn write_session_created(
    tx: &mut sqlx::Transaction<'_, Db>,
    session: &Session,
) -> Result<(), StoreError> {
    let event = NewEvent {
        kind: EventType::SessionCreated,
        owner: &session.owner_id,
        session: Some(&session.id),
        run: None,
        approval: None,
        data: reach::session_created(session),
        at: session.created_at,
    };
    write(tx, event).await
}

/// `approval.requested` or `question.asked`, in the approval's insert.
pub(crate) async fn write_requested(tx: &mut sqlx::Transaction<'_, Db>, approval: &Approval) -> Result<(), StoreError> {
    let (kind, data) = reach::approval_requested(approval);
    write(tx, approval_event(kind, approval, data, approval.created_at)).await
}

/// `approval.resolved`, in the settle that won.
pub(crate) async fn write_resolved(tx: &mut sqlx::Transaction<'_, Db>, approval: &Approval) -> Result<(), StoreError> {
    let data = reach::approval_resolved(approval);
    let at = approval.resolved_at.unwrap_or(approval.created_at);
    write(tx, approval_event(EventType::ApprovalResolved, approval, data, at)).await
}

/// `run.settled`, in the run's settle that won.
pub(crate) async fn write_settled(tx: &mut sqlx::Transaction<'_, Db>, run: &Run) -> Result<(), StoreError> {
    let event = NewEvent {
        kind: EventType::RunSettled,
        owner: &run.owner_id,
        session: Some(&run.session_id),
        run: Some(&run.id),
        approval: None,
        data: reach::run_settled(run),
        at: run.ended_at.unwrap_or(run.updated_at),
    };
    write(tx, event).await
}

fn approval_event(kind: EventType, approval: &Approval, data: serde_json::Value, at: Millis) -> NewEvent<'_> {
    NewEvent {
        kind,
        owner: &approval.owner_id,
        session: Some(&approval.session_id),
        run: Some(&approval.run_id),
        approval: Some(&approval.id),
        data,
        at,
    }
}

pub(crate) async fn unfanned(pool: &Pool, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
    sqlx::query(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE {} ORDER BY created_at, id LIMIT $1",
        dialect::UNFANNED
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(|row| event(row, "id", "created_at"))
    .collect()
}

pub(crate) async fn fan_out(
    pool: &Pool,
    event: &EventId,
    targets: &[(String, Millis)],
    now: Millis,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let mut new = 0;
    for (target, due) in targets {
        let done = sqlx::query(
            "INSERT INTO deliveries (id, event_id, target, status, attempts, next_at, created_at)
             VALUES ($1, $2, $3, 'pending', 0, $4, $5)
             ON CONFLICT (event_id, target) DO NOTHING",
        )
        .bind(DeliveryId::new().as_str())
        .bind(event.as_str())
        .bind(target)
        .bind(due)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        new += done.rows_affected();
    }
    sqlx::query("UPDATE events SET fanned_out = $1 WHERE id = $2")
        .bind(true)
        .bind(event.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok(new)
}

pub(crate) async fn claim(
    pool: &Pool,
    node: &str,
    now: Millis,
    lease_until: Millis,
    limit: u32,
) -> Result<Vec<ClaimedDelivery>, StoreError> {
    let claimed: Vec<String> = sqlx::query_scalar(dialect::CLAIM_DELIVERIES)
        .bind(node)
        .bind(lease_until)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await
        .map_err(db_error)?;
    let mut out = Vec::with_capacity(claimed.len());
    for id in claimed {
        // Read back joined with its event; the lease keeps the row as claimed meanwhile.
        let row = sqlx::query(&format!(
            "SELECT {JOINED_COLUMNS} FROM deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = $1"
        ))
        .bind(&id)
        .fetch_optional(pool)
        .await
        .map_err(db_error)?;
        // Gone in between: its event was pruned or deleted by an operator.
        let Some(row) = row else { continue };
        let delivery = delivery(&row)?;
        let claim = DeliveryClaim { id: delivery.id.clone(), node: node.to_owned(), attempt: delivery.attempts };
        out.push(ClaimedDelivery { claim, delivery });
    }
    Ok(out)
}

pub(crate) async fn record(
    pool: &Pool,
    claim: &DeliveryClaim,
    outcome: &DeliveryOutcome,
    now: Millis,
) -> Result<bool, StoreError> {
    let (status, next_at, last_status, error, delivered_at) = match outcome {
        DeliveryOutcome::Delivered { status } => (DeliveryStatus::Delivered, None, *status, None, Some(now)),
        DeliveryOutcome::Retry { next_at, status, error } => {
            (DeliveryStatus::Pending, Some(*next_at), *status, Some(error.as_str()), None)
        }
        DeliveryOutcome::Dead { status, error } => (DeliveryStatus::Dead, None, *status, Some(error.as_str()), None),
        DeliveryOutcome::Skipped { reason } => (DeliveryStatus::Skipped, None, None, Some(reason.as_str()), None),
    };
    let done = sqlx::query(
        "UPDATE deliveries SET status = $1, next_at = COALESCE($2, next_at), last_status = $3, last_error = $4,
                               delivered_at = $5, lease_node = NULL, lease_until = NULL
         WHERE id = $6 AND status = 'pending' AND lease_node = $7 AND attempts = $8 AND lease_until > $9",
    )
    .bind(status.as_str())
    .bind(next_at)
    .bind(last_status.map(i64::from))
    .bind(error)
    .bind(delivered_at)
    .bind(claim.id.as_str())
    .bind(&claim.node)
    .bind(i64::from(claim.attempt))
    .bind(now)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn list(
    pool: &Pool,
    owner: Option<&UserId>,
    status: Option<DeliveryStatus>,
    limit: u32,
) -> Result<Vec<Delivery>, StoreError> {
    sqlx::query(&format!(
        "SELECT {JOINED_COLUMNS} FROM deliveries d JOIN events e ON e.id = d.event_id
         WHERE ($1 IS NULL OR e.owner_id = $1) AND ($2 IS NULL OR d.status = $2)
         ORDER BY d.created_at DESC, d.id DESC LIMIT $3"
    ))
    .bind(owner.map(UserId::as_str))
    .bind(status.map(DeliveryStatus::as_str))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(delivery)
    .collect()
}

pub(crate) async fn replay(
    pool: &Pool,
    id: &DeliveryId,
    owner: Option<&UserId>,
    now: Millis,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE deliveries SET status = 'pending', attempts = 0, next_at = $1, lease_node = NULL, lease_until = NULL,
                               delivered_at = NULL
         WHERE id = $2 AND status <> 'pending'
           AND ($3 IS NULL OR event_id IN (SELECT id FROM events WHERE owner_id = $3))",
    )
    .bind(now)
    .bind(id.as_str())
    .bind(owner.map(UserId::as_str))
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

/// Events older than `before` go once fanned out and with no delivery still pending;
/// their deliveries go with them (`ON DELETE CASCADE`).
pub(crate) async fn prune(pool: &Pool, before: Millis) -> Result<u64, StoreError> {
    let done = sqlx::query(&format!(
        "DELETE FROM events WHERE created_at < $1 AND NOT ({})
           AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 'pending')",
        dialect::UNFANNED
    ))
    .bind(before)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(done.rows_affected())
}

pub(crate) async fn of_session(pool: &Pool, session: &SessionId) -> Result<Vec<StoredEvent>, StoreError> {
    sqlx::query(&format!("SELECT {EVENT_COLUMNS} FROM events WHERE session_id = $1 ORDER BY created_at, id"))
        .bind(session.as_str())
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| event(row, "id", "created_at"))
        .collect()
}

/// Read by the decision's push, once per browser. No index leads with `approval_id`:
/// the events table holds what its retention keeps, and this is one look per decision.
pub(crate) async fn ask_delivery(
    pool: &Pool,
    approval: &ApprovalId,
    target: &str,
) -> Result<Option<Delivery>, StoreError> {
    let asks = [EventType::ApprovalRequested.as_str(), EventType::QuestionAsked.as_str()];
    sqlx::query(&format!(
        "SELECT {JOINED_COLUMNS} FROM deliveries d JOIN events e ON e.id = d.event_id
         WHERE e.approval_id = $1 AND d.target = $2 AND e.type IN ($3, $4)
         ORDER BY e.created_at DESC, e.id DESC LIMIT 1"
    ))
    .bind(approval.as_str())
    .bind(target)
    .bind(asks[0])
    .bind(asks[1])
    .fetch_optional(pool)
    .await
    .map_err(db_error)?
    .as_ref()
    .map(delivery)
    .transpose()
}

pub(crate) async fn disable_webhook(pool: &Pool, name: &str, reason: &str, at: Millis) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO webhook_endpoints (name, disabled_at, reason) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET disabled_at = excluded.disabled_at, reason = excluded.reason
         WHERE webhook_endpoints.disabled_at IS NULL",
    )
    .bind(name)
    .bind(at)
    .bind(reason)
    .execute(pool)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(crate) async fn enable_webhook(pool: &Pool, name: &str) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM webhook_endpoints WHERE name = $1 AND disabled_at IS NOT NULL")
        .bind(name)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn disabled_webhooks(pool: &Pool) -> Result<Vec<DisabledWebhook>, StoreError> {
    sqlx::query("SELECT name, disabled_at, reason FROM webhook_endpoints WHERE disabled_at IS NOT NULL ORDER BY name")
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(|row| {
            Ok(DisabledWebhook {
                name: row.text("name")?,
                disabled_at: row.int("disabled_at")?,
                reason: row.text_opt("reason")?.unwrap_or_default(),
            })
        })
        .collect()
}

/// An event from a row, its id and creation time read from the columns named.
fn event(row: &impl Columns, id: &str, created_at: &str) -> Result<StoredEvent, StoreError> {
    let kind = row.text("type")?;
    Ok(StoredEvent {
        id: parse_id(&row.text(id)?)?,
        kind: EventType::parse(&kind)
            .ok_or_else(|| StoreError::Backend(format!("stored event type is unknown: {kind}")))?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        session_id: row.text_opt("session_id")?.map(|s| parse_id(&s)).transpose()?,
        run_id: row.text_opt("run_id")?.map(|s| parse_id(&s)).transpose()?,
        approval_id: row.text_opt("approval_id")?.map(|s| parse_id(&s)).transpose()?,
        data: row.json("data")?,
        created_at: row.int(created_at)?,
    })
}

/// A delivery from a row of [`JOINED_COLUMNS`].
fn delivery(row: &impl Columns) -> Result<Delivery, StoreError> {
    let status = row.text("status")?;
    Ok(Delivery {
        id: parse_id(&row.text("id")?)?,
        event: event(row, "event_id", "event_created_at")?,
        target: row.text("target")?,
        status: DeliveryStatus::parse(&status)
            .ok_or_else(|| StoreError::Backend(format!("stored delivery status is unknown: {status}")))?,
        attempts: u32::try_from(from_db_int(row.int("attempts")?, "attempts")?)
            .map_err(|_| StoreError::Backend("stored attempts out of range".into()))?,
        next_at: row.int("next_at")?,
        last_status: row.int_opt("last_status")?.and_then(|s| u16::try_from(s).ok()),
        last_error: row.text_opt("last_error")?,
        created_at: row.int("created_at")?,
        delivered_at: row.int_opt("delivered_at")?,
    })
}
