//! A [`Message`] as rows and back: a role, a `meta` JSON object and one part per
//! content block.
//!
//! The split follows the schema: content blocks are rows of their own (so a later
//! feature can address or search one block) while everything else about a message
//! is small and read whole, so it stays one JSON object. Both halves are produced by
//! the message's own serde encoding, which is the wire format: `meta` is the message's
//! JSON minus `role` and `content`, a part's `data` is the block's JSON minus `type`.
//! Decoding puts those keys back and lets serde rebuild the value, so a round trip is
//! lossless for every field the protocol defines, including ones added later.

use serde_json::{Map, Value};
use spool_engine::StoreError;
use spool_protocol::{Content, Message};

/// The `role` tag key of a serialized [`Message`] and the `type` tag of a [`Content`].
const ROLE_KEY: &str = "role";
const CONTENT_KEY: &str = "content";
const TYPE_KEY: &str = "type";

/// A message ready to be written: its `role` column, `meta` JSON and parts in order.
#[derive(Debug)]
pub(crate) struct EncodedMessage {
    pub role: &'static str,
    pub meta: String,
    pub parts: Vec<EncodedPart>,
}

/// One content block: its `kind` column and `data` JSON.
#[derive(Debug, PartialEq)]
pub(crate) struct EncodedPart {
    pub kind: String,
    pub data: String,
}

pub(crate) fn encode(message: &Message) -> Result<EncodedMessage, StoreError> {
    let mut meta = into_object(serde_json::to_value(message))?;
    meta.remove(ROLE_KEY);
    meta.remove(CONTENT_KEY);
    let parts = message.content().iter().map(encode_part).collect::<Result<_, _>>()?;
    Ok(EncodedMessage { role: message.role(), meta: to_json(&meta)?, parts })
}

fn encode_part(content: &Content) -> Result<EncodedPart, StoreError> {
    let mut data = into_object(serde_json::to_value(content))?;
    let kind = match data.remove(TYPE_KEY) {
        Some(Value::String(kind)) => kind,
        other => return Err(StoreError::Backend(format!("content block encoded without a type tag: {other:?}"))),
    };
    Ok(EncodedPart { kind, data: to_json(&data)? })
}

/// Rebuilds a message from its stored columns; `parts` are `(kind, data)` in position order.
pub(crate) fn decode(role: &str, meta: &str, parts: Vec<(String, String)>) -> Result<Message, StoreError> {
    let mut object = from_json_object(meta, "message meta")?;
    let content = parts
        .into_iter()
        .map(|(kind, data)| {
            let mut block = from_json_object(&data, "part data")?;
            block.insert(TYPE_KEY.to_owned(), Value::String(kind));
            Ok(Value::Object(block))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    object.insert(ROLE_KEY.to_owned(), Value::String(role.to_owned()));
    object.insert(CONTENT_KEY.to_owned(), Value::Array(content));
    serde_json::from_value(Value::Object(object))
        .map_err(|e| StoreError::Backend(format!("stored {role} message does not decode: {e}")))
}

/// The JSON object a message or block encodes to (both are serde structs or
/// internally tagged enums, so anything else is a bug in the protocol crate).
fn into_object(encoded: Result<Value, serde_json::Error>) -> Result<Map<String, Value>, StoreError> {
    match encoded {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(StoreError::Backend(format!("expected a JSON object, encoded {other}"))),
        Err(e) => Err(StoreError::Backend(format!("encoding a message: {e}"))),
    }
}

fn to_json(object: &Map<String, Value>) -> Result<String, StoreError> {
    serde_json::to_string(object).map_err(|e| StoreError::Backend(format!("encoding a message: {e}")))
}

fn from_json_object(text: &str, what: &str) -> Result<Map<String, Value>, StoreError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(StoreError::Backend(format!("stored {what} is not a JSON object: {other}"))),
        Err(e) => Err(StoreError::Backend(format!("stored {what} is not JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::{StopReason, Usage};

    #[test]
    fn meta_holds_everything_but_role_and_content() {
        let message = Message::Assistant {
            content: vec![Content::ToolCall {
                id: "call_1".into(),
                name: "read".into(),
                arguments: serde_json::json!({"path": "a"}),
            }],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input: 3, output: 4, ..Usage::default() },
            model: "m".into(),
            error_message: None,
            timestamp: 7,
        };
        let encoded = encode(&message).expect("encodes");
        assert_eq!(encoded.role, "assistant");
        let meta: Value = serde_json::from_str(&encoded.meta).expect("meta is JSON");
        assert_eq!(
            meta,
            serde_json::json!({"stopReason": "toolUse", "usage": {"input": 3, "output": 4, "reasoning": 0, "cacheRead": 0, "cacheWrite": 0, "cost": 0.0}, "model": "m", "timestamp": 7})
        );
        assert_eq!(encoded.parts.len(), 1);
        assert_eq!(encoded.parts[0].kind, "toolCall");
        let data: Value = serde_json::from_str(&encoded.parts[0].data).expect("data is JSON");
        assert_eq!(data, serde_json::json!({"id": "call_1", "name": "read", "arguments": {"path": "a"}}));

        let parts = encoded.parts.into_iter().map(|p| (p.kind, p.data)).collect();
        assert_eq!(decode(encoded.role, &encoded.meta, parts).expect("decodes"), message);
    }

    #[test]
    fn corrupt_rows_are_errors_not_panics() {
        assert!(matches!(decode("user", "not json", vec![]), Err(StoreError::Backend(_))));
        assert!(matches!(decode("user", "[]", vec![]), Err(StoreError::Backend(_))));
        assert!(matches!(decode("robot", r#"{"timestamp":1}"#, vec![]), Err(StoreError::Backend(_))));
        let bad_part = vec![("sound".to_owned(), "{}".to_owned())];
        assert!(matches!(decode("user", r#"{"timestamp":1}"#, bad_part), Err(StoreError::Backend(_))));
    }
}
