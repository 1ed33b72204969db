//! What the MCP and tool-source tests share. The real servers they run are found
//! through variables scripts/test sets: a test without its server says "SKIPPED" and
//! returns, except under CI, where a missing server is a broken setup and fails. An
//! `[[mcp]]` entry is written as the JSON of its config.toml table and checked as
//! config.toml's are. [`Offered`] notes which tools the model was offered each turn.

use crate::common::{self, ModelsOverride, TestOptions, TestServer, ToolsOverride};
use async_trait::async_trait;
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Model, ModelError, ModelRequest, ModelStream, Models, ToolSource};
use spool_mcp::{McpEntry, McpServerConfig, McpSource};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The path `var` holds, or `None` when it is unset outside CI (the caller returns:
/// skipped). `hint` says how to install the server and what to point `var` at.
pub(crate) fn server_path(var: &str, hint: &str) -> Option<String> {
    if let Ok(path) = std::env::var(var) {
        return Some(path);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(!in_ci, "{var} is unset in CI: scripts/test sets it ({hint})");
    eprintln!("SKIPPED: {var} is unset ({hint})");
    None
}

/// `@modelcontextprotocol/server-everything`'s `dist/index.js`.
pub(crate) fn everything() -> Option<String> {
    server_path(
        "SPOOL_TEST_MCP_EVERYTHING",
        "run `npm ci` in tests/mcp and point it at \
         tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    )
}

/// The `[[mcp]]` entry `everything`: server-everything at `index`, over stdio.
pub(crate) fn everything_entry(index: &str) -> Value {
    json!({"name": "everything", "command": "node", "args": [index, "stdio"]})
}

/// `entry`, checked.
pub(crate) fn config(entry: Value) -> McpServerConfig {
    let entry: McpEntry = serde_json::from_value(entry).expect("entry");
    spool_mcp::servers(vec![entry]).expect("checked").remove(0)
}

/// A source for the stdio server of `entry`, sandboxed with the default settings and
/// no data directory to hide.
pub(crate) fn stdio_source(entry: Value) -> Arc<McpSource> {
    Arc::new(McpSource::stdio(config(entry), Default::default(), None).expect("a stdio server"))
}

/// `options` with the workspace's tools and `source`'s.
pub(crate) fn offering(source: Arc<dyn ToolSource>, options: TestOptions) -> TestOptions {
    let tools = spool_tools::workspace_tools().with_source(source);
    TestOptions { tools: Some(ToolsOverride(tools)), ..options }
}

/// A Spool server offering the workspace's tools and `source`'s, and a new session.
pub(crate) async fn serve(source: Arc<dyn ToolSource>) -> (TestServer, String) {
    let server = TestServer::start_with(offering(source, TestOptions::default())).await;
    let session = server.new_session().await;
    (server, session)
}

/// Lets `session` call the tools `pattern` matches without asking.
pub(crate) async fn allow(server: &TestServer, session: &str, pattern: &str) {
    let rules = json!({"permissions": [{"tool": pattern, "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), rules).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Answers a parked call's approval with `decision` (`once`, `reject`, ...).
pub(crate) async fn decide(server: &TestServer, session: &str, approval: &Value, decision: &str) {
    let path = format!("/api/sessions/{session}/approvals/{}", common::id_of(approval));
    let (status, body) = server.post(&path, json!({"decision": decision})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// `script`, a small server of a test's own, written to a file in a directory that is
/// removed when the returned guard drops.
pub(crate) fn script_file(script: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("server.js");
    std::fs::write(&path, script).expect("script");
    (dir, path)
}

/// The names of the tools each model request offered, in order.
#[derive(Clone, Default)]
pub(crate) struct Offered(Arc<Mutex<Vec<Vec<String>>>>);

impl Offered {
    /// `options` with the workspace's tools and `sources`', and a scripted model that
    /// notes here what each request offered.
    pub(crate) fn options(&self, sources: Vec<Arc<dyn ToolSource>>, options: TestOptions) -> TestOptions {
        let tools = sources.into_iter().fold(spool_tools::workspace_tools(), |tools, s| tools.with_source(s));
        let model = Recording { inner: Default::default(), offered: self.clone() };
        let models = Models::new(Arc::new(model));
        TestOptions { tools: Some(ToolsOverride(tools)), models: Some(ModelsOverride(models)), ..options }
    }

    /// Whether any request offered `tool`.
    pub(crate) fn ever(&self, tool: &str) -> bool {
        self.0.lock().expect("offered").iter().any(|tools| tools.iter().any(|t| t == tool))
    }

    /// Whether the most recent turn offered `tool` (a request with no tools at all is
    /// a title being written, not a turn).
    pub(crate) fn last_turn(&self, tool: &str) -> bool {
        let offered = self.0.lock().expect("offered");
        let turn = offered.iter().rev().find(|tools| !tools.is_empty()).expect("a turn");
        turn.iter().any(|t| t == tool)
    }
}

/// The scripted model, noting into `offered` what each request offered.
struct Recording {
    inner: spool_model::ScriptedModel,
    offered: Offered,
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let names = request.tools.iter().map(|t| t.name.clone()).collect();
        self.offered.0.lock().expect("offered").push(names);
        self.inner.stream(request).await
    }
}
