//! A configured server as a [`ToolSource`]: one connection per session, started on the
//! session's first turn (a stdio server confined to the session's project), listed
//! again after a `tools/list_changed`, closed after [`Lifecycle::idle_close`] without a
//! turn or a call.
//!
//! HTTP servers get a connection per session too, though no process is at stake:
//! the handler sends a server's progress and elicitations to the call in flight on
//! its connection, which is exact only while a connection serves one session (one
//! call at a time); and an HTTP server keeps per-connection state (its MCP session)
//! that one Spool session should not see another's of.
//!
//! A start runs in a task of its own, so that a turn that stops waiting for tools
//! (`SOURCE_WAIT`) does not cancel it: its outcome is recorded either way. Failures
//! (a start that failed, a connection that ended by itself: a stdio server that
//! exited, an HTTP one a call could not reach) go to [`Health`], which
//! pushes the next start back and gives a broken server up; meanwhile turns are
//! answered at once with no tools, instead of each waiting on another start.

use crate::config::{HttpServer, McpServerConfig, Transport};
use crate::connection::Connection;
use crate::handler::Handler;
use crate::health::{Gate, Health, Lifecycle};
use crate::http::shown_url;
use crate::tool::McpTool;
use async_trait::async_trait;
use spool_engine::{SourceState, SourceStatus, SourceTool, Tool, ToolScope, ToolSource};
use spool_tools::{ConfinedCommand, SandboxSettings};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// How long a `tools/list` may take before the connection counts as broken.
const LIST_TIMEOUT: Duration = Duration::from_secs(20);
/// After a single failure (a crash of a server that was running) a turn waits for the
/// restart when it is due this soon, rather than go without the server's tools: the
/// next turn gets them a second later, not a turn later. After more failures in a row
/// turns do not wait.
const RESTART_WAIT: Duration = Duration::from_secs(2);
/// The longest pause between two looks for idle and ended connections.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

pub struct McpSource {
    shared: Arc<Shared>,
    /// Set once the sweeping task runs (started by the first turn: a runtime is
    /// certain to be there then, not when the source is built).
    sweeper: OnceLock<()>,
}

struct Shared {
    config: McpServerConfig,
    start: Start,
    lifecycle: Lifecycle,
    /// A std mutex: never held across an `.await`.
    state: Mutex<State>,
}

/// How a connection is made.
enum Start {
    Stdio { command: ConfinedCommand, settings: SandboxSettings, data_dir: Option<PathBuf> },
    Http(HttpServer),
}

#[derive(Default)]
struct State {
    /// By session id.
    sessions: HashMap<String, Slot>,
    health: Health,
    /// The most recent listing on any session, for status.
    listed: Vec<SourceTool>,
}

enum Slot {
    /// A start in flight. Its task replaces or removes the slot and then drops the
    /// sender, which wakes those waiting here.
    Starting(watch::Receiver<()>),
    Live(Live),
}

struct Live {
    connection: Arc<Connection>,
    /// The tools listed on `connection`; `None` until listed again.
    tools: Option<Vec<Arc<dyn Tool>>>,
    /// The last turn, or the last sweep that found a call in flight.
    last_used: Instant,
}

/// What a turn does after looking at its slot (the lock released).
enum Next {
    Wait(watch::Receiver<()>),
    Sleep(Instant),
    List(Arc<Connection>),
}

impl McpSource {
    /// A source for `config`'s server, stdio or HTTP. `settings` and `data_dir` are the
    /// bash sandbox's; a stdio server runs in it.
    pub fn new(config: McpServerConfig, settings: SandboxSettings, data_dir: Option<PathBuf>) -> McpSource {
        let start = match &config.transport {
            Transport::Stdio(stdio) => Start::Stdio {
                command: ConfinedCommand {
                    program: stdio.command.clone(),
                    args: stdio.args.clone(),
                    env: stdio.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    network: stdio.network,
                    rw_paths: stdio.rw_paths.clone(),
                },
                settings,
                data_dir,
            },
            Transport::Http(http) => Start::Http(http.clone()),
        };
        let shared = Shared { config, start, lifecycle: Lifecycle::default(), state: Mutex::default() };
        McpSource { shared: Arc::new(shared), sweeper: OnceLock::new() }
    }

    /// A source for a stdio server; `None` for an HTTP one.
    pub fn stdio(config: McpServerConfig, settings: SandboxSettings, data_dir: Option<PathBuf>) -> Option<McpSource> {
        matches!(config.transport, Transport::Stdio(_)).then(|| McpSource::new(config, settings, data_dir))
    }

    /// This source with other timings (tests shorten them).
    pub fn with_lifecycle(self, lifecycle: Lifecycle) -> McpSource {
        let shared = Arc::into_inner(self.shared).expect("set before the source is used");
        McpSource { shared: Arc::new(Shared { lifecycle, ..shared }), sweeper: OnceLock::new() }
    }

    /// The process ids of this server's running instances, one per session that has
    /// one (tests and diagnostics).
    pub fn server_pids(&self) -> Vec<u32> {
        let state = self.shared.lock();
        let live = state.sessions.values().filter_map(|slot| match slot {
            Slot::Live(live) if live.connection.exited().is_none() => live.connection.pid,
            _ => None,
        });
        live.collect()
    }

    fn sweep_in_background(&self) {
        self.sweeper.get_or_init(|| {
            let every = (self.shared.lifecycle.idle_close / 4).min(SWEEP_EVERY);
            tokio::spawn(sweep(Arc::downgrade(&self.shared), every));
        });
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts `session`'s connection and lists its tools, then records the outcome;
    /// dropping `done` afterwards wakes the turns waiting for it. The start runs in a
    /// task of its own so that a panic in it (rmcp's, say) is recorded as a failure
    /// too, not left as a start that never ends.
    async fn connect(self: Arc<Self>, session: String, root: PathBuf, done: watch::Sender<()>) {
        let listed = match tokio::spawn(self.clone().start_and_list(root)).await {
            Ok(listed) => listed,
            Err(e) => Err(format!("the start failed: {e}")),
        };
        let now = Instant::now();
        let mut state = self.lock();
        match listed {
            Ok((connection, tools)) => {
                state.health.up(now);
                let live = Live { connection, tools: Some(tools), last_used: now };
                state.sessions.insert(session, Slot::Live(live));
            }
            Err(reason) => {
                tracing::warn!(server = %self.config.name, "MCP server not started: {reason}");
                state.sessions.remove(&session);
                state.health.failed(reason, now, &self.lifecycle);
            }
        }
        drop(state);
        drop(done);
    }

    async fn start_and_list(self: Arc<Self>, root: PathBuf) -> Result<(Arc<Connection>, Vec<Arc<dyn Tool>>), String> {
        let handler = Handler::new(&self.config.name, self.config.sampling);
        let started = match &self.start {
            Start::Stdio { command, settings, data_dir } => {
                Connection::start(handler, command, settings, &root, data_dir.as_deref()).await
            }
            Start::Http(server) => Connection::start_http(handler, server).await,
        };
        let connection = Arc::new(started?);
        let tools = self.list(&connection).await?;
        Ok((connection, tools))
    }

    /// Every tool `connection` offers, as Spool tools; the listing is kept for status.
    async fn list(&self, connection: &Arc<Connection>) -> Result<Vec<Arc<dyn Tool>>, String> {
        let listed = match tokio::time::timeout(LIST_TIMEOUT, connection.list_tools()).await {
            Ok(listed) => listed?,
            Err(_) => return Err(format!("tools/list got no answer within {} s", LIST_TIMEOUT.as_secs())),
        };
        let (name, trust, timeout) = (&self.config.name, self.config.trust_read_only, self.config.call_timeout);
        let tools: Vec<McpTool> =
            listed.iter().map(|t| McpTool::new(name, t, trust, connection.clone(), timeout)).collect();
        self.lock().listed = tools
            .iter()
            .map(|t| SourceTool {
                name: t.spec.name.clone(),
                description: t.spec.description.clone(),
                read_only: t.origin.read_only,
            })
            .collect();
        Ok(tools.into_iter().map(|t| Arc::new(t) as Arc<dyn Tool>).collect())
    }

    /// What the status shows as the server's address.
    fn target(&self) -> (&'static str, String) {
        match &self.start {
            Start::Stdio { command, .. } => {
                let words = std::iter::once(&command.program).chain(&command.args);
                let shown: Vec<String> =
                    words.map(|w| if w.contains(' ') || w.is_empty() { format!("{w:?}") } else { w.clone() }).collect();
                ("stdio", shown.join(" "))
            }
            Start::Http(server) => ("http", shown_url(&server.url)),
        }
    }
}

/// Every `every`, closes the connections idle for the source's `idle_close` and notes
/// those that ended by themselves (so status shows a crash before the next turn
/// does). Ends with the source.
async fn sweep(shared: Weak<Shared>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else { return };
        let now = Instant::now();
        let mut closed = Vec::new();
        let mut state = shared.lock();
        let State { sessions, health, .. } = &mut *state;
        sessions.retain(|session, slot| {
            let Slot::Live(live) = slot else { return true };
            if let Some(exit) = live.connection.exited() {
                tracing::warn!(server = %shared.config.name, "MCP server ended: {exit}");
                health.failed(exit, now, &shared.lifecycle);
                return false;
            }
            if live.connection.busy() {
                live.last_used = now;
            }
            let idle = now.duration_since(live.last_used) >= shared.lifecycle.idle_close;
            if idle {
                tracing::info!(server = %shared.config.name, %session, "closing an idle MCP connection");
                closed.push(live.connection.clone());
            }
            !idle
        });
        health.settle(now);
        drop(state);
        // Closed, not just dropped: a parked run's turn may still hold its tools.
        for connection in closed {
            connection.close();
        }
    }
}

#[async_trait]
impl ToolSource for McpSource {
    fn name(&self) -> String {
        self.shared.config.name.clone()
    }

    fn serves(&self, scope: &ToolScope) -> bool {
        self.shared.config.serves_project(&scope.root)
    }

    async fn tools(&self, scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
        self.sweep_in_background();
        let shared = &self.shared;
        let session = scope.session_id.to_string();
        // One start per turn at most: a failed one leaves the next to a later turn.
        let mut started = false;
        loop {
            let now = Instant::now();
            let next = {
                let mut state = shared.lock();
                let State { sessions, health, .. } = &mut *state;
                match sessions.get_mut(&session) {
                    Some(Slot::Live(live)) => {
                        if let Some(exit) = live.connection.exited() {
                            tracing::warn!(server = %shared.config.name, "MCP server ended; starting it again: {exit}");
                            sessions.remove(&session);
                            health.failed(exit, now, &shared.lifecycle);
                            continue;
                        }
                        live.last_used = now;
                        health.settle(now);
                        if live.connection.tools_changed() {
                            live.tools = None;
                        }
                        match &live.tools {
                            Some(tools) => return tools.clone(),
                            None => Next::List(live.connection.clone()),
                        }
                    }
                    // A start whose task is gone without a word cannot happen (its
                    // outcome is recorded before it lets go); were it to, spinning
                    // here would be worse than starting again.
                    Some(Slot::Starting(done)) if done.has_changed().is_err() => {
                        sessions.remove(&session);
                        continue;
                    }
                    Some(Slot::Starting(done)) => Next::Wait(done.clone()),
                    None if started => return Vec::new(),
                    None => match health.gate(now) {
                        Gate::Open => {
                            let (done, waiting) = watch::channel(());
                            sessions.insert(session.clone(), Slot::Starting(waiting.clone()));
                            tokio::spawn(shared.clone().connect(session.clone(), scope.root.clone(), done));
                            started = true;
                            Next::Wait(waiting)
                        }
                        Gate::Wait(at) if health.streak() == 1 && at.duration_since(now) <= RESTART_WAIT => {
                            Next::Sleep(at)
                        }
                        Gate::Wait(_) | Gate::GivenUp => return Vec::new(),
                    },
                }
            };
            match next {
                // Nothing is ever sent: this returns (Err) once the start's task dropped
                // its sender, its outcome recorded.
                Next::Wait(mut done) => {
                    let _ = done.changed().await;
                }
                Next::Sleep(at) => tokio::time::sleep_until(at).await,
                Next::List(connection) => {
                    let listed = shared.list(&connection).await;
                    let mut state = shared.lock();
                    let State { sessions, health, .. } = &mut *state;
                    let Some(Slot::Live(live)) = sessions.get_mut(&session) else { continue };
                    if !Arc::ptr_eq(&live.connection, &connection) {
                        continue;
                    }
                    match listed {
                        Ok(tools) => live.tools = Some(tools),
                        Err(reason) => {
                            tracing::warn!(server = %shared.config.name, "MCP server's tools not listed: {reason}");
                            sessions.remove(&session);
                            connection.close();
                            health.failed(reason, Instant::now(), &shared.lifecycle);
                            return Vec::new();
                        }
                    }
                }
            }
        }
    }

    fn retry(&self) -> bool {
        self.shared.lock().health.forgive()
    }

    fn status(&self) -> Option<SourceStatus> {
        let shared = &self.shared;
        let (transport, target) = shared.target();
        let state = shared.lock();
        let live = state.sessions.values().filter(|s| matches!(s, Slot::Live(l) if l.connection.exited().is_none()));
        let connections = live.count();
        let starting = state.sessions.values().any(|s| matches!(s, Slot::Starting(_)));
        let source_state = match state.health.failure() {
            _ if connections > 0 => SourceState::Ready,
            _ if starting => SourceState::Starting,
            Some((reason, retry_at)) => SourceState::Failed { reason, retry_at_ms: retry_at.map(unix_ms) },
            None => SourceState::Idle,
        };
        Some(SourceStatus {
            name: shared.config.name.clone(),
            transport: transport.into(),
            target,
            state: source_state,
            tools: state.listed.clone(),
            connections,
        })
    }
}

/// `at` as milliseconds since the Unix epoch (what the API's clients read).
fn unix_ms(at: Instant) -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let ahead = at.saturating_duration_since(Instant::now());
    i64::try_from((since_epoch + ahead).as_millis()).unwrap_or(i64::MAX)
}
