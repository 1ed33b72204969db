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
//!
//! The pieces: [`args`] (what is asked, and the numbers one count yields), [`client`]
//! (one subscriber's connection and reads), [`system`] (the limits of this machine
//! and the server's memory and `/metrics`), and [`plot`].

mod args;
pub(crate) mod client;
pub(crate) mod plot;
pub(crate) mod system;

pub use args::IdleArgs;

use crate::fake_model::FakeModel;
use crate::latency::Spread;
use crate::nodes::{Cluster, Node};
use anyhow::{Context, Result, bail};
use args::Point;
use client::{Role, Sub, request, route, source_address};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use system::{Memory, ephemeral_ports, hard_fd_limit, metric, raise_fd_limit, self_status_kib, wait_for_no_streams};
use tokio::sync::{Semaphore, mpsc};

/// File descriptors the bench and the server need besides their subscriber sockets.
const FD_HEADROOM: u64 = 4096;
/// The least headroom the bench runs with (the server's own files, the bench's
/// requests, the stuck subscriber).
const FD_MIN_SPARE: u64 = 256;

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
        plot::idle(path, args, &points)?;
        println!("plot                   {}", path.display());
    }
    if points.iter().any(|p| !p.sound) {
        bail!("a hot subscriber missed deltas, or someone other than the stuck subscriber was cut (see above)");
    }
    Ok(())
}

/// Measures N idle subscribers on a fresh server, and prints what it found.
async fn measure(args: &IdleArgs, n: usize) -> Result<Point> {
    let sessions = args.sessions as usize;
    let bin = crate::nodes::spool_bin(args.spool.as_ref())?;
    let model = FakeModel::start(args.deltas as usize, Duration::from_millis(args.delay_ms)).await?;
    let cluster = Cluster::solo(&model.base_url);
    let node = Node::start(&bin, &cluster, 0)?;
    let server: SocketAddr =
        node.base.strip_prefix("http://").context("the node's address")?.parse().context("the node's address")?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    let base = &node.base;
    let (_project_dir, project) = crate::nodes::new_project(&client, base).await?;
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

/// The `q` quantile of sorted values (nearest rank).
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
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
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99), quantile(&[], 0.5)), (50.0, 99.0, 0.0));
    }
}
