//! `spool-bench idle`: what an idle subscriber costs a node, at 10,000 or 100,000 of
//! them (issue 19).
//!
//! One release `spool serve` child; S sessions; N subscribers spread round robin over
//! them, each on its own TCP connection from a loopback source address of its own group
//! (127.1.x.y, `--per-source` connections each), so the client never runs out of
//! ephemeral ports: the socket is bound to the source address with
//! `IP_BIND_ADDRESS_NO_PORT` before connecting, which lets the kernel pick the port at
//! connect time per (source, destination) pair instead of from one shared range.
//!
//! Transports: `sse` is `GET /api/sessions/:id/events`, one connection per stream;
//! `ws` is `GET /api/streams`, the WebSocket the web UI's shared worker holds (one per
//! browser, see `web/app/js/stream_router.js`), with one session stream opened on it.
//!
//! The client is written to cost as little as it can, because it shares the two cores
//! and the memory with the server it measures: raw HTTP over the socket (no HTTP
//! client library and its per-connection buffers), one task per connection with a
//! 1 KiB read buffer, and bytes read and thrown away. It only looks for two byte
//! patterns: `\nid: ` (the first frame of a stream, its snapshot) and, on the hot
//! session, `text_delta`. A pattern split across two reads is still found: the last
//! pattern-length bytes of a read are kept in front of the next.
//!
//! The hot session (session 0, N / S subscribers) gets one prompt, answered by the fake
//! OpenAI-compatible model (`fake_model.rs`: `--deltas` one-word deltas `--delay-ms`
//! apart), which notes when it wrote each delta; a hot subscriber counts the answer's
//! `text_delta`s and notes the instant every `--sample-every`th one arrived, so its
//! delivery latency is receive − model write, on the one clock of this machine.
//!
//! Reported: the connect rate (N over the time until every subscriber has its first
//! frame, at most `--in-flight` connecting at once), the server's VmRSS and RssAnon
//! before and with the N idle subscribers (the difference over N is the cost of one),
//! the client's own RSS, the time from the hot session's prompt until each of its
//! subscribers has a `text_delta` (p50 / p99 / max), the hot deltas' delivery latency,
//! subscribers cut for lagging (`spool_slow_client_disconnects_total`), and — after
//! every connection is closed and the server's `session_stream` gauge on `/metrics` is
//! back to 0 — the server's RSS after that churn against before.
//!
//! `--sweep 1000,2000,…` measures each count on a fresh server and prints one table;
//! `--plot FILE.svg` draws it (`plot.rs`).
//!
//! `--stuck` adds one subscriber on the hot session that reads its first frame and then
//! nothing, on a socket with a 4 KiB receive buffer. The server should cut it (the
//! engine drops a subscriber whose unsent frames pass 1 MiB) and nobody else. The bench
//! polls the cut counter on `/metrics` every 20 ms during the answer and notes how many
//! bytes one healthy hot subscriber had read when it moved; afterwards the stuck one
//! reads what the kernel still held for it, up to the end of its stream. The
//! difference is what was queued for it, unsent, when it was cut — the lag limit, seen
//! from outside.

use crate::fake_model::FakeModel;
use crate::latency::Spread;
use crate::nodes::{Cluster, Node};
use anyhow::{Context, Result, bail};
use memchr::memmem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc};

/// The first frame of a stream (a snapshot has an SSE id), inside an HTTP chunk or a
/// WebSocket message (`"<id>\nid: …"`).
const FIRST_FRAME: &[u8] = b"\nid: ";
/// A frame of the hot session's answer.
const DELTA: &[u8] = b"text_delta";
/// The answer's end.
const SETTLED: &[u8] = b"agent_settled";
/// File descriptors the bench and the server need besides their subscriber sockets.
const FD_HEADROOM: u64 = 4096;
/// The least headroom the bench runs with (the server's own files, the bench's
/// requests, the stuck subscriber).
const FD_MIN_SPARE: u64 = 256;

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
    spool: Option<std::path::PathBuf>,
    /// Idle subscribers, spread round robin over the sessions.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    subscribers: u64,
    /// Sessions the subscribers follow; the first one is the hot one that gets a prompt.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) sessions: u64,
    #[arg(long, value_enum, default_value_t = Transport::Sse)]
    pub(crate) transport: Transport,
    /// Connections being opened at once; the others wait their turn, so the server's
    /// accept backlog never overflows (a dropped SYN costs a 1 s retransmit).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    in_flight: u64,
    /// Connections per loopback source address: at most the ephemeral port range's size.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=64_000))]
    per_source: u64,
    /// Text deltas the fake model streams for the hot session's prompt.
    #[arg(long, default_value_t = 200)]
    pub(crate) deltas: u64,
    /// Pause between the fake model's deltas, in milliseconds.
    #[arg(long, default_value_t = 1)]
    pub(crate) delay_ms: u64,
    /// Hot subscribers note the receive instant of every this-many-th delta.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// Measure at each of these subscriber counts in turn, a fresh server each (e.g.
    /// `1000,2000,5000,10000,15000`); replaces --subscribers.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    sweep: Vec<u64>,
    /// Draw server RSS and hot-session latency against the subscriber count into this
    /// SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// One more subscriber on the hot session that reads its first frame and then
    /// nothing: the server should cut it once ≈ 1 MiB is queued for it, and nobody else.
    #[arg(long)]
    stuck: bool,
    /// Seconds the hot session's answer may take before the run is given up.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Seconds the server is left alone before each memory reading, so that what
    /// connecting or closing left to free has been freed.
    #[arg(long, default_value_t = 2)]
    settle_secs: u64,
}

pub async fn idle(args: &IdleArgs) -> Result<()> {
    let counts = if args.sweep.is_empty() { vec![args.subscribers] } else { args.sweep.clone() };
    let most = counts.iter().copied().max().unwrap_or(args.subscribers);
    // Children inherit the limit: raised here, it covers the server too.
    // Each process (bench, server) holds one socket per subscriber, plus its own few.
    // The headroom is generous; where the hard limit is below it but still leaves a
    // few hundred spare, the hard limit is enough.
    let fds = match raise_fd_limit(most + FD_HEADROOM) {
        Ok(fds) => fds,
        Err(e) => match hard_fd_limit() {
            Some(hard) if hard >= most + FD_MIN_SPARE => raise_fd_limit(hard)?,
            _ => return Err(e),
        },
    };
    let ports = ephemeral_ports()?;
    if args.per_source > ports {
        bail!(
            "--per-source {} is more than the {ports} ports of net.ipv4.ip_local_port_range: lower it",
            args.per_source
        );
    }
    println!("fd limit               {fds} (bench and server); ephemeral ports {ports}");
    let mut points = Vec::with_capacity(counts.len());
    for (i, &n) in counts.iter().enumerate() {
        if counts.len() > 1 {
            println!("--- {n} subscribers ({} of {})", i + 1, counts.len());
        }
        points.push(measure(args, n as usize).await?);
    }
    if counts.len() > 1 {
        print_sweep(&points);
    }
    if let Some(path) = &args.plot {
        crate::plot::idle(path, args, &points)?;
        println!("plot                   {}", path.display());
    }
    if points.iter().any(|p| !p.sound) {
        bail!("a hot subscriber missed deltas, or someone other than the stuck subscriber was cut (see above)");
    }
    Ok(())
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
    sound: bool,
}

/// Measures N idle subscribers on a fresh server, and prints what it found.
async fn measure(args: &IdleArgs, n: usize) -> Result<Point> {
    let sessions = args.sessions as usize;
    let bin = match &args.spool {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("spool"),
    };
    let model = FakeModel::start(args.deltas as usize, Duration::from_millis(args.delay_ms)).await?;
    let cluster = Cluster {
        database_url: None,
        redis_url: None,
        delay_ms: 0,
        config: None,
        openai_compatible: Some(&model.base_url),
    };
    let node = Node::start(&bin, &cluster, 0)?;
    let server: SocketAddr =
        node.base.strip_prefix("http://").context("the node's address")?.parse().context("the node's address")?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    let base = &node.base;
    let project_dir = tempfile::tempdir()?;
    let project: serde_json::Value = client
        .post(format!("{base}/api/projects"))
        .json(&serde_json::json!({"path": project_dir.path()}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let mut session_ids = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let session: serde_json::Value = client
            .post(format!("{base}/api/sessions"))
            // Titled: a first prompt on an untitled session asks the model for a title.
            .json(&serde_json::json!({"projectId": project["id"], "title": format!("idle {i}")}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        session_ids.push(session["id"].as_str().context("session id")?.to_owned());
    }
    let requests: Vec<Arc<[u8]>> = session_ids.iter().map(|id| request(args.transport, server, id).into()).collect();

    let settle = Duration::from_secs(args.settle_secs);
    tokio::time::sleep(settle).await;
    let before = Memory::of(&node);

    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (hot_tx, mut hot_rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(args.in_flight as usize));
    // What one healthy hot subscriber has read so far: the stuck one's lag is measured
    // against it.
    let witness = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n + 1);
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await?;
        let session = i % sessions;
        let sub = Sub {
            server,
            source: source_address(i, args.per_source),
            request: requests[session].clone(),
            ready: ready_tx.clone(),
            role: if session != 0 {
                Role::Idle
            } else {
                Role::Hot {
                    report: hot_tx.clone(),
                    every: args.sample_every,
                    witness: (i == 0).then(|| witness.clone()),
                }
            },
            permit,
        };
        tasks.push(tokio::spawn(sub.run()));
    }
    // The stuck subscriber: on the hot session, with a small receive buffer so that the
    // kernel holds little of what the server writes to it.
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel();
    let (stuck_tx, stuck_rx) = tokio::sync::oneshot::channel();
    if args.stuck {
        let sub = Sub {
            server,
            source: source_address(n, args.per_source),
            request: requests[0].clone(),
            ready: ready_tx.clone(),
            role: Role::Stuck { drain: drain_rx, report: stuck_tx },
            permit: gate.clone().acquire_owned().await?,
        };
        tasks.push(tokio::spawn(sub.run()));
    }
    drop((ready_tx, hot_tx));
    let expected = n + usize::from(args.stuck);
    for connected in 0..expected {
        match tokio::time::timeout(Duration::from_secs(120), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => bail!("subscriber failed after {connected} had connected: {e}"),
            Ok(None) | Err(_) => bail!("only {connected} of {expected} subscribers got a first frame within 120 s"),
        }
    }
    let connected = started.elapsed();
    tokio::time::sleep(settle).await;
    let idle = Memory::of(&node);
    let client_rss = self_status_kib("VmRSS:").unwrap_or(0);

    let hot = n.div_ceil(sessions);
    let cuts_before = metric(&client, base, "spool_slow_client_disconnects_total").await?;
    let prompted = Instant::now();
    client
        .post(format!("{base}/api/sessions/{}/prompt", session_ids[0]))
        .json(&serde_json::json!({"text": "bench", "requestId": "idle-bench"}))
        .send()
        .await?
        .error_for_status()?;
    let mut reports = Vec::with_capacity(hot);
    // When the server's cut counter moved, and what the witness had read by then.
    let mut cut: Option<(Duration, u64)> = None;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    let give_up = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    while reports.len() < hot {
        tokio::select! {
            report = hot_rx.recv() => match report {
                Some(report) => reports.push(report),
                None => bail!("only {} of {hot} hot subscribers reported", reports.len()),
            },
            _ = poll.tick(), if args.stuck && cut.is_none() => {
                if metric(&client, base, "spool_slow_client_disconnects_total").await? > cuts_before {
                    cut = Some((prompted.elapsed(), witness.load(Relaxed)));
                }
            }
            _ = tokio::time::sleep_until(give_up) => {
                bail!("only {} of {hot} hot subscribers had the whole answer within {} s", reports.len(), args.timeout_secs)
            }
        }
    }
    let answered = prompted.elapsed();
    let cuts = metric(&client, base, "spool_slow_client_disconnects_total").await? - cuts_before;
    let stuck = if args.stuck {
        let _ = drain_tx.send(());
        Some(stuck_rx.await.context("the stuck subscriber's report")?)
    } else {
        None
    };
    let peak = node.peak_rss_kib().unwrap_or(0);

    let closing = Instant::now();
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    let streams_left = wait_for_no_streams(&client, base).await?;
    let drained = closing.elapsed();
    tokio::time::sleep(settle).await;
    let after = Memory::of(&node);
    // A graceful stop, so a server run under a heap profiler (`--spool
    // scripts/heaptrack-serve`) writes its profile; killed on drop if it does not stop.
    let mut node = node;
    if let Err(e) = node.terminate(Duration::from_secs(20)) {
        eprintln!("warning: {e:#}");
    }

    let mut first_delta: Vec<f64> =
        reports.iter().filter_map(|r| r.first).map(|at| at.duration_since(prompted).as_secs_f64() * 1000.0).collect();
    first_delta.sort_by(f64::total_cmp);
    let written = model.written();
    let delivery = Spread::of(
        reports
            .iter()
            .flat_map(|r| &r.marks)
            .filter_map(|&(count, at)| {
                let sent = *written.get(count.checked_sub(1)? as usize)?;
                Some(at.saturating_duration_since(sent).as_secs_f64() * 1000.0)
            })
            .collect(),
    );
    let whole = reports.iter().filter(|r| r.settled && r.deltas == args.deltas).count();

    let per_sub = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let pct = |x: f64| 100.0 * x;
    println!("transport              {:?} ({})", args.transport, route(args.transport));
    println!("subscribers            {n} over {sessions} sessions, from source addresses of {} each", args.per_source);
    println!(
        "connected              all {expected} in {:.2} s ({:.0}/s, {} at once), each with its first frame",
        connected.as_secs_f64(),
        expected as f64 / connected.as_secs_f64(),
        args.in_flight
    );
    println!(
        "server RSS             {:.1} MiB before, {:.1} MiB with {n} idle subscribers: {:.2} KiB each (RssAnon {:.1} -> {:.1} MiB: {:.2} KiB each)",
        mib(before.rss),
        mib(idle.rss),
        per_sub(idle.rss, before.rss),
        mib(before.anon),
        mib(idle.anon),
        per_sub(idle.anon, before.anon)
    );
    println!(
        "client RSS             {:.1} MiB ({:.2} KiB per subscriber)",
        mib(client_rss),
        client_rss as f64 / n as f64
    );
    println!(
        "hot session            {hot} subscribers, {} deltas {} ms apart from the fake model, all in {:.2} s; {whole} of {hot} got every delta",
        args.deltas,
        args.delay_ms,
        answered.as_secs_f64()
    );
    println!(
        "  first delta          after the POST, ms: p50 {:.1} / p99 {:.1} / max {:.1}",
        quantile(&first_delta, 0.50),
        quantile(&first_delta, 0.99),
        first_delta.last().copied().unwrap_or(0.0)
    );
    match &delivery {
        Some(d) => println!(
            "  delivery latency     receive − model write, every {}th delta, ms: p50 {:.2} / p99 {:.2} / max {:.2} ({} samples)",
            args.sample_every, d.p50, d.p99, d.max, d.count
        ),
        None => println!("  delivery latency     no samples"),
    }
    println!("cut for lagging        {cuts} (spool_slow_client_disconnects_total during the answer)");
    let mut sound = whole == hot;
    if let Some(stuck) = &stuck {
        match cut {
            Some((at, witness_bytes)) => println!(
                "stuck subscriber       cut {:.2} s after the prompt; a healthy hot subscriber had read {:.0} KiB by then, the stuck one got {:.0} KiB before the server closed it ({}): {:.0} KiB were queued for it when it was cut",
                at.as_secs_f64(),
                witness_bytes as f64 / 1024.0,
                stuck.bytes as f64 / 1024.0,
                if stuck.closed { "end of stream" } else { "NOT closed: still open" },
                witness_bytes.saturating_sub(stuck.bytes) as f64 / 1024.0
            ),
            None => println!(
                "stuck subscriber       NOT cut during the answer (it got {:.0} KiB): the answer is too short to fill its socket and the 1 MiB queue; raise --deltas",
                stuck.bytes as f64 / 1024.0
            ),
        }
        sound &= cuts == 1.0 && cut.is_some();
    } else {
        sound &= cuts == 0.0;
    }
    println!("server RSS peak        {:.1} MiB (VmHWM)", mib(peak));
    println!(
        "after churn            all closed, streams gauge {streams_left} after {:.2} s; server RSS {:.1} MiB ({:+.0} % of before; {:.0} % of the {n}-subscriber level), RssAnon {:.1} MiB",
        drained.as_secs_f64(),
        mib(after.rss),
        pct(after.rss as f64 / before.rss.max(1) as f64 - 1.0),
        pct(after.rss as f64 / idle.rss.max(1) as f64),
        mib(after.anon)
    );
    Ok(Point {
        subscribers: n as u64,
        connect_rate: expected as f64 / connected.as_secs_f64(),
        rss_before: before.rss,
        rss_idle: idle.rss,
        rss_after: after.rss,
        per_subscriber: per_sub(idle.rss, before.rss),
        first_delta: (quantile(&first_delta, 0.50), quantile(&first_delta, 0.99)),
        delivery,
        sound,
    })
}

/// The sweep as one table, a row per subscriber count.
fn print_sweep(points: &[Point]) {
    println!(
        "sweep: subscribers | connect/s | RSS before → with → after churn, MiB | KiB per subscriber | first delta p50 / p99 ms | delivery p50 / p99 ms"
    );
    for p in points {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let (d50, d99) = p.delivery.as_ref().map_or((f64::NAN, f64::NAN), |d| (d.p50, d.p99));
        println!(
            "  {:>6} | {:>6.0} | {:.1} → {:.1} → {:.1} | {:.2} | {:.1} / {:.1} | {:.2} / {:.2}",
            p.subscribers,
            p.connect_rate,
            mib(p.rss_before),
            mib(p.rss_idle),
            mib(p.rss_after),
            p.per_subscriber,
            p.first_delta.0,
            p.first_delta.1,
            d50,
            d99
        );
    }
}

/// Subscriber `i`'s loopback source address: 127.1.0.1, 127.1.0.2, …, `per_source`
/// connections each; 250 per third octet, never a .0 host.
fn source_address(i: usize, per_source: u64) -> Ipv4Addr {
    let k = i / per_source as usize;
    Ipv4Addr::new(127, 1 + (k / 62_500) as u8, ((k / 250) % 250) as u8, (k % 250) as u8 + 1)
}

/// One value of the server's `/metrics` (a line `NAME VALUE`; `name` may carry labels).
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    let text = client.get(format!("{base}/metrics")).send().await?.error_for_status()?.text().await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {name} on /metrics"))
}

fn route(transport: Transport) -> &'static str {
    match transport {
        Transport::Sse => "GET /api/sessions/:id/events",
        Transport::Ws => "GET /api/streams, one session stream per socket",
    }
}

/// The bytes a subscriber sends: the request, and for a WebSocket its `open` message
/// right behind the handshake (the server keeps what it read past the request for the
/// upgraded socket).
fn request(transport: Transport, server: SocketAddr, session: &str) -> Vec<u8> {
    match transport {
        Transport::Sse => format!(
            "GET /api/sessions/{session}/events HTTP/1.1\r\nHost: {server}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .into_bytes(),
        Transport::Ws => {
            let mut out = format!(
                "GET /api/streams HTTP/1.1\r\nHost: {server}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            .into_bytes();
            let open = serde_json::json!({"op": "open", "id": "s", "session": session}).to_string();
            out.extend(masked_text_frame(open.as_bytes()));
            out
        }
    }
}

/// One client-to-server WebSocket text frame (RFC 6455 §5.2: FIN, opcode 1, masked, as
/// a client must send). The mask is fixed: it guards proxies, not this benchmark.
fn masked_text_frame(payload: &[u8]) -> Vec<u8> {
    const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len => {
            frame.push(0x80 | 126);
            frame.extend((len as u16).to_be_bytes());
        }
    }
    frame.extend(MASK);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    frame
}

/// One subscriber's task.
struct Sub {
    server: SocketAddr,
    source: Ipv4Addr,
    request: Arc<[u8]>,
    /// Told once: the first frame arrived, or why not.
    ready: mpsc::UnboundedSender<Result<(), String>>,
    role: Role,
    /// A place among the connections being opened, given back with the first frame.
    permit: tokio::sync::OwnedSemaphorePermit,
}

/// What a subscriber does once its stream is open.
enum Role {
    /// Reads heartbeats and drops them.
    Idle,
    /// On the hot session: counts the answer's deltas, noting every `every`th one's
    /// receive instant, and reports at `agent_settled`. One of them (the witness) also
    /// counts the bytes it has read.
    Hot { report: mpsc::UnboundedSender<HotReport>, every: u64, witness: Option<Arc<AtomicU64>> },
    /// On the hot session: reads nothing until told to drain, then reads to the end of
    /// the stream (or 2 s of silence) and reports how many bytes there were.
    Stuck { drain: tokio::sync::oneshot::Receiver<()>, report: tokio::sync::oneshot::Sender<StuckReport> },
}

/// What a hot subscriber saw of the answer.
struct HotReport {
    first: Option<Instant>,
    /// `(n, received)`: the nth delta (from 1) for every multiple of `every`.
    marks: Vec<(u64, Instant)>,
    deltas: u64,
    settled: bool,
}

struct StuckReport {
    /// Bytes read after its first frame, all of them read only when told to drain.
    bytes: u64,
    /// The server closed the stream (it was cut), rather than the reads going silent.
    closed: bool,
}

impl Sub {
    async fn run(self) {
        let Sub { server, source, request, ready, role, permit } = self;
        let mut reader = Reader::new();
        let small_buffer = matches!(role, Role::Stuck { .. });
        let opened = async {
            let mut tcp = connect(server, source, small_buffer).await?;
            tcp.write_all(&request).await?;
            if !reader.until(&mut tcp, FIRST_FRAME).await? {
                bail!("the server closed the stream before its first frame");
            }
            Ok(tcp)
        };
        let mut tcp = match opened.await {
            Ok(tcp) => tcp,
            Err(e) => {
                let _ = ready.send(Err(format!("from {source}: {e:#}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        drop((ready, permit, request));
        match role {
            Role::Idle => {}
            Role::Hot { report, every, witness } => {
                let hot = reader.answer(&mut tcp, every, witness.as_deref()).await;
                let _ = report.send(hot);
            }
            Role::Stuck { drain, report } => {
                let _ = drain.await;
                let mut stuck = StuckReport { bytes: 0, closed: false };
                loop {
                    match tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut reader.buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => {
                            stuck.closed = true;
                            break;
                        }
                        Ok(Ok(read)) => stuck.bytes += read as u64,
                        Err(_) => break,
                    }
                }
                let _ = report.send(stuck);
                return;
            }
        }
        // Idle from here: heartbeats (and the hot session's answer) read and dropped.
        while let Ok(1..) = tcp.read(&mut reader.buf).await {}
    }
}

/// A socket bound to `source` and connected to `server`; with `small_buffer`, a 4 KiB
/// receive buffer (set before connecting, so the window never grows past it).
async fn connect(server: SocketAddr, source: Ipv4Addr, small_buffer: bool) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if small_buffer {
        socket.set_recv_buffer_size(4096)?;
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `one` (a c_int, its size given) and the socket is ours.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        bail!("IP_BIND_ADDRESS_NO_PORT: {}", std::io::Error::last_os_error());
    }
    socket.bind(SocketAddr::V4(SocketAddrV4::new(source, 0))).with_context(|| format!("binding {source}"))?;
    socket.connect(server).await.with_context(|| format!("connecting from {source}"))
}

/// Reads a socket looking for a byte pattern; everything else is dropped.
struct Reader {
    buf: [u8; 1024],
    /// Bytes at the front of `buf` kept from the previous read (a pattern's beginning).
    kept: usize,
    /// Whether the response's status line has been checked.
    checked: bool,
}

impl Reader {
    fn new() -> Self {
        Self { buf: [0; 1024], kept: 0, checked: false }
    }

    /// Reads until `pattern` has arrived (true) or the socket closed (false). The first
    /// read must start with a 200 or 101 status line; any other answer is the error.
    async fn until(&mut self, tcp: &mut TcpStream, pattern: &[u8]) -> Result<bool> {
        loop {
            let read = tcp.read(&mut self.buf[self.kept..]).await?;
            if read == 0 {
                return Ok(false);
            }
            let end = self.kept + read;
            if !self.checked {
                self.checked = true;
                let head = &self.buf[..end];
                if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.1 101") {
                    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
                    bail!("the server answered {:?}", String::from_utf8_lossy(line));
                }
            }
            if memmem::find(&self.buf[..end], pattern).is_some() {
                self.kept = 0;
                return Ok(true);
            }
            let keep = (pattern.len() - 1).min(end);
            self.buf.copy_within(end - keep..end, 0);
            self.kept = keep;
        }
    }
}

impl Reader {
    /// Reads the hot session's answer until `agent_settled` (or the end of the stream):
    /// counts `text_delta`s and notes when every `every`th arrived. A pattern that ends
    /// in the bytes kept from the previous read was counted there, and is not again.
    async fn answer(&mut self, tcp: &mut TcpStream, every: u64, witness: Option<&AtomicU64>) -> HotReport {
        let mut hot = HotReport { first: None, marks: Vec::new(), deltas: 0, settled: false };
        let keep_len = DELTA.len().max(SETTLED.len()) - 1;
        loop {
            let read = match tcp.read(&mut self.buf[self.kept..]).await {
                Ok(0) | Err(_) => return hot,
                Ok(read) => read,
            };
            let at = Instant::now();
            if let Some(witness) = witness {
                witness.fetch_add(read as u64, Relaxed);
            }
            let (kept, end) = (self.kept, self.kept + read);
            let bytes = &self.buf[..end];
            let settled = memmem::find_iter(bytes, SETTLED).find(|p| p + SETTLED.len() > kept);
            let new = memmem::find_iter(bytes, DELTA)
                .filter(|&p| p + DELTA.len() > kept && settled.is_none_or(|end| p < end))
                .count();
            for _ in 0..new {
                hot.deltas += 1;
                hot.first.get_or_insert(at);
                if hot.deltas.is_multiple_of(every) {
                    hot.marks.push((hot.deltas, at));
                }
            }
            if settled.is_some() {
                hot.settled = true;
                self.kept = 0;
                return hot;
            }
            let keep = keep_len.min(end);
            self.buf.copy_within(end - keep..end, 0);
            self.kept = keep;
        }
    }
}

/// VmRSS and RssAnon of the node, in KiB.
struct Memory {
    rss: u64,
    anon: u64,
}

impl Memory {
    fn of(node: &Node) -> Self {
        Self { rss: node.rss_kib().unwrap_or(0), anon: node.rss_anon_kib().unwrap_or(0) }
    }
}

/// Polls `/metrics` until no session stream is open (every closed connection's body has
/// been dropped); gives the gauge's last value after 60 s if it never gets there.
async fn wait_for_no_streams(client: &reqwest::Client, base: &str) -> Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = client.get(format!("{base}/metrics")).send().await?.error_for_status()?.text().await?;
        let open = text
            .lines()
            .find_map(|l| l.strip_prefix("spool_open_connections{kind=\"session_stream\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .context("no session_stream gauge on /metrics")? as i64;
        if open == 0 || Instant::now() > deadline {
            return Ok(open);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Raises this process's open-file limit to `want` (its children inherit it), the hard
/// limit too when allowed (root or CAP_SYS_RESOURCE); the error says what to set.
fn raise_fd_limit(want: u64) -> Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    if limit.rlim_cur >= want {
        return Ok(limit.rlim_cur);
    }
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")?.trim().parse()?;
    if want > nr_open {
        bail!("{want} file descriptors are needed, more than fs.nr_open ({nr_open}): sysctl -w fs.nr_open={want}");
    }
    let raised = libc::rlimit { rlim_cur: want, rlim_max: limit.rlim_max.max(want) };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        bail!(
            "{want} file descriptors are needed; the limit is {} (hard {}) and could not be raised ({}): \
             run `ulimit -n {want}` as root first (or LimitNOFILE= in a systemd unit)",
            limit.rlim_cur,
            limit.rlim_max,
            std::io::Error::last_os_error()
        );
    }
    Ok(want)
}

/// The hard open-file limit of this process.
fn hard_fd_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit.rlim_max)
}

/// How many ports `net.ipv4.ip_local_port_range` holds.
fn ephemeral_ports() -> Result<u64> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")?;
    let mut ends = range.split_whitespace().map(str::parse::<u64>);
    match (ends.next(), ends.next()) {
        (Some(Ok(low)), Some(Ok(high))) if high >= low => Ok(high - low + 1),
        _ => bail!("cannot read net.ipv4.ip_local_port_range: {range:?}"),
    }
}

/// One `kB` field of this process's `/proc/self/status`.
fn self_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_frame_is_masked_and_unmasks_to_its_payload() {
        let payload = br#"{"op":"open","id":"s","session":"ses_1"}"#;
        let frame = masked_text_frame(payload);
        assert_eq!(frame[0], 0x81, "FIN and text");
        assert_eq!(frame[1], 0x80 | payload.len() as u8, "masked, short length");
        let mask = &frame[2..6];
        let unmasked: Vec<u8> = frame[6..].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        assert_eq!(unmasked, payload);
        let long = masked_text_frame(&[b'x'; 300]);
        assert_eq!((long[1], u16::from_be_bytes([long[2], long[3]])), (0x80 | 126, 300));
    }

    /// Patterns split across reads are counted once, and the answer ends at
    /// `agent_settled` even when it straddles two reads.
    #[tokio::test]
    async fn a_hot_reader_counts_each_delta_once_across_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.set_nodelay(true).unwrap();
            let pieces: [&[u8]; 5] = [
                b"data: {\"type\":\"text_delta\"}\n\ndata: {\"type\":\"text_del",
                b"ta\"}\n\ndata: {\"type\":\"text_delta\"}\n\n",
                b"data: {\"type\":\"text_delta\"}\n\ndata: {\"type\":\"agent_set",
                b"tled\"}\n\n",
                b"data: {\"type\":\"text_delta\"}\n\n",
            ];
            for piece in pieces {
                socket.write_all(piece).await.unwrap();
                // Likely each piece its own read; the counts are the same either way.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let witness = AtomicU64::new(0);
        let hot = Reader::new().answer(&mut tcp, 2, Some(&witness)).await;
        assert!(hot.settled);
        assert_eq!(hot.deltas, 4, "the delta after agent_settled is not the answer's");
        assert_eq!(hot.marks.iter().map(|m| m.0).collect::<Vec<_>>(), [2, 4]);
        assert!(witness.load(Relaxed) > 0);
        writer.await.unwrap();
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99), quantile(&[], 0.5)), (50.0, 99.0, 0.0));
    }
}
