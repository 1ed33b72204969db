//! An MCP tool call streamed identically on every dialect: one approved call of the
//! real `@modelcontextprotocol/server-everything`'s `echo` (pinned in tests/mcp, found
//! through `SPOOL_TEST_MCP_EVERYTHING`), through a real Spool server, read by five
//! clients at once: the native session stream, the WebSocket hub, OpenCode's
//! `GET /event`, the AI SDK's resumed stream and AG-UI. Each sees the same tool (Spool's
//! name for it, `everything_echo`), the same arguments and the same result text.
//!
//! AG-UI starts the run and answers its interrupt; the three live streams are open
//! before; the AI SDK client attaches once the call has ended, while the run goes on
//! (the scripted model's paced summary of the result keeps it running), and gets the
//! run from its start.

use crate::common;
use crate::mcp_support::{everything, everything_entry, offering, stdio_source};

use common::{Open, SseStream, TestOptions, TestServer, WAIT, urlencode};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const TOOL: &str = "everything_echo";
/// Long enough that the model's summary of the result, paced word by word, keeps the
/// run going while the AI SDK client attaches.
const SAID: &str = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";

/// What one client saw of the call: (tool name, arguments, result text).
type Seen = (String, Value, String);

fn parse(args: &str) -> Value {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {args}"))
}

/// The native stream's frames up to the call's end.
async fn native(stream: &mut SseStream) -> Seen {
    let frames = stream.frames_until(|f| f.event_type() == Some("tool_execution_end")).await;
    let start = frames.iter().find(|f| f.event_type() == Some("tool_execution_start")).expect("a start");
    let end = &frames.last().expect("the end").json["event"];
    let start = &start.json["event"];
    assert_eq!(start["toolCallId"], end["toolCallId"]);
    assert_eq!(end["isError"], false, "{end}");
    (str_of(&start["toolName"]), start["args"].clone(), str_of(&end["result"]))
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The hub's events up to the call's `tool.result`.
async fn hub(ws: &mut Ws) -> Seen {
    let mut used = None;
    loop {
        let message = tokio::time::timeout(WAIT, ws.next()).await.expect("a hub event in time");
        let Message::Text(text) = message.expect("the socket is open").expect("a message") else { continue };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        match event["type"].as_str() {
            Some("tool.use") => used = Some(event["data"].clone()),
            Some("tool.result") => {
                let used = used.expect("tool.use before tool.result");
                assert_eq!(used["tool_use_id"], event["data"]["tool_use_id"]);
                assert_eq!(event["data"]["is_error"], false, "{event}");
                let args = parse(used["input"].as_str().expect("input is the arguments' JSON"));
                return (str_of(&used["tool_name"]), args, str_of(&event["data"]["output"]));
            }
            _ => {}
        }
    }
}

/// OpenCode's `/event` up to the call's tool part, completed.
async fn opencode(stream: &mut SseStream, session: &str) -> Seen {
    loop {
        let event = stream.next_json().await.expect("/event stays open");
        let part = &event["properties"]["part"];
        if event["type"] == "message.part.updated"
            && part["sessionID"] == session
            && part["type"] == "tool"
            && part["state"]["status"] == "completed"
        {
            return (str_of(&part["tool"]), part["state"]["input"].clone(), str_of(&part["state"]["output"]));
        }
    }
}

/// An AI SDK stream's chunks up to `[DONE]`.
async fn ai_sdk_chunks(res: reqwest::Response) -> Vec<Value> {
    let mut stream = SseStream::new(res);
    let mut chunks = Vec::new();
    while let Some(event) = stream.next_event().await {
        if event.data == "[DONE]" {
            return chunks;
        }
        chunks.push(serde_json::from_str(&event.data).expect("a JSON chunk"));
    }
    panic!("the stream ended without [DONE]: {chunks:?}")
}

/// The call as a dynamic tool part of the AI SDK's message.
fn ai_sdk(chunks: &[Value]) -> Seen {
    let of = |kind: &str| chunks.iter().find(|c| c["type"] == kind).unwrap_or_else(|| panic!("no {kind}: {chunks:?}"));
    let (start, input, output) = (of("tool-input-start"), of("tool-input-available"), of("tool-output-available"));
    for chunk in [start, input, output] {
        assert_eq!(chunk["dynamic"], true, "Spool's tools are dynamic tools: {chunk}");
        assert_eq!(chunk["toolCallId"], start["toolCallId"]);
    }
    assert_eq!(input["toolName"], start["toolName"]);
    (str_of(&start["toolName"]), input["input"].clone(), str_of(&output["output"]))
}

/// The AG-UI events of the request that started the run and of the one that answered it.
fn ag_ui(asked: &[Value], rest: &[Value]) -> Seen {
    let start = asked.iter().find(|e| e["type"] == "TOOL_CALL_START").expect("TOOL_CALL_START");
    let call = &start["toolCallId"];
    let args: String = asked
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS" && e["toolCallId"] == *call)
        .map(|e| e["delta"].as_str().expect("delta"))
        .collect();
    assert!(asked.iter().any(|e| e["type"] == "TOOL_CALL_END" && e["toolCallId"] == *call));
    let result = rest.iter().find(|e| e["type"] == "TOOL_CALL_RESULT").expect("TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], *call);
    (str_of(&start["toolCallName"]), parse(&args), str_of(&result["content"]))
}

fn str_of(value: &Value) -> String {
    value.as_str().unwrap_or_else(|| panic!("not a string: {value}")).to_owned()
}

async fn ag_ui_post(server: &TestServer, body: &Value) -> Vec<Value> {
    let request = server.client.post(server.url("/api/ag-ui")).json(body).send();
    let res = tokio::time::timeout(WAIT, request).await.expect("answers in time").expect("request");
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let mut events = Vec::new();
    while let Some(event) = stream.next_event().await {
        events.push(serde_json::from_str(&event.data).expect("an AG-UI event is JSON"));
    }
    events
}

#[tokio::test]
async fn an_approved_mcp_call_reads_the_same_on_every_dialect() {
    let Some(index) = everything() else { return };
    let options = TestOptions { model_delay: Duration::from_millis(100), ..TestOptions::default() };
    let options = offering(stdio_source(everything_entry(&index)), options);
    let server = TestServer::start_with(options).await;
    let project = server.default_project().await;
    // Titled, so no title run's events come in between.
    let session = common::id_of(&server.create_session(&project, Some("mcp on every dialect")).await);

    let mut frames = server.events(&session, Open::fresh()).await;
    let url = format!("ws://{}/api/ws?channels={session}", server.addr);
    let (mut ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    let directory = urlencode(&server.project_dir().canonicalize().expect("project").to_string_lossy());
    let res = server.client.get(server.url(&format!("/event?directory={directory}"))).send().await.expect("/event");
    assert_eq!(res.status(), StatusCode::OK);
    let mut events = SseStream::new(res);

    // AG-UI starts the run on the session and is asked to approve the call.
    let args = json!({"message": SAID});
    let messages = json!([{"id": "m1", "role": "user", "content": format!("tool: {TOOL} {args}")}]);
    let mut input = json!({
        "threadId": session, "runId": "client-run", "messages": messages, "tools": [], "context": [],
        "state": {}, "forwardedProps": {"projectId": project},
    });
    let asked = ag_ui_post(&server, &input).await;
    let interrupt = &asked.last().expect("an end")["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_approval", "{interrupt}");
    input["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]);

    // Approved through AG-UI.
    let answering = tokio::spawn({
        let (client, url, input) = (server.client.clone(), server.url("/api/ag-ui"), input.clone());
        async move { client.post(url).json(&input).send().await.expect("the answer") }
    });
    // Once the call has ended (read from the native stream), the AI SDK client attaches
    // to the run, still going on, and gets it from its start.
    let native_seen = native(&mut frames).await;
    let chunks = loop {
        let res = server.client.get(server.url(&format!("/api/ai-sdk/chat/{session}/stream"))).send().await;
        let res = res.expect("the AI SDK's reconnect");
        assert_eq!(res.status(), StatusCode::OK, "the run ended before the AI SDK client attached");
        let chunks = ai_sdk_chunks(res).await;
        // Still parked: the approval has not been applied yet.
        if chunks.iter().any(|c| c["type"] == "tool-output-available") {
            break chunks;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let res = answering.await.expect("the answering request");
    assert_eq!(res.status(), StatusCode::OK);
    let mut rest = Vec::new();
    let mut stream = SseStream::new(res);
    while let Some(event) = stream.next_event().await {
        rest.push(serde_json::from_str::<Value>(&event.data).expect("JSON"));
    }
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}), "{rest:?}");

    let expected: Seen = (TOOL.to_owned(), args.clone(), format!("Echo: {SAID}"));
    let seen = [
        ("native", native_seen),
        ("hub", hub(&mut ws).await),
        ("opencode", opencode(&mut events, &session).await),
        ("ai-sdk", ai_sdk(&chunks)),
        ("ag-ui", ag_ui(&asked, &rest)),
    ];
    for (dialect, seen) in seen {
        assert_eq!(seen, expected, "{dialect}");
    }
    let results = server.tool_results(&session).await;
    assert_eq!(results, [(TOOL.to_owned(), format!("Echo: {SAID}"), false)], "called once");
}
