//! `spool-bench nodes`: many idle subscribers across N `spool serve` nodes and M client
//! processes, a hot session's run reaching all of its subscribers on every node, and a
//! node lost under load (issue 43).
//!
//! One node cannot hold 100,000 streams where a process may open 20,000 files, so the
//! bench does what a deployment does: N nodes on one PostgreSQL database (a fresh one
//! per run, dropped at the end) and one Redis, and the subscribers spread over them by
//! M client processes (`spool-bench nodes-client`, [`client`]), each under the same
//! limit. Subscriber `i` follows session `i % S` over SSE, on node `(i / S) % N` (each
//! session's subscribers round robin over the nodes), from a
//! loopback source address of its own group (as `idle`), and checks every frame it
//! gets ([`wire`]). Session 0 is the hot one; the prompts go to node 0, which runs them,
//! and the other nodes serve them through the Redis bus. Its answers come from the
//! bench's fake OpenAI-compatible model, which notes when it wrote each delta, so a
//! delivery's latency is receive − model write on the machine's one monotonic clock.
//!
//! In order:
//! 1. The nodes start and the sessions are made; each node's RSS is read.
//! 2. The clients connect every subscriber (at most `--in-flight` opening at once per
//!    client) and wait for each one's snapshot; each node's RSS is read again: the
//!    growth over its subscribers is what one costs it. Redis's and PostgreSQL's CPU
//!    and memory are read before and after ([`probe`]).
//! 3. The measured run: one prompt; every hot subscriber reports when the first delta
//!    and every `--sample-every`th one came. The nodes' CPU over the run divided by the
//!    frames the hot subscribers took is the CPU per delivered frame.
//! 4. With `--kill-after-ms`, the node-loss run: a second prompt, and the last node
//!    (never the one running the session) is killed with SIGKILL that long after it.
//!    Its subscribers come back on the other nodes as Spool's clients do (backoff from
//!    1.5 s with jitter, `Last-Event-ID`), and the bench notes when each streams again,
//!    and the survivors', Redis's and PostgreSQL's peak CPU and memory meanwhile.
//! 5. The check: every session's subscribers end on the same seq (none is missing the
//!    last frames), and no subscriber ever missed, repeated or had a snapshot replace a
//!    frame (over all its connections); every hot subscriber got every delta of both
//!    runs. The command fails otherwise.
//!
//! `--sweep` repeats all of it at each count, fresh nodes each; `--plot` draws it.

mod args;
mod client;
mod plot;
mod probe;
mod wire;

pub use args::FleetArgs;
pub use client::run as client_process;

use crate::database::BenchDb;
use crate::fake_model::FakeModel;
use crate::latency::Spread;
use crate::nodes::{Cluster, Node};
use anyhow::{Context, Result, bail};
use args::Point;
use client::{HotRun, Plan, Totals, now_ns};
use probe::{Peak, Program, Reading};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

/// Subscribers per client process when `--clients` is not given: under a 20,000
/// open-file limit with room to spare.
const PER_CLIENT: u64 = 15_000;

pub async fn nodes(args: &FleetArgs) -> Result<()> {
    let counts = if args.sweep.is_empty() { vec![args.subscribers] } else { args.sweep.clone() };
    if args.kill_after_ms.is_some() && args.nodes < 2 {
        bail!("--kill-after-ms needs two nodes or more: the killed node's clients come back on the others");
    }
    // The nodes inherit this limit: each holds its share of the subscribers.
    if let Some(hard) = crate::idle::system::hard_fd_limit() {
        crate::idle::system::raise_fd_limit(hard)?;
    }
    let ports = crate::idle::system::ephemeral_ports()?;
    if args.per_source > ports {
        bail!("--per-source {} is more than the {ports} ports of net.ipv4.ip_local_port_range", args.per_source);
    }
    let mut points = Vec::with_capacity(counts.len());
    for (i, &n) in counts.iter().enumerate() {
        if counts.len() > 1 {
            println!("--- {n} subscribers ({} of {})", i + 1, counts.len());
        }
        let db = BenchDb::create(&args.database_url).await?;
        let point = measure(args, n, &db).await;
        if let Err(e) = db.drop_database().await {
            eprintln!("warning: {e:#}");
        }
        points.push(point?);
    }
    if counts.len() > 1 {
        print_sweep(&points);
    }
    if let Some(path) = &args.plot {
        plot::nodes(path, args, &points)?;
        println!("plot                   {}", path.display());
    }
    if points.iter().any(|p| !p.sound) {
        bail!("a subscriber lost, repeated or resynced a frame, or did not finish (see above)");
    }
    Ok(())
}

/// One client process and its command line.
struct Client {
    _child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Client {
    fn spawn(plan: &std::path::Path, first: u64, count: u64) -> Result<Client> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("nodes-client")
            .arg(plan)
            .args([first.to_string(), count.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a client process")?;
        let stdin = child.stdin.take().context("client stdin")?;
        let lines = BufReader::new(child.stdout.take().context("client stdout")?).lines();
        Ok(Client { _child: child, stdin, lines })
    }

    async fn send(&mut self, command: &str) -> Result<()> {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn read(&mut self) -> Result<Value> {
        let line = self.lines.next_line().await?.context("a client process ended early")?;
        let value: Value = serde_json::from_str(&line).with_context(|| format!("a client said {line:?}"))?;
        if let Some(error) = value.get("error") {
            bail!("a client process: {error}");
        }
        Ok(value)
    }
}

/// Sends `command` to every client, then reads every answer (so they work at once).
async fn ask(clients: &mut [Client], command: &str) -> Result<Vec<Value>> {
    for c in clients.iter_mut() {
        c.send(command).await?;
    }
    let mut answers = Vec::with_capacity(clients.len());
    for c in clients.iter_mut() {
        answers.push(c.read().await?);
    }
    Ok(answers)
}

fn sum(answers: &[Value], key: &str) -> u64 {
    answers.iter().filter_map(|a| a[key].as_u64()).sum()
}

/// Redis and PostgreSQL, as found in `/proc`.
struct Services {
    redis: Program,
    pg: Program,
}

impl Services {
    fn find() -> Services {
        Services { redis: Program::find("redis-server"), pg: Program::find("postgres") }
    }

    /// CPU since the previous reading, memory now.
    fn read(&mut self) -> (Reading, Reading) {
        (self.redis.read(), self.pg.read())
    }
}

/// A model `Instant` on `CLOCK_MONOTONIC`, in ns (both are that clock on Linux; the
/// offset is read once).
struct Clock {
    at: Instant,
    ns: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock { at: Instant::now(), ns: now_ns() }
    }

    fn ns(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.at) {
            Some(after) => self.ns + after.as_nanos() as u64,
            None => self.ns - self.at.duration_since(t).as_nanos() as u64,
        }
    }
}

fn ms(ns: u64, from: u64) -> f64 {
    (ns as f64 - from as f64) / 1e6
}

/// PostgreSQL transactions in the run's database and Redis commands, so far.
struct Counts(Option<u64>, Option<u64>);

impl Counts {
    async fn read(db: &BenchDb, redis_url: &str) -> Counts {
        Counts(db.transactions().await, probe::redis_commands(redis_url).await)
    }

    /// "N PostgreSQL transactions, M Redis commands" since `before`.
    fn since(&self, before: &Counts) -> String {
        let diff = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => a.saturating_sub(b).to_string(),
            _ => "?".to_owned(),
        };
        format!("{} PostgreSQL transactions, {} Redis commands", diff(self.0, before.0), diff(self.1, before.1))
    }
}

async fn measure(args: &FleetArgs, n: u64, db: &BenchDb) -> Result<Point> {
    let database_url = db.url.as_str();
    let bin = crate::nodes::spool_bin(args.spool.as_ref())?;
    let model = FakeModel::start(args.deltas as usize, Duration::from_millis(args.delay_ms)).await?;
    let cluster = Cluster {
        database_url: Some(database_url),
        redis_url: Some(&args.redis_url),
        delay_ms: 0,
        config: None,
        openai_compatible: Some(&model.base_url),
        cpus: None,
    };
    let node_count = args.nodes as usize;
    let mut nodes = (0..node_count).map(|i| Node::start(&bin, &cluster, i)).collect::<Result<Vec<_>>>()?;
    let addrs: Vec<SocketAddr> = nodes
        .iter()
        .map(|n| n.base.strip_prefix("http://").unwrap_or(&n.base).parse().context("a node's address"))
        .collect::<Result<_>>()?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let base = nodes[0].base.clone();
    let (_project_dir, project) = crate::nodes::new_project(&http, &base).await?;
    let mut sessions = Vec::with_capacity(args.sessions as usize);
    for i in 0..args.sessions {
        let session: Value = http
            .post(format!("{base}/api/sessions"))
            // Titled: a first prompt on an untitled session asks the model for a title.
            .json(&serde_json::json!({"projectId": project["id"], "title": format!("fleet {i}")}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        sessions.push(session["id"].as_str().context("session id")?.to_owned());
    }
    let hot_session = sessions[0].clone();
    let mut per_node = vec![0u64; node_count];
    for i in 0..n as usize {
        per_node[client::start_node(i, args.sessions as usize, node_count)] += 1;
    }
    let hot: u64 = n.div_ceil(args.sessions);
    let settle = Duration::from_secs(args.settle_secs);
    tokio::time::sleep(settle).await;
    let rss_before: Vec<u64> = nodes.iter().map(|n| n.rss_kib().unwrap_or(0)).collect();
    let mut services = Services::find();
    let (redis0, pg0) = services.read();
    let counts0 = Counts::read(db, &args.redis_url).await;

    let plan = Plan {
        nodes: addrs,
        sessions,
        per_source: args.per_source,
        in_flight: args.in_flight as usize,
        backoff_min_ms: args.backoff_min_ms,
        backoff_max_ms: args.backoff_max_ms,
        sample_every: args.sample_every,
    };
    let plan_file = tempfile::NamedTempFile::new()?;
    std::fs::write(plan_file.path(), serde_json::to_vec(&plan)?)?;
    let m = if args.clients > 0 { args.clients } else { n.div_ceil(PER_CLIENT) }.min(n);
    let started = Instant::now();
    let mut clients = (0..m)
        .map(|c| {
            let (first, last) = (n * c / m, n * (c + 1) / m);
            Client::spawn(plan_file.path(), first, last - first)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut connected = Vec::with_capacity(clients.len());
    for c in &mut clients {
        connected.push(c.read().await?);
    }
    let connect_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(settle).await;
    let rss_with: Vec<u64> = nodes.iter().map(|n| n.rss_kib().unwrap_or(0)).collect();
    let (redis1, pg1) = services.read();
    let counts1 = Counts::read(db, &args.redis_url).await;
    let client_rss = sum(&ask(&mut clients, "status").await?, "rssKib");

    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "nodes                  {node_count} `spool serve` on one PostgreSQL database and one Redis; prompts to node 0"
    );
    println!(
        "subscribers            {n} over {} sessions (hot session: {hot}), from {m} client processes; connected in {connect_secs:.1} s ({:.0}/s, {} failed attempts)",
        args.sessions,
        n as f64 / connect_secs,
        sum(&connected, "failed")
    );
    for (k, ((&subs, &before), &with)) in per_node.iter().zip(&rss_before).zip(&rss_with).enumerate() {
        println!(
            "node {k} RSS             {:.1} → {:.1} MiB with {subs} subscribers: {:.2} KiB each",
            mib(before),
            mib(with),
            with.saturating_sub(before) as f64 / subs.max(1) as f64
        );
    }
    let point_nodes: Vec<(u64, u64, u64)> =
        per_node.iter().zip(&rss_before).zip(&rss_with).map(|((&s, &b), &w)| (s, b, w)).collect();
    let grown: u64 = rss_with.iter().zip(&rss_before).map(|(w, b)| w.saturating_sub(*b)).sum();
    println!(
        "all nodes              {:.1} MiB with {n} subscribers: {:.2} KiB each; client processes {:.1} MiB ({:.2} KiB per subscriber)",
        mib(rss_with.iter().sum()),
        grown as f64 / n as f64,
        mib(client_rss),
        client_rss as f64 / n as f64
    );
    service_line("Redis", services.redis.found(), redis0, redis1, "RSS");
    service_line("PostgreSQL", services.pg.found(), pg0, pg1, "PSS of all its processes");
    println!("  while connecting     {}", counts1.since(&counts0));

    // The measured run.
    let clock = Clock::new();
    let cpu0: Vec<f64> = nodes.iter().map(|n| n.cpu_seconds().unwrap_or(0.0)).collect();
    services.read();
    let counts0 = Counts::read(db, &args.redis_url).await;
    let prompted = now_ns();
    let run = prompt(&http, &base, &hot_session, "fleet-1").await?;
    let runs = hot_runs(&mut clients, 1).await?;
    let status1 = run_status(&http, &base, &run).await;
    let cpu: Vec<f64> = nodes.iter().zip(&cpu0).map(|(n, c)| n.cpu_seconds().unwrap_or(0.0) - c).collect();
    let (redis1, pg1) = services.read();
    let counts1 = Counts::read(db, &args.redis_url).await;
    let written: Vec<u64> = model.written().into_iter().map(|t| clock.ns(t)).collect();
    let frames: u64 = runs.iter().map(|r| r.frames).sum();
    let whole1 = runs.iter().filter(|r| r.deltas == args.deltas).count() as u64;
    println!(
        "measured run           {} deltas {} ms apart, run {status1}; {whole1} of {hot} hot subscribers got every delta",
        args.deltas, args.delay_ms
    );
    let first_delta = per_node_spreads("first delta after the prompt POST, ms", node_count, &runs, |r| {
        r.first.map(|f| vec![ms(f, prompted)]).unwrap_or_default()
    });
    let delivery = per_node_spreads(
        &format!("delivery (receive − model write), every {}th delta, ms", args.sample_every),
        node_count,
        &runs,
        |r| marks(r, &written),
    );
    let cpu_total: f64 = cpu.iter().sum();
    println!(
        "  server CPU           {cpu_total:.2} s over the run: {:.2} µs per delivered frame ({frames} frames; per node: {})",
        cpu_total * 1e6 / frames.max(1) as f64,
        cpu.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" / ")
    );
    println!(
        "  Redis, PostgreSQL    {:.2} s and {:.2} s CPU over the run; {}",
        redis1.cpu,
        pg1.cpu,
        counts1.since(&counts0)
    );
    let mut sound = whole1 == hot && status1 == "\"completed\"";

    let mut storm_secs = None;
    if let Some(after) = args.kill_after_ms {
        let (secs, whole) = node_loss(
            args,
            &mut nodes,
            &mut clients,
            &mut services,
            &http,
            &hot_session,
            &per_node,
            after,
            &model,
            &clock,
            db,
        )
        .await?;
        storm_secs = secs;
        sound &= secs.is_some() && whole == hot;
    }

    let agreed = agree(&mut clients, args.sessions as usize).await?;
    let totals: Vec<Totals> =
        ask(&mut clients, "finish").await?.into_iter().map(serde_json::from_value).collect::<Result<_, _>>()?;
    let t = |f: fn(&Totals) -> u64| totals.iter().map(f).sum::<u64>();
    println!(
        "every subscriber       {} checked: {} frames ({} of them presence, {} snapshots in their place); {} missing, {} repeated, {} stream changes, {} resyncs (a snapshot where a replay was due), {} bad starts; {} subscribers with a fault; {} reconnects, {} failed attempts",
        t(|t| t.subscribers),
        t(|t| t.frames),
        t(|t| t.presence),
        t(|t| t.snapshots),
        t(|t| t.missing),
        t(|t| t.repeated),
        t(|t| t.stream_changes),
        t(|t| t.resyncs),
        t(|t| t.bad_starts),
        t(|t| t.faulty),
        t(|t| t.reconnects),
        t(|t| t.failed_connects)
    );
    for example in totals.iter().flat_map(|t| &t.examples) {
        println!("  {example}");
    }
    println!(
        "last frame             {}",
        agreed.as_deref().unwrap_or("every session's subscribers end on the same seq")
    );
    sound &= t(|t| t.faulty) == 0 && agreed.is_none() && t(|t| t.subscribers) == n;
    for node in &mut nodes {
        let _ = node.terminate(Duration::from_secs(10));
    }
    Ok(Point { subscribers: n, nodes: args.nodes, per_node: point_nodes, first_delta, delivery, storm_secs, sound })
}

/// `with.cpu` is the CPU since `before`'s reading.
fn service_line(name: &str, found: bool, before: Reading, with: Reading, what: &str) {
    if !found {
        println!("{name:<22} not found in /proc (not on this machine)");
        return;
    }
    println!(
        "{name:<22} {:.1} → {:.1} MiB ({what}); {:.2} s CPU while the subscribers connected",
        before.kib as f64 / 1024.0,
        with.kib as f64 / 1024.0,
        with.cpu
    );
}

/// Prompts the session; gives the run's id.
async fn prompt(http: &reqwest::Client, base: &str, session: &str, request: &str) -> Result<String> {
    let accepted: Value = http
        .post(format!("{base}/api/sessions/{session}/prompt"))
        .json(&serde_json::json!({"text": "bench", "requestId": request}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(accepted["runId"].as_str().context("the prompt's runId")?.to_owned())
}

/// How the run ended, as `GET /api/runs/:id` says: its status, and its error's code
/// and message if it has one.
async fn run_status(http: &reqwest::Client, base: &str, run: &str) -> String {
    let got = async {
        let run: Value = http.get(format!("{base}/api/runs/{run}")).send().await?.error_for_status()?.json().await?;
        anyhow::Ok(match run["error"]["code"].as_str() {
            Some(code) => format!("{} ({code}: {})", run["status"], run["error"]["message"]),
            None => run["status"].to_string(),
        })
    };
    got.await.unwrap_or_else(|e| format!("unknown ({e:#})"))
}

/// Every hot subscriber's view of run `run`, once it settled for all of them.
async fn hot_runs(clients: &mut [Client], run: u32) -> Result<Vec<HotRun>> {
    let mut runs = Vec::new();
    for answer in ask(clients, &format!("hot {run}")).await? {
        let got: Vec<HotRun> = serde_json::from_value(answer["runs"].clone())?;
        let expected = answer["expected"].as_u64().unwrap_or(0);
        if (got.len() as u64) < expected {
            println!("  only {} of {expected} hot subscribers of a client saw run {run} settle", got.len());
        }
        runs.extend(got);
    }
    Ok(runs)
}

/// The delivery latencies of a run's sampled deltas, ms.
fn marks(r: &HotRun, written: &[u64]) -> Vec<f64> {
    r.marks.iter().filter_map(|&(n, at)| Some(ms(at, *written.get((n as usize).checked_sub(1)?)?))).collect()
}

/// Prints `what`'s p50 / p99 / max per node and over all; returns the one over all.
fn per_node_spreads(what: &str, nodes: usize, runs: &[HotRun], values: impl Fn(&HotRun) -> Vec<f64>) -> Option<Spread> {
    println!("  {what} (p50 / p99 / max):");
    for node in 0..nodes {
        let v: Vec<f64> = runs.iter().filter(|r| r.node == node).flat_map(&values).collect();
        println!("    node {node:<16} {}", spread(Spread::of(v)));
    }
    let all = Spread::of(runs.iter().flat_map(&values).collect());
    println!("    all nodes          {}", spread(Spread::of(runs.iter().flat_map(&values).collect())));
    all
}

fn spread(s: Option<Spread>) -> String {
    match s {
        Some(s) => format!("{:.2} / {:.2} / {:.2}  ({} samples)", s.p50, s.p99, s.max, s.count),
        None => "no samples".to_owned(),
    }
}

/// The node-loss run (see the module doc, step 4): returns the seconds from the kill
/// until every cut subscriber streamed again (none if some never did within 120 s) and
/// how many hot subscribers got every delta of the run.
#[allow(clippy::too_many_arguments)]
async fn node_loss(
    args: &FleetArgs,
    nodes: &mut [Node],
    clients: &mut [Client],
    services: &mut Services,
    http: &reqwest::Client,
    hot_session: &str,
    per_node: &[u64],
    after: u64,
    model: &FakeModel,
    clock: &Clock,
    db: &BenchDb,
) -> Result<(Option<f64>, u64)> {
    let victim = nodes.len() - 1;
    let before = sum(&ask(clients, "status").await?, "disconnects");
    // Peaks of the survivors, Redis and PostgreSQL, sampled every 100 ms from before
    // the kill until the run has settled.
    let pids: Vec<u32> = nodes[..victim].iter().map(|n| n.pid()).collect();
    let peaks = Arc::new(Mutex::new((vec![Peak::default(); pids.len()], Peak::default(), Peak::default())));
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let sampler = {
        let peaks = peaks.clone();
        let mut services = Services::find();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut then = Instant::now();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop_rx.changed() => return,
                }
                let (redis, pg) = services.read();
                let since = then.elapsed();
                then = Instant::now();
                let mut p = peaks.lock().expect("no panic holds this lock");
                for (peak, &pid) in p.0.iter_mut().zip(&pids) {
                    peak.sample(probe::process(pid));
                }
                p.1.sample_since(redis, since);
                p.2.sample_since(pg, since);
            }
        })
    };
    let rss0: Vec<u64> = nodes[..victim].iter().map(|n| n.rss_kib().unwrap_or(0)).collect();
    services.read();
    let run = prompt(http, &nodes[0].base, hot_session, "fleet-2").await?;
    tokio::time::sleep(Duration::from_millis(after)).await;
    let counts0 = Counts::read(db, &args.redis_url).await;
    // The instant the signal goes: the clients may see their sockets close before the
    // kernel has torn down the rest of the process and it is reaped.
    let killed = now_ns();
    nodes[victim].kill()?;
    let cut = per_node[victim];
    let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut back_at = None;
    while tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = ask(clients, "status").await?;
        if sum(&status, "down") == 0 && sum(&status, "disconnects") - before >= cut {
            back_at = Some(now_ns());
            break;
        }
    }
    let counts1 = Counts::read(db, &args.redis_url).await;
    let back: Vec<f64> = ask(clients, "storm")
        .await?
        .iter()
        .flat_map(|a| a["back"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_u64())
        .map(|ns| ms(ns, killed) / 1000.0)
        .collect();
    let storm =
        back_at.and_then(|_| back.iter().copied().fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b)))));
    let runs = hot_runs(clients, 2).await?;
    let status = run_status(http, &nodes[0].base, &run).await;
    let _ = stop_tx.send(true);
    let _ = sampler.await;
    let (redis1, pg1) = services.read();
    let (node_peaks, redis_peak, pg_peak) = peaks.lock().expect("no panic holds this lock").clone();
    let whole = runs.iter().filter(|r| r.deltas == args.deltas).count() as u64;
    let cut_hot = runs.iter().filter(|r| r.cut).count();

    println!(
        "node loss              node {victim} ({cut} subscribers) killed with SIGKILL {after} ms after the second prompt; its clients come back on the others ({} ms backoff, up to a quarter more of jitter, Last-Event-ID)",
        args.backoff_min_ms
    );
    match (storm, Spread::of(back.clone())) {
        (Some(all), Some(s)) => println!(
            "  streaming again      all {} within {all:.2} s of the kill (per subscriber p50 {:.2} / p99 {:.2} s)",
            back.len(),
            s.p50,
            s.p99
        ),
        _ => println!("  streaming again      NOT all within 120 s: {} came back", back.len()),
    }
    println!("  from kill to all back {}", counts1.since(&counts0));
    for (k, (peak, rss)) in node_peaks.iter().zip(&rss0).enumerate() {
        println!(
            "  survivor node {k:<6} peak {:.2} cores (100 ms steps), RSS {:.1} → peak {:.1} MiB",
            peak.cores,
            *rss as f64 / 1024.0,
            peak.kib as f64 / 1024.0
        );
    }
    println!(
        "  Redis                peak {:.2} cores, {:.1} MiB; {:.2} s CPU over the run",
        redis_peak.cores,
        redis_peak.kib as f64 / 1024.0,
        redis1.cpu
    );
    println!(
        "  PostgreSQL           peak {:.2} cores, {:.1} MiB PSS; {:.2} s CPU over the run",
        pg_peak.cores,
        pg_peak.kib as f64 / 1024.0,
        pg1.cpu
    );
    println!(
        "  the run              {status}; {whole} of {} hot subscribers got every delta; {cut_hot} of them were cut mid-run and resumed elsewhere",
        runs.len()
    );
    let written: Vec<u64> = model.written().into_iter().map(|t| clock.ns(t)).collect();
    let (uncut, cut): (Vec<HotRun>, Vec<HotRun>) = runs.into_iter().partition(|r| !r.cut);
    per_node_spreads("delivery to those never cut, ms", nodes.len(), &uncut, |r| marks(r, &written));
    println!(
        "  delivery to the cut  {} ms (p50 / p99 / max; their sampled deltas, live before the kill, replayed after it)",
        spread(Spread::of(cut.iter().flat_map(|r| marks(r, &written)).collect()))
    );
    let whole = if status == "\"completed\"" { whole } else { 0 };
    Ok((storm, whole))
}

/// Polls every client until each session's subscribers all end on the same seq and
/// none is down (up to 60 s); says what differs if they never do.
async fn agree(clients: &mut [Client], sessions: usize) -> Result<Option<String>> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answers = ask(clients, "seqs").await?;
        let mut range = vec![(u64::MAX, 0u64); sessions];
        for a in &answers {
            let got: Vec<(u64, u64)> = serde_json::from_value(a["ranges"].clone())?;
            for (r, g) in range.iter_mut().zip(got) {
                *r = (r.0.min(g.0), r.1.max(g.1));
            }
        }
        let down = sum(&answers, "down");
        let apart = range.iter().filter(|r| r.0 != r.1 && r.0 != u64::MAX).count();
        if down == 0 && apart == 0 {
            return Ok(None);
        }
        if tokio::time::Instant::now() > give_up {
            return Ok(Some(format!(
                "NOT agreed after 60 s: {apart} sessions whose subscribers end on different seqs, {down} subscribers down"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The sweep as one table, a row per subscriber count.
fn print_sweep(points: &[Point]) {
    println!(
        "sweep: subscribers | nodes | node RSS with them, MiB (mean) | KiB per subscriber | first delta p50 / p99 ms | delivery p50 / p99 ms | node loss: all back, s | sound"
    );
    for p in points {
        let pair = |s: &Option<Spread>| s.as_ref().map_or("—".to_owned(), |s| format!("{:.1} / {:.1}", s.p50, s.p99));
        println!(
            "  {:>7} | {} | {:.1} | {:.2} | {} | {} | {} | {}",
            p.subscribers,
            p.nodes,
            p.node_rss_mib(),
            p.kib_per_subscriber(),
            pair(&p.first_delta),
            pair(&p.delivery),
            p.storm_secs.map_or("—".to_owned(), |s| format!("{s:.2}")),
            p.sound
        );
    }
}
