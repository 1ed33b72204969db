//! A `tools/call` result as the text the model reads. Read from the result's JSON
//! form, which is the protocol's own and moves less than rmcp's types.
//!
//! - Text blocks as they are, joined by newlines.
//! - An image or audio block as `[image image/png, 95 bytes]`: the model APIs Spool
//!   speaks take tool results as text, and base64 in a result only costs tokens.
//! - A resource link as `[resource link: <uri> (name, mime): description]`; an
//!   embedded resource as its text, or `[resource <uri>, mime, N bytes]` for a blob.
//! - Structured content as JSON, unless a text block already holds the same JSON (the
//!   spec asks servers to send both, and the model needs it once).
//! - Capped like `bash` output: the first [`HEAD_BYTES`] and the last [`TAIL_BYTES`],
//!   with a line saying how much was left out between them.

use serde_json::Value;
use spool_engine::ToolOutput;

/// The start of a long result the model reads (as `bash` keeps).
pub(crate) const HEAD_BYTES: usize = 25 * 1024;
/// The end of a long result the model reads.
pub(crate) const TAIL_BYTES: usize = 25 * 1024;

/// The model's view of a result (`CallToolResult` as JSON); `isError` makes it a tool error.
pub(crate) fn render(result: &Value) -> ToolOutput {
    let blocks: &[Value] = result["content"].as_array().map_or(&[], Vec::as_slice);
    let mut parts: Vec<String> = blocks.iter().map(block_text).collect();
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        let echoed = blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .any(|text| serde_json::from_str::<Value>(text).is_ok_and(|v| echoes(&v, structured)));
        if !echoed {
            parts.push(structured.to_string());
        }
    }
    let text = cap(&parts.join("\n"));
    if result["isError"] == true { ToolOutput::error(text) } else { ToolOutput::ok(text) }
}

/// Whether a text block's value is the structured content: the same value, or the one
/// value a server wrapped as `{"result": …}` (the Python SDK does so for a tool that
/// returns a number, a string or a list, and writes the bare value as the text).
fn echoes(text: &Value, structured: &Value) -> bool {
    text == structured || structured.as_object().is_some_and(|o| o.len() == 1 && o.get("result") == Some(text))
}

fn block_text(block: &Value) -> String {
    let str_of = |key: &str| block[key].as_str().unwrap_or_default().to_owned();
    match block["type"].as_str().unwrap_or_default() {
        "text" => str_of("text"),
        "image" | "audio" => {
            format!("[{} {}, {} bytes]", str_of("type"), str_of("mimeType"), base64_len(&block["data"]))
        }
        "resource_link" => {
            let described: Vec<String> =
                ["name", "mimeType"].iter().map(|k| str_of(k)).filter(|v| !v.is_empty()).collect();
            let mut text = format!("[resource link: {}", str_of("uri"));
            if !described.is_empty() {
                text.push_str(&format!(" ({})", described.join(", ")));
            }
            if let Some(description) = block["description"].as_str().filter(|d| !d.is_empty()) {
                text.push_str(&format!(": {description}"));
            }
            text.push(']');
            text
        }
        "resource" => {
            let resource = &block["resource"];
            match resource["text"].as_str() {
                Some(text) => text.to_owned(),
                None => {
                    let uri = resource["uri"].as_str().unwrap_or_default();
                    let mime = resource["mimeType"].as_str().map(|m| format!(", {m}")).unwrap_or_default();
                    format!("[resource {uri}{mime}, {} bytes]", base64_len(&resource["blob"]))
                }
            }
        }
        _ => block.to_string(),
    }
}

/// The length of what a base64 string encodes: three bytes per four characters, less
/// the padding.
fn base64_len(data: &Value) -> usize {
    let data = data.as_str().unwrap_or_default();
    (data.len() / 4 * 3).saturating_sub(data.chars().rev().take_while(|c| *c == '=').count())
}

/// `text` whole, or its start and end with the number of bytes left out between.
fn cap(text: &str) -> String {
    if text.len() <= HEAD_BYTES + TAIL_BYTES {
        return text.to_owned();
    }
    let mut head = HEAD_BYTES;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - TAIL_BYTES;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}\n… {} bytes of output omitted …\n{}", &text[..head], tail - head, &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_block_reads_as_text() {
        let result = json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "audio", "mimeType": "audio/wav", "data": "AAA="},
                {"type": "resource_link", "uri": "file:///x", "name": "x", "description": "the x"},
                {"type": "resource", "resource": {"uri": "file:///y", "mimeType": "text/plain", "text": "why"}},
                {"type": "resource", "resource": {"uri": "file:///z", "mimeType": "application/gzip", "blob": "AAAAAA=="}},
            ],
            "structuredContent": {"sum": 3},
        });
        let out = render(&result);
        assert!(!out.is_error);
        let expected = "one\n[image image/png, 3 bytes]\n[audio audio/wav, 2 bytes]\n[resource link: file:///x (x): \
                        the x]\nwhy\n[resource file:///z, application/gzip, 4 bytes]\n{\"sum\":3}";
        assert_eq!(out.text, expected);
    }

    #[test]
    fn structured_content_a_text_block_already_holds_is_not_repeated() {
        let result = json!({
            "content": [{"type": "text", "text": "{\"temperature\": 33, \"conditions\": \"Cloudy\"}"}],
            "structuredContent": {"conditions": "Cloudy", "temperature": 33},
        });
        assert_eq!(render(&result).text, "{\"temperature\": 33, \"conditions\": \"Cloudy\"}");
        let wrapped = json!({"content": [{"type": "text", "text": "42"}], "structuredContent": {"result": 42}});
        assert_eq!(render(&wrapped).text, "42");
        let other = json!({"content": [{"type": "text", "text": "42"}], "structuredContent": {"result": 41}});
        assert_eq!(render(&other).text, "42\n{\"result\":41}");
    }

    #[test]
    fn is_error_is_a_tool_error_and_long_output_keeps_its_start_and_end() {
        assert!(render(&json!({"content": [{"type": "text", "text": "no"}], "isError": true})).is_error);
        let long = format!("start{}end", "é".repeat(HEAD_BYTES + TAIL_BYTES));
        let out = render(&json!({"content": [{"type": "text", "text": long}]}));
        assert!(out.text.starts_with("startéé") && out.text.ends_with("ééend"));
        let (head, rest) = out.text.split_once("\n… ").expect("the omission line");
        let (omitted, tail) = rest.split_once(" bytes of output omitted …\n").expect("the omission line");
        assert!(head.len() <= HEAD_BYTES && tail.len() <= TAIL_BYTES);
        assert_eq!(head.len() + omitted.parse::<usize>().expect("a count") + tail.len(), long.len());
    }
}
