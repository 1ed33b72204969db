//! The `bash` tool: run a shell command in the project directory and return what it
//! printed and how it exited.
//!
//! The command runs as `bash -c` (`sh -c` where bash is missing) with the project as
//! its working directory and `/dev/null` as stdin, so a command waiting for input ends
//! instead of hanging. A call's processes end with the call, background ones included
//! (`sleep 100 &`, `setsid nohup … &`, a double fork): the command is PID 1 of a PID
//! namespace of its own where the machine allows it ([`crate::process`]), and its own
//! process group everywhere. A timeout or an aborted run kills the group with
//! SIGKILL, which takes the namespace down with PID 1; when the shell exits on its
//! own, the kernel ends the rest of the namespace and the server kills whatever is
//! left in the group. Dropping the call mid-command does the same, so a run torn down
//! without cancelling its token does not leak processes. Something meant to outlive
//! the call (a dev server) has no place in a tool call: it would run unwatched.
//!
//! Output is read for a short grace period after the exit and then abandoned, so a
//! process that still holds the output pipe (possible only without the namespace)
//! cannot keep the call open.
//!
//! stdout and stderr are read concurrently into one buffer, in the order they arrive:
//! reading one after the other would deadlock on a command that fills the other pipe.
//! At most [`HEAD_BYTES`] of the start and [`TAIL_BYTES`] of the end are kept, with a
//! note saying how much was left out between them, since the end of a build log is
//! usually where the error is.
//!
//! Every read is also reported to the call's `ToolContext::progress` as it arrives, so
//! the run streams the output live (coalesced and capped there); the result above is
//! what the model reads.

use crate::call::parse_args;
use crate::error::ToolError;
use crate::path::PathError;
use crate::sandbox::{Prepared, SandboxSettings};
use crate::shell::command_subject;
use async_trait::async_trait;
use serde::Deserialize;
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use spool_protocol::CallSubject;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

mod output;
mod spawn;
#[cfg(test)]
pub(crate) mod tests;

use crate::process::{ProcessGroup, exit_watch, wait_and_sweep};
use output::Output;
use spawn::spawn;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "bash";
/// Seconds a command may run when the call gives no `timeout`.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// The longest `timeout` a call may ask for; longer work belongs in a background process.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 600;
/// Bytes kept from the start of the output.
pub(crate) const HEAD_BYTES: usize = 25 * 1024;
/// Bytes kept from the end of the output.
pub(crate) const TAIL_BYTES: usize = 25 * 1024;
/// How long output is still read after the shell has exited, for what its last
/// processes were still writing.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for a killed shell to be reaped. SIGKILL cannot be caught, but a
/// process stuck in the kernel (a dead NFS mount) only dies once it leaves it.
const REAP_WAIT: Duration = Duration::from_secs(5);
/// Size of each read from the pipes.
const READ_CHUNK: usize = 8 * 1024;

/// Runs a shell command in the project directory, inside the sandbox its settings say.
#[derive(Clone, Debug, Default)]
pub struct Bash {
    sandbox: SandboxSettings,
}

impl Bash {
    pub fn new(sandbox: SandboxSettings) -> Self {
        Self { sandbox }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    timeout: Option<u64>,
}

#[async_trait]
impl Tool for Bash {
    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument("bash", args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change("bash", args)
    }

    /// Each simple command of the line, so an allow rule must cover every one.
    fn subject(&self, args: &serde_json::Value) -> CallSubject {
        match crate::main_argument("bash", args) {
            Some(command) => command_subject(&command),
            None => CallSubject::single(None),
        }
    }

    /// The exact command, or the prefixes of the programs it runs: never all of bash.
    fn always_options(&self, args: &serde_json::Value) -> Option<Vec<spool_protocol::AlwaysOption>> {
        crate::main_argument("bash", args).map(|command| crate::shell::always_options(&command))
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: format!(
                "Run a shell command with bash in the project directory and return its exit code and \
                 output (stdout and stderr together; stdin is empty). The command is killed, with every \
                 process it started, after `timeout` seconds. Output over {} KiB keeps its start and \
                 its end with a note of what was left out.",
                (HEAD_BYTES + TAIL_BYTES) / 1024
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The command line, run with `bash -c`."
                    },
                    "timeout": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TIMEOUT_SECS,
                        "description": format!("Seconds before the command is killed. Defaults to {DEFAULT_TIMEOUT_SECS}.")
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: BashArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
        let reason = if args.command.trim().is_empty() {
            Some("command must not be empty".to_owned())
        } else if !(1..=MAX_TIMEOUT_SECS).contains(&timeout) {
            Some(format!("timeout must be between 1 and {MAX_TIMEOUT_SECS} seconds, got {timeout}"))
        } else {
            None
        };
        if let Some(reason) = reason {
            return ToolError::BadArguments { tool: NAME, reason }.into();
        }
        run(&self.sandbox, ctx, &args.command, timeout).await.unwrap_or_else(ToolOutput::from)
    }
}

async fn run(
    sandbox: &SandboxSettings,
    ctx: &ToolContext,
    command: &str,
    timeout_secs: u64,
) -> Result<ToolOutput, ToolError> {
    let (root, cancel) = (ctx.root.as_path(), &ctx.cancel);
    // Checked first because a missing working directory makes spawning fail with
    // "not found", which would otherwise read as a missing shell.
    tokio::fs::metadata(root).await.map_err(PathError::Root)?;
    // Held to the end of the call: dropping it removes the call's temp dir.
    let prepared = {
        let (sandbox, scope) = (sandbox.clone(), crate::path::Scope::of(ctx));
        tokio::task::spawn_blocking(move || {
            // Tried once per process (it spawns a probe), so not on the async thread.
            crate::process::probe();
            // The project directory as registered, opened with no link on the way; the
            // sandbox grants writes on that descriptor (a root swapped for a link to the
            // data directory is refused here, not followed).
            let root = scope.open()?;
            Prepared::new(&sandbox, &root, scope.data_dir())
        })
        .await
        .map_err(|e| ToolError::Internal(format!("preparing the sandbox failed: {e}")))??
    };
    let mut child = spawn(command, &prepared)?;
    let pid = child.id().expect("a child that has not been waited for has an id");
    let group = ProcessGroup::new(pid);
    let exit = exit_watch(pid);
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");

    let mut output = Output::default();
    let (mut out_buf, mut err_buf) = ([0u8; READ_CHUNK], [0u8; READ_CHUNK]);
    let (mut out_open, mut err_open) = (true, true);
    let deadline = tokio::time::sleep(Duration::from_secs(timeout_secs));
    // Armed when the shell exits; until then it is never polled.
    let grace = tokio::time::sleep(EXIT_GRACE);
    let wait = wait_and_sweep(&mut child, &group, exit.as_ref());
    tokio::pin!(deadline, grace, wait);
    let mut status: Option<ExitStatus> = None;

    while status.is_none() || out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buf), if out_open => match read {
                Ok(n) if n > 0 => {
                    ctx.progress.report(&out_buf[..n]);
                    output.push(&out_buf[..n]);
                }
                // EOF, or a read error that will not get better on retry.
                _ => out_open = false,
            },
            read = stderr.read(&mut err_buf), if err_open => match read {
                Ok(n) if n > 0 => {
                    ctx.progress.report(&err_buf[..n]);
                    output.push(&err_buf[..n]);
                }
                _ => err_open = false,
            },
            exited = &mut wait, if status.is_none() => match exited {
                Ok(exit) => {
                    status = Some(exit);
                    grace.as_mut().reset(Instant::now() + EXIT_GRACE);
                }
                // Still armed, so returning kills the group: nothing runs on unwatched.
                Err(err) => return Err(ToolError::Internal(format!("cannot wait for the shell: {err}"))),
            },
            () = &mut grace, if status.is_some() => break,
            () = &mut deadline, if status.is_none() => {
                group.kill();
                let _ = tokio::time::timeout(REAP_WAIT, &mut wait).await;
                return Err(ToolError::TimedOut { seconds: timeout_secs, output: output.render() });
            }
            () = cancel.cancelled(), if status.is_none() => {
                group.kill();
                let _ = tokio::time::timeout(REAP_WAIT, &mut wait).await;
                return Err(ToolError::Aborted);
            }
        }
    }

    let status = status.expect("the loop ends only after the shell exited");
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exit status unknown".to_owned(),
    };
    let text = format!("{how}\n{}", output.render());
    Ok(if status.success() { ToolOutput::ok(text) } else { ToolOutput::error(text) })
}
