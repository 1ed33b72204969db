//! The `spool` binary as a process, for the tests that run it: [`command`] makes a
//! `Command` that inherits none of the caller's `SPOOL_*` settings, [`serve`] starts
//! `spool serve` and returns once it printed the address it listens on, and [`Spool`]
//! is the running server: SIGKILLed on drop so a failing test leaves nothing behind,
//! [`Spool::stop`] for the graceful SIGTERM path.
//!
//! The binary's path comes from the caller (`env!("CARGO_BIN_EXE_spool")` exists only
//! in the crate that builds it). Signals are sent with kill(2) through `libc`, not the
//! `kill` program: a minimal system (a container image) has no procps.
//!
//! Readiness is the first stdout line, `spool listening on http://HOST:PORT`, which the
//! binary prints once its listener is bound: with `--addr 127.0.0.1:0` that is both
//! the free port and the moment it accepts connections, without polling a port.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a process helper waits: for the address line, for an exit.
pub const WAIT: Duration = Duration::from_secs(30);

/// `bin` with none of the caller's `SPOOL_*` and `OTEL_*` variables (the tests' own
/// `SPOOL_TEST_*` are kept for the binary to ignore): a developer's shell must not change what a test
/// starts. Logs at `warn`, without colour or backtraces.
pub fn command(bin: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(bin);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        // `OTEL_*`: a developer's collector settings would make every test server export.
        if (name.starts_with("SPOOL_") && !name.starts_with("SPOOL_TEST_")) || name.starts_with("OTEL_") {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd.env("RUST_LOG", "warn").env("RUST_BACKTRACE", "0").env("NO_COLOR", "1");
    // The scripted model at full speed (the binary's default pauses between deltas so a
    // person sees streaming); a test that wants a pause passes `--scripted-delay-ms`,
    // which wins over the environment.
    cmd.env("SPOOL_SCRIPTED_DELAY_MS", "0");
    cmd
}

/// Runs `cmd` (a `spool serve …` from [`command`]) with stdout piped and returns the
/// running server and its base URL (`http://HOST:PORT` or `https://…`) once the first
/// line names it. Panics if it does not within [`WAIT`] or says something else. The
/// rest of stdout is drained by a thread, so the server never blocks writing to it.
pub fn serve(mut cmd: Command) -> (Spool, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start spool");
    let stdout = child.stdout.take().expect("piped stdout");
    let spool = Spool(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(WAIT).unwrap_or_else(|e| panic!("spool printed no address within {WAIT:?}: {e}"));
    let base = line
        .trim()
        .strip_prefix("spool listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (spool, base)
}

/// `stderr` for [`serve`]'s command: appended to the file `log`, so a test that starts
/// many servers keeps their warnings to show when it fails.
pub fn log_to(log: &Path) -> Stdio {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open the log file");
    Stdio::from(file)
}

/// A running `spool` process, SIGKILLed and reaped on drop.
pub struct Spool(Child);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Spool {
    /// Takes over a child started some other way.
    pub fn from_child(child: Child) -> Spool {
        Spool(child)
    }

    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// SIGTERM, then waits for a clean exit; panics on any other outcome.
    pub fn stop(mut self) {
        self.sigterm();
        let status = self.wait_exit();
        assert!(status.success(), "graceful exit, got {status}");
    }

    /// SIGKILL and reap: a crash.
    pub fn sigkill(mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("reap");
    }

    /// Sends SIGTERM, as an operator's `kill` would.
    pub fn sigterm(&self) {
        sigterm(&self.0);
    }

    /// SIGSTOP: the process freezes where it is — its timers, its runs, its open
    /// connections — as a node does in a long GC-like pause, a VM migration or a
    /// debugger, until [`resume`](Self::resume). Dropping it still kills it.
    pub fn pause(&self) {
        signal(&self.0, libc::SIGSTOP, "STOP");
    }

    /// SIGCONT: a [`pause`](Self::pause)d process goes on from where it stopped.
    pub fn resume(&self) {
        signal(&self.0, libc::SIGCONT, "CONT");
    }

    /// Waits for the process to exit on its own and returns how; panics after [`WAIT`].
    /// Polls `try_wait`: a blocking `wait` could not be bounded.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_exit(&mut self.0)
    }
}

/// Sends SIGTERM to `child` with kill(2).
pub fn sigterm(child: &Child) {
    signal(child, libc::SIGTERM, "TERM");
}

/// Sends `signal` (named `name` in a failure) to `child` with kill(2).
fn signal(child: &Child, signal: libc::c_int, name: &str) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes plain integers; the child is ours and not yet reaped.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(sent, 0, "kill -{name} {pid}: {}", std::io::Error::last_os_error());
}

/// Waits for `child` to exit and returns how; panics after [`WAIT`].
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "spool did not exit in {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
