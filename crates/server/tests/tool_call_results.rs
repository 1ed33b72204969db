//! `POST /api/tool-calls/:approvalId/result` through a real server (issue 40): a call of
//! a tool the prompt declared parks its run until the client posts what the tool
//! returned; the result is taken exactly once, only from the call's owner, and not
//! after the call expired. OpenCode clients never see such a call as something to
//! answer.

use crate::common;

use common::{TestOptions, TestServer, id_of, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, ManualClock};
use std::time::Duration;

/// A prompt that calls the client's `get_location` tool (the scripted model calls what
/// `tool:` names), with the tool declared.
fn locating_prompt() -> Value {
    json!({
        "text": "tool: get_location {\"precise\": true}",
        "tools": [{
            "name": "get_location",
            "description": "Where the person is, from the browser",
            "parameters": {"type": "object", "properties": {"precise": {"type": "boolean"}}}
        }]
    })
}

/// Prompts `session` with [`locating_prompt`] (bearing `token`, if any) and waits until
/// the run is parked at the client call; returns the run's id and the approval.
async fn park_client_call(server: &TestServer, session: &str, token: Option<&str>) -> (String, Value) {
    let mut request =
        server.client.post(server.url(&format!("/api/sessions/{session}/prompt"))).json(&locating_prompt());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let (status, started) = server.send(request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let run = started["runId"].as_str().expect("runId").to_owned();
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let mut request = server.client.get(server.url(&format!("/api/sessions/{session}")));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let (_, detail) = server.send(request).await;
        if let Some(approval) = detail["state"]["pendingApprovals"].get(0) {
            assert_eq!(approval["payload"]["client"], true, "{approval}");
            assert_eq!(approval["payload"]["tool"], "get_location", "{approval}");
            assert_eq!(approval["payload"]["arguments"], json!({"precise": true}), "{approval}");
            return (run, approval.clone());
        }
        assert!(tokio::time::Instant::now() < deadline, "the client call never parked: {detail}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Posts a result; answers the status and the body's exact bytes.
async fn post_result(server: &TestServer, approval: &str, body: &Value, token: Option<&str>) -> (StatusCode, String) {
    let mut request = server.client.post(server.url(&format!("/api/tool-calls/{approval}/result"))).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let res = request.send().await.expect("request reaches the server");
    (res.status(), res.text().await.expect("a body"))
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test]
async fn the_result_is_taken_exactly_once() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    let id = id_of(&approval);

    // Two clients answer at once, with different results: one wins.
    let lisbon = json!({"output": {"city": "Lisbon"}});
    let porto = json!({"output": "Porto"});
    let (first, second) =
        tokio::join!(post_result(&server, &id, &lisbon, None), post_result(&server, &id, &porto, None));
    let mut answers = [first, second];
    answers.sort_by_key(|(status, _)| *status);
    let [(won, taken), (lost, refused)] = answers;
    assert_eq!((won, lost), (StatusCode::OK, StatusCode::CONFLICT), "{taken} / {refused}");
    assert_eq!(json_of(&refused)["error"]["code"], "already_resolved", "{refused}");
    let taken_json = json_of(&taken);
    assert_eq!(
        taken_json,
        json!({"toolCallId": approval["toolCallId"], "approvalId": id, "runId": run, "status": "running"})
    );

    // The run goes on with the winner's result, which the model reads once.
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    let (name, text, failed) = &results[0];
    assert_eq!((name.as_str(), *failed), ("get_location", false));
    let (winner_sent, loser_sent) = match text.contains("Lisbon") {
        true => (&lisbon, &porto),
        false => (&porto, &lisbon),
    };
    assert!(text.contains(winner_sent["output"].as_str().unwrap_or("Lisbon")), "{text}");

    // The winner's retry (no key: the result is the key) is answered again, byte for
    // byte; the loser's retry is still refused; an explicit new key is a new answer.
    let (status, again) = post_result(&server, &id, winner_sent, None).await;
    assert_eq!((status, again.as_str()), (StatusCode::OK, taken.as_str()));
    let (status, _) = post_result(&server, &id, loser_sent, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let keyed = json!({"output": "Faro", "idempotencyKey": "late-client"});
    let (status, late) = post_result(&server, &id, &keyed, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{late}");
    let (status, late_again) = post_result(&server, &id, &keyed, None).await;
    assert_eq!((status, late_again), (StatusCode::CONFLICT, late), "a key replays its refusal too");
    assert_eq!(server.tool_results(&session).await.len(), 1, "nothing more was committed");
}

#[tokio::test]
async fn an_error_result_reaches_the_model_as_a_failed_call() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    let body = json!({"output": "permission to locate was refused", "isError": true});
    let (status, taken) = post_result(&server, &id_of(&approval), &body, None).await;
    assert_eq!(status, StatusCode::OK, "{taken}");
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    let results = server.tool_results(&session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].2, "an error result: {results:?}");
    assert!(results[0].1.contains("permission to locate was refused"), "{results:?}");
}

#[tokio::test]
async fn a_result_too_large_is_refused_and_the_call_still_waits() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    let id = id_of(&approval);
    let huge = json!({"output": "x".repeat(300 * 1024)});
    let (status, refused) = post_result(&server, &id, &huge, None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{refused}");
    assert_eq!(json_of(&refused)["error"]["code"], "output_too_large", "{refused}");
    let (status, taken) = post_result(&server, &id, &json!({"output": "Lisbon"}), None).await;
    assert_eq!(status, StatusCode::OK, "{taken}");
    assert_eq!(server.wait_run(&run).await["status"], "completed");
}

#[tokio::test]
async fn a_result_for_another_users_call_or_for_no_client_call_is_not_found() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let dir = server.project_dir();
    let create = |path: &str, body: Value, token: &str| {
        server.send(server.client.post(server.url(path)).bearer_auth(token).json(&body))
    };
    let (status, project) = create("/api/projects", json!({"path": dir}), &alice).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    let (status, session) = create("/api/sessions", json!({"projectId": id_of(&project)}), &alice).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let session = id_of(&session);
    let (run, approval) = park_client_call(&server, &session, Some(&alice)).await;
    let id = id_of(&approval);

    // Bob cannot answer Alice's call: it is not there for him, exactly like no call.
    let body = json!({"output": "Bob's house"});
    let (status, refused) = post_result(&server, &id, &body, Some(&bob)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(json_of(&refused)["error"]["code"], "not_found");
    let (status, unknown) = post_result(&server, "per_01jd0000000000000000000006", &body, Some(&bob)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");
    assert_eq!(json_of(&refused)["error"], json_of(&unknown)["error"], "the same answer as for no call at all");
    let (status, _) = post_result(&server, "not-an-id", &body, Some(&bob)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Alice's own result is taken.
    let (status, taken) = post_result(&server, &id, &json!({"output": "Lisbon"}), Some(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{taken}");
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let request = server.client.get(server.url(&format!("/api/runs/{run}"))).bearer_auth(&alice);
        let (_, got) = server.send(request).await;
        if got["status"] == "completed" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run did not complete: {got}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // An approval that is not a client call takes no result, even from its owner.
    let write = json!({"text": "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}"});
    let (status, _) = create(&format!("/api/sessions/{session}/prompt"), write, &alice).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let asked = loop {
        let request = server.client.get(server.url(&format!("/api/sessions/{session}"))).bearer_auth(&alice);
        let (_, detail) = server.send(request).await;
        if let Some(a) = detail["state"]["pendingApprovals"].get(0) {
            break a.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "the write never asked: {detail}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(asked["tool"], "write");
    let (status, refused) = post_result(&server, &id_of(&asked), &json!({"output": "done"}), Some(&alice)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert!(!dir.join("a.txt").exists(), "a result is no approval");
}

#[tokio::test]
async fn a_result_after_expiry_is_gone() {
    let clock = ManualClock::starting_now();
    let ttl = Duration::from_secs(60);
    let engine = EngineConfig { clock: clock.clone().into(), client_tool_ttl: ttl, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    let (created, expires) = (approval["createdAt"].as_i64(), approval["expiresAt"].as_i64());
    let expires = expires.expect("expiresAt");
    assert_eq!(expires - created.expect("createdAt"), 60_000, "the client tool's TTL: {approval}");

    clock.advance_to(expires);
    let (status, gone) = post_result(&server, &id_of(&approval), &json!({"output": "Lisbon"}), None).await;
    assert_eq!(status, StatusCode::GONE, "{gone}");
    assert_eq!(json_of(&gone)["error"]["code"], "client_tool_expired", "{gone}");
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    assert!(server.tool_results(&session).await.iter().all(|(_, text, _)| !text.contains("Lisbon")));
    // The session is free for the next prompt.
    assert_eq!(server.run_prompt(&session, "echo: again").await["status"], "completed");
}

#[tokio::test]
async fn opencode_lists_a_client_call_neither_as_a_permission_nor_as_a_question() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    let dir = std::fs::canonicalize(server.project_dir()).expect("project dir");
    let at = urlencode(dir.to_str().expect("UTF-8"));
    let (status, permissions) = server.get(&format!("/permission?directory={at}")).await;
    assert_eq!((status, permissions), (StatusCode::OK, json!([])));
    let (status, questions) = server.get(&format!("/question?directory={at}")).await;
    assert_eq!((status, questions), (StatusCode::OK, json!([])));
    // Nor can an OpenCode question reply answer it.
    let id = id_of(&approval);
    let (status, _) = server.post(&format!("/question/{id}/reply"), json!({"answers": [["Lisbon"]]})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = post_result(&server, &id, &json!({"output": "Lisbon"}), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.wait_run(&run).await["status"], "completed");
}

#[tokio::test]
async fn a_session_waiting_only_for_its_client_does_not_ask_a_person() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let session = server.new_session().await;
    let (run, approval) = park_client_call(&server, &session, None).await;
    // The sidebar's "Needs you" and the approval gate are for what a person decides.
    let (status, list) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let row = list.as_array().expect("rows").iter().find(|s| s["id"] == session.as_str()).cloned().expect("listed");
    assert_eq!(row["waiting"], false, "{row}");
    let (status, gate) = server.get("/api/gate/approvals").await;
    assert_eq!((status, gate), (StatusCode::OK, json!({"approvals": []})));
    // The same session parked at a person's approval does need them (the filter is not blanket).
    let (status, _) = post_result(&server, &id_of(&approval), &json!({"output": "Lisbon"}), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    server.park(&session, "tool: bash {\"command\": \"rm -f x\"}").await;
    let (_, list) = server.get(&format!("/api/projects/{project}/sessions")).await;
    let row = list.as_array().expect("rows").iter().find(|s| s["id"] == session.as_str()).cloned().expect("listed");
    assert_eq!(row["waiting"], true, "{row}");
    let (_, gate) = server.get("/api/gate/approvals").await;
    assert_eq!(gate["approvals"].as_array().map(Vec::len), Some(1), "{gate}");
}
