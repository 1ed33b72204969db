//! Conversation messages, in the shape of the coding-agent contract: a user message,
//! an assistant message made of content blocks (text, thinking, tool calls), and a
//! tool result. Messages are durable once they end; while the model streams, the
//! assistant message lives only as a draft in the session's state.

use crate::domain::Usage;
use crate::ids::{AttachmentId, MessageId};
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One block of message content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Content {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCall {
        id: String,
        name: String,
        arguments: serde_json::Value,
    },
    /// A file the user sent with a prompt (only in user messages). The bytes are not
    /// here: `url` fetches them with the owner's credentials, and the engine hands them
    /// to the model by `sha256` (see `spool_engine::attachments`).
    #[serde(rename_all = "camelCase")]
    File {
        id: AttachmentId,
        /// The file's name as sent, sanitized: a last path segment, no control
        /// characters, never a path on disk.
        name: String,
        /// What the bytes are, as Spool sniffed them (a sender's claim is not trusted).
        media_type: String,
        size: u64,
        /// The bytes' SHA-256, in lowercase hex.
        sha256: String,
        /// `/api/attachments/{id}`: relative to the server.
        url: String,
    },
}

/// Why an assistant message ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The model asked for tool calls.
    ToolUse,
    /// The output limit was reached.
    Length,
    /// The run was aborted mid-message.
    Aborted,
    /// The model failed mid-message.
    Error,
}

/// A message as the agent loop and the model see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum Message {
    User {
        content: Vec<Content>,
        timestamp: Millis,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        content: Vec<Content>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        #[serde(default)]
        usage: Usage,
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
        timestamp: Millis,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        tool_call_id: String,
        tool_name: String,
        content: Vec<Content>,
        is_error: bool,
        timestamp: Millis,
        /// What a successful `write` or `edit` changed: a unified diff of the file before
        /// against after, at most [`RESULT_DIFF_CAP`] bytes (a longer one ends with a
        /// line saying how much was left out). Kept with the result so a finished card
        /// shows the change after a reload too; the model is never sent it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
    },
}

/// The most bytes of diff a stored tool result keeps (64 KiB): a card is no file viewer,
/// and every snapshot that holds the result carries it.
pub const RESULT_DIFF_CAP: usize = 64 * 1024;

impl Message {
    pub fn user_text(text: impl Into<String>, timestamp: Millis) -> Message {
        Message::User { content: vec![Content::Text { text: text.into() }], timestamp }
    }

    pub fn role(&self) -> &'static str {
        match self {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::ToolResult { .. } => "toolResult",
        }
    }

    pub fn is_user(&self) -> bool {
        matches!(self, Message::User { .. })
    }

    pub fn content(&self) -> &[Content] {
        match self {
            Message::User { content, .. }
            | Message::Assistant { content, .. }
            | Message::ToolResult { content, .. } => content,
        }
    }

    /// The files among the message's blocks (a user message's attachments).
    pub fn files(&self) -> impl Iterator<Item = &Content> {
        self.content().iter().filter(|c| matches!(c, Content::File { .. }))
    }

    /// The message's files as attachment records (what `POST /api/uploads` answers), in
    /// the order sent: how the dialects show a user message's files.
    pub fn attachments(&self) -> Vec<crate::api::AttachmentInfo> {
        self.files()
            .filter_map(|c| match c {
                Content::File { id, name, media_type, size, sha256, url } => Some(crate::api::AttachmentInfo {
                    id: id.clone(),
                    name: name.clone(),
                    media_type: media_type.clone(),
                    size: *size,
                    sha256: sha256.clone(),
                    url: url.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// All text blocks joined, for titles, summaries and tests.
    pub fn text(&self) -> String {
        self.content()
            .iter()
            .filter_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// A committed message with its id and absolute position in the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IndexedMessage {
    pub id: MessageId,
    /// Absolute position in the session, from 0; never renumbered.
    pub index: u64,
    #[serde(flatten)]
    pub message: Message,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_message_round_trips_through_json() {
        let m = IndexedMessage {
            id: MessageId::new(),
            index: 4,
            message: Message::Assistant {
                content: vec![
                    Content::Thinking { thinking: "hm".into() },
                    Content::Text { text: "hi".into() },
                    Content::ToolCall {
                        id: "call_1".into(),
                        name: "read".into(),
                        arguments: serde_json::json!({"path": "a"}),
                    },
                ],
                stop_reason: Some(StopReason::ToolUse),
                usage: Usage { input: 3, output: 4, ..Usage::default() },
                model: "scripted".into(),
                error_message: None,
                timestamp: 1,
            },
        };
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["role"], "assistant");
        assert_eq!(json["index"], 4);
        assert_eq!(json["stopReason"], "toolUse");
        assert_eq!(json["content"][2]["type"], "toolCall");
        let back: IndexedMessage = serde_json::from_value(json).unwrap();
        assert_eq!(back, m);
    }
}
