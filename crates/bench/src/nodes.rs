//! The `spool serve` children the bench measures: one by default (SQLite in a temp data
//! dir), or several on one PostgreSQL database and one Redis, as a deployment runs them.
//!
//! Each node is its own process so its peak RSS (VmHWM) is its own, and is killed when
//! its handle drops, on the error paths too.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Where the nodes keep their state and how they find each other.
pub struct Cluster<'a> {
    /// `--database-url` of every node (the run's own database); `None`: SQLite.
    pub database_url: Option<&'a str>,
    /// `--redis-url` of every node; with it each node follows the session through the bus.
    pub redis_url: Option<&'a str>,
    pub delay_ms: u64,
    /// `--config` of every node (default: none).
    pub config: Option<&'a Path>,
    /// An OpenAI-compatible model server's base URL (`…/v1`): the nodes answer with its
    /// model `bench` instead of the scripted model.
    pub openai_compatible: Option<&'a str>,
    /// CPUs every node starts on (`pin::start_on`); `None`: the bench's own.
    pub cpus: Option<&'a [usize]>,
}

impl<'a> Cluster<'a> {
    /// One node on its own SQLite database, answering with the model at `model_url`
    /// (an OpenAI-compatible `…/v1`, the bench's fake model).
    pub fn solo(model_url: &'a str) -> Self {
        Cluster {
            database_url: None,
            redis_url: None,
            delay_ms: 0,
            config: None,
            openai_compatible: Some(model_url),
            cpus: None,
        }
    }
}

/// The `spool` binary to start: `--spool PATH`, or the one built beside this bench.
pub fn spool_bin(flag: Option<&std::path::PathBuf>) -> Result<std::path::PathBuf> {
    Ok(match flag {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("spool"),
    })
}

pub struct Node {
    child: Child,
    /// `http://127.0.0.1:PORT`, as the node printed it.
    pub base: String,
    _data: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Starts node `index` and waits for its `spool listening on` line. Nodes start one
    /// after another, so only the first one migrates the database.
    pub fn start(bin: &Path, cluster: &Cluster, index: usize) -> Result<Node> {
        let data = tempfile::tempdir()?;
        let mut cmd = Command::new(bin);
        // The caller's environment must not add a store or a cluster of its own.
        for var in ["SPOOL_ADDR", "SPOOL_DATA_DIR", "SPOOL_DATABASE_URL", "SPOOL_REDIS_URL", "SPOOL_NODE_ID"] {
            cmd.env_remove(var);
        }
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--scripted-delay-ms", &cluster.delay_ms.to_string()])
            // Every subscriber is the one local user: lift the per-user stream limit
            // (256 by default) so a node can take a benchmark's thousand.
            .args(["--max-streams-per-user", "1000000"])
            // And the connection cap (10,000 by default): `idle` opens 100,000.
            .args(["--max-connections", "10000000"])
            .arg("--data-dir")
            .arg(data.path());
        match cluster.config {
            Some(config) => {
                cmd.arg("--config").arg(config);
            }
            // The node's own config file (DATA_DIR/config.toml): every benchmark client
            // is the one local user, so lift the per-user session rate (`idle` creates
            // its sessions as fast as it can).
            None => std::fs::write(
                data.path().join("config.toml"),
                "[limits]\nsessions_per_minute = 1000000\nsession_burst = 1000000\nsessions_per_user = 10000000\n",
            )?,
        }
        if let Some(url) = cluster.openai_compatible {
            cmd.env("SPOOL_OPENAI_COMPATIBLE_BASE_URL", url).env_remove("SPOOL_OPENAI_COMPATIBLE_API_KEY");
            cmd.args(["--model", &format!("openai-compatible:{}", crate::fake_model::MODEL)]);
        }
        // The URLs go in the environment: `spool serve` refuses one with a password in
        // argv, where every process of the machine reads it.
        if let Some(url) = cluster.database_url {
            cmd.env("SPOOL_DATABASE_URL", url);
        }
        if let Some(url) = cluster.redis_url {
            // Node ids name leases and bus links on a shared Redis: the pid keeps runs apart.
            cmd.env("SPOOL_REDIS_URL", url).args(["--node-id", &format!("bench-{}-{index}", std::process::id())]);
        }
        if let Some(cpus) = cluster.cpus {
            crate::pin::start_on(&mut cmd, cpus);
        }
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(base) = line.trim().strip_prefix("spool listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("node {index}: unexpected first line from the server: {line:?}");
        };
        Ok(Node { base: base.to_owned(), child, _data: data })
    }

    /// CPU time the node's process has used so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.child.id())
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident set (VmHWM) of the node's process, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.status_kib("VmHWM:")
    }

    /// Resident set now (VmRSS) of the node's process, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        self.status_kib("VmRSS:")
    }

    /// The anonymous part of the resident set (RssAnon: the heap and stacks, not the
    /// mapped binary), in KiB.
    pub fn rss_anon_kib(&self) -> Option<u64> {
        self.status_kib("RssAnon:")
    }

    /// One `kB` field of `/proc/PID/status`.
    fn status_kib(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
    }

    /// Kills the node at once (SIGKILL), as a crash or the kernel's OOM killer would,
    /// and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Stops the node as an operator would (SIGTERM) and waits up to `within` for it to
    /// exit, so whatever it does on a graceful stop (a heap profiler writing its file)
    /// happens. A node still running then is killed when its handle drops.
    pub fn terminate(&mut self, within: std::time::Duration) -> Result<()> {
        // A system call rather than the `kill` program, which a minimal system lacks.
        let pid = libc::pid_t::try_from(self.child.id()).context("the node's pid")?;
        // SAFETY: kill(2) takes plain integers; the child is ours and not yet reaped.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            bail!("kill -TERM {pid} failed: {}", std::io::Error::last_os_error());
        }
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        bail!("the node did not stop within {within:?} of SIGTERM")
    }
}

/// Registers a fresh temporary directory as a project on the node at `base` (its
/// `http://…`); the directory lives as long as the returned guard.
pub async fn new_project(client: &reqwest::Client, base: &str) -> Result<(tempfile::TempDir, serde_json::Value)> {
    let dir = tempfile::tempdir()?;
    let project = client
        .post(format!("{base}/api/projects"))
        .json(&serde_json::json!({"path": dir.path()}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok((dir, project))
}

/// CPU time process `pid` has used so far (user + system, all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces):
    // utime and stime are the 12th and 13th, in clock ticks.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / per_second.max(1) as f64)
}
