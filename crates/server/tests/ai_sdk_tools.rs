//! Client-side tools over the AI SDK dialect (issue 40), on the wire as
//! `DefaultChatTransport` speaks it: the body's `tools` declare them, a call of one
//! reaches the client as a call it answers (`tool-input-available`,
//! `providerExecuted: false`, the approval in `providerMetadata`) and the stream stops
//! there; the output `addToolOutput` leaves on the part, sent back with the chat, is the
//! call's result, once, however often the chat is sent again. A user message's `file`
//! parts reach the model the same way, once (issue 42).

use crate::common;

use common::{SseStream, TestServer, WAIT};
use reqwest::StatusCode;
use serde_json::{Value, json};

const CITY: &str = "Oslo";

/// The body's `tools`: one tool the client runs.
fn tools() -> Value {
    json!({
        "get_weather": {
            "description": "The weather in a city, as the client's app knows it",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    })
}

fn user_message(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

/// Posts `body` to the chat route: its status and, for a 200, the stream's chunks up to
/// `[DONE]`; else the JSON error as the one chunk.
async fn post_chat(server: &TestServer, body: &Value) -> (StatusCode, Vec<Value>) {
    let res = server.client.post(server.url("/api/ai-sdk/chat")).json(body).send();
    let res = tokio::time::timeout(WAIT, res).await.expect("the chat answers in time").expect("the chat request");
    let status = res.status();
    if status != StatusCode::OK {
        return (status, vec![res.json().await.expect("a JSON error")]);
    }
    let mut stream = SseStream::new(res);
    let mut chunks = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, stream.next_event()).await.expect("a chunk in time");
        let event = event.unwrap_or_else(|| panic!("the stream ended without [DONE]: {chunks:?}"));
        if event.data == "[DONE]" {
            return (status, chunks);
        }
        chunks.push(serde_json::from_str(&event.data).expect("a JSON chunk"));
    }
}

fn of_type<'a>(chunks: &'a [Value], kind: &str) -> Vec<&'a Value> {
    chunks.iter().filter(|c| c["type"] == kind).collect()
}

/// A chat whose prompt makes the model call the client's `get_weather`: the request
/// body, the stream's chunks, and the call's `tool-input-available`.
async fn parked_chat(server: &TestServer, chat: &str) -> (Value, Vec<Value>, Value) {
    let project = server.default_project().await;
    let prompt = format!("tool: get_weather {{\"city\":\"{CITY}\"}}");
    let body = json!({
        "id": chat,
        "messages": [user_message("u1", &prompt)],
        "trigger": "submit-message",
        "projectId": project,
        "tools": tools(),
    });
    let (status, chunks) = post_chat(server, &body).await;
    assert_eq!(status, StatusCode::OK, "{chunks:?}");
    let inputs = of_type(&chunks, "tool-input-available");
    assert_eq!(inputs.len(), 1, "the call once: {chunks:?}");
    let input = inputs[0].clone();
    (body, chunks, input)
}

/// The assistant message as the client holds it once `addToolOutput` (or its error
/// form) answered the call: `answer` is the part's `output` or `errorText` fields.
fn answered(run_id: &Value, input: &Value, answer: Value) -> Value {
    let mut part = json!({
        "type": "dynamic-tool",
        "toolName": input["toolName"],
        "toolCallId": input["toolCallId"],
        "input": input["input"],
        "callProviderMetadata": input["providerMetadata"],
    });
    for (key, value) in answer.as_object().expect("fields") {
        part[key] = value.clone();
    }
    json!({"id": run_id, "role": "assistant", "parts": [{"type": "step-start"}, part]})
}

/// `body` with `assistant` as its last message.
fn with_answer(body: &Value, assistant: Value) -> Value {
    let mut body = body.clone();
    body["messages"].as_array_mut().expect("messages").push(assistant);
    body
}

async fn session_of(server: &TestServer, run_id: &Value) -> String {
    let (status, run) = server.get(&format!("/api/runs/{}", run_id.as_str().expect("run id"))).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    run["sessionId"].as_str().expect("sessionId").to_owned()
}

#[tokio::test]
async fn a_client_tool_call_parks_the_chat_and_its_output_continues_the_same_message() {
    let server = TestServer::start().await;
    let (body, chunks, input) = parked_chat(&server, "client-tools-ok").await;
    // The call is the client's to run: onToolCall fires for it, and the part it builds
    // names the approval the output decides.
    assert_eq!(input["toolName"], "get_weather");
    assert_eq!(input["input"], json!({"city": CITY}));
    assert_eq!(input["providerExecuted"], false);
    assert_eq!(input["dynamic"], true);
    let approval = input["providerMetadata"]["spool"]["approvalId"].as_str().expect("approvalId").to_owned();
    assert!(approval.starts_with("per_"), "{input}");
    assert!(of_type(&chunks, "tool-approval-request").is_empty(), "nobody is asked to approve: {chunks:?}");
    assert_eq!(chunks.last().expect("an end"), &json!({"type": "finish", "finishReason": "tool-calls"}));
    let run_id = chunks[0]["messageId"].clone();
    let session = session_of(&server, &run_id).await;
    let (_, run) = server.get(&format!("/api/runs/{}", run_id.as_str().expect("run id"))).await;
    assert_eq!(run["status"], "interrupted", "the run waits for the client");

    // addToolOutput, and the chat sent again with the answered part.
    let output = json!({"sky": "sunny", "celsius": 3});
    let answer = with_answer(&body, answered(&run_id, &input, json!({"state": "output-available", "output": output})));
    let (status, rest) = post_chat(&server, &answer).await;
    assert_eq!(status, StatusCode::OK, "{rest:?}");
    assert_eq!(rest[0], json!({"type": "start", "messageId": run_id}), "the same message goes on");
    let outputs = of_type(&rest, "tool-output-available");
    assert_eq!(outputs.len(), 1, "{rest:?}");
    assert_eq!(outputs[0]["toolCallId"], input["toolCallId"]);
    let text = outputs[0]["output"].as_str().expect("the result as the model reads it");
    assert!(text.contains("sunny"), "{text}");
    assert!(of_type(&rest, "tool-input-available").is_empty(), "the client has the call: {rest:?}");
    assert_eq!(rest.last().expect("an end"), &json!({"type": "finish", "finishReason": "stop"}));
    let said: String = of_type(&rest, "text-delta").iter().map(|c| c["delta"].as_str().expect("delta")).collect();
    assert!(said.contains("get_weather returned") && said.contains("sunny"), "the model read it: {said}");

    // The same request again (a retry) replays the answer; what the client holds after
    // the continuation (the result as text), or another output, answers nothing twice.
    let (status, again) = post_chat(&server, &answer).await;
    assert_eq!(status, StatusCode::OK, "{again:?}");
    assert_eq!(again.last().expect("an end")["type"], "finish");
    for output in [json!(text), json!("cloudy")] {
        let resent =
            with_answer(&body, answered(&run_id, &input, json!({"state": "output-available", "output": output})));
        let (status, refused) = post_chat(&server, &resent).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused:?}");
        assert_eq!(refused[0]["error"]["code"], "already_resolved");
    }
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "one result: {results:?}");
    assert_eq!(results[0].0, "get_weather");
    assert!(results[0].1.contains("sunny") && !results[0].2, "{results:?}");
}

#[tokio::test]
async fn a_client_tools_output_error_is_an_error_result_the_model_is_told() {
    let server = TestServer::start().await;
    let (body, chunks, input) = parked_chat(&server, "client-tools-error").await;
    let run_id = chunks[0]["messageId"].clone();
    let failed = json!({"state": "output-error", "errorText": "location services are off"});
    let (status, rest) = post_chat(&server, &with_answer(&body, answered(&run_id, &input, failed))).await;
    assert_eq!(status, StatusCode::OK, "{rest:?}");
    let errors = of_type(&rest, "tool-output-error");
    assert_eq!(errors.len(), 1, "{rest:?}");
    assert_eq!(errors[0]["toolCallId"], input["toolCallId"]);
    assert!(errors[0]["errorText"].as_str().expect("errorText").contains("location services are off"));
    assert!(of_type(&rest, "tool-output-denied").is_empty(), "an error, not a denial: {rest:?}");
    let said: String = of_type(&rest, "text-delta").iter().map(|c| c["delta"].as_str().expect("delta")).collect();
    assert!(said.contains("get_weather failed"), "the model is told: {said}");
    let session = session_of(&server, &run_id).await;
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].2 && results[0].1.contains("location services are off"), "{results:?}");
    let (_, run) = server.get(&format!("/api/runs/{}", run_id.as_str().expect("run id"))).await;
    assert_eq!(run["status"], "completed");
}

#[tokio::test]
async fn an_answer_of_the_wrong_kind_is_refused_and_decides_nothing() {
    let server = TestServer::start().await;
    let (body, chunks, input) = parked_chat(&server, "client-tools-wrong").await;
    let run_id = chunks[0]["messageId"].clone();
    // A client call answered as if it were a question.
    let mut as_question = input.clone();
    as_question["toolName"] = json!("question");
    let answer = answered(&run_id, &as_question, json!({"state": "output-available", "output": {"answer": "x"}}));
    let (status, refused) = post_chat(&server, &with_answer(&body, answer)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], "wrong_answer_kind");
    let (_, run) = server.get(&format!("/api/runs/{}", run_id.as_str().expect("run id"))).await;
    assert_eq!(run["status"], "interrupted", "still waiting for the client");

    // A bad declaration is the engine's refusal.
    let mut bad = body.clone();
    bad["id"] = json!("client-tools-bad");
    bad["tools"] = json!({"has space": {"inputSchema": {"type": "object"}}});
    let (status, refused) = post_chat(&server, &bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], "invalid_client_tool");
}

/// `part` of a `dynamic-tool` call answered with `output`, as `addToolOutput` leaves it.
fn answered_part(input: &Value, output: Value) -> Value {
    json!({
        "type": "dynamic-tool",
        "toolName": input["toolName"],
        "toolCallId": input["toolCallId"],
        "input": input["input"],
        "callProviderMetadata": input["providerMetadata"],
        "state": "output-available",
        "output": output,
    })
}

#[tokio::test]
async fn two_client_calls_in_one_answer_reach_the_client_one_after_the_other() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let prompt = "tool: get_weather {\"city\":\"Oslo\"}\ntool: get_weather {\"city\":\"Bergen\"}";
    let body = json!({
        "id": "client-tools-two",
        "messages": [user_message("u1", prompt)],
        "trigger": "submit-message",
        "projectId": project,
        "tools": tools(),
    });
    let (status, chunks) = post_chat(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{chunks:?}");
    // Only the first call is the client's to run now.
    let inputs = of_type(&chunks, "tool-input-available");
    assert_eq!(inputs.len(), 1, "the first call only: {chunks:?}");
    let first = inputs[0].clone();
    assert_eq!(first["input"], json!({"city": "Oslo"}));
    assert_eq!(chunks.last().expect("an end"), &json!({"type": "finish", "finishReason": "tool-calls"}));
    let run_id = chunks[0]["messageId"].clone();
    let session = session_of(&server, &run_id).await;

    // Its output: the same message goes on and stops at the second call.
    let assistant = |parts: Vec<Value>| {
        let mut all = vec![json!({"type": "step-start"})];
        all.extend(parts);
        json!({"id": run_id, "role": "assistant", "parts": all})
    };
    let one = with_answer(&body, assistant(vec![answered_part(&first, json!("sunny"))]));
    let (status, middle) = post_chat(&server, &one).await;
    assert_eq!(status, StatusCode::OK, "{middle:?}");
    assert_eq!(middle[0], json!({"type": "start", "messageId": run_id}));
    let inputs = of_type(&middle, "tool-input-available");
    assert_eq!(inputs.len(), 1, "the second call now: {middle:?}");
    let second = inputs[0].clone();
    assert_eq!(second["input"], json!({"city": "Bergen"}));
    assert_ne!(second["toolCallId"], first["toolCallId"]);
    assert_ne!(second["providerMetadata"], first["providerMetadata"], "its own approval");
    assert_eq!(middle.last().expect("an end"), &json!({"type": "finish", "finishReason": "tool-calls"}));
    let first_output = of_type(&middle, "tool-output-available");
    assert_eq!(first_output.len(), 1, "{middle:?}");
    assert_eq!(first_output[0]["toolCallId"], first["toolCallId"]);
    let first_text = first_output[0]["output"].clone();

    // The message as the client holds it then (the first's output as the stream
    // gave it back), with the second's output: the run finishes, each result once.
    let both =
        with_answer(&body, assistant(vec![answered_part(&first, first_text), answered_part(&second, json!("rainy"))]));
    let (status, rest) = post_chat(&server, &both).await;
    assert_eq!(status, StatusCode::OK, "{rest:?}");
    assert_eq!(rest[0], json!({"type": "start", "messageId": run_id}));
    assert!(of_type(&rest, "tool-input-available").is_empty(), "{rest:?}");
    assert_eq!(rest.last().expect("an end"), &json!({"type": "finish", "finishReason": "stop"}));
    let said: String = of_type(&rest, "text-delta").iter().map(|c| c["delta"].as_str().expect("delta")).collect();
    assert!(said.contains("rainy"), "{said}");
    let results = server.tool_results(&session).await;
    assert_eq!(results.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), ["sunny", "rainy"], "{results:?}");
}

/// The scripted model's line for a file it got whole (issue 42).
fn received(name: &str, media_type: &str, bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let sha: String = sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("Received {name} ({media_type}, {} bytes, sha256 {}…, bytes match)\n", bytes.len(), &sha[..8])
}

/// A user message's `file` parts (what `sendMessage({text, files})` sends: the files
/// first, as data URLs) reach the model; the transport sends the whole chat again with
/// the next message, and only that message's files go with its prompt.
#[tokio::test]
async fn a_user_messages_file_parts_reach_the_model_and_earlier_ones_are_not_sent_again() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let data_url = |media_type: &str, bytes: &[u8]| {
        use base64::Engine as _;
        format!("data:{media_type};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    let first = json!({"id": "u1", "role": "user", "parts": [
        {"type": "file", "mediaType": "image/png", "filename": "shot.png", "url": data_url("image/png", png)},
        {"type": "text", "text": "echo: seen"},
    ]});
    let body =
        json!({"id": "chat-files", "messages": [first.clone()], "trigger": "submit-message", "projectId": project});
    let (status, chunks) = post_chat(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{chunks:?}");
    let said: String = of_type(&chunks, "text-delta").iter().map(|c| c["delta"].as_str().expect("delta")).collect();
    assert_eq!(said, received("shot.png", "image/png", png) + "seen");

    let log = b"line one\n";
    let assistant = json!({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": said}]});
    let second = json!({"id": "u2", "role": "user", "parts": [
        {"type": "file", "mediaType": "text/plain", "filename": "app.log", "url": data_url("text/plain", log)},
    ]});
    let body = json!({"id": "chat-files", "messages": [first, assistant, second], "trigger": "submit-message"});
    let (status, chunks) = post_chat(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{chunks:?}");
    let said: String = of_type(&chunks, "text-delta").iter().map(|c| c["delta"].as_str().expect("delta")).collect();
    assert!(said.starts_with(&received("app.log", "text/plain", log)), "{said}");
    assert!(!said.contains("shot.png"), "the earlier message's file is not sent again: {said}");
}
