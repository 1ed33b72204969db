//! A client for `@modelcontextprotocol/conformance`'s client scenarios, built on Spool's
//! own MCP client: a Streamable HTTP `[[mcp]]` entry for the URL the harness gives,
//! served by [`McpSource`] exactly as a session's turn is (initialize, tools/list, the
//! tools offered as `conformance_*`), and a call through the tool the model would call.
//!
//! Run by scripts/mcp-conformance as the harness's `--command`: the server's URL is the
//! last argument and the scenario is `MCP_CONFORMANCE_SCENARIO`. Exits non-zero on a
//! failure it can see itself; the harness judges the rest from what the server saw.
//!
//! Scenarios: `initialize` (connect and list), `tools_call` (call `add_numbers`),
//! `elicitation-sep1034-client-defaults` (a call whose server asks the person for a
//! form; the stand-in person accepts it as shown, and what Spool's decision route does
//! on "once", filling each field the person left as its default, is done here, since
//! the engine is not part of this client), `sse-retry` (a call whose response stream
//! the server closes early: the client is to come back for the result).

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use spool_engine::{AskPerson, LiveAnswer, LiveAsk, LiveAsker, SourceState, Tool, ToolContext, ToolScope, ToolSource};
use spool_mcp::{McpEntry, McpSource};
use std::sync::Arc;

const SERVER: &str = "conformance";

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("conformance client: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let url =
        std::env::args().next_back().filter(|a| a.contains("://")).ok_or("usage: conformance_client <server url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").map_err(|_| "MCP_CONFORMANCE_SCENARIO is unset")?;
    spool_mcp::install_crypto_provider();

    let entry: McpEntry = serde_json::from_value(json!({"name": SERVER, "url": url})).map_err(|e| e.to_string())?;
    let config = spool_mcp::servers(vec![entry]).map_err(|e| e.to_string())?.remove(0);
    let source = McpSource::new(config, Default::default(), None);
    let root = std::env::current_dir().map_err(|e| e.to_string())?;
    let scope = ToolScope { session_id: spool_protocol::SessionId::new(), root: root.clone() };
    let tools = listed(&source, &scope).await?;
    let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
    eprintln!("tools: {names:?}");

    let (tool, args) = match scenario.as_str() {
        "initialize" => return Ok(()),
        "tools_call" => ("add_numbers", json!({"a": 5, "b": 3})),
        "elicitation-sep1034-client-defaults" => ("test_client_elicitation_defaults", json!({})),
        "sse-retry" => ("test_reconnection", json!({})),
        other => return Err(format!("scenario {other} is not one this client plays")),
    };
    let name = format!("{SERVER}_{tool}");
    let tool = tools.iter().find(|t| t.spec().name == name).ok_or(format!("{name} is not among {names:?}"))?;
    let ctx = ToolContext {
        root,
        root_id: None,
        cancel: Default::default(),
        data_dir: None,
        progress: Default::default(),
        asker: LiveAsker::new(Arc::new(AcceptAsShown)),
        sampler: Default::default(),
    };
    let output = tool.call(args, &ctx).await;
    eprintln!("result: {}", output.text);
    if output.is_error {
        return Err(format!("{name} failed: {}", output.text));
    }
    Ok(())
}

/// The source's tools once its connection is up: a source starts its server in a task
/// of its own and offers nothing until it is, so a turn that comes too early gets none.
async fn listed(source: &McpSource, scope: &ToolScope) -> Result<Vec<Arc<dyn Tool>>, String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let tools = source.tools(scope).await;
        match source.status().map(|s| s.state) {
            Some(SourceState::Ready) => return Ok(tools),
            Some(SourceState::Failed { reason, .. }) => return Err(reason),
            _ if tokio::time::Instant::now() > deadline => return Err("not connected within 10 s".into()),
            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

/// The person, who accepts each form as it is shown: every field at its default.
struct AcceptAsShown;

#[async_trait]
impl AskPerson for AcceptAsShown {
    async fn ask(&self, ask: LiveAsk) -> LiveAnswer {
        eprintln!("asked: {}", ask.message);
        let empty = Map::new();
        let properties = ask.schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let fields = properties.iter().filter_map(|(name, p)| Some((name.clone(), p.get("default")?.clone())));
        LiveAnswer::Accept(Value::Object(fields.collect()))
    }
}
