//! Removing one of a session's permission rules (`DELETE
//! /api/sessions/{id}/permissions/{index}`, Undo in the Rules panel) through a real
//! server: it removes exactly the rule named, keeps a rule an "Always allow" adds at the
//! same moment, refuses with 409 when the rule at that index is another one (a stale
//! tab), and answers 404 for an unknown session or index.

use crate::common;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn rules(server: &TestServer, session: &str) -> Value {
    let (status, body) = server.get(&format!("/api/sessions/{session}/permissions")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["session"].clone()
}

async fn set_rules(server: &TestServer, session: &str, rules: Value) {
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({ "permissions": rules })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn remove(server: &TestServer, session: &str, index: &str, tool: &str, action: &str) -> (StatusCode, Value) {
    server.delete(&format!("/api/sessions/{session}/permissions/{index}?tool={tool}&action={action}")).await
}

/// Starts a run whose `write` asks for approval and waits until it is parked; the run's
/// id and the pending approval's.
async fn parked_write(server: &TestServer, session: &str, path: &str) -> (String, String) {
    let prompt = format!("tool: write {}", json!({"path": path, "content": "x"}));
    let (id, approval) = server.park(session, &prompt).await;
    (id, common::id_of(&approval))
}

#[tokio::test]
async fn an_undo_at_the_same_moment_as_an_always_allow_loses_neither() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    // Several rounds, each racing the two requests: whichever goes first, the undone
    // rule is gone and the "Always allow" rule stays.
    for round in 0..8 {
        set_rules(&server, &session, json!([{"tool": "bash", "action": "allow"}])).await;
        let (run, approval) = parked_write(&server, &session, &format!("f{round}.txt")).await;
        let decision = format!("/api/sessions/{session}/approvals/{approval}");
        let always = server.post(&decision, json!({"decision": "always"}));
        let undo = remove(&server, &session, "0", "bash", "allow");
        let ((decided, body), (removed, answer)) = tokio::join!(always, undo);
        assert!(decided.is_success(), "{body}");
        assert_eq!(removed, StatusCode::OK, "{answer}");
        assert!(!answer["session"].as_array().expect("rules").iter().any(|r| r["tool"] == "bash"), "{answer}");
        assert_eq!(rules(&server, &session).await, json!([{"tool": "write", "action": "allow"}]), "round {round}");
        // The session state (what streams show) agrees with the store.
        let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(detail["state"]["session"]["permissions"], json!([{"tool": "write", "action": "allow"}]));
        let done = server.wait_run_until(&run, |r| r["status"] == "completed" || r["status"] == "failed").await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let server = server.restart().await;
    assert_eq!(rules(&server, &session).await, json!([{"tool": "write", "action": "allow"}]));
}

#[tokio::test]
async fn a_rule_that_moved_is_refused_and_unknown_ones_are_404() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let both = json!([{"tool": "read", "action": "deny"}, {"tool": "bash", "action": "allow"}]);
    set_rules(&server, &session, both.clone()).await;
    // A stale tab still sees bash at index 0: nothing is removed.
    let (status, body) = remove(&server, &session, "0", "bash", "allow").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "rule_changed", "{body}");
    assert!(body["error"]["message"].as_str().expect("message").contains("reload the rules"), "{body}");
    // Same tool, other action: also another rule.
    let (status, _) = remove(&server, &session, "1", "bash", "deny").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(rules(&server, &session).await, both);

    for (index, tool) in [("2", "bash"), ("99999999999999999999", "bash"), ("x", "bash")] {
        let (status, body) = remove(&server, &session, index, tool, "allow").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{index}: {body}");
    }
    let (status, _) = remove(&server, "ses_00000000000000000000000000", "0", "read", "deny").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = remove(&server, &session, "0", "read", "maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = server.delete(&format!("/api/sessions/{session}/permissions/0?action=deny")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(rules(&server, &session).await, both);

    // The right one goes, and the session stream says so.
    let (status, body) = remove(&server, &session, "1", "bash", "allow").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["session"], json!([{"tool": "read", "action": "deny"}]));
    assert!(body["server"].as_array().is_some_and(|r| !r.is_empty()), "{body}");
    assert_eq!(rules(&server, &session).await, json!([{"tool": "read", "action": "deny"}]));
}
