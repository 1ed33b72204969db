//! A configured stdio server as a [`ToolSource`]: one connection per session, started
//! on the session's first turn and confined to its project. A server that exited is
//! started again at the next turn; a `tools/list_changed` makes the next turn list
//! again. Connections live as long as the source (closing idle ones and those of
//! unloaded sessions is later work, docs/plans/38-mcp.md §5.2).

use crate::config::{McpServerConfig, Transport};
use crate::connection::Connection;
use crate::handler::Handler;
use crate::tool::McpTool;
use async_trait::async_trait;
use spool_engine::{Tool, ToolScope, ToolSource};
use spool_tools::{ConfinedCommand, SandboxSettings};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub struct McpSource {
    config: McpServerConfig,
    command: ConfinedCommand,
    settings: SandboxSettings,
    data_dir: Option<PathBuf>,
    /// Per session. A std mutex around the map (no `.await` while held); each slot's
    /// own async mutex is held while its server starts, so a session starts one.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
}

#[derive(Default)]
struct Slot {
    connection: Option<Arc<Connection>>,
    /// The tools listed on `connection`; `None` until listed (again).
    tools: Option<Vec<Arc<dyn Tool>>>,
}

impl McpSource {
    /// A source for a stdio server; `None` for an HTTP one (not connected yet).
    /// `settings` and `data_dir` are the bash sandbox's.
    pub fn stdio(config: McpServerConfig, settings: SandboxSettings, data_dir: Option<PathBuf>) -> Option<McpSource> {
        let Transport::Stdio(stdio) = &config.transport else { return None };
        let command = ConfinedCommand {
            program: stdio.command.clone(),
            args: stdio.args.clone(),
            env: stdio.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            network: stdio.network,
            rw_paths: stdio.rw_paths.clone(),
        };
        Some(McpSource { config, command, settings, data_dir, sessions: Mutex::default() })
    }

    /// The process ids of this server's running instances, one per session that has
    /// one (tests and diagnostics; a slot busy starting or listing is left out).
    pub fn server_pids(&self) -> Vec<u32> {
        let sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slots = sessions.values().filter_map(|slot| slot.try_lock().ok().and_then(|s| s.connection.clone()));
        slots.filter(|c| c.exited().is_none()).filter_map(|c| c.pid).collect()
    }

    fn slot(&self, scope: &ToolScope) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.entry(scope.session_id.to_string()).or_default().clone()
    }
}

#[async_trait]
impl ToolSource for McpSource {
    fn name(&self) -> String {
        self.config.name.clone()
    }

    async fn tools(&self, scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
        let name = &self.config.name;
        let slot = self.slot(scope);
        let mut slot = slot.lock().await;
        if let Some(exit) = slot.connection.as_ref().and_then(|c| c.exited()) {
            tracing::warn!(server = %name, "MCP server ended; starting it again: {exit}");
            *slot = Slot::default();
        }
        let connection = match &slot.connection {
            Some(connection) => connection.clone(),
            None => {
                let handler = Handler::new(name, self.config.sampling);
                let (command, settings, data_dir) = (&self.command, &self.settings, self.data_dir.as_deref());
                let started = Connection::start(handler, command, settings, &scope.root, data_dir).await;
                match started {
                    Ok(connection) => {
                        let connection = Arc::new(connection);
                        *slot = Slot { connection: Some(connection.clone()), tools: None };
                        connection
                    }
                    Err(e) => {
                        tracing::warn!(server = %name, "MCP server not started: {e}");
                        return Vec::new();
                    }
                }
            }
        };
        if connection.tools_changed() {
            slot.tools = None;
        }
        if slot.tools.is_none() {
            match connection.list_tools().await {
                Ok(listed) => {
                    let timeout = self.config.call_timeout;
                    let trust = self.config.trust_read_only;
                    let tools = listed
                        .iter()
                        .map(|t| Arc::new(McpTool::new(name, t, trust, connection.clone(), timeout)) as Arc<dyn Tool>)
                        .collect();
                    slot.tools = Some(tools);
                }
                Err(e) => {
                    tracing::warn!(server = %name, "MCP server's tools not listed: {e}");
                    return Vec::new();
                }
            }
        }
        slot.tools.clone().unwrap_or_default()
    }
}
