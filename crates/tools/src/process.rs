//! A `bash` call's processes end with the call, background ones included; a confined
//! server's ([`crate::confined`]) end with its guard, the same way.
//!
//! Killing the command's process group at a timeout or an abort is not enough: a
//! command that runs `setsid`, `nohup … &` or a double fork leaves the group, and once
//! the call is over nothing could stop what it left behind (a later call is a new
//! Landlock domain and may not signal it). So the command runs as PID 1 of a PID
//! namespace of its own. When PID 1 exits, the kernel kills every other process in
//! the namespace, whatever session or group it moved to, and the namespace's end is
//! what the call waits for.
//!
//! How, between fork and exec ([`contain`], raw system calls only, all
//! async-signal-safe and allocation-free):
//!
//! 1. `unshare(CLONE_NEWPID)`, which works for a server with `CAP_SYS_ADMIN` (root);
//!    otherwise `unshare(CLONE_NEWUSER | CLONE_NEWPID)`, an unprivileged user
//!    namespace mapping only our own uid and gid to themselves (so files keep their
//!    owner and the command its identity). The capability drop that follows in the
//!    sandbox's own `pre_exec` then empties the capabilities the new user namespace
//!    handed out, so the command holds none there either.
//! 2. `fork`: the child is PID 1 of the new namespace. It asks for `SIGKILL` when its
//!    parent dies (`PR_SET_PDEATHSIG`), so killing the parent takes the namespace down,
//!    and goes on to the sandbox and `exec`.
//! 3. The parent, the process the server spawned and waits for, closes every
//!    descriptor (it must not hold the output pipes or the spawn's error pipe open),
//!    waits for PID 1 and exits with its status. It never returns into the spawn.
//!
//! The parent stays in the command's process group with PID 1, so the server's
//! `killpg` at a timeout or an abort reaches both, and the namespace goes with PID 1.
//!
//! **Cost.** The waiting parent is a fork of the server that never execs, so it keeps
//! the server's pages as they were at the spawn: pages the server changes meanwhile are
//! copied, and a long command with a busy server may hold up to the server's size in
//! copies. Spawning with `clone(CLONE_NEWPID)` straight from the server (no waiting
//! copy) would remove it, at the price of leaving `tokio::process`.
//!
//! **Fallback.** Where neither namespace can be made (no `CAP_SYS_ADMIN` and user
//! namespaces disabled: a container's seccomp profile, `user.max_user_namespaces = 0`),
//! the command runs in its process group alone. The server still kills that group at a
//! timeout, an abort, and when the shell exits, but a process that left the group
//! (`setsid`) outlives the call. [`probe`] tries the namespace once at start-up and
//! `/api/health` reports which of the two this machine gives (`sandbox.pidNamespace`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::unix::AsyncFd;
use tokio::process::Child;

/// Whether commands on this machine run in a PID namespace of their own: tried once,
/// by running `echo $$` the way a command runs and reading back `1`.
pub fn probe() -> bool {
    // The fallback, for the test that runs in a process of its own to see it.
    #[cfg(test)]
    if std::env::var_os("SPOOL_TEST_NO_PID_NAMESPACE").is_some() {
        return false;
    }
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(|| {
        let works = try_namespace();
        if !works {
            tracing::warn!(
                "commands cannot get a PID namespace here (no CAP_SYS_ADMIN, no unprivileged user \
                 namespaces): a process a command moves out of its process group (setsid) outlives the call"
            );
        }
        works
    })
}

fn try_namespace() -> bool {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("sh");
    command.args(["-c", "echo $$"]).stdin(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    // SAFETY: `enter_pid_namespace` makes only async-signal-safe system calls (see there).
    unsafe { command.pre_exec(enter_pid_namespace) };
    match command.output() {
        Ok(out) => out.status.success() && out.stdout == b"1\n",
        Err(_) => false,
    }
}

/// Makes `command` PID 1 of a PID namespace of its own, where [`probe`] found that
/// possible. Register it before the sandbox's `pre_exec` (Landlock would refuse the
/// writes to `/proc/self/uid_map`, and the capability drop must come after the user
/// namespace hands capabilities out).
pub(crate) fn contain(command: &mut tokio::process::Command) {
    if !probe() {
        return;
    }
    // SAFETY: the closure runs in the forked child before exec and makes only raw,
    // async-signal-safe system calls; it allocates nothing and takes no lock.
    unsafe { command.pre_exec(enter_pid_namespace) };
}

/// Between fork and exec: steps 1–3 of the module docs. Returns (in PID 1 of the new
/// namespace) to let the spawn go on to exec; the process it was called in never
/// returns. Where no namespace can be made, returns at once and the command runs
/// uncontained (the fallback); a user namespace that was made but cannot be mapped is
/// an error, since the command could not create files in it.
fn enter_pid_namespace() -> io::Result<()> {
    // SAFETY (for every call below): plain system calls with integer arguments or
    // pointers to live stack values.
    unsafe {
        let (uid, gid) = (libc::geteuid(), libc::getegid());
        if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWPID) != 0 {
            if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER | libc::CLONE_NEWPID) != 0 {
                return Ok(());
            }
            // The server is non-dumpable (sandbox.rs), which makes our `/proc/self`
            // files root's: writable by us only while dumpable. For these three writes
            // only; a process that could read this one's memory meanwhile is of our
            // own uid and outside every sandbox, or root (Landlock and Yama keep
            // commands out).
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let mut line = [0u8; 40];
            // Unprivileged, the gid map may only be written once setgroups is denied.
            let mapped = write_proc(c"/proc/self/setgroups", b"deny")
                .and_then(|()| write_proc(c"/proc/self/uid_map", id_map(uid, &mut line)))
                .and_then(|()| write_proc(c"/proc/self/gid_map", id_map(gid, &mut line)));
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            mapped?;
        }
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                // PID 1 now. Its parent is single-threaded, so the "parent" the death
                // signal watches is the process that waits for us, not a server thread.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }
            pid1 => relay(pid1),
        }
    }
}

/// `"ID ID 1"`, one line mapping `id` to itself, written into `buffer`.
fn id_map(id: u32, buffer: &mut [u8; 40]) -> &[u8] {
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (id, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    for _ in 0..2 {
        for i in (0..len).rev() {
            buffer[at] = digits[i];
            at += 1;
        }
        buffer[at] = b' ';
        at += 1;
    }
    buffer[at] = b'1';
    &buffer[..=at]
}

/// Writes `data` to a `/proc/self` file in one `write`, as those files require.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and `data` is live for the call.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

/// The process the server spawned, once PID 1 is forked: holds nothing open, waits for
/// PID 1 (whose exit the kernel completes only after every process of the namespace is
/// gone) and ends the same way it did.
unsafe fn relay(pid1: libc::pid_t) -> ! {
    // SAFETY: system calls on our own process and our own child only.
    unsafe {
        // The spawn's error pipe among them: the server's `spawn` returns once that
        // pipe is closed by exec in PID 1, and would wait for this process otherwise.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        // The server's handler for SIGCHLD (tokio's) is still installed in this copy of
        // it; with every descriptor closed it would only fail, but it has no business here.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut status = 0;
        loop {
            if libc::waitpid(pid1, &mut status, 0) == pid1 {
                break;
            }
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFSIGNALED(status) {
            // Die of the same signal, so the server reports "killed by signal N".
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            let mut unblock: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut unblock);
            libc::sigaddset(&mut unblock, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &unblock, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// A descriptor that becomes readable when the process has exited, before it is reaped:
/// while it is a zombie its pid, and so its group's id, cannot name anyone else. `None`
/// on kernels without `pidfd_open` (before 5.3), where the group is not swept at exit.
pub(crate) fn exit_watch(pid: u32) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the descriptor was just created for us and nothing else owns it; the
    // `OwnedFd` keeps it open, unchanged, for as long as the `AsyncFd` lives.
    unsafe { AsyncFd::register_with_interest(OwnedFd::from_raw_fd(fd), tokio::io::Interest::READABLE) }.ok()
}

/// Waits for the group's leader to exit, kills what is left in its process group while
/// the unreaped leader keeps the group's id ours, then reaps the leader.
pub(crate) async fn wait_and_sweep(
    child: &mut Child,
    group: &ProcessGroup,
    exit: Option<&AsyncFd<OwnedFd>>,
) -> io::Result<ExitStatus> {
    if let Some(exit) = exit {
        // Readiness stays set (the guard is not cleared): the leader has exited for good.
        let _exited = exit.readable().await?;
        group.kill();
    }
    let status = child.wait().await;
    // Reaped (or beyond waiting for): from here the leader's pid may be reused.
    group.disarm();
    status
}

/// A spawned command's process group (a `bash` call's, a confined server's), killed
/// when this is dropped while still armed.
pub(crate) struct ProcessGroup {
    pgid: libc::pid_t,
    /// Atomic only so that the waiting future and the loop can share `&self`.
    armed: AtomicBool,
}

impl ProcessGroup {
    pub(crate) fn new(leader: u32) -> Self {
        Self { pgid: libc::pid_t::try_from(leader).expect("process ids fit in pid_t"), armed: AtomicBool::new(true) }
    }

    /// Sends SIGKILL to every process in the group, once.
    pub(crate) fn kill(&self) {
        if self.armed.swap(false, Ordering::Relaxed) {
            // SAFETY: killpg only sends a signal. The group's leader is our unreaped
            // child (armed is cleared when it is reaped), so its id still names our
            // group and no other. ESRCH, the group already gone, needs no handling.
            unsafe {
                libc::killpg(self.pgid, libc::SIGKILL);
            }
        }
    }

    /// Called once the leader is reaped, after which its id may name someone else's group.
    pub(crate) fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_maps_name_the_id_twice_and_a_count_of_one() {
        let mut buffer = [0u8; 40];
        assert_eq!(id_map(0, &mut buffer), b"0 0 1");
        assert_eq!(id_map(1000, &mut buffer), b"1000 1000 1");
        assert_eq!(id_map(u32::MAX, &mut buffer), b"4294967295 4294967295 1");
    }
}
