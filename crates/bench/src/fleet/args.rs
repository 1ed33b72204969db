//! What `spool-bench nodes` is asked, and what one subscriber count yields (a
//! [`Point`]), for the report, the sweep's table and the plot.

use crate::latency::Spread;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FleetArgs {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// `spool serve` nodes, on one PostgreSQL database and one Redis.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub nodes: u64,
    /// Subscribers: subscriber `i` follows session `i % S` on node `(i / S) % N`.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub subscribers: u64,
    /// Sessions the subscribers follow; the first is the hot one, which gets the runs.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub sessions: u64,
    /// Client processes the subscribers are spread over (0: one per 15,000, so each
    /// stays under a 20,000 open-file limit).
    #[arg(long, default_value_t = 0)]
    pub clients: u64,
    /// A PostgreSQL server whose role may create databases: the run makes a database
    /// of its own there and drops it at the end.
    #[arg(long, value_name = "URL", env = "SPOOL_TEST_DATABASE_URL")]
    pub database_url: String,
    /// The Redis every node joins.
    #[arg(long, value_name = "URL", env = "SPOOL_TEST_REDIS_URL")]
    pub redis_url: String,
    /// Text deltas of each run of the hot session (from the bench's fake model).
    #[arg(long, default_value_t = 1000)]
    pub deltas: u64,
    /// Pause between the fake model's deltas, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub delay_ms: u64,
    /// Hot subscribers note the receive instant of every this-many-th delta.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_every: u64,
    /// After the measured run, a second run during which the last node is killed
    /// (SIGKILL) this many ms after the prompt; its subscribers come back on the others.
    #[arg(long, value_name = "MS")]
    pub kill_after_ms: Option<u64>,
    /// The clients' first reconnect delay (doubling, up to a quarter more of jitter),
    /// as Spool's clients: 1.5 s.
    #[arg(long, default_value_t = 1500)]
    pub backoff_min_ms: u64,
    #[arg(long, default_value_t = 30_000)]
    pub backoff_max_ms: u64,
    /// First connections being opened at once per client process.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub in_flight: u64,
    /// Connections per loopback source address: at most the ephemeral port range's size.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=64_000))]
    pub per_source: u64,
    /// Seconds the nodes are left alone before each memory reading.
    #[arg(long, default_value_t = 4)]
    pub settle_secs: u64,
    /// Measure at each of these subscriber counts in turn, fresh nodes and database
    /// each; replaces --subscribers.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub sweep: Vec<u64>,
    /// Draw RSS, latency (and the node-loss recovery) against the subscriber count into
    /// this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// What one subscriber count yields.
pub struct Point {
    pub subscribers: u64,
    pub nodes: u64,
    /// Per node: (subscribers, RSS before, RSS with them), KiB.
    pub per_node: Vec<(u64, u64, u64)>,
    /// The measured run's first delta after the prompt POST, ms: p50, p99.
    pub first_delta: Option<Spread>,
    /// The measured run's delivery (receive − model write), ms.
    pub delivery: Option<Spread>,
    /// The node-loss run: seconds from the kill until every cut subscriber streamed again.
    pub storm_secs: Option<f64>,
    /// No subscriber lost, repeated or had replaced a frame, and every one finished.
    pub sound: bool,
}

impl Point {
    /// KiB of server RSS per subscriber, over all nodes.
    pub fn kib_per_subscriber(&self) -> f64 {
        let (subs, grown) =
            self.per_node.iter().fold((0, 0), |(s, g), &(n, before, with)| (s + n, g + with.saturating_sub(before)));
        grown as f64 / subs.max(1) as f64
    }

    /// Mean RSS of a node with its subscribers, MiB.
    pub fn node_rss_mib(&self) -> f64 {
        let sum: u64 = self.per_node.iter().map(|p| p.2).sum();
        sum as f64 / 1024.0 / self.per_node.len().max(1) as f64
    }
}
