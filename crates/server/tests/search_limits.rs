//! Search limits through a real server with two users' tokens: one user's parallel
//! searches cannot take every search slot (their excess gets 429 `too_many_searches`
//! with `Retry-After`), another user's search is served while theirs are in flight,
//! and a search past the time limit ends with 503 `search_timeout`.
//!
//! "In flight" is made certain, not timed: the engine's test hold keeps alice's
//! searches waiting, with their slots taken, until the test lets them go.

use crate::common;

use common::{TestOptions, TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;
use spool_engine::search_slots::{SearchHold, SearchLimits};
use spool_protocol::UserId;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};

async fn search(server: &TestServer, token: &str, q: &str) -> (StatusCode, Option<String>, Value) {
    let request = server.client.get(server.url(&format!("/api/sessions/search?q={q}"))).bearer_auth(token).send();
    let res = tokio::time::timeout(WAIT, request).await.expect("an answer in time").expect("search request");
    let status = res.status();
    let retry = res.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (status, retry, res.json().await.expect("JSON body"))
}

/// `count` sessions of the user's own, each with a message that has `word` in it.
async fn fixture(server: &TestServer, token: &str, name: &str, word: &str, count: usize) {
    let dir = server.new_dir(name);
    let request = server.client.post(server.url("/api/projects")).bearer_auth(token).json(&json!({ "path": dir }));
    let (status, project) = server.send(request).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    for n in 0..count {
        let body = json!({ "projectId": id_of(&project), "title": format!("{name} {n}") });
        let (status, session) =
            server.send(server.client.post(server.url("/api/sessions")).bearer_auth(token).json(&body)).await;
        assert_eq!(status, StatusCode::CREATED, "{session}");
        let prompt = json!({ "text": format!("echo: {word} number {n} {}", "and more words ".repeat(20)) });
        let url = server.url(&format!("/api/sessions/{}/prompt", id_of(&session)));
        let (status, run) = server.send(server.client.post(url).bearer_auth(token).json(&prompt)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        let url = server.url(&format!("/api/runs/{}", run["runId"].as_str().expect("runId")));
        let deadline = tokio::time::Instant::now() + WAIT;
        while server.send(server.client.get(&url).bearer_auth(token)).await.1["status"] != "completed" {
            assert!(tokio::time::Instant::now() < deadline, "the run never completed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test]
async fn one_users_searches_get_429_past_their_limit_and_another_user_is_served_meanwhile() {
    // Alice's searches wait at the hold (slots taken) until the gate opens; each tells
    // the test it arrived. Bob's go straight through.
    let alice_id: Arc<OnceLock<UserId>> = Arc::default();
    let gate = Arc::new(Semaphore::new(0));
    let (arrived, mut arrivals) = mpsc::unbounded_channel();
    let hold = {
        let (alice_id, gate) = (alice_id.clone(), gate.clone());
        SearchHold(Arc::new(move |user: &UserId| {
            let held = alice_id.get() == Some(user);
            let (gate, arrived) = (gate.clone(), arrived.clone());
            Box::pin(async move {
                if held {
                    let _ = arrived.send(());
                    gate.acquire().await.expect("gate open").forget();
                }
            })
        }))
    };
    let search_limits = SearchLimits { per_user: 2, server: 3, hold: Some(hold), ..SearchLimits::default() };
    let engine = EngineConfig { search: search_limits, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let (alice_token, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    alice_id.set(alice_token.user_id.clone()).expect("set once");
    fixture(&server, &alice, "alice", "needle", 3).await;
    fixture(&server, &bob, "bob", "needle", 2).await;

    let server = Arc::new(server);
    let mut in_flight = Vec::new();
    for _ in 0..2 {
        let (server, alice) = (server.clone(), alice.clone());
        in_flight.push(tokio::spawn(async move { search(&server, &alice, "needle").await }));
    }
    for _ in 0..2 {
        tokio::time::timeout(WAIT, arrivals.recv()).await.expect("alice's search reaches the store").expect("open");
    }
    // Alice's two searches hold her slots: every further one is refused at once.
    for _ in 0..6 {
        let (status, retry, body) = search(&server, &alice, "needle").await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::TOO_MANY_REQUESTS, Some("too_many_searches")),
            "{body}"
        );
        assert_eq!(retry.as_deref(), Some("1"), "a 429 says when to try again");
    }
    // Bob is served, and alice's searches are still in flight when he is.
    let (status, _, body) = search(&server, &bob, "needle").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["sessions"].as_array().map(Vec::len), Some(2), "bob's own sessions: {body}");
    assert!(in_flight.iter().all(|h| !h.is_finished()), "alice's searches were in flight while bob was served");

    gate.add_permits(2);
    for handle in in_flight {
        let (status, _, body) = tokio::time::timeout(WAIT, handle).await.expect("in time").expect("task");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["sessions"].as_array().map(Vec::len), Some(3), "{body}");
    }
    // Her slots are back.
    gate.add_permits(1);
    let (status, _, body) = search(&server, &alice, "needle").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_search_past_the_time_limit_ends_with_a_clear_error() {
    // The knob: no time at all, so the search is over its limit however fast it is.
    let search_limits = SearchLimits { time_limit: Duration::ZERO, ..SearchLimits::default() };
    let engine = EngineConfig { search: search_limits, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    fixture(&server, &alice, "alice", "needle", 3).await;
    let (status, _, body) = search(&server, &alice, "needle").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("search_timeout")),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("stopped")), "{body}");
}
