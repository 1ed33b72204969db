//! Pinning a server the bench starts to some CPUs, so that its latency is measured with
//! the server and the client on cores of their own (`spool-bench baseline
//! --server-cpus`, run by `scripts/bench-p99-pinned`; issue 43, "the last millisecond").
//!
//! The bench itself is pinned from outside (`taskset -c`); a server child is started on
//! its own CPUs instead of inheriting the bench's mask ([`start_on`]), so every thread
//! it ever has runs there and its runtime is sized for them.

use anyhow::{Result, bail};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A CPU list as `taskset -c` takes it (`0-3`, `0,2,4-7`), sorted, each CPU once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpus(pub Vec<usize>);

impl std::str::FromStr for Cpus {
    type Err = anyhow::Error;

    fn from_str(list: &str) -> Result<Cpus> {
        parse_cpus(list).map(Cpus)
    }
}

fn parse_cpus(list: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let (low, high): (usize, usize) = (low.trim().parse()?, high.trim().parse()?);
        if high < low || high >= libc::CPU_SETSIZE as usize {
            bail!("bad CPU range {part:?} in {list:?}");
        }
        cpus.extend(low..=high);
    }
    if cpus.is_empty() {
        bail!("no CPU in {list:?}");
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Makes the process `cmd` spawns start on `cpus`, as `taskset -c LIST COMMAND` would.
/// Pinned from its first instruction, the server sees only those CPUs when it sizes its
/// tokio runtime (one worker per CPU it may use), as a server deployed on them does;
/// moved there after it started, it would keep the workers it made for the bench's
/// CPUs and run, say, 12 of them on 4 cores, whose time slices are a latency tail of
/// their own.
pub fn start_on(cmd: &mut Command, cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and every
    // index was checked against CPU_SETSIZE by `parse_cpus`.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        set
    };
    // SAFETY: between fork and exec the closure makes one system call, which is
    // async-signal-safe, and allocates nothing unless it fails.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_taskset_writes_them() {
        assert_eq!(parse_cpus("0-3").unwrap(), [0, 1, 2, 3]);
        assert_eq!(parse_cpus("4,0-1, 6-7").unwrap(), [0, 1, 4, 6, 7]);
        assert!(parse_cpus("3-1").is_err());
        assert!(parse_cpus("").is_err());
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn a_child_starts_on_the_cpus_given() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        start_on(&mut cmd, &[0]);
        let mut child = cmd.spawn().expect("sleep");
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
        let _ = child.kill();
        let _ = child.wait();
        let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("a CPU list");
        assert_eq!(allowed.trim(), "0");
    }
}
