//! Seed 002's gate routes through a real server: `GET /api/gate/approvals` lists what a
//! reconnecting hub client must rehydrate, `POST /api/gate/approvals/{id}` decides by id
//! alone, exactly once, with the same answers as every other decision route; another
//! user sees and decides nothing. Side effects are checked on disk.

use crate::common;

use common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Starts a run whose tool call needs approval, waits until it is parked, and returns
/// (run id, approval id).
async fn park(server: &TestServer, session: &str, path: &str) -> (String, String) {
    let prompt = format!("tool: write {}", json!({"path": path, "content": "gated"}));
    let (run_id, approval) = server.park(session, &prompt).await;
    (run_id, id_of(&approval))
}

async fn gate_decide(server: &TestServer, approval: &str, body: Value) -> (StatusCode, String) {
    let res = server
        .client
        .post(server.url(&format!("/api/gate/approvals/{approval}")))
        .json(&body)
        .send()
        .await
        .expect("gate decision");
    let status = res.status();
    (status, res.text().await.expect("body"))
}

#[tokio::test]
async fn the_list_rehydrates_pending_cards_and_a_decision_by_id_runs_the_tool_once() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (status, empty) = server.get("/api/gate/approvals").await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty["approvals"], json!([]));

    let (run_id, approval) = park(&server, &session, "gated.txt").await;
    let (_, listed) = server.get("/api/gate/approvals").await;
    let cards = listed["approvals"].as_array().expect("approvals");
    assert_eq!(cards.len(), 1, "{listed}");
    // The card has the hub event's shape, so a client renders it like a live one.
    assert_eq!(cards[0]["type"], "gate.approval_requested");
    assert_eq!(cards[0]["req_id"], approval.as_str());
    assert_eq!(cards[0]["channel_id"], session.as_str());
    assert_eq!(cards[0]["run_id"], run_id.as_str());
    assert_eq!(cards[0]["tool"], "write");
    assert_eq!(cards[0]["target"], "gated.txt");

    let file = server.project_dir().join("gated.txt");
    assert!(!file.exists(), "nothing is written before a decision");
    let (status, body) = gate_decide(&server, &approval, json!({"decision": "once", "idempotency_key": "g1"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let decided: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        (decided["approvalId"].as_str(), decided["status"].as_str()),
        (Some(approval.as_str()), Some("resolved"))
    );
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    assert_eq!(std::fs::read_to_string(&file).expect("written"), "gated");

    // The same key: the first answer byte for byte; another decision: already resolved.
    std::fs::write(&file, "changed by hand").expect("overwrite");
    let again = gate_decide(&server, &approval, json!({"decision": "once", "idempotency_key": "g1"})).await;
    assert_eq!(again, (status, body));
    let (late, text) = gate_decide(&server, &approval, json!({"decision": "deny"})).await;
    assert_eq!(late, StatusCode::CONFLICT, "{text}");
    assert!(text.contains("already_resolved"), "{text}");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "changed by hand", "the tool ran once");
    // Gone from the list: a reconnecting client dismisses its card.
    assert_eq!(server.get("/api/gate/approvals").await.1["approvals"], json!([]));
}

#[tokio::test]
async fn deny_with_a_message_tells_the_model_and_never_runs_the_tool() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run_id, approval) = park(&server, &session, "denied.txt").await;
    let (status, body) = gate_decide(&server, &approval, json!({"decision": "deny", "message": "not that file"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).expect("json")["decision"], "reject");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed", "a reject with a message goes on");
    assert!(!server.project_dir().join("denied.txt").exists(), "a denied call never runs");
    let messages = server.messages(&session, "").await;
    let told = messages.to_string();
    assert!(told.contains("not that file"), "the model is told why: {told}");
}

#[tokio::test]
async fn a_bad_decision_or_an_unknown_id_changes_nothing() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (_, approval) = park(&server, &session, "kept.txt").await;
    let (status, text) = gate_decide(&server, &approval, json!({"decision": "maybe"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("invalid_body"), "{text}");
    let (status, text) = gate_decide(&server, "per_01jd0000000000000000000001", json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert_eq!(server.get("/api/gate/approvals").await.1["approvals"].as_array().map(Vec::len), Some(1));
    assert!(!server.project_dir().join("kept.txt").exists());
}

#[tokio::test]
async fn another_user_neither_sees_nor_decides_an_approval() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let as_user = |req: reqwest::RequestBuilder, token: &str| req.bearer_auth(token.to_owned());
    let dir = server.project_dir();
    let post = |path: &str, token: &str, body: Value| as_user(server.client.post(server.url(path)), token).json(&body);
    let (_, project) = server.send(post("/api/projects", &alice, json!({"path": dir}))).await;
    let (_, session) = server.send(post("/api/sessions", &alice, json!({"projectId": id_of(&project)}))).await;
    let session = id_of(&session);
    let prompt = format!("tool: write {}", json!({"path": "alice.txt", "content": "a"}));
    let (status, _) =
        server.send(post(&format!("/api/sessions/{session}/prompt"), &alice, json!({"text": prompt}))).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let list = |token: &str| as_user(server.client.get(server.url("/api/gate/approvals")), token);
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let approval = loop {
        let (_, listed) = server.send(list(&alice)).await;
        if let Some(card) = listed["approvals"].get(0) {
            break card["req_id"].as_str().expect("req_id").to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "no approval");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };

    assert_eq!(server.send(list(&bob)).await.1["approvals"], json!([]));
    let (status, _) = server.send(as_user(server.client.get(server.url("/api/gate/approvals")), "spool_nope")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) =
        server.send(post(&format!("/api/gate/approvals/{approval}"), &bob, json!({"decision": "once"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Still Alice's to decide.
    assert_eq!(server.send(list(&alice)).await.1["approvals"].as_array().map(Vec::len), Some(1));
    assert!(!dir.join("alice.txt").exists());
}
