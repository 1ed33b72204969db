//! Tools that are not Spool's own (a [`ToolSource`], as an MCP client will be) through
//! a real server: they are offered to the model beside the built-ins, and Spool's rules
//! judge them unchanged — they ask by default, patterns match their arguments as
//! canonical JSON, a server deny is final, plan mode takes only those that say they
//! are read-only and are trusted for it. A tool withdrawn while its call waits for
//! approval ends as a tool error; one named like a built-in never replaces it.

use crate::common::{TestOptions, TestServer};
use crate::mcp_support::{Offered, decide};

use async_trait::async_trait;
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Tool, ToolContext, ToolOrigin, ToolOutput, ToolScope, ToolSource, ToolSpec};
use spool_protocol::{PermissionAction, PermissionRule};
use std::sync::{Arc, Mutex};

/// A source's tool: it answers with its arguments and counts its calls.
struct Fake {
    name: &'static str,
    origin: ToolOrigin,
    calls: Arc<Mutex<Vec<Value>>>,
}

#[async_trait]
impl Tool for Fake {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.into(),
            description: "a fake server's tool".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        self.calls.lock().expect("calls").push(args.clone());
        ToolOutput::ok(format!("{} ran with {args}", self.name))
    }

    fn origin(&self) -> Option<ToolOrigin> {
        Some(self.origin.clone())
    }
}

/// A source whose tool list the test changes, and the calls its tools received.
#[derive(Clone, Default)]
struct Source {
    tools: Arc<Mutex<Vec<Arc<dyn Tool>>>>,
    calls: Arc<Mutex<Vec<Value>>>,
    asked_for: Arc<Mutex<Vec<ToolScope>>>,
}

impl Source {
    /// Offers a tool `name` (`srv`'s `tool` there) from now on.
    fn offer(&self, name: &'static str, tool: &str, read_only: bool, trusted_read_only: bool) {
        let origin = ToolOrigin { source: "srv".into(), tool: tool.into(), read_only, trusted_read_only };
        let fake = Fake { name, origin, calls: self.calls.clone() };
        self.tools.lock().expect("tools").push(Arc::new(fake));
    }

    fn withdraw_all(&self) {
        self.tools.lock().expect("tools").clear();
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().expect("calls").clone()
    }
}

#[async_trait]
impl ToolSource for Source {
    fn name(&self) -> String {
        "srv".into()
    }

    async fn tools(&self, scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
        self.asked_for.lock().expect("scopes").push(scope.clone());
        self.tools.lock().expect("tools").clone()
    }
}

struct Setup {
    server: TestServer,
    session: String,
    source: Source,
    offered: Offered,
}

impl Setup {
    async fn start(source: Source, server_rules: Vec<PermissionRule>) -> Setup {
        let offered = Offered::default();
        let mut options = offered.options(vec![Arc::new(source.clone())], TestOptions::default());
        options.engine.rules.extend(server_rules);
        let server = TestServer::start_with(options).await;
        let session = server.new_session().await;
        Setup { server, session, source, offered }
    }

    async fn rules(&self, rules: Value) {
        let (status, body) =
            self.server.patch(&format!("/api/sessions/{}", self.session), json!({"permissions": rules})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    /// The session's tool results: (tool, text, is_error).
    async fn results(&self) -> Vec<(String, String, bool)> {
        self.server.tool_results(&self.session).await
    }

    async fn decide(&self, approval: &Value, decision: &str) {
        decide(&self.server, &self.session, approval, decision).await;
    }

    fn ever_offered(&self, name: &str) -> bool {
        self.offered.ever(name)
    }
}

#[tokio::test]
async fn a_source_tool_is_offered_asks_by_default_and_runs_once_approved() {
    let source = Source::default();
    source.offer("srv_echo", "echo", false, false);
    let s = Setup::start(source, Vec::new()).await;
    let (run_id, approval) = s.server.park(&s.session, r#"tool: srv_echo {"message":"hi","count":2}"#).await;
    assert!(s.ever_offered("srv_echo") && s.ever_offered("read"), "offered beside the built-ins");
    let asked = s.source.asked_for.lock().expect("scopes")[0].clone();
    assert_eq!(asked.session_id.to_string(), s.session);
    assert_eq!(asked.root, std::fs::canonicalize(s.server.project_dir()).expect("root"));
    assert!(s.source.calls().is_empty(), "nothing runs before the person decides");
    // The card says where the tool comes from and shows every argument, keys sorted.
    let payload = &approval["payload"];
    assert_eq!(
        payload["source"],
        json!({"server": "srv", "tool": "echo", "arguments": r#"{"count":2,"message":"hi"}"#})
    );
    assert_eq!(payload["argument"], r#"{"count":2,"message":"hi"}"#);
    assert_eq!(payload["change"], "srv › echo");

    s.decide(&approval, "once").await;
    assert_eq!(s.server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(s.source.calls(), [json!({"message": "hi", "count": 2})]);
    let results = s.results().await;
    assert_eq!(results.len(), 1);
    assert!(!results[0].2 && results[0].1.starts_with("srv_echo ran with"), "{results:?}");
}

#[tokio::test]
async fn rules_match_a_source_tool_on_its_arguments_as_canonical_json() {
    let source = Source::default();
    source.offer("srv_echo", "echo", false, false);
    let s = Setup::start(source, Vec::new()).await;
    s.rules(json!([
        {"tool": "srv_echo", "pattern": r#"{"message":"ok*"#, "action": "allow"},
        {"tool": "srv_*", "pattern": "*secret*", "action": "deny"},
    ]))
    .await;
    // Allowed without asking, the arguments matched in sorted order.
    let run = s.server.run_prompt(&s.session, r#"tool: srv_echo {"z":1,"message":"okay"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    // Denied: it never runs, and the model reads why.
    let run = s.server.run_prompt(&s.session, r#"tool: srv_echo {"message":"the secret"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(s.source.calls(), [json!({"z": 1, "message": "okay"})]);
    let results = s.results().await;
    assert!(results[1].2 && results[1].1.contains("denied by a permission rule"), "{results:?}");
}

#[tokio::test]
async fn a_server_deny_wins_over_a_session_allow() {
    let source = Source::default();
    source.offer("srv_echo", "echo", false, false);
    let s = Setup::start(source, vec![PermissionRule::new("srv_echo", "*", PermissionAction::Deny)]).await;
    s.rules(json!([{"tool": "srv_echo", "pattern": "*", "action": "allow"}])).await;
    let run = s.server.run_prompt(&s.session, r#"tool: srv_echo {"message":"hi"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(s.source.calls().is_empty(), "a server deny is final");
    let results = s.results().await;
    assert!(results[0].2 && results[0].1.contains("denied by a permission rule"), "{results:?}");
}

#[tokio::test]
async fn plan_mode_offers_a_source_tool_only_when_read_only_and_trusted() {
    let source = Source::default();
    source.offer("srv_look", "look", true, true);
    source.offer("srv_claims", "claims", true, false);
    source.offer("srv_trusted", "trusted", false, true);
    let s = Setup::start(source, Vec::new()).await;
    s.rules(json!([{"tool": "srv_*", "pattern": "*", "action": "allow"}])).await;
    let (status, body) = s.server.patch(&format!("/api/sessions/{}", s.session), json!({"mode": "plan"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for tool in ["srv_claims", "srv_trusted", "srv_look"] {
        let run = s.server.run_prompt(&s.session, &format!("tool: {tool} {{}}")).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    assert!(s.ever_offered("srv_look"));
    assert!(!s.ever_offered("srv_claims") && !s.ever_offered("srv_trusted"), "plan mode offered an acting tool");
    // Called anyway, the acting ones are refused; the trusted read-only one runs.
    assert_eq!(s.source.calls(), [json!({})]);
    let results = s.results().await;
    assert!(results[0].2 && results[0].1.contains("not available in plan mode"), "{results:?}");
    assert!(results[1].2 && results[1].1.contains("not available in plan mode"), "{results:?}");
    assert!(!results[2].2 && results[2].1.starts_with("srv_look ran"), "{results:?}");
}

#[tokio::test]
async fn a_tool_withdrawn_while_its_call_waits_ends_as_a_tool_error() {
    let source = Source::default();
    source.offer("srv_echo", "echo", false, false);
    let s = Setup::start(source, Vec::new()).await;
    let (run_id, approval) = s.server.park(&s.session, r#"tool: srv_echo {"message":"hi"}"#).await;
    // The server's `tools/list_changed` dropped it while the person looked.
    s.source.withdraw_all();
    s.decide(&approval, "once").await;
    assert_eq!(s.server.wait_run(&run_id).await["status"], "completed");
    assert!(s.source.calls().is_empty());
    let results = s.results().await;
    assert_eq!(results.len(), 1);
    assert!(results[0].2 && results[0].1.contains("srv_echo is no longer offered"), "{results:?}");
}

#[tokio::test]
async fn a_source_tool_named_like_a_built_in_is_skipped() {
    let source = Source::default();
    source.offer("read", "read", true, true);
    let s = Setup::start(source, Vec::new()).await;
    // `read` is allowed by the default rules: the built-in's rule must not carry a
    // server's tool of the same name.
    let run = s.server.run_prompt(&s.session, r#"tool: read {"path":"README.md"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(s.source.calls().is_empty(), "the source's read ran");
    let results = s.results().await;
    assert!(!results[0].2 && results[0].1.contains("Test project"), "{results:?}");
}

#[tokio::test]
async fn always_allows_a_source_tool_in_the_session() {
    let source = Source::default();
    source.offer("srv_echo", "echo", false, false);
    let s = Setup::start(source, Vec::new()).await;
    let (run_id, approval) = s.server.park(&s.session, r#"tool: srv_echo {"message":"one"}"#).await;
    // No command patterns to choose from: "always" means the tool, in this session.
    assert!(approval["payload"].get("alwaysOptions").is_none(), "{approval}");
    s.decide(&approval, "always").await;
    assert_eq!(s.server.wait_run(&run_id).await["status"], "completed");
    let run = s.server.run_prompt(&s.session, r#"tool: srv_echo {"message":"two"}"#).await;
    assert_eq!(run["status"], "completed", "asked again: {run}");
    assert_eq!(s.source.calls(), [json!({"message": "one"}), json!({"message": "two"})]);
}
