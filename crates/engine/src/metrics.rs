//! Process-wide counters behind `/metrics` (Prometheus text format).
//!
//! Plain atomics in one static: counting a frame is one relaxed add on the hot path,
//! and there is nothing to wire through constructors. Counters only ever grow (gauges
//! go up and down), so several engines in one test process just add up.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Metrics {
    pub session_streams: AtomicI64,
    pub http_connections: AtomicI64,
    pub frames_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub replays: AtomicU64,
    pub snapshots: AtomicU64,
    pub slow_client_cuts: AtomicU64,
    pub runs_completed: AtomicU64,
    pub runs_failed: AtomicU64,
    pub runs_cancelled: AtomicU64,
    pub runs_interrupted: AtomicU64,
    pub approval_wait_ms_sum: AtomicU64,
    pub approval_waits: AtomicU64,
    pub first_token_ms_sum: AtomicU64,
    pub first_tokens: AtomicU64,
}

pub static METRICS: Metrics = Metrics {
    session_streams: AtomicI64::new(0),
    http_connections: AtomicI64::new(0),
    frames_sent: AtomicU64::new(0),
    bytes_sent: AtomicU64::new(0),
    replays: AtomicU64::new(0),
    snapshots: AtomicU64::new(0),
    slow_client_cuts: AtomicU64::new(0),
    runs_completed: AtomicU64::new(0),
    runs_failed: AtomicU64::new(0),
    runs_cancelled: AtomicU64::new(0),
    runs_interrupted: AtomicU64::new(0),
    approval_wait_ms_sum: AtomicU64::new(0),
    approval_waits: AtomicU64::new(0),
    first_token_ms_sum: AtomicU64::new(0),
    first_tokens: AtomicU64::new(0),
};

impl Metrics {
    pub fn run_settled(&self, status: spool_protocol::RunStatus) {
        use spool_protocol::RunStatus::*;
        match status {
            Completed => &self.runs_completed,
            Failed => &self.runs_failed,
            Cancelled => &self.runs_cancelled,
            Interrupted => &self.runs_interrupted,
            Running => return,
        }
        .fetch_add(1, Relaxed);
    }

    pub fn approval_waited(&self, millis: i64) {
        self.approval_wait_ms_sum.fetch_add(millis.max(0) as u64, Relaxed);
        self.approval_waits.fetch_add(1, Relaxed);
    }

    pub fn first_token_after(&self, millis: i64) {
        self.first_token_ms_sum.fetch_add(millis.max(0) as u64, Relaxed);
        self.first_tokens.fetch_add(1, Relaxed);
    }

    /// The Prometheus text exposition. `list_streams` is read from the list notifier.
    pub fn render(&self, list_streams: usize) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let g = |a: &AtomicI64| a.load(Relaxed) as f64;
        let c = |a: &AtomicU64| a.load(Relaxed) as f64;
        metric(
            "spool_open_connections",
            "gauge",
            "Open connections by kind.",
            &[
                ("{kind=\"http\"}", g(&self.http_connections)),
                ("{kind=\"session_stream\"}", g(&self.session_streams)),
                ("{kind=\"list_stream\"}", list_streams as f64),
            ],
        );
        metric(
            "spool_frames_sent_total",
            "counter",
            "Session-stream frames written to clients.",
            &[("", c(&self.frames_sent))],
        );
        metric(
            "spool_bytes_sent_total",
            "counter",
            "Session-stream bytes written to clients.",
            &[("", c(&self.bytes_sent))],
        );
        metric(
            "spool_stream_starts_total",
            "counter",
            "Session-stream connections by how they started.",
            &[("{mode=\"replay\"}", c(&self.replays)), ("{mode=\"snapshot\"}", c(&self.snapshots))],
        );
        metric(
            "spool_slow_client_disconnects_total",
            "counter",
            "Subscribers cut for falling too far behind.",
            &[("", c(&self.slow_client_cuts))],
        );
        metric(
            "spool_runs_total",
            "counter",
            "Runs by the status they reached.",
            &[
                ("{status=\"completed\"}", c(&self.runs_completed)),
                ("{status=\"failed\"}", c(&self.runs_failed)),
                ("{status=\"cancelled\"}", c(&self.runs_cancelled)),
                ("{status=\"interrupted\"}", c(&self.runs_interrupted)),
            ],
        );
        metric(
            "spool_approval_wait_seconds",
            "summary",
            "Time from an approval being asked to its decision.",
            // `_sum` / `_count` are name suffixes, written where labels would go.
            &[("_sum", c(&self.approval_wait_ms_sum) / 1000.0), ("_count", c(&self.approval_waits))],
        );
        metric(
            "spool_provider_first_token_seconds",
            "summary",
            "Time from a model call to its first streamed token.",
            &[("_sum", c(&self.first_token_ms_sum) / 1000.0), ("_count", c(&self.first_tokens))],
        );
        out
    }
}
