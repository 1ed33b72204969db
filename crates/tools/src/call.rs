//! The shape every tool call shares: decode the arguments into the tool's own struct,
//! run the file system work on tokio's blocking pool, and turn the outcome into a
//! `ToolOutput`. Keeping it here makes each tool file only about what the tool does.

use crate::error::ToolError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spool_engine::ToolOutput;

/// Decodes `args` for `tool`, refusing anything its JSON Schema would: a value of the
/// wrong type, a missing required argument, an unknown one (every argument struct is
/// `deny_unknown_fields`). Constraints serde cannot express (`minimum`, `minLength`) are
/// checked by each tool after decoding.
///
/// Two leniencies, both deliberate: a missing arguments object (`null`) counts as `{}`,
/// so a tool whose arguments are all optional can be called bare; and an optional
/// argument given as `null` counts as absent, since models often write `null` for an
/// argument they mean to leave out and refusing that would only cost a retry.
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
pub(crate) async fn run_blocking<F, O>(work: F) -> ToolOutput
where
    F: FnOnce() -> Result<O, ToolError> + Send + 'static,
    O: Into<ToolOutput> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(out)) => out.into(),
        Ok(Err(err)) => err.into(),
        Err(join) => ToolError::Internal(join.to_string()).into(),
    }
}
