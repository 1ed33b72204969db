//! `AnthropicModel` against a fake Messages API server on a loopback port: what it
//! sends, what it makes of the documented event stream, and how it fails.

use crate::common;

use common::{End, Fake, Reply, collect, merged, quick_retries, split_awkwardly};
use futures::StreamExt;
use serde_json::json;
use spool_engine::{Model, ModelError, ModelEvent, ModelRequest, ToolSpec};
use spool_model::{AnthropicConfig, AnthropicModel};
use spool_protocol::{Content, Message, StopReason, Usage};
use std::time::Duration;

const KEY: &str = "sk-ant-api03-TESTKEY-0123456789abcdef";

fn model(fake: &Fake) -> AnthropicModel {
    let mut config = AnthropicConfig::new(KEY, "claude-test");
    config.base_url = fake.base_url.clone();
    config.max_tokens = 1024;
    config.retry = quick_retries();
    AnthropicModel::new(config).expect("a valid configuration")
}

fn hello() -> ModelRequest {
    ModelRequest {
        system: None,
        messages: vec![Message::user_text("hi", 1)],
        tools: Vec::new(),
        files: Default::default(),
    }
}

/// `event:` and `data:` lines per event, as the API documents them.
fn sse(events: &[serde_json::Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().expect("a typed event"))).collect()
}

fn message_start() -> serde_json::Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
           "model": "claude-test", "stop_reason": null, "stop_sequence": null,
           "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048, "output_tokens": 2}}})
}

fn block_start(index: u32, block: serde_json::Value) -> serde_json::Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn block_delta(index: u32, delta: serde_json::Value) -> serde_json::Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn block_stop(index: u32) -> serde_json::Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_end(stop_reason: &str, output_tokens: u64) -> [serde_json::Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

fn text_answer(text: &str) -> String {
    let mut events = vec![
        message_start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": text})),
        block_stop(0),
    ];
    events.extend(message_end("end_turn", 5));
    sse(&events)
}

#[tokio::test]
async fn streams_thinking_text_and_a_tool_call_split_inside_characters_and_json() {
    let mut events = vec![
        message_start(),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        json!({"type": "ping"}),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "Der Nutzer möchte… "})),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "die Datei."})),
        block_delta(0, json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        block_delta(1, json!({"type": "text_delta", "text": "Ich lese "})),
        block_delta(1, json!({"type": "text_delta", "text": "»日本.txt« 📄"})),
        block_stop(1),
        block_start(2, json!({"type": "tool_use", "id": "toolu_01", "name": "read", "input": {}})),
        block_delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        block_delta(2, json!({"type": "input_json_delta", "partial_json": "{\"path\": \"日"})),
        block_delta(2, json!({"type": "input_json_delta", "partial_json": "本.txt\"}"})),
        block_stop(2),
    ];
    events.extend(message_end("tool_use", 91));
    let body = sse(&events);
    let mut fake = Fake::start(vec![Reply::Stream { pieces: split_awkwardly(&body), end: End::Complete }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        merged(events),
        vec![
            Ok(ModelEvent::Thinking("Der Nutzer möchte… die Datei.".into())),
            Ok(ModelEvent::Text("Ich lese »日本.txt« 📄".into())),
            Ok(ModelEvent::ToolCallStart { id: "toolu_01".into(), name: "read".into() }),
            Ok(ModelEvent::ToolCallArgs("{\"path\": \"日本.txt\"}".into())),
            Ok(ModelEvent::Usage(Usage { input: 2520, output: 91, cache_read: 2048, ..Usage::default() })),
            Ok(ModelEvent::Stop(StopReason::ToolUse)),
        ]
    );
    let request = fake.request().await;
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(request.headers.get("x-api-key").map(String::as_str), Some(KEY));
    assert_eq!(request.headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
}

#[tokio::test]
async fn sends_the_conversation_and_tools_in_the_messages_shape() {
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![text_answer("ok").into_bytes()], end: End::Complete }]).await;
    let call = |id: &str, path: &str| Content::ToolCall {
        id: id.into(),
        name: "read".into(),
        arguments: json!({"path": path}),
    };
    let result = |id: &str, text: &str, is_error: bool| Message::ToolResult {
        tool_call_id: id.into(),
        tool_name: "read".into(),
        content: vec![Content::Text { text: text.into() }],
        is_error,
        timestamp: 3,
        diff: None,
    };
    let request = ModelRequest {
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user_text("read a and b", 1),
            Message::Assistant {
                content: vec![
                    Content::Thinking { thinking: "Two files.".into() },
                    Content::Text { text: "Reading both.".into() },
                    call("toolu_a", "a"),
                    call("toolu_b", "b"),
                ],
                stop_reason: Some(StopReason::ToolUse),
                usage: Usage::default(),
                model: "anthropic:claude-test".into(),
                error_message: None,
                timestamp: 2,
            },
            result("toolu_a", "A", false),
            result("toolu_b", "no such file", true),
            Message::user_text("and now?", 4),
        ],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        files: Default::default(),
    };
    let events = collect(model(&fake).stream(request).await.expect("a stream")).await;
    assert_eq!(events.last(), Some(&Ok(ModelEvent::Stop(StopReason::Stop))));
    assert_eq!(
        fake.request().await.body,
        json!({
            "model": "claude-test",
            "max_tokens": 1024,
            "stream": true,
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "read a and b"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading both."},
                    {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "b"}},
                ]},
                // Both results and the next prompt form one user turn, results first.
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "no such file", "is_error": true},
                    {"type": "text", "text": "and now?"},
                ]},
            ],
            "tools": [{"name": "read", "description": "Read a file",
                       "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        })
    );
}

#[tokio::test]
async fn an_overloaded_error_event_before_any_output_is_retried() {
    // Anthropic often accepts the request and then reports overload in the stream.
    let overloaded = sse(&[json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]);
    let mut fake = Fake::start(vec![
        Reply::Stream { pieces: vec![overloaded.into_bytes()], end: End::Complete },
        Reply::Status {
            status: 429,
            headers: vec![("retry-after", "0".into())],
            body: json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}).to_string(),
        },
        Reply::Stream { pieces: split_awkwardly(&text_answer("Grüß Gott")), end: End::Complete },
    ])
    .await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        merged(events),
        vec![
            Ok(ModelEvent::RetryStart {
                attempt: 1,
                max_attempts: 3,
                delay_ms: 1,
                reason: "the provider failed (overloaded_error): Overloaded".into()
            }),
            Ok(ModelEvent::RetryStart {
                attempt: 2,
                max_attempts: 3,
                delay_ms: 0,
                reason: "rate limited by the provider (429): Number of request tokens has exceeded your per-minute rate limit"
                    .into()
            }),
            Ok(ModelEvent::RetryEnd { attempt: 2, success: true }),
            Ok(ModelEvent::Text("Grüß Gott".into())),
            Ok(ModelEvent::Usage(Usage { input: 2520, output: 5, cache_read: 2048, ..Usage::default() })),
            Ok(ModelEvent::Stop(StopReason::Stop)),
        ]
    );
    for _ in 0..3 {
        fake.request().await;
    }
}

#[tokio::test]
async fn a_refused_key_is_bad_credentials_and_the_key_is_not_repeated() {
    let body = json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key: {KEY}")}});
    let fake = Fake::start(vec![Reply::Status { status: 401, headers: vec![], body: body.to_string() }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        events,
        vec![Err(ModelError::new(
            "bad_credentials",
            "the provider refused the API key (401): invalid x-api-key: [redacted]"
        ))]
    );
}

#[tokio::test]
async fn a_too_long_prompt_is_context_overflow() {
    let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208114 tokens > 200000 maximum"}});
    let fake = Fake::start(vec![Reply::Status { status: 400, headers: vec![], body: body.to_string() }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        events,
        vec![Err(ModelError::new(
            "context_overflow",
            "the conversation is too long for the model (400): prompt is too long: 208114 tokens > 200000 maximum"
        ))]
    );
}

#[tokio::test]
async fn a_stream_cut_mid_answer_keeps_the_partial_text_and_ends_with_stream_cut() {
    let body = sse(&[
        message_start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "Zunächst"})),
    ]);
    let fake = Fake::start(vec![Reply::Stream { pieces: split_awkwardly(&body), end: End::Cut }]).await;
    let events = merged(collect(model(&fake).stream(hello()).await.expect("a stream")).await);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], Ok(ModelEvent::Text("Zunächst".into())));
    assert_eq!(events[1].clone().expect_err("the stream fails").code, "stream_cut");
}

#[tokio::test]
async fn an_event_that_is_not_json_is_malformed_chunk() {
    let body = format!(
        "{}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_del\n\n",
        sse(&[
            message_start(),
            block_start(0, json!({"type": "text", "text": ""})),
            block_delta(0, json!({"type": "text_delta", "text": "a"}))
        ])
    );
    let fake = Fake::start(vec![Reply::Stream { pieces: vec![body.into_bytes()], end: End::Complete }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], Ok(ModelEvent::Text("a".into())));
    assert_eq!(events[1].clone().expect_err("the stream fails").code, "malformed_chunk");
}

#[tokio::test]
async fn dropping_the_stream_mid_answer_closes_the_connection() {
    let body = sse(&[
        message_start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "Es war einmal"})),
    ]);
    let mut fake = Fake::start(vec![Reply::Stream { pieces: vec![body.into_bytes()], end: End::Hold }]).await;
    let mut stream = model(&fake).stream(hello()).await.expect("a stream");
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the first words arrive");
    assert_eq!(first, Some(Ok(ModelEvent::Text("Es war einmal".into()))));
    drop(stream);
    fake.connection_closed(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn images_go_as_image_blocks_and_pdfs_as_document_blocks_before_the_text() {
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![text_answer("ok").into_bytes()], end: End::Complete }]).await;
    let png = bytes::Bytes::from_static(b"\x89PNG\r\n\x1a\nfake");
    let pdf = bytes::Bytes::from_static(b"%PDF-1.7\n");
    let file = |name: &str, media_type: &str, bytes: &bytes::Bytes, sha: &str| Content::File {
        id: spool_protocol::AttachmentId::new(),
        name: name.into(),
        media_type: media_type.into(),
        size: bytes.len() as u64,
        sha256: sha.into(),
        url: String::new(),
    };
    let content = vec![
        file("shot.png", "image/png", &png, &"a".repeat(64)),
        file("spec.pdf", "application/pdf", &pdf, &"b".repeat(64)),
        file("old.png", "image/png", &png, &"c".repeat(64)),
        Content::Text { text: "compare".into() },
    ];
    let request = ModelRequest {
        system: None,
        messages: vec![Message::User { content, timestamp: 1 }],
        tools: Vec::new(),
        // `old.png`'s bytes are not carried (over the request's budget): it goes as its name.
        files: [("a".repeat(64), png), ("b".repeat(64), pdf)].into_iter().collect(),
    };
    collect(model(&fake).stream(request).await.expect("a stream")).await;
    let body = fake.request().await.body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgpmYWtl"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjcK"}, "title": "spec.pdf"},
            {"type": "text", "text": "[file old.png (image/png, 12 bytes) not included]"},
            {"type": "text", "text": "compare"},
        ])
    );
}
