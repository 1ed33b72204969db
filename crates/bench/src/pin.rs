//! Pinning a server the bench started to some CPUs, so that its latency is measured with
//! the server and the client on cores of their own (`spool-bench baseline
//! --server-cpus`, run by `scripts/bench-p99-pinned`; issue 43, "the last millisecond").
//!
//! The bench itself is pinned from outside (`taskset -c`), and its children inherit that
//! mask when they start; so the server child is moved afterwards, every thread of it:
//! `sched_setaffinity` on a process id moves only its main thread, and the tokio workers
//! already exist by the time the server says it is listening. Threads the server starts
//! later inherit the mask of the thread that starts them, which is pinned by then.

use anyhow::{Context, Result, bail};

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

/// Moves every thread of process `pid` onto `cpus`. Threads that appear while it runs
/// are moved too (it goes over the list until no new one shows up).
pub fn pin_process(pid: u32, cpus: &[usize]) -> Result<()> {
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
    let mut done = std::collections::BTreeSet::new();
    loop {
        let mut moved = 0;
        for entry in std::fs::read_dir(format!("/proc/{pid}/task")).context("the server's threads")? {
            let tid: libc::pid_t = entry?.file_name().to_string_lossy().parse()?;
            if !done.insert(tid) {
                continue;
            }
            // SAFETY: sched_setaffinity reads `set`, whose size is given.
            if unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) } != 0 {
                let e = std::io::Error::last_os_error();
                // A thread that ended meanwhile is fine.
                if e.raw_os_error() != Some(libc::ESRCH) {
                    bail!("pinning thread {tid} of {pid} to CPUs {cpus:?}: {e}");
                }
            }
            moved += 1;
        }
        if moved == 0 {
            return Ok(());
        }
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
    fn a_child_ends_up_on_the_cpus_given() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pinned = pin_process(child.id(), &[0]);
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
        let _ = child.kill();
        let _ = child.wait();
        pinned.expect("pinned");
        let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("a CPU list");
        assert_eq!(allowed.trim(), "0");
    }
}
