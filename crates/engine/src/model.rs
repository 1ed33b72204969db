//! The `Model` trait: a streaming language model.
//!
//! A model turns a conversation into a stream of small events. The engine owns the
//! assistant message being built: it numbers content blocks, computes delta offsets,
//! and decides when a message ends, so every model implementation stays a thin
//! adapter over its provider's stream. Dropping the stream cancels the request.

use async_trait::async_trait;
use futures::stream::BoxStream;
use spool_protocol::{Message, StopReason, Usage};

/// A tool as the model is told about it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One model call's input.
#[derive(Clone, Debug)]
pub struct ModelRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// The bytes of the messages' files (`Content::File`), by SHA-256. A file missing
    /// here goes to the model as a line naming it (see [`file_stub`]).
    pub files: FileBytes,
}

/// Attachments' bytes by their SHA-256.
pub type FileBytes = std::collections::BTreeMap<String, bytes::Bytes>;

/// What a model reads besides text (text files are text: every model reads them);
/// `GET /api/models` shows it for each model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = ModelInputs)]
pub struct Inputs {
    /// PNG, JPEG, GIF and WebP images.
    pub images: bool,
    /// PDF documents.
    pub pdf: bool,
}

impl Inputs {
    /// Whether a file of `media_type` can go to this model.
    pub fn reads(&self, media_type: &str) -> bool {
        if media_type.starts_with("image/") {
            self.images
        } else if media_type == "application/pdf" {
            self.pdf
        } else {
            true
        }
    }
}

/// The line a model gets for a file whose bytes are not in the request.
pub fn file_stub(name: &str, media_type: &str, size: u64) -> String {
    format!("[file {name} ({media_type}, {size} bytes) not included]")
}

/// How a text file goes to a model: its name and type, then its text.
pub fn text_file_block(name: &str, media_type: &str, bytes: &[u8]) -> String {
    format!(
        "<file name=\"{}\" type=\"{media_type}\" bytes=\"{}\">\n{}\n</file>",
        name.replace('"', "'"),
        bytes.len(),
        String::from_utf8_lossy(bytes)
    )
}

/// One step of a model's output.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// Text to append; starts a new text block when the previous block is not text.
    Text(String),
    /// Reasoning to append; starts a new thinking block likewise.
    Thinking(String),
    /// Starts a tool call block.
    ToolCallStart { id: String, name: String },
    /// A fragment of the current tool call's JSON arguments.
    ToolCallArgs(String),
    /// Token counts; several reports in one stream add up.
    Usage(Usage),
    /// The model finished; nothing follows.
    Stop(StopReason),
    /// The provider refused or failed before any output (429, 5xx, a reset connection)
    /// and the call is retried after `delay_ms`. Never sent once output has streamed.
    RetryStart { attempt: u32, max_attempts: u32, delay_ms: u64, reason: String },
    /// The retried call got through (`success`) or retries are exhausted.
    RetryEnd { attempt: u32, success: bool },
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("{code}: {message}")]
pub struct ModelError {
    /// Stable machine code: `bad_credentials`, `context_overflow`, `rate_limited`,
    /// `provider_error`, `malformed_chunk`, `stream_cut`, `model_unavailable`,
    /// `bad_request`.
    pub code: String,
    /// What happened, for a person; never contains the API key.
    pub message: String,
}

impl ModelError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }
}

pub type ModelStream = BoxStream<'static, Result<ModelEvent, ModelError>>;

#[async_trait]
pub trait Model: Send + Sync + 'static {
    /// The name shown in messages and the API (`scripted`, `openai:gpt-4o`, …).
    fn name(&self) -> String;
    /// What the model reads besides text; text only unless a model says more. A prompt
    /// with a file the model cannot read is refused before it runs.
    fn inputs(&self) -> Inputs {
        Inputs::default()
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError>;
}
