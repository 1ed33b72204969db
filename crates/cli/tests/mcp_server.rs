//! `spool mcp` (issue 38's optional part): a running `spool serve` offered to another
//! agent as an MCP server over stdio, driven by the official Python SDK's client (the
//! venv scripts/test makes for the MCP tests, found through `SPOOL_TEST_MCP_PYTHON`).
//! The client gets the version it asked for and lists the tools; a tool the server
//! lacks is a JSON-RPC error; `prompt` in a new session answers with the run's text;
//! a prompt whose tool asks comes back waiting with the approval, which
//! `pending_approvals` lists too; once a person approved it (here through the REST
//! API), `wait` gets the run's end. Spool's approvals hold for the delegating agent.

use crate::common;

use common::serve;
use serde_json::Value;
use std::process::Command;

/// The client: every step's result as one JSON object on stdout.
const CLIENT: &str = r#"
import asyncio, json, sys, urllib.request
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

spool, base, project = sys.argv[1:4]

def approve(session, approval):
    request = urllib.request.Request(f"{base}/api/sessions/{session}/approvals/{approval}",
        data=json.dumps({"decision": "once"}).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request).read()

def seen(result):
    return {"text": [c.text for c in result.content], "structured": result.structured_content,
            "isError": result.is_error}

async def main():
    params = StdioServerParameters(command=spool, args=["mcp", "--server", base, "--project", project])
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            out["version"] = (await session.initialize()).protocol_version
            out["tools"] = [t.name for t in (await session.list_tools()).tools]
            try:
                out["unknown"] = seen(await session.call_tool("approve", {"session": "ses_x"}))
            except MCPError as e:
                out["unknown"] = {"code": e.code, "message": e.message}
            out["echo"] = seen(await session.call_tool("prompt", {"text": "echo: hello from another agent"}))
            ses = out["echo"]["structured"]["session"]
            asked = seen(await session.call_tool("prompt", {"text": 'tool: bash {"command":"echo delegated"}', "session": ses}))
            out["asked"] = asked
            out["pending"] = seen(await session.call_tool("pending_approvals", {"session": ses}))
            approve(ses, asked["structured"]["approvals"][0]["id"])
            out["waited"] = seen(await session.call_tool("wait", {"session": ses, "run": asked["structured"]["run"]}))
    print(json.dumps(out))

asyncio.run(main())
"#;

#[test]
fn another_agent_prompts_a_session_and_waits_past_an_approval() {
    let Ok(python) = std::env::var("SPOOL_TEST_MCP_PYTHON") else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(!ci, "SPOOL_TEST_MCP_PYTHON is unset in CI: scripts/test sets it");
        eprintln!("SKIPPED: SPOOL_TEST_MCP_PYTHON is unset (the venv of tests/mcp/requirements.txt)");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let data = dir.path().join("data");
    let (root, data) = (dir.path().to_str().expect("UTF-8"), data.to_str().expect("UTF-8"));
    let args = ["--addr", "127.0.0.1:0", "--data-dir", data, "--scripted-delay-ms", "0", "--workspace-root", root];
    let (_server, base) = serve(&args);
    let client = dir.path().join("client.py");
    std::fs::write(&client, CLIENT).expect("client");

    let out = Command::new(python)
        .arg(&client)
        .args([env!("CARGO_BIN_EXE_spool"), &base, project.to_str().expect("UTF-8")])
        .env_remove("SPOOL_SERVER")
        .env_remove("SPOOL_TOKEN")
        .output()
        .expect("the client runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let seen: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

    // The version the client asked for (the newest with an `initialize`), and the tools.
    assert_eq!(seen["version"], "2025-11-25");
    assert_eq!(seen["tools"], serde_json::json!(["prompt", "wait", "pending_approvals"]));
    // A tool this server lacks is the protocol's error (invalid params), not a result.
    let unknown = &seen["unknown"];
    assert_eq!(unknown["code"], -32602, "{unknown}");
    assert!(unknown["message"].as_str().is_some_and(|m| m.contains("unknown tool approve")), "{unknown}");
    let echo = &seen["echo"];
    assert_eq!(echo["isError"], false, "{echo}");
    assert_eq!(echo["structured"]["status"], "completed", "{echo}");
    assert_eq!(echo["text"][0].as_str().map(str::trim), Some("hello from another agent"), "{echo}");
    let session = echo["structured"]["session"].as_str().expect("a session");
    assert!(session.starts_with("ses_"), "{echo}");

    // The bash call asks, as for any client: the run waits and says for what.
    let asked = &seen["asked"];
    assert_eq!(asked["structured"]["status"], "waiting", "{asked}");
    assert_eq!(asked["structured"]["session"], session);
    let approval = &asked["structured"]["approvals"][0];
    assert_eq!(approval["tool"], "bash", "{asked}");
    assert!(asked["text"][0].as_str().expect("text").contains("waits for a person"), "{asked}");
    let pending = &seen["pending"]["structured"]["approvals"];
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    assert_eq!(pending[0]["id"], approval["id"]);

    // Approved in Spool, the run went on: `wait` gets its end.
    let waited = &seen["waited"];
    assert_eq!(waited["isError"], false, "{waited}");
    assert_eq!(waited["structured"]["status"], "completed", "{waited}");
    assert_eq!(waited["structured"]["run"], asked["structured"]["run"]);
}

/// The protocol as any client sees it, line by line on stdin and stdout (no Spool
/// server is reached: nothing here calls a tool that needs one): the version a
/// client's `initialize` asks for when this server speaks it, else the newest it
/// speaks with an `initialize`; `ping`; a tool it lacks as a JSON-RPC error. And a
/// client that leaves before initializing ends it quietly.
#[test]
fn a_client_gets_the_version_it_asks_for_and_the_protocol_errors() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let exchange = |lines: &[Value], replies: usize| -> (Vec<Value>, std::process::ExitStatus) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["mcp", "--server", "http://127.0.0.1:9"])
            .env_remove("SPOOL_SERVER")
            .env_remove("SPOOL_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spool mcp starts");
        let mut stdin = child.stdin.take().expect("stdin");
        for line in lines {
            writeln!(stdin, "{line}").expect("a line to spool mcp");
        }
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let seen = (0..replies)
            .map(|_| {
                let mut line = String::new();
                stdout.read_line(&mut line).expect("a line from spool mcp");
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
            })
            .collect();
        drop(stdin);
        (seen, child.wait().expect("spool mcp ends"))
    };
    let initialize = |version: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
    };

    for (asked, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let (seen, status) = exchange(&[initialize(asked)], 1);
        assert_eq!(seen[0]["result"]["protocolVersion"], answered, "asked {asked}: {}", seen[0]);
        assert_eq!(seen[0]["result"]["serverInfo"]["name"], "spool", "{}", seen[0]);
        assert!(seen[0]["result"]["capabilities"]["tools"].is_object(), "{}", seen[0]);
        assert!(status.success(), "asked {asked}: {status}");
    }

    let (seen, status) = exchange(
        &[
            initialize("2025-06-18"),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                               "params": {"name": "approve", "arguments": {}}}),
        ],
        3,
    );
    let by_id = |id: i64| seen.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no reply {id}: {seen:?}"));
    assert_eq!(by_id(1)["result"], serde_json::json!({}), "{seen:?}");
    assert_eq!(by_id(2)["error"]["code"], -32602, "{seen:?}");
    assert!(status.success(), "{status}");

    let (_, status) = exchange(&[], 0);
    assert!(status.success(), "stdin closed before initialize: {status}");
}
