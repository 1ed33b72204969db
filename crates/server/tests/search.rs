//! Session search (`GET /api/sessions/search`), a session's runs
//! (`GET /api/sessions/:id/runs`) and the scripted model's titles, through a real
//! server: what the sidebar's search box and the per-answer usage line read.

use crate::common;

use common::{TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::Value;

fn ids(page: &Value) -> Vec<String> {
    page["sessions"].as_array().expect("sessions").iter().map(id_of).collect()
}

/// Polls the session until its title is no longer the empty placeholder.
async fn title_of(server: &TestServer, session: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
        if detail["titleSet"] == true {
            return detail["title"].as_str().expect("title").to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "no title: {detail}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn search_pages_through_matching_sessions_newest_first_with_snippets() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let mut made = Vec::new();
    for i in 0..3 {
        let session = id_of(&server.create_session(&project, Some(&format!("Chat {i}"))).await);
        server.run_prompt(&session, &format!("echo: the Pelican number {i} flies")).await;
        made.push(session);
    }
    let quiet = id_of(&server.create_session(&project, Some("Nothing here")).await);
    server.run_prompt(&quiet, "echo: unrelated").await;

    let (status, first) = server.get("/api/sessions/search?q=pelican&limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(ids(&first), vec![made[2].clone(), made[1].clone()], "newest first");
    let hit = &first["sessions"][0];
    assert_eq!(hit["matched"], "message");
    assert!(hit["snippet"].as_str().expect("snippet").contains("Pelican number 2"), "{hit}");
    assert_eq!(hit["title"], "Chat 2");
    let cursor = first["nextCursor"].as_str().expect("a next page");

    let (status, rest) = server.get(&format!("/api/sessions/search?q=pelican&limit=2&cursor={cursor}")).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    assert_eq!(ids(&rest), vec![made[0].clone()]);
    assert!(rest["nextCursor"].is_null(), "{rest}");

    let (_, by_title) = server.get("/api/sessions/search?q=NOTHING%20HERE").await;
    assert_eq!(ids(&by_title), vec![quiet]);
    assert_eq!(by_title["sessions"][0]["matched"], "title");
}

#[tokio::test]
async fn a_message_hit_names_the_message_that_matched() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let session = id_of(&server.create_session(&project, Some("Long talk")).await);
    server.run_prompt(&session, "echo: first").await;
    server.run_prompt(&session, "echo: the Heron flies").await;

    // 0 and 1 are the first round; 2 is the prompt that first says it (3 echoes it).
    let (status, page) = server.get("/api/sessions/search?q=heron").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["sessions"][0]["messageIndex"], 2, "{page}");
    let (_, by_title) = server.get("/api/sessions/search?q=long%20talk").await;
    assert_eq!(by_title["sessions"][0]["matched"], "title");
    assert!(by_title["sessions"][0].get("messageIndex").is_none(), "no message matched: {by_title}");
}

#[tokio::test]
async fn search_limits_are_checked_with_clear_errors() {
    let server = TestServer::start().await;
    let long = "x".repeat(201);
    for (query, code) in [
        ("q=", "invalid_query"),
        ("q=%20%20", "invalid_query"),
        (&*format!("q={long}"), "invalid_query"),
        ("q=a&limit=0", "invalid_limit"),
        ("q=a&limit=101", "invalid_limit"),
        ("q=a&cursor=nope", "invalid_cursor"),
        ("q=a&cursor=12.run_x", "invalid_cursor"),
    ] {
        let (status, body) = server.get(&format!("/api/sessions/search?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"]["code"], code, "{query}: {body}");
    }
    let (status, body) = server.get(&format!("/api/sessions/search?q={}&limit=100", "x".repeat(200))).await;
    assert_eq!(status, StatusCode::OK, "the limits themselves are allowed: {body}");
}

#[tokio::test]
async fn a_sessions_runs_carry_each_answers_usage() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let first = server.run_prompt(&session, "echo: one two three").await;
    let second = server.run_prompt(&session, "echo: four").await;
    let (status, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    let runs = runs.as_array().expect("runs");
    assert_eq!(runs.iter().map(id_of).collect::<Vec<_>>(), vec![id_of(&first), id_of(&second)]);
    assert_eq!(runs[0]["usage"], first["usage"]);
    assert!(runs[0]["usage"]["output"].as_u64().expect("output") > 0, "{}", runs[0]);
}

#[tokio::test]
async fn scripted_titles_read_like_titles_not_json() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    server.run_prompt(&session, r#"tool: read {"path":"README.md"}"#).await;
    assert_eq!(title_of(&server, &session).await, "Read README.md");
}
