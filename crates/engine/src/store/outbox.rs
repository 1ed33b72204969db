//! The outbox (issue 41): events the store wrote with the changes they tell of, and
//! their deliveries, one per (event, target), drained by every node under leases.
//!
//! The events themselves are written by the other kinds' methods, in their
//! transactions (`insert_session`, `interrupt_run`, `supersede_approval`,
//! `settle_approval`, `update_run`/`settle_run` of a run's end, `fail_running_runs`);
//! this kind reads them, fans them out and keeps their deliveries.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::reach::EventType;
use spool_protocol::*;

#[async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// Up to `limit` events no node has fanned out yet, oldest first.
    async fn unfanned_events(&self, limit: u32) -> Result<Vec<StoredEvent>, StoreError>;
    /// Writes the event's deliveries, one per `(target, first due)`, and marks it fanned
    /// out, in ONE transaction. A target the event already has keeps its row (`UNIQUE
    /// (event_id, target)`), so two nodes fanning one event out write each row once.
    /// Returns how many rows were new.
    async fn fan_out(
        &self,
        event: &EventId,
        targets: &[(String, time::Millis)],
        now: time::Millis,
    ) -> Result<u64, StoreError>;
    /// Claims up to `limit` pending deliveries that are due at `now` and not under
    /// another node's lease: each gets `node`'s lease until `lease_until` and one more
    /// attempt. Two claimers never get the same delivery (PostgreSQL skips the rows
    /// another claimer holds; SQLite runs one writer at a time).
    async fn claim_deliveries(
        &self,
        node: &str,
        now: time::Millis,
        lease_until: time::Millis,
        limit: u32,
    ) -> Result<Vec<ClaimedDelivery>, StoreError>;
    /// Records how the claimed try went, only while `claim`'s lease still holds (same
    /// node, same attempt, not lapsed at `now`): a node whose lease lapsed (another may
    /// be trying the delivery already) changes nothing. Returns whether it recorded.
    async fn record_delivery(
        &self,
        claim: &DeliveryClaim,
        outcome: &DeliveryOutcome,
        now: time::Millis,
    ) -> Result<bool, StoreError>;
    /// Deliveries, newest first, at most `limit`: of `owner`'s events only, when given
    /// (what a user may see of the outbox), in `status` only, when given.
    async fn list_deliveries(
        &self,
        owner: Option<&UserId>,
        status: Option<DeliveryStatus>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// Sends a delivery that is not pending (dead, usually) again from its first try:
    /// pending, no attempts, due `now`, under the same event id. Of `owner`'s events
    /// only, when given. Returns false when there is no such delivery, or it is pending.
    async fn replay_delivery(
        &self,
        id: &DeliveryId,
        owner: Option<&UserId>,
        now: time::Millis,
    ) -> Result<bool, StoreError>;
    /// Deletes events created before `before` whose deliveries are all finished (with
    /// their deliveries); returns how many events went.
    async fn prune_events(&self, before: time::Millis) -> Result<u64, StoreError>;
    /// The events written about a session, oldest first.
    async fn session_events(&self, session: &SessionId) -> Result<Vec<StoredEvent>, StoreError>;
    /// The delivery to `target` of the latest ask about `approval` (its
    /// `approval.requested` or `question.asked`), if that ask was fanned out there: what
    /// the push of its decision asks first (a browser never told of an ask is not told
    /// of its decision).
    async fn ask_delivery(&self, approval: &ApprovalId, target: &str) -> Result<Option<Delivery>, StoreError>;
    /// Marks a configured webhook disabled (its receiver answered 410 Gone), unless it
    /// is already: the first reason stays.
    async fn disable_webhook(&self, name: &str, reason: &str, at: time::Millis) -> Result<(), StoreError>;
    /// Enables a disabled webhook again; false when it was not disabled.
    async fn enable_webhook(&self, name: &str) -> Result<bool, StoreError>;
    /// The disabled webhooks: name, when, why.
    async fn disabled_webhooks(&self) -> Result<Vec<DisabledWebhook>, StoreError>;
}

/// One event as the outbox keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub id: EventId,
    pub kind: EventType,
    pub owner_id: UserId,
    pub session_id: Option<SessionId>,
    pub run_id: Option<RunId>,
    pub approval_id: Option<ApprovalId>,
    /// The event's public JSON (see `spool_protocol::reach`).
    pub data: serde_json::Value,
    pub created_at: time::Millis,
}

/// Where a delivery is: waiting for its next try, done, given up on (an operator may
/// replay it), or finished with nothing to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    Pending,
    Delivered,
    Dead,
    Skipped,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Dead => "dead",
            DeliveryStatus::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryStatus> {
        [DeliveryStatus::Pending, DeliveryStatus::Delivered, DeliveryStatus::Dead, DeliveryStatus::Skipped]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// One delivery with its event.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub event: StoredEvent,
    /// `webhook:<name>` or `push:<subscription>`.
    pub target: String,
    pub status: DeliveryStatus,
    /// Tries made (or begun) so far.
    pub attempts: u32,
    pub next_at: time::Millis,
    /// The last try's HTTP status, if it got one.
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: time::Millis,
    pub delivered_at: Option<time::Millis>,
}

/// What a claim holds: the delivery, under this node's lease, at this attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryClaim {
    pub id: DeliveryId,
    pub node: String,
    /// The attempt this claim made (counting from 1).
    pub attempt: u32,
}

/// A claimed delivery: the claim and the delivery as it was claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedDelivery {
    pub claim: DeliveryClaim,
    pub delivery: Delivery,
}

/// How a try went, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOutcome {
    Delivered {
        status: Option<u16>,
    },
    /// Pending again, due at `next_at`.
    Retry {
        next_at: time::Millis,
        status: Option<u16>,
        error: String,
    },
    Dead {
        status: Option<u16>,
        error: String,
    },
    Skipped {
        reason: String,
    },
}

/// A webhook whose receiver said it is gone.
#[derive(Debug, Clone, PartialEq)]
pub struct DisabledWebhook {
    pub name: String,
    pub disabled_at: time::Millis,
    pub reason: String,
}
