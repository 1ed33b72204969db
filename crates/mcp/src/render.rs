//! A `tools/call` result as the text the model reads: text blocks joined, structured
//! content as JSON, an image as `[image <mime>, N bytes]`, a resource link as its URI;
//! capped like the other tools' output. Read from the result's JSON form, which is the
//! protocol's own and moves less than rmcp's types.

use serde_json::Value;
use spool_engine::ToolOutput;

/// Most bytes of a result the model reads (as `read` and `grep` allow).
pub(crate) const MAX_OUTPUT_BYTES: usize = 50 * 1024;

/// The model's view of a result (`CallToolResult` as JSON); `isError` makes it a tool error.
pub(crate) fn render(result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        parts.push(block_text(block));
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        parts.push(structured.to_string());
    }
    let text = cap(parts.join("\n"));
    if result["isError"] == true { ToolOutput::error(text) } else { ToolOutput::ok(text) }
}

fn block_text(block: &Value) -> String {
    let str_of = |key: &str| block[key].as_str().unwrap_or_default().to_owned();
    match block["type"].as_str().unwrap_or_default() {
        "text" => str_of("text"),
        "image" | "audio" => {
            // Base64: three bytes per four characters, less the padding.
            let data = block["data"].as_str().unwrap_or_default();
            let bytes = data.len() / 4 * 3 - data.chars().rev().take_while(|c| *c == '=').count();
            format!("[{} {}, {bytes} bytes]", str_of("type"), str_of("mimeType"))
        }
        "resource_link" => str_of("uri"),
        "resource" => {
            let resource = &block["resource"];
            match resource["text"].as_str() {
                Some(text) => text.to_owned(),
                None => resource["uri"].as_str().unwrap_or_default().to_owned(),
            }
        }
        _ => block.to_string(),
    }
}

fn cap(mut text: String) -> String {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut end = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[output truncated at {} KiB]", MAX_OUTPUT_BYTES / 1024));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_are_joined_and_structured_content_follows_as_json() {
        let result = json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "resource_link", "uri": "file:///x", "name": "x"},
            ],
            "structuredContent": {"sum": 3},
        });
        let out = render(&result);
        assert!(!out.is_error);
        assert_eq!(out.text, "one\n[image image/png, 3 bytes]\nfile:///x\n{\"sum\":3}");
    }

    #[test]
    fn is_error_is_a_tool_error_and_long_output_is_capped() {
        assert!(render(&json!({"content": [{"type": "text", "text": "no"}], "isError": true})).is_error);
        let long = "é".repeat(MAX_OUTPUT_BYTES);
        let out = render(&json!({"content": [{"type": "text", "text": long}]}));
        assert!(out.text.len() < MAX_OUTPUT_BYTES + 50 && out.text.ends_with("KiB]"));
    }
}
