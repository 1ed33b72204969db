//! `GET /api/mcp` and `PUT /api/sessions/{id}/mcp/{server}` through a real server: every
//! configured tool source is listed with its state (a failure with its reason) and its
//! tools, and, for a session, whether that session is offered it; a person turning a
//! server off for one session means that session's next turn is not offered its tools
//! (a call to one is an unknown tool) while other sessions still are; turning it back
//! on offers them again, and the choice outlives a restart. A server's secrets (a
//! bearer token, a header's value) never appear.

use crate::common;

use crate::mcp_support::{Offered, allow};
use async_trait::async_trait;
use common::{TestOptions, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{
    SourceState, SourceStatus, SourceTool, Tool, ToolContext, ToolOutput, ToolScope, ToolSource, ToolSpec,
};
use std::path::PathBuf;
use std::sync::Arc;

/// A server's one tool: it answers with its arguments.
struct Echo(&'static str);

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: self.0.into(), description: "echoes".into(), parameters: json!({"type": "object"}) }
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        ToolOutput::ok(format!("{} ran with {args}", self.0))
    }
}

/// A source that reports `state`, offers `tool`, and serves only `projects` when set.
struct Fake {
    name: &'static str,
    tool: &'static str,
    state: SourceState,
    projects: Option<Vec<PathBuf>>,
}

#[async_trait]
impl ToolSource for Fake {
    fn name(&self) -> String {
        self.name.into()
    }

    async fn tools(&self, _scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Echo(self.tool))]
    }

    fn serves(&self, scope: &ToolScope) -> bool {
        self.projects.as_ref().is_none_or(|p| p.contains(&scope.root))
    }

    fn status(&self) -> Option<SourceStatus> {
        Some(SourceStatus {
            name: self.name.into(),
            transport: "stdio".into(),
            target: format!("node {}.js", self.name),
            state: self.state.clone(),
            tools: vec![SourceTool { name: self.tool.into(), description: "echoes".into(), read_only: true }],
            connections: 1,
        })
    }
}

struct Setup {
    server: TestServer,
    offered: Offered,
}

impl Setup {
    async fn start(sources: Vec<Arc<dyn ToolSource>>) -> Setup {
        let offered = Offered::default();
        let options = offered.options(sources, TestOptions::default());
        Setup { server: TestServer::start_with(options).await, offered }
    }

    /// Whether the model's most recent turn offered `tool`.
    fn last_offered(&self, tool: &str) -> bool {
        self.offered.last_turn(tool)
    }

    async fn choose(&self, session: &str, server: &str, enabled: bool) -> (StatusCode, Value) {
        let url = self.server.url(&format!("/api/sessions/{session}/mcp/{server}"));
        self.server.send(self.server.client.put(url).json(&json!({"enabled": enabled}))).await
    }
}

fn by_name<'a>(list: &'a Value, name: &str) -> &'a Value {
    let servers = list.as_array().expect("a list");
    servers.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

#[tokio::test]
async fn servers_are_listed_with_state_tools_and_each_sessions_use() {
    let failed = SourceState::Failed { reason: "exited with status 1: no such module".into(), retry_at_ms: Some(5) };
    let s = Setup::start(vec![
        Arc::new(Fake { name: "srv", tool: "srv_echo", state: SourceState::Ready, projects: None }),
        Arc::new(Fake { name: "broken", tool: "broken_echo", state: failed, projects: Some(vec!["/other".into()]) }),
    ])
    .await;
    let (status, list) = s.server.get("/api/mcp").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(
        by_name(&list, "srv"),
        &json!({
            "name": "srv", "transport": "stdio", "target": "node srv.js", "state": "ready",
            "tools": [{"name": "srv_echo", "description": "echoes", "read_only": true}], "connections": 1,
        })
    );
    let broken = by_name(&list, "broken");
    assert_eq!(
        (&broken["state"], &broken["reason"]),
        (&json!("failed"), &json!("exited with status 1: no such module"))
    );
    assert_eq!(broken["retry_at_ms"], 5);

    let session = s.server.new_session().await;
    let (status, list) = s.server.get(&format!("/api/mcp?session={session}")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(by_name(&list, "srv")["session"], json!({"enabled": true, "by_default": true}));
    assert_eq!(by_name(&list, "broken")["session"], json!({"enabled": false, "by_default": false}), "not its project");

    let (status, body) = s.server.get("/api/mcp?session=ses_00000000000000000000000000").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = s.choose(&session, "nosuch", false).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // "Try again" on a server that was not given up changes nothing and says so (a
    // given-up one is tried again: mcp_lifecycle); an unknown one is a 404.
    let (status, body) = s.server.post("/api/mcp/broken/retry", json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((&body["retried"], &body["server"]["state"]), (&json!(false), &json!("failed")));
    let (status, body) = s.server.post("/api/mcp/nosuch/retry", json!(null)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn a_server_turned_off_for_a_session_is_not_offered_to_its_next_turn() {
    let s =
        Setup::start(vec![Arc::new(Fake { name: "srv", tool: "srv_echo", state: SourceState::Ready, projects: None })])
            .await;
    let session = s.server.new_session().await;
    let other = s.server.new_session().await;
    s.server.run_prompt(&session, "hello").await;
    assert!(s.last_offered("srv_echo"), "on by default");

    let (status, body) = s.choose(&session, "srv", false).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["session"], json!({"enabled": false, "by_default": true, "choice": false}));
    // Allowed without asking, so only the choice keeps it from running.
    for id in [&session, &other] {
        allow(&s.server, id, "srv_*").await;
    }
    let run = s.server.run_prompt(&session, r#"tool: srv_echo {"message":"hi"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(!s.last_offered("srv_echo") && s.last_offered("read"), "the built-ins stay");
    let results = s.server.tool_results(&session).await;
    assert_eq!(results, [("srv_echo".to_owned(), "unknown tool \"srv_echo\"".to_owned(), true)]);

    // Another session of the same project is still offered it.
    s.server.run_prompt(&other, r#"tool: srv_echo {"message":"hi"}"#).await;
    let results = s.server.tool_results(&other).await;
    assert!(!results[0].2 && results[0].1.starts_with("srv_echo ran with"), "{results:?}");

    // The choice is kept with the session, and turning it back on offers it again.
    let s = Setup { server: s.server.restart().await, offered: s.offered };
    let (_, list) = s.server.get(&format!("/api/mcp?session={session}")).await;
    assert_eq!(by_name(&list, "srv")["session"]["enabled"], false, "kept across a restart");
    let (status, body) = s.choose(&session, "srv", true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["session"], json!({"enabled": true, "by_default": true, "choice": true}));
    s.server.run_prompt(&session, r#"tool: srv_echo {"message":"again"}"#).await;
    assert!(s.last_offered("srv_echo"));
    let results = s.server.tool_results(&session).await;
    assert!(!results[1].2 && results[1].1.starts_with("srv_echo ran with"), "{results:?}");
}

/// Real `[[mcp]]` entries through `McpSource`: an HTTP server with a bearer token from
/// the environment and a header shows its URL and neither value, not even once a turn
/// tried to connect and it failed; `projects` decides which sessions it is offered.
#[tokio::test]
async fn an_http_server_shows_no_token_or_header_value_and_projects_decide_the_default() {
    const TOKEN: &str = "sk-mcp-token-7f3a9c";
    if !common::in_own_process(
        module_path!(),
        "an_http_server_shows_no_token_or_header_value_and_projects_decide_the_default",
        &[("DOCS_MCP_TOKEN", TOKEN)],
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // The project `TestServer` registers is `<its dir>/project`: only known once it
    // runs, so one entry names a directory that is surely not it.
    let entries = [
        json!({"name": "docs", "url": "http://127.0.0.1:9/mcp?team=core", "headers": {"X-Team": "hdr-value-51d2"},
               "bearer_token_env": "DOCS_MCP_TOKEN"}),
        json!({"name": "elsewhere", "command": "/bin/false", "projects": [dir.path()]}),
    ];
    let entries = entries.into_iter().map(|e| serde_json::from_value(e).expect("an entry")).collect();
    let sources: Vec<Arc<dyn ToolSource>> = spool_mcp::servers(entries)
        .expect("checked")
        .into_iter()
        .map(|config| Arc::new(spool_mcp::McpSource::new(config, Default::default(), None)) as Arc<dyn ToolSource>)
        .collect();
    let s = Setup::start(sources).await;
    let session = s.server.new_session().await;
    // A turn tries to connect with the token and the header; nothing listens there.
    s.server.run_prompt(&session, "hello").await;
    let path = format!("/api/mcp?session={session}");
    let res = s.server.client.get(s.server.url(&path)).send().await.expect("answered");
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.expect("body");
    // The query too (a key may ride there), also in the failure reason, which quotes
    // an error that names the URL it failed on.
    for secret in [TOKEN, "hdr-value-51d2", "team=core"] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }
    let list: Value = serde_json::from_str(&text).expect("JSON");
    let docs = by_name(&list, "docs");
    assert_eq!(docs["state"], "failed", "{docs}");
    assert!(docs["reason"].as_str().is_some_and(|r| r.contains("127.0.0.1:9/mcp")), "{docs}");
    assert_eq!((&docs["transport"], &docs["target"]), (&json!("http"), &json!("http://127.0.0.1:9/mcp")));
    assert_eq!(docs["session"], json!({"enabled": true, "by_default": true}), "no projects: every project");
    let elsewhere = by_name(&list, "elsewhere");
    assert_eq!(elsewhere["session"], json!({"enabled": false, "by_default": false}), "not this session's project");
    assert_eq!(elsewhere["state"], "idle", "never started for a session it does not serve");
}
