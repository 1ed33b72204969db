//! One server tool as a Spool [`Tool`]: named `{server}_{tool}` (sanitised for the
//! model's APIs), its schema as the server gives it, its origin for the rules; a call
//! goes to the connection it was listed on.

use crate::connection::Connection;
use crate::render::render;
use async_trait::async_trait;
use rmcp::model::Tool as McpToolInfo;
use serde_json::{Value, json};
use spool_engine::{Tool, ToolContext, ToolOrigin, ToolOutput, ToolSpec};
use std::sync::Arc;
use std::time::Duration;

/// The longest tool name the model APIs accept.
const MAX_NAME: usize = 64;

pub(crate) struct McpTool {
    pub(crate) spec: ToolSpec,
    pub(crate) origin: ToolOrigin,
    pub(crate) connection: Arc<Connection>,
    pub(crate) call_timeout: Duration,
}

impl McpTool {
    pub(crate) fn new(
        server: &str,
        info: &McpToolInfo,
        trust_read_only: bool,
        connection: Arc<Connection>,
        call_timeout: Duration,
    ) -> McpTool {
        let mut parameters = Value::Object((*info.input_schema).clone());
        if parameters.get("type").is_none() {
            parameters["type"] = json!("object");
        }
        let spec = ToolSpec {
            name: tool_name(server, &info.name),
            description: info.description.as_deref().or(info.title.as_deref()).unwrap_or_default().to_owned(),
            parameters,
        };
        let read_only = info.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false);
        let origin = ToolOrigin {
            source: server.into(),
            tool: info.name.to_string(),
            read_only,
            trusted_read_only: trust_read_only,
        };
        McpTool { spec, origin, connection, call_timeout }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let call = self.connection.call(&self.origin.tool, args, self.call_timeout, ctx);
        tokio::select! {
            outcome = call => match outcome {
                Ok(result) => render(&result),
                Err(e) => ToolOutput::error(self.connection.scrubbed(e.0)),
            },
            // Dropping the call sends `notifications/cancelled` to the server.
            () = ctx.cancel.cancelled() => ToolOutput::error("the run was stopped"),
        }
    }

    fn origin(&self) -> Option<ToolOrigin> {
        Some(self.origin.clone())
    }
}

/// `{server}_{tool}` with every character outside `[a-zA-Z0-9_-]` made `_`; a name
/// longer than the APIs allow is cut and ends with a hash of the whole, so two long
/// names that share a start stay apart.
pub(crate) fn tool_name(server: &str, tool: &str) -> String {
    let full: String = format!("{server}_{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if full.len() <= MAX_NAME {
        return full;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash =
        format!("{server}\0{tool}").bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("{}_{hash:08x}", &full[..MAX_NAME - 9])
}

#[cfg(test)]
mod tests {
    use super::tool_name;

    #[test]
    fn names_are_sanitised_and_cut_with_a_hash() {
        assert_eq!(tool_name("everything", "get-sum"), "everything_get-sum");
        assert_eq!(tool_name("my.srv", "a b/c"), "my_srv_a_b_c");
        let (a, b) = (tool_name("s", &"x".repeat(100)), tool_name("s", &format!("{}y", "x".repeat(99))));
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
