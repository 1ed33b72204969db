//! Human in the loop, through a real server: a risky tool call parks the run at a
//! durable approval; the decision is applied exactly once under concurrent clicks,
//! retries and repeats; reject, expiry, abort, policies and rule changes do what a
//! person expects. Side effects are counted on disk.

use crate::common;

use common::{Open, ReceivedFrame, SseStream, TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, ManualClock};
use std::time::Duration;

/// Sends a decision; returns status and the exact body bytes.
async fn decide(server: &TestServer, session: &str, approval: &str, body: Value) -> (StatusCode, String) {
    let res = server
        .client
        .post(server.url(&format!("/api/sessions/{session}/approvals/{approval}")))
        .json(&body)
        .send()
        .await
        .expect("decision request");
    let status = res.status();
    (status, res.text().await.expect("body"))
}

fn write_prompt(path: &str, content: &str) -> String {
    format!("tool: write {}", json!({"path": path, "content": content}))
}

#[tokio::test]
async fn an_ask_parks_the_run_and_once_runs_the_tool_exactly_once() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut view = server.events(&session, Open { approvals: true, ..Open::fresh() }).await;
    view.next_frame().await.expect("snapshot");

    let run_id = server.start_run(&session, &write_prompt("out.txt", "hello")).await;
    let frames = view.frames_until(|f| f.event_type() == Some("approval_requested")).await;
    // Persisted before it was published: the state frame with the card comes first.
    let state = frames.iter().rev().find(|f| f.kind == "session.state").expect("a state frame");
    let pending = &state.json["state"]["pendingApprovals"];
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{}", state.json);
    let approval = &pending[0];
    assert_eq!(approval["tool"], "write");
    assert_eq!(approval["kind"], "confirm_action");
    assert_eq!(approval["status"], "pending");
    assert!(approval["payload"]["change"].as_str().is_some_and(|c| c.contains("out.txt")), "{approval}");
    assert_eq!(state.json["state"]["activeRun"]["status"], "interrupted");
    let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "interrupted");
    let file = server.project_dir().join("out.txt");
    assert!(!file.exists(), "nothing is written before a decision");

    let approval_id = id_of(approval);
    let (status, body) =
        decide(&server, &session, &approval_id, json!({"decision": "once", "idempotencyKey": "k1"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let resolved = after.iter().find(|f| f.event_type() == Some("approval_resolved")).expect("approval_resolved");
    assert_eq!(resolved.json["event"]["decision"], "once");
    // (An asynchronous title update may publish a state frame of its own meanwhile.)
    let cleared = after
        .iter()
        .find(|f| f.kind == "session.state" && !f.json["state"]["lastApproval"].is_null())
        .expect("state after the decision");
    assert_eq!(cleared.json["state"]["pendingApprovals"], json!([]));
    assert_eq!(cleared.json["state"]["lastApproval"]["decision"], "once");
    assert_eq!(std::fs::read_to_string(&file).expect("written"), "hello");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");

    // The same key again: the first answer, byte for byte, and nothing runs again.
    std::fs::write(&file, "changed by hand").expect("overwrite");
    let (again_status, again) =
        decide(&server, &session, &approval_id, json!({"decision": "once", "idempotencyKey": "k1"})).await;
    assert_eq!((again_status, again.as_str()), (status, body.as_str()));
    // Another key: already resolved.
    let (other, text) =
        decide(&server, &session, &approval_id, json!({"decision": "reject", "idempotencyKey": "k2"})).await;
    assert_eq!(other, StatusCode::CONFLICT);
    assert!(text.contains("already_resolved"), "{text}");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "changed by hand");
}

#[tokio::test]
async fn fifty_concurrent_decisions_execute_the_side_effect_once() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, "tool: bash {\"command\": \"echo ran >> count.txt\"}").await;
    let approval_id = id_of(&approval);

    let mut tasks = Vec::new();
    for i in 0..50 {
        let client = server.client.clone();
        let url = server.url(&format!("/api/sessions/{session}/approvals/{approval_id}"));
        // Ten keys, five requests each, decisions mixed.
        let key = format!("key-{}", i % 10);
        let decision = if i % 3 == 0 { "always" } else { "once" };
        tasks.push(tokio::spawn(async move {
            let res = client.post(url).json(&json!({"decision": decision, "idempotencyKey": key})).send().await;
            let res = res.expect("request");
            (key, res.status(), res.text().await.expect("body"))
        }));
    }
    let mut by_key: std::collections::BTreeMap<String, Vec<(StatusCode, String)>> = Default::default();
    for t in tasks {
        let (key, status, body) = t.await.expect("task");
        by_key.entry(key).or_default().push((status, body));
    }
    let mut winners = 0;
    for (key, answers) in &by_key {
        assert!(answers.windows(2).all(|w| w[0] == w[1]), "key {key} got different answers: {answers:?}");
        match answers[0].0 {
            StatusCode::OK => winners += 1,
            StatusCode::CONFLICT => assert!(answers[0].1.contains("already_resolved"), "{answers:?}"),
            other => panic!("unexpected {other} for {key}: {answers:?}"),
        }
    }
    assert_eq!(winners, 1, "exactly one key group wins: {by_key:?}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let count = std::fs::read_to_string(server.project_dir().join("count.txt")).expect("count file");
    assert_eq!(count, "ran\n", "the command ran exactly once");
}

/// Seed 003: a plain reject only changes states. The approval records the reject, the
/// run ends `cancelled` (saying why), and no frame says the call started.
#[tokio::test]
async fn a_plain_reject_cancels_the_run_and_the_tool_never_starts() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut view = server.events(&session, Open { approvals: true, ..Open::fresh() }).await;
    view.next_frame().await.expect("snapshot");
    let (run_id, approval) = server.park(&session, &write_prompt("no.txt", "x")).await;
    let approval_id = id_of(&approval);
    let (status, body) = decide(&server, &session, &approval_id, json!({"decision": "reject"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let started: Vec<&ReceivedFrame> =
        frames.iter().filter(|f| f.event_type() == Some("tool_execution_start")).collect();
    assert!(
        started.is_empty(),
        "the rejected call never starts: {:?}",
        started.iter().map(|f| &f.json).collect::<Vec<_>>()
    );
    let end = frames.iter().find(|f| f.event_type() == Some("agent_end")).expect("agent_end");
    assert_eq!(end.json["event"]["status"], "cancelled");

    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["error"]["code"], "approval_rejected", "{run}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["lastApproval"]["decision"], "reject", "{detail}");
    assert_eq!(detail["state"]["lastApproval"].get("via"), None, "a person decided it: {detail}");
    assert_eq!(detail["status"], "idle");
    assert!(!server.project_dir().join("no.txt").exists());
    // The call that never ran is over in every view: not "running" for ever.
    let call = approval["toolCallId"].as_str().expect("toolCallId");
    let exec = &detail["state"]["toolExecutions"][call];
    assert_eq!(exec["status"], "error", "{detail}");
    assert!(exec["result"].as_str().is_some_and(|r| r.contains("rejected")), "{exec}");
    let ended: Vec<&ReceivedFrame> = frames.iter().filter(|f| f.event_type() == Some("tool_execution_end")).collect();
    assert_eq!(ended.len(), 1, "the rejected call ends once");
    assert_eq!(ended[0].json["event"]["isError"], true);
    let timing = &detail["state"]["promptTimings"]["0"];
    assert_eq!(timing["status"], "cancelled", "{detail}");
    assert_eq!(timing["error"]["code"], "approval_rejected", "{detail}");
    // The conversation says so too (the model reads it at the next prompt).
    let page = server.messages(&session, "").await;
    let results: Vec<&Value> =
        page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "toolResult").collect();
    assert_eq!(results.len(), 1, "{page}");
    assert_eq!(results[0]["isError"], true);
    assert!(results[0]["content"][0]["text"].as_str().is_some_and(|t| t.contains("rejected")), "{page}");
}

/// A reject with a message for the model is the person's choice to go on: the model
/// is told, with the message, and the run continues.
#[tokio::test]
async fn a_reject_with_a_message_tells_the_model_and_the_run_goes_on() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("no.txt", "x")).await;
    let (status, body) =
        decide(&server, &session, &id_of(&approval), json!({"decision": "reject", "message": "not that file"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert!(!server.project_dir().join("no.txt").exists());
    let page = server.messages(&session, "").await;
    let result = page["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "toolResult").cloned();
    let result = result.expect("a tool result");
    assert_eq!(result["isError"], true);
    assert!(
        result["content"][0]["text"].as_str().is_some_and(|t| t.contains("rejected") && t.contains("not that file"))
    );
}

/// How long approvals wait in the expiry tests: on a manual clock the test moves, so
/// the length is only what the wire shows.
const APPROVAL_TTL_MS: i64 = 10 * 60 * 1000;

/// A server whose engine runs on `clock` with approvals lasting [`APPROVAL_TTL_MS`].
async fn server_on(clock: &ManualClock) -> TestServer {
    let engine = EngineConfig {
        approval_ttl: Duration::from_millis(APPROVAL_TTL_MS as u64),
        clock: clock.clone().into(),
        ..EngineConfig::default()
    };
    TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await
}

/// The instant an approval expires, checked against when it was asked.
fn expiry_of(approval: &Value) -> i64 {
    let (created, expires) = (approval["createdAt"].as_i64(), approval["expiresAt"].as_i64());
    let (created, expires) = (created.expect("createdAt"), expires.expect("expiresAt"));
    assert_eq!(expires - created, APPROVAL_TTL_MS, "{approval}");
    expires
}

#[tokio::test]
async fn an_approval_can_be_decided_until_a_millisecond_before_it_expires() {
    let clock = ManualClock::starting_now();
    let server = server_on(&clock).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("just.txt", "in time")).await;
    clock.advance_to(expiry_of(&approval) - 1);
    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("just.txt")).expect("written"), "in time");
}

#[tokio::test]
async fn an_expired_approval_is_refused_and_its_run_cancelled() {
    let clock = ManualClock::starting_now();
    let server = server_on(&clock).await;
    let session = server.new_session().await;
    let mut view = server.events(&session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let (run_id, approval) = server.park(&session, &write_prompt("late.txt", "x")).await;
    view.frames_until(|f| f.event_type() == Some("approval_requested")).await;
    let expires_at = expiry_of(&approval);

    // A millisecond before its end nothing expires: the next frame after that instant
    // is a marker (a rename), with no resolution before it, and the card still waits.
    clock.advance_to(expires_at - 1);
    let (status, _) = server.patch(&format!("/api/sessions/{session}"), json!({"title": "marker"})).await;
    assert_eq!(status, StatusCode::OK);
    let before = view.frames_until(|f| f.kind == "session.state" && f.json["state"]["session"]["title"] == "marker");
    let before = before.await;
    // (A title the first prompt asked for may land meanwhile; nothing of the run may.)
    let ended = |f: &ReceivedFrame| matches!(f.event_type(), Some("approval_resolved" | "agent_end" | "agent_settled"));
    assert!(!before.iter().any(ended), "{before:?}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"][0]["id"], approval["id"], "{detail}");

    // At its end it expires by itself: no decision came.
    clock.advance_to(expires_at);
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let resolved = frames.iter().find(|f| f.event_type() == Some("approval_resolved")).expect("resolution event");
    assert_eq!(resolved.json["event"]["decision"], "expired");
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled");
    assert_eq!(run["error"]["code"], "approval_expired");

    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert!(body.contains("approval_expired"));
    assert!(!server.project_dir().join("late.txt").exists());
}

/// A decision that arrives at the approval's very end is refused: the expiry timer
/// ends it at that instant, and a decision that got there first reads the clock itself.
#[tokio::test]
async fn a_decision_at_the_instant_of_expiry_is_refused() {
    let clock = ManualClock::starting_now();
    let server = server_on(&clock).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("edge.txt", "x")).await;
    clock.advance_to(expiry_of(&approval));
    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert!(body.contains("approval_expired"), "{body}");
    let run = server.wait_run(&run_id).await;
    assert_eq!((run["status"].as_str(), run["error"]["code"].as_str()), (Some("cancelled"), Some("approval_expired")));
    assert!(!server.project_dir().join("edge.txt").exists());
}

#[tokio::test]
async fn an_approval_of_another_session_or_run_is_not_found() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let other = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("a.txt", "x")).await;
    let other_run = server.run_prompt(&other, "echo: hi").await;
    let approval_id = id_of(&approval);

    let (status, _) = decide(&server, &other, &approval_id, json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let url = server.url(&format!("/api/runs/{}/resume", id_of(&other_run)));
    let body = json!({"interruptId": approval_id, "decision": "approve", "idempotencyKey": "r1"});
    let res = server.client.post(url).json(&body).send().await.expect("resume");
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let (status, _) = decide(&server, &session, "per_01jd0000000000000000000000", json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!server.project_dir().join("a.txt").exists());

    // The right run through the run-level form works.
    let url = server.url(&format!("/api/runs/{run_id}/resume"));
    let res = server.client.post(url).json(&body).send().await.expect("resume");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert!(server.project_dir().join("a.txt").exists());
}

#[tokio::test]
async fn deny_policy_without_an_interactive_view_fails_closed() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    // A plain viewer is not an interactive view.
    let mut viewer = server.events(&session, Open::fresh()).await;
    viewer.next_frame().await.expect("snapshot");
    let (status, body) = server
        .post(
            &format!("/api/sessions/{session}/prompt"),
            json!({"text": write_prompt("d.txt", "x"), "approvalPolicy": "deny"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = server.wait_run(body["runId"].as_str().expect("runId")).await;
    assert_eq!(run["status"], "completed");
    assert!(!server.project_dir().join("d.txt").exists());
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"], json!([]));
    let exec = detail["state"]["toolExecutions"].as_object().expect("executions").values().next().cloned();
    let exec = exec.expect("the denied call is shown");
    assert_eq!(exec["status"], "error");
    assert!(exec["result"].as_str().is_some_and(|r| r.contains("no one is connected")), "{exec}");
}

#[tokio::test]
async fn wait_policy_keeps_the_card_for_a_view_that_connects_later() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, &write_prompt("w.txt", "x")).await;
    let mut view: SseStream = server.events(&session, Open { approvals: true, ..Open::fresh() }).await;
    let snapshot: ReceivedFrame = view.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.kind, "session.snapshot");
    assert_eq!(snapshot.json["state"]["pendingApprovals"][0]["id"], approval["id"]);
    assert_eq!(snapshot.json["state"]["status"], "busy");
}

#[tokio::test]
async fn a_rule_flipped_to_deny_after_the_ask_wins_over_the_approval() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("f.txt", "x")).await;
    let (status, body) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "write", "action": "deny"}]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert!(!server.project_dir().join("f.txt").exists(), "the deny rule won");
}

#[tokio::test]
async fn always_allows_the_tool_for_the_rest_of_the_session() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("one.txt", "1")).await;
    let (status, _) = decide(&server, &session, &id_of(&approval), json!({"decision": "always"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["permissions"], json!([{"tool": "write", "action": "allow"}]));
    // Listed among the session's rules, after the server's, which still ask for writes.
    let (status, rules) = server.get(&format!("/api/sessions/{session}/permissions")).await;
    assert_eq!(status, StatusCode::OK, "{rules}");
    assert_eq!(rules["session"], json!([{"tool": "write", "action": "allow"}]));
    let server_rules = rules["server"].as_array().expect("server rules");
    assert!(server_rules.iter().any(|r| r["tool"] == "write" && r["action"] == "ask"), "{rules}");
    // The next write runs without asking.
    let run = server.run_prompt(&session, &write_prompt("two.txt", "2")).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("two.txt")).expect("written"), "2");
}

#[tokio::test]
async fn abort_while_interrupted_cancels_approval_and_run_and_prompts_are_busy_meanwhile() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("x.txt", "x")).await;
    let (status, body) = server.prompt(&session, "echo: hi", None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "session_busy");

    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["runId"], run_id.as_str());
    let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "cancelled");
    let (status, _) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "a cancelled approval cannot be approved");
    assert!(!server.project_dir().join("x.txt").exists());
    // The session is free again.
    assert_eq!(server.run_prompt(&session, "echo: again").await["status"], "completed");
}

#[tokio::test]
async fn a_deny_rule_fails_the_call_and_the_run_goes_on() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (status, _) = server
        .patch(
            &format!("/api/sessions/{session}"),
            json!({"permissions": [{"tool": "read", "pattern": "src/*", "action": "deny"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let run = server.run_prompt(&session, "tool: read {\"path\": \"src/main.rs\"}").await;
    assert_eq!(run["status"], "completed");
    let page = server.messages(&session, "").await;
    let messages = page["messages"].as_array().expect("messages");
    let result = messages.iter().find(|m| m["role"] == "toolResult").expect("tool result");
    assert_eq!(result["isError"], true);
    assert!(result["content"][0]["text"].as_str().is_some_and(|t| t.contains("denied")));
    assert!(!result["content"][0]["text"].as_str().unwrap_or("").contains("println"), "nothing was read");
    // README is not covered by the pattern.
    let run = server.run_prompt(&session, "tool: read {\"path\": \"README.md\"}").await;
    assert_eq!(run["status"], "completed");
}

#[tokio::test]
async fn on_disconnect_cancel_ends_the_run_when_its_last_listener_leaves() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut listener = server.events(&session, Open::fresh()).await;
    listener.next_frame().await.expect("snapshot");
    let (status, body) = server
        .post(&format!("/api/sessions/{session}/prompt"), json!({"text": "stream: 2000", "onDisconnect": "cancel"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run_id = body["runId"].as_str().expect("runId").to_owned();
    listener.frames_until(|f| f.event_type() == Some("message_update")).await;
    drop(listener);
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "cancelled");

    // The default keeps running without listeners.
    let run_id = server.start_run(&session, "stream: 20").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
}

#[tokio::test]
async fn fill_approves_with_the_arguments_the_person_gave() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("fill.txt", "model text")).await;
    let decision = json!({"decision": {"fill": {"path": "fill.txt", "content": "person text"}}, "idempotencyKey": "f"});
    let (status, body) = decide(&server, &session, &id_of(&approval), decision).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("fill.txt")).expect("written"), "person text");
}

#[tokio::test]
async fn approval_cards_never_show_a_secret_from_the_environment() {
    const SECRET: &str = "sk-test-9f8e7d6c5b4a39281706";
    let test = "approval_cards_never_show_a_secret_from_the_environment";
    if !common::in_own_process(module_path!(), test, &[("SPOOL_TEST_PROVIDER_API_KEY", SECRET)]) {
        return;
    }
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt =
        format!("tool: bash {}", json!({"command": format!("curl -H 'Authorization: Bearer {SECRET}' localhost")}));
    let (_, approval) = server.park(&session, &prompt).await;
    let shown = approval["payload"].to_string();
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
}

#[tokio::test]
async fn a_decision_recorded_before_its_run_restarted_runs_once_after_a_restart() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("lost.txt", "x")).await;
    // The crash window: the decision is stored, the run never restarted (still
    // `interrupted`). The person decided: the call runs once, after the restart.
    common::settle_in_store(&server, &approval, spool_protocol::Decision::Once).await;
    let server = server.restart().await;
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("lost.txt")).expect("written"), "x");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"], json!([]), "{detail}");
    assert_eq!(server.run_prompt(&session, "echo: free").await["status"], "completed");
}

#[tokio::test]
async fn a_tool_that_prints_a_secret_never_shows_it_to_clients_or_the_store() {
    const SECRET: &str = "sk-tool-secret-5f4e3d2c1b0a";
    let test = "a_tool_that_prints_a_secret_never_shows_it_to_clients_or_the_store";
    if !common::in_own_process(module_path!(), test, &[("SPOOL_TEST_TOOL_API_KEY", SECRET)]) {
        return;
    }
    let server = TestServer::start().await;
    // Commands never see the server's environment (the sandbox), but one may still
    // come across the value elsewhere, here in a project file.
    std::fs::write(server.project_dir().join("leak.txt"), SECRET).expect("write");
    let session = server.new_session().await;
    let (status, _) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut view = server.events(&session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let prompt = "tool: bash {\"command\": \"echo failing with $(cat leak.txt); exit 3\"}";
    let run = server.run_prompt(&session, prompt).await;
    assert_eq!(run["status"], "completed");
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let wire: String = frames.iter().map(|f| f.json.to_string()).collect();
    assert!(wire.contains("[redacted]"), "the tool's output is shown, redacted");
    assert!(!wire.contains(SECRET), "no frame carries the secret");
    let page = server.messages(&session, "").await;
    assert!(!page.to_string().contains(SECRET), "the stored result is redacted too");
}

// ---- re-check before acting (seed 003: "reload the resource") ---------------------------

/// The pending approvals of the session, as `GET /api/sessions/:id` shows them.
async fn pending_approvals(server: &TestServer, session: &str) -> Vec<Value> {
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals").clone()
}

/// The approval as the store holds it.
async fn stored_approval(server: &TestServer, id: &str) -> spool_protocol::Approval {
    use spool_engine::store::Approvals;
    let id: spool_protocol::ApprovalId = id.parse().expect("approval id");
    server.store.get_approval(&id).await.expect("read approval").expect("stored").0
}

fn edit_prompt(path: &str, old: &str, new: &str) -> String {
    format!("tool: edit {}", json!({"path": path, "oldString": old, "newString": new}))
}

/// The error object of a 409 `resource_changed`, checked for what a person and a client
/// need: the file named, and the approval that asks again.
fn resource_changed(status: StatusCode, body: &str, path: &str) -> Value {
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let body: Value = serde_json::from_str(body).expect("a JSON error");
    let error = body["error"].clone();
    assert_eq!(error["code"], "resource_changed", "{body}");
    assert!(error["message"].as_str().is_some_and(|m| m.contains(path)), "the message names the file: {body}");
    assert!(error["approvalId"].as_str().is_some_and(|id| id.starts_with("per_")), "{body}");
    error
}

#[tokio::test]
async fn approving_a_write_whose_file_changed_meanwhile_asks_again_with_a_fresh_preview() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let file = server.project_dir().join("notes.txt");
    std::fs::write(&file, "first draft\n").expect("write");
    let mut view = server.events(&session, Open { approvals: true, ..Open::fresh() }).await;
    view.next_frame().await.expect("snapshot");
    let (run_id, asked) = server.park(&session, &write_prompt("notes.txt", "from the model\n")).await;
    let preview = asked["payload"]["preview"].as_str().expect("a preview of the change");
    assert!(preview.contains("-first draft") && preview.contains("+from the model"), "{preview}");
    view.frames_until(|f| f.event_type() == Some("approval_requested")).await;

    // A person edits the file while the card waits.
    std::fs::write(&file, "edited by hand\n").expect("edit by hand");
    let decision = json!({"decision": "once", "idempotencyKey": "approve-1"});
    let (status, body) = decide(&server, &session, &id_of(&asked), decision.clone()).await;
    let error = resource_changed(status, &body, "notes.txt");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "edited by hand\n", "nothing was written");
    // The same key again: the same answer, byte for byte, and still nothing written.
    let (again_status, again) = decide(&server, &session, &id_of(&asked), decision).await;
    assert_eq!((again_status, again.as_str()), (status, body.as_str()));

    // Every view: the old card is settled as superseded, the new one is pending.
    let frames = view.frames_until(|f| f.event_type() == Some("approval_requested")).await;
    let resolved = frames.iter().find(|f| f.event_type() == Some("approval_resolved")).expect("approval_resolved");
    assert_eq!(resolved.json["event"]["approvalId"], asked["id"]);
    assert_eq!(resolved.json["event"]["decision"], "superseded");
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let fresh = &pending[0];
    assert_eq!(fresh["id"], error["approvalId"]);
    assert_ne!(fresh["id"], asked["id"]);
    assert_eq!(fresh["toolCallId"], asked["toolCallId"], "the same call is asked for");
    let preview = fresh["payload"]["preview"].as_str().expect("a fresh preview");
    assert!(preview.contains("-edited by hand") && preview.contains("+from the model"), "{preview}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["lastApproval"]["decision"], "superseded", "{detail}");
    assert_eq!(detail["state"]["activeRun"]["status"], "interrupted", "{detail}");
    assert_eq!(server.get(&format!("/api/runs/{run_id}")).await.1["status"], "interrupted");
    let old = stored_approval(&server, &id_of(&asked)).await;
    assert_eq!(old.status, spool_protocol::ApprovalStatus::Superseded);

    // The person looks at the new preview and approves: now it is written.
    let (status, body) = decide(&server, &session, &id_of(fresh), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "from the model\n");
}

#[tokio::test]
async fn approving_an_unchanged_file_writes_it_as_before() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let file = server.project_dir().join("same.txt");
    std::fs::write(&file, "old\n").expect("write");
    let (run_id, asked) = server.park(&session, &write_prompt("same.txt", "new\n")).await;
    let preview = asked["payload"]["preview"].as_str().expect("a preview of the change");
    assert_eq!(preview, "--- same.txt (now)\n+++ same.txt (after the write)\n@@ -1 +1 @@\n-old\n+new\n");
    // Touched but not changed: the content decides, not the timestamp.
    std::fs::write(&file, "old\n").expect("rewrite the same bytes");
    let (status, body) = decide(&server, &session, &id_of(&asked), json!({"decision": "always"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "new\n");
    assert!(pending_approvals(&server, &session).await.is_empty());
}

/// An edit whose `oldString` no longer matches: each approving route (the run stream's
/// resume, OpenCode's reply) is refused while the file keeps changing, the new card
/// says the edit would fail, and approving that runs the edit, which fails as the tool
/// does, without touching the file.
#[tokio::test]
async fn approving_an_edit_whose_file_changed_shows_that_it_no_longer_applies() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let file = server.project_dir().join("lib.rs");
    std::fs::write(&file, "let x = 1;\n").expect("write");
    let (run_id, asked) = server.park(&session, &edit_prompt("lib.rs", "let x = 1;", "let x = 2;")).await;
    let preview = asked["payload"]["preview"].as_str().expect("a preview of the change");
    assert!(preview.contains("-let x = 1;") && preview.contains("+let x = 2;"), "{preview}");

    std::fs::write(&file, "let y = 1;\n").expect("edit by hand");
    let resume = json!({"interruptId": id_of(&asked), "decision": "approve", "idempotencyKey": "resume-1"});
    let res = server.client.post(server.url(&format!("/api/runs/{run_id}/resume"))).json(&resume).send().await;
    let res = res.expect("resume");
    let status = res.status();
    let error = resource_changed(status, &res.text().await.expect("body"), "lib.rs");
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["id"], error["approvalId"]);
    let preview = pending[0]["payload"]["preview"].as_str().expect("a fresh preview");
    assert!(preview.contains("oldString was not found in \"lib.rs\""), "{preview}");

    // Changed again: OpenCode's reply is refused the same way.
    std::fs::write(&file, "let y = 2;\n").expect("edit by hand again");
    let second = id_of(&pending[0]);
    let res = server.client.post(server.url(&format!("/permission/{second}/reply"))).json(&json!({"reply": "once"}));
    let res = res.send().await.expect("reply");
    let status = res.status();
    let error = resource_changed(status, &res.text().await.expect("body"), "lib.rs");
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["id"], error["approvalId"]);

    let (status, body) = decide(&server, &session, &id_of(&pending[0]), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "let y = 2;\n");
    let page = server.messages(&session, "").await;
    let result = page["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "toolResult").cloned();
    let result = result.expect("a tool result");
    assert_eq!(result["isError"], true, "{result}");
    assert!(result["content"][0]["text"].as_str().is_some_and(|t| t.contains("oldString was not found")), "{result}");
}

#[tokio::test]
async fn a_reject_is_never_refused_because_the_file_changed() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let file = server.project_dir().join("keep.txt");
    let (run_id, asked) = server.park(&session, &write_prompt("keep.txt", "from the model\n")).await;
    assert!(asked["payload"]["preview"].as_str().is_some_and(|p| p.contains("does not exist yet")), "{asked}");
    std::fs::write(&file, "made by hand\n").expect("create by hand");
    let (status, body) = decide(&server, &session, &id_of(&asked), json!({"decision": "reject"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "cancelled");
    assert!(pending_approvals(&server, &session).await.is_empty());
    let old = stored_approval(&server, &id_of(&asked)).await;
    assert_eq!(old.status, spool_protocol::ApprovalStatus::Resolved);
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "made by hand\n");
}

/// A decision acknowledged before a crash whose call never started runs after the
/// restart, but only on the file the person was shown: changed meanwhile, it asks again.
#[tokio::test]
async fn a_decided_call_resumed_after_a_crash_asks_again_when_its_file_changed() {
    use spool_engine::store::{Approvals, Runs};
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let file = server.project_dir().join("crash.txt");
    std::fs::write(&file, "before\n").expect("write");
    let (run_id, asked) = server.park(&session, &write_prompt("crash.txt", "from the model\n")).await;
    // What a process killed right after answering 200 leaves: the decision stored and
    // the run running, its tool not started.
    let approval_id: spool_protocol::ApprovalId = id_of(&asked).parse().expect("approval id");
    let store = server.store.clone();
    let won = store
        .settle_approval(
            &approval_id,
            spool_protocol::ApprovalStatus::Resolved,
            Some(&spool_protocol::Decision::Once),
            None,
            None,
            spool_protocol::time::now_ms(),
        )
        .await
        .expect("settle");
    assert!(won);
    let run_id_typed: spool_protocol::RunId = run_id.parse().expect("run id");
    let mut run = store.get_run(&run_id_typed).await.expect("read run").expect("run");
    run.status = spool_protocol::RunStatus::Running;
    store.update_run(&run).await.expect("running");
    std::fs::write(&file, "changed while down\n").expect("edit by hand");

    let server = server.restart().await;
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "asked again: {pending:?}");
    assert_ne!(pending[0]["id"], asked["id"]);
    let preview = pending[0]["payload"]["preview"].as_str().expect("a fresh preview");
    assert!(preview.contains("-changed while down"), "{preview}");
    assert_eq!(server.get(&format!("/api/runs/{run_id}")).await.1["status"], "interrupted");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "changed while down\n");
    let old = stored_approval(&server, &id_of(&asked)).await;
    assert_eq!(old.status, spool_protocol::ApprovalStatus::Superseded);

    let (status, body) = decide(&server, &session, &id_of(&pending[0]), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "from the model\n");
}

// ---- timeouts that decide (issue 41) ------------------------------------------------

/// How long the rules in the timeout tests wait: shorter than [`APPROVAL_TTL_MS`], so
/// the two are told apart.
const RULE_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// A server on `clock` whose `write` asks under `rule` (appended to the defaults).
async fn server_with_rule(clock: &ManualClock, rule: Value) -> TestServer {
    let mut rules = spool_protocol::approval::default_rules();
    rules.push(serde_json::from_value(rule).expect("a rule"));
    let engine = EngineConfig {
        approval_ttl: Duration::from_millis(APPROVAL_TTL_MS as u64),
        clock: clock.clone().into(),
        rules,
        ..EngineConfig::default()
    };
    TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await
}

/// The tool results of the session's conversation.
async fn tool_results(server: &TestServer, session: &str) -> Vec<Value> {
    let page = server.messages(session, "").await;
    page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "toolResult").cloned().collect()
}

#[tokio::test]
async fn a_rule_timeout_denies_and_the_model_is_told() {
    let clock = ManualClock::starting_now();
    let server = server_on(&clock).await;
    let session = server.new_session().await;
    // A session rule, set over HTTP the way a client sets one.
    let rule = json!({"tool": "write", "action": "ask", "timeout": "5m", "onTimeout": "deny"});
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"permissions": [rule]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, rules) = server.get(&format!("/api/sessions/{session}/permissions")).await;
    assert_eq!(rules["session"], json!([rule]), "{rules}");
    let (run_id, approval) = server.park(&session, &write_prompt("late.txt", "x")).await;
    let created = approval["createdAt"].as_i64().expect("createdAt");
    assert_eq!(approval["expiresAt"].as_i64(), Some(created + RULE_TIMEOUT_MS), "{approval}");
    assert_eq!(approval["payload"]["onTimeout"], "deny", "{approval}");

    clock.advance_to(created + RULE_TIMEOUT_MS);
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "the run goes on: {run}");
    assert!(!server.project_dir().join("late.txt").exists());
    let results = tool_results(&server, &session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["isError"], true);
    let text = results[0]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Nobody answered within 5m; the rule says deny"), "{text}");
    assert!(!text.contains("user rejected"), "no person rejected it: {text}");
    let stored = stored_approval(&server, &id_of(&approval)).await;
    assert_eq!(stored.status, spool_protocol::ApprovalStatus::Resolved);
    assert_eq!((stored.decision, stored.actor), (Some(spool_protocol::Decision::Reject), None));
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let last = &detail["state"]["lastApproval"];
    assert_eq!((&last["decision"], &last["via"]), (&json!("reject"), &json!("timeout")), "{detail}");
    // Decided: a person too late is told so.
    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(!server.project_dir().join("late.txt").exists());
}

#[tokio::test]
async fn a_rule_timeout_allows_and_the_call_runs_once() {
    let clock = ManualClock::starting_now();
    let rule = json!({"tool": "write", "action": "ask", "timeout": 300, "on_timeout": "allow"});
    let server = server_with_rule(&clock, rule).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("auto.txt", "ran")).await;
    let created = approval["createdAt"].as_i64().expect("createdAt");
    assert_eq!(approval["expiresAt"].as_i64(), Some(created + RULE_TIMEOUT_MS), "{approval}");
    assert_eq!(approval["payload"]["onTimeout"], "allow", "{approval}");

    clock.advance_to(created + RULE_TIMEOUT_MS);
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("auto.txt")).expect("written"), "ran");
    let results = tool_results(&server, &session).await;
    assert_eq!(results.len(), 1, "the call ran once: {results:?}");
    assert_eq!(results[0]["isError"], false, "{results:?}");
    let stored = stored_approval(&server, &id_of(&approval)).await;
    assert_eq!((stored.decision, stored.actor), (Some(spool_protocol::Decision::Once), None));
}

#[tokio::test]
async fn on_timeout_wait_keeps_waiting_past_the_rule_timeout() {
    let clock = ManualClock::starting_now();
    let rule = json!({"tool": "write", "action": "ask", "timeout": "5m", "onTimeout": "wait"});
    let server = server_with_rule(&clock, rule).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("w.txt", "later")).await;
    let created = approval["createdAt"].as_i64().expect("createdAt");
    // It expires at the server's TTL; the rule's time only marks when a reminder is due.
    assert_eq!(expiry_of(&approval), created + APPROVAL_TTL_MS);
    assert_eq!(approval["payload"]["remindAt"].as_i64(), Some(created + RULE_TIMEOUT_MS), "{approval}");

    clock.advance_to(created + APPROVAL_TTL_MS - 1);
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "still waiting past the rule's timeout: {pending:?}");
    assert_eq!(server.get(&format!("/api/runs/{run_id}")).await.1["status"], "interrupted");
    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("w.txt")).expect("written"), "later");
}

#[tokio::test]
async fn a_never_expiring_approval_survives_a_restart_and_is_still_decidable() {
    let clock = ManualClock::starting_now();
    let rule = json!({"tool": "write", "action": "ask", "timeout": "never"});
    let server = server_with_rule(&clock, rule).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("forever.txt", "x")).await;
    assert_eq!(approval["expiresAt"].as_i64(), Some(spool_protocol::NEVER_EXPIRES), "{approval}");

    // A year and more later (the server's TTL is minutes), and after a restart that
    // re-arms every pending approval: still waiting.
    clock.advance_to(approval["createdAt"].as_i64().expect("createdAt") + 400 * 24 * 3600 * 1000);
    let server = server.restart().await;
    let pending = pending_approvals(&server, &session).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["id"], approval["id"]);
    assert_eq!(server.get(&format!("/api/runs/{run_id}")).await.1["status"], "interrupted");
    let (status, body) = decide(&server, &session, &id_of(&approval), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("forever.txt")).expect("written"), "x");
}

/// A person's decision and the rule's timeout at the same instant: exactly one of them
/// decides, the call has one result, and that result is the winner's.
#[tokio::test]
async fn a_person_and_the_timeout_race_and_one_wins() {
    let clock = ManualClock::starting_now();
    let rule = json!({"tool": "write", "action": "ask", "timeout": "5m", "onTimeout": "deny"});
    let server = server_with_rule(&clock, rule).await;
    let (mut people, mut timeouts) = (0, 0);
    // How long the timer lets the person's request run first, by round: not a wait for
    // anything (every outcome is checked), only a spread of interleavings, from the
    // timeout well ahead to the person well ahead.
    // `None`: the instant comes before the request leaves, so the timer and the late
    // request's own expiry check race each other.
    let head_starts = [None, None, Some(0), Some(1), Some(2), Some(4), Some(8), Some(16)];
    let rounds = head_starts.len();
    for (round, head_start) in head_starts.into_iter().enumerate() {
        let session = server.new_session().await;
        let file = format!("race{round}.txt");
        let (run_id, approval) = server.park(&session, &write_prompt(&file, "person")).await;
        let expires = approval["expiresAt"].as_i64().expect("expiresAt");
        // Up to a millisecond before, while the run is parked (a jump of minutes while
        // a run goes on would expire its session lease, which real time never does).
        clock.advance_to(expires - 1);
        let approval_id = id_of(&approval);
        let person = decide(&server, &session, &approval_id, json!({"decision": "once"}));
        if head_start.is_none() {
            clock.advance_to(expires);
        }
        let timer = async {
            if let Some(ms) = head_start {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                clock.advance_to(expires);
            }
        };
        let ((status, body), ()) = tokio::join!(person, timer);
        let run = server.wait_run(&run_id).await;
        assert_eq!(run["status"], "completed", "round {round} ({status} {body}): {run}");
        let results = tool_results(&server, &session).await;
        assert_eq!(results.len(), 1, "one result in round {round}: {results:?}");
        let written = server.project_dir().join(&file).exists();
        let stored = stored_approval(&server, &id_of(&approval)).await;
        assert_eq!(stored.status, spool_protocol::ApprovalStatus::Resolved, "round {round}");
        if status == StatusCode::OK {
            people += 1;
            assert!(written, "round {round}: the person won, the call ran");
            assert_eq!(results[0]["isError"], false, "{results:?}");
            assert_eq!(stored.decision, Some(spool_protocol::Decision::Once));
        } else {
            timeouts += 1;
            assert!(matches!(status, StatusCode::CONFLICT | StatusCode::GONE), "round {round}: {status} {body}");
            assert!(!written, "round {round}: the timeout won, nothing ran");
            let text = results[0]["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.contains("Nobody answered"), "{text}");
            assert_eq!((stored.decision, stored.actor), (Some(spool_protocol::Decision::Reject), None));
        }
    }
    assert_eq!(people + timeouts, rounds);
}
