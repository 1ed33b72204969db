//! What `spool-bench idle` is asked (its flags and the transport), and what one
//! subscriber count yields (a [`Point`]): the types the measurement, the sweep's table
//! and the plot share, kept apart from all three.

use crate::latency::Spread;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `GET /api/sessions/:id/events`, one connection per stream.
    Sse,
    /// `GET /api/streams`, the web UI's WebSocket, one session stream opened on it.
    Ws,
}

#[derive(clap::Args, Debug)]
pub struct IdleArgs {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    pub(super) spool: Option<std::path::PathBuf>,
    /// Idle subscribers, spread round robin over the sessions.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(super) subscribers: u64,
    /// Sessions the subscribers follow; the first one is the hot one that gets a prompt.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(super) sessions: u64,
    #[arg(long, value_enum, default_value_t = Transport::Sse)]
    pub(super) transport: Transport,
    /// Connections being opened at once; the others wait their turn, so the server's
    /// accept backlog never overflows (a dropped SYN costs a 1 s retransmit).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(super) in_flight: u64,
    /// Connections per loopback source address: at most the ephemeral port range's size.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=64_000))]
    pub(super) per_source: u64,
    /// Text deltas the fake model streams for the hot session's prompt.
    #[arg(long, default_value_t = 200)]
    pub(super) deltas: u64,
    /// Pause between the fake model's deltas, in milliseconds.
    #[arg(long, default_value_t = 1)]
    pub(super) delay_ms: u64,
    /// Hot subscribers note the receive instant of every this-many-th delta.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) sample_every: u64,
    /// Measure at each of these subscriber counts in turn, a fresh server each (e.g.
    /// `1000,2000,5000,10000,15000`); replaces --subscribers.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(super) sweep: Vec<u64>,
    /// Draw server RSS and hot-session latency against the subscriber count into this
    /// SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub(super) plot: Option<PathBuf>,
    /// One more subscriber on the hot session that reads its first frame and then
    /// nothing: the server should cut it once ≈ 1 MiB is queued for it, and nobody else.
    #[arg(long)]
    pub(super) stuck: bool,
    /// Seconds the hot session's answer may take before the run is given up.
    #[arg(long, default_value_t = 300)]
    pub(super) timeout_secs: u64,
    /// Seconds the server is left alone before each memory reading, so that what
    /// connecting or closing left to free has been freed.
    #[arg(long, default_value_t = 2)]
    pub(super) settle_secs: u64,
}

/// One subscriber count's numbers, for the sweep's table and plot.
pub struct Point {
    pub subscribers: u64,
    pub connect_rate: f64,
    /// Server VmRSS before, with the idle subscribers, after churn; KiB.
    pub rss_before: u64,
    pub rss_idle: u64,
    pub rss_after: u64,
    /// (with − before) / N, KiB.
    pub per_subscriber: f64,
    /// The hot session's first delta after the prompt POST, ms: p50, p99.
    pub first_delta: (f64, f64),
    /// Delivery latency of the hot session's sampled deltas (receive − model write), ms.
    pub delivery: Option<Spread>,
    /// Every hot subscriber got every delta, and nobody but the stuck one was cut.
    pub(super) sound: bool,
}
