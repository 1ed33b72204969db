//! Starting the command: the shell spawned in its own process group (and PID namespace,
//! where the machine allows). Ending everything it started, at exit, on timeout or
//! abort, or when the call is dropped, is [`crate::process`]'s (see the module doc of
//! `bash`).

use crate::error::ToolError;
use crate::sandbox::Prepared;
use std::io;
use std::process::Stdio;
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
