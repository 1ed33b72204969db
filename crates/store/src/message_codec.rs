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
/// The JSON stays a [`Value`] so each backend stores it its own way (text in SQLite,
/// `JSONB` in PostgreSQL).
#[derive(Debug)]
pub(crate) struct EncodedMessage {
    pub role: &'static str,
    pub meta: Value,
    pub parts: Vec<EncodedPart>,
}

/// One content block: its `kind` column and `data` JSON.
#[derive(Debug, PartialEq)]
pub(crate) struct EncodedPart {
    pub kind: String,
    pub data: Value,
}

pub(crate) fn encode(message: &Message) -> Result<EncodedMessage, StoreError> {
    let mut meta = into_object(serde_json::to_value(message))?;
    meta.remove(ROLE_KEY);
    meta.remove(CONTENT_KEY);
    let parts = message.content().iter().map(encode_part).collect::<Result<_, _>>()?;
    Ok(EncodedMessage { role: message.role(), meta: Value::Object(meta), parts })
}

fn encode_part(content: &Content) -> Result<EncodedPart, StoreError> {
    let mut data = into_object(serde_json::to_value(content))?;
    let kind = match data.remove(TYPE_KEY) {
        Some(Value::String(kind)) => kind,
        other => return Err(StoreError::Backend(format!("content block encoded without a type tag: {other:?}"))),
    };
    Ok(EncodedPart { kind, data: Value::Object(data) })
}

/// Rebuilds a message from its stored columns; `parts` are `(kind, data)` in position order.
pub(crate) fn decode(role: &str, meta: Value, parts: Vec<(String, Value)>) -> Result<Message, StoreError> {
    let mut object = json_object(meta, "message meta")?;
    let content = parts
        .into_iter()
        .map(|(kind, data)| {
            let mut block = json_object(data, "part data")?;
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

fn json_object(value: Value, what: &str) -> Result<Map<String, Value>, StoreError> {
    match value {
        Value::Object(object) => Ok(object),
        other => Err(StoreError::Backend(format!("stored {what} is not a JSON object: {other}"))),
    }
}

/// The message's own time, stored as the row's `created_at`: it is when the message
/// came to be, which is what a reader of the table wants, and needs no second clock.
pub(crate) fn message_timestamp(message: &spool_protocol::Message) -> i64 {
    use spool_protocol::Message;
    match message {
        Message::User { timestamp, .. }
        | Message::Assistant { timestamp, .. }
        | Message::ToolResult { timestamp, .. } => *timestamp,
    }
}

/// Parts have no typed id in the protocol (nothing outside the store names one), so
/// the store mints them in the same shape: a `prt_` prefix and a lower-case ULID.
pub(crate) fn new_part_id() -> String {
    format!("prt_{}", ulid::Ulid::new().to_string().to_ascii_lowercase())
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
        assert_eq!(
            encoded.meta,
            serde_json::json!({"stopReason": "toolUse", "usage": {"input": 3, "output": 4, "reasoning": 0, "cacheRead": 0, "cacheWrite": 0, "cost": 0.0}, "model": "m", "timestamp": 7})
        );
        assert_eq!(encoded.parts.len(), 1);
        assert_eq!(encoded.parts[0].kind, "toolCall");
        assert_eq!(
            encoded.parts[0].data,
            serde_json::json!({"id": "call_1", "name": "read", "arguments": {"path": "a"}})
        );

        let parts = encoded.parts.into_iter().map(|p| (p.kind, p.data)).collect();
        assert_eq!(decode(encoded.role, encoded.meta, parts).expect("decodes"), message);
    }

    #[test]
    fn corrupt_rows_are_errors_not_panics() {
        let meta = || serde_json::json!({"timestamp": 1});
        assert!(matches!(decode("user", serde_json::json!("not an object"), vec![]), Err(StoreError::Backend(_))));
        assert!(matches!(decode("user", serde_json::json!([]), vec![]), Err(StoreError::Backend(_))));
        assert!(matches!(decode("robot", meta(), vec![]), Err(StoreError::Backend(_))));
        let bad_part = vec![("sound".to_owned(), serde_json::json!({}))];
        assert!(matches!(decode("user", meta(), bad_part), Err(StoreError::Backend(_))));
        let not_object = vec![("text".to_owned(), serde_json::json!("hi"))];
        assert!(matches!(decode("user", meta(), not_object), Err(StoreError::Backend(_))));
    }
}
