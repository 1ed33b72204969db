//! Starting the command and ending everything it started: the shell spawned in its own
//! process group (and PID namespace, where the machine allows), a pidfd that says when
//! it exited, and the group killed at exit, on timeout or abort, or when the call is
//! dropped (see the module doc of `bash`).

use crate::error::ToolError;
use crate::sandbox::Prepared;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};

/// Starts `command` under bash, or under sh where there is no bash, in the sandbox, in
/// the project directory the sandbox holds open (`fchdir`, not the path).
pub(super) fn spawn(command: &str, sandbox: &Prepared) -> Result<Child, ToolError> {
    let mut missing = None;
    for shell in ["bash", "sh"] {
        let mut cmd = Command::new(shell);
        cmd.arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so one signal reaches everything the command starts.
            .process_group(0)
            // A backstop for the shell itself; `ProcessGroup` covers its children.
            .kill_on_drop(true);
        // PID 1 of its own PID namespace: first, since the sandbox's capability drop
        // and Landlock must come after the namespace is made.
        crate::process::contain(&mut cmd);
        // An allow-listed environment, and Landlock applied between fork and exec.
        sandbox.apply(&mut cmd);
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            Err(err) if err.kind() == io::ErrorKind::NotFound => missing = Some(err),
            Err(err) => return Err(ToolError::Spawn(err)),
        }
    }
    Err(ToolError::Spawn(missing.expect("the loop ran at least once")))
}

/// A descriptor that becomes readable when the shell has exited, before it is reaped:
/// while it is a zombie its pid, and so its group's id, cannot name anyone else. `None`
/// on kernels without `pidfd_open` (before 5.3), where the group is not swept at exit.
pub(super) fn exit_watch(pid: u32) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the descriptor was just created for us and nothing else owns it; the
    // `OwnedFd` keeps it open, unchanged, for as long as the `AsyncFd` lives.
    unsafe { AsyncFd::register_with_interest(OwnedFd::from_raw_fd(fd), tokio::io::Interest::READABLE) }.ok()
}

/// Waits for the shell to exit, kills what is left in its process group while the
/// unreaped shell keeps the group's id ours, then reaps the shell.
pub(super) async fn wait_and_sweep(
    child: &mut Child,
    group: &ProcessGroup,
    exit: Option<AsyncFd<OwnedFd>>,
) -> io::Result<ExitStatus> {
    if let Some(exit) = &exit {
        // Readiness stays set (the guard is not cleared): the shell has exited for good.
        let _exited = exit.readable().await?;
        group.kill();
    }
    let status = child.wait().await;
    // Reaped (or beyond waiting for): from here the shell's pid may be reused.
    group.disarm();
    status
}

/// The command's process group, killed when this is dropped while still armed.
pub(super) struct ProcessGroup {
    pgid: libc::pid_t,
    /// Atomic only so that the waiting future and the loop can share `&self`.
    armed: AtomicBool,
}

impl ProcessGroup {
    pub(super) fn new(leader: u32) -> Self {
        Self { pgid: libc::pid_t::try_from(leader).expect("process ids fit in pid_t"), armed: AtomicBool::new(true) }
    }

    /// Sends SIGKILL to every process in the group, once.
    pub(super) fn kill(&self) {
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
    pub(super) fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
