//! Plan mode with a real MCP server: `@modelcontextprotocol/server-everything` over
//! stdio, configured twice, as `trusted` (its entry sets `trust_read_only`) and as
//! `plain` (it does not). In plan mode a turn is offered only the tools the server
//! annotates `readOnlyHint: true` of the trusted entry; a call to any other is refused
//! without reaching the server, while the trusted read-only one runs. Outside plan mode
//! every tool of both is offered.

use crate::common::{TestOptions, TestServer};
use crate::mcp_support::{Offered, allow, everything, everything_entry, stdio_source};

use reqwest::StatusCode;
use serde_json::json;
use spool_engine::ToolSource;
use std::sync::Arc;

#[tokio::test]
async fn plan_mode_offers_only_the_read_only_tools_of_a_trusted_server() {
    let Some(index) = everything() else { return };
    let mut trusted = everything_entry(&index);
    trusted["name"] = json!("trusted");
    trusted["trust_read_only"] = json!(true);
    let mut plain = everything_entry(&index);
    plain["name"] = json!("plain");
    let sources: Vec<Arc<dyn ToolSource>> = vec![stdio_source(trusted), stdio_source(plain)];
    let offered = Offered::default();
    let server = TestServer::start_with(offered.options(sources, TestOptions::default())).await;
    let session = server.new_session().await;
    allow(&server, &session, "*_*").await;

    // Outside plan mode: everything of both.
    let run = server.run_prompt(&session, r#"tool: plain_echo {"message":"acting"}"#).await;
    assert_eq!(run["status"], "completed", "{run}");
    for tool in ["trusted_echo", "trusted_toggle-simulated-logging", "plain_echo", "plain_get-sum"] {
        assert!(offered.last_turn(tool), "{tool} not offered outside plan mode");
    }

    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "plan"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let calls = [
        r#"tool: trusted_get-sum {"a":2,"b":3}"#,
        r#"tool: trusted_toggle-simulated-logging {}"#,
        r#"tool: plain_get-sum {"a":2,"b":3}"#,
    ];
    for call in calls {
        let run = server.run_prompt(&session, call).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    // server-everything marks echo, get-sum and get-tiny-image read-only, and the
    // logging toggle and the elicitation trigger not.
    for tool in ["trusted_echo", "trusted_get-sum", "trusted_get-tiny-image"] {
        assert!(offered.last_turn(tool), "{tool} not offered in plan mode");
    }
    for tool in
        ["trusted_toggle-simulated-logging", "trusted_trigger-elicitation-request", "plain_echo", "plain_get-sum"]
    {
        assert!(!offered.last_turn(tool), "plan mode offered {tool}");
    }

    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(results[0], ("plain_echo".to_owned(), "Echo: acting".to_owned(), false));
    assert_eq!(results[1], ("trusted_get-sum".to_owned(), "The sum of 2 and 3 is 5.".to_owned(), false));
    for (tool, text, is_error) in &results[2..] {
        assert!(*is_error && text.contains("not available in plan mode"), "{tool} ran in plan mode: {text}");
    }
}
