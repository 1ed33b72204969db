//! Latency from the subscribers' receive instants. Every subscriber runs in this one
//! process, so their instants share one clock and can be compared directly.
//!
//! The scripted model's deltas carry no timestamp, so the time a frame was published is
//! not on the wire. What stands in for it is the earliest instant any subscriber of
//! node 0 (the node running the session) received that seq: an upper bound of the
//! publish time. A subscriber's lag on a frame is its receive instant minus that one.
//! On node 0 this is the fan-out spread among local subscribers; on another node it is
//! that plus the hop through the Redis bus. It may be negative: a remote subscriber can
//! beat every local one.

use crate::subscriber::Outcome;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// p50, p99 and max of a set of milliseconds (nearest rank).
pub struct Spread {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut ms: Vec<f64>) -> Option<Spread> {
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Some(Spread { count: ms.len(), p50: rank(0.50), p99: rank(0.99), max: ms[ms.len() - 1] })
    }
}

/// Each node's subscribers' lags behind node 0's first receipt, in ms, over the sampled
/// seqs that some subscriber of node 0 received.
pub fn lag_behind_node0(outcomes: &[Outcome], nodes: usize) -> Vec<Vec<f64>> {
    let mut first: HashMap<u64, Instant> = HashMap::new();
    for outcome in outcomes.iter().filter(|o| o.node == 0) {
        for &(seq, at) in &outcome.samples {
            first.entry(seq).and_modify(|e| *e = (*e).min(at)).or_insert(at);
        }
    }
    let mut lags = vec![Vec::new(); nodes];
    for outcome in outcomes {
        for (seq, at) in &outcome.samples {
            if let Some(origin) = first.get(seq) {
                lags[outcome.node].push(signed_ms(*at, *origin));
            }
        }
    }
    lags
}

/// Each node's subscribers' `when` (a delta's arrival), in ms after `prompted`.
pub fn after_prompt(
    outcomes: &[Outcome],
    nodes: usize,
    prompted: Instant,
    when: impl Fn(&Outcome) -> Option<Instant>,
) -> Vec<Vec<f64>> {
    let mut after = vec![Vec::new(); nodes];
    for outcome in outcomes {
        if let Some(at) = when(outcome) {
            after[outcome.node].push(signed_ms(at, prompted));
        }
    }
    after
}

/// `a - b` in milliseconds, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => ms(d),
        None => -ms(b - a),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let spread = Spread::of((1..=200).map(f64::from).collect()).expect("not empty");
        assert_eq!((spread.count, spread.p50, spread.p99, spread.max), (200, 100.0, 198.0, 200.0));
        let one = Spread::of(vec![-3.0]).expect("not empty");
        assert_eq!((one.p50, one.p99, one.max), (-3.0, -3.0, -3.0));
        assert!(Spread::of(Vec::new()).is_none());
    }

    #[test]
    fn a_lag_is_measured_from_node_0s_first_receipt_and_may_be_negative() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let outcome = |node: usize, samples: Vec<(u64, Instant)>| {
            let mut o = Outcome::new(node);
            o.samples = samples;
            o
        };
        let outcomes = [
            outcome(0, vec![(10, at(5)), (20, at(9))]),
            outcome(0, vec![(10, at(7)), (20, at(8))]),
            outcome(1, vec![(10, at(4)), (20, at(12)), (30, at(20))]),
        ];
        let lags = lag_behind_node0(&outcomes, 2);
        assert_eq!(lags[0], [0.0, 1.0, 2.0, 0.0]);
        assert_eq!(lags[1], [-1.0, 4.0], "seq 30 never reached node 0: no origin, no lag");
    }
}
