//! `AnthropicModel`: Anthropic's Messages API, streaming.
//!
//! The stream is a sequence of typed events: `message_start` (with the input usage),
//! then per content block `content_block_start` / `content_block_delta` /
//! `content_block_stop`, then `message_delta` (stop reason, output usage) and
//! `message_stop`; `ping` may come at any time and `error` ends the stream. Blocks come
//! one after another, so they map straight onto the engine's events: a `tool_use`
//! block start is a `ToolCallStart`, its `input_json_delta`s are the arguments.
//!
//! Thinking blocks are read but not sent back: the API only accepts them back with
//! their signatures, and Spool does not ask for extended thinking, so leaving them out
//! of later requests loses nothing. Usage is held until `message_stop` (see
//! `transport`); event types added to the API later are skipped.

use crate::conversation::{paired_calls, text_of};
use crate::failure::{Failure, from_stream_error};
use crate::files::{FilePart, file_part};
use crate::transport::{self, BuildError, Decoder, Http, RetryPolicy, stream_cut};
use async_trait::async_trait;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_engine::{Inputs, Model, ModelError, ModelEvent, ModelRequest, ModelStream};
use spool_protocol::sse::SseEvent;
use spool_protocol::{Content, Message, StopReason, Usage};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this adapter speaks, sent as `anthropic-version`.
const API_VERSION: &str = "2023-06-01";
/// The API requires an output limit on every request.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Where and what to call.
#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    /// The model's name in Spool (`anthropic:claude-sonnet-4-5`, …).
    pub label: String,
    /// The API root, before `/v1/messages`.
    pub base_url: String,
    pub api_key: String,
    /// The provider's model id.
    pub model: String,
    pub max_tokens: u32,
    pub retry: RetryPolicy,
}

impl AnthropicConfig {
    /// A configuration labelled `anthropic:MODEL` against the public API.
    pub fn new(api_key: impl Into<String>, model: impl Into<String>) -> Self {
        let model = model.into();
        Self {
            label: format!("anthropic:{model}"),
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: api_key.into(),
            model,
            max_tokens: DEFAULT_MAX_TOKENS,
            retry: RetryPolicy::default(),
        }
    }
}

/// A streaming Messages API model.
#[derive(Clone, Debug)]
pub struct AnthropicModel {
    label: String,
    endpoint: String,
    model: String,
    max_tokens: u32,
    http: Http,
}

impl AnthropicModel {
    pub fn new(config: AnthropicConfig) -> Result<Self, BuildError> {
        let endpoint = format!("{}/v1/messages", transport::base_url(&config.base_url)?);
        let http = Http::new(Some(config.api_key), config.retry)?;
        Ok(Self { label: config.label, endpoint, model: config.model, max_tokens: config.max_tokens, http })
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn name(&self) -> String {
        self.label.clone()
    }

    /// Claude reads images and PDFs.
    fn inputs(&self) -> Inputs {
        Inputs { images: true, pdf: true }
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = Bytes::from(request_body(&self.model, self.max_tokens, &request).to_string());
        let endpoint = self.endpoint.clone();
        let key = self.http.secret.clone().unwrap_or_default();
        let build = move |client: &reqwest::Client| {
            client
                .post(&endpoint)
                .header("x-api-key", &key)
                .header("anthropic-version", API_VERSION)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .body(body.clone())
        };
        Ok(transport::call(self.http.clone(), build, AnthropicDecoder::default))
    }
}

/// The JSON body of a streaming Messages request.
pub(crate) fn request_body(model: &str, max_tokens: u32, request: &ModelRequest) -> Value {
    let paired = paired_calls(&request.messages);
    // (role, blocks), with neighbours of the same role merged below: the API wants
    // user and assistant turns to alternate, and tool results are user turns.
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message {
            Message::User { content, .. } => ("user", user_blocks(content, &request.files)),
            Message::Assistant { content, .. } => {
                let mut blocks = Vec::new();
                for block in content {
                    match block {
                        // The API rejects empty text blocks.
                        Content::Text { text } if !text.is_empty() => {
                            blocks.push(json!({"type": "text", "text": text}))
                        }
                        Content::ToolCall { id, name, arguments } if paired.contains(id.as_str()) => {
                            blocks.push(json!({
                                "type": "tool_use", "id": id, "name": name, "input": tool_input(arguments),
                            }))
                        }
                        _ => {}
                    }
                }
                ("assistant", blocks)
            }
            Message::ToolResult { tool_call_id, content, is_error, .. } if paired.contains(tool_call_id.as_str()) => {
                let mut block = json!({"type": "tool_result", "tool_use_id": tool_call_id, "is_error": is_error});
                // `content` is optional, and an empty one is better left out than sent
                // as an empty text the API may refuse.
                let text = text_of(content);
                if !text.is_empty() {
                    block["content"] = json!(text);
                }
                ("user", vec![block])
            }
            Message::ToolResult { .. } => continue,
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> =
        turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": messages,
    });
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters}))
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// A user message's blocks: its files as `image` and `document` blocks (base64
/// sources), text files and files left out as text, then its text.
fn user_blocks(content: &[Content], files: &spool_engine::FileBytes) -> Vec<Value> {
    content
        .iter()
        .filter_map(|block| match block {
            Content::File { name, media_type, size, sha256, .. } => {
                Some(match file_part(name, media_type, *size, sha256, files) {
                    FilePart::Image { media_type, data } => json!({
                        "type": "image", "source": {"type": "base64", "media_type": media_type, "data": data},
                    }),
                    FilePart::Pdf { name, data } => json!({
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": data},
                        "title": name,
                    }),
                    FilePart::Text(text) => json!({"type": "text", "text": text}),
                })
            }
            Content::Text { text } if !text.is_empty() => Some(json!({"type": "text", "text": text})),
            _ => None,
        })
        .collect()
}

/// `tool_use.input` must be an object. Arguments that never parsed (kept as the raw
/// text) go back as `{}`: the tool result that follows already tells the model what was
/// wrong with them.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(parsed @ Value::Object(_)) => parsed,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Wire {
    MessageStart {
        message: WireMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct WireMessage {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// `redacted_thinking`, server tools and whatever comes next: not shown.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// `signature_delta`, `citations_delta`, …
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// Counts as the API reports them: `input_tokens` excludes the cached parts.
#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// The block being read. The API sends one block at a time, so one is enough.
enum Current {
    None,
    Shown,
    ToolUse { index: u32, start_input: Value, arguments_sent: bool },
    Hidden,
}

/// Reads one Messages stream; see the module documentation.
pub(crate) struct AnthropicDecoder {
    /// Fresh input (`input_tokens`), cache reads and cache writes, kept apart until the
    /// end: `message_delta` may restate any of them as a running total.
    fresh_input: u64,
    usage: Usage,
    stop_reason: Option<String>,
    current: Current,
    done: bool,
}

impl Default for AnthropicDecoder {
    fn default() -> Self {
        Self { fresh_input: 0, usage: Usage::default(), stop_reason: None, current: Current::None, done: false }
    }
}

impl AnthropicDecoder {
    fn take_usage(&mut self, wire: WireUsage) {
        // Every count in a report is a running total for the message, so a later report
        // replaces the field rather than adding to it.
        if let Some(n) = wire.input_tokens {
            self.fresh_input = n;
        }
        if let Some(n) = wire.output_tokens {
            self.usage.output = n;
        }
        if let Some(n) = wire.cache_creation_input_tokens {
            self.usage.cache_write = n;
        }
        if let Some(n) = wire.cache_read_input_tokens {
            self.usage.cache_read = n;
        }
    }

    fn close(&mut self, out: &mut Vec<ModelEvent>) {
        // Spool's `input` is everything the prompt held, like OpenAI's `prompt_tokens`;
        // the cache fields say which parts of it the cache served or stored.
        let usage = Usage { input: self.fresh_input + self.usage.cache_read + self.usage.cache_write, ..self.usage };
        out.push(ModelEvent::Usage(usage));
        let stop = match self.stop_reason.as_deref() {
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens" | "model_context_window_exceeded") => StopReason::Length,
            // `end_turn`, `stop_sequence`, `pause_turn`, `refusal`.
            _ => StopReason::Stop,
        };
        out.push(ModelEvent::Stop(stop));
        self.done = true;
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), Failure> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let wire: Wire = serde_json::from_str(data)
            .map_err(|e| Failure::malformed(&format!("an event that is not valid JSON ({e})"), data))?;
        match wire {
            Wire::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.take_usage(usage);
                }
            }
            Wire::ContentBlockStart { index, content_block } => {
                self.current = match content_block {
                    BlockStart::Text { text } => {
                        if !text.is_empty() {
                            out.push(ModelEvent::Text(text));
                        }
                        Current::Shown
                    }
                    BlockStart::Thinking { thinking } => {
                        if !thinking.is_empty() {
                            out.push(ModelEvent::Thinking(thinking));
                        }
                        Current::Shown
                    }
                    BlockStart::ToolUse { id, name, input } => {
                        out.push(ModelEvent::ToolCallStart { id, name });
                        Current::ToolUse { index, start_input: input, arguments_sent: false }
                    }
                    BlockStart::Other => Current::Hidden,
                };
            }
            Wire::ContentBlockDelta { delta, .. } => match (delta, &mut self.current) {
                (_, Current::Hidden) => {}
                (BlockDelta::TextDelta { text }, _) => out.push(ModelEvent::Text(text)),
                (BlockDelta::ThinkingDelta { thinking }, _) => out.push(ModelEvent::Thinking(thinking)),
                (BlockDelta::InputJsonDelta { partial_json }, Current::ToolUse { arguments_sent, .. }) => {
                    if !partial_json.is_empty() {
                        *arguments_sent = true;
                        out.push(ModelEvent::ToolCallArgs(partial_json));
                    }
                }
                (BlockDelta::InputJsonDelta { .. }, _) => {
                    return Err(Failure::malformed("tool arguments outside a tool_use block", data));
                }
                (BlockDelta::Other, _) => {}
            },
            Wire::ContentBlockStop { index } => {
                // The input normally streams as deltas from `{}`; a proxy that sends it
                // whole in the block start still gets its arguments through.
                if let Current::ToolUse { index: open, start_input, arguments_sent: false } = &self.current
                    && *open == index
                    && start_input.as_object().is_some_and(|o| !o.is_empty())
                {
                    out.push(ModelEvent::ToolCallArgs(start_input.to_string()));
                }
                self.current = Current::None;
            }
            Wire::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(usage) = usage {
                    self.take_usage(usage);
                }
            }
            Wire::MessageStop => self.close(out),
            Wire::Error { error } => return Err(from_stream_error(&error.kind, &error.message)),
            Wire::Ping | Wire::Unknown => {}
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn end_of_body(&mut self, _out: &mut Vec<ModelEvent>) -> Result<(), Failure> {
        Err(stream_cut("no message_stop"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::decode_sse;
    use futures::{StreamExt, stream};
    use proptest::prelude::*;

    /// The documented event sequence: thinking, text with multi-byte characters, a
    /// tool call with streamed input, usage in `message_start` and `message_delta`.
    const STREAM: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":10,\"cache_read_input_tokens\":300,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me look…\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Schön, 日本 🎉\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"é\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\".txt\\\"}\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    async fn decode(pieces: Vec<Vec<u8>>) -> Vec<Result<ModelEvent, String>> {
        let bytes = stream::iter(pieces.into_iter().map(|p| Ok::<_, String>(Bytes::from(p))));
        decode_sse(bytes, AnthropicDecoder::default()).map(|r| r.map_err(|f| f.error.code)).collect().await
    }

    fn expected() -> Vec<Result<ModelEvent, String>> {
        [
            ModelEvent::Thinking("Let me look…".into()),
            ModelEvent::Text("Schön, 日本 🎉".into()),
            ModelEvent::ToolCallStart { id: "toolu_1".into(), name: "read".into() },
            ModelEvent::ToolCallArgs("{\"path\": \"é".into()),
            ModelEvent::ToolCallArgs(".txt\"}".into()),
            ModelEvent::Usage(Usage { input: 335, output: 89, cache_read: 300, cache_write: 10, ..Usage::default() }),
            ModelEvent::Stop(StopReason::ToolUse),
        ]
        .into_iter()
        .map(Ok)
        .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The SSE layer delivers whole events, so no split of the body changes a
        /// single event, not even inside a multi-byte character.
        #[test]
        fn any_split_of_the_body_decodes_the_same(cuts in proptest::collection::btree_set(1..STREAM.len(), 0..40)) {
            let bytes = STREAM.as_bytes();
            let mut pieces = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                pieces.push(bytes[start..cut].to_vec());
                start = cut;
            }
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
            prop_assert_eq!(runtime.block_on(decode(pieces)), expected());
        }
    }

    #[tokio::test]
    async fn an_error_event_is_classified_and_a_missing_message_stop_is_a_cut() {
        let overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(decode(vec![overloaded.into()]).await, vec![Err("provider_error".into())]);
        let cut = STREAM.split("event: message_delta").next().expect("the stream has a message_delta");
        let events = decode(vec![cut.into()]).await;
        assert_eq!(events.last(), Some(&Err("stream_cut".into())));
        assert!(!events.iter().any(|e| matches!(e, Ok(ModelEvent::Usage(_) | ModelEvent::Stop(_)))));
    }

    #[test]
    fn tool_input_is_always_an_object() {
        assert_eq!(tool_input(&json!({"a": 1})), json!({"a": 1}));
        assert_eq!(tool_input(&json!("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(tool_input(&json!("{\"a\": ")), json!({}));
        assert_eq!(tool_input(&json!([1])), json!({}));
    }
}
