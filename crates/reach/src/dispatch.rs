//! The outbox's drain: fan-out, claim under a lease, deliver, record.
//!
//! Channels are the seam between the outbox and the ways out of it: webhooks and
//! Web Push each implement [`Channel`], and the dispatcher knows neither.

use std::sync::Arc;
use std::time::Duration;

use spool_engine::{ClaimedDelivery, DeliveryOutcome, Store, StoredEvent};
use spool_protocol::time::Millis;

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

/// The retry schedule of Standard Webhooks: after a failed first try, wait 5 s, 5 min,
/// 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and 24 h between tries; dead after the last.
pub const DEFAULT_RETRY_SECS: [u64; 9] = [5, 300, 1800, 7200, 18_000, 36_000, 50_400, 72_000, 86_400];

/// How the dispatcher drains the outbox.
#[derive(Clone, Debug)]
pub struct DispatchSettings {
    /// The waits between tries, in order (`[webhooks] retry_secs`); a delivery that
    /// failed once more than this has steps is dead.
    pub retry: Vec<Duration>,
    /// How long a claim holds a delivery: longer than any channel's try takes (a
    /// webhook's timeout), so a lease lapses only when its node died or hung.
    pub lease: Duration,
    /// How often the outbox is looked at when nothing woke the dispatcher.
    pub poll: Duration,
    /// Most events fanned out, and most deliveries claimed, per pass.
    pub batch: u32,
    /// Finished events older than this are deleted, with their deliveries.
    pub retention: Duration,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            retry: DEFAULT_RETRY_SECS.iter().map(|s| Duration::from_secs(*s)).collect(),
            lease: Duration::from_secs(120),
            poll: Duration::from_secs(1),
            batch: 100,
            retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// The outbox's drain on one node. Every node runs one; the store's leases make sure a
/// delivery is tried by one node at a time, and its unique (event, target) rows that
/// an event fanned out twice is delivered once per target.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    node: String,
    channels: Vec<Arc<dyn Channel>>,
    settings: DispatchSettings,
    wake: Arc<tokio::sync::Notify>,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        node: impl Into<String>,
        channels: Vec<Arc<dyn Channel>>,
        settings: DispatchSettings,
    ) -> Dispatcher {
        Dispatcher { store, node: node.into(), channels, settings, wake: Arc::default() }
    }

    /// What wakes the dispatcher before its next poll (a change just wrote an event).
    pub fn waker(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// Drains the outbox until `stop` resolves: a pass whenever woken, else every poll.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut last_prune = Millis::MIN;
        loop {
            let now = spool_protocol::time::now_ms();
            if now.saturating_sub(last_prune) > 3_600_000 {
                last_prune = now;
                let before = now.saturating_sub(millis(self.settings.retention));
                if let Err(error) = self.store.prune_events(before).await {
                    tracing::warn!(%error, "pruning the outbox");
                }
            }
            let busy = match self.pass().await {
                Ok(busy) => busy,
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "draining the outbox");
                    false
                }
            };
            // A full batch means more may be waiting: go on at once.
            if busy {
                continue;
            }
            tokio::select! {
                () = &mut stop => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(self.settings.poll) => {}
            }
        }
    }

    /// One pass: fans out what is new, then tries every due delivery this node could
    /// claim, concurrently. True when a batch was full (more may be waiting).
    pub async fn pass(&self) -> anyhow::Result<bool> {
        let fanned = self.fan_out().await?;
        let now = spool_protocol::time::now_ms();
        let lease_until = now.saturating_add(millis(self.settings.lease));
        let claimed = self.store.claim_deliveries(&self.node, now, lease_until, self.settings.batch).await?;
        let full = fanned >= self.settings.batch as usize || claimed.len() >= self.settings.batch as usize;
        let mut tries = tokio::task::JoinSet::new();
        for claimed in claimed {
            let channel = self.channels.iter().find(|c| claimed.delivery.target.starts_with(c.prefix())).cloned();
            let store = self.store.clone();
            let retry = self.settings.retry.clone();
            tries.spawn(async move { try_once(store, channel, claimed, &retry).await });
        }
        while let Some(done) = tries.join_next().await {
            if let Err(error) = done {
                tracing::error!(%error, "a delivery's try panicked");
            }
        }
        Ok(full)
    }

    /// Gives each new event its deliveries: every channel's targets for it.
    async fn fan_out(&self) -> anyhow::Result<usize> {
        let events = self.store.unfanned_events(self.settings.batch).await?;
        for stored in &events {
            let event = outbox_event(stored);
            let mut targets = Vec::new();
            for channel in &self.channels {
                targets.extend(channel.targets(&event).await?);
            }
            self.store.fan_out(&stored.id, &targets, spool_protocol::time::now_ms()).await?;
        }
        Ok(events.len())
    }
}

/// One try at one claimed delivery, recorded under its claim.
async fn try_once(
    store: Arc<dyn Store>,
    channel: Option<Arc<dyn Channel>>,
    claimed: ClaimedDelivery,
    retry: &[Duration],
) {
    let ClaimedDelivery { claim, delivery } = claimed;
    let attempt = match channel {
        Some(channel) => channel.deliver(&outbox_event(&delivery.event), &delivery.target, claim.attempt).await,
        // Configured on another node, or no longer configured anywhere.
        None => Attempt::Dead { status: None, reason: format!("no channel on this node takes {}", delivery.target) },
    };
    let now = spool_protocol::time::now_ms();
    let outcome = outcome(attempt, claim.attempt, retry, now);
    match store.record_delivery(&claim, &outcome, now).await {
        Ok(true) => tracing::debug!(delivery = %claim.id, target = %delivery.target, ?outcome, "delivery tried"),
        Ok(false) => tracing::warn!(delivery = %claim.id, "a delivery's lease lapsed before its try was recorded"),
        Err(error) => tracing::warn!(delivery = %claim.id, %error, "recording a delivery's try"),
    }
}

/// What a try means for its delivery: a failure is tried again after the schedule's
/// wait for this attempt (or the receiver's `Retry-After`, if longer), with up to 10 %
/// jitter so receivers that failed together are not retried together; past the
/// schedule's end it is dead.
pub fn outcome(attempt: Attempt, number: u32, retry: &[Duration], now: Millis) -> DeliveryOutcome {
    match attempt {
        Attempt::Delivered { status } => DeliveryOutcome::Delivered { status: Some(status) },
        Attempt::Dead { status, reason } => DeliveryOutcome::Dead { status, error: reason },
        Attempt::Skipped { reason } => DeliveryOutcome::Skipped { reason },
        Attempt::Retry { status, error, after } => match retry.get(number.saturating_sub(1) as usize) {
            None => DeliveryOutcome::Dead { status, error },
            Some(wait) => {
                let wait = millis(*wait);
                let jitter = (wait / 10).max(1);
                let wait = wait + i64::from(ulid::Ulid::new().random() as u32) % jitter;
                let wait = wait.max(after.map(millis).unwrap_or(0));
                DeliveryOutcome::Retry { next_at: now.saturating_add(wait), status, error }
            }
        },
    }
}

/// The wait a receiver asked for in `Retry-After` (in seconds; the HTTP-date form is
/// not read), at most a day, so a receiver cannot park a delivery for ever.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let secs = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs.min(24 * 60 * 60)))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The channels' view of a stored event.
pub fn outbox_event(stored: &StoredEvent) -> OutboxEvent {
    OutboxEvent {
        id: stored.id.to_string(),
        kind: stored.kind.as_str().to_owned(),
        owner: stored.owner_id.to_string(),
        session: stored.session_id.as_ref().map(ToString::to_string),
        run: stored.run_id.as_ref().map(ToString::to_string),
        approval: stored.approval_id.as_ref().map(ToString::to_string),
        data: stored.data.clone(),
        created_at: stored.created_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_follow_the_schedule_then_die_and_retry_after_is_honoured() {
        let retry = [Duration::from_secs(5), Duration::from_secs(300)];
        let fail = |after| Attempt::Retry { status: Some(500), error: "HTTP 500".into(), after };
        let DeliveryOutcome::Retry { next_at, .. } = outcome(fail(None), 1, &retry, 0) else { panic!("retried") };
        assert!((5_000..5_500).contains(&next_at), "{next_at}");
        let DeliveryOutcome::Retry { next_at, .. } = outcome(fail(None), 2, &retry, 0) else { panic!("retried") };
        assert!((300_000..330_000).contains(&next_at), "{next_at}");
        assert!(matches!(outcome(fail(None), 3, &retry, 0), DeliveryOutcome::Dead { .. }), "dead after the last");
        let later = Some(Duration::from_secs(60));
        let DeliveryOutcome::Retry { next_at, .. } = outcome(fail(later), 1, &retry, 0) else { panic!("retried") };
        assert_eq!(next_at, 60_000, "the receiver asked for a minute");
    }
}
