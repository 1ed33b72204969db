//! A long-lived child in the `bash` sandbox: an MCP server spoken to over its stdin and
//! stdout (issue 38). It gets what a `bash` command gets ([`crate::sandbox`]): the
//! environment allow-list, Landlock reads everywhere but the data directory and the
//! secrets, writes only in the project, no capabilities, the seccomp filter and the TCP
//! layer; on top of that, what its config entry grants ([`ConfinedCommand`]): its own
//! variables, more directories to write, and the network on or off for it alone.
//!
//! Unlike a `bash` call it has no deadline and no shell: it runs until the returned
//! [`ConfinedGuard`] is dropped, which kills its process group, and with it the PID
//! namespace it runs in where the machine allows ([`crate::process`]), so a grandchild
//! that moved to a session of its own (`setsid`) dies too. Its stdin and stdout are the
//! protocol's pipes; stderr is piped for the caller to read (a crash's last words).

use crate::error::ToolError;
use crate::path::Root;
use crate::process::{ProcessGroup, exit_watch, wait_and_sweep};
use crate::sandbox::{Grants, Prepared, SandboxSettings};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

#[cfg(test)]
mod tests;

/// What to start, and what it may do beyond a `bash` command's defaults.
#[derive(Clone, Debug, Default)]
pub struct ConfinedCommand {
    /// The program, found on the sandbox's `PATH` when it has no slash.
    pub program: String,
    pub args: Vec<String>,
    /// Variables set for it on top of the allow-listed environment (values as given,
    /// not read from the server's environment). `TMPDIR` cannot be set: it is the
    /// child's own temp directory, removed with the guard.
    pub env: Vec<(String, String)>,
    /// Whether it may open network sockets (see [`SandboxSettings::network`]); the
    /// `settings` passed to [`spawn_confined`] do not decide this.
    pub network: bool,
    /// Directories (or files) it may write besides the project. Each must exist and is
    /// refused when it is, holds or lies inside the data directory or a secret path.
    pub rw_paths: Vec<PathBuf>,
}

/// A started child: its pipes, and the guard that owns its life.
pub struct ConfinedChild {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
    pub guard: ConfinedGuard,
}

/// Owns a confined child: dropping it kills the child's process group (and namespace)
/// and removes its temp directory.
pub struct ConfinedGuard {
    // Declared first so it drops first: the group is killed while the child, unreaped
    // until `child` drops, still holds the group's id.
    group: ProcessGroup,
    child: Child,
    exit: Option<AsyncFd<OwnedFd>>,
    /// Held for the child's whole life: it owns the child's temp dir.
    _prepared: Prepared,
}

impl ConfinedGuard {
    /// The child's process id as the server sees it. Where the child runs in a PID
    /// namespace of its own, this is the process that waits for it there.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the child exits, kills what it left in its group, and says how it
    /// ended. A server that exits on its own is a crash to the caller.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        wait_and_sweep(&mut self.child, &self.group, self.exit.as_ref()).await
    }
}

/// Starts `command` confined to the project at `project` (absolute, as registered):
/// `settings` give the environment allow-list, Spool's own services that stay closed
/// and the secret paths; `data_dir` stays unreadable.
pub async fn spawn_confined(
    command: &ConfinedCommand,
    settings: &SandboxSettings,
    project: &Path,
    data_dir: Option<&Path>,
) -> Result<ConfinedChild, ToolError> {
    let settings = SandboxSettings { network: command.network, ..settings.clone() };
    let grants = Grants { env: command.env.clone(), rw_paths: command.rw_paths.clone() };
    let (project, data_dir) = (project.to_path_buf(), data_dir.map(Path::to_path_buf));
    let prepared = tokio::task::spawn_blocking(move || {
        // Tried once per process (it spawns a probe), so not on the async thread.
        crate::process::probe();
        // Opened with no link on the way: the write grant goes to this descriptor.
        let root = Root::open(&project, None)?;
        Prepared::with_grants(&settings, &root, data_dir.as_deref(), &grants)
    })
    .await
    .map_err(|e| ToolError::Internal(format!("preparing the sandbox failed: {e}")))??;

    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so one signal reaches everything it starts.
        .process_group(0)
        // A backstop for the child itself; `ProcessGroup` covers the rest.
        .kill_on_drop(true);
    // The namespace first: the sandbox's capability drop and Landlock come after it.
    crate::process::contain(&mut cmd);
    prepared.apply(&mut cmd);
    let mut child = cmd.spawn().map_err(ToolError::Spawn)?;
    let pid = child.id().expect("a child that has not been waited for has an id");
    let group = ProcessGroup::new(pid);
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let guard = ConfinedGuard { group, child, exit: exit_watch(pid), _prepared: prepared };
    Ok(ConfinedChild { stdin, stdout, stderr, guard })
}
