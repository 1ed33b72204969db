//! Tools that live in the client (issue 40): a prompt declares them
//! ([`spool_protocol::api::ClientTool`]), the model is offered them beside Spool's own,
//! and a call of one parks the run until the client posts the result (an approval of
//! kind `provide_input` marked `"client": true`, answered with `Decision::Output`).
//!
//! Here: the checks a declaration passes before its prompt is accepted
//! ([`check_declared`]), the [`Tool`] a declaration is offered as, and the permission
//! rules as a client tool reads them ([`client_rules`]). Parking and resuming are the
//! run's (`run/tool_call.rs`), deciding is the approvals' (`approvals.rs`).

use crate::error::{EngineError, Result};
use crate::model::ToolSpec;
use crate::{Tool, ToolContext, ToolOutput, ToolRegistry};
use spool_protocol::api::ClientTool as Declared;
use spool_protocol::approval::ClientOutput;
use spool_protocol::{PermissionAction, PermissionRule};
use std::collections::HashSet;

/// Most client tools one prompt may declare.
pub const MAX_CLIENT_TOOLS: usize = 32;
/// Longest tool description, in bytes.
pub const MAX_DESCRIPTION: usize = 4 * 1024;
/// Largest parameters schema, serialized, in bytes.
pub const MAX_SCHEMA: usize = 16 * 1024;
/// Deepest nesting of a parameters schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Largest declaration of all a prompt's tools together, serialized, in bytes.
pub const MAX_DECLARED: usize = 64 * 1024;
/// Largest result a client may report for one call, serialized, in bytes.
pub const MAX_OUTPUT: usize = 256 * 1024;

/// Checks a prompt's declared client tools: names a model API accepts
/// (`^[A-Za-z0-9_-]{1,64}$`), unique and not one of Spool's own tools (`static_tools`);
/// a description of at most 4 KiB; parameters absent or a JSON object schema of
/// `type: "object"`, at most 16 KiB and 32 levels deep; at most 32 tools and 64 KiB
/// together. Returns the declarations as they are kept (parameters filled in).
pub fn check_declared(declared: Vec<Declared>, static_tools: &ToolRegistry) -> Result<Vec<Declared>> {
    let invalid = |message: String| EngineError::invalid("invalid_client_tool", message);
    if declared.len() > MAX_CLIENT_TOOLS {
        return Err(invalid(format!("{} client tools declared; the limit is {MAX_CLIENT_TOOLS}", declared.len())));
    }
    let mut names = HashSet::new();
    let mut total = 0;
    let mut kept = Vec::with_capacity(declared.len());
    for mut tool in declared {
        let name = &tool.name;
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(invalid(format!(
                "client tool name {:?} is not 1 to 64 letters, digits, '_' or '-'",
                shorten(name)
            )));
        }
        if !names.insert(name.clone()) {
            return Err(invalid(format!("client tool {name:?} is declared twice")));
        }
        if static_tools.get(name).is_some() {
            return Err(EngineError::invalid(
                "client_tool_conflict",
                format!("{name:?} is one of Spool's own tools; give the client tool another name"),
            ));
        }
        if tool.description.len() > MAX_DESCRIPTION {
            return Err(invalid(format!(
                "the description of client tool {name:?} is {} bytes; the limit is {MAX_DESCRIPTION}",
                tool.description.len()
            )));
        }
        let schema = tool.parameters.take().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(invalid(format!(
                "the parameters of client tool {name:?} must be a JSON Schema object with \"type\": \"object\""
            )));
        }
        let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
        if size > MAX_SCHEMA {
            return Err(invalid(format!(
                "the parameters schema of client tool {name:?} is {size} bytes; the limit is {MAX_SCHEMA}"
            )));
        }
        if depth(&schema) > MAX_SCHEMA_DEPTH {
            return Err(invalid(format!(
                "the parameters schema of client tool {name:?} nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        total += size + tool.name.len() + tool.description.len();
        tool.parameters = Some(schema);
        kept.push(tool);
    }
    if total > MAX_DECLARED {
        return Err(invalid(format!(
            "the client tools declared are {total} bytes together; the limit is {MAX_DECLARED}"
        )));
    }
    Ok(kept)
}

fn shorten(name: &str) -> String {
    name.chars().take(80).collect()
}

/// How deep a JSON value nests (a scalar is 0, `{}` or `[]` is 1).
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A declared client tool as the run offers it: its spec is the declaration, it is
/// offered in every mode (the client decides what it does, and a plan-mode prompt that
/// declares a tool wants it used), and it is never called here — a call parks the run
/// for the client instead (`RunTask::park_client`).
pub(crate) struct ClientTool {
    declared: Declared,
}

impl ClientTool {
    pub fn new(declared: Declared) -> Self {
        Self { declared }
    }
}

#[async_trait::async_trait]
impl Tool for ClientTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.declared.name.clone(),
            description: self.declared.description.clone(),
            parameters: self.declared.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object"})),
        }
    }

    async fn call(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        // Never reached: the run parks a client call instead of calling it.
        ToolOutput::error(format!("{} runs in the client, not on the server", self.declared.name))
    }

    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn describe(&self, _args: &serde_json::Value) -> String {
        format!("{} (a tool the client runs)", self.declared.name)
    }
}

/// The server rules a call of client tool `name` is judged by: an implicit `allow`
/// for it first, and the server's catch-all `* ask` (the default for Spool's own tools
/// that change things) left out — the client already gates its own tools, so only
/// rules that say something else about it (a `deny`, an `ask` naming it or a pattern
/// of tools, or any session rule a person set) change the verdict. A server `*`
/// `deny` still denies every tool, client tools too.
///
/// (The plan said "prepend an implicit allow"; with `evaluate_call`'s last match
/// winning, the default rules' leading `* ask` would still match after it, so the
/// catch-all ask has to go as well.)
pub(crate) fn client_rules(server: &[PermissionRule], name: &str) -> Vec<PermissionRule> {
    std::iter::once(PermissionRule::new(name, "*", PermissionAction::Allow))
        .chain(server.iter().filter(|r| !(r.tool == "*" && r.action == PermissionAction::Ask)).cloned())
        .collect()
}

/// The text the model reads of a client's result: a string as it is, anything else as
/// compact JSON.
pub(crate) fn output_text(output: &ClientOutput) -> String {
    match &output.output {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Refuses a client's result over [`MAX_OUTPUT`] bytes (413 `output_too_large`).
pub(crate) fn check_output(output: &ClientOutput) -> Result<()> {
    let size = serde_json::to_string(&output.output).map_or(usize::MAX, |s| s.len());
    if size > MAX_OUTPUT {
        return Err(EngineError::TooLarge {
            code: "output_too_large",
            message: format!("the tool's output is {size} bytes; the limit is {MAX_OUTPUT}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Declared {
        Declared { name: name.into(), description: "d".into(), parameters: None }
    }

    fn code(result: Result<Vec<Declared>>) -> &'static str {
        match result {
            Err(EngineError::Invalid { code, .. }) => code,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    struct Read;
    #[async_trait::async_trait]
    impl Tool for Read {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "read".into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, _: serde_json::Value, _: &ToolContext) -> ToolOutput {
            ToolOutput::ok("")
        }
    }

    #[test]
    fn declarations_are_checked_and_kept_with_a_schema() {
        let spools = ToolRegistry::new().with(Read);
        let kept = check_declared(vec![tool("get_location"), tool("a-b_9")], &spools).unwrap();
        assert_eq!(kept[0].parameters, Some(json!({"type": "object"})));
        assert_eq!(code(check_declared(vec![tool("read")], &spools)), "client_tool_conflict");
        for bad in ["", "has space", "dot.name", &"x".repeat(65)] {
            assert_eq!(code(check_declared(vec![tool(bad)], &spools)), "invalid_client_tool", "{bad:?}");
        }
        assert_eq!(code(check_declared(vec![tool("a"), tool("a")], &spools)), "invalid_client_tool");
        let many = (0..33).map(|i| tool(&format!("t{i}"))).collect();
        assert_eq!(code(check_declared(many, &spools)), "invalid_client_tool");
        let long = Declared { description: "x".repeat(MAX_DESCRIPTION + 1), ..tool("a") };
        assert_eq!(code(check_declared(vec![long], &spools)), "invalid_client_tool");
        let array = Declared { parameters: Some(json!({"type": "array"})), ..tool("a") };
        assert_eq!(code(check_declared(vec![array], &spools)), "invalid_client_tool");
        let mut deep = json!({});
        for _ in 0..40 {
            deep = json!({"x": deep});
        }
        let deep = Declared { parameters: Some(json!({"type": "object", "properties": deep})), ..tool("a") };
        assert_eq!(code(check_declared(vec![deep], &spools)), "invalid_client_tool");
        let big = Declared {
            parameters: Some(json!({"type": "object", "description": "y".repeat(MAX_SCHEMA)})),
            ..tool("a")
        };
        assert_eq!(code(check_declared(vec![big], &spools)), "invalid_client_tool");
    }

    #[test]
    fn a_client_tool_is_allowed_unless_a_rule_says_otherwise() {
        use spool_protocol::CallSubject;
        use spool_protocol::approval::{default_rules, evaluate_call};
        let subject = CallSubject::single(None);
        let verdict = |server: &[PermissionRule], session: &[PermissionRule]| {
            evaluate_call(&client_rules(server, "get_location"), session, "get_location", &subject)
        };
        assert_eq!(verdict(&default_rules(), &[]), PermissionAction::Allow);
        let deny = PermissionRule::new("get_location", "*", PermissionAction::Deny);
        assert_eq!(verdict(&[default_rules(), vec![deny.clone()]].concat(), &[]), PermissionAction::Deny);
        assert_eq!(verdict(&default_rules(), std::slice::from_ref(&deny)), PermissionAction::Deny);
        let ask = PermissionRule::new("get_*", "*", PermissionAction::Ask);
        assert_eq!(verdict(&default_rules(), &[ask]), PermissionAction::Ask);
        let all = PermissionRule::new("*", "*", PermissionAction::Deny);
        assert_eq!(verdict(&[all], &[]), PermissionAction::Deny);
    }

    #[test]
    fn an_output_reads_as_text_and_a_huge_one_is_refused() {
        assert_eq!(output_text(&ClientOutput { output: json!("sunny"), is_error: false }), "sunny");
        assert_eq!(output_text(&ClientOutput { output: json!({"t": 7}), is_error: false }), r#"{"t":7}"#);
        let huge = ClientOutput { output: json!("z".repeat(MAX_OUTPUT)), is_error: false };
        assert!(matches!(check_output(&huge), Err(EngineError::TooLarge { code: "output_too_large", .. })));
    }
}
