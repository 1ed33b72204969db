//! Forking a session (`POST /api/sessions/{id}/fork` and OpenCode's
//! `POST /session/:id/fork`): the fork holds copies of the source's first messages and
//! nothing else, the model sees only those on the fork's next prompt, and the source
//! stays as it was.

use crate::common;

use common::{TestOptions, TestServer, message_rows, recording_server};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, ModelRequest};
use spool_protocol::{Content, Message};

fn ids(page: &Value) -> Vec<String> {
    page["messages"].as_array().expect("messages").iter().map(|m| m["id"].as_str().expect("id").to_owned()).collect()
}

fn request_texts(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .map(|m| {
            let content = match m {
                Message::User { content, .. } => content.clone(),
                Message::Assistant { content, .. } => content.clone(),
                Message::ToolResult { content, .. } => content.clone(),
            };
            content
                .iter()
                .filter_map(|c| if let Content::Text { text } = c { Some(text.clone()) } else { None })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_fork_at_message_k_holds_exactly_messages_0_to_k() {
    let (server, seen) = recording_server(EngineConfig::default()).await;
    let source = server.new_session().await;
    let rules = json!({"permissions": [{"tool": "read", "action": "deny"}], "mode": "plan"});
    assert_eq!(server.patch(&format!("/api/sessions/{source}"), rules).await.0, StatusCode::OK);
    for text in ["echo: one", "echo: two", "echo: three"] {
        server.run_prompt(&source, text).await;
    }
    let before = server.messages(&source, "").await;
    let all = message_rows(&before);
    let k = all.iter().find(|(_, role, text)| role == "user" && text == "echo: two").expect("the second prompt").0;
    assert!(k > 0 && k < all.len() as u64 - 1, "{all:?}");

    let (status, fork) = server.post(&format!("/api/sessions/{source}/fork"), json!({"beforeIndex": k})).await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    let forked = common::id_of(&fork);
    assert_ne!(forked, source);
    assert_eq!(fork["permissions"][0]["tool"], "read", "{fork}");
    assert_eq!(fork["mode"], "plan", "{fork}");
    assert!(fork["title"].as_str().expect("title").ends_with("(fork)"), "{fork}");

    let copied = server.messages(&forked, "").await;
    assert_eq!(
        message_rows(&copied),
        all[..k as usize].to_vec(),
        "the fork holds messages 0..k, same indices and content"
    );
    assert_eq!(copied["total"], k);
    let source_ids = ids(&before);
    assert!(ids(&copied).iter().all(|id| !source_ids.contains(id)), "new message ids");
    assert_eq!(server.messages(&source, "").await, before, "the source is untouched");

    // Back in agent mode so the next prompt is an ordinary turn.
    assert_eq!(server.patch(&format!("/api/sessions/{forked}"), json!({"mode": "agent"})).await.0, StatusCode::OK);
    server.run_prompt(&forked, "echo: after the fork").await;
    let sent = request_texts(seen.lock().expect("lock").last().expect("a chat request"));
    let mut expected: Vec<String> = all[..k as usize].iter().map(|(_, _, text)| text.clone()).collect();
    expected.push("echo: after the fork".into());
    assert_eq!(sent, expected, "the model sees the fork's messages and the new prompt only");
    assert_eq!(server.messages(&source, "").await, before, "the fork's run left the source alone");
}

#[tokio::test]
async fn forks_refuse_other_users_sessions_and_indices_out_of_range() {
    let server = TestServer::start().await;
    let source = server.new_session().await;
    server.run_prompt(&source, "echo: hello").await;
    let total = server.messages(&source, "").await["total"].as_u64().expect("total");

    let (status, body) = server.post(&format!("/api/sessions/{source}/fork"), json!({"beforeIndex": total + 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_index");
    // Index 1 is the answer, not a turn's start.
    let (status, body) = server.post(&format!("/api/sessions/{source}/fork"), json!({"beforeIndex": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Without a body field: every committed message, and a title of its own.
    let (status, fork) = server.post(&format!("/api/sessions/{source}/fork"), json!({"title": "Other way"})).await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    assert_eq!(fork["title"], "Other way");
    assert_eq!(server.messages(&common::id_of(&fork), "").await["total"], total);

    // Last: once a token exists this server wants one from everyone.
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let request =
        server.client.post(server.url(&format!("/api/sessions/{source}/fork"))).bearer_auth(bob).json(&json!({}));
    let (status, body) = server.send(request).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn opencode_forks_before_a_message_id() {
    let server = TestServer::start().await;
    let source = server.new_session().await;
    server.run_prompt(&source, "echo: one").await;
    server.run_prompt(&source, "echo: two").await;
    let (status, listed) = server.get(&format!("/session/{source}/message")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let users: Vec<&str> = listed
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["info"]["role"] == "user")
        .map(|m| m["info"]["id"].as_str().expect("id"))
        .collect();
    assert_eq!(users.len(), 2, "{listed}");

    let (status, info) = server.post(&format!("/session/{source}/fork"), json!({"messageID": users[1]})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let forked = info["id"].as_str().expect("id").to_owned();
    let (_, copied) = server.get(&format!("/session/{forked}/message")).await;
    let roles: Vec<&str> =
        copied.as_array().expect("messages").iter().map(|m| m["info"]["role"].as_str().expect("role")).collect();
    assert_eq!(roles, ["user", "assistant"], "{copied}");

    let (status, body) = server.post(&format!("/session/{source}/fork"), json!({"messageID": "msg_nope"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn opencode_forks_before_the_turn_of_an_assistant_message_id() {
    let server = TestServer::start().await;
    let source = server.new_session().await;
    server.run_prompt(&source, "echo: one").await;
    // A turn of two steps: the read's call, then the answer after its result.
    server.run_prompt(&source, "tool: read {\"path\": \"README.md\"}").await;
    let (status, listed) = server.get(&format!("/session/{source}/message")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let roles_of = |list: &Value| -> Vec<String> {
        list.as_array()
            .expect("messages")
            .iter()
            .map(|m| m["info"]["role"].as_str().expect("role").to_owned())
            .collect()
    };
    assert_eq!(roles_of(&listed), ["user", "assistant", "user", "assistant", "assistant"], "{listed}");
    let id_at = |i: usize| listed[i]["info"]["id"].as_str().expect("id").to_owned();

    // OpenCode would keep the second prompt and the read's step; Spool keeps whole turns.
    for step in [3, 4] {
        let (status, info) = server.post(&format!("/session/{source}/fork"), json!({"messageID": id_at(step)})).await;
        assert_eq!(status, StatusCode::OK, "{info}");
        let forked = info["id"].as_str().expect("id");
        let (_, copied) = server.get(&format!("/session/{forked}/message")).await;
        assert_eq!(roles_of(&copied), ["user", "assistant"], "forked at step {step}: {copied}");
        assert!(copied[1]["parts"].to_string().contains("one"), "the first turn's answer: {copied}");
    }
    // The first turn's answer forks before the first prompt: an empty session.
    let (status, info) = server.post(&format!("/session/{source}/fork"), json!({"messageID": id_at(1)})).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let (_, copied) = server.get(&format!("/session/{}/message", info["id"].as_str().expect("id"))).await;
    assert_eq!(copied, json!([]));
    // An id of this session past its end names nothing.
    let last = id_at(4);
    let past = format!("{}0000000009", &last[..last.len() - 10]);
    let (status, body) = server.post(&format!("/session/{source}/fork"), json!({"messageID": past})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn a_fork_of_a_busy_session_stops_before_its_unanswered_tool_call() {
    let server = TestServer::start().await;
    let source = server.new_session().await;
    server.run_prompt(&source, "echo: first").await;
    let (status, _) = server.post(&format!("/api/sessions/{source}/facts"), json!({"text": "Tabs, not spaces"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (run, _) = server.park(&source, &format!("tool: write {}", json!({"path": "a.txt", "content": "x"}))).await;
    let parked = message_rows(&server.messages(&source, "").await);
    assert_eq!(parked.last().map(|(_, role, _)| role.as_str()), Some("assistant"), "the call waits: {parked:?}");

    let (status, fork) = server.post(&format!("/api/sessions/{source}/fork"), json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    let forked = common::id_of(&fork);
    let copied = message_rows(&server.messages(&forked, "").await);
    assert_eq!(copied, parked[..2].to_vec(), "only the settled first turn");
    let (_, memory) = server.get(&format!("/api/sessions/{forked}/memory")).await;
    assert_eq!(memory["facts"][0]["text"], "Tabs, not spaces", "{memory}");
    assert_eq!(server.get(&format!("/api/runs/{run}")).await.1["status"], "interrupted", "the source still waits");
    // The fork is a session of its own: it takes a prompt while the source waits.
    let answered = server.run_prompt(&forked, "echo: in the fork").await;
    assert_eq!(answered["status"], "completed", "{answered}");
}

#[tokio::test]
async fn a_fork_keeps_the_summary_only_when_it_covers_no_dropped_message() {
    let engine = spool_engine::EngineConfig { context_budget_tokens: 60, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let source = server.new_session().await;
    let long = "lorem ipsum dolor sit amet ".repeat(6);
    for i in 0..3 {
        server.run_prompt(&source, &format!("echo: round {i} {long}")).await;
    }
    let (_, memory) = server.get(&format!("/api/sessions/{source}/memory")).await;
    let cut = memory["summarizedBefore"].as_u64().expect("summarizedBefore");
    assert!(cut >= 2 && memory["summary"].is_string(), "the source was compacted: {memory}");

    let (_, whole) = server.post(&format!("/api/sessions/{source}/fork"), json!({})).await;
    let (_, kept) = server.get(&format!("/api/sessions/{}/memory", common::id_of(&whole))).await;
    assert_eq!(kept, memory, "a fork holding every summarized message keeps the summary");

    let (status, early) = server.post(&format!("/api/sessions/{source}/fork"), json!({"beforeIndex": 0})).await;
    assert_eq!(status, StatusCode::CREATED, "{early}");
    let (_, dropped) = server.get(&format!("/api/sessions/{}/memory", common::id_of(&early))).await;
    assert!(dropped["summary"].is_null(), "a summary of messages the fork lacks is not kept: {dropped}");
    assert_eq!(dropped["summarizedBefore"], 0);
}
