//! Whether a server may be started now: failures in a row (a start that failed, a
//! connection that ended by itself) push the next start back, 1 s doubling to 60 s,
//! and after [`Lifecycle::give_up_after`] of them the server is given up until Spool
//! restarts. Without this a broken server would cost every turn of every session a
//! start (and a server that hangs, the turn's whole wait for tools).
//!
//! A streak ends once the server has stayed up a while ([`STABLE_AFTER`]): a server
//! that crashed four times while a network was down and then ran for hours starts its
//! next streak at one, while one that dies seconds after every start is given up.
//!
//! Pure logic over the times it is handed, so the rules are tested without a clock.

use tokio::time::{Duration, Instant};

/// How long a server must stay up for its failures so far to be forgotten.
pub(crate) const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The timings of a source's servers. [`Default`] is what Spool runs with; tests
/// shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    /// The wait after the first failure; doubled after each further one.
    pub first_backoff: Duration,
    /// The longest wait between two starts.
    pub max_backoff: Duration,
    /// Failures in a row after which the server is not started again.
    pub give_up_after: u32,
    /// How long a session's connection may go without a turn or a call before it is
    /// closed, so that sessions people left do not each keep a server running.
    pub idle_close: Duration,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            give_up_after: 5,
            idle_close: Duration::from_secs(10 * 60),
        }
    }
}

/// Where a server stands as to failures.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Failures in the current streak.
    failures: u32,
    /// The last failure's reason, while the streak lasts.
    reason: Option<String>,
    /// No start before this; `None` with failures is given up.
    retry_at: Option<Instant>,
    /// Since when a connection has been up, when one has been since the last failure.
    up_since: Option<Instant>,
}

/// Whether a start may go ahead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    /// Not before this instant.
    Wait(Instant),
    GivenUp,
}

impl Health {
    pub(crate) fn gate(&self, now: Instant) -> Gate {
        match (self.failures, self.retry_at) {
            (0, _) => Gate::Open,
            (_, None) => Gate::GivenUp,
            (_, Some(at)) if at > now => Gate::Wait(at),
            _ => Gate::Open,
        }
    }

    /// Forgets a streak that was given up on, so the next start goes ahead; whether it
    /// was given up.
    pub(crate) fn forgive(&mut self) -> bool {
        let given_up = self.failures > 0 && self.retry_at.is_none();
        if given_up {
            *self = Health::default();
        }
        given_up
    }

    /// Failures in the current streak.
    pub(crate) fn streak(&self) -> u32 {
        self.failures
    }

    /// A connection started (and listed its tools).
    pub(crate) fn up(&mut self, now: Instant) {
        self.up_since.get_or_insert(now);
    }

    /// A start failed, or a connection ended without Spool closing it.
    pub(crate) fn failed(&mut self, reason: String, now: Instant, lifecycle: &Lifecycle) {
        if self.up_since.take().is_some_and(|since| now.duration_since(since) >= STABLE_AFTER) {
            self.failures = 0;
        }
        self.failures += 1;
        self.reason = Some(reason);
        self.retry_at = (self.failures < lifecycle.give_up_after).then(|| now + backoff(self.failures, lifecycle));
    }

    /// The current streak's last reason and when it is tried again (`None`: given
    /// up); `None` when the server has not failed since it last stayed up.
    pub(crate) fn failure(&self) -> Option<(String, Option<Instant>)> {
        let reason = self.reason.clone().filter(|_| self.failures > 0)?;
        if self.retry_at.is_none() {
            let given_up = format!("{reason} (given up after {} failures in a row)", self.failures);
            return Some((given_up, None));
        }
        Some((reason, self.retry_at))
    }

    /// Whether the streak is over because a connection has stayed up long enough.
    pub(crate) fn settle(&mut self, now: Instant) {
        if self.up_since.is_some_and(|since| now.duration_since(since) >= STABLE_AFTER) {
            self.failures = 0;
            self.reason = None;
            self.retry_at = None;
        }
    }
}

/// The wait after the `failures`th failure in a row: first, doubled, at most max.
fn backoff(failures: u32, lifecycle: &Lifecycle) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    lifecycle.first_backoff.saturating_mul(1 << doublings).min(lifecycle.max_backoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_one_second_to_sixty() {
        let lifecycle = Lifecycle::default();
        let waits: Vec<u64> = (1..=9).map(|n| backoff(n, &lifecycle).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(200, &lifecycle), Duration::from_secs(60));
    }

    #[test]
    fn failures_in_a_row_push_starts_back_then_give_up() {
        let lifecycle = Lifecycle::default();
        let t0 = Instant::now();
        let mut health = Health::default();
        assert_eq!(health.gate(t0), Gate::Open);
        assert_eq!(health.failure(), None);
        let mut now = t0;
        for (n, wait) in [1, 2, 4, 8].into_iter().enumerate() {
            health.failed(format!("exit {n}"), now, &lifecycle);
            let at = now + Duration::from_secs(wait);
            assert_eq!(health.gate(now), Gate::Wait(at));
            assert_eq!(health.failure(), Some((format!("exit {n}"), Some(at))));
            assert_eq!(health.gate(at), Gate::Open);
            now = at;
            // Up, but for less than a minute: the streak goes on.
            health.up(now);
            now += Duration::from_secs(5);
        }
        health.failed("exit 4".into(), now, &lifecycle);
        assert_eq!(health.gate(now + Duration::from_secs(3600)), Gate::GivenUp);
        assert_eq!(health.failure(), Some(("exit 4 (given up after 5 failures in a row)".into(), None)));
    }

    #[test]
    fn a_minute_up_ends_the_streak() {
        let lifecycle = Lifecycle::default();
        let t0 = Instant::now();
        let mut health = Health::default();
        for _ in 0..4 {
            health.failed("down".into(), t0, &lifecycle);
        }
        health.up(t0);
        health.settle(t0 + Duration::from_secs(30));
        assert!(health.failure().is_some(), "half a minute is not enough");
        let later = t0 + STABLE_AFTER;
        health.settle(later);
        assert_eq!((health.failure(), health.gate(later)), (None, Gate::Open));
        // A crash after a long run starts a new streak at one, not at five.
        health.up(later);
        health.failed("crash".into(), later + STABLE_AFTER, &lifecycle);
        assert_eq!(health.gate(later + STABLE_AFTER), Gate::Wait(later + STABLE_AFTER + Duration::from_secs(1)));
    }
}
