//! A small MCP server on the official Python SDK (`tests/mcp/probe_server.py`, its `mcp`
//! package pinned in `tests/mcp/requirements.txt` and installed by scripts/test into
//! `tests/mcp/.venv`, found through `SPOOL_TEST_MCP_PYTHON`), through a real Spool
//! server: its ordinary tool runs once approved, and its probes, approved too, show what
//! a stdio server cannot do from inside Spool's sandbox: read the data directory, write
//! outside the project, or see the server's secrets in its environment; and its entry's
//! `network` decides whether it may open a TCP connection.

use crate::common;
use crate::mcp_support::{config, decide, serve, server_path};

use common::TestServer;
use serde_json::{Value, json};
use spool_mcp::McpSource;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The venv's Python.
fn python() -> Option<String> {
    server_path(
        "SPOOL_TEST_MCP_PYTHON",
        "python3 -m venv tests/mcp/.venv, pip install -r tests/mcp/requirements.txt into it, and point it at \
         tests/mcp/.venv/bin/python",
    )
}

fn probe_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/probe_server.py")
}

/// A Spool server whose sessions get the probe server's tools, as `probe_*`, started
/// in the bash sandbox with `data_dir` as the directory it must not read.
async fn start(python: &str, data_dir: &Path) -> (TestServer, String) {
    start_entry(json!({"name": "probe", "command": python, "args": [probe_server()]}), data_dir).await
}

/// [`start`] with `entry` as the `[[mcp]]` entry.
async fn start_entry(entry: Value, data_dir: &Path) -> (TestServer, String) {
    let source = McpSource::stdio(config(entry), Default::default(), Some(data_dir.to_path_buf())).expect("stdio");
    serve(Arc::new(source)).await
}

/// Calls `tool` with `args` after approving it once; returns its result: (text, is_error).
async fn call_approved(server: &TestServer, session: &str, tool: &str, args: Value) -> (String, bool) {
    let (run_id, approval) = server.park(session, &format!("tool: {tool} {args}")).await;
    assert_eq!(approval["payload"]["source"]["server"], "probe", "{approval}");
    decide(server, session, &approval, "once").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let (name, text, is_error) = server.tool_results(session).await.pop().expect("a tool result");
    assert_eq!(name, tool);
    (text, is_error)
}

#[tokio::test]
async fn a_python_sdk_server_tool_runs_once_approved() {
    let Some(python) = python() else { return };
    let data = tempfile::tempdir().expect("data dir");
    let (server, session) = start(&python, data.path()).await;
    let (text, is_error) = call_approved(&server, &session, "probe_add", json!({"a": 2, "b": 40})).await;
    assert_eq!((text.as_str(), is_error), ("2 + 40 = 42", false));
}

#[tokio::test]
async fn a_python_sdk_server_cannot_read_the_data_dir_write_outside_or_see_secrets() {
    const SECRET: &str = "sk-server-anthropic-5e4d3c2b1a";
    let Some(python) = python() else { return };
    let test = "a_python_sdk_server_cannot_read_the_data_dir_write_outside_or_see_secrets";
    if !common::in_own_process(module_path!(), test, &[("ANTHROPIC_API_KEY", SECRET)]) {
        return;
    }
    let data = tempfile::tempdir().expect("data dir");
    let store = data.path().join("spool.db");
    std::fs::write(&store, "SQLite format 3\0the sessions").expect("store");
    let (server, session) = start(&python, data.path()).await;

    // The server's own variable never reaches it (the allow-list), Landlock or not.
    let (text, _) = call_approved(&server, &session, "probe_env", json!({"name": "ANTHROPIC_API_KEY"})).await;
    assert_eq!(text, "ANTHROPIC_API_KEY=[(unset)]");

    // Inside the project it may write: the probe works, so a refusal below is the sandbox.
    let inside = server.project_dir().join("inside.txt");
    let (text, is_error) =
        call_approved(&server, &session, "probe_write_file", json!({"path": inside, "text": "in"})).await;
    assert!(!is_error, "{text}");
    assert_eq!(std::fs::read_to_string(&inside).expect("written in the project"), "in");

    if !spool_tools::probe_sandbox(&spool_tools::SandboxSettings::default()).landlock {
        eprintln!("skipped the Landlock half: this kernel has no Landlock");
        return;
    }
    let (text, is_error) = call_approved(&server, &session, "probe_read_file", json!({"path": store})).await;
    assert!(is_error && text.contains("Permission denied"), "the data dir was read: {text}");
    assert!(!text.contains("SQLite"), "{text}");

    // Outside the project: /tmp itself, not the server's temp dir below it.
    let outside = std::env::temp_dir().join(format!("spool-mcp-escape-{}.txt", std::process::id()));
    let (text, is_error) =
        call_approved(&server, &session, "probe_write_file", json!({"path": outside, "text": "out"})).await;
    let escaped = outside.exists();
    let _ = std::fs::remove_file(&outside);
    assert!(is_error && text.contains("Permission denied"), "{text}");
    assert!(!escaped, "a write outside the project landed: {text}");
}

#[tokio::test]
async fn a_python_sdk_server_reaches_the_network_only_when_its_entry_allows_it() {
    let Some(python) = python() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let accepted = || std::iter::from_fn(|| listener.accept().ok()).count();
    let data = tempfile::tempdir().expect("data dir");
    let entry = |network: Option<bool>| {
        let mut entry = json!({"name": "probe", "command": python, "args": [probe_server()]});
        if let Some(network) = network {
            entry["network"] = json!(network);
        }
        entry
    };

    let (server, session) = start_entry(entry(Some(true)), data.path()).await;
    let (text, is_error) = call_approved(&server, &session, "probe_connect", json!({"port": port})).await;
    assert_eq!((text.as_str(), is_error), (format!("connected to port {port}").as_str(), false));
    assert_eq!(accepted(), 1, "the connection reached the listener");

    if !spool_tools::probe_sandbox(&spool_tools::SandboxSettings::default()).landlock {
        eprintln!("skipped the network-off half: this kernel has no Landlock");
        return;
    }
    // No `network` in the entry: off, whatever the bash sandbox's own setting.
    for network in [None, Some(false)] {
        let (server, session) = start_entry(entry(network), data.path()).await;
        let (text, is_error) = call_approved(&server, &session, "probe_connect", json!({"port": port})).await;
        assert!(is_error && text.contains("Permission denied"), "network {network:?}: {text}");
        assert_eq!(accepted(), 0, "network {network:?}: a connection got through");
    }
}
