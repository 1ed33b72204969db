//! What happens while an MCP call runs, with real servers through a real Spool server
//! (`@modelcontextprotocol/server-everything` over stdio, as in `mcp_stdio`): progress
//! notifications stream as the call's live output and keep a slow call alive past its
//! deadline; an elicitation reaches whoever the call's asker asks (and is cancelled
//! when nobody can be asked), the deadline waits for the person, and the answer
//! reaches the server's result; a sampling request from a server not allowed to sample
//! is refused with a reason the model reads (allowed sampling: `mcp_sampling`);
//! stopping the run cancels the request at the server, which lives on; and a
//! `tools/list_changed` gives the next turn the new tools. A small server of the
//! test's own ([`PROBE_SERVER`]) shows what server-everything cannot.

use crate::common;
use crate::mcp_support::{allow, everything, everything_entry, script_file, serve, stdio_source};

use async_trait::async_trait;
use common::{Open, ReceivedFrame, TestServer};
use serde_json::{Value, json};
use spool_engine::{
    AskPerson, LiveAnswer, LiveAsk, LiveAsker, Tool, ToolContext, ToolOrigin, ToolOutput, ToolScope, ToolSource,
    ToolSpec,
};
use spool_mcp::McpSource;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// A person who accepts every ask with `answer` after thinking for `takes`, and keeps
/// what was asked.
struct Person {
    answer: Value,
    takes: Duration,
    asked: Mutex<Vec<LiveAsk>>,
}

#[async_trait]
impl AskPerson for Person {
    async fn ask(&self, ask: LiveAsk) -> LiveAnswer {
        self.asked.lock().expect("asked").push(ask);
        // A person slower than the call's deadline (the point: it must not count).
        tokio::time::sleep(self.takes).await;
        LiveAnswer::Accept(self.answer.clone())
    }
}

/// A Spool server whose sessions get the `[[mcp]]` entry's tools, asked through
/// `asker`; a session that may call them all without approval.
async fn start(entry: Value, asker: LiveAsker) -> (TestServer, String, Arc<McpSource>) {
    let name = entry["name"].as_str().expect("a name").to_owned();
    let source = stdio_source(entry);
    let (server, session) = serve(Arc::new(AskThrough { source: source.clone(), asker })).await;
    allow(&server, &session, &format!("{name}_*")).await;
    (server, session, source)
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
async fn an_accepted_elicitation_reaches_the_servers_result_however_long_the_person_takes() {
    let Some(index) = everything() else { return };
    let answer = json!({"name": "Ada Lovelace", "check": true});
    let person = Arc::new(Person { answer, takes: Duration::from_millis(2500), asked: Mutex::default() });
    let mut entry = everything_entry(&index);
    entry["call_timeout_secs"] = json!(1);
    let (server, session, _source) = start(entry, LiveAsker::new(person.clone())).await;
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

/// A minimal stdio MCP server (newline-delimited JSON-RPC) that shows what the client
/// sends it: `grow` adds a tool `extra` and says so with `notifications/tools/list_changed`;
/// `wait` reports progress 0 and never answers, and `cancelled` lists the requests the client cancelled;
/// `sample` asks the client for a completion (whatever its capabilities) and answers
/// with the client's error.
const PROBE_SERVER: &str = r#"
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const text = (t) => ({ content: [{ type: "text", text: t }] });
const tools = ["grow", "wait", "cancelled", "sample"].map((name) => ({ name, inputSchema: { type: "object" } }));
const cancelled = [];
const waiting = {};
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === undefined && waiting[m.id]) {
    const asker = waiting[m.id];
    delete waiting[m.id];
    send({ jsonrpc: "2.0", id: asker, result: text(m.error ? `error: ${m.error.message}` : "sampled") });
  } else if (m.method === "initialize") {
    send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: { listChanged: true } }, serverInfo: { name: "probe", version: "1" } } });
  } else if (m.method === "notifications/cancelled") {
    cancelled.push(m.params.requestId);
  } else if (m.method === "tools/list") {
    send({ jsonrpc: "2.0", id: m.id, result: { tools } });
  } else if (m.method === "tools/call" && m.params.name === "grow") {
    tools.push({ name: "extra", inputSchema: { type: "object" } });
    send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
    send({ jsonrpc: "2.0", id: m.id, result: text("grown") });
  } else if (m.method === "tools/call" && m.params.name === "extra") {
    send({ jsonrpc: "2.0", id: m.id, result: text("extra ran") });
  } else if (m.method === "tools/call" && m.params.name === "wait") {
    // Says it has the call, then never answers.
    const progressToken = m.params._meta && m.params._meta.progressToken;
    if (progressToken !== undefined) {
      send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken, progress: 0, message: "waiting" } });
    }
  } else if (m.method === "tools/call" && m.params.name === "cancelled") {
    send({ jsonrpc: "2.0", id: m.id, result: text(`cancelled: ${JSON.stringify(cancelled)}`) });
  } else if (m.method === "tools/call" && m.params.name === "sample") {
    waiting["s" + m.id] = m.id;
    send({ jsonrpc: "2.0", id: "s" + m.id, method: "sampling/createMessage",
      params: { messages: [{ role: "user", content: { type: "text", text: "hi" } }], maxTokens: 5 } });
  } else if (m.id !== undefined) {
    send({ jsonrpc: "2.0", id: m.id, result: {} });
  }
});
"#;

/// A Spool server with [`PROBE_SERVER`] as `[[mcp]]` entry `probe`; and the guard of
/// the directory its script is in.
async fn start_probe() -> (TestServer, String, tempfile::TempDir) {
    let (dir, script) = script_file(PROBE_SERVER);
    let entry = json!({"name": "probe", "command": "node", "args": [script]});
    let (server, session, _source) = start(entry, LiveAsker::default()).await;
    (server, session, dir)
}

#[tokio::test]
async fn a_tool_list_change_gives_the_next_turn_the_new_tool() {
    let (server, session, _dir) = start_probe().await;
    // Before the change the tool is not offered.
    server.run_prompt(&session, &call("probe_extra", json!({}))).await;
    server.run_prompt(&session, &call("probe_grow", json!({}))).await;
    server.run_prompt(&session, &call("probe_extra", json!({}))).await;
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].2 && results[0].1.contains("unknown tool"), "{results:?}");
    assert_eq!(results[1].1, "grown");
    assert_eq!(results[2], ("probe_extra".to_owned(), "extra ran".to_owned(), false));
}

#[tokio::test]
async fn a_stopped_call_is_cancelled_at_the_server() {
    let (server, session, _dir) = start_probe().await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    let run = server.start_run(&session, &call("probe_wait", json!({}))).await;
    // The server has the call once it reports progress.
    let seen = live.frames_until(|f| f.event_type() == Some("tool_execution_update")).await;
    assert_eq!(live_output(&seen), "progress 0: waiting\n");
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert!(status.is_success(), "{body}");
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");

    server.run_prompt(&session, &call("probe_cancelled", json!({}))).await;
    let results = server.tool_results(&session).await;
    let (_, text, _) = results.last().expect("a result");
    // One request cancelled: the call the stop cut short (ids are rmcp's numbers).
    let ids: Vec<Value> = serde_json::from_str(text.strip_prefix("cancelled: ").expect("the list")).expect("json");
    assert_eq!(ids.len(), 1, "{text}");
}

#[tokio::test]
async fn sampling_a_server_is_not_allowed_is_refused_naming_the_setting() {
    let (server, session, _dir) = start_probe().await;
    server.run_prompt(&session, &call("probe_sample", json!({}))).await;
    let results = server.tool_results(&session).await;
    let expected = "error: sampling is not allowed for MCP server \"probe\": its [[mcp]] entry in config.toml does \
                    not set sampling = true";
    assert_eq!(results, [("probe_sample".to_owned(), expected.to_owned(), false)]);
}
