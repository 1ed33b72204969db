//! A web page must not be able to drive a local Spool. Tried the way a page would:
//! requests that carry a rebound DNS name as `Host` (raw, because an HTTP client sets
//! `Host` from its URL), and the state changes a browser sends cross-site without a
//! preflight — `text/plain` and form bodies, a foreign `Origin`, `Sec-Fetch-Site:
//! cross-site` — on Spool's own and on the OpenCode routes. Each test then asks the API
//! whether anything was created or run. Also: a GET never registers a project.

use crate::common;

use common::{SseStream, TestOptions, TestServer, WAIT, id_of, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a raw request got back.
#[derive(Debug)]
struct Raw {
    status: u16,
    head: String,
    body: Value,
}

/// Sends `head` (request line and headers, no final blank line) plus `body` on a fresh
/// connection with `Connection: close`, and reads the whole answer.
async fn raw(addr: SocketAddr, head: &str, body: &str) -> Raw {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("{head}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    tcp.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer)).await.expect("answer in time").expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text:?}"));
    let rest =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.into() };
    let body = serde_json::from_str(&rest).unwrap_or(Value::String(rest));
    Raw { status, head: head.to_owned(), body }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

fn assert_refused(raw: &Raw, status: u16, code: &str, what: &str) {
    assert_eq!(raw.status, status, "{what}: {raw:?}");
    assert_eq!(raw.body["error"]["code"], code, "{what}: {raw:?}");
}

async fn project_paths(server: &TestServer) -> Vec<String> {
    let (status, projects) = server.get("/api/projects").await;
    assert_eq!(status, StatusCode::OK, "{projects}");
    projects.as_array().expect("list").iter().map(|p| p["path"].as_str().expect("path").to_owned()).collect()
}

async fn session_count(server: &TestServer, project: &str) -> usize {
    let (status, sessions) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(status, StatusCode::OK, "{sessions}");
    sessions.as_array().expect("list").len()
}

fn canonical(path: &std::path::Path) -> String {
    std::fs::canonicalize(path).expect("canonical").to_str().expect("utf-8").to_owned()
}

#[tokio::test]
async fn a_rebound_host_name_is_refused_on_every_route_while_auth_is_off() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let session = server.new_session().await;
    let port = server.addr.port();
    let elsewhere = canonical(&server.new_dir("elsewhere"));
    let dir = urlencode(&elsewhere);
    let evil = format!("rebind.attacker.example:{port}");
    let as_page = |method: &str, path: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}\r\nContent-Type: application/json")
    };
    let ws = format!(
        "GET /api/ws HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
    );
    let register = json!({ "path": elsewhere }).to_string();
    let prompt = json!({ "text": "tool: read {\"path\": \"README.md\"}" }).to_string();
    let parts = json!({ "parts": [{ "type": "text", "text": "echo: hi" }] }).to_string();
    let cases: Vec<(String, String)> = vec![
        (as_page("GET", "/api/projects"), String::new()),
        (as_page("POST", "/api/projects"), register),
        (as_page("POST", &format!("/api/sessions/{session}/prompt")), prompt),
        (as_page("GET", &format!("/api/sessions/{session}/events")), String::new()),
        (as_page("GET", "/api/workspaces/events"), String::new()),
        (ws, String::new()),
        (as_page("GET", "/"), String::new()),
        (as_page("GET", "/global/health"), String::new()),
        (as_page("GET", &format!("/session?directory={dir}")), String::new()),
        (as_page("POST", &format!("/session?directory={dir}")), "{}".into()),
        (as_page("POST", &format!("/session/{session}/prompt_async")), parts),
        (as_page("GET", &format!("/event?directory={dir}")), String::new()),
        (as_page("GET", "/api/no-such-route"), String::new()),
    ];
    for (head, body) in &cases {
        let answer = raw(server.addr, head, body).await;
        assert_refused(&answer, 403, "bad_host", head.lines().next().unwrap_or_default());
        assert!(answer.head.to_ascii_lowercase().contains("content-type: application/json"), "{answer:?}");
    }
    // An absolute request target names the host too (as HTTP/2's :authority does).
    let absolute = format!("GET http://{evil}/api/projects HTTP/1.1\r\nHost: 127.0.0.1:{port}");
    assert_refused(&raw(server.addr, &absolute, "").await, 403, "bad_host", "absolute-form target");

    // Nothing happened: no new project, no run in the session.
    assert_eq!(project_paths(&server).await, vec![canonical(&server.project_dir())]);
    assert_eq!(session_count(&server, &project).await, 1);
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert!(detail["state"]["activeRun"].is_null(), "{detail}");
    assert_eq!(server.messages(&session, "").await["messages"], json!([]));

    // Loopback names, with and without a port, in any case, are served; so is a request
    // that names no host at all (HTTP/1.0: not a browser).
    for host in [
        format!("127.0.0.1:{port}"),
        format!("LOCALHOST:{port}"),
        "localhost".into(),
        format!("[::1]:{port}"),
        "127.0.0.1".into(),
    ] {
        let answer = raw(server.addr, &format!("GET /api/projects HTTP/1.1\r\nHost: {host}"), "").await;
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
    }
    assert_eq!(raw(server.addr, "GET /api/projects HTTP/1.0", "").await.status, 200);
}

#[tokio::test]
async fn names_given_with_allowed_host_are_served_and_others_are_not() {
    let options = TestOptions {
        allowed_hosts: vec!["spool.example.com".into(), "proxy.example:8443".into()],
        ..TestOptions::default()
    };
    let server = TestServer::start_with(options).await;
    let get = |host: &str| format!("GET /api/projects HTTP/1.1\r\nHost: {host}");
    for host in ["spool.example.com", "Spool.Example.COM:443", "proxy.example:8443", "localhost:1"] {
        assert_eq!(raw(server.addr, &get(host), "").await.status, 200, "{host}");
    }
    for host in ["proxy.example:9999", "example.com", "spool.example.com.attacker.example"] {
        assert_refused(&raw(server.addr, &get(host), "").await, 403, "bad_host", host);
    }
}

#[tokio::test]
async fn with_auth_on_the_token_decides_not_the_host_name() {
    let server = TestServer::start().await;
    let (_, secret) = server.engine.auth().create_token("alice").await.expect("token");
    let head = |host: &str, token: Option<&str>| {
        let auth = token.map(|t| format!("\r\nAuthorization: Bearer {t}")).unwrap_or_default();
        format!("GET /api/projects HTTP/1.1\r\nHost: {host}{auth}")
    };
    // A rebound page has no token for its name: 401, and with the token (a client behind
    // a proxy under any name) it works.
    assert_refused(
        &raw(server.addr, &head("rebind.attacker.example", None), "").await,
        401,
        "unauthorized",
        "no token",
    );
    assert_eq!(raw(server.addr, &head("spool.internal:80", Some(&secret)), "").await.status, 200);
}

/// A request as a browser page on another origin sends it.
fn cross_site(server: &TestServer, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    server
        .client
        .request(method, server.url(path))
        .header("origin", "http://127.0.0.1:1")
        .header("sec-fetch-site", "same-site")
}

#[tokio::test]
async fn cross_site_simple_requests_change_nothing_on_any_route() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let session = server.new_session().await;
    let elsewhere = canonical(&server.new_dir("elsewhere"));
    let dir = urlencode(&elsewhere);
    use reqwest::Method as M;

    // What a form or a `text/plain` fetch sends, without an Origin (as if a browser
    // left it out): the body is not JSON, so it is refused before any handler reads it.
    let text = |method: M, path: &str, body: &str| {
        server.client.request(method, server.url(path)).header("content-type", "text/plain").body(body.to_owned())
    };
    let form = |path: &str, body: &str| {
        server
            .client
            .post(server.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
    };
    let parts = r#"{"parts":[{"type":"text","text":"echo: hi"}]}"#;
    let not_json = [
        text(M::POST, &format!("/session?directory={dir}"), "{}"),
        text(M::POST, &format!("/session/{session}/prompt_async"), parts),
        text(M::POST, &format!("/session/{session}/message"), parts),
        text(M::PATCH, &format!("/session/{session}"), r#"{"title":"pwned"}"#),
        form(&format!("/session?directory={dir}"), "title=pwned"),
        text(M::POST, "/api/projects", &json!({ "path": elsewhere }).to_string()),
        text(M::POST, &format!("/api/sessions/{session}/prompt"), r#"{"text":"echo: hi"}"#),
        form("/api/chat", "message=hi"),
    ];
    for request in not_json {
        let (status, body) = server.send(request).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        assert_eq!(body["error"]["code"], "unsupported_media_type");
    }

    // With the page's Origin and Sec-Fetch-Site: refused even with a JSON body, and
    // even without one (abort, delete: simple requests too).
    let json_body = |r: reqwest::RequestBuilder, body: Value| r.json(&body);
    let foreign = [
        json_body(cross_site(&server, M::POST, &format!("/session?directory={dir}")), json!({})),
        json_body(
            cross_site(&server, M::POST, &format!("/session/{session}/prompt_async")),
            serde_json::from_str(parts).expect("json"),
        ),
        cross_site(&server, M::POST, &format!("/session/{session}/abort")),
        cross_site(&server, M::DELETE, &format!("/session/{session}")),
        cross_site(&server, M::DELETE, &format!("/api/sessions/{session}")),
        json_body(cross_site(&server, M::POST, "/api/projects"), json!({ "path": elsewhere })),
        json_body(cross_site(&server, M::POST, "/api/login"), json!({ "token": "x" })),
        // Only Sec-Fetch-Site (a browser that leaves Origin out).
        server.client.post(server.url(&format!("/session/{session}/abort"))).header("sec-fetch-site", "cross-site"),
        // Only Origin, `null` (a sandboxed page).
        server.client.post(server.url(&format!("/session/{session}/abort"))).header("origin", "null"),
    ];
    for request in foreign {
        let (status, body) = server.send(request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"]["code"], "bad_origin");
    }

    // Nothing was created, changed, deleted or run.
    assert_eq!(project_paths(&server).await, vec![canonical(&server.project_dir())]);
    assert_eq!(session_count(&server, &project).await, 1);
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "the session is still there: {detail}");
    assert_ne!(detail["title"], "pwned");
    assert_eq!(server.messages(&session, "").await["messages"], json!([]));

    // This server's own page (same origin) and clients that are not browsers still work.
    let host = server.addr.to_string();
    let own = server
        .client
        .post(server.url(&format!("/session?directory={dir}")))
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .json(&json!({}));
    let (status, created) = server.send(own).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let (status, body) = server.send(server.client.post(server.url(&format!("/session/{session}/abort")))).await;
    assert_eq!((status, body), (StatusCode::OK, json!(true)));
    let (status, body) =
        server.post(&format!("/session/{session}/prompt_async"), serde_json::from_str(parts).expect("json")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    // The SDK's `session.create()` sends no body at all.
    let (status, body) = server.send(server.client.post(server.url(&format!("/session?directory={dir}")))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn with_auth_on_a_bearer_request_from_a_foreign_origin_is_refused_too() {
    let server = TestServer::start().await;
    let (_, secret) = server.engine.auth().create_token("alice").await.expect("token");
    let dir = server.project_dir();
    let request =
        cross_site(&server, reqwest::Method::POST, "/api/projects").bearer_auth(&secret).json(&json!({ "path": dir }));
    let (status, body) = server.send(request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "bad_origin");
    let request = server
        .client
        .post(server.url(&format!("/session?directory={}", urlencode(&canonical(&dir)))))
        .bearer_auth(&secret)
        .header("content-type", "text/plain")
        .body("{}");
    let (status, body) = server.send(request).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (_, projects) = server.send(server.client.get(server.url("/api/projects")).bearer_auth(&secret)).await;
    assert_eq!(projects, json!([]));
}

#[tokio::test]
async fn reading_a_directory_never_registers_it_and_a_write_does() {
    let server = TestServer::start().await;
    let dir = canonical(&server.new_dir("not-yet"));
    let q = urlencode(&dir);
    for path in [format!("/session?directory={q}"), format!("/permission?directory={q}")] {
        let (status, body) = server.get(&path).await;
        assert_eq!((status, body), (StatusCode::OK, json!([])), "{path}");
    }
    let (status, body) = server.get(&format!("/session/status?directory={q}")).await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
    let header = server.client.get(server.url("/session")).header("x-opencode-directory", urlencode(&dir));
    assert_eq!(server.send(header).await, (StatusCode::OK, json!([])));
    // A stream on the directory does not register it either, and it sees the session
    // that a write creates there later.
    let res = server.client.get(server.url(&format!("/event?directory={q}"))).send().await.expect("event stream");
    assert_eq!(res.status(), StatusCode::OK);
    let mut events = SseStream::new(res);
    let first = events.next_event().await.expect("server.connected");
    assert!(first.data.contains("server.connected"), "{first:?}");
    assert!(project_paths(&server).await.is_empty(), "reading registered a project");

    let (status, created) = server.post(&format!("/session?directory={q}"), json!({ "title": "first" })).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(project_paths(&server).await, vec![dir.clone()]);
    let id = id_of(&created);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = events.next_event().await.expect("stream open");
        if event.data.contains("session.created") && event.data.contains(&id) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session.created for {id}");
    }
    let (_, listed) = server.get(&format!("/session?directory={q}")).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}
