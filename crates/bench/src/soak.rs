//! `spool-bench soak`: many short runs back to back on one session, and the server's
//! resident set sampled as they go, to show whether memory per run comes back.
//!
//! One `spool serve` child (SQLite in a fresh data dir), one project, one session. A
//! client holds the session's stream open the whole time, as the web UI does, and the
//! soak sends a prompt (`stream: 20` by default), waits for that run's
//! `agent_settled` on the stream, and sends the next. With `--wait poll` nobody holds
//! a stream and each run is waited for by polling `GET /api/runs/:id` instead, which
//! tells the stream's share of memory from the run's.
//!
//! Every `--sample-every` runs it reads the server's `VmRSS` and `RssAnon` from
//! `/proc/PID/status`. The verdict compares the resident set once warm (at
//! `--warmup` runs: the allocator's arenas, SQLite's page cache and the session's
//! bounded state have reached their working size) with the end, and fits a line
//! through the samples from the warm-up on: its slope, in MiB per 1,000 runs, is the
//! growth. Above `--flat-below` the soak says "growing" and exits non-zero.
//!
//! What a run legitimately costs grows with what its model calls see: the turns after
//! the compaction summary, up to the context budget (100,000 estimated tokens by
//! default, about 5,000 rounds of `stream: 20`). `--context-budget-tokens` gives the
//! server a smaller budget (through a config file), so a soak of a few thousand runs
//! passes it many times and shows what memory does once the context stops growing.
//!
//! At the end the server is stopped with SIGTERM and waited for, so a server under a
//! heap profiler (`--spool scripts/heaptrack-serve`) writes its profile.

use crate::nodes::{Cluster, Node};
use crate::subscriber::Events;
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use memchr::memmem::Finder;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Runs to make, one after another, on one session.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// The server's RSS is read every this many runs.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// Runs after which the server counts as warm: growth is measured from here.
    #[arg(long, default_value_t = 500)]
    warmup: u64,
    /// The prompt of every run (the scripted model's language; see `spool_model::script`).
    #[arg(long, default_value = "stream: 20")]
    prompt: String,
    /// How the end of a run is awaited.
    #[arg(long, value_enum, default_value_t = Wait::Stream)]
    wait: Wait,
    /// Growth (MiB per 1,000 runs, after the warm-up) below which RSS counts as flat.
    #[arg(long, default_value_t = 1.0)]
    flat_below: f64,
    /// The server's context budget (`context_budget_tokens` in its config file);
    /// default: the server's own.
    #[arg(long)]
    context_budget_tokens: Option<u64>,
    /// A run that has not settled after this long fails the soak.
    #[arg(long, default_value_t = 60)]
    run_timeout_secs: u64,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// One session stream stays open (as the web UI's); each run ends at its `agent_settled`.
    Stream,
    /// No stream: `GET /api/runs/:id` until the run is no longer running.
    Poll,
}

/// One reading of the server's memory.
struct Sample {
    runs: u64,
    at: Duration,
    rss_kib: u64,
    anon_kib: u64,
}

/// Runs the soak and prints the table and the verdict; `Ok(false)` when RSS grows.
pub async fn soak(args: &SoakArgs) -> Result<bool> {
    if args.warmup >= args.runs {
        bail!("--warmup {} leaves nothing to measure in --runs {}", args.warmup, args.runs);
    }
    let bin = crate::nodes::spool_bin(args.spool.as_ref())?;
    let config_dir = tempfile::tempdir()?;
    let config = match args.context_budget_tokens {
        Some(budget) => {
            let path = config_dir.path().join("config.toml");
            std::fs::write(&path, format!("context_budget_tokens = {budget}\n"))?;
            Some(path)
        }
        None => None,
    };
    let cluster = Cluster {
        database_url: None,
        redis_url: None,
        delay_ms: 0,
        config: config.as_deref(),
        openai_compatible: None,
        cpus: None,
    };
    let mut node = Node::start(&bin, &cluster, 0)?;
    let base = node.base.clone();
    let client = reqwest::Client::builder().no_proxy().build()?;
    let project_dir = tempfile::tempdir()?;
    let project: serde_json::Value =
        post(&client, &format!("{base}/api/projects"), serde_json::json!({"path": project_dir.path()})).await?;
    let session: serde_json::Value = post(
        &client,
        &format!("{base}/api/sessions"),
        serde_json::json!({"projectId": project["id"], "title": "soak"}),
    )
    .await?;
    let session_id = session["id"].as_str().context("session id")?.to_owned();

    let mut settled = match args.wait {
        Wait::Stream => Some(follow(&client, &format!("{base}/api/sessions/{session_id}/events")).await?),
        Wait::Poll => None,
    };
    let run_timeout = Duration::from_secs(args.run_timeout_secs);
    let started = Instant::now();
    let mut samples = vec![sample(&node, 0, started)?];
    print_header();
    print_row(&samples[0], None);
    for i in 1..=args.runs {
        let accepted: serde_json::Value = post(
            &client,
            &format!("{base}/api/sessions/{session_id}/prompt"),
            serde_json::json!({"text": args.prompt, "requestId": format!("soak-{i}")}),
        )
        .await?;
        let run_id = accepted["runId"].as_str().context("runId in the prompt's answer")?;
        match &mut settled {
            Some(count) => {
                let seen = tokio::time::timeout(run_timeout, count.wait_for(|n| *n >= i)).await;
                match seen {
                    Ok(Ok(_)) => {}
                    Ok(Err(_)) => bail!("the session stream ended during run {i} ({run_id})"),
                    Err(_) => bail!("run {i} ({run_id}) did not settle within {run_timeout:?}"),
                }
            }
            None => poll_settled(&client, &format!("{base}/api/runs/{run_id}"), run_timeout).await?,
        }
        if i % args.sample_every == 0 || i == args.runs {
            let s = sample(&node, i, started)?;
            print_row(&s, samples.last());
            samples.push(s);
        }
    }
    let flat = verdict(args, &samples)?;
    let peak = node.peak_rss_kib().unwrap_or(0);
    println!("RSS peak (VmHWM)       {:.1} MiB", mib(peak));
    if let Err(e) = node.terminate(Duration::from_secs(30)) {
        eprintln!("warning: {e:#}");
    }
    Ok(flat)
}

/// Opens the session stream and counts `agent_settled` frames on it, in a task, until
/// the stream ends (then the watch's sender is dropped and a waiter hears it).
async fn follow(client: &reqwest::Client, url: &str) -> Result<tokio::sync::watch::Receiver<u64>> {
    let resp = client.get(url).send().await?;
    let status = resp.status();
    if !status.is_success() {
        bail!("GET {url}: {status}: {}", resp.text().await.unwrap_or_default());
    }
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        let settled = Finder::new(b"\"type\":\"agent_settled\"");
        let mut body = resp.bytes_stream();
        let mut events = Events::default();
        while let Some(Ok(chunk)) = body.next().await {
            let mut seen = 0;
            events.feed(&chunk, |event| seen += u64::from(settled.find(event).is_some()));
            if seen > 0 {
                tx.send_modify(|n| *n += seen);
            }
        }
    });
    Ok(rx)
}

async fn poll_settled(client: &reqwest::Client, url: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let run: serde_json::Value = client.get(url).send().await?.error_for_status()?.json().await?;
        // A run's record is written when it settles, before the session says idle.
        if run["status"] != "running" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} still running after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn post(client: &reqwest::Client, url: &str, body: serde_json::Value) -> Result<serde_json::Value> {
    let resp = client.post(url).json(&body).send().await?;
    let status = resp.status();
    if !status.is_success() {
        bail!("POST {url}: {status}: {}", resp.text().await.unwrap_or_default());
    }
    Ok(resp.json().await?)
}

fn sample(node: &Node, runs: u64, started: Instant) -> Result<Sample> {
    let rss_kib = node.rss_kib().context("reading the server's VmRSS (has it exited?)")?;
    Ok(Sample { runs, at: started.elapsed(), rss_kib, anon_kib: node.rss_anon_kib().unwrap_or(0) })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_header() {
    println!("{:>7} {:>9} {:>8} {:>10} {:>12}", "runs", "elapsed s", "runs/s", "VmRSS MiB", "RssAnon MiB");
}

fn print_row(s: &Sample, previous: Option<&Sample>) {
    let rate = previous
        .map(|p| (s.runs - p.runs) as f64 / (s.at - p.at).as_secs_f64().max(1e-9))
        .map_or_else(|| "-".to_owned(), |r| format!("{r:.1}"));
    println!(
        "{:>7} {:>9.1} {:>8} {:>10.1} {:>12.1}",
        s.runs,
        s.at.as_secs_f64(),
        rate,
        mib(s.rss_kib),
        mib(s.anon_kib)
    );
}

/// Prints RSS once warm against the end and the fitted growth per 1,000 runs; whether
/// it grows slower than `--flat-below`.
fn verdict(args: &SoakArgs, samples: &[Sample]) -> Result<bool> {
    let warm: Vec<&Sample> = samples.iter().filter(|s| s.runs >= args.warmup).collect();
    let (first, last) = match (warm.first(), warm.last()) {
        (Some(f), Some(l)) if f.runs < l.runs => (*f, *l),
        _ => bail!("fewer than two samples after the warm-up: lower --sample-every"),
    };
    let growth = slope(&warm) * 1000.0 / 1024.0;
    let elapsed = last.at.as_secs_f64();
    println!(
        "runs                   {} in {elapsed:.1} s ({:.1} runs/s; prompt {:?}; context budget {})",
        last.runs,
        last.runs as f64 / elapsed,
        args.prompt,
        args.context_budget_tokens.map_or_else(|| "the server's".to_owned(), |b| format!("{b} tokens"))
    );
    println!("RSS at start           {:.1} MiB", mib(samples[0].rss_kib));
    println!("RSS once warm          {:.1} MiB (after {} runs)", mib(first.rss_kib), first.runs);
    println!("RSS at the end         {:.1} MiB (after {} runs)", mib(last.rss_kib), last.runs);
    println!("growth after warm-up   {growth:+.2} MiB per 1,000 runs (least squares over {} samples)", warm.len());
    let flat = growth < args.flat_below;
    match flat {
        true => println!("verdict                flat (below {} MiB per 1,000 runs)", args.flat_below),
        false => println!("verdict                GROWING ({} MiB per 1,000 runs or more)", args.flat_below),
    }
    Ok(flat)
}

/// Least-squares slope of RSS (KiB) over runs.
fn slope(samples: &[&Sample]) -> f64 {
    let n = samples.len() as f64;
    let mean_x = samples.iter().map(|s| s.runs as f64).sum::<f64>() / n;
    let mean_y = samples.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for s in samples {
        let dx = s.runs as f64 - mean_x;
        num += dx * (s.rss_kib as f64 - mean_y);
        den += dx * dx;
    }
    if den == 0.0 { 0.0 } else { num / den }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(runs: u64, rss_kib: u64) -> Sample {
        Sample { runs, at: Duration::ZERO, rss_kib, anon_kib: 0 }
    }

    #[test]
    fn the_slope_is_kib_per_run() {
        let samples = [at(500, 20_000), at(1000, 20_512), at(1500, 21_024)];
        let refs: Vec<&Sample> = samples.iter().collect();
        assert!((slope(&refs) - 1.024).abs() < 1e-9);
        let flat = [at(500, 20_000), at(1000, 20_000)];
        assert_eq!(slope(&flat.iter().collect::<Vec<_>>()), 0.0);
    }
}
