//! What happens while an MCP call runs, with real servers through a real Spool server
//! (`@modelcontextprotocol/server-everything` over stdio, as in `mcp_stdio`): progress
//! notifications stream as the call's live output and keep a slow call alive past its
//! deadline; an elicitation reaches whoever the call's asker asks (and is cancelled
//! when nobody can be asked), and the answer reaches the server's result; sampling is
//! refused with a reason the model reads; stopping the run cancels the request while
//! the server lives on; and a `tools/list_changed` gives the next turn the new tools.

use crate::common;

use async_trait::async_trait;
use common::{Open, ReceivedFrame, TestOptions, TestServer, ToolsOverride};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{
    AskPerson, LiveAnswer, LiveAsk, LiveAsker, Tool, ToolContext, ToolOrigin, ToolOutput, ToolScope, ToolSource,
    ToolSpec,
};
use spool_mcp::{McpEntry, McpSource};
use std::sync::{Arc, Mutex};

/// The server's `dist/index.js`, or `None` (the test is skipped) outside CI when unset.
fn everything() -> Option<String> {
    match std::env::var("SPOOL_TEST_MCP_EVERYTHING") {
        Ok(path) => Some(path),
        Err(_) if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") => {
            panic!("SPOOL_TEST_MCP_EVERYTHING is unset in CI: scripts/test sets it after `npm ci` in tests/mcp")
        }
        Err(_) => {
            eprintln!("SKIPPED: SPOOL_TEST_MCP_EVERYTHING is unset (see mcp_stdio.rs)");
            None
        }
    }
}

/// A source's tools with `asker` in their calls' context instead of the run's: the
/// test decides who answers an elicitation, whatever the run would do.
struct AskThrough {
    source: Arc<McpSource>,
    asker: LiveAsker,
}

#[async_trait]
impl ToolSource for AskThrough {
    fn name(&self) -> String {
        self.source.name()
    }

    async fn tools(&self, scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
        let tools = self.source.tools(scope).await;
        let wrap = |tool| Arc::new(AskingTool { tool, asker: self.asker.clone() }) as Arc<dyn Tool>;
        tools.into_iter().map(wrap).collect()
    }
}

struct AskingTool {
    tool: Arc<dyn Tool>,
    asker: LiveAsker,
}

#[async_trait]
impl Tool for AskingTool {
    fn spec(&self) -> ToolSpec {
        self.tool.spec()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let mut ctx = ctx.clone();
        ctx.asker = self.asker.clone();
        self.tool.call(args, &ctx).await
    }

    fn origin(&self) -> Option<ToolOrigin> {
        self.tool.origin()
    }
}

/// A person who accepts every ask with `answer` and keeps what was asked.
struct Person {
    answer: Value,
    asked: Mutex<Vec<LiveAsk>>,
}

#[async_trait]
impl AskPerson for Person {
    async fn ask(&self, ask: LiveAsk) -> LiveAnswer {
        self.asked.lock().expect("asked").push(ask);
        LiveAnswer::Accept(self.answer.clone())
    }
}

/// A Spool server whose sessions get the `[[mcp]]` entry's tools, asked through
/// `asker`; a session that may call them all without approval.
async fn start(entry: Value, asker: LiveAsker) -> (TestServer, String, Arc<McpSource>) {
    let entry: McpEntry = serde_json::from_value(entry).expect("entry");
    let config = spool_mcp::servers(vec![entry]).expect("checked").remove(0);
    let name = config.name.clone();
    let source = Arc::new(McpSource::stdio(config, Default::default(), None).expect("a stdio server"));
    let through = Arc::new(AskThrough { source: source.clone(), asker });
    let tools = spool_tools::workspace_tools().with_source(through);
    let options = TestOptions { tools: Some(ToolsOverride(tools)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    let rules = json!({"permissions": [{"tool": format!("{name}_*"), "action": "allow"}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), rules).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (server, session, source)
}

fn everything_entry(index: &str) -> Value {
    json!({"name": "everything", "command": "node", "args": [index, "stdio"]})
}

fn call(tool: &str, args: Value) -> String {
    format!("tool: {tool} {args}")
}

/// The live output the `tool_execution_update` frames among `frames` add up to.
fn live_output(frames: &[ReceivedFrame]) -> String {
    let updates = frames.iter().filter(|f| f.event_type() == Some("tool_execution_update"));
    updates.map(|f| f.json["event"]["delta"].as_str().expect("delta").to_owned()).collect()
}

#[tokio::test]
async fn progress_streams_as_live_output_and_keeps_a_slow_call_past_its_deadline() {
    let Some(index) = everything() else { return };
    // Three seconds of work, a progress notification every half second, a deadline of
    // two: only the restarts let it finish.
    let mut entry = everything_entry(&index);
    entry["call_timeout_secs"] = json!(2);
    let (server, session, _source) = start(entry, LiveAsker::default()).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");

    let args = json!({"duration": 3, "steps": 6});
    let run = server.start_run(&session, &call("everything_trigger-long-running-operation", args)).await;
    let mut seen = live.frames_until(|f| f.event_type() == Some("tool_execution_update")).await;
    assert!(!seen.iter().any(|f| f.event_type() == Some("tool_execution_end")), "the output came live");
    seen.extend(live.frames_until(|f| f.event_type() == Some("agent_settled")).await);
    assert_eq!(server.wait_run(&run).await["status"], "completed");

    let lines: String = (1..=6).map(|i| format!("progress {i}/6\n")).collect();
    assert_eq!(live_output(&seen), lines);
    let results = server.tool_results(&session).await;
    let done = "Long running operation completed. Duration: 3 seconds, Steps: 6.";
    assert_eq!(results, [("everything_trigger-long-running-operation".to_owned(), done.to_owned(), false)]);
}

#[tokio::test]
async fn an_elicitation_nobody_can_answer_is_cancelled_and_the_model_reads_so() {
    let Some(index) = everything() else { return };
    let (server, session, _source) = start(everything_entry(&index), LiveAsker::default()).await;
    let run = server.run_prompt(&session, &call("everything_trigger-elicitation-request", json!({}))).await;
    assert_eq!(run["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    let (tool, text, is_error) = &results[0];
    assert_eq!(tool, "everything_trigger-elicitation-request");
    assert!(!is_error && text.contains("User cancelled the elicitation dialog"), "{text}");
}

#[tokio::test]
async fn an_accepted_elicitation_reaches_the_servers_result() {
    let Some(index) = everything() else { return };
    let person = Arc::new(Person { answer: json!({"name": "Ada Lovelace", "check": true}), asked: Mutex::default() });
    let (server, session, _source) = start(everything_entry(&index), LiveAsker::new(person.clone())).await;
    let run = server.run_prompt(&session, &call("everything_trigger-elicitation-request", json!({}))).await;
    assert_eq!(run["status"], "completed");

    let asked = person.asked.lock().expect("asked").clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].source, "everything");
    assert_eq!(asked[0].message, "Please provide inputs for the following fields:");
    assert_eq!(asked[0].schema["properties"]["name"]["type"], "string", "{}", asked[0].schema);
    assert_eq!(asked[0].schema["required"], json!(["name"]));
    let results = server.tool_results(&session).await;
    let (_, text, is_error) = &results[0];
    assert!(!is_error, "{text}");
    assert!(text.contains("- Name: Ada Lovelace") && text.contains("- Agreed to terms: true"), "{text}");
}

#[tokio::test]
async fn sampling_is_refused_with_a_reason_the_model_reads() {
    let Some(index) = everything() else { return };
    // Allowed, so the server offers its sampling tool; Spool has no model to lend it yet.
    let mut entry = everything_entry(&index);
    entry["sampling"] = json!(true);
    let (server, session, _source) = start(entry, LiveAsker::default()).await;
    let args = json!({"prompt": "hello", "maxTokens": 5});
    let run = server.run_prompt(&session, &call("everything_trigger-sampling-request", args)).await;
    assert_eq!(run["status"], "completed");
    let results = server.tool_results(&session).await;
    let (_, text, is_error) = &results[0];
    assert!(is_error, "{text}");
    assert!(text.contains("Spool does not answer sampling requests yet"), "{text}");
}

#[tokio::test]
async fn stopping_the_run_cancels_the_call_and_the_same_server_serves_the_next() {
    let Some(index) = everything() else { return };
    let (server, session, source) = start(everything_entry(&index), LiveAsker::default()).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");

    // A minute of work: the run can end within the test's wait only by being stopped.
    let args = json!({"duration": 60, "steps": 120});
    let run = server.start_run(&session, &call("everything_trigger-long-running-operation", args)).await;
    live.frames_until(|f| f.event_type() == Some("tool_execution_update")).await;
    let pids = source.server_pids();
    assert_eq!(pids.len(), 1);
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert!(status.is_success(), "{body}");
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");

    let run = server.run_prompt(&session, &call("everything_echo", json!({"message": "still here"}))).await;
    assert_eq!(run["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results.last().map(|r| r.1.as_str()), Some("Echo: still here"), "{results:?}");
    assert_eq!(source.server_pids(), pids, "the same process served the next call");
}

/// A minimal stdio MCP server whose tool `grow` adds a tool `extra` and tells the
/// client with `notifications/tools/list_changed`.
const GROWING_SERVER: &str = r#"
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const tools = [{ name: "grow", inputSchema: { type: "object" } }];
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  const text = (t) => ({ content: [{ type: "text", text: t }] });
  if (m.method === "initialize") {
    send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: { listChanged: true } }, serverInfo: { name: "grow", version: "1" } } });
  } else if (m.method === "tools/list") {
    send({ jsonrpc: "2.0", id: m.id, result: { tools } });
  } else if (m.method === "tools/call" && m.params.name === "grow") {
    tools.push({ name: "extra", inputSchema: { type: "object" } });
    send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
    send({ jsonrpc: "2.0", id: m.id, result: text("grown") });
  } else if (m.method === "tools/call" && m.params.name === "extra") {
    send({ jsonrpc: "2.0", id: m.id, result: text("extra ran") });
  } else if (m.id !== undefined) {
    send({ jsonrpc: "2.0", id: m.id, result: {} });
  }
});
"#;

#[tokio::test]
async fn a_tool_list_change_gives_the_next_turn_the_new_tool() {
    let dir = std::env::temp_dir().join(format!("spool-mcp-grow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let script = dir.join("grow.js");
    std::fs::write(&script, GROWING_SERVER).expect("script");
    let entry = json!({"name": "grow", "command": "node", "args": [script]});
    let (server, session, _source) = start(entry, LiveAsker::default()).await;

    // Before the change the tool is not offered.
    server.run_prompt(&session, &call("grow_extra", json!({}))).await;
    server.run_prompt(&session, &call("grow_grow", json!({}))).await;
    server.run_prompt(&session, &call("grow_extra", json!({}))).await;
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].2 && results[0].1.contains("unknown tool"), "{results:?}");
    assert_eq!(results[1].1, "grown");
    assert_eq!(results[2], ("grow_extra".to_owned(), "extra ran".to_owned(), false));
    let _ = std::fs::remove_dir_all(&dir);
}
