//! Live asks (an MCP server's elicitation): a tool asks the person something while its
//! call runs. The run stays `running`, the ask is a `provide_input` approval marked
//! live on every view, the normal decision route answers it exactly once, and the
//! call goes on with the answer. Declining, stopping the run, expiry and a restart
//! each end it without leaving it pending.

use crate::common;
use crate::mcp_support::{everything, everything_entry, offering, stdio_source};

use async_trait::async_trait;
use common::{TestOptions, TestServer, ToolsOverride, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::store::Approvals;
use spool_engine::{EngineConfig, LiveAnswer, LiveAsk, ManualClock, Tool, ToolContext, ToolOutput, ToolSpec};
use spool_protocol::{ApprovalId, ApprovalStatus, PermissionAction, PermissionRule};
use std::time::Duration;

/// A tool that asks the person for a name (and an age) and answers with what it got.
struct Asking;

#[async_trait]
impl Tool for Asking {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "srv_ask".into(),
            description: "asks the person".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> ToolOutput {
        let ask = LiveAsk {
            source: "srv".into(),
            message: "Who are you?".into(),
            schema: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name"},
                    "age": {"type": "integer", "default": 30},
                },
                "required": ["name"],
            }),
        };
        match ctx.asker.ask(ask).await {
            LiveAnswer::Accept(fields) => ToolOutput::ok(format!("accepted {fields}")),
            LiveAnswer::Decline => ToolOutput::ok("declined"),
            LiveAnswer::Cancel => ToolOutput::ok("cancelled"),
        }
    }
}

fn options(engine: EngineConfig) -> TestOptions {
    let mut engine = engine;
    // The call itself runs without asking: only its question waits for the person.
    engine.rules.push(PermissionRule::new("srv_ask", "*", PermissionAction::Allow));
    TestOptions {
        tools: Some(ToolsOverride(spool_tools::workspace_tools().with(Asking))),
        engine,
        ..TestOptions::default()
    }
}

/// A server with the asking tool, a session, and the asking call's run once its ask
/// is pending: (server, session, run id, the ask's approval).
async fn asking(engine: EngineConfig) -> (TestServer, String, String, Value) {
    let server = TestServer::start_with(options(engine)).await;
    let session = server.new_session().await;
    let run_id = server.start_run(&session, "tool: srv_ask {}").await;
    let approval = pending_ask(&server, &session, &run_id).await;
    (server, session, run_id, approval)
}

/// Waits until an ask is pending in the session's state, its run running all along.
async fn pending_ask(server: &TestServer, session: &str, run_id: &str) -> Value {
    // Long enough for a real MCP server to start and list its tools first.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
        if let Some(approval) = detail["state"]["pendingApprovals"].as_array().and_then(|p| p.first()) {
            return approval.clone();
        }
        let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
        assert_eq!(run["status"], "running", "the run ended before it asked: {run}");
        assert!(tokio::time::Instant::now() < deadline, "the ask never showed: {detail}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn decide(server: &TestServer, session: &str, approval: &Value, body: Value) -> (StatusCode, Value) {
    server.post(&format!("/api/sessions/{session}/approvals/{}", id_of(approval)), body).await
}

/// The ask is stored as `status` and no longer pending in the session's state.
async fn assert_ended(server: &TestServer, session: &str, approval: &Value, status: ApprovalStatus) {
    let id: ApprovalId = id_of(approval).parse().expect("approval id");
    let stored = server.store.get_approval(&id).await.expect("read").expect("stored").0.status;
    assert_eq!(stored, status);
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let pending = detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals");
    assert!(pending.is_empty(), "still pending: {detail}");
}

#[tokio::test]
async fn an_answered_ask_hands_the_fields_to_the_call_and_the_run_completes() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    // The run did not park: it is running, its call waiting inside it.
    let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(approval["kind"], "provide_input");
    let payload = &approval["payload"];
    assert_eq!(payload["live"], true);
    assert_eq!(payload["source"], "srv");
    assert_eq!(payload["question"], "Who are you?");
    assert_eq!(payload["fields"]["required"], json!(["name"]));

    // A required field left out is refused, and nothing is settled by it.
    let (status, body) = decide(&server, &session, &approval, json!({"decision": {"fill": {"age": 5}}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "missing_field");
    let (status, body) =
        decide(&server, &session, &approval, json!({"decision": {"fill": {"name": "Ada", "age": "36"}}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = decide(&server, &session, &approval, json!({"decision": {"fill": {"name": "Bob"}}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "a second answer is refused: {body}");
    assert_eq!(body["error"]["code"], "already_resolved");

    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results, [("srv_ask".to_owned(), r#"accepted {"age":36,"name":"Ada"}"#.to_owned(), false)]);
    assert_ended(&server, &session, &approval, ApprovalStatus::Resolved).await;
}

#[tokio::test]
async fn a_declined_ask_tells_the_call_and_the_run_goes_on() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    let (status, body) = decide(&server, &session, &approval, json!({"decision": "reject"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Unlike a parked call's plain reject, the run is not cancelled: the call goes on.
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await[0].1, "declined");
}

#[tokio::test]
async fn stopping_the_run_cancels_its_ask() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "cancelled");
    assert_ended(&server, &session, &approval, ApprovalStatus::Cancelled).await;
    let (status, _) = decide(&server, &session, &approval, json!({"decision": {"fill": {"name": "Ada"}}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "a cancelled ask cannot be answered");
    // The session is free again.
    assert_eq!(server.run_prompt(&session, "echo: again").await["status"], "completed");
}

#[tokio::test]
async fn an_expired_ask_reads_as_cancelled_and_the_run_goes_on() {
    let clock = ManualClock::starting_now();
    // Shorter than a lease, so moving the clock past the ask leaves the run its lease.
    let approval_ttl = Duration::from_secs(2);
    let engine = EngineConfig { clock: clock.clone().into(), approval_ttl, ..EngineConfig::default() };
    let (server, session, run_id, approval) = asking(engine).await;
    clock.advance_to(approval["expiresAt"].as_i64().expect("expiresAt"));
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await[0].1, "cancelled");
    assert_ended(&server, &session, &approval, ApprovalStatus::Expired).await;
}

#[tokio::test]
async fn an_ask_whose_call_a_restart_lost_ends_instead_of_hanging() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    let server = server.restart().await;
    assert_ended(&server, &session, &approval, ApprovalStatus::Cancelled).await;
    let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "failed", "{run}");
    let (status, _) = decide(&server, &session, &approval, json!({"decision": "reject"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// OpenCode clients see a server's question as one question per field, and their
/// reply (one answer per question) fills the fields in.
#[tokio::test]
async fn opencode_clients_answer_a_live_ask_one_question_per_field() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    let dir = std::fs::canonicalize(server.project_dir()).expect("project dir");
    let at = common::urlencode(dir.to_str().expect("UTF-8"));
    let (status, listed) = server.get(&format!("/question?directory={at}")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let request = &listed[0];
    assert_eq!(request["id"], approval["id"]);
    let questions = request["questions"].as_array().expect("questions");
    assert_eq!(questions.len(), 2, "{request}");
    // The fields by name: age, then name.
    assert_eq!(questions[0]["question"], "Who are you?\nage");
    assert_eq!(questions[1]["question"], "Name");
    assert_eq!(questions[0]["header"], "srv");
    let id = id_of(&approval);
    let (status, ok) = server.post(&format!("/question/{id}/reply"), json!({"answers": [[], ["Ada"]]})).await;
    assert_eq!((status, ok), (StatusCode::OK, json!(true)));
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(server.tool_results(&session).await[0].1, r#"accepted {"age":30,"name":"Ada"}"#);
}

/// `@modelcontextprotocol/server-everything`'s elicitation, answered through the
/// approval route like any question: the server gets the fields (its defaults filled
/// in) and says what it received.
/// An AG-UI client is told of a live ask by a `spool.input_requested` CUSTOM event
/// while its stream goes on (an interrupt would end the stream, and the run is not
/// waiting), answers at the route the event names, and its stream ends with the
/// call's result and success.
#[tokio::test]
async fn an_ag_ui_stream_announces_a_live_ask_and_goes_on_once_it_is_answered() {
    let server = TestServer::start_with(options(EngineConfig::default())).await;
    let project = server.default_project().await;
    let input = json!({
        "threadId": "thread-live", "runId": "client-run", "tools": [], "context": [], "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "tool: srv_ask {}"}],
        "forwardedProps": {"projectId": project},
    });
    let res = server.client.post(server.url("/api/ag-ui")).json(&input).send().await.expect("request");
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = common::SseStream::new(res);
    let mut next = async || -> Option<Value> {
        let event = tokio::time::timeout(common::WAIT, stream.next_event()).await.expect("an event in time")?;
        Some(serde_json::from_str(&event.data).expect("JSON"))
    };
    let announced = loop {
        let event = next().await.expect("the stream goes on until the ask");
        assert_ne!(event["type"], "RUN_FINISHED", "the stream ended before the ask: {event}");
        if event["type"] == "CUSTOM" && event["name"] == "spool.input_requested" {
            break event["value"].clone();
        }
    };
    assert_eq!(announced["source"], "srv");
    assert_eq!(announced["message"], "Who are you?");
    assert_eq!(announced["responseSchema"]["required"], json!(["name"]));
    let at = announced["answerAt"].as_str().expect("answerAt");
    let (status, body) = server.post(at, json!({"decision": {"fill": {"name": "Ada"}}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let mut rest = Vec::new();
    while let Some(event) = next().await {
        rest.push(event);
    }
    let resolved = rest.iter().find(|e| e["name"] == "spool.approval_resolved").expect("the decision is told");
    assert_eq!(resolved["value"]["decision"], "fill");
    let result = rest.iter().find(|e| e["type"] == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result["content"], r#"accepted {"age":30,"name":"Ada"}"#);
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}), "{rest:?}");
}

/// An AI SDK client following the run (its resume stream) gets a live ask as a
/// `data-spool-input-requested` part beside the running call, whose tool part is left
/// as it is (no second input, no approval request); the answer at the route the part
/// names reaches the call, and the stream ends with the call's output.
#[tokio::test]
async fn an_ai_sdk_stream_tells_of_a_live_ask_as_a_data_part() {
    let (server, session, run_id, approval) = asking(EngineConfig::default()).await;
    let res = server.client.get(server.url(&format!("/api/ai-sdk/chat/{session}/stream"))).send().await;
    let res = res.expect("the AI SDK's resume stream");
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = common::SseStream::new(res);
    let mut next = async || -> Option<Value> {
        let event = tokio::time::timeout(common::WAIT, stream.next_event()).await.expect("an event in time")?;
        (event.data != "[DONE]").then(|| serde_json::from_str(&event.data).expect("JSON"))
    };
    let mut before = Vec::new();
    let told = loop {
        let chunk = next().await.expect("the stream goes on until the ask");
        if chunk["type"] == "data-spool-input-requested" {
            break chunk;
        }
        before.push(chunk);
    };
    assert_eq!(told["id"], approval["id"]);
    assert_eq!(told["data"]["message"], "Who are you?");
    assert_eq!(told["data"]["responseSchema"]["required"], json!(["name"]));
    let at = told["data"]["answerAt"].as_str().expect("answerAt");
    let (status, body) = server.post(at, json!({"decision": {"fill": {"name": "Ada"}}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let mut after = Vec::new();
    while let Some(chunk) = next().await {
        after.push(chunk);
    }
    let all: Vec<&Value> = before.iter().chain(&after).collect();
    let inputs = all.iter().filter(|c| c["type"] == "tool-input-available").count();
    assert_eq!(inputs, 1, "the call's input once: {all:?}");
    assert!(!all.iter().any(|c| c["type"] == "tool-approval-request"), "not a wait of the run: {all:?}");
    let output = after.iter().find(|c| c["type"] == "tool-output-available").expect("the call's output");
    assert!(output["output"].to_string().contains(r#"accepted {\"age\":30,\"name\":\"Ada\"}"#), "{output}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
}

#[tokio::test]
async fn an_mcp_servers_elicitation_is_answered_through_the_approval_route() {
    let Some(index) = everything() else { return };
    let mut engine = EngineConfig::default();
    engine.rules.push(PermissionRule::new("everything_*", "*", PermissionAction::Allow));
    let options = offering(stdio_source(everything_entry(&index)), TestOptions { engine, ..TestOptions::default() });
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    let run_id = server.start_run(&session, "tool: everything_trigger-elicitation-request {}").await;
    let approval = pending_ask(&server, &session, &run_id).await;
    assert_eq!(approval["payload"]["source"], "everything");
    assert_eq!(approval["payload"]["question"], "Please provide inputs for the following fields:");
    assert_eq!(approval["payload"]["fields"]["properties"]["check"]["type"], "boolean");
    let (status, body) =
        decide(&server, &session, &approval, json!({"decision": {"fill": {"name": "Ada", "check": true}}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let (tool, text, is_error) = server.tool_results(&session).await.remove(0);
    assert_eq!(tool, "everything_trigger-elicitation-request");
    assert!(!is_error, "{text}");
    for line in ["- Name: Ada", "- Agreed to terms: true", "- Favorite Integer: 42"] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

/// Two nodes on one store: the call waits on the node running the run, the person
/// answers through the other, and the answer reaches the call (it reads the ask back
/// from the store).
#[tokio::test]
async fn an_answer_taken_on_another_node_reaches_the_waiting_call() {
    use spool_engine::cluster::InProcess;
    use spool_engine::{DecisionInput, DecisionOutcome, DecisionTarget, Engine, Models, PromptInput};
    use spool_protocol::{Decision, RunStatus};
    use std::sync::Arc;

    async fn node(store: Arc<dyn spool_engine::Store>, cluster: InProcess, name: &str) -> Engine {
        let mut config = EngineConfig {
            node_id: name.into(),
            lease_ttl: Duration::from_secs(5),
            shared_store: true,
            ..EngineConfig::default()
        };
        config.rules.push(PermissionRule::new("srv_ask", "*", PermissionAction::Allow));
        let models = Models::new(Arc::new(spool_model::ScriptedModel::new(Duration::ZERO)));
        let tools = spool_tools::workspace_tools().with(Asking);
        Engine::start_clustered(store, models, tools, config, Arc::new(cluster), None).await.expect("a node")
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn spool_engine::Store> =
        Arc::new(spool_store::SqliteStore::open(&dir.path().join("spool.db")).await.expect("open the store"));
    let hub = InProcess::hub("a");
    let b_link = hub.node("b");
    let a = node(store.clone(), hub, "a").await;
    let b = node(store, b_link, "b").await;
    let user = a.local_user().clone();
    let project = a.projects().create(&user, dir.path().to_str().expect("utf-8"), None).await.expect("project");
    let session = a.sessions().create(&user, &project.id, None).await.expect("session");
    let prompt = PromptInput { text: "tool: srv_ask {}".into(), ..PromptInput::default() };
    let run = a.runs().prompt(&user, &session.id, prompt).await.expect("run on a").run_id;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let ask = loop {
        if let Some(ask) = b.runs().pending_approvals(&user).await.expect("pending").pop() {
            break ask;
        }
        assert!(tokio::time::Instant::now() < deadline, "the ask never showed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let fill = DecisionInput::plain(Decision::Fill(json!({"name": "Ada"})));
    let target = DecisionTarget::Session(session.id.clone());
    let outcome = b.runs().decide(&user, target, &ask.id, fill).await.expect("decided on b");
    assert!(matches!(outcome, DecisionOutcome::Applied { .. }), "{outcome:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = a.runs().get(&user, &run).await.expect("run");
        if got.status == RunStatus::Completed {
            break;
        }
        assert!(!got.status.is_terminal(), "{got:?}");
        assert!(tokio::time::Instant::now() < deadline, "the answer never reached the call on a");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page = a.sessions().messages(&user, &session.id, None, None).await.expect("messages");
    let results: Vec<String> = page
        .messages
        .iter()
        .filter_map(|m| match &m.message {
            spool_protocol::Message::ToolResult { content, .. } => match content.first() {
                Some(spool_protocol::Content::Text { text }) => Some(text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(results, [r#"accepted {"age":30,"name":"Ada"}"#]);
}
