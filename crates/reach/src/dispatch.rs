//! The outbox's drain: fan-out, claim under a lease, deliver, record.
//!
//! Channels are the seam between the outbox and the ways out of it: webhooks and
//! Web Push each implement [`Channel`], and the dispatcher knows neither.

use std::time::Duration;

use spool_protocol::Millis;

/// One event as the outbox stores it; `data` is the event's public JSON (ids, kinds,
/// redacted summaries, never message text or raw arguments).
#[derive(Clone, Debug)]
pub struct OutboxEvent {
    /// `msg_<ulid>`: the same on every try (Standard Webhooks' `webhook-id`).
    pub id: String,
    /// `session.created`, `approval.requested`, `approval.resolved`,
    /// `question.asked`, `run.settled`.
    pub kind: String,
    pub owner: String,
    pub session: Option<String>,
    pub run: Option<String>,
    pub approval: Option<String>,
    pub data: serde_json::Value,
    pub created_at: Millis,
}

/// How one try at a delivery went.
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt {
    /// Done: never tried again.
    Delivered { status: u16 },
    /// Try again later: after `after` if the other side said so (`Retry-After`),
    /// else on the backoff schedule; past the last step it is dead.
    Retry { status: Option<u16>, error: String, after: Option<Duration> },
    /// Never again, kept on the dead-letter list (an operator may replay it).
    Dead { status: Option<u16>, reason: String },
    /// Nothing to send any more (the approval was decided before a delayed push was
    /// due, or someone is watching): finished, not an error.
    Skipped { reason: String },
}

/// A way out of the outbox. The dispatcher owns fan-out rows, leases, retries and
/// backoff; a channel says where an event goes and makes one try.
#[async_trait::async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The target prefix this channel owns: `"webhook:"` or `"push:"`.
    fn prefix(&self) -> &'static str;

    /// Where `event` goes: full target names (`webhook:ci`, `push:psub_…`) and when
    /// each is first due (a push for an approval may wait a few seconds to see if
    /// someone answers first). Called once per event on some node; the rows it leads
    /// to are unique per (event, target), so a repeat is harmless.
    async fn targets(&self, event: &OutboxEvent) -> anyhow::Result<Vec<(String, Millis)>>;

    /// One try at delivering `event` to `target`; `attempt` counts from 1.
    async fn deliver(&self, event: &OutboxEvent, target: &str, attempt: u32) -> Attempt;
}
