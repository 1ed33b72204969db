//! The engine's clock: what says when a session lease, an approval, an idempotency
//! claim or an idle session has expired, and what the timers that act on it (lease
//! renewals, the reaper, approval expiry, the janitor) sleep on.
//!
//! Production runs on the system clock. A test hands the engine a [`ManualClock`]
//! instead and moves time itself: "not expired at TTL − 1 ms, expired at TTL" is then
//! a statement about two instants the test chose, not a race between a 300 ms timer and
//! a loaded machine running other tests in parallel. Nothing on a manual clock moves
//! until the test advances it; every sleeper whose instant has come wakes then.
//!
//! [`Clock`] is a cheap `Clone` handle (the system clock, or a manual one shared by
//! `Arc`), not a trait object: there are exactly two clocks, and a plain type keeps
//! `EngineConfig` `Clone + Debug` without boxing futures.
//!
//! Timestamps are milliseconds since the Unix epoch ([`Millis`]), the unit the store
//! keeps `expires_at` in, so the instant a timer waits for is the very number the store
//! compares.

use spool_protocol::time::{Millis, now_ms};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where the engine reads the time. [`Clock::default`] is the system clock.
#[derive(Clone, Default)]
pub struct Clock {
    /// `None`: the system clock.
    manual: Option<ManualClock>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.manual {
            None => f.write_str("Clock::System"),
            Some(manual) => write!(f, "Clock::Manual({})", manual.now_ms()),
        }
    }
}

impl From<ManualClock> for Clock {
    fn from(manual: ManualClock) -> Self {
        Clock { manual: Some(manual) }
    }
}

impl Clock {
    /// The system clock (wall-clock milliseconds, tokio's timers for sleeping).
    pub fn system() -> Self {
        Clock::default()
    }

    /// The time now, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> Millis {
        match &self.manual {
            None => now_ms(),
            Some(manual) => manual.now_ms(),
        }
    }

    /// Returns once the clock reads `at` or later (at once when it already does).
    pub async fn sleep_until(&self, at: Millis) {
        match &self.manual {
            Some(manual) => manual.reached(at).await,
            // The wall clock may be stepped while tokio's monotonic timer runs, so the
            // wall clock is asked again after each sleep.
            None => loop {
                let left = at.saturating_sub(now_ms());
                if left <= 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(u64::try_from(left).unwrap_or(u64::MAX))).await;
            },
        }
    }

    /// Ticks at `first`, then every `every` after it, on a fixed schedule: the work done
    /// at a tick does not push the next one back. A tick missed (the work took longer
    /// than `every`) is skipped, not made up in a burst. `every` is at least 1 ms.
    pub fn ticks(&self, first: Millis, every: Duration) -> Ticks {
        let every = every.max(Duration::from_millis(1));
        let schedule = match &self.manual {
            None => {
                let wait = u64::try_from(first.saturating_sub(now_ms())).unwrap_or(0);
                let start = tokio::time::Instant::now() + Duration::from_millis(wait);
                let mut interval = tokio::time::interval_at(start, every);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                Schedule::System(interval)
            }
            Some(manual) => Schedule::Manual { clock: manual.clone(), next: first, every: millis(every) },
        };
        Ticks { clock: self.clone(), schedule }
    }
}

/// A duration in whole milliseconds (saturating), as the store counts them.
pub(crate) fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

/// The schedule [`Clock::ticks`] returns.
pub struct Ticks {
    clock: Clock,
    schedule: Schedule,
}

enum Schedule {
    System(tokio::time::Interval),
    Manual { clock: ManualClock, next: Millis, every: Millis },
}

impl Ticks {
    /// Waits for the next tick; returns the clock's time then.
    pub async fn tick(&mut self) -> Millis {
        match &mut self.schedule {
            Schedule::System(interval) => {
                interval.tick().await;
            }
            Schedule::Manual { clock, next, every } => {
                clock.reached(*next).await;
                // The next point of the schedule after now: ticks the test jumped over
                // are skipped, as the system schedule skips missed ones.
                let behind = clock.now_ms().saturating_sub(*next);
                *next = next.saturating_add((behind / *every + 1).saturating_mul(*every));
            }
        }
        self.clock.now_ms()
    }
}

/// A clock only a test moves (see the module docs). Clones share one time.
#[derive(Clone)]
pub struct ManualClock {
    // A watch channel: the time is its value, and every sleeper waits for the value
    // to reach its instant. The sender lives as long as any handle, so a sleeper never
    // sees the channel close while the clock can still move.
    now: Arc<watch::Sender<Millis>>,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: Millis) -> Self {
        ManualClock { now: Arc::new(watch::Sender::new(start)) }
    }

    /// A manual clock reading the wall clock's time now, so the timestamps it stamps
    /// look like any others.
    pub fn starting_now() -> Self {
        Self::new(now_ms())
    }

    pub fn now_ms(&self) -> Millis {
        *self.now.borrow()
    }

    /// Moves the time forward by `by`, waking every sleeper whose instant has come.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now = now.saturating_add(millis(by)));
    }

    /// Moves the time forward to `at`; a time already past stays (the clock never goes
    /// back, as sleepers and expiries assume).
    pub fn advance_to(&self, at: Millis) {
        self.now.send_if_modified(|now| {
            let later = at > *now;
            if later {
                *now = at;
            }
            later
        });
    }

    /// Returns once the time is `at` or later.
    async fn reached(&self, at: Millis) {
        let mut time = self.now.subscribe();
        // Err only when the sender is gone, and `self` holds it.
        let _ = time.wait_for(|now| *now >= at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_sleeper_on_a_manual_clock_wakes_when_its_instant_comes_and_not_before() {
        let manual = ManualClock::new(1_000);
        let clock = Clock::from(manual.clone());
        let mut sleep = Box::pin(clock.sleep_until(1_500));
        assert!((&mut sleep).now_or_never().is_none());
        manual.advance(Duration::from_millis(499));
        assert_eq!(clock.now_ms(), 1_499);
        assert!((&mut sleep).now_or_never().is_none(), "1 ms early");
        manual.advance(Duration::from_millis(1));
        assert!(sleep.now_or_never().is_some(), "at its instant");
        assert!(clock.sleep_until(1_200).now_or_never().is_some(), "an instant already past is no wait");
    }

    #[tokio::test]
    async fn a_manual_clock_never_goes_back() {
        let manual = ManualClock::new(1_000);
        manual.advance_to(900);
        assert_eq!(manual.now_ms(), 1_000);
        manual.advance_to(1_200);
        assert_eq!(manual.now_ms(), 1_200);
    }

    #[tokio::test]
    async fn manual_ticks_keep_their_schedule_and_skip_what_was_jumped_over() {
        let manual = ManualClock::new(0);
        let clock = Clock::from(manual.clone());
        let mut ticks = clock.ticks(100, Duration::from_millis(100));
        assert!(ticks.tick().now_or_never().is_none());
        manual.advance_to(100);
        assert_eq!(ticks.tick().now_or_never(), Some(100));
        // Work at the tick took 30 ms: the next tick is still at 200, not 230.
        manual.advance_to(130);
        assert!(ticks.tick().now_or_never().is_none());
        manual.advance_to(199);
        assert!(ticks.tick().now_or_never().is_none());
        manual.advance_to(200);
        assert_eq!(ticks.tick().now_or_never(), Some(200));
        // A jump over three ticks is one tick, then the schedule goes on at 600.
        manual.advance_to(550);
        assert_eq!(ticks.tick().now_or_never(), Some(550));
        assert!(ticks.tick().now_or_never().is_none());
        manual.advance_to(600);
        assert_eq!(ticks.tick().now_or_never(), Some(600));
    }

    #[tokio::test(start_paused = true)]
    async fn system_ticks_keep_a_fixed_schedule() {
        let clock = Clock::system();
        let mut ticks = clock.ticks(clock.now_ms() + 100, Duration::from_millis(100));
        ticks.tick().await;
        let first = tokio::time::Instant::now();
        // 30 ms of work after the tick does not move the next one (tokio's paused
        // clock: these are exact virtual instants, not a stopwatch).
        tokio::time::sleep(Duration::from_millis(30)).await;
        ticks.tick().await;
        assert_eq!(first.elapsed(), Duration::from_millis(100));
    }
}
