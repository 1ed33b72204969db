//! `OpenAiModel`: the OpenAI Chat Completions API, streaming — the dialect that OpenAI,
//! Ollama, vLLM, llama.cpp's server, LM Studio and OpenRouter all speak, so one adapter
//! with a configurable base URL covers them.
//!
//! # Tool calls are held until the provider finishes them
//!
//! The API streams tool calls by `index`: the first fragment of a call carries its id
//! and name, later ones pieces of its `function.arguments`, and with parallel calls the
//! fragments of different indexes may interleave. The engine wants one call at a time,
//! each started before its arguments. So the decoder buffers every call by index and
//! emits them — `ToolCallStart`, then the arguments as one fragment — in index order
//! once the provider gives a `finish_reason` (or `[DONE]`). Text and reasoning still
//! stream as they come; only the tool calls arrive at once, which costs a live view of
//! arguments being written but can never mix two calls' arguments.
//!
//! Usage (sent in a last chunk with no choices, thanks to `stream_options.include_usage`)
//! is held and reported just before the stop, like every provider here (see
//! `transport`). A stream that ends after a `finish_reason` but without `[DONE]` is
//! taken as complete, since some servers omit `[DONE]`; one that ends before any
//! `finish_reason` is cut.

use crate::conversation::{arguments_text, paired_calls, text_of};
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
use std::collections::BTreeMap;

/// Where and what to call.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// The model's name in Spool (`openai:gpt-4o`, `ollama:llama3`, …).
    pub label: String,
    /// The API root, ending before `/chat/completions` (`https://api.openai.com/v1`).
    pub base_url: String,
    /// Sent as a bearer token; local servers need none.
    pub api_key: Option<String>,
    /// The provider's model id.
    pub model: String,
    pub retry: RetryPolicy,
    /// What the model reads besides text: images (as `image_url` data URLs) and PDFs
    /// (as `file` parts with a data URL, which Chat Completions documents for PDF only)
    /// for `openai:`; nothing for a local server unless its configuration says so.
    pub inputs: Inputs,
}

impl OpenAiConfig {
    /// A configuration labelled `openai:MODEL` with the default retry policy.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>, model: impl Into<String>) -> Self {
        let model = model.into();
        Self {
            label: format!("openai:{model}"),
            base_url: base_url.into(),
            api_key,
            model,
            retry: RetryPolicy::default(),
            inputs: Inputs { images: true, pdf: true },
        }
    }
}

/// A streaming Chat Completions model.
#[derive(Clone, Debug)]
pub struct OpenAiModel {
    label: String,
    endpoint: String,
    model: String,
    http: Http,
    inputs: Inputs,
}

impl OpenAiModel {
    pub fn new(config: OpenAiConfig) -> Result<Self, BuildError> {
        let endpoint = format!("{}/chat/completions", transport::base_url(&config.base_url)?);
        let http = Http::new(config.api_key, config.retry)?;
        Ok(Self { label: config.label, endpoint, model: config.model, http, inputs: config.inputs })
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn inputs(&self) -> Inputs {
        self.inputs
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = Bytes::from(request_body(&self.model, &request).to_string());
        let endpoint = self.endpoint.clone();
        let key = self.http.secret.clone();
        let build = move |client: &reqwest::Client| {
            let builder = client
                .post(&endpoint)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .body(body.clone());
            match &key {
                Some(key) => builder.bearer_auth(key),
                None => builder,
            }
        };
        Ok(transport::call(self.http.clone(), build, OpenAiDecoder::default))
    }
}

/// The JSON body of a streaming Chat Completions request.
/// A user message's `content`: a string, as local servers' chat templates expect,
/// unless it has files; then an array of parts, images as `image_url` data URLs and
/// text files (and files left out) as text.
fn user_content(content: &[Content], files: &spool_engine::FileBytes) -> Value {
    if !content.iter().any(|c| matches!(c, Content::File { .. })) {
        return json!(text_of(content));
    }
    let parts: Vec<Value> = content
        .iter()
        .filter_map(|block| match block {
            Content::File { name, media_type, size, sha256, .. } => {
                Some(match file_part(name, media_type, *size, sha256, files) {
                    FilePart::Image { media_type, data } => {
                        json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})
                    }
                    FilePart::Pdf { name, data } => json!({"type": "file", "file": {
                        "filename": name,
                        "file_data": format!("data:application/pdf;base64,{data}"),
                    }}),
                    FilePart::Text(text) => json!({"type": "text", "text": text}),
                })
            }
            Content::Text { text } if !text.is_empty() => Some(json!({"type": "text", "text": text})),
            _ => None,
        })
        .collect();
    Value::Array(parts)
}

pub(crate) fn request_body(model: &str, request: &ModelRequest) -> Value {
    let paired = paired_calls(&request.messages);
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message {
            Message::User { content, .. } => {
                messages.push(json!({"role": "user", "content": user_content(content, &request.files)}))
            }
            Message::Assistant { content, .. } => {
                // Reasoning is not sent back: the API has no field for it on input.
                let calls: Vec<Value> = content
                    .iter()
                    .filter_map(|block| match block {
                        Content::ToolCall { id, name, arguments } if paired.contains(id.as_str()) => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments_text(arguments)},
                        })),
                        _ => None,
                    })
                    .collect();
                let text = text_of(content);
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                // An empty string rather than null: the chat templates of local servers
                // often concatenate `content` and fail on null.
                let mut entry = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    entry["tool_calls"] = Value::Array(calls);
                }
                messages.push(entry);
            }
            Message::ToolResult { tool_call_id, content, .. } => {
                if paired.contains(tool_call_id.as_str()) {
                    messages.push(json!({"role": "tool", "tool_call_id": tool_call_id, "content": text_of(content)}));
                }
            }
        }
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    // Left out when empty: some servers reject an empty `tools` array.
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<WireUsage>,
    /// OpenRouter and some proxies report failures inside a 200 stream.
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: u32,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    /// DeepSeek, vLLM and llama.cpp.
    reasoning_content: Option<String>,
    /// OpenRouter and Ollama.
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    index: Option<u32>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        Usage {
            // `prompt_tokens` already includes the cached part.
            input: wire.prompt_tokens.unwrap_or(0),
            output: wire.completion_tokens.unwrap_or(0),
            reasoning: wire.completion_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
            cache_read: wire.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
            cache_write: 0,
            cost: 0.0,
            estimated: false,
        }
    }
}

#[derive(Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// Reads one Chat Completions stream; see the module documentation.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    calls: BTreeMap<u32, PendingCall>,
    /// The index that fragments without an index belong to.
    last_index: Option<u32>,
    any_calls: bool,
    finish_reason: Option<String>,
    /// The latest report: servers that send usage in every chunk send running totals.
    usage: Option<Usage>,
    done: bool,
}

impl OpenAiDecoder {
    fn add_call_fragment(&mut self, fragment: ToolCallDelta) {
        let index = match fragment.index {
            Some(index) => index,
            // Without an index, a fragment with a new id starts a call, anything else
            // continues the last one.
            None => match (&fragment.id, self.last_index) {
                (Some(id), Some(last)) if self.calls.get(&last).is_some_and(|c| &c.id == id) => last,
                (None, Some(last)) => last,
                _ => self.calls.keys().next_back().map_or(0, |last| last + 1),
            },
        };
        self.last_index = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    fn flush_calls(&mut self, out: &mut Vec<ModelEvent>) {
        for (index, call) in std::mem::take(&mut self.calls) {
            self.any_calls = true;
            // Some servers leave the id out; the engine needs one to pair the result.
            let id = if call.id.is_empty() { format!("call_{index}") } else { call.id };
            out.push(ModelEvent::ToolCallStart { id, name: call.name });
            if !call.arguments.is_empty() {
                out.push(ModelEvent::ToolCallArgs(call.arguments));
            }
        }
        self.last_index = None;
    }

    fn close(&mut self, out: &mut Vec<ModelEvent>) {
        self.flush_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push(ModelEvent::Usage(usage));
        }
        let stop = match self.finish_reason.as_deref() {
            Some("length") => StopReason::Length,
            // Ollama has answered tool calls with `stop`; the calls are what matter.
            _ if self.any_calls => StopReason::ToolUse,
            // `stop`, `content_filter`, or a `[DONE]` with no reason given.
            _ => StopReason::Stop,
        };
        out.push(ModelEvent::Stop(stop));
        self.done = true;
    }
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), Failure> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.close(out);
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| Failure::malformed(&format!("a chunk that is not valid JSON ({e})"), data))?;
        if let Some(error) = chunk.error {
            let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
            let kind = [text("type"), text("code")].into_iter().find(|k| !k.is_empty()).unwrap_or_default();
            let message = error.as_str().map(str::to_owned).unwrap_or_else(|| text("message"));
            return Err(from_stream_error(&kind, &message));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        // Only one choice is asked for; others (n > 1) are not ours.
        for choice in chunk.choices.unwrap_or_default().into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(thinking) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::Thinking(thinking));
                }
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::Text(text));
                }
                for fragment in delta.tool_calls.unwrap_or_default() {
                    self.add_call_fragment(fragment);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
                self.flush_calls(out);
            }
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn end_of_body(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), Failure> {
        if self.finish_reason.is_none() {
            return Err(stream_cut("no finish_reason and no [DONE]"));
        }
        self.close(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::decode_sse;
    use futures::{StreamExt, stream};
    use proptest::prelude::*;

    /// A stream in the documented format with everything at once: reasoning, text with
    /// multi-byte characters, two parallel calls with interleaved fragments, usage.
    const STREAM: &str = concat!(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Hmm… \"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Grüße 🎉 \"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"grep\",\"arguments\":\"{\\\"pat\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"ä.txt\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"tern\\\": \\\"x\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":30,\"total_tokens\":150,\"prompt_tokens_details\":{\"cached_tokens\":100},\"completion_tokens_details\":{\"reasoning_tokens\":12}}}\n\n",
        "data: [DONE]\n\n",
    );

    fn expected() -> Vec<ModelEvent> {
        vec![
            ModelEvent::Thinking("Hmm… ".into()),
            ModelEvent::Text("Grüße 🎉 ".into()),
            ModelEvent::ToolCallStart { id: "call_a".into(), name: "read".into() },
            ModelEvent::ToolCallArgs("{\"path\": \"ä.txt\"}".into()),
            ModelEvent::ToolCallStart { id: "call_b".into(), name: "grep".into() },
            ModelEvent::ToolCallArgs("{\"pattern\": \"x\"}".into()),
            ModelEvent::Usage(Usage { input: 120, output: 30, reasoning: 12, cache_read: 100, ..Usage::default() }),
            ModelEvent::Stop(StopReason::ToolUse),
        ]
    }

    async fn decode(pieces: Vec<Vec<u8>>) -> Vec<Result<ModelEvent, String>> {
        let bytes = stream::iter(pieces.into_iter().map(|p| Ok::<_, String>(Bytes::from(p))));
        decode_sse(bytes, OpenAiDecoder::default()).map(|r| r.map_err(|f| f.error.code)).collect().await
    }

    /// Merges consecutive text and thinking events, the way the engine builds blocks.
    fn merged(events: Vec<Result<ModelEvent, String>>) -> Vec<Result<ModelEvent, String>> {
        let mut out: Vec<Result<ModelEvent, String>> = Vec::new();
        for event in events {
            match (out.last_mut(), event) {
                (Some(Ok(ModelEvent::Text(a))), Ok(ModelEvent::Text(b))) => a.push_str(&b),
                (Some(Ok(ModelEvent::Thinking(a))), Ok(ModelEvent::Thinking(b))) => a.push_str(&b),
                (_, event) => out.push(event),
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// However the network splits the body — inside a UTF-8 character, inside the
        /// JSON, inside `data:` — the decoded answer is the same.
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
            let events = runtime.block_on(decode(pieces));
            prop_assert_eq!(merged(events), expected().into_iter().map(Ok).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_stream_without_finish_reason_is_cut_and_one_without_done_is_not() {
        let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        assert_eq!(decode(vec![cut.into()]).await, vec![Ok(ModelEvent::Text("Hel".into())), Err("stream_cut".into())]);
        let no_done =
            format!("{cut}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\n");
        assert_eq!(
            decode(vec![no_done.into()]).await,
            vec![Ok(ModelEvent::Text("Hel".into())), Ok(ModelEvent::Stop(StopReason::Length))]
        );
    }

    #[tokio::test]
    async fn an_error_chunk_and_a_broken_chunk_fail_clearly() {
        let error = "data: {\"error\":{\"message\":\"This model's maximum context length is 4096 tokens\",\"code\":\"context_length_exceeded\"}}\n\n";
        assert_eq!(decode(vec![error.into()]).await, vec![Err("context_overflow".into())]);
        let broken =
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"ind\n\n";
        assert_eq!(
            decode(vec![broken.into()]).await,
            vec![Ok(ModelEvent::Text("a".into())), Err("malformed_chunk".into())]
        );
    }
}
