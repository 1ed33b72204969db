//! What both providers' request mappers need from a conversation besides the messages
//! themselves: which tool calls have results and which results have calls.
//!
//! Both APIs reject a request where an assistant tool call has no result after it, or a
//! result names no earlier call. A conversation can hold either: a run aborted between
//! the call and its result, or older turns summarized away by compaction. Leaving such
//! a call or result out of the request is better than a 400 on every later turn of the
//! session; the stored history keeps everything.

use spool_protocol::{Content, Message};
use std::collections::HashSet;

/// The tool call ids that can be sent: those with both a call and a result.
pub(crate) fn paired_calls(messages: &[Message]) -> HashSet<&str> {
    let mut called = HashSet::new();
    let mut paired = HashSet::new();
    for message in messages {
        match message {
            Message::Assistant { content, .. } => {
                for block in content {
                    if let Content::ToolCall { id, .. } = block {
                        called.insert(id.as_str());
                    }
                }
            }
            Message::ToolResult { tool_call_id, .. } if called.contains(tool_call_id.as_str()) => {
                paired.insert(tool_call_id.as_str());
            }
            _ => {}
        }
    }
    paired
}

/// All text blocks of `content`, joined with blank lines.
pub(crate) fn text_of(content: &[Content]) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|block| match block {
            Content::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n\n")
}

/// A tool call's arguments as JSON text. While streaming the engine keeps them as the
/// raw text, and it stays a string when it did not parse: that text is what the model
/// wrote, so it goes back unchanged.
pub(crate) fn arguments_text(arguments: &serde_json::Value) -> String {
    match arguments {
        serde_json::Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: vec![Content::ToolCall { id: id.into(), name: "read".into(), arguments: serde_json::json!({}) }],
            stop_reason: None,
            usage: Default::default(),
            model: "m".into(),
            error_message: None,
            timestamp: 0,
        }
    }

    fn result(id: &str) -> Message {
        Message::ToolResult {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: vec![],
            is_error: false,
            timestamp: 0,
            diff: None,
        }
    }

    #[test]
    fn only_calls_with_results_after_them_are_paired() {
        let messages = [result("early"), call("a"), result("a"), call("unanswered"), call("early")];
        assert_eq!(paired_calls(&messages), HashSet::from(["a"]));
    }
}
