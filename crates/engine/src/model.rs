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
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError>;
}
