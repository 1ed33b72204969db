//! Traces, as an operator with an OpenTelemetry collector sees them: `spool serve
//! --otlp-endpoint URL` exports over OTLP/HTTP (protobuf) to a collector stub of this
//! test's own, and after a run that reads a file and a SIGTERM the collector holds:
//!
//! * one `run` span naming the run and its session;
//! * a `model_call` child of it per model call (as many as the run's stored assistant
//!   messages), naming the model, its tokens and how it stopped (the wire names: `toolUse`, `stop`);
//! * a `tool_call` child naming the tool, the call's id and its outcome;
//! * the prompt's `request` span carrying the response's `x-request-id`, with the
//!   "run accepted" event naming the run: one is found from the other.
//!
//! The spans are sent in batches; the last batch leaves when the server stops, which
//! is what the SIGTERM here proves (the default batch delay is 5 s, longer than the
//! test lasts).

use crate::common;

use axum::body::Bytes;
use common::{WAIT, call, serve, wait_for};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Every span the stub collector was sent, in arrival order.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<Span>>>);

/// An OTLP/HTTP collector on a loopback port: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`; anything it cannot decode is a 400 (and the test fails
/// for want of spans).
async fn collector() -> (String, Collected) {
    let collected = Collected::default();
    let into = collected.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let into = into.clone();
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                };
                let spans = request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
                into.0.lock().expect("spans").extend(spans);
                // An empty ExportTraceServiceResponse: everything accepted.
                (axum::http::StatusCode::OK, Vec::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the collector");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("collector") });
    (url, collected)
}

/// The span's attribute `key` as a string (numbers as their decimal text).
fn attr(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_its_model_and_tool_calls_and_its_request_arrive_as_spans_at_the_collector() {
    let (endpoint, collected) = collector().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    std::fs::write(project_dir.join("notes.txt"), "traced\n").expect("a file to read");
    let data = dir.path().join("data");
    let (spool, base) =
        serve(&["--addr", "127.0.0.1:0", "--data-dir", data.to_str().expect("utf-8"), "--otlp-endpoint", &endpoint]);

    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let res = client
        .post(format!("{base}/api/sessions/{session}/prompt"))
        .json(&json!({"text": "tool: read {\"path\": \"notes.txt\"}"}))
        .send()
        .await
        .expect("prompt");
    assert_eq!(res.status(), reqwest::StatusCode::ACCEPTED);
    let request_id = res.headers()["x-request-id"].to_str().expect("ASCII").to_owned();
    let accepted: Value = res.json().await.expect("json");
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] == "completed").await;
    let messages = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    let messages = messages.as_array().or(messages["messages"].as_array()).expect("a message list").clone();
    let model_calls = messages.iter().filter(|m| m["role"] == "assistant").count();
    assert!(model_calls >= 2, "the run called the model for the tool call and for the answer: {messages:?}");
    spool.stop();

    let spans = collected.0.lock().expect("spans").clone();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let runs = named("run");
    assert_eq!(runs.len(), 1, "one run span: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let run_span = runs[0];
    assert_eq!(attr(run_span, "run").as_deref(), Some(run.as_str()));
    assert_eq!(attr(run_span, "session").as_deref(), Some(session.as_str()));

    let children =
        |name: &str| named(name).into_iter().filter(|s| s.parent_span_id == run_span.span_id).collect::<Vec<_>>();
    let models = children("model_call");
    assert_eq!(models.len(), model_calls, "a model_call under the run per assistant message");
    assert_eq!(named("model_call").len(), model_calls, "no model_call outside the run");
    for model in &models {
        assert_eq!(model.trace_id, run_span.trace_id, "one trace for the run");
        assert_eq!(attr(model, "model").as_deref(), Some("scripted"));
        assert!(attr(model, "stop_reason").is_some(), "how the call stopped: {model:?}");
    }
    let stops: Vec<String> = models.iter().filter_map(|m| attr(m, "stop_reason")).collect();
    assert!(stops.iter().any(|s| s == "toolUse") && stops.last().map(String::as_str) == Some("stop"), "{stops:?}");

    let tools = children("tool_call");
    assert_eq!(tools.len(), 1, "one tool call under the run");
    assert_eq!(attr(tools[0], "tool").as_deref(), Some("read"));
    assert_eq!(attr(tools[0], "outcome").as_deref(), Some("ok"));
    assert!(attr(tools[0], "call_id").is_some_and(|id| !id.is_empty()));

    let request = named("request")
        .into_iter()
        .find(|s| attr(s, "request_id").as_deref() == Some(request_id.as_str()))
        .expect("the prompt's request span, by the response's x-request-id");
    assert_eq!(attr(request, "method").as_deref(), Some("POST"));
    let names_run = request.events.iter().any(|e| {
        e.attributes.iter().any(|kv| {
            kv.key == "run"
                && kv.value.as_ref().and_then(|v| v.value.as_ref()) == Some(&AnyValue::StringValue(run.clone()))
        })
    });
    assert!(names_run, "the request span's events name the run it accepted: {:?}", request.events);
}

/// A write waits for a person: the run's first `run` span ends with the call `parked`;
/// the approval resumes the run in a second `run` span of the same run id, whose
/// `tool_call` says the person approved it and it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waits_for_approval_is_parked_in_one_run_span_and_approved_in_the_next() {
    let (endpoint, collected) = collector().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let data = dir.path().join("data");
    let (spool, base) =
        serve(&["--addr", "127.0.0.1:0", "--data-dir", data.to_str().expect("utf-8"), "--otlp-endpoint", &endpoint]);

    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let text = r#"tool: write {"path": "once.txt", "content": "approved\n"}"#;
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": text}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] == "interrupted").await;
    let detail = call(client.get(format!("{base}/api/sessions/{session}"))).await;
    let approval = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("a pending approval").to_owned();
    let url = format!("{base}/api/sessions/{session}/approvals/{approval}");
    call(client.post(&url).json(&json!({"decision": "once"}))).await;
    wait_for(&client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] == "completed").await;
    assert_eq!(std::fs::read_to_string(project_dir.join("once.txt")).expect("written"), "approved\n");
    spool.stop();

    let spans = collected.0.lock().expect("spans").clone();
    let runs: Vec<&Span> = spans.iter().filter(|s| s.name == "run").collect();
    assert_eq!(runs.len(), 2, "the run before and after the decision");
    assert!(runs.iter().all(|s| attr(s, "run").as_deref() == Some(run.as_str())), "both name the run");
    let tool_calls_of = |run_span: &Span| {
        spans.iter().filter(|s| s.name == "tool_call" && s.parent_span_id == run_span.span_id).collect::<Vec<_>>()
    };
    // Ended in order: the parked span first.
    let (before, after) =
        if runs[0].end_time_unix_nano <= runs[1].end_time_unix_nano { (runs[0], runs[1]) } else { (runs[1], runs[0]) };
    let parked = tool_calls_of(before);
    assert_eq!(parked.len(), 1);
    assert_eq!(attr(parked[0], "tool").as_deref(), Some("write"));
    assert_eq!(attr(parked[0], "outcome").as_deref(), Some("parked"));
    assert_eq!(attr(parked[0], "decision"), None, "nobody had decided yet");
    let ran = tool_calls_of(after);
    assert_eq!(ran.len(), 1);
    assert_eq!(attr(ran[0], "decision").as_deref(), Some("approved"));
    assert_eq!(attr(ran[0], "outcome").as_deref(), Some("ok"));
    assert_eq!(attr(ran[0], "call_id"), attr(parked[0], "call_id"), "the same call");
}
