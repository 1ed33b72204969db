//! What `/metrics` shows, owned by one engine: counters, gauges and histograms in a
//! `prometheus-client` registry, encoded as OpenMetrics text.
//!
//! Each [`Engine`](crate::Engine) builds its own [`Metrics`] at start, so two engines in
//! one process (a test that runs two nodes) never add to each other's counters. The
//! handle is a cheap `Clone` around an `Arc`; every metric inside it is itself an
//! `Arc` of atomics, created once here, so recording on the hot path (a frame written
//! to a subscriber) is one relaxed atomic add behind a branch on [`Metrics::is_on`].
//! Histograms take a short lock inside the crate; they are recorded per model call,
//! tool call, approval or HTTP request, and per *sampled* frame (see
//! [`FRAME_SAMPLE_EVERY`]), never per frame per subscriber.
//!
//! With metrics off (`spool serve --no-metrics`) every recording is a no-op and
//! `/metrics` is not served. The open HTTP connection gauge is the one exception: the
//! binary's memory trimmer reads it, and it moves once per connection, not per frame.
//!
//! Values that are cheaper to read than to track (loaded sessions, active runs, list
//! streams, bus lag) are gauges set from the engine's state at each scrape, by
//! [`Engine::metrics_text`](crate::Engine::metrics_text).
//!
//! Durations of model calls, first tokens, tool calls and approval waits are read on
//! the engine's clock (`EngineConfig::clock`), so a test on a manual clock decides them
//! exactly; frame delivery is measured on the monotonic clock (sub-millisecond).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use spool_protocol::RunStatus;
use std::sync::Arc;
use std::time::Duration;

/// A label set of one fixed label, e.g. `{mode="replay"}`.
type One = [(&'static str, &'static str); 1];
/// A label set of one label whose value is only known at run time (a tool's name).
type OneOwned = [(&'static str, String); 1];
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// Buckets (seconds) of model calls, first tokens, tool calls and HTTP requests: from
/// 5 ms to 5 minutes (a long shell command or a slow provider).
pub const LATENCY_BUCKETS: [f64; 15] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
/// Buckets (seconds) of approval waits: a person answers in seconds or in hours.
pub const APPROVAL_BUCKETS: [f64; 11] = [1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0];
/// Buckets (seconds) of frame delivery: from 100 µs (a local subscriber keeping up) to
/// 2.5 s (one far behind, about to be cut).
pub const DELIVERY_BUCKETS: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// One frame in this many (by seq: those whose seq is a multiple of it) is stamped
/// with its publish instant, and a subscriber that takes a stamped frame observes its
/// delivery delay once. So delivery costs one clock read per 16 frames at publish and
/// at most one per 16 frames per subscriber, and a batch of frames taken at once
/// observes its newest stamped frame only.
pub const FRAME_SAMPLE_EVERY: u64 = 16;

fn latency() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The HTTP transports that hold a stream open, for `spool_open_streams{dialect}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `GET /api/sessions/{id}/events`
    Native,
    /// `GET /api/workspaces/events`
    Lists,
    /// `POST /api/chat`, `GET /api/runs/{id}/events`, `POST /api/runs/{id}/resume`
    RunStream,
    /// `POST /api/ai-sdk/chat`, `GET /api/ai-sdk/chat/{id}/stream`
    AiSdk,
    /// OpenCode's `GET /event`
    OpenCode,
    /// AG-UI's `POST /api/ag-ui`
    AgUi,
    /// `GET /api/hub/events`
    Hub,
    /// The WebSocket hub, `GET /api/ws`
    Ws,
    /// Many native streams over one WebSocket, `GET /api/streams`
    StreamsSocket,
}

impl Dialect {
    pub const ALL: [Dialect; 9] = [
        Dialect::Native,
        Dialect::Lists,
        Dialect::RunStream,
        Dialect::AiSdk,
        Dialect::OpenCode,
        Dialect::AgUi,
        Dialect::Hub,
        Dialect::Ws,
        Dialect::StreamsSocket,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Native => "native",
            Dialect::Lists => "lists",
            Dialect::RunStream => "run_stream",
            Dialect::AiSdk => "ai_sdk",
            Dialect::OpenCode => "opencode",
            Dialect::AgUi => "ag_ui",
            Dialect::Hub => "hub",
            Dialect::Ws => "ws",
            Dialect::StreamsSocket => "streams_socket",
        }
    }
}

/// The labels of one HTTP request: the route pattern (never the raw path: one series
/// per route, not per session id), the method and the status class (`2xx` …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    status_class: &'static str,
}

/// An engine's metrics: a cheap handle (see the module doc).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("on", &self.inner.on).finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(true)
    }
}

struct Inner {
    on: bool,
    registry: Registry,
    http_connections: Gauge,
    session_streams: Gauge,
    list_streams: Gauge,
    frames_sent: Counter,
    bytes_sent: Counter,
    replays: Counter,
    snapshots: Counter,
    slow_client_cuts: Counter,
    runs_completed: Counter,
    runs_failed: Counter,
    runs_cancelled: Counter,
    runs_interrupted: Counter,
    approval_wait: Histogram,
    first_token: Histogram,
    model_calls: Histograms<OneOwned>,
    tool_calls: Histograms<OneOwned>,
    frame_delivery: Histogram,
    loaded_sessions: Gauge,
    runs_running: Gauge,
    runs_parked: Gauge,
    open_streams: [Gauge; Dialect::ALL.len()],
    bus_lag: Family<OneOwned, Gauge>,
    bus_rejected: Counter,
    draft_bytes: Counter,
    http_requests: Family<HttpLabels, Counter>,
    http_durations: Family<HttpLabels, Histogram, fn() -> Histogram>,
}

impl Metrics {
    /// A fresh set of metrics; with `on` false nothing is recorded (see the module doc).
    pub fn new(on: bool) -> Self {
        let mut registry = Registry::with_prefix("spool");
        let connections = Family::<One, Gauge>::default();
        registry.register("open_connections", "Open connections by kind", connections.clone());
        let frames_sent = Counter::default();
        registry.register("frames_sent", "Session-stream frames written to clients", frames_sent.clone());
        let bytes_sent = Counter::default();
        registry.register("bytes_sent", "Session-stream bytes written to clients", bytes_sent.clone());
        let starts = Family::<One, Counter>::default();
        registry.register("stream_starts", "Session-stream connections by how they started", starts.clone());
        let slow_client_cuts = Counter::default();
        registry.register(
            "slow_client_disconnects",
            "Subscribers cut for falling too far behind",
            slow_client_cuts.clone(),
        );
        let runs = Family::<One, Counter>::default();
        registry.register("runs", "Runs by the status they reached", runs.clone());
        let approval_wait = Histogram::new(APPROVAL_BUCKETS);
        registry.register_with_unit(
            "approval_wait",
            "Time from an approval being asked to its decision",
            Unit::Seconds,
            approval_wait.clone(),
        );
        let first_token = latency();
        registry.register_with_unit(
            "provider_first_token",
            "Time from a model call to its first streamed token",
            Unit::Seconds,
            first_token.clone(),
        );
        let model_calls: Histograms<OneOwned> = Family::new_with_constructor(latency);
        registry.register_with_unit(
            "model_call_duration",
            "Time from a model call to the end of its answer, by model",
            Unit::Seconds,
            model_calls.clone(),
        );
        let tool_calls: Histograms<OneOwned> = Family::new_with_constructor(latency);
        registry.register_with_unit(
            "tool_call_duration",
            "Time a tool call took to run, by tool",
            Unit::Seconds,
            tool_calls.clone(),
        );
        let frame_delivery = Histogram::new(DELIVERY_BUCKETS);
        registry.register_with_unit(
            "frame_delivery",
            "Time from a frame's publish to a subscriber taking it to write to its socket, one frame in 16 sampled",
            Unit::Seconds,
            frame_delivery.clone(),
        );
        let loaded_sessions = Gauge::default();
        registry.register("loaded_sessions", "Sessions loaded in memory on this node", loaded_sessions.clone());
        let active = Family::<One, Gauge>::default();
        registry.register(
            "active_runs",
            "Runs this node holds, executing (running) or parked at an approval (interrupted)",
            active.clone(),
        );
        let streams = Family::<One, Gauge>::default();
        registry.register("open_streams", "Open streaming HTTP responses and WebSockets by dialect", streams.clone());
        let bus_lag = Family::<OneOwned, Gauge>::default();
        registry.register(
            "bus_lag_frames",
            "Frames this node handed to the frame bus that have not come back to it through the bus yet",
            bus_lag.clone(),
        );
        let draft_bytes = Counter::default();
        registry.register(
            "draft_checkpoint_bytes",
            "Bytes of streaming-answer checkpoints written to the store (appended deltas)",
            draft_bytes.clone(),
        );
        let bus_rejected = Counter::default();
        registry.register(
            "bus_rejected_messages",
            "Messages read from the Redis bus that failed authentication (not sealed with this deployment's \
             cluster key) and were dropped",
            bus_rejected.clone(),
        );
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by route pattern, method and status class",
            http_requests.clone(),
        );
        let http_durations: Family<HttpLabels, Histogram, fn() -> Histogram> = Family::new_with_constructor(latency);
        registry.register_with_unit(
            "http_request_duration",
            "Time from an HTTP request to its response head, by route pattern, method and status class",
            Unit::Seconds,
            http_durations.clone(),
        );
        let inner = Inner {
            on,
            http_connections: connections.get_or_create_owned(&[("kind", "http")]),
            session_streams: connections.get_or_create_owned(&[("kind", "session_stream")]),
            list_streams: connections.get_or_create_owned(&[("kind", "list_stream")]),
            frames_sent,
            bytes_sent,
            replays: starts.get_or_create_owned(&[("mode", "replay")]),
            snapshots: starts.get_or_create_owned(&[("mode", "snapshot")]),
            slow_client_cuts,
            runs_completed: runs.get_or_create_owned(&[("status", "completed")]),
            runs_failed: runs.get_or_create_owned(&[("status", "failed")]),
            runs_cancelled: runs.get_or_create_owned(&[("status", "cancelled")]),
            runs_interrupted: runs.get_or_create_owned(&[("status", "interrupted")]),
            approval_wait,
            first_token,
            model_calls,
            tool_calls,
            frame_delivery,
            loaded_sessions,
            runs_running: active.get_or_create_owned(&[("state", "running")]),
            runs_parked: active.get_or_create_owned(&[("state", "interrupted")]),
            open_streams: Dialect::ALL.map(|d| streams.get_or_create_owned(&[("dialect", d.as_str())])),
            bus_lag,
            bus_rejected,
            draft_bytes,
            http_requests,
            http_durations,
            registry,
        };
        Metrics { inner: Arc::new(inner) }
    }

    /// Whether anything is recorded (`--no-metrics` turns it off).
    pub fn is_on(&self) -> bool {
        self.inner.on
    }

    /// The OpenMetrics text of everything recorded, `# EOF` included.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug in a label.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }

    // --- counted where it happens -------------------------------------------------

    pub(crate) fn frames_sent(&self, n: u64) {
        if self.inner.on {
            self.inner.frames_sent.inc_by(n);
        }
    }

    pub(crate) fn draft_bytes_written(&self, n: u64) {
        if self.inner.on {
            self.inner.draft_bytes.inc_by(n);
        }
    }

    pub(crate) fn bytes_sent(&self, n: u64) {
        if self.inner.on {
            self.inner.bytes_sent.inc_by(n);
        }
    }

    pub(crate) fn stream_started(&self, replay: bool) {
        if self.inner.on {
            match replay {
                true => self.inner.replays.inc(),
                false => self.inner.snapshots.inc(),
            };
        }
    }

    /// `n` subscribers restarted on a snapshot at once (bus mode, a reset).
    pub(crate) fn snapshots(&self, n: u64) {
        if self.inner.on {
            self.inner.snapshots.inc_by(n);
        }
    }

    pub(crate) fn slow_client_cut(&self) {
        if self.inner.on {
            self.inner.slow_client_cuts.inc();
        }
    }

    /// A subscriber came (`+1`) or went (`-1`).
    pub(crate) fn session_streams(&self, delta: i64) {
        if self.inner.on {
            self.inner.session_streams.inc_by(delta);
        }
    }

    pub(crate) fn run_settled(&self, status: RunStatus) {
        if !self.inner.on {
            return;
        }
        match status {
            RunStatus::Completed => &self.inner.runs_completed,
            RunStatus::Failed => &self.inner.runs_failed,
            RunStatus::Cancelled => &self.inner.runs_cancelled,
            RunStatus::Interrupted => &self.inner.runs_interrupted,
            RunStatus::Running => return,
        }
        .inc();
    }

    pub(crate) fn approval_waited(&self, millis: i64) {
        if self.inner.on {
            self.inner.approval_wait.observe(seconds(millis));
        }
    }

    pub(crate) fn first_token_after(&self, millis: i64) {
        if self.inner.on {
            self.inner.first_token.observe(seconds(millis));
        }
    }

    pub(crate) fn model_call(&self, model: &str, millis: i64) {
        if self.inner.on {
            self.inner.model_calls.get_or_create(&[("model", model.to_owned())]).observe(seconds(millis));
        }
    }

    pub(crate) fn tool_call(&self, tool: &str, millis: i64) {
        if self.inner.on {
            self.inner.tool_calls.get_or_create(&[("tool", tool.to_owned())]).observe(seconds(millis));
        }
    }

    pub(crate) fn frame_delivered(&self, after: Duration) {
        if self.inner.on {
            self.inner.frame_delivery.observe(after.as_secs_f64());
        }
    }

    // --- set at each scrape ---------------------------------------------------------

    pub(crate) fn set_scraped(&self, scraped: Scraped<'_>) {
        let inner = &self.inner;
        inner.loaded_sessions.set(scraped.loaded_sessions as i64);
        inner.runs_running.set(scraped.running as i64);
        inner.runs_parked.set(scraped.parked as i64);
        inner.list_streams.set(scraped.list_streams as i64);
        if let Some((node, lag)) = scraped.bus_lag {
            inner.bus_lag.get_or_create(&[("node", node.to_owned())]).set(lag as i64);
        }
        // The bus keeps the count; the counter catches up with it (it only grows).
        let counted = inner.bus_rejected.get();
        if scraped.bus_rejected > counted {
            inner.bus_rejected.inc_by(scraped.bus_rejected - counted);
        }
    }

    // --- for the server's transports -----------------------------------------------

    /// Counts an open HTTP connection until the returned guard is dropped. Counted even
    /// with metrics off (see the module doc).
    pub fn http_connection(&self) -> Held {
        self.inner.http_connections.inc();
        Held(Some(self.inner.http_connections.clone()))
    }

    /// Open HTTP connections now.
    pub fn open_http_connections(&self) -> i64 {
        self.inner.http_connections.get()
    }

    /// Counts an open stream of `dialect` until the returned guard is dropped.
    pub fn stream_opened(&self, dialect: Dialect) -> Held {
        if !self.inner.on {
            return Held(None);
        }
        let index = Dialect::ALL.iter().position(|d| *d == dialect).expect("every dialect is in ALL");
        let gauge = &self.inner.open_streams[index];
        gauge.inc();
        Held(Some(gauge.clone()))
    }

    /// One HTTP request answered: its route pattern (`unmatched` when no route took it),
    /// method, status code and the time to its response head.
    pub fn http_request(&self, route: &str, method: &str, status: u16, took: Duration) {
        if !self.inner.on {
            return;
        }
        let status_class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let labels = HttpLabels { route: route.to_owned(), method: method.to_owned(), status_class };
        self.inner.http_requests.get_or_create(&labels).inc();
        self.inner.http_durations.get_or_create(&labels).observe(took.as_secs_f64());
    }
}

/// What the engine reads from its state for a scrape.
pub(crate) struct Scraped<'a> {
    pub loaded_sessions: usize,
    pub running: usize,
    pub parked: usize,
    pub list_streams: usize,
    /// This node's name and its frames not yet back from the bus (bus mode only).
    pub bus_lag: Option<(&'a str, u64)>,
    /// Messages the bus dropped for failing authentication, since start.
    pub bus_rejected: u64,
}

fn seconds(millis: i64) -> f64 {
    millis.max(0) as f64 / 1000.0
}

/// Keeps one gauge raised by one until dropped (an open connection or stream).
#[must_use = "the gauge goes back down when this is dropped"]
pub struct Held(Option<Gauge>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(gauge) = &self.0 {
            gauge.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sets_of_metrics_do_not_share_counters() {
        let (a, b) = (Metrics::new(true), Metrics::new(true));
        a.frames_sent(3);
        assert!(a.encode().contains("spool_frames_sent_total 3\n"), "{}", a.encode());
        assert!(b.encode().contains("spool_frames_sent_total 0\n"), "{}", b.encode());
    }

    #[test]
    fn with_metrics_off_nothing_is_recorded() {
        let off = Metrics::new(false);
        off.frames_sent(3);
        off.tool_call("read", 750);
        let _stream = off.stream_opened(Dialect::Native);
        let text = off.encode();
        assert!(text.contains("spool_frames_sent_total 0\n"), "{text}");
        assert!(text.contains("spool_open_streams{dialect=\"native\"} 0\n"), "{text}");
        assert!(!text.contains("tool=\"read\""), "{text}");
    }

    #[test]
    fn a_request_is_counted_by_its_status_class_and_a_stream_until_it_closes() {
        let metrics = Metrics::new(true);
        metrics.http_request("/api/sessions/{id}", "GET", 404, Duration::from_millis(3));
        let stream = metrics.stream_opened(Dialect::Ws);
        let text = metrics.encode();
        let series = "spool_http_requests_total{route=\"/api/sessions/{id}\",method=\"GET\",status_class=\"4xx\"} 1\n";
        assert!(text.contains(series), "{text}");
        assert!(text.contains("spool_open_streams{dialect=\"ws\"} 1\n"), "{text}");
        drop(stream);
        assert!(metrics.encode().contains("spool_open_streams{dialect=\"ws\"} 0\n"));
    }
}
