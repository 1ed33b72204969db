//! The shape every tool call shares: decode the arguments into the tool's own struct,
//! run the file system work on tokio's blocking pool, and turn the outcome into a
//! `ToolOutput`. Keeping it here makes each tool file only about what the tool does.

use crate::error::ToolError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spool_engine::ToolOutput;

/// Decodes `args` for `tool`. A missing arguments object (`null`) counts as `{}`, so a
/// tool whose arguments are all optional can be called bare.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &'static str, args: Value) -> Result<T, ToolError> {
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        Value::Object(_) => args,
        other => {
            let kind = match other {
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                _ => "an array",
            };
            return Err(ToolError::BadArguments { tool, reason: format!("expected a JSON object, got {kind}") });
        }
    };
    serde_json::from_value(args).map_err(|e| ToolError::BadArguments { tool, reason: e.to_string() })
}

/// Runs blocking file system work off the async threads.
pub(crate) async fn run_blocking<F>(work: F) -> ToolOutput
where
    F: FnOnce() -> Result<String, ToolError> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(text)) => ToolOutput::ok(text),
        Ok(Err(err)) => err.into(),
        Err(join) => ToolError::Internal(join.to_string()).into(),
    }
}
