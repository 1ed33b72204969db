//! Per-user caps through a real server with two users' tokens: past the session
//! creation rate, the sessions not archived, the projects, or the prompts queued across
//! all of a user's sessions (by count and by bytes), a request gets a JSON 429 with the
//! cap's own code, nothing is created, and the other user is unaffected.

use crate::common;

use common::{TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;
use spool_engine::caps::UserCaps;

/// The server with `caps`, and a token for alice and for bob.
async fn server_with(caps: UserCaps) -> (TestServer, String, String) {
    let engine = EngineConfig { caps, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    (server, alice, bob)
}

async fn post(server: &TestServer, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    server.send(server.client.post(server.url(path)).bearer_auth(token).json(&body)).await
}

/// A project of the user's own, in a directory named after them.
async fn project(server: &TestServer, token: &str, name: &str) -> String {
    let dir = server.new_dir(name);
    let (status, body) = post(server, token, "/api/projects", json!({ "path": dir })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    id_of(&body)
}

async fn session(server: &TestServer, token: &str, project: &str) -> (StatusCode, Value) {
    post(server, token, "/api/sessions", json!({ "projectId": project, "title": "capped" })).await
}

fn refused(answer: &(StatusCode, Value), code: &str) {
    assert_eq!(
        (answer.0, answer.1["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some(code)),
        "{}",
        answer.1
    );
    assert!(answer.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", answer.1);
}

#[tokio::test]
async fn sessions_past_the_creation_rate_get_429_and_another_user_goes_on() {
    // A burst of 3, then one a minute: the fourth at once is refused.
    let (server, alice, bob) =
        server_with(UserCaps { session_burst: 3, sessions_per_minute: 1, ..UserCaps::default() }).await;
    let (alices, bobs) = (project(&server, &alice, "alice").await, project(&server, &bob, "bob").await);
    for _ in 0..3 {
        assert_eq!(session(&server, &alice, &alices).await.0, StatusCode::CREATED);
    }
    let answer = session(&server, &alice, &alices).await;
    refused(&answer, "too_many_sessions");
    assert!(answer.1["error"]["message"].as_str().is_some_and(|m| m.contains("try again in")), "{}", answer.1);
    assert_eq!(session(&server, &bob, &bobs).await.0, StatusCode::CREATED, "bob has a rate of his own");
    let (_, list) = server
        .send(server.client.get(server.url(&format!("/api/projects/{alices}/sessions"))).bearer_auth(&alice))
        .await;
    assert_eq!(list.as_array().map(Vec::len), Some(3), "the refused one was not created: {list}");
}

#[tokio::test]
async fn sessions_past_the_total_get_429_until_one_is_archived() {
    let (server, alice, bob) = server_with(UserCaps { max_sessions: 3, ..UserCaps::default() }).await;
    let (alices, bobs) = (project(&server, &alice, "alice").await, project(&server, &bob, "bob").await);
    let other = project(&server, &alice, "alice-too").await;
    let mut ids = Vec::new();
    for project in [&alices, &alices, &other] {
        let (status, body) = session(&server, &alice, project).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(id_of(&body));
    }
    // The cap counts every project of the user.
    refused(&session(&server, &alice, &alices).await, "session_limit");
    refused(&session(&server, &alice, &other).await, "session_limit");
    assert_eq!(session(&server, &bob, &bobs).await.0, StatusCode::CREATED, "bob is not capped by alice");

    let patch = |id: &str, archived: bool| {
        server
            .client
            .patch(server.url(&format!("/api/sessions/{id}")))
            .bearer_auth(&alice)
            .json(&json!({ "archived": archived }))
    };
    assert_eq!(server.send(patch(&ids[0], true)).await.0, StatusCode::OK);
    assert_eq!(session(&server, &alice, &alices).await.0, StatusCode::CREATED, "an archived one makes room");
    // Taking one out of the archive counts like creating one.
    refused(&server.send(patch(&ids[0], false)).await, "session_limit");
}

#[tokio::test]
async fn projects_past_the_cap_get_429() {
    let (server, alice, bob) = server_with(UserCaps { max_projects: 2, ..UserCaps::default() }).await;
    project(&server, &alice, "a1").await;
    project(&server, &alice, "a2").await;
    let dir = server.new_dir("a3");
    refused(&post(&server, &alice, "/api/projects", json!({ "path": dir })).await, "project_limit");
    project(&server, &bob, "b1").await;
    let (_, list) = server.send(server.client.get(server.url("/api/projects")).bearer_auth(&alice)).await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
}

/// A prompt that parks its run at an approval: the session stays busy, so later
/// prompts with `queue: true` wait in its queue.
const PARKS: &str = "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}";

async fn busy_session(server: &TestServer, token: &str, project: &str) -> String {
    let (status, body) = session(server, token, project).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = id_of(&body);
    let (status, body) = post(server, token, &format!("/api/sessions/{id}/prompt"), json!({ "text": PARKS })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    id
}

async fn queue(server: &TestServer, token: &str, session: &str, text: &str) -> (StatusCode, Value) {
    let body = json!({ "text": text, "queue": true });
    post(server, token, &format!("/api/sessions/{session}/prompt"), body).await
}

#[tokio::test]
async fn prompts_queued_across_sessions_are_capped_by_count_and_bytes() {
    let caps = UserCaps { max_queued: 3, max_queued_bytes: 100, ..UserCaps::default() };
    let (server, alice, bob) = server_with(caps).await;
    let alices = project(&server, &alice, "alice").await;
    let (one, two) = (busy_session(&server, &alice, &alices).await, busy_session(&server, &alice, &alices).await);
    let bobs = busy_session(&server, &bob, &project(&server, &bob, "bob").await).await;

    let sixty = "x".repeat(60);
    assert_eq!(queue(&server, &alice, &one, &sixty).await.0, StatusCode::ACCEPTED);
    // 60 + 60 bytes is past 100, though this session's own queue is nearly empty.
    refused(&queue(&server, &alice, &two, &sixty).await, "user_queue_full");
    assert_eq!(queue(&server, &bob, &bobs, &sixty).await.0, StatusCode::ACCEPTED, "bob's bytes are his own");
    assert_eq!(queue(&server, &alice, &two, "short").await.0, StatusCode::ACCEPTED);
    assert_eq!(queue(&server, &alice, &two, "short").await.0, StatusCode::ACCEPTED);
    // Three queued across two sessions: the count.
    refused(&queue(&server, &alice, &one, "short").await, "user_queue_full");
    assert_eq!(queue(&server, &bob, &bobs, "short").await.0, StatusCode::ACCEPTED, "bob's count is his own");
}
