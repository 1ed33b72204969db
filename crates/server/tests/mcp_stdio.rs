//! A real MCP server over stdio, through a real Spool server: the official
//! `@modelcontextprotocol/server-everything` (pinned in tests/mcp, installed by
//! scripts/test, found through `SPOOL_TEST_MCP_EVERYTHING`), spawned sandboxed in the
//! session's project by [`McpSource`] from a checked `[[mcp]]` entry. Its tools are
//! offered as `everything_*`, ask by default, run once approved and never when denied,
//! and one server process serves the session's calls. A server that exits mid-call is
//! a tool error carrying its exit status and stderr, and the next turn starts it again;
//! a call it never answers ends at `call_timeout_secs`.

use crate::common::TestServer;
use crate::mcp_support::{decide, everything, everything_entry, script_file, serve, stdio_source};

use serde_json::{Value, json};
use spool_mcp::McpSource;
use std::sync::Arc;

async fn start(entry: Value) -> (TestServer, String, Arc<McpSource>) {
    let source = stdio_source(entry);
    let (server, session) = serve(source.clone()).await;
    (server, session, source)
}

#[tokio::test]
async fn server_everything_tools_ask_run_once_approved_and_share_one_process() {
    let Some(index) = everything() else { return };
    let (server, session, source) = start(everything_entry(&index)).await;

    let (run_id, approval) = server.park(&session, r#"tool: everything_echo {"message":"hi"}"#).await;
    assert_eq!(approval["payload"]["source"]["server"], "everything", "{approval}");
    assert_eq!(approval["payload"]["source"]["tool"], "echo", "{approval}");
    let pids = source.server_pids();
    assert_eq!(pids.len(), 1, "one server for the session, started to list its tools");
    decide(&server, &session, &approval, "once").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let got = server.tool_results(&session).await;
    assert_eq!(got, [("everything_echo".to_owned(), "Echo: hi".to_owned(), false)]);

    let (run_id, approval) = server.park(&session, r#"tool: everything_echo {"message":"secret"}"#).await;
    decide(&server, &session, &approval, "reject").await;
    server.wait_run(&run_id).await;
    let got = server.tool_results(&session).await;
    assert!(got[1].2 && !got[1].1.contains("Echo: secret"), "denied, never called: {got:?}");

    let (run_id, approval) = server.park(&session, r#"tool: everything_get-sum {"a":2,"b":3}"#).await;
    decide(&server, &session, &approval, "once").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let got = server.tool_results(&session).await;
    assert_eq!(got[2], ("everything_get-sum".to_owned(), "The sum of 2 and 3 is 5.".to_owned(), false));
    assert_eq!(source.server_pids(), pids, "the same process served every call");
}

/// A minimal stdio MCP server (newline-delimited JSON-RPC): its tool `boom` writes a
/// line to stderr and exits with status 3; `hang` never answers.
const CRASHING_SERVER: &str = r#"
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") {
    send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "crash", version: "1" } } });
  } else if (m.method === "tools/list") {
    send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "boom", inputSchema: {} }, { name: "hang", inputSchema: {} }] } });
  } else if (m.method === "tools/call" && m.params.name === "hang") {
    // Never answers.
  } else if (m.method === "tools/call") {
    process.stderr.write("boom: giving up\n");
    process.exit(3);
  } else if (m.id !== undefined) {
    send({ jsonrpc: "2.0", id: m.id, result: {} });
  }
});
"#;

#[tokio::test]
async fn a_call_the_server_never_answers_ends_at_call_timeout_secs() {
    let (_dir, script) = script_file(CRASHING_SERVER);
    let entry = json!({"name": "crash", "command": "node", "args": [script], "call_timeout_secs": 1});
    let (server, session, source) = start(entry).await;
    let (run_id, approval) = server.park(&session, r#"tool: crash_hang {}"#).await;
    decide(&server, &session, &approval, "once").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let got = server.tool_results(&session).await;
    assert_eq!(got, [("crash_hang".to_owned(), "the server did not answer within 1 s".to_owned(), true)]);
    assert_eq!(source.server_pids().len(), 1, "the server lives on");
}

#[tokio::test]
async fn a_server_that_exits_mid_call_is_a_tool_error_and_starts_again_next_turn() {
    let (_dir, script) = script_file(CRASHING_SERVER);
    let entry = json!({"name": "crash", "command": "node", "args": [script]});
    let (server, session, source) = start(entry).await;

    let (run_id, approval) = server.park(&session, r#"tool: crash_boom {}"#).await;
    let first = source.server_pids();
    assert_eq!(first.len(), 1);
    decide(&server, &session, &approval, "once").await;
    server.wait_run(&run_id).await;
    let got = server.tool_results(&session).await;
    assert!(got[0].2, "a tool error: {got:?}");
    assert!(got[0].1.contains("the server exited (exit status: 3)"), "its status: {got:?}");
    assert!(got[0].1.contains("boom: giving up"), "its stderr: {got:?}");

    // The next turn starts it again and offers its tool.
    let (_, approval) = server.park(&session, r#"tool: crash_boom {}"#).await;
    assert_eq!(approval["payload"]["source"]["tool"], "boom", "{approval}");
    let second = source.server_pids();
    assert_eq!(second.len(), 1);
    assert_ne!(second, first, "a new process");
}
