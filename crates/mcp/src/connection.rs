//! One live connection to a server. To a stdio server: the sandboxed child (spawned
//! with [`spool_tools::spawn_confined`], confined to the session's project) and rmcp's
//! client over its (stdout, stdin) pair. The child's guard lives in a task that waits
//! for it to exit, so a crash is known (with its status and last stderr lines) as soon
//! as it happens; dropping the connection stops that task, and the guard kills the
//! server's process group. To a Streamable HTTP server: rmcp's client over its HTTP
//! transport (set up in [`crate::http`]), with no child, and an end known when rmcp's
//! service loop stops (the transport gave up on the server).

use crate::config::HttpServer;
use crate::handler::Handler;
use crate::http;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool as McpToolInfo};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
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
use tokio_util::sync::CancellationToken;

/// How many of the server's last stderr lines a crash report carries.
const STDERR_LINES: usize = 20;
/// How long `initialize` may take before the server counts as not answering: less than
/// the turn's wait for tools (`spool_engine::tool_source::SOURCE_WAIT`, 30 s), so the
/// turn that started it still hears why it failed.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(20);
/// A connection's end when Spool closed it (idle, or its tools could not be listed).
const CLOSED: &str = "the connection to the server was closed";
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
    /// Why an HTTP connection counts as ended: a call could not reach the server.
    lost: Mutex<Option<String>>,
    /// What an HTTP server's errors must not show (its token, its URL's query).
    scrub: Option<http::Scrub>,
    /// The child's process id (see [`spool_tools::ConfinedGuard::id`]); `None` over HTTP.
    pub(crate) pid: Option<u32>,
    /// Cancelled on [`Connection::close`] or drop: ends the child's task, whose guard
    /// then kills the server's process group.
    stop: CancellationToken,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stop.cancel();
    }
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
                    () = stop.cancelled() => {
                        // A call still waiting on the server hears why it stopped.
                        let _ = exit_tx.send(Some(CLOSED.to_owned()));
                    }
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
            lost: Mutex::default(),
            scrub: None,
            pid,
            stop: stop.clone(),
        };
        match tokio::time::timeout(INITIALIZE_TIMEOUT, serving).await {
            Ok(Ok(service)) => Ok(connection(service)),
            Ok(Err(e)) => {
                // A server that exits at once closes its pipe before the exit is seen;
                // its exit status says more than the closed pipe does.
                let mut exit = exit.clone();
                let _ = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some)).await;
                let exited = exit.borrow().clone().map(|exit| format!(" ({exit})")).unwrap_or_default();
                Err(format!("initialize failed: {e}{exited}{}", stderr_tail(&stderr)))
            }
            Err(_) => Err(format!("initialize timed out{}", stderr_tail(&stderr))),
        }
    }

    /// Connects to a Streamable HTTP server and runs the `initialize` handshake. The
    /// bearer token is read now; no error carries it.
    pub(crate) async fn start_http(handler: Handler, server: &HttpServer) -> Result<Connection, String> {
        // rmcp's reqwest client panics when built with no TLS provider installed; the
        // binary installs one at start, and this makes sure of it for any other caller.
        crate::install_crypto_provider();
        let (config, token) = http::transport_config(server)?;
        let transport = StreamableHttpClientTransport::from_config(config);
        let serving = handler.clone().serve(transport);
        let service = match tokio::time::timeout(INITIALIZE_TIMEOUT, serving).await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => return Err(http::Scrub::new(server, token).apply(format!("initialize failed: {e}"))),
            Err(_) => return Err("initialize timed out".into()),
        };
        // No child: the exit is known only when Spool closes the connection; `exited`
        // also watches the service, which ends when the transport gives up. The sender
        // must live as long as the connection: a call takes a closed channel for an exit.
        let (exit_tx, exit) = watch::channel(None);
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                stop.cancelled().await;
                let _ = exit_tx.send(Some(CLOSED.to_owned()));
            }
        });
        let scrub = Some(http::Scrub::new(server, token));
        Ok(Connection {
            service,
            handler,
            exit,
            stderr: Arc::default(),
            lost: Mutex::default(),
            scrub,
            pid: None,
            stop,
        })
    }

    /// How the server ended, with its last stderr lines, once it has.
    pub(crate) fn exited(&self) -> Option<String> {
        let Some(exit) = self.exit.borrow().clone() else {
            let lost = self.lost.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            // Over HTTP (or a pipe closed before the exit is seen): rmcp's loop ended.
            let closed =
                || self.service.is_transport_closed().then(|| "the connection to the server closed".to_owned());
            return lost.or_else(closed);
        };
        Some(format!("{exit}{}", stderr_tail(&self.stderr)))
    }

    /// Ends the connection now, though tools listed on it may still hold it: the
    /// server's process group is killed (stdio) or its session dropped (HTTP), and a
    /// later call on it fails.
    pub(crate) fn close(&self) {
        self.stop.cancel();
        self.service.cancellation_token().cancel();
    }

    /// Whether a call is in flight on it: a connection is idle only without one.
    pub(crate) fn busy(&self) -> bool {
        self.handler.busy()
    }

    /// Whether the server said its tools changed since the last listing; clears it.
    pub(crate) fn tools_changed(&self) -> bool {
        self.handler.take_stale()
    }

    /// Every tool the server offers, all pages followed.
    pub(crate) async fn list_tools(&self) -> Result<Vec<McpToolInfo>, String> {
        self.service.list_all_tools().await.map_err(|e| self.scrubbed(format!("tools/list failed: {e}")))
    }

    /// `text` without what an HTTP server's errors must not show (its token, its URL's
    /// query); stdio errors as they are.
    pub(crate) fn scrubbed(&self, text: String) -> String {
        match &self.scrub {
            Some(scrub) => scrub.apply(text),
            None => text,
        }
    }

    /// Calls `tool`; the result as the protocol's JSON. While it runs, the server's
    /// progress becomes `ctx`'s live output and its elicitations are put to the person
    /// through `ctx.asker`. It fails after `timeout` without a sign of life: progress
    /// and answered asks restart the deadline, and it stands still while the person is
    /// being asked. Dropping the future (the run stopped, the deadline passed) sends
    /// `notifications/cancelled`. Errors are the server's or the transport's words;
    /// an HTTP server's go through [`Connection::scrubbed`] before anyone reads them.
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
        let scope = self.handler.begin_call(ctx.progress.clone(), ctx.asker.clone(), ctx.sampler.clone());
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
                if self.pid.is_none() && matches!(e, ServiceError::TransportSend(_) | ServiceError::TransportClosed) {
                    // An HTTP server that cannot be reached: no exit will come. The
                    // connection counts as ended, and the next turn connects again.
                    let reason = self.scrubbed(format!("the server could not be reached: {e}"));
                    *self.lost.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason.clone());
                    return Err(CallError(reason));
                }
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
