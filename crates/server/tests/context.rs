//! What model calls see and what runs account for, through a real server: confirmed
//! facts (from tool results and from a person, never from the model), compaction of
//! older turns past the budget with the full history kept, model-generated titles,
//! the models list, per-session model choice, and priced usage.

use crate::common;

use async_trait::async_trait;
use common::{ModelsOverride, Open, TestOptions, TestServer};
use reqwest::StatusCode;
use serde_json::json;
use spool_engine::{EngineConfig, Model, ModelError, ModelRequest, ModelStream, Models, Price};
use spool_model::ScriptedModel;
use std::sync::{Arc, Mutex};

/// The scripted model under another name, keeping every request it was sent.
struct Recording {
    name: String,
    inner: ScriptedModel,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        self.name.clone()
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.seen.lock().expect("lock").push(request.clone());
        self.inner.stream(request).await
    }
}

fn recording(name: &str) -> (Arc<Recording>, Arc<Mutex<Vec<ModelRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    (Arc::new(Recording { name: name.into(), inner: ScriptedModel::default(), seen: seen.clone() }), seen)
}

/// The chat requests (not the title or summary calls) the model saw.
fn chat_requests(seen: &Mutex<Vec<ModelRequest>>) -> Vec<ModelRequest> {
    seen.lock().expect("lock").iter().filter(|r| !r.tools.is_empty()).cloned().collect()
}

async fn server_with(model: Arc<Recording>, price: Option<Price>, engine: EngineConfig) -> TestServer {
    let models = Models::new(Arc::new(ScriptedModel::default())).with(model, price, true);
    TestServer::start_with(TestOptions { engine, models: Some(ModelsOverride(models)), ..TestOptions::default() }).await
}

#[tokio::test]
async fn confirmed_facts_come_from_tool_results_and_people_only() {
    let (model, seen) = recording("rec");
    let server = server_with(model, None, EngineConfig::default()).await;
    let session = server.new_session().await;
    server.run_prompt(&session, "tool: read {\"path\": \"README.md\"}").await;
    server.run_prompt(&session, "echo: I think the project is written in COBOL").await;
    let (status, memory) =
        server.post(&format!("/api/sessions/{session}/facts"), json!({"text": "The user prefers tabs"})).await;
    assert_eq!(status, StatusCode::CREATED, "{memory}");
    server.run_prompt(&session, "echo: next").await;

    let last = chat_requests(&seen).pop().expect("a chat request");
    let system = last.system.expect("system prompt");
    assert!(system.contains("Confirmed facts"), "{system}");
    assert!(system.contains("read README.md: # Test project"), "the tool result is a fact: {system}");
    assert!(system.contains("The user prefers tabs"), "{system}");
    assert!(!system.contains("COBOL"), "the model's own words are never facts: {system}");
    let (_, memory) = server.get(&format!("/api/sessions/{session}/memory")).await;
    let sources: Vec<&str> =
        memory["facts"].as_array().expect("facts").iter().filter_map(|f| f["source"].as_str()).collect();
    assert_eq!(sources, ["tool", "user"]);
    let (status, body) = server.post(&format!("/api/sessions/{session}/facts"), json!({"text": "  "})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid_fact");
}

#[tokio::test]
async fn past_the_budget_older_turns_are_summarized_and_history_keeps_everything() {
    let (model, seen) = recording("rec");
    let engine = EngineConfig { context_budget_tokens: 60, ..EngineConfig::default() };
    let server = server_with(model, None, engine).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    let long = "lorem ipsum dolor sit amet ".repeat(6);
    for i in 0..3 {
        server.run_prompt(&session, &format!("echo: round {i} {long}")).await;
    }
    let frames = stream.frames_until(|f| f.event_type() == Some("compaction_end")).await;
    assert!(frames.iter().any(|f| f.event_type() == Some("compaction_start")));
    let end = frames.last().expect("compaction_end");
    assert_eq!(end.json["event"]["success"], true, "{}", end.json);
    let cut = end.json["event"]["summarizedBefore"].as_u64().expect("summarizedBefore");
    assert!(cut >= 2, "{}", end.json);

    let (_, memory) = server.get(&format!("/api/sessions/{session}/memory")).await;
    assert!(memory["summary"].as_str().is_some_and(|s| s.contains("round 0")), "{memory}");
    // The next call carries the summary and only the turns after it.
    let last = chat_requests(&seen).pop().expect("chat request");
    assert!(last.system.as_deref().is_some_and(|s| s.contains("Summary of the")), "{:?}", last.system);
    assert!(last.messages.iter().all(|m| !m.text().contains("round 0")), "folded turns are not sent verbatim");
    // Nothing is lost from the store.
    let page = server.messages(&session, "?limit=500").await;
    assert_eq!(page["total"], 6);
    assert!(page["messages"][0]["content"][0]["text"].as_str().is_some_and(|t| t.contains("round 0")));
}

/// A run reads only what its model calls see: the turns after the summary. Reading the
/// whole history made every run cost memory and time in proportion to every message the
/// session ever had (issue 14, "memory per run"). Shown with a folded message that can
/// no longer be decoded: a run that read it would fail with `storage_error`.
#[tokio::test]
async fn a_run_never_reads_the_turns_the_summary_replaced() {
    let (model, _seen) = recording("rec");
    let engine = EngineConfig { context_budget_tokens: 60, ..EngineConfig::default() };
    let server = server_with(model, None, engine).await;
    let session = server.new_session().await;
    let long = "lorem ipsum dolor sit amet ".repeat(6);
    for i in 0..3 {
        server.run_prompt(&session, &format!("echo: round {i} {long}")).await;
    }
    let (_, memory) = server.get(&format!("/api/sessions/{session}/memory")).await;
    assert!(memory["summarizedBefore"].as_u64().is_some_and(|cut| cut >= 2), "{memory}");

    // The first message (round 0's prompt, folded into the summary) no longer decodes.
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", server.dir().join("data/spool.db").display()))
        .await
        .expect("open the store's file");
    let damaged = sqlx::query(
        "UPDATE parts SET data = '{\"not\": \"a text block\"}'
         WHERE message_id = (SELECT id FROM messages WHERE session_id = ? AND idx = 0)",
    )
    .bind(&session)
    .execute(&db)
    .await
    .expect("damage message 0");
    assert_eq!(damaged.rows_affected(), 1);
    db.close().await;
    let (status, _) = server.get(&format!("/api/sessions/{session}/messages?limit=500")).await;
    assert_ne!(status, StatusCode::OK, "the damaged message is read by the history endpoint");

    let run = server.run_prompt(&session, "echo: after the summary").await;
    assert_eq!(run["status"], "completed", "{run}");
}

#[tokio::test]
async fn the_title_is_generated_by_the_model_after_the_first_prompt() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    server.start_run(&session, "please fix the parser bug in main.rs today").await;
    let frames = stream.frames_until(|f| f.event_type() == Some("session_title")).await;
    let title = frames.last().expect("title frame").json["event"]["title"].clone();
    assert_eq!(title, "please fix the parser bug in", "the scripted model's deterministic title");
    let state =
        stream.frames_until(|f| f.kind == "session.state" && f.json["state"]["session"]["title"] == title).await;
    assert!(!state.is_empty());
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["title"], title);
}

#[tokio::test]
async fn models_are_listed_chosen_per_session_and_priced() {
    let server = TestServer::start().await;
    let (_, list) = server.get("/api/models").await;
    assert_eq!(list["default"], "scripted");
    assert_eq!(list["configured"], false, "with nothing configured the API says answers are scripted");

    let (model, _) = recording("fake:priced");
    let price = Price { input: 1_000_000.0, output: 2_000_000.0, ..Price::default() };
    let server = server_with(model, Some(price), EngineConfig::default()).await;
    let (_, list) = server.get("/api/models").await;
    assert_eq!(list["default"], "fake:priced");
    assert_eq!(list["configured"], true);
    assert_eq!(list["models"].as_array().map(Vec::len), Some(2));

    let session = server.new_session().await;
    let run = server.run_prompt(&session, "echo: one two three").await;
    // Scripted usage: input = chars/4, output = deltas; priced per million tokens.
    let (input, output) =
        (run["usage"]["input"].as_f64().expect("input"), run["usage"]["output"].as_f64().expect("output"));
    assert!(input > 0.0 && output == 3.0, "{run}");
    let cost = run["usage"]["cost"].as_f64().expect("cost");
    assert!((cost - (input * 1.0 + output * 2.0)).abs() < 1e-6, "{run}");

    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"model": "nope:x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "unknown_model");
    let (status, _) = server.patch(&format!("/api/sessions/{session}"), json!({"model": "scripted"})).await;
    assert_eq!(status, StatusCode::OK);
    let run = server.run_prompt(&session, "echo: cheap").await;
    assert_eq!(run["usage"]["cost"], 0.0, "the session now uses the unpriced scripted model");
    let page = server.messages(&session, "").await;
    let last = page["messages"].as_array().and_then(|m| m.last()).cloned().expect("message");
    assert_eq!(last["model"], "scripted");
}

#[tokio::test]
async fn a_real_provider_streams_a_run_to_completion() {
    use spool_test_support::{End, Fake, Reply, openai_delta, openai_finish, openai_sse};
    let body = openai_sse(&[
        openai_delta(serde_json::json!({"role": "assistant", "content": "Hel"})),
        openai_delta(serde_json::json!({"content": "lo wörld"})),
        openai_finish("stop"),
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}}),
    ]);
    let fake = Fake::always(Reply::Stream { pieces: vec![body.into_bytes()], end: End::Complete }).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let session = server.create_session(&server.default_project().await, Some("provider")).await;
    let session = common::id_of(&session);
    let run = server.run_prompt(&session, "say hello").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["usage"]["input"], 11);
    let page = server.messages(&session, "").await;
    assert_eq!(page["messages"][1]["content"][0]["text"], "Hello wörld");
    assert_eq!(page["messages"][1]["model"], "openai:fake-gpt");
}

#[tokio::test]
async fn bad_credentials_fail_the_run_with_a_clear_code_and_no_key() {
    const KEY: &str = "sk-live-abcdef0123456789";
    let body =
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error"}}}}"#);
    let fake =
        spool_test_support::Fake::always(spool_test_support::Reply::Status { status: 401, headers: vec![], body })
            .await;
    let server = common::provider_server(&fake, KEY).await;
    let session = common::id_of(&server.create_session(&server.default_project().await, Some("creds")).await);
    let run = server.run_prompt(&session, "hello").await;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"]["code"], "bad_credentials", "{run}");
    assert!(!run.to_string().contains(KEY), "the key never reaches the run record: {run}");
    let page = server.messages(&session, "").await;
    assert!(!page.to_string().contains(KEY), "nor the stored messages");
}
