//! What `spool-bench idle` reads of the machine it runs on (open-file limits, the
//! ephemeral port range, its own RSS) and of the server it measures (memory, and values
//! on `/metrics`).

use crate::nodes::Node;
use anyhow::{Context, Result, bail};
use std::time::{Duration, Instant};

/// VmRSS and RssAnon of the node, in KiB.
pub(super) struct Memory {
    pub(super) rss: u64,
    pub(super) anon: u64,
}

impl Memory {
    pub(super) fn of(node: &Node) -> Self {
        Self { rss: node.rss_kib().unwrap_or(0), anon: node.rss_anon_kib().unwrap_or(0) }
    }
}
/// One value of the server's `/metrics` (a line `NAME VALUE`; `name` may carry labels).
pub(super) async fn metric(client: &reqwest::Client, base: &str, name: &str) -> Result<f64> {
    let text = client.get(format!("{base}/metrics")).send().await?.error_for_status()?.text().await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {name} on /metrics"))
}
/// Polls `/metrics` until no session stream is open (every closed connection's body has
/// been dropped); gives the gauge's last value after 60 s if it never gets there.
pub(super) async fn wait_for_no_streams(client: &reqwest::Client, base: &str) -> Result<i64> {
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
pub(crate) fn raise_fd_limit(want: u64) -> Result<u64> {
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
pub(crate) fn hard_fd_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit.rlim_max)
}

/// How many ports `net.ipv4.ip_local_port_range` holds.
pub(crate) fn ephemeral_ports() -> Result<u64> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")?;
    let mut ends = range.split_whitespace().map(str::parse::<u64>);
    match (ends.next(), ends.next()) {
        (Some(Ok(low)), Some(Ok(high))) if high >= low => Ok(high - low + 1),
        _ => bail!("cannot read net.ipv4.ip_local_port_range: {range:?}"),
    }
}

/// One `kB` field of this process's `/proc/self/status`.
pub(crate) fn self_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}
