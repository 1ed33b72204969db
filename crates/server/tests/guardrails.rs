//! Guardrails that pause, not fail: a run that reaches a limit on cost, tokens or tool
//! calls parks at a `confirm_action` approval of the tool `guardrail` and goes on when
//! a person approves it (or stops, cancelled, when they reject it), also after a
//! restart; a session's own limits may only tighten the server's.

use crate::common::{self, ModelsOverride, Recording, Seen, TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, Models, Price};
use spool_protocol::Guardrails;
use std::sync::Arc;

/// Costs $0.30 an input token: the first call of [`READ`] (8 tokens of prompt) costs
/// $2.40, past a $2.00 limit and below twice it.
const PRICE: Price = Price { input: 300_000.0, output: 0.0, cache_read: 0.0, cache_write: 0.0 };

/// One tool call, then a summary: two model calls.
const READ: &str = r#"tool: read {"path":"README.md"}"#;

/// A server with these guardrails whose one model, priced at [`PRICE`], records the
/// calls that offer tools (the run's model calls; titles offer none).
async fn server_with(guardrails: Guardrails) -> (TestServer, Seen) {
    let seen = Seen::default();
    let model = Arc::new(Recording { seen: seen.clone() });
    let mut models = Models::new(model);
    assert!(models.set_price("recording", PRICE));
    let engine = EngineConfig { guardrails, ..EngineConfig::default() };
    let options = TestOptions { models: Some(ModelsOverride(models)), engine, ..TestOptions::default() };
    (TestServer::start_with(options).await, seen)
}

fn cost_limit(usd: f64) -> Guardrails {
    Guardrails { run_cost_usd: Some(usd), ..Guardrails::default() }
}

fn model_calls(seen: &Seen) -> usize {
    seen.lock().expect("lock").len()
}

async fn decide(server: &TestServer, session: &str, approval: &Value, decision: &str) -> (StatusCode, Value) {
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(approval));
    server.post(&path, json!({ "decision": decision })).await
}

/// The guardrail's card says what was reached, as every client shows a `confirm_action`.
fn assert_guardrail(approval: &Value, limit: &str, scope: &str) {
    assert_eq!(approval["kind"], "confirm_action", "{approval}");
    assert_eq!(approval["tool"], "guardrail", "{approval}");
    assert!(approval["toolCallId"].as_str().is_some_and(|id| id.starts_with("guard_")), "{approval}");
    let guardrail = &approval["payload"]["guardrail"];
    assert_eq!(guardrail["limit"], limit, "{approval}");
    assert_eq!(guardrail["scope"], scope, "{approval}");
    assert!(guardrail["used"].as_f64() >= guardrail["value"].as_f64(), "{approval}");
    let reason = approval["payload"]["reason"].as_str().expect("a reason");
    assert!(reason.ends_with("Continue?"), "{reason}");
}

#[tokio::test]
async fn a_run_parks_at_its_cost_limit_and_continues_after_approval() {
    let (server, seen) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, READ).await;
    assert_guardrail(&approval, "runCostUsd", "run");
    assert_eq!(approval["payload"]["reason"], "This run has spent $2.40 (limit $2.00). Continue?");
    // Parked before the second model call: the read ran, the summary did not.
    assert_eq!(model_calls(&seen), 1);
    assert_eq!(server.tool_results(&session).await.len(), 1);

    let (status, body) = decide(&server, &session, &approval, "once").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Raised one step ($4.00): the second call goes on, and nothing asks again.
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(model_calls(&seen), 2);
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"], json!([]), "{detail}");
    assert_eq!(detail["state"]["lastApproval"]["id"], approval["id"], "{detail}");
}

#[tokio::test]
async fn reject_stops_it() {
    let (server, seen) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, READ).await;
    let (status, body) = decide(&server, &session, &approval, "reject").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"]["code"], "guardrail_stopped", "{run}");
    assert_eq!(model_calls(&seen), 1);
    // The session is free for the next prompt, which starts under its own limit.
    let (next, _) = server.park(&session, READ).await;
    assert_ne!(next, run_id);
}

#[tokio::test]
async fn with_nobody_to_answer_under_the_deny_policy_a_guardrail_stops_the_run() {
    let (server, seen) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let body = json!({ "text": READ, "approvalPolicy": "deny" });
    let (status, accepted) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run = server.wait_run(accepted["runId"].as_str().expect("runId")).await;
    assert_eq!((run["status"].as_str(), run["error"]["code"].as_str()), (Some("cancelled"), Some("guardrail_stopped")));
    let message = run["error"]["message"].as_str().expect("message");
    assert!(message.starts_with("This run has spent $2.40 (limit $2.00)."), "{message}");
    assert_eq!(model_calls(&seen), 1);
}

#[tokio::test]
async fn a_guardrail_is_answered_with_go_on_or_stop_only() {
    let (server, _) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, READ).await;
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(&approval));
    let (status, body) = server.post(&path, json!({ "decision": {"fill": {"path": "README.md"}} })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "wrong_answer_kind", "{body}");
}

#[tokio::test]
async fn tool_call_limit_parks_before_the_call() {
    let limits = Guardrails { run_tool_calls: Some(1), ..Guardrails::default() };
    let (server, seen) = server_with(limits).await;
    let session = server.new_session().await;
    let prompt = "tool: read {\"path\":\"README.md\"}\ntool: read {\"path\":\"src/main.rs\"}\ntool: read {\"path\":\"README.md\"}";
    let (run_id, approval) = server.park(&session, prompt).await;
    assert_guardrail(&approval, "runToolCalls", "run");
    // The first call ran; the second waits, not started.
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    // `always`: the run's tool calls are not counted against it any more.
    let (status, body) = decide(&server, &session, &approval, "always").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results.iter().all(|(_, _, error)| !error), "{results:?}");
    assert_eq!(model_calls(&seen), 2);
    // `always` added no permission rule: a guardrail is no tool.
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["permissions"], json!([]), "{detail}");
}

#[tokio::test]
async fn a_session_limit_counts_earlier_runs() {
    let (server, _) = server_with(Guardrails::default()).await;
    let session = server.new_session().await;
    let path = format!("/api/sessions/{session}");
    let (status, body) = server.patch(&path, json!({"guardrails": {"sessionTokens": 1}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The first run starts with nothing used, so it runs to its end.
    assert_eq!(server.run_prompt(&session, "echo: hello").await["status"], "completed");
    // The next one has the first's tokens against it before its first model call.
    let (run_id, approval) = server.park(&session, "echo: again").await;
    assert_guardrail(&approval, "sessionTokens", "session");
    let reason = approval["payload"]["reason"].as_str().expect("reason");
    assert!(reason.starts_with("This session has used "), "{reason}");
    let (status, body) = decide(&server, &session, &approval, "once").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    // Its prompt is answered once, after the pause.
    let page = server.messages(&session, "").await;
    let rows = common::message_rows(&page);
    assert_eq!(rows.iter().filter(|(_, role, _)| role == "assistant").count(), 2, "{rows:?}");
}

#[tokio::test]
async fn a_pause_resumes_after_a_restart() {
    let (server, seen) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, READ).await;
    let server = server.restart().await;
    let (status, body) = decide(&server, &session, &approval, "once").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(model_calls(&seen), 2);
}

#[tokio::test]
async fn a_guardrail_decided_before_a_crash_goes_on_after_the_restart() {
    let limits = Guardrails { run_tool_calls: Some(1), ..Guardrails::default() };
    let (server, seen) = server_with(limits).await;
    let session = server.new_session().await;
    let prompt = "tool: read {\"path\":\"README.md\"}\ntool: read {\"path\":\"src/main.rs\"}";
    let (run_id, approval) = server.park(&session, prompt).await;
    // Decided, and the process stopped before the run went on.
    common::settle_in_store(&server, &approval, spool_protocol::Decision::Once).await;
    let server = server.restart().await;
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(server.tool_results(&session).await.len(), 2);
    assert_eq!(model_calls(&seen), 2);
}

#[tokio::test]
async fn patch_refuses_a_loosening() {
    let (server, _) = server_with(cost_limit(2.0)).await;
    let session = server.new_session().await;
    let path = format!("/api/sessions/{session}");
    let (status, body) = server.patch(&path, json!({"guardrails": {"runCostUsd": 5}, "title": "x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "guardrails_loosened", "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("runCostUsd")), "{body}");
    // Refused whole: the title in the same patch did not change either.
    let (_, detail) = server.get(&path).await;
    assert_eq!(detail["title"], "", "{detail}");
    // Tighter is fine, and a limit the server does not set may be set.
    let (status, body) = server.patch(&path, json!({"guardrails": {"runCostUsd": 1, "runTokens": 10}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server.patch(&path, json!({"guardrails": {"runCostUsd": -1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}
