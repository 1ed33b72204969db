//! The authorization matrix, generated from `GET /api/openapi.json`: every operation the
//! document secures answers 401 without credentials, and 404 `not_found` — with no side
//! effect — when another user names the caller's records; every operation it calls
//! public answers without credentials. A route added to the document without a line
//! in [`request_for`] fails here, so the matrix cannot fall behind the API.

mod common;

use common::{TestServer, id_of};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// Alice's records that Bob names.
struct Records {
    project: String,
    session: String,
    run: String,
    approval: String,
    /// A prompt Alice queued behind her parked run.
    message: String,
}

/// How Bob's request for one operation is made, and what it must answer.
enum Probe {
    /// The path (or body) names Alice's record: 404 `not_found`, nothing changes.
    Foreign { path: String, body: Option<Value> },
    /// Names nothing of Alice's (a list, a create of Bob's own, a stream of Bob's):
    /// whatever it answers, none of Alice's ids appear in it.
    Own { path: String, body: Option<Value> },
}

/// Bob's request for the documented operation `method path`, or `None` when the matrix
/// has no line for it (the test then fails, naming it).
fn request_for(method: &str, path: &str, r: &Records) -> Option<Probe> {
    let Records { project, session, run, approval, message } = r;
    let foreign = |path: String, body: Option<Value>| Some(Probe::Foreign { path, body });
    let own = |path: &str, body: Option<Value>| Some(Probe::Own { path: path.to_owned(), body });
    let decision = Some(json!({"decision": "once"}));
    let opencode_prompt = Some(json!({"parts": [{"type": "text", "text": "hi"}]}));
    match (method, path) {
        ("GET" | "DELETE", "/api/projects/{id}") => foreign(format!("/api/projects/{project}"), None),
        ("PATCH", "/api/projects/{id}") => foreign(format!("/api/projects/{project}"), Some(json!({"name": "mine"}))),
        ("GET", "/api/projects/{id}/sessions") => foreign(format!("/api/projects/{project}/sessions"), None),
        ("POST", "/api/sessions") => foreign("/api/sessions".into(), Some(json!({"projectId": project}))),
        ("GET" | "DELETE", "/api/sessions/{id}") => foreign(format!("/api/sessions/{session}"), None),
        ("PATCH", "/api/sessions/{id}") => {
            foreign(format!("/api/sessions/{session}"), Some(json!({"title": "x", "mode": "plan"})))
        }
        ("GET", "/api/sessions/{id}/messages") => foreign(format!("/api/sessions/{session}/messages"), None),
        ("GET", "/api/sessions/{id}/runs") => foreign(format!("/api/sessions/{session}/runs"), None),
        // Alice's session is titled from her `tool: write` prompt and holds its text.
        ("GET", "/api/sessions/search") => own("/api/sessions/search?q=write", None),
        ("GET", "/api/sessions/{id}/memory") => foreign(format!("/api/sessions/{session}/memory"), None),
        ("GET", "/api/sessions/{id}/permissions") => foreign(format!("/api/sessions/{session}/permissions"), None),
        ("POST", "/api/sessions/{id}/facts") => {
            foreign(format!("/api/sessions/{session}/facts"), Some(json!({"text": "bob was here"})))
        }
        ("POST", "/api/sessions/{id}/read") => {
            foreign(format!("/api/sessions/{session}/read"), Some(json!({"index": 0})))
        }
        ("POST", "/api/sessions/{id}/prompt") => {
            foreign(format!("/api/sessions/{session}/prompt"), Some(json!({"text": "hi", "queue": true})))
        }
        ("POST", "/api/sessions/{id}/abort") => foreign(format!("/api/sessions/{session}/abort"), None),
        ("POST", "/api/sessions/{id}/approvals/{approval}") => {
            foreign(format!("/api/sessions/{session}/approvals/{approval}"), decision)
        }
        ("GET", "/api/sessions/{id}/events") => foreign(format!("/api/sessions/{session}/events"), None),
        ("GET", "/api/runs/{id}") => foreign(format!("/api/runs/{run}"), None),
        ("GET", "/api/runs/{id}/events") => foreign(format!("/api/runs/{run}/events"), None),
        ("POST", "/api/runs/{id}/resume") => foreign(
            format!("/api/runs/{run}/resume"),
            Some(json!({"interruptId": approval, "decision": "approve", "idempotencyKey": "k"})),
        ),
        ("POST", "/api/gate/approvals/{id}") => foreign(format!("/api/gate/approvals/{approval}"), decision),
        ("POST", "/api/chat") => {
            foreign("/api/chat".into(), Some(json!({"sessionId": session, "text": "hi", "requestId": "r"})))
        }
        // A chat id that is a session id names that session; a name is per user.
        ("POST", "/api/ai-sdk/chat") => foreign(
            "/api/ai-sdk/chat".into(),
            Some(
                json!({"id": session, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
            ),
        ),
        ("GET", "/api/ai-sdk/chat/{id}/stream") => foreign(format!("/api/ai-sdk/chat/{session}/stream"), None),
        ("GET" | "DELETE", "/session/{id}") => foreign(format!("/session/{session}"), None),
        ("PATCH", "/session/{id}") => foreign(format!("/session/{session}"), Some(json!({"title": "x"}))),
        ("GET", "/session/{id}/message") => foreign(format!("/session/{session}/message"), None),
        ("GET", "/session/{id}/todo") => foreign(format!("/session/{session}/todo"), None),
        ("POST", "/session/{id}/message") => foreign(format!("/session/{session}/message"), opencode_prompt),
        ("POST", "/session/{id}/prompt_async") => foreign(format!("/session/{session}/prompt_async"), opencode_prompt),
        ("POST", "/session/{id}/abort") => foreign(format!("/session/{session}/abort"), None),
        ("POST", "/session/{id}/permissions/{permission}") => {
            foreign(format!("/session/{session}/permissions/{approval}"), Some(json!({"response": "once"})))
        }
        ("POST", "/permission/{id}/reply") => {
            foreign(format!("/permission/{approval}/reply"), Some(json!({"reply": "once"})))
        }
        ("DELETE", "/api/messages/{id}") => foreign(format!("/api/messages/{message}"), None),
        ("GET", "/api/projects" | "/api/gate/approvals" | "/session" | "/session/status" | "/permission")
        | ("GET", "/api/workspaces/events" | "/event" | "/api/ws" | "/api/streams") => own(path, None),
        ("POST", "/api/projects") => own(path, Some(json!({}))),
        ("POST", "/api/markdown") => own(path, Some(json!({"texts": ["**hi**"]}))),
        ("POST", "/session") => own(path, Some(json!({"title": "bob's"}))),
        ("POST", "/api/hub/events") => {
            own(path, Some(json!({"type": "message.deleted", "channel_id": session, "data": {"msg_id": "m"}})))
        }
        _ => None,
    }
}

/// Whether the operation needs credentials, as the document states it (its own
/// `security`, else the document's): public when no alternative is required (`[]`) or
/// one alternative is the empty requirement (`[{}]`).
fn secured(doc: &Value, operation: &Value) -> bool {
    let security = operation.get("security").unwrap_or(&doc["security"]);
    let alternatives = security.as_array().map(Vec::as_slice).unwrap_or_default();
    !alternatives.is_empty() && alternatives.iter().all(|a| a.as_object().is_some_and(|o| !o.is_empty()))
}

async fn send(
    server: &TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, String) {
    let method = Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = server
        .client
        .request(method, server.url(path))
        .header("x-opencode-directory", server.project_dir().to_str().expect("UTF-8 path"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let mut res = request.send().await.expect("request reaches the server");
    let status = res.status();
    let streaming = res.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut text = Vec::new();
    if streaming {
        // A stream's first event (its snapshot) is what it shows of the records; the
        // rest would never end.
        while !text.windows(2).any(|w| w == b"\n\n") {
            match tokio::time::timeout(common::WAIT, res.chunk()).await.expect("the stream's first event") {
                Ok(Some(chunk)) => text.extend_from_slice(&chunk),
                _ => break,
            }
        }
    } else {
        text = res.bytes().await.expect("body").to_vec();
    }
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// What Bob must not be able to change, read as Alice.
async fn alices_world(server: &TestServer, alice: &str, r: &Records) -> Value {
    let get = |path: String| async move {
        let (status, text) = send(server, "GET", &path, Some(alice), None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
        serde_json::from_str::<Value>(&text).expect("JSON")
    };
    let project = get(format!("/api/projects/{}", r.project)).await;
    let session = get(format!("/api/sessions/{}", r.session)).await;
    let run = get(format!("/api/runs/{}", r.run)).await;
    let memory = get(format!("/api/sessions/{}/memory", r.session)).await;
    json!({
        "project": {"name": project["name"], "updatedAt": project["updatedAt"]},
        "session": {"title": session["title"], "mode": session["mode"], "readIndex": session["readIndex"],
                    "updatedAt": session["updatedAt"], "total": session["state"]["total"],
                    "pending": session["state"]["pendingApprovals"], "queue": session["state"]["queue"]},
        "run": {"status": run["status"]},
        "memory": memory,
    })
}

#[tokio::test]
async fn every_secured_operation_wants_credentials_and_hides_other_users_records() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");

    // Alice's world: a project, a session, a run parked at an approval.
    let dir = server.project_dir();
    let (status, project) = send(&server, "POST", "/api/projects", Some(&alice), Some(&json!({"path": dir}))).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    let project = id_of(&serde_json::from_str(&project).expect("JSON"));
    let (_, session) = send(&server, "POST", "/api/sessions", Some(&alice), Some(&json!({"projectId": project}))).await;
    let session = id_of(&serde_json::from_str(&session).expect("JSON"));
    let prompt = json!({"text": "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}"});
    let (status, accepted) =
        send(&server, "POST", &format!("/api/sessions/{session}/prompt"), Some(&alice), Some(&prompt)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run = serde_json::from_str::<Value>(&accepted).expect("JSON")["runId"].as_str().expect("runId").to_owned();
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let approval = loop {
        let (_, detail) = send(&server, "GET", &format!("/api/sessions/{session}"), Some(&alice), None).await;
        let detail: Value = serde_json::from_str(&detail).expect("JSON");
        if let Some(a) = detail["state"]["pendingApprovals"].get(0) {
            break id_of(a);
        }
        assert!(tokio::time::Instant::now() < deadline, "no approval");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let later = json!({"text": "echo: later", "queue": true});
    let (status, queued) =
        send(&server, "POST", &format!("/api/sessions/{session}/prompt"), Some(&alice), Some(&later)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let queued: Value = serde_json::from_str(&queued).expect("JSON");
    assert_eq!(queued["queued"], true, "{queued}");
    let message = queued["messageId"].as_str().expect("messageId").to_owned();
    let records = Records { project, session, run, approval, message };
    let before = alices_world(&server, &alice, &records).await;

    let res = server.client.get(server.url("/api/openapi.json")).send().await.expect("document");
    let doc: Value = res.json().await.expect("JSON");
    let mut unlisted = Vec::new();
    let (mut secured_ops, mut foreign_ops) = (0, 0);
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let operation = &item[*method];
            let method = method.to_uppercase();
            let probe = request_for(&method, template, &records);
            if !secured(&doc, operation) {
                // Public: answers without credentials (never 401).
                let path = match &probe {
                    Some(Probe::Own { path, .. } | Probe::Foreign { path, .. }) => path.clone(),
                    None => template.replace("{path}", "index.html"),
                };
                let (status, text) = send(&server, &method, &path, None, None).await;
                assert_ne!(status, StatusCode::UNAUTHORIZED, "public {method} {template}: {text}");
                continue;
            }
            secured_ops += 1;
            let Some(probe) = probe else {
                unlisted.push(format!("{method} {template}"));
                continue;
            };
            let (path, body) = match &probe {
                Probe::Own { path, body } | Probe::Foreign { path, body } => (path.clone(), body.clone()),
            };
            // No credentials, and a token that names nobody: 401, JSON, before anything.
            for (token, code) in [(None, "unauthorized"), (Some("spool_not-a-real-token"), "invalid_token")] {
                let (status, text) = send(&server, &method, &path, token, body.as_ref()).await;
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {template} with {token:?}: {text}");
                let answer: Value =
                    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{method} {template}: {text}"));
                assert_eq!(answer["error"]["code"], code, "{method} {template}: {text}");
            }
            // Bob.
            let (status, text) = send(&server, &method, &path, Some(&bob), body.as_ref()).await;
            match probe {
                Probe::Foreign { .. } => {
                    foreign_ops += 1;
                    assert_eq!(status, StatusCode::NOT_FOUND, "{method} {template} as another user: {text}");
                    let answer: Value = serde_json::from_str(&text).expect("JSON");
                    assert_eq!(answer["error"]["code"], "not_found", "{method} {template}: {text}");
                }
                Probe::Own { .. } => {
                    assert!(!status.is_server_error(), "{method} {template}: {status} {text}");
                }
            }
            for id in [&records.project, &records.session, &records.run, &records.approval, &records.message] {
                // A 404 may repeat the id Bob sent; nothing else may show one.
                let echoed = status == StatusCode::NOT_FOUND;
                assert!(echoed || !text.contains(id.as_str()), "{method} {template} shows Alice's {id}: {text}");
            }
        }
    }
    eprintln!("{secured_ops} secured operations, {foreign_ops} naming another user's records");
    assert!(unlisted.is_empty(), "secured operations the matrix has no line for: {unlisted:?}");
    assert!(secured_ops >= 40 && foreign_ops >= 25, "{secured_ops} secured, {foreign_ops} naming records");

    // Nothing Bob did had an effect.
    assert!(!server.project_dir().join("a.txt").exists(), "Bob's approval ran the call");
    assert_eq!(alices_world(&server, &alice, &records).await, before);
}
