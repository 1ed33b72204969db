//! Sampling allowed (`sampling = true` in the `[[mcp]]` entry), with the real
//! `@modelcontextprotocol/server-everything` over stdio through a real Spool server:
//! its `trigger-sampling-request` tool asks Spool's model for a completion while the
//! call runs, and the session's own model answers with the server's system prompt and
//! message, offered no tools. The answer reaches the server's result with the model's
//! name and why it stopped; Spool's token limit cuts a long answer; what the request
//! used counts in the run's usage; and stopping the run ends the model's answer.
//! Refusals (sampling not allowed, no call in flight, images) are in `mcp_live` and the
//! handler's own tests.

use crate::common;
use crate::mcp_support::{allow, everything, everything_entry, offering, stdio_source};

use async_trait::async_trait;
use common::{ModelsOverride, Open, TestOptions, TestServer};
use futures::StreamExt;
use serde_json::{Value, json};
use spool_engine::{Model, ModelError, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The system prompt server-everything sends with its sampling request.
const SERVER_SYSTEM: &str = "You are a helpful test server.";

/// The scripted model as `rec`, keeping every request it was sent. Sampling requests
/// (those with the server's system prompt) are answered at their own pace, and it
/// notes when the latest one's stream was dropped (the answer ended or was cut off).
struct Recording {
    inner: ScriptedModel,
    sampling: ScriptedModel,
    seen: Mutex<Vec<ModelRequest>>,
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped, with the stream it rides along.
struct OnDrop(Arc<AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        "rec".into()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        self.seen.lock().expect("seen").push(request.clone());
        if request.system.as_deref() != Some(SERVER_SYSTEM) {
            return self.inner.stream(request).await;
        }
        self.dropped.store(false, Ordering::SeqCst);
        let guard = OnDrop(self.dropped.clone());
        let stream = self.sampling.stream(request).await?;
        Ok(stream
            .map(move |event| {
                let _ = &guard;
                event
            })
            .boxed())
    }
}

impl Recording {
    /// The sampling requests it was sent (those with the server's system prompt).
    fn sampled(&self) -> Vec<ModelRequest> {
        let seen = self.seen.lock().expect("seen");
        seen.iter().filter(|r| r.system.as_deref() == Some(SERVER_SYSTEM)).cloned().collect()
    }
}

/// A Spool server whose default model is `model` and whose sessions get
/// server-everything with sampling allowed; a session that may call its tools.
async fn start(index: &str, model: Arc<Recording>) -> (TestServer, String) {
    let mut entry = everything_entry(index);
    entry["sampling"] = json!(true);
    let models = Models::new(Arc::new(ScriptedModel::default())).with(model, None, true);
    let options = TestOptions { models: Some(ModelsOverride(models)), ..TestOptions::default() };
    let server = TestServer::start_with(offering(stdio_source(entry), options)).await;
    let session = server.new_session().await;
    allow(&server, &session, "everything_*").await;
    (server, session)
}

/// A recording model whose sampling answers pause `delay` between words.
fn recording(delay: Duration) -> Arc<Recording> {
    let sampling = ScriptedModel::new(delay);
    Arc::new(Recording { inner: ScriptedModel::default(), sampling, seen: Mutex::default(), dropped: Arc::default() })
}

fn sample_call(prompt: &str, max_tokens: u32) -> String {
    let args = json!({"prompt": prompt, "maxTokens": max_tokens});
    format!("tool: everything_trigger-sampling-request {args}")
}

/// The `CreateMessageResult` the server got, from its tool's result text.
async fn sampling_result(server: &TestServer, session: &str) -> Value {
    let results = server.tool_results(session).await;
    assert_eq!(results.len(), 1, "{results:?}");
    let (tool, text, is_error) = &results[0];
    assert_eq!(tool, "everything_trigger-sampling-request");
    assert!(!is_error, "{text}");
    let json = text.strip_prefix("LLM sampling result: \n").unwrap_or_else(|| panic!("the server's result: {text}"));
    serde_json::from_str(json).expect("the result as JSON")
}

#[tokio::test]
async fn an_allowed_sampling_request_is_answered_by_the_sessions_model() {
    let Some(index) = everything() else { return };
    let model = recording(Duration::ZERO);
    let (server, session) = start(&index, model.clone()).await;
    let run = server.run_prompt(&session, &sample_call("hello", 100)).await;
    assert_eq!(run["status"], "completed", "{run}");

    // The scripted model quotes what it is told: the server's message, word for word.
    let prompt = "Resource trigger-sampling-request context: hello";
    let result = sampling_result(&server, &session).await;
    let expected = json!({
        "role": "assistant",
        "content": {"type": "text", "text": format!("You said: \"{prompt}\"")},
        "model": "rec",
        "stopReason": "endTurn",
    });
    assert_eq!(result, expected);

    let sampled = model.sampled();
    assert_eq!(sampled.len(), 1, "one request with the server's system prompt: {sampled:?}");
    let texts: Vec<String> = sampled[0].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, [prompt]);
    assert!(sampled[0].tools.is_empty(), "no tools offered: {:?}", sampled[0].tools);

    // The run's usage is its messages' plus the sampling request's: the scripted model
    // counts a quarter token a character of input (48 → 12) and a token a word (6).
    let page = server.messages(&session, "").await;
    let messages = page["messages"].as_array().expect("messages");
    let answers = messages.iter().filter(|m| m["role"] == "assistant");
    let (input, output) = answers.fold((0, 0), |(i, o), m| {
        (i + m["usage"]["input"].as_u64().expect("input"), o + m["usage"]["output"].as_u64().expect("output"))
    });
    assert_eq!(run["usage"]["input"].as_u64(), Some(input + 12), "{run}");
    assert_eq!(run["usage"]["output"].as_u64(), Some(output + 6), "{run}");
}

#[tokio::test]
async fn a_sampling_answer_stops_at_the_token_limit_it_asked_for() {
    let Some(index) = everything() else { return };
    let (server, session) = start(&index, recording(Duration::ZERO)).await;
    let run = server.run_prompt(&session, &sample_call("hello", 5)).await;
    assert_eq!(run["status"], "completed", "{run}");
    // Five tokens at four bytes each.
    let result = sampling_result(&server, &session).await;
    assert_eq!(result["content"]["text"], "You said: \"Resource ", "{result}");
    assert_eq!(result["stopReason"], "maxTokens", "{result}");
}

#[tokio::test]
async fn stopping_the_run_ends_the_models_answer_to_the_server() {
    let Some(index) = everything() else { return };
    // An answer of some forty words, one a second: longer than any wait of the test
    // unless the stop ends it.
    let model = recording(Duration::from_secs(1));
    let (server, session) = start(&index, model.clone()).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    let prompt = vec!["word"; 36].join(" ");
    let run = server.start_run(&session, &sample_call(&prompt, 4096)).await;
    live.frames_until(|f| f.event_type() == Some("tool_execution_start")).await;
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while model.sampled().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the server never asked the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!model.dropped.load(Ordering::SeqCst), "the answer is still streaming");

    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert!(status.is_success(), "{body}");
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while !model.dropped.load(Ordering::SeqCst) {
        assert!(tokio::time::Instant::now() < deadline, "the model's answer went on after the run stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
