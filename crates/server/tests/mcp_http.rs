//! A real MCP server over Streamable HTTP, through a real Spool server: the official
//! `@modelcontextprotocol/server-everything` (`streamableHttp`, on a free loopback
//! port), reached from an `[[mcp]]` entry with a `url`. server-everything checks no
//! token, so it sits behind a small loopback proxy that answers 401 unless the
//! request carries the bearer token and the configured header: a call that gets
//! through shows both reached the server. A token file that is missing, or a token the
//! server refuses, is a failed start whose reason names the file and never holds the
//! token; status shows the server's state, tools and connections throughout.

use crate::common;
use crate::mcp_lifecycle::wait_for_retry;
use crate::mcp_support::{config, decide, everything, serve};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use reqwest::StatusCode;
use serde_json::json;
use spool_engine::{SourceState, ToolScope, ToolSource};
use spool_mcp::McpSource;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOKEN: &str = "sk-spool-test-4c1d";

/// server-everything over Streamable HTTP on a free port; killed when dropped.
struct Everything {
    port: u16,
    _child: tokio::process::Child,
}

impl Everything {
    async fn start(index: &str) -> Everything {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        Everything::start_on(index, port).await
    }

    async fn start_on(index: &str, port: u16) -> Everything {
        let child = tokio::process::Command::new("node")
            .args([index, "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let deadline = tokio::time::Instant::now() + common::WAIT;
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "server-everything never listened on {port}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Everything { port, _child: child }
    }
}

/// What the proxy saw: each request's `Authorization` and `X-Team` headers.
type Seen = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

struct Proxy {
    upstream: String,
    client: reqwest::Client,
    seen: Seen,
}

/// Starts the checking proxy in front of `upstream`; its base URL and what it saw.
async fn proxy(upstream: u16) -> (String, Seen) {
    let seen = Seen::default();
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let state = Arc::new(Proxy { upstream: format!("http://127.0.0.1:{upstream}"), client, seen: seen.clone() });
    let app = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    // A function, not a closure over the request: that would hold a reference to its
    // body (not Sync) across the awaits below, and the handler would not be Send.
    fn header(request: &Request, name: &str) -> Option<String> {
        request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
    }
    let (auth, team) = (header(&request, "authorization"), header(&request, "x-team"));
    proxy.seen.lock().expect("seen").push((auth.clone(), team.clone()));
    if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) || team.as_deref() != Some("core") {
        return (StatusCode::UNAUTHORIZED, "a bearer token and X-Team are required").into_response();
    }
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.expect("request body");
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = proxy.client.request(parts.method, format!("{}{path}", proxy.upstream)).body(body);
    for (name, value) in &parts.headers {
        if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != axum::http::header::CONTENT_LENGTH && name != axum::http::header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    // Streamed: an SSE answer stays open while the server sends.
    response.body(Body::from_stream(answer.bytes_stream())).expect("response")
}

/// An `[[mcp]]` entry named `web` for `url`, as a source.
fn source(url: &str, token_file: &std::path::Path) -> Arc<McpSource> {
    let entry = json!({
        "name": "web", "url": url, "headers": {"X-Team": "core"}, "bearer_token_file": token_file,
    });
    Arc::new(McpSource::new(config(entry), Default::default(), None))
}

fn scope() -> ToolScope {
    ToolScope { session_id: spool_protocol::SessionId::new(), root: std::env::temp_dir() }
}

#[tokio::test]
async fn an_http_server_gets_the_token_and_headers_and_its_echo_runs_once_approved() {
    let Some(index) = everything() else { return };
    let everything = Everything::start(&index).await;
    let (base, seen) = proxy(everything.port).await;
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let url = format!("{base}/mcp?key=not-shown");
    let source = source(&url, &token_file);

    let before = source.status().expect("a status");
    assert_eq!((before.transport.as_str(), before.target.clone()), ("http", format!("{base}/mcp")));
    assert_eq!((before.state, before.connections), (SourceState::Idle, 0));

    let (server, session) = serve(source.clone()).await;
    let (run_id, approval) = server.park(&session, r#"tool: web_echo {"message":"over http"}"#).await;
    assert_eq!(approval["payload"]["source"]["server"], "web", "{approval}");
    decide(&server, &session, &approval, "once").await;
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");
    let got = server.tool_results(&session).await;
    assert_eq!(got, [("web_echo".to_owned(), "Echo: over http".to_owned(), false)]);

    let seen = seen.lock().expect("seen").clone();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(auth, team)| auth.as_deref() == Some(&format!("Bearer {TOKEN}")) && team.as_deref() == Some("core")),
        "every request carried the token and the header: {seen:?}"
    );
    let status = source.status().expect("a status");
    assert_eq!((status.state, status.connections), (SourceState::Ready, 1));
    let echo = status.tools.iter().find(|t| t.name == "web_echo").expect("echo listed");
    assert!(!echo.description.is_empty());
    assert!(!serde_json::to_string(&status.tools).expect("json").contains(TOKEN));
}

#[tokio::test]
async fn a_missing_or_refused_token_fails_the_start_naming_its_file_never_the_token() {
    let Some(index) = everything() else { return };
    let everything = Everything::start(&index).await;
    let (base, seen) = proxy(everything.port).await;
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("{base}/mcp");

    let missing = dir.path().join("missing-token");
    let source = source(&url, &missing);
    assert!(source.tools(&scope()).await.is_empty());
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, retry_at_ms } = status.state else { panic!("{status:?}") };
    assert!(reason.starts_with(&format!("bearer_token_file {} cannot be read", missing.display())), "{reason}");
    assert!(retry_at_ms.is_some(), "tried again later");
    assert!(seen.lock().expect("seen").is_empty(), "nothing sent without its token");

    let wrong = dir.path().join("wrong-token");
    std::fs::write(&wrong, "sk-wrong-token-9f2e").expect("token");
    let source = self::source(&url, &wrong);
    assert!(source.tools(&scope()).await.is_empty());
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, .. } = &status.state else { panic!("{status:?}") };
    assert!(reason.starts_with("initialize failed"), "{reason}");
    let shown = serde_json::to_string(&status).expect("json");
    assert!(!shown.contains("sk-wrong-token-9f2e"), "{shown}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen[0].0.as_deref(), Some("Bearer sk-wrong-token-9f2e"), "the refused token was sent: {seen:?}");
}

/// A server that cannot be reached is a tool error, and the connection counts as
/// ended: the session connects again, with the backoff of a crashed stdio server,
/// and is served once the server is back.
#[tokio::test]
async fn an_http_server_that_went_down_is_a_tool_error_then_serves_again_once_back() {
    let Some(index) = everything() else { return };
    let first = Everything::start(&index).await;
    let port = first.port;
    let entry = json!({"name": "web", "url": format!("http://127.0.0.1:{port}/mcp")});
    let source = Arc::new(McpSource::new(config(entry), Default::default(), None));
    let (server, session) = serve(source.clone()).await;
    let echo = |text: &str| format!(r#"tool: web_echo {{"message":"{text}"}}"#);

    let (run_id, approval) = server.park(&session, &echo("one")).await;
    decide(&server, &session, &approval, "once").await;
    server.wait_run(&run_id).await;

    drop(first);
    let (run_id, approval) = server.park(&session, &echo("two")).await;
    decide(&server, &session, &approval, "once").await;
    server.wait_run(&run_id).await;

    // The turn after the failed call found the connection lost and tried to connect
    // again while the server was still down: the next try waits for its backoff.
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, .. } = &status.state else { panic!("{status:?}") };
    assert!(reason.starts_with("initialize failed"), "{reason}");
    let _second = Everything::start_on(&index, port).await;
    wait_for_retry(&source).await;
    let (run_id, approval) = server.park(&session, &echo("three")).await;
    decide(&server, &session, &approval, "once").await;
    server.wait_run(&run_id).await;

    let got = server.tool_results(&session).await;
    assert_eq!(got[0], ("web_echo".to_owned(), "Echo: one".to_owned(), false));
    assert!(got[1].2 && got[1].1.starts_with("the server could not be reached: "), "down: {got:?}");
    assert_eq!(got[2], ("web_echo".to_owned(), "Echo: three".to_owned(), false), "back: {got:?}");
    let status = source.status().expect("a status");
    assert_eq!((status.state, status.connections), (SourceState::Ready, 1));
}
