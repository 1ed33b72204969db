//! `spool-bench`: end-to-end numbers for the native session stream, measured against
//! real `spool serve` child processes so each server's peak RSS is its own.
//!
//! One session; N subscribers connect to `/api/sessions/:id/events` and wait for their
//! snapshot; then one prompt `stream: D` makes the scripted model stream D text deltas.
//! The clock runs from the prompt POST until the last subscriber has seen
//! `agent_settled`. Subscribers read only an event's id line and type (no JSON
//! parsing), so the client costs as little as possible of the cores it shares with the
//! servers.
//!
//! With `--nodes N` (N > 1) it starts N nodes on one PostgreSQL database (a fresh one
//! per run, made on `--database-url`'s server and dropped at the end) and one Redis
//! (`--redis-url`), spreads the subscribers round robin over them and sends the prompt
//! to node 0, so node 0 runs the session and the other nodes serve it through the bus.
//! `--database-url` (and `--redis-url`) also work with one node, to compare like with
//! like.
//!
//! Reported: deltas per second end to end (D / elapsed), frames delivered per second
//! over all subscribers, each node's peak RSS (VmHWM), per-delta lag behind node 0 and
//! the first and last delta's time after the prompt (see [`latency`]), subscribers the server cut
//! for lagging (the designed outcome for a client that cannot keep up: it reconnects
//! and catches up through a snapshot, as a browser would), and any hole, repeat or
//! stream change a subscriber saw (there should be none).
//!
//! `spool-bench soak` measures something else: the server's memory over thousands of
//! short runs on one session (see [`soak`]). `spool-bench opencode-vs` runs Spool's
//! OpenCode dialect and OpenCode itself on one workload (see [`versus`]). `spool-bench
//! idle` measures what an idle subscriber costs the server, at up to 100,000 of them
//! (see [`idle`]). `spool-bench baseline` measures Spool's CPU per delivered frame and
//! delivery latency against a bare broadcast hub that ships here as `spool-bench hub`
//! (see [`baseline`] and [`hub`]). `spool-bench nodes` spreads up to 100,000
//! subscribers over several nodes and client processes and kills a node under load
//! (see [`fleet`]).

mod baseline;
mod database;
mod dialect;
mod fake_model;
mod fleet;
mod hub;
mod idle;
mod idle_paths;
mod latency;
mod nodes;
mod pin;
mod soak;
mod subscriber;
mod versus;

use anyhow::{Context, Result, bail};
use clap::Parser;
use dialect::{Dialect, Target};
use latency::Spread;
use nodes::{Cluster, Node};
use std::time::{Duration, Instant};
use subscriber::{Outcome, Subscriber};

#[derive(Parser, Debug)]
#[command(about = "Stream benchmark against real spool servers", args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    spool: Option<std::path::PathBuf>,
    /// Subscribers on the one session, spread round robin over the nodes.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Text deltas the scripted model streams.
    #[arg(long, default_value_t = 10_000)]
    deltas: usize,
    /// Pause between the scripted model's deltas, in milliseconds (0: as fast as possible).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// `spool serve` nodes to start; more than one needs --database-url and --redis-url.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    nodes: u64,
    /// A PostgreSQL server whose role may create databases, as a postgres:// URL: the
    /// run makes a database of its own there and drops it at the end (default: SQLite).
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// The Redis every node joins (`spool serve --redis-url`). Needs --database-url.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Receive instants are kept for deltas whose seq is a multiple of this.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// The wire dialect the subscribers read (see `dialect.rs` for what each counts).
    /// With anything but `native` the report adds the server's CPU time per delivered
    /// event, the figure the dialects are compared by.
    #[arg(long, value_enum, default_value_t = Dialect::Native)]
    dialect: Dialect,
    /// A subscriber that has not seen the run settle after this long gives up and is
    /// reported unfinished.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Short runs back to back on one session, the server's RSS sampled as they go.
    Soak(soak::SoakArgs),
    /// Spool's OpenCode `/event` against OpenCode itself, one fake OpenAI-compatible
    /// model behind both.
    #[command(name = "opencode-vs")]
    OpencodeVs(versus::VersusArgs),
    /// What an idle subscriber costs the server: N idle SSE or WebSocket subscribers
    /// from many loopback source addresses, a hot session, then churn.
    Idle(idle::IdleArgs),
    /// What an idle SSE subscriber costs the server on each way to its stream: a fresh
    /// connection, a keep-alive one, HTTPS with HTTP/1.1 or HTTP/2.
    #[command(name = "idle-paths")]
    IdlePaths(idle_paths::IdlePathsArgs),
    /// Spool's fan-out against a bare broadcast hub, one paced fake model behind both:
    /// server CPU per delivered frame and delivery latency, side by side.
    Baseline(baseline::BaselineArgs),
    /// The bare broadcast hub `baseline` starts as a child process.
    #[command(hide = true)]
    Hub(hub::HubArgs),
    /// Many subscribers across N nodes on PostgreSQL and Redis from M client processes,
    /// a hot session's run on every node, and (`--kill-after-ms`) a node lost under load.
    Nodes(fleet::FleetArgs),
    /// One client process of `nodes`, which starts it: PLAN FIRST COUNT.
    #[command(name = "nodes-client", hide = true)]
    NodesClient { plan: std::path::PathBuf, first: usize, count: usize },
}

impl Args {
    fn check(&self) -> Result<()> {
        if self.nodes > 1 && (self.database_url.is_none() || self.redis_url.is_none()) {
            bail!("--nodes {} needs --database-url and --redis-url: nodes share a database and a bus", self.nodes);
        }
        if self.redis_url.is_some() && self.database_url.is_none() {
            bail!("--redis-url joins nodes that share a --database-url; give one");
        }
        Ok(())
    }

    fn store(&self) -> &'static str {
        match (&self.database_url, &self.redis_url) {
            (None, _) => "SQLite",
            (Some(_), None) => "PostgreSQL",
            (Some(_), Some(_)) => "PostgreSQL + Redis",
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(Command::Soak(soak)) = &args.command {
        if !soak::soak(soak).await? {
            std::process::exit(1);
        }
        return Ok(());
    }
    if let Some(Command::OpencodeVs(versus)) = &args.command {
        return versus::versus(versus).await;
    }
    if let Some(Command::Idle(idle)) = &args.command {
        return idle::idle(idle).await;
    }
    if let Some(Command::IdlePaths(paths)) = &args.command {
        return idle_paths::idle_paths(paths).await;
    }
    if let Some(Command::Baseline(baseline)) = &args.command {
        return baseline::baseline(baseline).await;
    }
    if let Some(Command::Hub(hub)) = &args.command {
        return hub::serve(hub).await;
    }
    if let Some(Command::Nodes(fleet)) = &args.command {
        return fleet::nodes(fleet).await;
    }
    if let Some(Command::NodesClient { plan, first, count }) = &args.command {
        return fleet::client_process(plan, *first, *count).await;
    }
    args.check()?;
    let db = match &args.database_url {
        Some(server) => Some(database::BenchDb::create(server).await?),
        None => None,
    };
    // `run` owns the nodes: they have exited by the time the database is dropped.
    let result = run(&args, db.as_ref().map(|db| db.url.as_str())).await;
    if let Some(db) = db
        && let Err(e) = db.drop_database().await
    {
        eprintln!("warning: {e:#}");
    }
    result
}

async fn run(args: &Args, database_url: Option<&str>) -> Result<()> {
    let bin = crate::nodes::spool_bin(args.spool.as_ref())?;
    let cluster = Cluster {
        database_url,
        redis_url: args.redis_url.as_deref(),
        delay_ms: args.delay_ms,
        config: None,
        openai_compatible: None,
        cpus: None,
    };
    let node_count = args.nodes as usize;
    let nodes = (0..node_count).map(|i| Node::start(&bin, &cluster, i)).collect::<Result<Vec<_>>>()?;
    let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(args.subscribers + 4).build()?;
    let first = &nodes[0].base;
    let (project_dir, project) = crate::nodes::new_project(&client, first).await?;
    let session: serde_json::Value = client
        .post(format!("{first}/api/sessions"))
        .json(&serde_json::json!({"projectId": project["id"], "title": "bench"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let session_id = session["id"].as_str().context("session id")?.to_owned();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let directory = project["path"].as_str().map_or_else(|| project_dir.path().display().to_string(), str::to_owned);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(args.subscribers.max(1));
    let spawn = |i: usize, run: Option<String>| {
        let node = i % node_count;
        match args.dialect {
            Dialect::Native => tokio::spawn(subscriber::run(Subscriber {
                client: client.clone(),
                url: format!("{}/api/sessions/{session_id}/events", nodes[node].base),
                node,
                sample_every: args.sample_every,
                ready: ready_tx.clone(),
                deadline,
            })),
            dialect => tokio::spawn(dialect::run(
                client.clone(),
                Target {
                    dialect,
                    base: nodes[node].base.clone(),
                    session: session_id.clone(),
                    directory: directory.clone(),
                    run,
                    node,
                },
                ready_tx.clone(),
                deadline,
            )),
        }
    };
    let mut tasks = Vec::with_capacity(args.subscribers);
    if args.dialect.connects_first() {
        tasks.extend((0..args.subscribers).map(|i| spawn(i, None)));
        wait_ready(&mut ready_rx, args.subscribers).await?;
    }
    let rss_idle: Vec<u64> = nodes.iter().map(|n| n.peak_rss_kib().unwrap_or(0)).collect();
    let cpu_before: Vec<f64> = nodes.iter().map(|n| n.cpu_seconds().unwrap_or(0.0)).collect();

    let prompted = Instant::now();
    let accepted: serde_json::Value = client
        .post(format!("{first}/api/sessions/{session_id}/prompt"))
        .json(&serde_json::json!({"text": format!("stream: {}", args.deltas), "requestId": "bench"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    // Subscribers that attach after the prompt spend connecting inside the measured
    // window: the CPU up to the moment all are attached is reported apart.
    let mut cpu_attached = None;
    if !args.dialect.connects_first() {
        let run = accepted["runId"].as_str().context("the prompt's runId")?.to_owned();
        tasks.extend((0..args.subscribers).map(|i| spawn(i, Some(run.clone()))));
        wait_ready(&mut ready_rx, args.subscribers).await?;
        let cpu: f64 = nodes.iter().zip(&cpu_before).map(|(n, before)| n.cpu_seconds().unwrap_or(0.0) - before).sum();
        cpu_attached = Some((cpu, prompted.elapsed()));
    }
    drop(ready_tx);
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await??);
    }
    let elapsed = prompted.elapsed();
    let rss_peak: Vec<u64> = nodes.iter().map(|n| n.peak_rss_kib().unwrap_or(0)).collect();
    let cpu: Vec<f64> =
        nodes.iter().zip(&cpu_before).map(|(n, before)| n.cpu_seconds().unwrap_or(0.0) - before).collect();
    let sound = report(args, &outcomes, elapsed, prompted, &rss_idle, &rss_peak, &cpu);
    if let Some((cpu, at)) = cpu_attached {
        let snapshots = outcomes.iter().filter(|o| o.snapshots > 0).count();
        println!(
            "attached late          all {} within {:.3} s of the prompt, {cpu:.2} s server CPU till then; {snapshots} started from a snapshot (the text so far in one event), the others replayed every event",
            args.subscribers,
            at.as_secs_f64()
        );
    }
    if !sound {
        bail!("some subscriber saw a broken stream or no end (see stream faults above)");
    }
    Ok(())
}

/// Waits until `n` subscribers have their streams open.
async fn wait_ready(ready: &mut tokio::sync::mpsc::Receiver<Result<(), String>>, n: usize) -> Result<()> {
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(60), ready.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(refused))) => bail!("a subscriber could not open its stream: {refused}"),
            Ok(None) | Err(_) => bail!("subscribers did not connect within 60 s"),
        }
    }
    Ok(())
}

/// Prints the numbers; returns whether every stream was sound (no hole, repeat or
/// stream change, one stream id on every node, every subscriber saw the end).
fn report(
    args: &Args,
    outcomes: &[Outcome],
    elapsed: Duration,
    prompted: Instant,
    idle: &[u64],
    peak: &[u64],
    cpu: &[f64],
) -> bool {
    let nodes = idle.len();
    let secs = elapsed.as_secs_f64();
    let sum = |f: fn(&Outcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    let frames = sum(|o| o.frames);
    let per_node = |keep: &dyn Fn(&Outcome) -> bool| {
        (0..nodes)
            .map(|n| outcomes.iter().filter(|o| o.node == n && keep(o)).count().to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let all_live = |o: &Outcome| o.reconnects == 0 && o.deltas == args.deltas as u64;
    let every_delta_live = outcomes.iter().filter(|o| all_live(o)).count();
    let cut = outcomes.iter().filter(|o| o.reconnects > 0).count();
    let mut stream_ids: Vec<&str> = outcomes.iter().filter_map(|o| o.stream_id.as_deref()).collect();
    stream_ids.sort_unstable();
    stream_ids.dedup();

    println!("dialect                {:?}", args.dialect);
    println!("nodes                  {nodes} ({}; prompt sent to node 0)", args.store());
    println!("subscribers            {} (round robin; per node: {})", args.subscribers, per_node(&|_| true));
    println!("deltas                 {}", args.deltas);
    println!("delay per delta        {} ms", args.delay_ms);
    println!("elapsed                {secs:.3} s (prompt POST until every subscriber holds the final answer)");
    println!("deltas/s end to end    {:.0}", args.deltas as f64 / secs);
    println!("frames delivered       {frames}");
    println!("frames/s delivered     {:.0}", frames as f64 / secs);
    println!("got every delta live   {every_delta_live} of {} (per node: {})", args.subscribers, per_node(&all_live));
    println!(
        "cut for lagging        {cut} (reconnected {} times, caught up by snapshot; per node: {})",
        sum(|o| u64::from(o.reconnects)),
        per_node(&|o| o.reconnects > 0)
    );
    let faults = sum(|o| o.missing + o.repeated + o.stream_changes);
    let unfinished = outcomes.iter().filter(|o| !o.finished).count();
    println!(
        "stream faults          {} missing seqs, {} repeated, {} stream changes, {} distinct stream ids, {unfinished} unfinished",
        sum(|o| o.missing),
        sum(|o| o.repeated),
        sum(|o| o.stream_changes),
        stream_ids.len(),
    );
    println!("delta lag behind node 0's first receipt, ms (seq % {} == 0; p50 / p99 / max):", args.sample_every);
    for (node, lags) in latency::lag_behind_node0(outcomes, nodes).into_iter().enumerate() {
        println!("  node {node}               {}", spread(Spread::of(lags)));
    }
    println!("first delta after the prompt POST, ms (per subscriber; p50 / p99 / max):");
    for (node, after) in latency::after_prompt(outcomes, nodes, prompted, |o| o.first_delta).into_iter().enumerate() {
        println!("  node {node}               {}", spread(Spread::of(after)));
    }
    println!("last delta after the prompt POST, ms (per subscriber; p50 / p99 / max):");
    for (node, after) in latency::after_prompt(outcomes, nodes, prompted, |o| o.last_delta).into_iter().enumerate() {
        println!("  node {node}               {}", spread(Spread::of(after)));
    }
    let cpu_total: f64 = cpu.iter().sum();
    println!(
        "server CPU             {cpu_total:.2} s from the prompt to the end ({:.2} µs per delivered event; per node: {})",
        cpu_total * 1e6 / frames.max(1) as f64,
        cpu.iter().map(|c| format!("{c:.2} s")).collect::<Vec<_>>().join(" / ")
    );
    for (node, (peak, idle)) in peak.iter().zip(idle).enumerate() {
        println!(
            "node {node} RSS peak        {:.1} MiB (after connect: {:.1} MiB)",
            *peak as f64 / 1024.0,
            *idle as f64 / 1024.0
        );
    }
    faults == 0 && unfinished == 0 && stream_ids.len() <= 1
}

fn spread(spread: Option<Spread>) -> String {
    match spread {
        Some(s) => format!("{:.2} / {:.2} / {:.2}  ({} samples)", s.p50, s.p99, s.max, s.count),
        None => "no samples".to_owned(),
    }
}
