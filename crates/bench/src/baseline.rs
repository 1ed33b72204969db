//! `spool-bench baseline`: Spool's fan-out against a bare broadcast hub (`hub.rs`), in
//! one run, measured one way (issue 19: "server CPU per delivered frame at K = 1,000
//! with a paced model within 1.5× of a bare broadcast hub, without adding more than
//! 1 ms to delivery latency p99").
//!
//! Per run and server: a fresh fake OpenAI-compatible model (`fake_model.rs`, D one-word
//! deltas paced `--delay-ms` apart against the answer's start) and a fresh server that
//! streams it — `spool serve --model openai-compatible:bench` (SQLite, one session,
//! after a warm-up prompt on another session, so the first model call's setup is not
//! measured), or `spool-bench hub`. K subscribers read the server's SSE stream
//! (`/api/sessions/:id/events`, or the hub's `/events`, whose frames have the same shape
//! and size), each ready at its first frame. Then the server's CPU time is read
//! (utime + stime, `/proc/PID/stat`), the prompt is sent, and each subscriber reads
//! until `agent_settled`; the CPU time is read again when the last one has.
//!
//! Reported per server, per run and as a median over runs:
//!
//! - **CPU per delivered frame**: that CPU time divided by the frames (SSE events with an
//!   id) all subscribers received after their first; and per delivered delta (Spool also
//!   sends its run's other frames, ≈ 13 per answer, which the hub does not).
//! - **delivery latency**: for every `--sample-every`th delta `w{i}`, each subscriber's
//!   receive instant minus the instant the fake model wrote that delta to its socket
//!   (the bench, the model and the servers share one machine and one monotonic clock).
//!   It includes the model-to-server hop, the same for both. A socket read is
//!   timestamped once and every frame in it counts as received then.
//!
//! Servers alternate within a run (Spool, then the hub) so a neighbour's load on the
//! shared machine falls on both; the load average is printed with every row.

use crate::fake_model::FakeModel;
use crate::hub::Hub;
use crate::latency::Spread;
use crate::nodes::{Cluster, Node, cpu_seconds};
use crate::subscriber::Events;
use anyhow::{Context, Result, bail};
use memchr::memmem::Finder;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(clap::Args, Debug)]
pub struct BaselineArgs {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Subscribers (K) on the one stream.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// One-word deltas the fake model streams.
    #[arg(long, default_value_t = 500)]
    deltas: usize,
    /// Pause between the fake model's deltas, in milliseconds (0: as fast as possible).
    #[arg(long, default_value_t = 2)]
    delay_ms: u64,
    /// Runs per server (fresh servers and model each run).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Latency is sampled on deltas whose index is a multiple of this.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// A subscriber that has not seen the end after this long gives up.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Starts each server (`spool serve`, the hub) on these CPUs (`0-3`, as `taskset -c`
    /// takes them), so its runtime has a worker per CPU there; pin the bench itself
    /// elsewhere with `taskset` (`scripts/bench-p99-pinned` does both).
    #[arg(long, value_name = "LIST")]
    server_cpus: Option<crate::pin::Cpus>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Spool,
    Hub,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Spool => "spool",
            Server::Hub => "hub",
        }
    }
}

/// One server's numbers for one run.
struct Measure {
    server: Server,
    load: String,
    elapsed: Duration,
    cpu: f64,
    /// The bench's own CPU time over the same window (its subscribers and the model).
    client_cpu: f64,
    frames: u64,
    deltas: u64,
    bytes: u64,
    every_delta: usize,
    finished: usize,
    model_calls: u64,
    latency: Spread,
    /// The sampled deltas slowest for their subscribers: (index, ms into the answer the
    /// model wrote it, median latency over the subscribers). A stall on the server's
    /// side delays one delta for everyone; the run queues of a busy machine do not.
    slowest: Vec<(u64, f64, f64)>,
}

impl Measure {
    fn us_per_frame(&self) -> f64 {
        self.cpu * 1e6 / self.frames.max(1) as f64
    }

    fn us_per_delta(&self) -> f64 {
        self.cpu * 1e6 / self.deltas.max(1) as f64
    }
}

pub async fn baseline(args: &BaselineArgs) -> Result<()> {
    let spool = crate::nodes::spool_bin(args.spool.as_ref())?;
    println!(
        "{} subscribers, {} deltas {} ms apart (fake OpenAI-compatible model); {} run(s) per server",
        args.subscribers, args.deltas, args.delay_ms, args.runs
    );
    let mut all = Vec::new();
    for run in 1..=args.runs {
        for server in [Server::Spool, Server::Hub] {
            let m = measure(args, server, &spool).await?;
            print_row(run, &m, args);
            all.push(m);
        }
    }
    println!("median (min–max) over {} run(s):", args.runs);
    for server in [Server::Spool, Server::Hub] {
        let runs: Vec<&Measure> = all.iter().filter(|m| m.server == server).collect();
        println!(
            "  {:<6} µs CPU per frame {}   per delta {}   latency ms p50 {}   p99 {}   server CPU {} s",
            server.name(),
            summary(&runs, Measure::us_per_frame),
            summary(&runs, Measure::us_per_delta),
            summary(&runs, |m| m.latency.p50),
            summary(&runs, |m| m.latency.p99),
            summary(&runs, |m| m.cpu),
        );
    }
    // Each run's Spool row against the hub row measured right after it.
    let pairs: Vec<(&Measure, &Measure)> =
        all.chunks(2).filter_map(|pair| Some((pair.first()?, pair.get(1)?))).collect();
    let ratios: Vec<f64> = pairs.iter().map(|(s, h)| s.us_per_frame() / h.us_per_frame().max(1e-9)).collect();
    let delta_ratios: Vec<f64> = pairs.iter().map(|(s, h)| s.us_per_delta() / h.us_per_delta().max(1e-9)).collect();
    let added_p99: Vec<f64> = pairs.iter().map(|(s, h)| s.latency.p99 - h.latency.p99).collect();
    println!(
        "spool ÷ hub            CPU per frame {} (goal ≤ 1.5), per delta {}; latency p99 added {} ms (goal ≤ 1)",
        median_range(ratios),
        median_range(delta_ratios),
        median_range(added_p99),
    );
    let sound = all.iter().all(|m| m.every_delta == args.subscribers && m.finished == args.subscribers);
    if !sound {
        bail!("some subscriber missed a delta or never saw the end (see the rows above)");
    }
    Ok(())
}

async fn measure(args: &BaselineArgs, server: Server, spool: &Path) -> Result<Measure> {
    let model = FakeModel::start(args.deltas, Duration::from_millis(args.delay_ms)).await?;
    let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(args.subscribers + 4).build()?;
    let cpus = args.server_cpus.as_ref().map(|cpus| cpus.0.as_slice());
    // The server process lives until the end of this function (dropped: killed), and so
    // does the project's directory: Spool refuses a prompt in a project whose directory
    // is gone.
    let mut _project_dir = None;
    let (_node, _hub, pid, events_url, prompt): (Option<Node>, Option<Hub>, u32, String, Prompt) = match server {
        Server::Spool => {
            let cluster = Cluster { cpus, ..Cluster::solo(&model.base_url) };
            let node = Node::start(spool, &cluster, 0)?;
            let base = node.base.clone();
            let (dir, project) = crate::nodes::new_project(&client, &base).await?;
            _project_dir = Some(dir);
            let new_session = || async {
                let session: serde_json::Value = client
                    .post(format!("{base}/api/sessions"))
                    // Titled, so the first prompt does not ask the model for a title.
                    .json(&serde_json::json!({"projectId": project["id"], "title": "bench"}))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                anyhow::Ok(session["id"].as_str().context("session id")?.to_owned())
            };
            let warm_up = new_session().await?;
            let run = spool_prompt(&client, &base, &warm_up, "warm-up").await?;
            wait_for_run(&client, &base, &run).await?;
            let session = new_session().await?;
            let pid = node.pid();
            (Some(node), None, pid, format!("{base}/api/sessions/{session}/events"), Prompt::Spool { base, session })
        }
        Server::Hub => {
            let hub = Hub::start(&model.base_url, cpus)?;
            let base = hub.base.clone();
            let pid = hub.pid();
            (None, Some(hub), pid, format!("{base}/events"), Prompt::Hub { base })
        }
    };

    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(args.subscribers.max(1));
    let tasks: Vec<_> = (0..args.subscribers)
        .map(|_| tokio::spawn(read(events_url.clone(), args.sample_every, ready_tx.clone(), deadline)))
        .collect();
    crate::wait_ready(&mut ready_rx, args.subscribers).await?;
    drop(ready_tx);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");

    let calls_before = model.calls();
    let cpu_before = cpu_seconds(pid).context("the server's CPU time")?;
    let client_before = cpu_seconds(std::process::id()).unwrap_or(0.0);
    let prompted = Instant::now();
    match &prompt {
        Prompt::Spool { base, session } => {
            spool_prompt(&client, base, session, "bench").await?;
        }
        Prompt::Hub { base } => {
            client.post(format!("{base}/prompt")).send().await?.error_for_status()?;
        }
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await??);
    }
    let elapsed = prompted.elapsed();
    let cpu = cpu_seconds(pid).context("the server's CPU time")? - cpu_before;
    let client_cpu = cpu_seconds(std::process::id()).unwrap_or(0.0) - client_before;
    let written = model.written();
    let mut latencies = Vec::new();
    let mut by_delta: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for outcome in &outcomes {
        for &(i, at) in &outcome.samples {
            if let Some(&sent) = written.get(i as usize) {
                latencies.push(signed_ms(at, sent));
                by_delta.entry(i).or_default().push(signed_ms(at, sent));
            }
        }
    }
    let start = written.first().copied();
    let mut slowest: Vec<(u64, f64, f64)> = by_delta
        .into_iter()
        .filter_map(|(i, mut ms)| {
            ms.sort_by(f64::total_cmp);
            let into = signed_ms(*written.get(i as usize)?, start?);
            Some((i, into, ms[ms.len() / 2]))
        })
        .collect();
    slowest.sort_by(|a, b| b.2.total_cmp(&a.2));
    slowest.truncate(5);
    Ok(Measure {
        server,
        load,
        elapsed,
        cpu,
        client_cpu,
        frames: outcomes.iter().map(|o| o.frames).sum(),
        deltas: outcomes.iter().map(|o| o.deltas).sum(),
        bytes: outcomes.iter().map(|o| o.bytes).sum(),
        every_delta: outcomes.iter().filter(|o| o.deltas == args.deltas as u64).count(),
        finished: outcomes.iter().filter(|o| o.finished).count(),
        model_calls: model.calls() - calls_before,
        latency: Spread::of(latencies).context("no latency sample: did any delta arrive?")?,
        slowest,
    })
}

/// How the measured prompt is sent.
enum Prompt {
    Spool { base: String, session: String },
    Hub { base: String },
}

/// Sends a prompt to a Spool session; returns its run id.
async fn spool_prompt(client: &reqwest::Client, base: &str, session: &str, request_id: &str) -> Result<String> {
    let accepted: serde_json::Value = client
        .post(format!("{base}/api/sessions/{session}/prompt"))
        .json(&serde_json::json!({"text": "bench", "requestId": request_id}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(accepted["runId"].as_str().context("the prompt's runId")?.to_owned())
}

/// Polls a run until it is no longer running (the warm-up has no subscriber to watch).
async fn wait_for_run(client: &reqwest::Client, base: &str, run: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let body: serde_json::Value =
            client.get(format!("{base}/api/runs/{run}")).send().await?.error_for_status()?.json().await?;
        match body["status"].as_str() {
            Some("running") => {}
            Some("completed") => return Ok(()),
            other => bail!("the warm-up run ended {other:?}"),
        }
        if Instant::now() > deadline {
            bail!("the warm-up run did not end within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one subscriber received after its first frame.
struct Received {
    frames: u64,
    deltas: u64,
    bytes: u64,
    finished: bool,
    /// `(i, received)` of the deltas `w{i}` with `i % sample_every == 0`.
    samples: Vec<(u64, Instant)>,
}

/// Reads one SSE stream until `agent_settled`: counts frames (events with an id) and
/// deltas, and keeps the sampled deltas' receive instants.
///
/// Raw HTTP over a socket, not an HTTP client: with 1,000 subscribers each taking a
/// frame every 2 ms, the client is what saturates first on a shared two-core box, and
/// its delays would be counted as the server's latency. The body is read as it comes,
/// chunk-size lines and all: a chunk holds whole SSE events, so a chunk-size line can
/// only sit in front of an event, where it is skipped.
async fn read(
    url: String,
    sample_every: u64,
    ready: tokio::sync::mpsc::Sender<Result<(), String>>,
    deadline: tokio::time::Instant,
) -> Result<Received> {
    let opened = async {
        let rest = url.strip_prefix("http://").context("an http:// URL")?;
        let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        tcp.write_all(request.as_bytes()).await?;
        anyhow::Ok(tcp)
    };
    let mut tcp = match opened.await {
        Ok(tcp) => tcp,
        Err(e) => {
            let _ = ready.send(Err(format!("GET {url}: {e:#}"))).await;
            return Err(e);
        }
    };
    let (delta, settled) = (Finder::new(b"\"type\":\"text_delta\""), Finder::new(b"\"type\":\"agent_settled\""));
    let (word, id) = (Finder::new(b"\"delta\":\"w"), Finder::new(b"id: "));
    let mut got = Received { frames: 0, deltas: 0, bytes: 0, finished: false, samples: Vec::new() };
    let (mut first, mut announced, mut in_body) = (true, false, false);
    let mut events = Events::default();
    let mut buf = vec![0u8; 16 * 1024];
    while !got.finished {
        let read = match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(read @ 1..)) => read,
            Err(_) | Ok(Ok(0) | Err(_)) => break,
        };
        let at = Instant::now();
        let mut chunk = &buf[..read];
        if !in_body {
            // The response head arrives whole in the first read on loopback.
            let end = memchr::memmem::find(chunk, b"\r\n\r\n");
            let (Some(end), true) = (end, chunk.starts_with(b"HTTP/1.1 200")) else {
                let line = chunk.split(|&b| b == b'\r').next().unwrap_or_default();
                let refused = format!("GET {url}: {}", String::from_utf8_lossy(line));
                let _ = ready.send(Err(refused.clone())).await;
                bail!(refused);
            };
            chunk = &chunk[end + 4..];
            in_body = true;
        }
        events.feed(chunk, |event| {
            // A chunk-size line may precede the event; heartbeats carry no id.
            if id.find(&event[..event.len().min(16)]).is_none() || got.finished {
                return;
            }
            if first {
                first = false;
                return;
            }
            got.frames += 1;
            got.bytes += event.len() as u64 + 2;
            if delta.find(event).is_some() {
                got.deltas += 1;
                if let Some(i) = word.find(event).and_then(|at| index(&event[at + word.needle().len()..]))
                    && i % sample_every == 0
                {
                    got.samples.push((i, at));
                }
            } else if settled.find(event).is_some() {
                got.finished = true;
            }
        });
        if !first && !announced {
            // The first frame is the stream's opening (a snapshot): the subscriber is in.
            announced = true;
            let _ = ready.send(Ok(())).await;
        }
    }
    Ok(got)
}

/// The decimal number at the start of `bytes` (the `17` of `w17 `).
fn index(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&bytes[..digits]).ok()?.parse().ok()
}

/// `a - b` in milliseconds, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => d.as_secs_f64() * 1000.0,
        None => -(b - a).as_secs_f64() * 1000.0,
    }
}

fn print_row(run: u64, m: &Measure, args: &BaselineArgs) {
    let k = args.subscribers.max(1) as f64;
    println!(
        "run {run} {:<5} load {}  elapsed {:.3} s  server CPU {:.3} s (client {:.2} s)  {:.3} µs/frame  {:.3} µs/delta  \
         latency ms p50 {:.2} p99 {:.2} max {:.2}  frames/subscriber {:.0} ({:.0} B each)  every delta {} of {}  ended {} of {}  model calls {}",
        m.server.name(),
        m.load,
        m.elapsed.as_secs_f64(),
        m.cpu,
        m.client_cpu,
        m.us_per_frame(),
        m.us_per_delta(),
        m.latency.p50,
        m.latency.p99,
        m.latency.max,
        m.frames as f64 / k,
        m.bytes as f64 / m.frames.max(1) as f64,
        m.every_delta,
        args.subscribers,
        m.finished,
        args.subscribers,
        m.model_calls,
    );
    let slowest: Vec<String> =
        m.slowest.iter().map(|(i, into, ms)| format!("w{i} (written at {into:.0} ms) {ms:.2} ms")).collect();
    println!("      slowest sampled deltas, median over subscribers: {}", slowest.join(", "));
}

/// `median (min–max)` of one figure over runs.
fn summary(runs: &[&Measure], figure: impl Fn(&Measure) -> f64) -> String {
    median_range(runs.iter().map(|m| figure(m)).collect())
}

fn median_range(mut values: Vec<f64>) -> String {
    if values.is_empty() {
        return "—".to_owned();
    }
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    if values.len() == 1 {
        return format!("{median:.2}");
    }
    format!("{median:.2} ({:.2}–{:.2})", values[0], values[values.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_gives_its_index() {
        assert_eq!(index(b"17 \"}}"), Some(17));
        assert_eq!(index(b"x"), None);
    }

    #[test]
    fn medians_are_of_the_sorted_values() {
        assert_eq!(median_range(vec![3.0, 1.0, 2.0]), "2.00 (1.00–3.00)");
        assert_eq!(median_range(vec![0.5]), "0.50");
    }
}
