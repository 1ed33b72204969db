//! Readiness: whether this node can do its work now, check by check, for `GET
//! /api/ready` (what a load balancer in front of several nodes asks before sending it
//! traffic). Liveness (`/api/health`) only says the process answers; a node can be alive
//! with its database gone, its Redis link down or its lease loop stuck, and then it must
//! be taken out of rotation, not restarted.
//!
//! The checks:
//! * `store`: a trivial query (the auth flag, one row) answers.
//! * `bus`, only with a frame bus (`--redis-url`): the bus says it is connected (see
//!   [`crate::FrameBus::check`]).
//! * `leases`: the lease loop (the reaper, every half lease, see `reaper.rs`) finished a
//!   pass within the last lease lifetime. A node whose loop is stuck or failing cannot
//!   take over a dead node's sessions, and its own store round trips are failing too.
//!
//! Each check is bounded by [`CHECK_TIMEOUT`] and they run together, so the answer
//! never takes much longer than that, whatever hangs.

use crate::FrameBus;
use crate::store::Store;
use serde::Serialize;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long one check may take before it counts as failed: a load balancer's probe
/// usually waits a few seconds, and a store that needs longer for one row is not fit
/// to serve either.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Check {
    /// `ok` or `failing`.
    pub state: CheckState,
    /// Why it fails; absent when it passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
pub enum CheckState {
    Ok,
    Failing,
}

impl Check {
    fn ok() -> Check {
        Check { state: CheckState::Ok, reason: None }
    }

    fn failing(reason: impl Into<String>) -> Check {
        Check { state: CheckState::Failing, reason: Some(reason.into()) }
    }

    pub fn is_ok(&self) -> bool {
        self.state == CheckState::Ok
    }
}

/// Every check of one readiness probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub store: Check,
    /// Absent when the node has no frame bus (no `--redis-url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<Check>,
    pub leases: Check,
}

impl Readiness {
    /// True when every check passes.
    pub fn is_ready(&self) -> bool {
        self.failing().next().is_none()
    }

    /// The failing checks by name, with their reasons, in the order above.
    pub fn failing(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [("store", Some(&self.store)), ("bus", self.bus.as_ref()), ("leases", Some(&self.leases))]
            .into_iter()
            .filter_map(|(name, check)| check.filter(|c| !c.is_ok()).map(|c| (name, c.reason.as_deref().unwrap_or(""))))
    }
}

/// When the lease loop last finished a pass. A std mutex: it is held for one read or
/// one write, never across an await.
#[derive(Default)]
pub(crate) struct LeaseLoopBeat(Mutex<Option<Instant>>);

impl LeaseLoopBeat {
    /// The loop finished a pass now.
    pub fn beat(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn last(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the checks look at: the store, the frame bus (if any) and the lease loop's
/// beat, not the whole engine ([`Engine::readiness`](crate::Engine::readiness) hands
/// them over).
pub(crate) struct Probes<'a> {
    pub store: &'a dyn Store,
    pub frames: Option<&'a dyn FrameBus>,
    /// How long a lease lasts: the loop passes every half of it.
    pub lease_ttl: Duration,
    pub beat: &'a LeaseLoopBeat,
}

impl Probes<'_> {
    /// Runs every readiness check, each within [`CHECK_TIMEOUT`], at once.
    pub async fn run(&self) -> Readiness {
        let store = async {
            match tokio::time::timeout(CHECK_TIMEOUT, self.store.auth_enabled()).await {
                Ok(Ok(_)) => Check::ok(),
                Ok(Err(e)) => Check::failing(format!("the store cannot answer a query: {e}")),
                Err(_) => Check::failing(format!("the store did not answer a query within {CHECK_TIMEOUT:?}")),
            }
        };
        let bus = async {
            let frames = self.frames?;
            Some(match tokio::time::timeout(CHECK_TIMEOUT, frames.check()).await {
                Ok(Ok(())) => Check::ok(),
                Ok(Err(e)) => Check::failing(format!("the Redis bus is disconnected: {e}")),
                Err(_) => Check::failing(format!("the Redis bus did not answer within {CHECK_TIMEOUT:?}")),
            })
        };
        let (store, bus) = tokio::join!(store, bus);
        Readiness { store, bus, leases: self.lease_loop_check() }
    }

    /// The lease loop passes every half lease; one lifetime without a pass is two
    /// missed, not a slow store round trip.
    fn lease_loop_check(&self) -> Check {
        let lifetime = self.lease_ttl;
        match self.beat.last() {
            None => Check::failing("the lease loop has not finished a pass yet"),
            Some(at) if at.elapsed() > lifetime => Check::failing(format!(
                "the lease loop last finished a pass {:.1} s ago, more than a lease lifetime ({} s)",
                at.elapsed().as_secs_f64(),
                lifetime.as_secs_f64()
            )),
            Some(_) => Check::ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_check_makes_the_node_unready_and_is_named() {
        let mut r = Readiness { store: Check::ok(), bus: None, leases: Check::ok() };
        assert!(r.is_ready());
        r.bus = Some(Check::failing("down"));
        assert!(!r.is_ready());
        assert_eq!(r.failing().collect::<Vec<_>>(), [("bus", "down")]);
        let json = serde_json::to_value(&r).expect("serializes");
        assert_eq!(json["bus"], serde_json::json!({"state": "failing", "reason": "down"}));
        assert_eq!(json["store"], serde_json::json!({"state": "ok"}));
    }
}
