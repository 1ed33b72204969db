//! Secrets never leave the process: a provider error that echoes the API key and an
//! environment secret, and a tool that fails printing a secret, show `[redacted]` in
//! the frames, the stored run and messages — and in the log, captured here from the
//! same `tracing` output an operator reads. Each test runs in a process of its own
//! (its secret is in that process's environment from the start), which owns the global
//! log subscriber; each checks the log for its own secret.

use crate::common;

use common::{Open, TestServer};
use reqwest::StatusCode;
use serde_json::json;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything logged so far at debug level and above, by every crate.
fn log() -> String {
    static LOG: OnceLock<LogBuffer> = OnceLock::new();
    let buffer = LOG.get_or_init(|| {
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        buffer
    });
    String::from_utf8_lossy(&buffer.0.lock().expect("log lock")).into_owned()
}

#[tokio::test]
async fn a_provider_error_echoing_the_key_and_an_env_secret_is_redacted_everywhere() {
    const KEY: &str = "sk-live-echoed-0123456789abcdef";
    const ENV_SECRET: &str = "hunter2-db-password-77aa";
    let test = "a_provider_error_echoing_the_key_and_an_env_secret_is_redacted_everywhere";
    if !common::in_own_process(module_path!(), test, &[("SPOOL_TEST_ECHO_DB_PASSWORD", ENV_SECRET)]) {
        return;
    }
    log();
    // A proxy in front of the provider that echoes what it was sent.
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY} (upstream said: password={ENV_SECRET})","type":"invalid_request_error"}}}}"#
    );
    let fake =
        spool_test_support::Fake::always(spool_test_support::Reply::Status { status: 401, headers: vec![], body })
            .await;
    let server = common::provider_server(&fake, KEY).await;
    let session = common::id_of(&server.create_session(&server.default_project().await, Some("echo")).await);
    let mut view = server.events(&session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let run = server.run_prompt(&session, "hello").await;
    assert_eq!((run["status"].as_str(), run["error"]["code"].as_str()), (Some("failed"), Some("bad_credentials")));
    let message = run["error"]["message"].as_str().expect("message");
    assert!(message.contains("Incorrect API key provided") && message.contains("[redacted]"), "{message}");
    let frames = view.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let wire: String = frames.iter().map(|f| f.json.to_string()).collect();
    assert!(wire.contains("[redacted]"), "the failure is shown, redacted: {wire}");
    let page = server.messages(&session, "").await.to_string();
    let log = log();
    assert!(log.contains("run failed"), "the failure is logged");
    for (place, text) in [("run", run.to_string()), ("frames", wire), ("messages", page), ("log", log)] {
        for secret in [KEY, ENV_SECRET] {
            assert!(!text.contains(secret), "{place} shows {secret}: {text}");
        }
    }
}

#[tokio::test]
async fn a_tool_failing_with_a_secret_in_its_output_keeps_it_out_of_the_log() {
    const SECRET: &str = "tok-tool-log-secret-31c4a9";
    let test = "a_tool_failing_with_a_secret_in_its_output_keeps_it_out_of_the_log";
    if !common::in_own_process(module_path!(), test, &[("SPOOL_TEST_LOGGED_TOKEN", SECRET)]) {
        return;
    }
    log();
    let server = TestServer::start().await;
    // Commands do not get the server's environment (the sandbox); the value reaches
    // the command's output through a project file instead.
    std::fs::write(server.project_dir().join("token.txt"), SECRET).expect("write");
    let session = server.new_session().await;
    let (status, _) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let prompt = "tool: bash {\"command\": \"echo leaked $(cat token.txt) >&2; exit 7\"}";
    let run = server.run_prompt(&session, prompt).await;
    assert_eq!(run["status"], "completed", "{run}");
    let page = server.messages(&session, "").await.to_string();
    assert!(page.contains("leaked [redacted]"), "the failure is shown, redacted: {page}");
    let log = log();
    assert!(log.contains(&session), "the run was logged at debug level");
    assert!(!log.contains(SECRET), "the log shows the secret");
    assert!(!page.contains(SECRET), "the messages show the secret");
}
