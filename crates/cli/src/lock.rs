//! One `spool serve` per data directory.
//!
//! A server starting on a SQLite data directory marks the runs it finds `running` as
//! failed (`server_restarted`): they were a crashed predecessor's. If a live server
//! were still running them, that would break its runs, and two processes writing one
//! database behind each other's back corrupt each other's view. So before the store is
//! touched, `serve` takes an exclusive advisory lock (`flock`) on `DATA_DIR/serve.lock`
//! and keeps it for its lifetime; a second server finds it taken and exits at once,
//! naming the holder's pid, which the holder writes into the file (with its address
//! once it listens). The kernel drops the lock when the process ends, however it ends,
//! so a crash never leaves a stale lock behind, and the file itself is never removed
//! (removing it would let two servers lock two different files).
//!
//! `spool token …` does not take the lock: it only writes token rows, which SQLite's
//! own locking serializes against a running server.
//!
//! With `--database-url` no lock is taken: the data directory then holds only the
//! config file, and several nodes (perhaps on one machine) share the database on
//! purpose, with leases deciding who runs what.

use anyhow::{Context, bail};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "serve.lock";

/// The held lock; released when dropped (or when the process ends).
pub struct DataDirLock {
    file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Locks `data_dir` (which must exist) for this process, or says who holds it.
    pub fn acquire(data_dir: &Path) -> anyhow::Result<DataDirLock> {
        let path = data_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = describe(&holder);
                bail!(
                    "another spool server ({holder}) is using the data directory {}; stop it first, or give \
                     this one another --data-dir",
                    data_dir.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        let mut lock = DataDirLock { file, path };
        lock.record(None)?;
        Ok(lock)
    }

    /// Writes this process's pid, and its address once it listens, into the lock file.
    pub fn record(&mut self, addr: Option<&str>) -> anyhow::Result<()> {
        let mut text = format!("pid {}\n", std::process::id());
        if let Some(addr) = addr {
            text.push_str(&format!("addr {addr}\n"));
        }
        let write = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(text.as_bytes())?;
            file.flush()
        };
        write(&mut self.file).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// "pid 123, listening on http://…" from the lock file's text; "pid unknown" when the
/// holder has not written it yet.
fn describe(text: &str) -> String {
    let field =
        |name: &str| text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).map(str::trim));
    let pid = field("pid").filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let mut out = format!("pid {}", pid.unwrap_or("unknown"));
    if let Some(addr) = field("addr").filter(|a| a.len() < 200 && a.bytes().all(|b| b.is_ascii_graphic())) {
        out.push_str(&format!(", listening on {addr}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_names_the_holder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut first = DataDirLock::acquire(dir.path()).expect("first lock");
        first.record(Some("http://127.0.0.1:9")).expect("record");
        let err = DataDirLock::acquire(dir.path()).err().expect("second lock refused").to_string();
        assert!(err.contains(&format!("pid {}, listening on http://127.0.0.1:9", std::process::id())), "{err}");
        drop(first);
        DataDirLock::acquire(dir.path()).expect("free again once dropped");
    }

    #[test]
    fn a_holder_that_wrote_nothing_yet_is_pid_unknown() {
        assert_eq!(describe(""), "pid unknown");
        assert_eq!(describe("pid 12\n"), "pid 12");
        assert_eq!(describe("pid x; rm -rf\n"), "pid unknown");
    }
}
