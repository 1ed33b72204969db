//! `spool-bench opencode-vs`: Spool's OpenCode dialect against OpenCode itself, on the
//! same workload, measured the same way.
//!
//! Per run and server: a fresh fake OpenAI-compatible model ([`fake_model`]) that
//! streams D one-word deltas, a fresh server configured with it as its only model (Spool
//! through `openai-compatible:bench`; OpenCode through a custom provider in an
//! `opencode.json` of a fresh project directory, with HOME and the XDG directories in a
//! temp dir so the caller's own OpenCode setup plays no part), both on 127.0.0.1 with
//! auth off. Then, through OpenCode's API only, the same client steps on both:
//!
//! 1. a warm-up: `POST /session`, `POST /session/:id/message` (OpenCode loads its
//!    plugins and provider on the first prompt, seconds of CPU that are not the stream);
//! 2. `POST /session`; K subscribers on `GET /event?directory=…`, each ready at its first
//!    event (`dialect.rs`);
//! 3. the server's CPU time is read (`/proc/PID/stat`), the clock starts, and
//!    `POST /session/:id/prompt_async` starts the run;
//! 4. each subscriber counts its events and its `message.part.delta`s (both servers send
//!    a text delta as that event) and stops at `session.idle`; the clock stops when the
//!    last one has, and the CPU time is read again.
//!
//! Servers alternate within a run (Spool, then OpenCode) so a neighbour's load on the
//! shared machine falls on both; the load average is printed with every row.
//!
//! [`fake_model`]: crate::fake_model

use crate::dialect::{self, Dialect, Target, urlencode};
use crate::fake_model::{FakeModel, MODEL};
use crate::nodes::{Cluster, Node, cpu_seconds};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct VersusArgs {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Path of the `opencode` binary (npm `opencode-ai`; `scripts/bench-opencode`
    /// installs one). Without it only Spool is measured.
    #[arg(long)]
    opencode_bin: Option<PathBuf>,
    /// Subscribers on `GET /event`.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// One-word deltas the fake model streams per answer.
    #[arg(long, default_value_t = 500)]
    deltas: usize,
    /// Pause between the fake model's deltas, in milliseconds (0: as fast as possible).
    #[arg(long, default_value_t = 2)]
    delay_ms: u64,
    /// Runs per server (fresh servers and model each run).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// A subscriber that has not seen `session.idle` after this long gives up.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

/// One server's numbers for one run.
struct Measure {
    server: &'static str,
    load: String,
    elapsed: Duration,
    /// When the last subscriber got its last delta, after the prompt.
    last_delta: Duration,
    cpu: f64,
    events: u64,
    deltas: u64,
    every_delta: usize,
    finished: usize,
    model_calls: u64,
}

pub async fn versus(args: &VersusArgs) -> Result<()> {
    let spool = crate::nodes::spool_bin(args.spool.as_ref())?;
    if let Some(bin) = &args.opencode_bin {
        let version =
            Command::new(bin).arg("--version").output().with_context(|| format!("running {}", bin.display()))?;
        println!("opencode {}", String::from_utf8_lossy(&version.stdout).trim());
    }
    println!(
        "{} subscribers on GET /event, {} deltas, {} ms apart; {} run(s) per server",
        args.subscribers, args.deltas, args.delay_ms, args.runs
    );
    // Shared by OpenCode's runs: what it installs into its config and cache dirs on the
    // first start (its plugin package, from npm) is installed once.
    let opencode_home = tempfile::tempdir()?;
    let mut all = Vec::new();
    for run in 1..=args.runs {
        let m = measure_spool(args, &spool).await?;
        print_row(run, &m, args);
        all.push(m);
        if let Some(bin) = &args.opencode_bin {
            let m = measure_opencode(args, bin, opencode_home.path()).await?;
            print_row(run, &m, args);
            all.push(m);
        }
    }
    println!("median (min–max) over {} run(s):", args.runs);
    for server in ["spool", "opencode"] {
        let runs: Vec<&Measure> = all.iter().filter(|m| m.server == server).collect();
        if runs.is_empty() {
            continue;
        }
        println!(
            "  {server:<9} elapsed {} s   last delta {} s   server CPU {} s   {} µs/event   {} µs/delta",
            summary(&runs, |m| m.elapsed.as_secs_f64()),
            summary(&runs, |m| m.last_delta.as_secs_f64()),
            summary(&runs, |m| m.cpu),
            summary(&runs, |m| m.cpu * 1e6 / m.events.max(1) as f64),
            summary(&runs, |m| m.cpu * 1e6 / m.deltas.max(1) as f64),
        );
    }
    let sound = all.iter().all(|m| m.every_delta == args.subscribers && m.finished == args.subscribers);
    if !sound {
        bail!("some subscriber missed a delta or never saw session.idle (see the rows above)");
    }
    Ok(())
}

async fn measure_spool(args: &VersusArgs, bin: &Path) -> Result<Measure> {
    let model = FakeModel::start(args.deltas, Duration::from_millis(args.delay_ms)).await?;
    let cluster = Cluster::solo(&model.base_url);
    let node = Node::start(bin, &cluster, 0)?;
    let project = tempfile::tempdir()?;
    measure("spool", args, &model, &node.base, node.pid(), project.path()).await
}

async fn measure_opencode(args: &VersusArgs, bin: &Path, home: &Path) -> Result<Measure> {
    let model = FakeModel::start(args.deltas, Duration::from_millis(args.delay_ms)).await?;
    let project = tempfile::tempdir()?;
    let server = OpenCode::start(bin, &model.base_url, project.path(), home)?;
    measure("opencode", args, &model, &server.base, server.child.id(), project.path()).await
}

async fn measure(
    server: &'static str,
    args: &VersusArgs,
    model: &FakeModel,
    base: &str,
    pid: u32,
    project: &Path,
) -> Result<Measure> {
    let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(args.subscribers + 4).build()?;
    let directory = project.display().to_string();
    let query = format!("directory={}", urlencode(&directory));
    let new_session = || async {
        let session: serde_json::Value = client
            .post(format!("{base}/session?{query}"))
            .json(&serde_json::json!({"title": "bench"}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::Ok(session["id"].as_str().context("the session's id")?.to_owned())
    };
    let prompt = serde_json::json!({"parts": [{"type": "text", "text": "bench"}]});

    let warm_up = new_session().await?;
    client
        .post(format!("{base}/session/{warm_up}/message?{query}"))
        .json(&prompt)
        .send()
        .await?
        .error_for_status()
        .with_context(|| format!("{server}: the warm-up prompt"))?;

    let session = new_session().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(args.subscribers.max(1));
    let tasks: Vec<_> = (0..args.subscribers)
        .map(|_| {
            let target = Target {
                dialect: Dialect::Opencode,
                base: base.to_owned(),
                session: session.clone(),
                directory: directory.clone(),
                run: None,
                node: 0,
            };
            tokio::spawn(dialect::run(client.clone(), target, ready_tx.clone(), deadline))
        })
        .collect();
    crate::wait_ready(&mut ready_rx, args.subscribers).await?;
    drop(ready_tx);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");

    let calls_before = model.calls();
    let cpu_before = cpu_seconds(pid).context("the server's CPU time")?;
    let prompted = Instant::now();
    client
        .post(format!("{base}/session/{session}/prompt_async?{query}"))
        .json(&prompt)
        .send()
        .await?
        .error_for_status()
        .with_context(|| format!("{server}: the prompt"))?;
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await??);
    }
    let elapsed = prompted.elapsed();
    let cpu = cpu_seconds(pid).context("the server's CPU time")? - cpu_before;
    let last_delta = outcomes
        .iter()
        .filter_map(|o| o.last_delta)
        .max()
        .map_or(Duration::ZERO, |at| at.saturating_duration_since(prompted));
    Ok(Measure {
        server,
        load,
        elapsed,
        last_delta,
        cpu,
        events: outcomes.iter().map(|o| o.frames).sum(),
        deltas: outcomes.iter().map(|o| o.deltas).sum(),
        every_delta: outcomes.iter().filter(|o| o.deltas == args.deltas as u64).count(),
        finished: outcomes.iter().filter(|o| o.finished).count(),
        model_calls: model.calls() - calls_before,
    })
}

fn print_row(run: u64, m: &Measure, args: &VersusArgs) {
    println!(
        "run {run} {:<9} load {}  elapsed {:.3} s  last delta {:.3} s  server CPU {:.2} s  {:.2} µs/event  {:.2} µs/delta  \
         events/subscriber {:.0}  every delta {} of {}  session.idle {} of {}  model calls {}",
        m.server,
        m.load,
        m.elapsed.as_secs_f64(),
        m.last_delta.as_secs_f64(),
        m.cpu,
        m.cpu * 1e6 / m.events.max(1) as f64,
        m.cpu * 1e6 / m.deltas.max(1) as f64,
        m.events as f64 / args.subscribers.max(1) as f64,
        m.every_delta,
        args.subscribers,
        m.finished,
        args.subscribers,
        m.model_calls,
    );
}

/// `median (min–max)` of one figure over runs.
fn summary(runs: &[&Measure], figure: fn(&Measure) -> f64) -> String {
    let mut values: Vec<f64> = runs.iter().map(|m| figure(m)).collect();
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    if values.len() == 1 {
        return format!("{median:.2}");
    }
    format!("{median:.2} ({:.2}–{:.2})", values[0], values[values.len() - 1])
}

/// An `opencode serve` child, killed when dropped.
struct OpenCode {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    base: String,
    _data: tempfile::TempDir,
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OpenCode {
    /// Writes `project/opencode.json` with the fake model as its one provider and starts
    /// `opencode serve` in `project`, with HOME and XDG config and cache under `home`
    /// and a fresh data dir, and waits for its `listening on` line.
    fn start(bin: &Path, model: &str, project: &Path, home: &Path) -> Result<OpenCode> {
        let config = serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "bench": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "bench",
                    "options": {"baseURL": model, "apiKey": "bench"},
                    "models": {MODEL: {"name": MODEL}},
                },
            },
            "model": format!("bench/{MODEL}"),
            "small_model": format!("bench/{MODEL}"),
            "autoupdate": false,
            "share": "disabled",
        });
        std::fs::write(project.join("opencode.json"), serde_json::to_vec_pretty(&config)?)?;
        let data = tempfile::tempdir()?;
        // A free port: `serve` takes a port number, and its line names the one it got.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut cmd = Command::new(bin);
        for (name, _) in std::env::vars_os() {
            // The caller's OpenCode settings (a server password, a config) stay out.
            if name.to_string_lossy().starts_with("OPENCODE_") {
                cmd.env_remove(name);
            }
        }
        let mut child = cmd
            .args(["serve", "--hostname", "127.0.0.1", "--port", &port.to_string()])
            .current_dir(project)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", data.path().join("data"))
            .env("XDG_STATE_HOME", data.path().join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().context("opencode's stdout")?);
        let mut line = String::new();
        let base = loop {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                let _ = child.kill();
                let _ = child.wait();
                bail!("opencode serve exited before it listened");
            }
            if let Some(at) = line.find("listening on ") {
                break line[at + "listening on ".len()..].trim().trim_end_matches('/').to_owned();
            }
        };
        // Whatever it prints later must not fill the pipe and stall it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Ok(OpenCode { child, base, _data: data })
    }
}
