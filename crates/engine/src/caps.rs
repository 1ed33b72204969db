//! Per-user caps on what one user can make the server hold: projects, sessions (a
//! creation rate and a total of those not archived) and queued prompts across all their
//! sessions (a count and bytes of text). Each refusal is a 429 with its own code, so a
//! client can tell which cap it met.
//!
//! Why: a token holder could otherwise create sessions and queue prompts without end
//! (300 sessions in 0.4 s, 40 MiB queued in 8 s), filling the store and every other
//! user's share of it. The defaults are far above what a person uses — a busy person
//! opens a few sessions an hour — and an operator can raise or lower each one
//! (`spool serve --max-sessions-per-user …`).
//!
//! The creation rate is a token bucket per user, kept in memory on this node and read
//! on the engine's clock (tests move it): `session_burst` sessions at once, then
//! `sessions_per_minute`. On a cluster each node keeps its own bucket, so a user may
//! create up to that many times the rate across nodes; the totals are counted in the
//! store and hold for the whole cluster (give or take requests racing on two nodes).

use crate::error::EngineError;
use spool_protocol::UserId;
use spool_protocol::time::Millis;
use std::collections::HashMap;
use std::sync::Mutex;

/// What one user may hold (see the module doc). `usize::MAX` anywhere: no cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserCaps {
    /// Projects one user may register.
    pub max_projects: usize,
    /// Sessions one user may have that are not archived (archive some to make room).
    pub max_sessions: usize,
    /// Sessions one user may create per minute, after a burst of `session_burst`.
    pub sessions_per_minute: u32,
    /// Sessions one user may create at once before the per-minute rate applies.
    pub session_burst: u32,
    /// Prompts one user may have queued across all their sessions.
    pub max_queued: usize,
    /// Bytes of prompt text one user may have queued across all their sessions.
    pub max_queued_bytes: usize,
}

impl Default for UserCaps {
    fn default() -> Self {
        Self {
            max_projects: 1_000,
            max_sessions: 10_000,
            sessions_per_minute: 60,
            session_burst: 120,
            max_queued: 256,
            max_queued_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One user's session-creation bucket: tokens left at `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Millis,
}

/// The per-user creation buckets of this node.
#[derive(Debug, Default)]
pub(crate) struct SessionRate {
    // A std mutex: nothing awaits while it is held.
    buckets: Mutex<HashMap<UserId, Bucket>>,
}

/// Users past which full buckets are forgotten (a full bucket is the same as none).
const KEEP_BUCKETS: usize = 1024;

impl SessionRate {
    /// Takes one session from `user`'s bucket at `now`, or says when to try again.
    pub(crate) fn take(&self, caps: &UserCaps, user: &UserId, now: Millis) -> Result<(), EngineError> {
        let burst = f64::from(caps.session_burst.max(1));
        let per_ms = f64::from(caps.sessions_per_minute) / 60_000.0;
        let refill = |b: Bucket| (b.tokens + (now.saturating_sub(b.at)) as f64 * per_ms).min(burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > KEEP_BUCKETS {
            buckets.retain(|_, b| refill(*b) < burst);
        }
        let bucket = buckets.entry(user.clone()).or_insert(Bucket { tokens: burst, at: now });
        let tokens = refill(*bucket);
        if tokens < 1.0 {
            let wait_secs = if per_ms > 0.0 { ((1.0 - tokens) / per_ms / 1000.0).ceil() as u64 } else { 60 };
            return Err(EngineError::TooMany {
                code: "too_many_sessions",
                message: format!(
                    "you are creating sessions too fast: at most {} at once and {} a minute; try again in {} s",
                    caps.session_burst,
                    caps.sessions_per_minute,
                    wait_secs.max(1)
                ),
            });
        }
        *bucket = Bucket { tokens: tokens - 1.0, at: now };
        Ok(())
    }
}

/// The refusal for a user at the cap on sessions not archived.
pub(crate) fn sessions_full(caps: &UserCaps) -> EngineError {
    EngineError::TooMany {
        code: "session_limit",
        message: format!(
            "you have {} sessions that are not archived, the most one user may have: archive or delete some first",
            caps.max_sessions
        ),
    }
}

/// The refusal for a user at the cap on projects.
pub(crate) fn projects_full(caps: &UserCaps) -> EngineError {
    EngineError::TooMany {
        code: "project_limit",
        message: format!("you have {} projects, the most one user may register: delete one first", caps.max_projects),
    }
}

/// The refusal for a user whose queued prompts, across all sessions, are at a cap.
pub(crate) fn queue_owner_full(caps: &UserCaps) -> EngineError {
    EngineError::TooMany {
        code: "user_queue_full",
        message: format!(
            "you already have the most queued prompts one user may have across all sessions ({} prompts, {} bytes \
             of text): wait for some to run or remove some",
            caps.max_queued, caps.max_queued_bytes
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_per_user() {
        let caps = UserCaps { sessions_per_minute: 60, session_burst: 3, ..UserCaps::default() };
        let rate = SessionRate::default();
        let (alice, bob) = (UserId::new(), UserId::new());
        for _ in 0..3 {
            rate.take(&caps, &alice, 1_000).expect("within the burst");
        }
        let refused = rate.take(&caps, &alice, 1_000).expect_err("past the burst");
        assert_eq!(refused.code(), "too_many_sessions");
        assert!(refused.to_string().contains("try again in 1 s"), "{refused}");
        rate.take(&caps, &bob, 1_000).expect("another user has a bucket of their own");
        rate.take(&caps, &alice, 2_000).expect("one a second comes back");
        assert!(rate.take(&caps, &alice, 2_000).is_err());
    }
}
