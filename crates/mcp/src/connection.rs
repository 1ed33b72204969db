//! One live connection to a stdio server: the sandboxed child (spawned with
//! [`spool_tools::spawn_confined`], confined to the session's project) and rmcp's
//! client over its (stdout, stdin) pair. The child's guard lives in a task that waits
//! for it to exit, so a crash is known (with its status and last stderr lines) as soon
//! as it happens; dropping the connection stops that task, and the guard kills the
//! server's process group.

use crate::handler::Handler;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool as McpToolInfo};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use spool_engine::ToolContext;
use spool_tools::{ConfinedCommand, SandboxSettings, spawn_confined};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

/// How many of the server's last stderr lines a crash report carries.
const STDERR_LINES: usize = 20;
/// How long `initialize` may take before the server counts as not answering.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a call that lost its pipe waits for the exit status to report it.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Why a call produced no result; the text is what the model reads.
#[derive(Debug)]
pub(crate) struct CallError(pub String);

pub(crate) struct Connection {
    service: RunningService<RoleClient, Handler>,
    handler: Handler,
    /// How the child ended, once it has.
    exit: watch::Receiver<Option<String>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The child's process id (see [`spool_tools::ConfinedGuard::id`]).
    pub(crate) pid: Option<u32>,
    _stop: DropGuard,
}

impl Connection {
    /// Spawns `command` confined to `project` and runs the `initialize` handshake;
    /// `handler` answers the server (see [`Handler`]).
    pub(crate) async fn start(
        handler: Handler,
        command: &ConfinedCommand,
        settings: &SandboxSettings,
        project: &Path,
        data_dir: Option<&Path>,
    ) -> Result<Connection, String> {
        let child = spawn_confined(command, settings, project, data_dir)
            .await
            .map_err(|e| format!("starting the server failed: {e}"))?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(keep_stderr(child.stderr, stderr.clone()));
        let (exit_tx, exit) = watch::channel(None);
        let stop = CancellationToken::new();
        let mut guard = child.guard;
        let pid = guard.id();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                tokio::select! {
                    status = guard.wait() => {
                        let text = match status {
                            Ok(status) => format!("the server exited ({status})"),
                            Err(e) => format!("the server was lost: {e}"),
                        };
                        let _ = exit_tx.send(Some(text));
                    }
                    () = stop.cancelled() => {}
                }
                // Dropped here in both cases: it kills what is left of the group.
                drop(guard);
            }
        });
        let serving = handler.clone().serve((child.stdout, child.stdin));
        let connection = |service| Connection {
            service,
            handler: handler.clone(),
            exit: exit.clone(),
            stderr: stderr.clone(),
            pid,
            _stop: stop.clone().drop_guard(),
        };
        match tokio::time::timeout(INITIALIZE_TIMEOUT, serving).await {
            Ok(Ok(service)) => Ok(connection(service)),
            Ok(Err(e)) => Err(format!("initialize failed: {e}{}", stderr_tail(&stderr))),
            Err(_) => Err(format!("initialize timed out{}", stderr_tail(&stderr))),
        }
    }

    /// How the server ended, with its last stderr lines, once it has.
    pub(crate) fn exited(&self) -> Option<String> {
        let exit = self.exit.borrow().clone()?;
        Some(format!("{exit}{}", stderr_tail(&self.stderr)))
    }

    /// Whether the server said its tools changed since the last listing; clears it.
    pub(crate) fn tools_changed(&self) -> bool {
        self.handler.take_stale()
    }

    /// Every tool the server offers, all pages followed.
    pub(crate) async fn list_tools(&self) -> Result<Vec<McpToolInfo>, String> {
        self.service.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))
    }

    /// Calls `tool`; the result as the protocol's JSON. While it runs, the server's
    /// progress becomes `ctx`'s live output and its elicitations are put to the person
    /// through `ctx.asker`. It fails after `timeout` without a sign of life: progress
    /// and answered asks restart the deadline, and it stands still while the person is
    /// being asked. Dropping the future (the run stopped, the deadline passed) sends
    /// `notifications/cancelled`.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: Value,
        timeout: Duration,
        ctx: &ToolContext,
    ) -> Result<Value, CallError> {
        let params: CallToolRequestParams =
            serde_json::from_value(serde_json::json!({"name": tool, "arguments": args}))
                .map_err(|e| CallError(format!("the arguments are not an object: {e}")))?;
        let scope = self.handler.begin_call(ctx.progress.clone(), ctx.asker.clone());
        let mut activity = scope.activity();
        let mut exit = self.exit.clone();
        let call = self.service.call_tool(params);
        tokio::pin!(call);
        let mut deadline = Instant::now() + timeout;
        let outcome = loop {
            let asking = activity.borrow_and_update().asking > 0;
            tokio::select! {
                outcome = &mut call => break outcome,
                // The pipe may close before the exit is seen; either way the exit says more.
                _ = exit.wait_for(Option::is_some) => return Err(CallError(self.exited().unwrap_or_default())),
                Ok(()) = activity.changed() => deadline = Instant::now() + timeout,
                () = tokio::time::sleep_until(deadline), if !asking => {
                    return Err(CallError(format!("the server did not answer within {} s", timeout.as_secs())));
                }
            }
        };
        match outcome {
            Ok(result) => serde_json::to_value(result).map_err(|e| CallError(e.to_string())),
            Err(e) => {
                let _ = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some)).await;
                Err(CallError(self.exited().unwrap_or_else(|| format!("tools/call failed: {e}"))))
            }
        }
    }
}

/// Keeps the last [`STDERR_LINES`] lines the server wrote to stderr.
async fn keep_stderr(stderr: tokio::process::ChildStderr, kept: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() == STDERR_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}

fn stderr_tail(kept: &Mutex<VecDeque<String>>) -> String {
    let kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if kept.is_empty() {
        return String::new();
    }
    format!("; its last stderr lines:\n{}", Vec::from(kept.clone()).join("\n"))
}
