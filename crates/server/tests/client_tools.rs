//! Tools that live in the client (issue 40), through a real server: a prompt declares
//! them (`tools`), the model is offered them beside Spool's own, a call of one parks
//! the run at a `provide_input` approval marked `client: true` until its result is
//! decided (`{"decision": {"output": {…}}}`), and the model then reads the result.
//! Permission rules apply (deny, ask), an unanswered call expires, a parked call and a
//! result recorded before a crash both survive a restart, and a result is taken once.

use crate::common;

use common::{Open, TestServer, WAIT, id_of, recording_server, settle_in_store};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, ManualClock};
use spool_protocol::{Content, Message};
use std::time::Duration;

const CALL: &str = r#"tool: get_location {"city":"Oslo"}"#;

fn get_location() -> Value {
    json!({
        "name": "get_location",
        "description": "Where the user is, from the browser",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    })
}

/// `POST /api/sessions/:id/prompt` with client tools.
async fn prompt_with(server: &TestServer, session: &str, text: &str, tools: Value) -> (StatusCode, Value) {
    server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": text, "tools": tools})).await
}

/// The session's pending approvals, as `GET /api/sessions/:id` shows them.
async fn pending(server: &TestServer, session: &str) -> Vec<Value> {
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals").clone()
}

/// Waits until the session's one pending approval is of `kind`; returns it.
async fn wait_pending(server: &TestServer, session: &str, kind: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pending = pending(server, session).await;
        if let [one] = pending.as_slice()
            && one["kind"] == kind
        {
            return one.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no pending {kind} approval: {pending:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts `get_location` on Oslo with the tool declared; returns the run id.
async fn start_call(server: &TestServer, session: &str) -> String {
    let (status, body) = prompt_with(server, session, CALL, json!([get_location()])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "prompt: {body}");
    body["runId"].as_str().expect("runId").to_owned()
}

/// A new session with one permission rule: `action` for the tools `tool` names.
async fn session_with_rule(server: &TestServer, tool: &str, action: &str) -> String {
    let session = server.new_session().await;
    let rules = json!({"permissions": [{"tool": tool, "action": action}]});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), rules).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    session
}

/// Starts `get_location` on Oslo with the tool declared; waits until the run is parked
/// at the client call. Returns the run id and the call's approval.
async fn park_client(server: &TestServer, session: &str) -> (String, Value) {
    let run_id = start_call(server, session).await;
    let run = server.wait_run_until(&run_id, |r| r["status"] != "running").await;
    assert_eq!(run["status"], "interrupted", "{run}");
    (run_id, wait_pending(server, session, "provide_input").await)
}

async fn decide(server: &TestServer, session: &str, approval: &Value, body: Value) -> (StatusCode, Value) {
    let id = approval["id"].as_str().expect("approval id");
    server.post(&format!("/api/sessions/{session}/approvals/{id}"), body).await
}

fn output(value: Value) -> Value {
    json!({"decision": {"output": {"output": value}}})
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// The roles of the session's stored messages, in order.
async fn roles(server: &TestServer, session: &str) -> Vec<String> {
    let page = server.messages(session, "").await;
    page["messages"].as_array().expect("messages").iter().map(|m| m["role"].as_str().unwrap_or("").into()).collect()
}

/// The text of the last assistant message stored.
async fn last_answer(server: &TestServer, session: &str) -> String {
    let page = server.messages(session, "").await;
    let last = page["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "assistant");
    let content = last.expect("an assistant message")["content"].as_array().expect("content").clone();
    content.iter().filter_map(|c| c["text"].as_str()).collect()
}

#[tokio::test]
async fn a_declared_tool_is_offered_to_the_model_beside_spools_and_a_bad_one_is_refused() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let refused = [
        (json!([{"name": "get location"}]), "invalid_client_tool", "get location"),
        (json!([{"name": "x".repeat(65)}]), "invalid_client_tool", "64"),
        (json!([get_location(), get_location()]), "invalid_client_tool", "twice"),
        (json!([{"name": "read", "description": "mine"}]), "client_tool_conflict", "read"),
        (json!([{"name": "big", "description": "d".repeat(5000)}]), "invalid_client_tool", "description"),
        (json!([{"name": "arr", "parameters": {"type": "array"}}]), "invalid_client_tool", "arr"),
        (
            json!([{"name": "huge", "parameters": {"type": "object", "x": "y".repeat(17_000)}}]),
            "invalid_client_tool",
            "huge",
        ),
    ];
    for (tools, want, says) in refused {
        let (status, body) = prompt_with(&server, &session, CALL, tools).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(code(&body), want, "{body}");
        assert!(body["error"]["message"].as_str().unwrap_or("").contains(says), "{body}");
    }
    let too_many: Vec<Value> = (0..33).map(|i| json!({"name": format!("t{i}")})).collect();
    let (status, body) = prompt_with(&server, &session, CALL, json!(too_many)).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "invalid_client_tool"), "{body}");
    let body = json!({"text": CALL, "tools": [get_location()], "queue": true});
    let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "client_tools_not_queueable"), "{body}");
    // Nothing refused reached the model.
    assert!(seen.lock().expect("lock").is_empty());
    assert_eq!(roles(&server, &session).await, Vec::<String>::new());

    let (_, approval) = park_client(&server, &session).await;
    let offered: Vec<(String, String, Value)> = seen.lock().expect("lock")[0]
        .tools
        .iter()
        .map(|t| (t.name.clone(), t.description.clone(), t.parameters.clone()))
        .collect();
    let client = offered.iter().find(|t| t.0 == "get_location").expect("the client tool is offered");
    assert_eq!(client.1, "Where the user is, from the browser");
    assert_eq!(client.2, get_location()["parameters"]);
    for spools in ["read", "write", "bash"] {
        assert!(offered.iter().any(|t| t.0 == spools), "{spools} is offered too: {offered:?}");
    }
    // Declared for its prompt only: the next prompt's model call does not offer it.
    let (status, body) = decide(&server, &session, &approval, output(json!("Oslo, Norway"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.wait_run(body["runId"].as_str().expect("runId")).await;
    server.run_prompt(&session, "echo: and now?").await;
    let last = seen.lock().expect("lock").last().cloned().expect("a request");
    assert!(!last.tools.iter().any(|t| t.name == "get_location"), "not offered after its prompt");
}

#[tokio::test]
async fn a_call_of_a_client_tool_parks_the_run_until_its_result_and_the_model_then_reads_it() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let mut view = server.events(&session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let (run_id, approval) = park_client(&server, &session).await;
    assert_eq!(approval["tool"], "get_location");
    assert_eq!(approval["toolCallId"], "call_1");
    assert_eq!(approval["runId"], run_id.as_str());
    assert_eq!(approval["status"], "pending");
    assert_eq!(
        approval["payload"],
        json!({
            "client": true,
            "tool": "get_location",
            "arguments": {"city": "Oslo"},
            "description": "Where the user is, from the browser",
        })
    );
    // Parked: asked for, nothing of the call started (the client runs it).
    let parked = view.frames_until(|f| f.event_type() == Some("approval_requested")).await;
    assert!(!parked.iter().any(|f| f.event_type() == Some("tool_execution_start")), "nothing started yet");
    assert_eq!(roles(&server, &session).await, ["user", "assistant"]);
    let requests_before = seen.lock().expect("lock").len();

    let (status, body) = decide(&server, &session, &approval, output(json!("Oslo, Norway\nnear the fjord"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["decision"], json!({"output": {"output": "Oslo, Norway\nnear the fjord", "isError": false}}));
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let types: Vec<&str> = frames.iter().filter_map(|f| f.event_type()).collect();
    let start = types.iter().position(|t| *t == "tool_execution_start").expect("tool_execution_start");
    let end = types.iter().position(|t| *t == "tool_execution_end").expect("tool_execution_end");
    assert!(types.iter().position(|t| *t == "approval_resolved").expect("resolved") < start, "{types:?}");
    assert!(start < end, "{types:?}");
    let ended = &frames.iter().find(|f| f.event_type() == Some("tool_execution_end")).expect("end").json["event"];
    assert_eq!(ended["result"], "Oslo, Norway\nnear the fjord");
    assert_eq!(ended["isError"], false);

    // The model's next request ends with the client's result, and it answered from it.
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), requests_before + 1, "one more model call");
    match seen.last().and_then(|r| r.messages.last()) {
        Some(Message::ToolResult { tool_call_id, tool_name, content, is_error, .. }) => {
            assert_eq!((tool_call_id.as_str(), tool_name.as_str(), *is_error), ("call_1", "get_location", false));
            assert_eq!(content, &vec![Content::Text { text: "Oslo, Norway\nnear the fjord".into() }]);
        }
        other => panic!("the model's last request ends with {other:?}"),
    }
    assert_eq!(last_answer(&server, &session).await, "Tool get_location returned 2 lines: Oslo, Norway");
    assert_eq!(roles(&server, &session).await, ["user", "assistant", "toolResult", "assistant"]);

    // A JSON result reads as compact JSON; a failed one as an error.
    let (run_id, approval) = park_client(&server, &session).await;
    let failed = json!({"decision": {"output": {"output": {"code": "denied"}, "isError": true}}});
    let (status, body) = decide(&server, &session, &approval, failed).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results[1], ("get_location".into(), r#"{"code":"denied"}"#.into(), true));
    assert_eq!(last_answer(&server, &session).await, r#"Tool get_location failed: {"code":"denied"}"#);
}

#[tokio::test]
async fn a_deny_rule_on_a_client_tool_never_reaches_the_client_and_the_model_is_told() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = session_with_rule(&server, "get_location", "deny").await;
    let mut view = server.events(&session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let run = server.wait_run(&start_call(&server, &session).await).await;
    assert_eq!(run["status"], "completed", "{run}");
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    assert!(!frames.iter().any(|f| f.event_type() == Some("approval_requested")), "nothing was asked");
    let denied = "get_location is denied by a permission rule";
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), denied.into(), true)]);
    match seen.lock().expect("lock").last().and_then(|r| r.messages.last()) {
        Some(Message::ToolResult { is_error: true, content, .. }) => {
            assert_eq!(content, &vec![Content::Text { text: denied.into() }])
        }
        other => panic!("the model's last request ends with {other:?}"),
    }
    assert_eq!(last_answer(&server, &session).await, format!("Tool get_location failed: {denied}"));
}

#[tokio::test]
async fn an_ask_rule_on_a_client_tool_asks_the_person_first() {
    let (server, _seen) = recording_server(EngineConfig::default()).await;
    let session = session_with_rule(&server, "get_*", "ask").await;
    let run_id = start_call(&server, &session).await;
    // The person first: an ordinary approval, not yet the client's call.
    let asked = wait_pending(&server, &session, "confirm_action").await;
    assert_eq!(asked["tool"], "get_location");
    assert_eq!(asked["payload"].get("client"), None, "{asked}");
    let (status, body) = decide(&server, &session, &asked, output(json!("too early"))).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "wrong_answer_kind"), "{body}");
    let (status, body) = decide(&server, &session, &asked, json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Approved: now the client runs it.
    let call = wait_pending(&server, &session, "provide_input").await;
    assert_eq!(call["payload"]["client"], true, "{call}");
    assert_eq!(call["toolCallId"], asked["toolCallId"]);
    assert_eq!(server.wait_run_until(&run_id, |r| r["status"] != "running").await["status"], "interrupted");
    let (status, body) = decide(&server, &session, &call, json!({"decision": "once"})).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "wrong_answer_kind"), "{body}");
    let (status, body) = decide(&server, &session, &call, output(json!("Oslo"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), "Oslo".into(), false)]);
}

/// The person approved the call (an `ask` rule) and the server stopped before the run
/// went on: after the restart the call parks for the client, once.
#[tokio::test]
async fn an_approval_recorded_before_a_restart_parks_the_client_call_after_it() {
    let (server, _seen) = recording_server(EngineConfig::default()).await;
    let session = session_with_rule(&server, "get_location", "ask").await;
    let run_id = start_call(&server, &session).await;
    let asked = wait_pending(&server, &session, "confirm_action").await;
    settle_in_store(&server, &asked, spool_protocol::Decision::Once).await;
    let server = server.restart().await;
    let call = wait_pending(&server, &session, "provide_input").await;
    assert_eq!(call["payload"]["client"], true, "{call}");
    let (status, body) = decide(&server, &session, &call, output(json!("Oslo"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), "Oslo".into(), false)]);
    assert_eq!(roles(&server, &session).await, ["user", "assistant", "toolResult", "assistant"]);
}

#[tokio::test]
async fn a_client_call_left_unanswered_expires_and_cancels_its_run() {
    // Only a client tool's call waits this short: a person's approvals keep the long
    // default. Shorter than a lease, so moving the clock past it leaves the run its lease.
    let clock = ManualClock::starting_now();
    let client_tool_ttl = Duration::from_secs(2);
    let engine = EngineConfig { clock: clock.clone().into(), client_tool_ttl, ..EngineConfig::default() };
    let (server, _seen) = recording_server(engine).await;
    let session = server.new_session().await;
    let (run_id, approval) = park_client(&server, &session).await;
    let expires_at = approval["expiresAt"].as_i64().expect("expiresAt");
    assert_eq!(expires_at - approval["createdAt"].as_i64().expect("createdAt"), 2000);
    clock.advance_to(expires_at);
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"]["code"], "client_tool_expired", "{run}");
    assert!(run["error"]["message"].as_str().unwrap_or("").contains("get_location"), "{run}");
    let (status, body) = decide(&server, &session, &approval, output(json!("late"))).await;
    assert_eq!((status, code(&body)), (StatusCode::GONE, "client_tool_expired"), "{body}");
    assert!(pending(&server, &session).await.is_empty());
    // The call ends as never run, for every view and the model's next prompt.
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].2 && results[0].1.contains("cancelled before it ran"), "{results:?}");
    assert_eq!(server.run_prompt(&session, "echo: next").await["status"], "completed");
}

#[tokio::test]
async fn rejecting_a_client_call_cancels_its_run_and_a_message_goes_to_the_model() {
    let (server, _seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = park_client(&server, &session).await;
    let (status, body) = decide(&server, &session, &approval, json!({"decision": "reject"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = server.wait_run(&run_id).await;
    assert_eq!((run["status"].as_str(), run["error"]["code"].as_str()), (Some("cancelled"), Some("approval_rejected")));
    let (run_id, approval) = park_client(&server, &session).await;
    let told = json!({"decision": "reject", "message": "use the IP instead"});
    let (status, body) = decide(&server, &session, &approval, told).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let results = server.tool_results(&session).await;
    let told = "The user rejected this get_location call: use the IP instead";
    assert_eq!(results.last(), Some(&("get_location".into(), told.into(), true)));
}

#[tokio::test]
async fn a_parked_client_call_is_answered_after_a_server_restart_and_the_run_goes_on_once() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = park_client(&server, &session).await;
    let server = server.restart().await;
    // Still parked, still listed, still the client's.
    assert_eq!(server.wait_run_until(&run_id, |_| true).await["status"], "interrupted");
    let listed = wait_pending(&server, &session, "provide_input").await;
    assert_eq!(
        (listed["id"].clone(), listed["payload"].clone()),
        (approval["id"].clone(), approval["payload"].clone())
    );
    let before = seen.lock().expect("lock").len();
    let (status, body) = decide(&server, &session, &approval, output(json!("Oslo"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(seen.lock().expect("lock").len(), before + 1, "the run went on with one model call");
    assert_eq!(roles(&server, &session).await, ["user", "assistant", "toolResult", "assistant"]);
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), "Oslo".into(), false)]);
    // The declared tools went along: the resumed turn offered the client tool again.
    let last = seen.lock().expect("lock").last().cloned().expect("a request");
    assert!(last.tools.iter().any(|t| t.name == "get_location"), "still offered after the restart");
}

#[tokio::test]
async fn a_result_recorded_before_a_restart_is_committed_once_after_it() {
    let (server, _seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = park_client(&server, &session).await;
    // The crash window: the result is stored, the run never went on.
    let result = spool_protocol::Decision::Output(spool_protocol::approval::ClientOutput {
        output: json!("Oslo"),
        is_error: false,
    });
    settle_in_store(&server, &approval, result).await;
    let server = server.restart().await;
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), "Oslo".into(), false)]);
    assert_eq!(roles(&server, &session).await, ["user", "assistant", "toolResult", "assistant"]);
    assert!(pending(&server, &session).await.is_empty());
    // A second restart finds nothing more to do.
    let server = server.restart().await;
    assert_eq!(server.run_prompt(&session, "echo: free").await["status"], "completed");
    assert_eq!(server.tool_results(&session).await.len(), 1);
}

#[tokio::test]
async fn a_result_is_taken_once_and_its_idempotency_key_replays_it() {
    let (server, _seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let (run_id, approval) = park_client(&server, &session).await;
    // Refused without deciding anything: too large, or the wrong kind of answer.
    let (status, body) = decide(&server, &session, &approval, output(json!("z".repeat(300 * 1024)))).await;
    assert_eq!((status, code(&body)), (StatusCode::PAYLOAD_TOO_LARGE, "output_too_large"), "{body}");
    let fill = json!({"decision": {"fill": {"city": "Bergen"}}});
    let (status, body) = decide(&server, &session, &approval, fill).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "wrong_answer_kind"), "{body}");

    let first = json!({"decision": {"output": {"output": "Oslo"}}, "idempotencyKey": "k-1"});
    let (status, answered) = decide(&server, &session, &approval, first.clone()).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    let (status, again) = decide(&server, &session, &approval, first).await;
    assert_eq!((status, &again), (StatusCode::OK, &answered), "the same key replays the first answer");
    let other = json!({"decision": {"output": {"output": "Bergen"}}, "idempotencyKey": "k-2"});
    let (status, body) = decide(&server, &session, &approval, other).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "already_resolved"), "{body}");
    let (status, body) = decide(&server, &session, &approval, output(json!("Bergen"))).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "already_resolved"), "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await, [("get_location".into(), "Oslo".into(), false)]);
}

fn get_time() -> Value {
    json!({"name": "get_time", "description": "The browser's clock", "parameters": {"type": "object"}})
}

/// Waits until the session's one pending approval is the client call `call_id`.
async fn wait_call(server: &TestServer, session: &str, call_id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pending = pending(server, session).await;
        if let [one] = pending.as_slice()
            && one["toolCallId"] == call_id
        {
            return one.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{call_id} never waited alone: {pending:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn two_client_calls_in_one_answer_park_one_at_a_time_and_the_model_reads_both_results_once() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let session = server.new_session().await;
    let text = format!("{CALL}\ntool: get_time {{\"zone\":\"CET\"}}");
    let (status, body) = prompt_with(&server, &session, &text, json!([get_location(), get_time()])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "prompt: {body}");
    let run_id = body["runId"].as_str().expect("runId").to_owned();

    // Parked at the first; the second is in the answer but waits for nothing yet.
    let first = wait_call(&server, &session, "call_1").await;
    assert_eq!(first["tool"], "get_location");
    let run = server.wait_run_until(&run_id, |r| r["status"] != "running").await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert_eq!(roles(&server, &session).await, ["user", "assistant"]);
    // The second call has no approval to answer yet: a result for any other id is 404.
    let stray = server.post("/api/tool-calls/per_01jd0000000000000000000000/result", json!({"output": "12:00"})).await;
    assert_eq!((stray.0, code(&stray.1)), (StatusCode::NOT_FOUND, "not_found"), "{}", stray.1);
    let requests_before = seen.lock().expect("lock").len();

    let (status, body) =
        server.post(&format!("/api/tool-calls/{}/result", id_of(&first)), json!({"output": "Oslo"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["toolCallId"], "call_1");
    // Then the second parks in the same run, with its own arguments.
    let second = wait_call(&server, &session, "call_2").await;
    assert_eq!(second["tool"], "get_time");
    assert_eq!(second["runId"], run_id.as_str());
    assert_eq!(second["payload"]["arguments"], json!({"zone": "CET"}));
    assert_ne!(id_of(&second), id_of(&first));
    assert_eq!(seen.lock().expect("lock").len(), requests_before, "no model call between the two results");
    // The first's approval is settled: answering it again with another result is 409.
    let (status, body) =
        server.post(&format!("/api/tool-calls/{}/result", id_of(&first)), json!({"output": "Bergen"})).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "already_resolved"), "{body}");

    let (status, body) =
        server.post(&format!("/api/tool-calls/{}/result", id_of(&second)), json!({"output": "12:00"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert!(pending(&server, &session).await.is_empty());
    assert_eq!(
        server.tool_results(&session).await,
        [("get_location".into(), "Oslo".into(), false), ("get_time".into(), "12:00".into(), false)]
    );
    assert_eq!(roles(&server, &session).await, ["user", "assistant", "toolResult", "toolResult", "assistant"]);
    // One more model call, holding both results in order, each once.
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), requests_before + 1, "one model call after both results");
    let results: Vec<(String, String)> = seen
        .last()
        .expect("a request")
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { tool_call_id, content, .. } => Some((tool_call_id.clone(), format!("{content:?}"))),
            _ => None,
        })
        .collect();
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["call_1", "call_2"], "{results:?}");
    assert!(results[0].1.contains("Oslo") && results[1].1.contains("12:00"), "{results:?}");
    assert_eq!(last_answer(&server, &session).await, "Tool get_time returned 1 line: 12:00");
}
