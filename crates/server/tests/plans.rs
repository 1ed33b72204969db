//! Plan mode through a real server: a session in `plan` mode changes nothing — the
//! tools that act are refused without asking anyone — until the model hands its plan
//! to the person with `exit_plan`. Accepting switches the session to `agent` mode,
//! durably, and the run goes on with every tool; asking for changes keeps plan mode
//! and gives the model the person's words.

use crate::common;

use common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn set_mode(server: &TestServer, session: &str, mode: &str) -> Value {
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": mode})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn mode_of(server: &TestServer, session: &str) -> String {
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    detail["mode"].as_str().unwrap_or_else(|| panic!("no mode in {detail}")).to_owned()
}

/// Starts `exit_plan` with `plan` and waits for the run to park at its approval.
async fn propose(server: &TestServer, session: &str, plan: &str) -> (String, Value) {
    let run_id = server.start_run(session, &format!("tool: exit_plan {}", json!({"plan": plan}))).await;
    let run = server.wait_run_until(&run_id, |r| r["status"] != "running").await;
    assert_eq!(run["status"], "interrupted", "a plan waits for the person: {run}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let pending = detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals").clone();
    assert_eq!(pending.len(), 1, "{detail}");
    (run_id, pending[0].clone())
}

#[tokio::test]
async fn plan_mode_refuses_the_tools_that_act_without_asking_anyone() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    assert_eq!(mode_of(&server, &session).await, "agent", "sessions start in agent mode");
    assert_eq!(set_mode(&server, &session, "plan").await["mode"], "plan");
    // Even a rule that allows every write does not open plan mode.
    let rules = json!([{"tool": "write", "pattern": "*", "action": "allow"}]);
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"permissions": rules})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    for (tool, args) in [
        ("write", json!({"path": "notes.txt", "content": "hello"})),
        ("bash", json!({"command": "touch made-by-bash"})),
    ] {
        let run = server.run_prompt(&session, &format!("tool: {tool} {args}")).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    assert!(!server.project_dir().join("notes.txt").exists(), "plan mode wrote a file");
    assert!(!server.project_dir().join("made-by-bash").exists(), "plan mode ran a command");
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 2, "{results:?}");
    for (tool, text, is_error) in &results {
        assert!(
            *is_error && text.contains("not available in plan mode") && text.contains("exit_plan"),
            "{tool}: {text}"
        );
    }
    // Looking is allowed.
    std::fs::write(server.project_dir().join("seen.txt"), "looked at in plan mode\n").expect("write");
    let run = server.run_prompt(&session, "tool: read {\"path\": \"seen.txt\"}").await;
    assert_eq!(run["status"], "completed", "{run}");
    let (tool, text, is_error) = server.tool_results(&session).await.pop().expect("read's result");
    assert_eq!(tool, "read");
    assert!(!is_error && text.contains("looked at in plan mode"), "{text}");

    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"mode": "build"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("mode") && message.contains("`agent` or `plan`"), "{body}");
    assert_eq!(mode_of(&server, &session).await, "plan", "a bad mode changes nothing");
    let server = server.restart().await;
    assert_eq!(mode_of(&server, &session).await, "plan", "the mode is in the store");
}

#[tokio::test]
async fn an_accepted_plan_switches_to_agent_mode_for_good_and_the_run_goes_on() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    set_mode(&server, &session, "plan").await;
    let (run_id, approval) = propose(&server, &session, "# Plan\n\n1. Write notes.txt").await;
    assert_eq!(approval["tool"], "exit_plan");
    assert_eq!(approval["kind"], "confirm_action");
    assert_eq!(approval["payload"]["plan"], "# Plan\n\n1. Write notes.txt");
    assert_eq!(mode_of(&server, &session).await, "plan", "nothing changes before the person decides");

    let path = format!("/api/sessions/{session}/approvals/{}", id_of(&approval));
    let (status, body) = server.post(&path, json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let (tool, text, is_error) = server.tool_results(&session).await.pop().expect("exit_plan's result");
    assert_eq!(tool, "exit_plan");
    assert!(!is_error && text.contains("accepted the plan"), "{text}");
    assert_eq!(mode_of(&server, &session).await, "agent");

    // Agent mode holds across a restart, and the tools that act work again.
    let server = server.restart().await;
    assert_eq!(mode_of(&server, &session).await, "agent", "the switch is in the store");
    let rules = json!([{"tool": "write", "pattern": "*", "action": "allow"}]);
    server.patch(&format!("/api/sessions/{session}"), json!({"permissions": rules})).await;
    let args = json!({"path": "notes.txt", "content": "planned\n"});
    assert_eq!(server.run_prompt(&session, &format!("tool: write {args}")).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("notes.txt")).expect("written"), "planned\n");

    // In agent mode there is no plan to leave.
    let run = server.run_prompt(&session, "tool: exit_plan {\"plan\": \"again\"}").await;
    assert_eq!(run["status"], "completed", "nothing waits: {run}");
    let (_, text, is_error) = server.tool_results(&session).await.pop().expect("result");
    assert!(is_error && text.contains("only available in plan mode"), "{text}");
}

#[tokio::test]
async fn asking_for_changes_keeps_plan_mode_and_tells_the_model_what_to_change() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    set_mode(&server, &session, "plan").await;
    let (run_id, approval) = propose(&server, &session, "1. Delete everything").await;
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(&approval));
    let (status, body) =
        server.post(&path, json!({"decision": "reject", "message": "keep the tests, delete only build/"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed", "the model goes on revising");
    let (tool, text, is_error) = server.tool_results(&session).await.pop().expect("exit_plan's result");
    assert_eq!(tool, "exit_plan");
    assert!(is_error && text.contains("keep the tests, delete only build/"), "{text}");
    assert_eq!(mode_of(&server, &session).await, "plan");
}
