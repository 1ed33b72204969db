//! `OpenAiModel` against a fake Chat Completions server on a loopback port: what it
//! sends, what it makes of the documented streaming format, and how it fails.

use crate::common;

use common::{End, Fake, Reply, collect, merged, quick_retries, split_awkwardly};
use futures::StreamExt;
use serde_json::json;
use spool_engine::{Model, ModelError, ModelEvent, ModelRequest, ToolSpec};
use spool_model::{OpenAiConfig, OpenAiModel};
use spool_protocol::{Content, Message, StopReason, Usage};
use std::time::Duration;

const KEY: &str = "sk-test-1234567890abcdefSECRET";

fn model(fake: &Fake) -> OpenAiModel {
    let mut config = OpenAiConfig::new(format!("{}/v1/", fake.base_url), Some(KEY.into()), "gpt-test");
    config.retry = quick_retries();
    OpenAiModel::new(config).expect("a valid configuration")
}

fn hello() -> ModelRequest {
    ModelRequest {
        system: None,
        messages: vec![Message::user_text("hi", 1)],
        tools: Vec::new(),
        files: Default::default(),
    }
}

/// One `data:` line per chunk, as the API documents it.
use spool_test_support::{openai_delta as delta, openai_finish as finish, openai_sse as sse};

fn usage(prompt: u64, completion: u64) -> serde_json::Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                     "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 7}}})
}

fn answer(text: &str) -> String {
    sse(&[
        delta(json!({"role": "assistant", "content": ""})),
        delta(json!({"content": text})),
        finish("stop"),
        usage(10, 2),
    ])
}

#[tokio::test]
async fn streams_reasoning_text_and_usage_split_inside_characters_and_json() {
    let body = sse(&[
        delta(json!({"role": "assistant", "content": ""})),
        delta(json!({"reasoning_content": "Die Frage… "})),
        delta(json!({"reasoning_content": "ist einfach."})),
        delta(json!({"content": "Grüße aus "})),
        delta(json!({"content": "日本 🎉!"})),
        finish("stop"),
        usage(1200, 40),
    ]);
    let mut fake = Fake::start(vec![Reply::Stream { pieces: split_awkwardly(&body), end: End::Complete }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        merged(events),
        vec![
            Ok(ModelEvent::Thinking("Die Frage… ist einfach.".into())),
            Ok(ModelEvent::Text("Grüße aus 日本 🎉!".into())),
            Ok(ModelEvent::Usage(Usage { input: 1200, output: 40, reasoning: 7, cache_read: 64, ..Usage::default() })),
            Ok(ModelEvent::Stop(StopReason::Stop)),
        ]
    );
    let request = fake.request().await;
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(request.headers.get("authorization").map(String::as_str), Some(format!("Bearer {KEY}").as_str()));
}

#[tokio::test]
async fn sends_the_conversation_and_tools_in_the_chat_completions_shape() {
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![answer("ok").into_bytes()], end: End::Complete }]).await;
    let request = ModelRequest {
        system: Some("You are terse.".into()),
        messages: vec![
            Message::user_text("read a.txt", 1),
            Message::Assistant {
                content: vec![
                    Content::Thinking { thinking: "I should read it.".into() },
                    Content::Text { text: "Reading.".into() },
                    Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: json!({"path": "a.txt"}) },
                    Content::ToolCall { id: "call_2".into(), name: "read".into(), arguments: json!("{\"path\": ") },
                ],
                stop_reason: Some(StopReason::ToolUse),
                usage: Usage::default(),
                model: "openai:gpt-test".into(),
                error_message: None,
                timestamp: 2,
            },
            Message::ToolResult {
                tool_call_id: "call_1".into(),
                tool_name: "read".into(),
                content: vec![Content::Text { text: "hello".into() }],
                is_error: false,
                timestamp: 3,
                diff: None,
            },
            Message::ToolResult {
                tool_call_id: "call_2".into(),
                tool_name: "read".into(),
                content: vec![Content::Text { text: "invalid arguments".into() }],
                is_error: true,
                timestamp: 3,
                diff: None,
            },
            Message::user_text("thanks", 4),
        ],
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }],
        files: Default::default(),
    };
    let events = collect(model(&fake).stream(request).await.expect("a stream")).await;
    assert_eq!(events.last(), Some(&Ok(ModelEvent::Stop(StopReason::Stop))));
    assert_eq!(
        fake.request().await.body,
        json!({
            "model": "gpt-test",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "read a.txt"},
                {"role": "assistant", "content": "Reading.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": "{\"path\": "}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
                {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments"},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            }}],
        })
    );
}

#[tokio::test]
async fn parallel_tool_calls_with_interleaved_indexes_come_out_one_after_the_other() {
    let call = |index: u32, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
            call["type"] = json!("function");
        }
        delta(json!({"tool_calls": [call]}))
    };
    let body = sse(&[
        delta(json!({"role": "assistant", "content": null})),
        call(0, Some("call_A"), Some("read"), ""),
        call(1, Some("call_B"), Some("grep"), ""),
        call(0, None, None, "{\"pa"),
        call(1, None, None, "{\"pattern\":"),
        call(0, None, None, "th\": \"ü.rs\"}"),
        call(1, None, None, " \"fn main\"}"),
        finish("tool_calls"),
        usage(300, 50),
    ]);
    let fake = Fake::start(vec![Reply::Stream { pieces: split_awkwardly(&body), end: End::Complete }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        merged(events),
        vec![
            Ok(ModelEvent::ToolCallStart { id: "call_A".into(), name: "read".into() }),
            Ok(ModelEvent::ToolCallArgs("{\"path\": \"ü.rs\"}".into())),
            Ok(ModelEvent::ToolCallStart { id: "call_B".into(), name: "grep".into() }),
            Ok(ModelEvent::ToolCallArgs("{\"pattern\": \"fn main\"}".into())),
            Ok(ModelEvent::Usage(Usage { input: 300, output: 50, reasoning: 7, cache_read: 64, ..Usage::default() })),
            Ok(ModelEvent::Stop(StopReason::ToolUse)),
        ]
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_asked_delay_and_then_the_answer_streams() {
    let mut fake = Fake::start(vec![
        Reply::Status {
            status: 429,
            // One second asked; the test policy caps `retry-after` at 20 ms.
            headers: vec![("retry-after", "1".into())],
            body:
                json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})
                    .to_string(),
        },
        Reply::Stream { pieces: vec![answer("second time lucky").into_bytes()], end: End::Complete },
    ])
    .await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        merged(events),
        vec![
            Ok(ModelEvent::RetryStart {
                attempt: 1,
                max_attempts: 3,
                delay_ms: 20,
                reason: "rate limited by the provider (429): Rate limit reached".into(),
            }),
            Ok(ModelEvent::RetryEnd { attempt: 1, success: true }),
            Ok(ModelEvent::Text("second time lucky".into())),
            Ok(ModelEvent::Usage(Usage { input: 10, output: 2, reasoning: 7, cache_read: 64, ..Usage::default() })),
            Ok(ModelEvent::Stop(StopReason::Stop)),
        ]
    );
    fake.request().await;
    fake.request().await;
}

#[tokio::test]
async fn retries_run_out_on_a_provider_that_keeps_failing() {
    let failing = || Reply::Status { status: 503, headers: vec![], body: "upstream connect error".into() };
    let mut fake = Fake::start(vec![failing(), failing(), failing(), failing()]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    let starts = events.iter().filter(|e| matches!(e, Ok(ModelEvent::RetryStart { .. }))).count();
    assert_eq!(starts, 3);
    assert_eq!(
        &events[3..],
        &[
            Ok(ModelEvent::RetryEnd { attempt: 3, success: false }),
            Err(ModelError::new(
                "provider_error",
                "the provider failed (503): upstream connect error (gave up after 3 retries)"
            )),
        ]
    );
    for _ in 0..4 {
        fake.request().await;
    }
}

#[tokio::test]
async fn a_refused_key_is_bad_credentials_and_the_key_is_not_repeated() {
    // The fake echoes the whole key, as some servers do.
    let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your API key at …"),
                                "type": "invalid_request_error", "code": "invalid_api_key"}});
    let mut fake = Fake::start(vec![Reply::Status { status: 401, headers: vec![], body: body.to_string() }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(
        events,
        vec![Err(ModelError::new(
            "bad_credentials",
            "the provider refused the API key (401): Incorrect API key provided: [redacted]. You can find your API key at …"
        ))]
    );
    fake.request().await;
    assert_eq!(fake.requests_so_far(), 0, "a refused key is not retried");
}

#[tokio::test]
async fn a_stream_cut_mid_answer_keeps_the_partial_text_and_ends_with_stream_cut() {
    let body = sse(&[delta(json!({"role": "assistant", "content": ""})), delta(json!({"content": "The answer is"}))]);
    let partial = body.trim_end_matches("data: [DONE]\n\n");
    let fake = Fake::start(vec![Reply::Stream { pieces: split_awkwardly(partial), end: End::Cut }]).await;
    let events = merged(collect(model(&fake).stream(hello()).await.expect("a stream")).await);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], Ok(ModelEvent::Text("The answer is".into())));
    let error = events[1].clone().expect_err("the stream fails");
    assert_eq!(error.code, "stream_cut", "{error:?}");
}

#[tokio::test]
async fn a_chunk_that_is_not_json_is_malformed_chunk() {
    let broken = r#"{"choices": [{"index": 0, "delta": {"content": "x""#;
    let body = format!("data: {}\n\ndata: {broken}\n\n", delta(json!({"content": "fine"})));
    let fake = Fake::start(vec![Reply::Stream { pieces: vec![body.into_bytes()], end: End::Complete }]).await;
    let events = collect(model(&fake).stream(hello()).await.expect("a stream")).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], Ok(ModelEvent::Text("fine".into())));
    let error = events[1].clone().expect_err("the stream fails");
    assert_eq!(error.code, "malformed_chunk");
    assert!(error.message.contains(broken), "{}", error.message);
}

#[tokio::test]
async fn dropping_the_stream_mid_answer_closes_the_connection() {
    let body = sse(&[delta(json!({"role": "assistant", "content": ""})), delta(json!({"content": "Once upon"}))]);
    let partial = body.trim_end_matches("data: [DONE]\n\n");
    let mut fake = Fake::start(vec![Reply::Stream { pieces: vec![partial.into()], end: End::Hold }]).await;
    let mut stream = model(&fake).stream(hello()).await.expect("a stream");
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the first words arrive");
    assert_eq!(first, Some(Ok(ModelEvent::Text("Once upon".into()))));
    drop(stream);
    fake.connection_closed(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    // A port that was just free: connecting is refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("a bound address");
    drop(listener);
    let mut config = OpenAiConfig::new(format!("http://{address}/v1"), None, "m");
    config.retry = quick_retries();
    config.retry.max_retries = 1;
    let model = OpenAiModel::new(config).expect("a valid configuration");
    let events = collect(model.stream(hello()).await.expect("a stream")).await;
    assert!(matches!(events[0], Ok(ModelEvent::RetryStart { attempt: 1, .. })), "{events:?}");
    assert_eq!(events[1], Ok(ModelEvent::RetryEnd { attempt: 1, success: false }));
    let error = events[2].clone().expect_err("the call fails");
    assert_eq!(error.code, "provider_error");
    assert!(error.message.starts_with("could not reach the provider"), "{}", error.message);
}

/// A user message with a PNG and a text file, and the request carrying both files' bytes.
fn with_files() -> ModelRequest {
    let png = bytes::Bytes::from_static(b"\x89PNG\r\n\x1a\nfake");
    let log = bytes::Bytes::from_static(b"line one\n");
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
        file("app.log", "text/plain", &log, &"b".repeat(64)),
        Content::Text { text: "what broke?".into() },
    ];
    ModelRequest {
        system: None,
        messages: vec![Message::User { content, timestamp: 1 }],
        tools: Vec::new(),
        files: [("a".repeat(64), png), ("b".repeat(64), log)].into_iter().collect(),
    }
}

#[tokio::test]
async fn an_image_goes_as_an_image_url_data_url_and_a_text_file_as_named_text() {
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![answer("ok").into_bytes()], end: End::Complete }]).await;
    collect(model(&fake).stream(with_files()).await.expect("a stream")).await;
    let body = fake.request().await.body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgpmYWtl"}},
            {"type": "text", "text": "<file name=\"app.log\" type=\"text/plain\" bytes=\"9\">\nline one\n\n</file>"},
            {"type": "text", "text": "what broke?"},
        ])
    );
}

#[tokio::test]
async fn a_pdf_goes_as_a_file_part_with_a_data_url() {
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![answer("ok").into_bytes()], end: End::Complete }]).await;
    let pdf = bytes::Bytes::from_static(b"%PDF-1.7 spec");
    let sha = "c".repeat(64);
    let content = vec![
        Content::File {
            id: spool_protocol::AttachmentId::new(),
            name: "spec.pdf".into(),
            media_type: "application/pdf".into(),
            size: pdf.len() as u64,
            sha256: sha.clone(),
            url: String::new(),
        },
        Content::Text { text: "summarise".into() },
    ];
    let request = ModelRequest {
        system: None,
        messages: vec![Message::User { content, timestamp: 1 }],
        tools: Vec::new(),
        files: [(sha, pdf)].into_iter().collect(),
    };
    let model = model(&fake);
    assert_eq!(model.inputs(), spool_engine::Inputs { images: true, pdf: true }, "openai: models read PDFs");
    collect(model.stream(request).await.expect("a stream")).await;
    let body = fake.request().await.body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "file", "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjcgc3BlYw=="}},
            {"type": "text", "text": "summarise"},
        ])
    );
}
