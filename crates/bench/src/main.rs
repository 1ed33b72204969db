//! `spool-bench`: end-to-end numbers for the native session stream, measured against a
//! real `spool serve` child process so the server's peak RSS is its own.
//!
//! One session; N subscribers connect to `/api/sessions/:id/events` and wait for their
//! snapshot; then one prompt `stream: D` makes the scripted model (no delay) stream D
//! text deltas. The clock runs from the prompt POST until the last subscriber has seen
//! `agent_settled`. Subscribers only scan bytes for markers (no JSON parsing), so the
//! client costs as little as possible of the two cores it shares with the server.
//!
//! Reported: deltas per second end to end (D / elapsed), frames delivered per second
//! over all subscribers, server peak RSS (VmHWM), and subscribers the server cut for
//! lagging (the designed outcome for a client that cannot keep up: it reconnects and
//! catches up through a snapshot, as a browser would; counted so it shows).

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use memchr::memmem;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Stream benchmark against a real spool server")]
struct Args {
    /// Path of the spool binary (default: `spool` next to this binary).
    #[arg(long)]
    spool: Option<std::path::PathBuf>,
    /// Subscribers on the one session.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Text deltas the scripted model streams.
    #[arg(long, default_value_t = 10_000)]
    deltas: usize,
    /// Pause between the scripted model's deltas, in milliseconds (0: as fast as possible).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
}

struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &Args) -> Result<Server> {
    let bin = match &args.spool {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("spool"),
    };
    let data = tempfile::tempdir()?;
    let mut child = Command::new(&bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--scripted-delay-ms", &args.delay_ms.to_string(), "--data-dir"])
        .arg(data.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let base = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    if !base.starts_with("http://") {
        bail!("unexpected first line from the server: {line:?}");
    }
    Ok(Server { child, base, _data: data })
}

/// Peak resident set (VmHWM) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

struct Outcome {
    deltas: u64,
    frames: u64,
    /// Times the server cut this subscriber for lagging and it came back.
    reconnects: u32,
}

/// Counts `needle` across chunk boundaries.
struct Counter {
    needle: &'static [u8],
    tail: Vec<u8>,
    count: u64,
}

impl Counter {
    fn new(needle: &'static [u8]) -> Self {
        Self { needle, tail: Vec::new(), count: 0 }
    }
    fn feed(&mut self, chunk: &[u8]) -> bool {
        self.tail.extend_from_slice(chunk);
        let found = memmem::find_iter(&self.tail, self.needle).count() as u64;
        self.count += found;
        let keep = self.needle.len() - 1;
        let cut = self.tail.len().saturating_sub(keep);
        self.tail.drain(..cut);
        found > 0
    }
}

/// Reads the stream until the run has settled. A subscriber the server cuts for lagging
/// does what a browser does: it reconnects, here without a cursor so it gets a snapshot
/// (the fast path back for a client that fell far behind). It is done when it sees
/// `agent_settled`, or a snapshot with no active run (the run settled while it was away).
async fn subscriber(client: reqwest::Client, url: String, ready: tokio::sync::mpsc::Sender<()>) -> Result<Outcome> {
    let mut outcome = Outcome { deltas: 0, frames: 0, reconnects: 0 };
    let mut announced = false;
    loop {
        let resp = client.get(&url).send().await?.error_for_status()?;
        let mut body = resp.bytes_stream();
        let mut deltas = Counter::new(b"\"type\":\"text_delta\"");
        let mut frames = Counter::new(b"\n\n");
        let mut settled = Counter::new(b"\"type\":\"agent_settled\"");
        let mut first = true;
        let mut done = false;
        while let Some(Ok(chunk)) = body.next().await {
            if first && outcome.reconnects > 0 && memmem::find(&chunk, b"\"activeRun\":null").is_some() {
                done = true;
            }
            first = false;
            deltas.feed(&chunk);
            frames.feed(&chunk);
            if !announced && frames.count > 0 {
                announced = true;
                let _ = ready.send(()).await;
            }
            if done || settled.feed(&chunk) {
                done = true;
                break;
            }
        }
        outcome.deltas += deltas.count;
        outcome.frames += frames.count;
        if done {
            return Ok(outcome);
        }
        outcome.reconnects += 1;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let server = start_server(&args)?;
    let pid = server.child.id();
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.subscribers + 4).build()?;
    let project_dir = tempfile::tempdir()?;
    let project: serde_json::Value = client
        .post(format!("{}/api/projects", server.base))
        .json(&serde_json::json!({"path": project_dir.path()}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let session: serde_json::Value = client
        .post(format!("{}/api/sessions", server.base))
        .json(&serde_json::json!({"projectId": project["id"], "title": "bench"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let session_id = session["id"].as_str().context("session id")?.to_owned();
    let url = format!("{}/api/sessions/{session_id}/events", server.base);

    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(args.subscribers.max(1));
    let mut tasks = Vec::with_capacity(args.subscribers);
    for _ in 0..args.subscribers {
        tasks.push(tokio::spawn(subscriber(client.clone(), url.clone(), ready_tx.clone())));
    }
    drop(ready_tx);
    for _ in 0..args.subscribers {
        tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await.context("subscribers did not connect")?;
    }
    let rss_idle = peak_rss_kib(pid).unwrap_or(0);

    let started = Instant::now();
    client
        .post(format!("{}/api/sessions/{session_id}/prompt", server.base))
        .json(&serde_json::json!({"text": format!("stream: {}", args.deltas), "requestId": "bench"}))
        .send()
        .await?
        .error_for_status()?;
    let mut frames = 0u64;
    let mut cut = 0usize;
    let mut reconnects = 0u32;
    let mut all_deltas = 0usize;
    for task in tasks {
        let outcome = task.await??;
        frames += outcome.frames;
        if outcome.reconnects == 0 {
            all_deltas += usize::from(outcome.deltas == args.deltas as u64);
        } else {
            cut += 1;
            reconnects += outcome.reconnects;
        }
    }
    let elapsed = started.elapsed();
    let rss_peak = peak_rss_kib(pid).unwrap_or(0);
    let secs = elapsed.as_secs_f64();
    println!("subscribers            {}", args.subscribers);
    println!("deltas                 {}", args.deltas);
    println!("delay per delta        {} ms", args.delay_ms);
    println!("elapsed                {:.3} s (prompt POST until every subscriber holds the final answer)", secs);
    println!("deltas/s end to end    {:.0}", args.deltas as f64 / secs);
    println!("frames delivered       {frames}");
    println!("frames/s delivered     {:.0}", frames as f64 / secs);
    println!("got every delta live   {all_deltas} of {}", args.subscribers);
    println!("cut for lagging        {cut} (reconnected {reconnects} times, caught up by snapshot)");
    println!(
        "server RSS peak        {:.1} MiB (after connect: {:.1} MiB)",
        rss_peak as f64 / 1024.0,
        rss_idle as f64 / 1024.0
    );
    Ok(())
}
