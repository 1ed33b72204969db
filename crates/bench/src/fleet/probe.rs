//! What `spool-bench nodes` reads of the processes it measures but did not start:
//! Redis and PostgreSQL, found in `/proc` by their command name (`redis-server`,
//! `postgres`: the server and every backend and helper process it forked), and of any
//! process by pid: CPU time and memory.
//!
//! Redis's memory is its VmRSS. PostgreSQL's processes share their buffer cache, so
//! adding their RSS would count it once per process: theirs is the sum of each
//! process's PSS (`/proc/PID/smaps_rollup`), shared pages split among those mapping
//! them. CPU is utime + stime, counted per process between readings; a backend that
//! exits between two readings takes its last part with it, so the figure is a floor
//! (the nodes keep their pool connections open; a killed node's backends exit).

use crate::nodes::cpu_seconds;

/// A set of processes of one program, and the CPU time each had at the last reading.
pub struct Program {
    pub name: &'static str,
    cpu: std::collections::HashMap<u32, f64>,
}

/// CPU seconds (since the previous reading) and memory (KiB) of a program.
#[derive(Clone, Copy, Default)]
pub struct Reading {
    pub cpu: f64,
    pub kib: u64,
    /// The part of `cpu` used by processes already there at the previous reading: a
    /// process seen for the first time brings all the CPU it ever used, which may be
    /// more than the step between two readings allows (peaks use this part).
    pub cpu_seen: f64,
}

impl Program {
    /// The processes whose `comm` is `name` now; none when it is not running here.
    pub fn find(name: &'static str) -> Program {
        let mut program = Program { name, cpu: Default::default() };
        program.read();
        program
    }

    pub fn found(&self) -> bool {
        !self.cpu.is_empty()
    }

    /// Looks for the program's processes again (PostgreSQL forks a backend per
    /// connection) and reads them: the CPU they used since the previous reading (all of
    /// it for a process new since then; a process that exited meanwhile takes its last
    /// part with it, so this is a floor) and their memory now.
    pub fn read(&mut self) -> Reading {
        let pids = pids_of(self.name);
        let (mut cpu, mut cpu_seen) = (0.0, 0.0);
        let mut now = std::collections::HashMap::with_capacity(pids.len());
        for &pid in &pids {
            let Some(c) = cpu_seconds(pid) else { continue };
            match self.cpu.get(&pid) {
                Some(before) => {
                    cpu += c - before;
                    cpu_seen += c - before;
                }
                None => cpu += c,
            }
            now.insert(pid, c);
        }
        self.cpu = now;
        let field = if pids.len() > 1 { "Pss:" } else { "Rss:" };
        let kib = pids.iter().filter_map(|&p| kib(&format!("/proc/{p}/smaps_rollup"), field)).sum();
        Reading { cpu, kib, cpu_seen }
    }
}

fn pids_of(name: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// One `kB` field of a `/proc` file (`status` or `smaps_rollup`).
pub fn kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds and VmRSS of one process now.
pub fn process(pid: u32) -> Reading {
    let cpu = cpu_seconds(pid).unwrap_or(0.0);
    Reading { cpu, kib: kib(&format!("/proc/{pid}/status"), "VmRSS:").unwrap_or(0), cpu_seen: cpu }
}

/// The highest CPU use (cores, over the steps between samples) and memory seen while
/// sampling.
#[derive(Clone, Copy, Default)]
pub struct Peak {
    pub cores: f64,
    pub kib: u64,
    /// Process CPU total and when, at the previous sample (for [`Peak::sample`]).
    last: Option<(f64, std::time::Instant)>,
}

impl Peak {
    /// One process's reading: CPU seconds so far and memory now.
    pub fn sample(&mut self, now: Reading) {
        let at = std::time::Instant::now();
        if let Some((cpu, then)) = self.last {
            self.step(now.cpu - cpu, at.duration_since(then));
        }
        self.last = Some((now.cpu, at));
        self.kib = self.kib.max(now.kib);
    }

    /// A program's reading: CPU seconds since the previous one (over `since`).
    pub fn sample_since(&mut self, now: Reading, since: std::time::Duration) {
        self.step(now.cpu_seen, since);
        self.kib = self.kib.max(now.kib);
    }

    fn step(&mut self, cpu: f64, over: std::time::Duration) {
        if !over.is_zero() {
            self.cores = self.cores.max(cpu / over.as_secs_f64());
        }
    }
}

/// Commands the Redis at `url` (`redis://HOST:PORT…`) has processed since it started
/// (`INFO stats`, `total_commands_processed`): every client's, so a shared Redis adds
/// others' to the count. `None` when it cannot be asked (a password, TLS).
pub async fn redis_commands(url: &str) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("redis://")?;
    let addr = rest.split('/').next()?;
    if addr.contains('@') {
        return None;
    }
    let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    tcp.write_all(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n").await.ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    let field = b"total_commands_processed:";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(at) = memchr::memmem::find(&reply, field) {
            let rest = &reply[at + field.len()..];
            if let Some(end) = memchr::memchr(b'\r', rest) {
                return std::str::from_utf8(&rest[..end]).ok()?.parse().ok();
            }
        }
        let read = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await.ok()?.ok()?;
        if read == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..read]);
    }
}
