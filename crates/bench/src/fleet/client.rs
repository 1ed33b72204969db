//! One client process of `spool-bench nodes` (`spool-bench nodes-client`, started by the
//! coordinator): subscribers `first..first + count` of the run, each on a connection of
//! its own from a loopback source address of its own group (as `idle` does), under the
//! per-process open-file limit.
//!
//! Subscriber `i` follows session `i % S` on node `(i / S) % N`, so every session's
//! subscribers are spread round robin over the nodes. When its stream ends or its
//! node refuses it, it does what Spool's clients do (`crates/client/src/stream.rs`): it
//! waits 1.5 s plus up to a quarter more of jitter, doubling up to 30 s and back to
//! 1.5 s on any byte, and comes back with `Last-Event-ID` set to its cursor. It comes
//! back to another node, picked at random among the others as a load balancer that
//! took the dead node out of rotation would; a refused connection moves it on again.
//!
//! Every frame of every subscriber is checked ([`wire::Track`]): no hole, no repeat, no
//! snapshot where a replay was due. Hot-session subscribers (session 0) also note, per
//! run, when the first `text_delta` came and when every `sample_every`th one came, on
//! `CLOCK_MONOTONIC`, which this process shares with the coordinator and its fake model.
//!
//! The coordinator drives the process over stdin, one command a line, and reads one
//! JSON line back per command (see [`command`]); the first line, unasked, says that
//! every subscriber has its first frame.

use super::wire::{Body, Seen, Track};
use crate::idle::client::{connect, source_address};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};

/// What every client process is told: the nodes, the sessions, how to behave.
#[derive(Serialize, Deserialize, Clone)]
pub struct Plan {
    pub nodes: Vec<SocketAddr>,
    /// Session ids; session 0 is the hot one.
    pub sessions: Vec<String>,
    pub per_source: u64,
    /// First connections being opened at once in this process (reconnects are not held
    /// back: the storm is what a real fleet of clients would do).
    pub in_flight: usize,
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    pub sample_every: u64,
}

/// The node subscriber `i` starts on: each session's subscribers round robin over the
/// nodes (subscriber `i` follows session `i % sessions`).
pub fn start_node(i: usize, sessions: usize, nodes: usize) -> usize {
    (i / sessions) % nodes
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One hot subscriber's view of one run, sent when the run settles.
#[derive(Serialize, Deserialize)]
pub struct HotRun {
    /// Which run of the session (1, 2, …) this subscriber saw settle.
    pub run: u32,
    /// The node it was reading from when the run settled.
    pub node: usize,
    /// When the run's first `text_delta` came (ns, `CLOCK_MONOTONIC`).
    pub first: Option<u64>,
    /// `(n, ns)`: when the nth delta of the run (from 1) came, every `sample_every`th.
    pub marks: Vec<(u32, u64)>,
    pub deltas: u64,
    /// The run's frames it took, `run.accepted` to `agent_settled`.
    pub frames: u64,
    /// Its stream ended during the run and it resumed (on another node).
    pub cut: bool,
}

/// A subscriber's totals at the end.
#[derive(Default, Serialize, Deserialize)]
pub struct Totals {
    pub subscribers: u64,
    pub frames: u64,
    pub presence: u64,
    pub snapshots: u64,
    pub missing: u64,
    pub repeated: u64,
    pub stream_changes: u64,
    pub resyncs: u64,
    pub bad_starts: u64,
    /// Subscribers with any fault.
    pub faulty: u64,
    pub reconnects: u64,
    pub failed_connects: u64,
    /// Up to five faulty subscribers, as text.
    pub examples: Vec<String>,
}

/// What the process's subscribers share with the command loop.
struct Live {
    /// Subscribers without a stream now (all of them at first).
    down: AtomicUsize,
    disconnects: AtomicU64,
    failed: AtomicU64,
    /// When each lost stream was back (ns), since the last `storm` command.
    back: Mutex<Vec<u64>>,
    hot: Mutex<Vec<HotRun>>,
    /// When a hot subscriber here last took a frame (ns).
    hot_frame: AtomicU64,
    /// The last seq each subscriber took, by local index.
    seqs: Vec<AtomicU64>,
}

/// `spool-bench nodes-client PLAN FIRST COUNT`.
pub async fn run(plan: &std::path::Path, first: usize, count: usize) -> Result<()> {
    let plan: Plan = serde_json::from_slice(&std::fs::read(plan).context("reading the plan")?)?;
    if let Some(hard) = crate::idle::system::hard_fd_limit() {
        crate::idle::system::raise_fd_limit(hard)?;
    }
    let plan = Arc::new(plan);
    let live = Arc::new(Live {
        down: AtomicUsize::new(count),
        disconnects: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        back: Mutex::new(Vec::new()),
        hot: Mutex::new(Vec::new()),
        hot_frame: AtomicU64::new(now_ns()),
        seqs: (0..count).map(|_| AtomicU64::new(0)).collect(),
    });
    let gate = Arc::new(Semaphore::new(plan.in_flight));
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = now_ns();
    let tasks: Vec<_> = (0..count)
        .map(|local| {
            let sub = Subscriber {
                i: first + local,
                local,
                plan: plan.clone(),
                live: live.clone(),
                gate: Some(gate.clone()),
                stop: stop_rx.clone(),
            };
            tokio::spawn(sub.run())
        })
        .collect();
    drop(stop_rx);
    let hot_here = (first..first + count).filter(|i| i % plan.sessions.len() == 0).count();
    let mut out = tokio::io::stdout();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while live.down.load(Relaxed) > 0 {
        if tokio::time::Instant::now() > deadline {
            let down = live.down.load(Relaxed);
            say(&mut out, json!({"error": format!("{down} of {count} subscribers had no first frame within 300 s")}))
                .await?;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = (now_ns() - started) as f64 / 1e9;
    say(&mut out, json!({"connected": count, "secs": secs, "failed": live.failed.load(Relaxed), "rssKib": rss_kib()}))
        .await?;

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let reply = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["status"] => status(&live),
            ["storm"] => json!({"back": std::mem::take(&mut *lock(&live.back))}),
            ["hot", run] => hot(&live, run.parse()?, hot_here).await,
            ["seqs"] => seqs(&live, &plan, first),
            ["finish"] => {
                let _ = stop_tx.send(true);
                let mut totals = Totals::default();
                for task in tasks {
                    let (i, node, track, reconnects) = task.await?;
                    add(&mut totals, i, node, &track, reconnects);
                }
                totals.failed_connects = live.failed.load(Relaxed);
                say(&mut out, serde_json::to_value(&totals)?).await?;
                return Ok(());
            }
            other => bail!("unknown command {other:?}"),
        };
        say(&mut out, reply).await?;
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().expect("no panic holds this lock")
}

async fn say(out: &mut tokio::io::Stdout, value: serde_json::Value) -> Result<()> {
    out.write_all(format!("{value}\n").as_bytes()).await?;
    out.flush().await?;
    Ok(())
}

fn rss_kib() -> u64 {
    crate::idle::system::self_status_kib("VmRSS:").unwrap_or(0)
}

fn status(live: &Live) -> serde_json::Value {
    json!({
        "down": live.down.load(Relaxed),
        "disconnects": live.disconnects.load(Relaxed),
        "failed": live.failed.load(Relaxed),
        "rssKib": rss_kib(),
    })
}

/// Waits until every hot subscriber here has seen run `run` settle, or none has taken
/// a frame for 20 s (a run that ended without settling), and hands over what they saw.
async fn hot(live: &Live, run: u32, expected: usize) -> serde_json::Value {
    loop {
        let settled = lock(&live.hot).iter().filter(|h| h.run == run).count();
        let quiet = now_ns().saturating_sub(live.hot_frame.load(Relaxed)) > 20_000_000_000;
        if settled >= expected || quiet {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let runs: Vec<HotRun> = {
        let mut hot = lock(&live.hot);
        let (this, rest) = std::mem::take(&mut *hot).into_iter().partition(|h| h.run == run);
        *hot = rest;
        this
    };
    json!({"expected": expected, "runs": runs})
}

/// Per session: the lowest and highest last seq among its subscribers here.
fn seqs(live: &Live, plan: &Plan, first: usize) -> serde_json::Value {
    let mut range = vec![(u64::MAX, 0u64); plan.sessions.len()];
    for (local, seq) in live.seqs.iter().enumerate() {
        let r = &mut range[(first + local) % plan.sessions.len()];
        let seq = seq.load(Relaxed);
        *r = (r.0.min(seq), r.1.max(seq));
    }
    json!({"down": live.down.load(Relaxed), "ranges": range})
}

fn add(totals: &mut Totals, i: usize, node: usize, t: &Track, reconnects: u64) {
    totals.subscribers += 1;
    totals.frames += t.frames;
    totals.presence += t.presence;
    totals.snapshots += t.snapshots;
    totals.missing += t.missing;
    totals.repeated += t.repeated;
    totals.stream_changes += t.stream_changes;
    totals.resyncs += t.resyncs;
    totals.bad_starts += t.bad_starts;
    totals.reconnects += reconnects;
    if t.faults() > 0 {
        totals.faulty += 1;
        if totals.examples.len() < 5 {
            totals.examples.push(format!(
                "subscriber {i} (node {node} at the end, {reconnects} reconnects): {} frames, {} missing, {} repeated, {} stream changes, {} resyncs, {} bad starts",
                t.frames, t.missing, t.repeated, t.stream_changes, t.resyncs, t.bad_starts
            ));
        }
    }
}

struct Subscriber {
    i: usize,
    local: usize,
    plan: Arc<Plan>,
    live: Arc<Live>,
    /// Held for the first connection only.
    gate: Option<Arc<Semaphore>>,
    stop: watch::Receiver<bool>,
}

/// A hot subscriber's current run.
#[derive(Default)]
struct Hot {
    runs: u32,
    deltas: u64,
    frames_before: u64,
    first: Option<u64>,
    marks: Vec<(u32, u64)>,
    cut: bool,
    in_run: bool,
}

/// How one connection ended.
enum End {
    /// It never streamed: refused, or answered with something other than 200.
    Refused,
    /// It streamed, then ended.
    Lost,
    Stopped,
}

impl Subscriber {
    /// Runs until told to stop; gives back its index, last node, track and reconnects.
    async fn run(mut self) -> (usize, usize, Track, u64) {
        let n = self.plan.nodes.len();
        let session = self.i % self.plan.sessions.len();
        let source = source_address(self.i, self.plan.per_source);
        let mut node = start_node(self.i, self.plan.sessions.len(), n);
        let mut track = Track::default();
        let mut hot = (session == 0).then(Hot::default);
        let min = Duration::from_millis(self.plan.backoff_min_ms);
        let max = Duration::from_millis(self.plan.backoff_max_ms);
        let mut delay = min;
        let mut rng = (self.i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut reconnects = 0;
        loop {
            let permit = match self.gate.take() {
                Some(gate) => Some(gate.acquire_owned().await.expect("the gate is never closed")),
                None => None,
            };
            let end = self.connection(node, source, session, &mut track, hot.as_mut(), &mut delay, min, permit).await;
            match end {
                End::Stopped => return (self.i, node, track, reconnects),
                End::Lost => {
                    self.live.down.fetch_add(1, Relaxed);
                    self.live.disconnects.fetch_add(1, Relaxed);
                    if let Some(hot) = hot.as_mut() {
                        hot.cut |= hot.in_run;
                    }
                    reconnects += 1;
                }
                End::Refused => {
                    self.live.failed.fetch_add(1, Relaxed);
                }
            }
            // The client's backoff: the delay, plus up to a quarter of it, doubling.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let quarter = delay.as_millis() as u64 / 4;
            let wait = (delay + Duration::from_millis(rng % (quarter + 1))).min(max);
            delay = (delay * 2).min(max);
            if n > 1 {
                node = (node + 1 + (rng >> 32) as usize % (n - 1)) % n;
            }
            let mut stop = self.stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return (self.i, node, track, reconnects),
            }
        }
    }

    /// One connection: opens it (with the cursor when there is one), then reads frames
    /// until it ends or the process is told to stop.
    #[allow(clippy::too_many_arguments)]
    async fn connection(
        &self,
        node: usize,
        source: std::net::Ipv4Addr,
        session: usize,
        track: &mut Track,
        mut hot: Option<&mut Hot>,
        delay: &mut Duration,
        min: Duration,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> End {
        let server = self.plan.nodes[node];
        let cursor = track.cursor();
        let Ok((mut tcp, mut body, rest)) = open(server, source, &self.plan.sessions[session], cursor.as_deref()).await
        else {
            return End::Refused;
        };
        let resumed = cursor.is_some();
        track.connection(resumed);
        let mut up = false;
        // A resumed stream is back once answered; a first one once its snapshot came.
        let mark_up = |up: &mut bool| {
            if !*up {
                *up = true;
                self.live.down.fetch_sub(1, Relaxed);
                if resumed {
                    lock(&self.live.back).push(now_ns());
                }
            }
        };
        if resumed {
            mark_up(&mut up);
        }
        let mut buf = [0u8; 2048];
        let mut pending = Some(rest);
        let mut permit = permit;
        loop {
            let read = match pending.take() {
                Some(rest) if !rest.is_empty() => {
                    buf[..rest.len()].copy_from_slice(&rest);
                    rest.len()
                }
                _ => {
                    let mut stop = self.stop.clone();
                    tokio::select! {
                        read = tcp.read(&mut buf) => match read {
                            Ok(0) | Err(_) => return if up { End::Lost } else { End::Refused },
                            Ok(read) => read,
                        },
                        _ = stop.wait_for(|s| *s) => return End::Stopped,
                    }
                }
            };
            let at = now_ns();
            *delay = min;
            let mut any = false;
            let open = body.feed(&buf[..read], |event| {
                let seen = track.event(event);
                any |= seen != Seen::Nothing;
                if let Some(hot) = hot.as_deref_mut()
                    && seen != Seen::Nothing
                {
                    self.hot_frame(hot, &seen, track.frames, node, at);
                    self.live.hot_frame.store(at, Relaxed);
                }
            });
            if any {
                self.live.seqs[self.local].store(track.seq(), Relaxed);
                if !up {
                    mark_up(&mut up);
                    permit.take();
                }
            }
            if !open {
                return if up { End::Lost } else { End::Refused };
            }
        }
    }

    fn hot_frame(&self, hot: &mut Hot, seen: &Seen, frames: u64, node: usize, at: u64) {
        match seen {
            Seen::RunAccepted => {
                *hot = Hot { runs: hot.runs, frames_before: frames - 1, in_run: true, ..Hot::default() };
            }
            Seen::Delta if hot.in_run => {
                hot.deltas += 1;
                hot.first.get_or_insert(at);
                if hot.deltas.is_multiple_of(self.plan.sample_every) {
                    hot.marks.push((hot.deltas as u32, at));
                }
            }
            Seen::Settled if hot.in_run => {
                hot.runs += 1;
                hot.in_run = false;
                lock(&self.live.hot).push(HotRun {
                    run: hot.runs,
                    node,
                    first: hot.first,
                    marks: std::mem::take(&mut hot.marks),
                    deltas: hot.deltas,
                    frames: frames - hot.frames_before,
                    cut: hot.cut,
                });
            }
            _ => {}
        }
    }
}

/// Connects from `source`, asks for the session's stream and reads the response head:
/// the socket, the body decoder and what was read past the head. Anything but a
/// chunked 200 is an error.
async fn open(
    server: SocketAddr,
    source: std::net::Ipv4Addr,
    session: &str,
    cursor: Option<&str>,
) -> Result<(TcpStream, Body, Vec<u8>)> {
    let mut tcp = connect(server, source, false).await?;
    let resume = cursor.map(|c| format!("Last-Event-ID: {c}\r\n")).unwrap_or_default();
    let request = format!(
        "GET /api/sessions/{session}/events HTTP/1.1\r\nHost: {server}\r\nAccept: text/event-stream\r\n{resume}\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let end = loop {
        let read = tcp.read(&mut buf).await?;
        if read == 0 {
            bail!("closed before the response head");
        }
        head.extend_from_slice(&buf[..read]);
        if let Some(end) = memchr::memmem::find(&head, b"\r\n\r\n") {
            break end;
        }
        if head.len() > 16 * 1024 {
            bail!("a response head over 16 KiB");
        }
    };
    if !head.starts_with(b"HTTP/1.1 200") {
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        bail!("answered {:?}", String::from_utf8_lossy(line));
    }
    let lower = head[..end].to_ascii_lowercase();
    if memchr::memmem::find(&lower, b"transfer-encoding: chunked").is_none() {
        bail!("the stream is not chunked");
    }
    Ok((tcp, Body::default(), head[end + 4..].to_vec()))
}
