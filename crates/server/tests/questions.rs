//! The `question` tool through a real server: the model asks, the run parks at a
//! `select_option` or `provide_input` approval, and the person's answer — one of the
//! options or their own words — is what the model reads next. A reject tells the model
//! the person declined; the model can never answer its own question.

use crate::common;

use common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Prompts the scripted model to call `question` with `args` and waits for the run to
/// park; returns (run id, the pending approval).
async fn ask(server: &TestServer, session: &str, args: Value) -> (String, Value) {
    let run_id = server.start_run(session, &format!("tool: question {args}")).await;
    let run = server.wait_run_until(&run_id, |r| r["status"] != "running").await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let pending = detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals").clone();
    assert_eq!(pending.len(), 1, "{detail}");
    (run_id, pending[0].clone())
}

/// The tool result the model read for the run's question.
async fn tool_result(server: &TestServer, session: &str) -> (String, bool) {
    let page = server.messages(session, "").await;
    let result = page["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "toolResult").cloned();
    let result = result.expect("a tool result");
    let text = result["content"][0]["text"].as_str().expect("text").to_owned();
    (text, result["isError"] == true)
}

#[tokio::test]
async fn an_answer_in_the_persons_own_words_reaches_the_model() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let options = json!([{"label": "red"}, {"label": "blue", "description": "like the sky"}]);
    let (run_id, approval) = ask(&server, &session, json!({"question": "Which colour?", "options": options})).await;
    assert_eq!(approval["kind"], "select_option");
    assert_eq!(approval["tool"], "question");
    assert_eq!(approval["payload"]["question"], "Which colour?");
    assert_eq!(approval["payload"]["options"][1], json!({"label": "blue", "description": "like the sky"}));
    assert_eq!(approval["payload"]["other"], true, "an answer of one's own is always allowed");

    let path = format!("/api/sessions/{session}/approvals/{}", id_of(&approval));
    let (status, body) = server.post(&path, json!({"decision": {"fill": {"answer": "green"}}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(tool_result(&server, &session).await, ("The person answered: green".to_owned(), false));
}

#[tokio::test]
async fn a_question_without_options_asks_for_input_and_a_reject_tells_the_model() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = ask(&server, &session, json!({"question": "What should the file be called?"})).await;
    assert_eq!(approval["kind"], "provide_input");
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(&approval));
    let (status, body) = server.post(&path, json!({"decision": "reject", "message": "decide yourself"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed", "a reject with a message goes on");
    let (text, is_error) = tool_result(&server, &session).await;
    assert!(is_error && text.contains("decide yourself"), "{text}");
}

#[tokio::test]
async fn the_model_cannot_answer_its_own_question_nor_can_a_rule_allow_it() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    // Even with a rule that allows every question, a question waits for the person.
    let rules = json!([{"tool": "question", "pattern": "*", "action": "allow"}]);
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"permissions": rules})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (run_id, approval) = ask(&server, &session, json!({"question": "Go on?"})).await;
    assert_eq!(approval["kind"], "provide_input");
    let (status, _) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.wait_run(&run_id).await["status"], "cancelled");

    let fresh = server.new_session().await;
    let run_id = server.start_run(&fresh, "tool: question {\"question\": \"Go on?\", \"answer\": \"yes\"}").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed", "nothing waits for a malformed call");
    let (text, is_error) = tool_result(&server, &fresh).await;
    assert!(is_error && text.contains("answer"), "the model is told why: {text}");
}
