//! The authorization matrix, generated from `GET /api/openapi.json`: every operation the
//! document secures answers 401 without credentials, and 404 `not_found` — with no side
//! effect — when another user names the caller's records; every operation it calls
//! public answers without credentials.
//!
//! No operation is listed here. The test walks the document's paths and methods and
//! builds each request from it: path parameters are filled from the records the test
//! creates for Alice, chosen by the parameter's name or the path segment before it
//! ([`fill_path`]); a JSON body is generated from the operation's request schema, its
//! required fields filled and any field that names a record set to Alice's ([`body`]).
//! An operation that names one of Alice's records must answer Bob 404; one that names
//! none (a list, a create of Bob's own, a stream of Bob's) may answer anything but a
//! server error, and must show none of Alice's ids. A route whose parameter or body
//! the walker cannot fill fails the test, naming it, so a new route is covered the
//! day it is documented or the test says why not.

use crate::common;

use common::{SseStream, TestServer, id_of};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};

const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// Alice's records that Bob names.
struct Records {
    project: String,
    session: String,
    run: String,
    approval: String,
    /// A prompt Alice queued behind her parked run.
    message: String,
    /// A dead delivery of one of her events (the outbox's, issue 41).
    delivery: String,
    /// Her browser's Web Push subscription (issue 41).
    subscription: String,
    /// A file she uploaded (issue 42).
    attachment: String,
}

impl Records {
    /// The record a path segment's collection holds (`/api/projects/{id}` → a project).
    fn in_collection(&self, segment: &str) -> Option<&str> {
        Some(match segment {
            "projects" => &self.project,
            // An AI SDK chat id that is a session id names that session.
            "sessions" | "session" | "chat" => &self.session,
            "runs" => &self.run,
            // Spool's approvals, the gate's, and OpenCode's permissions and questions are one record.
            "approvals" | "permissions" | "permission" | "question" => &self.approval,
            "messages" => &self.message,
            "deliveries" => &self.delivery,
            "subscriptions" => &self.subscription,
            // An upload (`DELETE /api/uploads/{id}`) is an attachment not sent yet.
            "attachments" | "uploads" => &self.attachment,
            _ => return None,
        })
    }

    /// The record a body field names, by the field's name in any dialect.
    fn named_by_field(&self, field: &str) -> Option<&str> {
        Some(match field {
            "projectId" | "project_id" => &self.project,
            "sessionId" | "session_id" | "sessionID" | "threadId" => &self.session,
            "interruptId" | "approvalId" | "permissionID" => &self.approval,
            _ => return None,
        })
    }

    fn all(&self) -> [&str; 8] {
        [
            &self.project,
            &self.session,
            &self.run,
            &self.approval,
            &self.message,
            &self.delivery,
            &self.subscription,
            &self.attachment,
        ]
    }
}

/// Values for plain fields and query parameters the schema does not pin down, by name:
/// what a client would send.
fn word_for(name: &str) -> Option<Value> {
    Some(match name {
        "text" => json!("hi"),
        "title" | "name" => json!("bob's"),
        // OpenCode's prompt parts: only text parts can be prompted.
        "type" => json!("text"),
        // An AI SDK UI message: a user's prompt.
        "role" => json!("user"),
        "idempotencyKey" | "requestId" => json!("matrix-key"),
        // Alice's session is titled from her `tool: write` prompt and holds its text:
        // a search must not find it for Bob.
        "q" | "search" => json!("write"),
        // The rule at index 0 of Alice's session (a delete of it names it this way).
        "tool" => json!("read"),
        "action" => json!("deny"),
        _ => return None,
    })
}

/// The request for one documented operation, as Bob sends it.
struct Probe {
    path: String,
    body: Option<Value>,
    /// Whether the path or the body names one of Alice's records.
    foreign: bool,
}

/// `template` with its parameters filled, and whether one of them is Alice's record.
/// `Err` names a parameter the walker has no value for.
fn fill_path(template: &str, r: &Records) -> Result<(String, bool), String> {
    let mut path = String::new();
    let (mut foreign, mut previous) = (false, "");
    for segment in template.split('/').skip(1) {
        path.push('/');
        let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
            path.push_str(segment);
            previous = segment;
            continue;
        };
        let record = match name {
            // A client tool call's result names the call by its approval.
            "approval" | "permission" | "approvalId" => Some(r.approval.as_str()),
            // AG-UI's re-attach names the run it follows.
            "runId" => Some(r.run.as_str()),
            "id" => r.in_collection(previous),
            // A place in a list of Alice's (her session's rules): the first, which her
            // session has; the `{id}` before it names the session.
            "index" => {
                path.push('0');
                continue;
            }
            // A configured MCP server's name: config, not a record of anyone's.
            "server" => {
                path.push_str("everything");
                continue;
            }
            // The UI's files.
            "path" => {
                path.push_str("index.html");
                continue;
            }
            _ => None,
        };
        let record = record.ok_or_else(|| format!("path parameter {{{name}}} after /{previous}"))?;
        path.push_str(record);
        foreign = true;
    }
    Ok((path, foreign))
}

/// The query string of the operation's required query parameters, from [`word_for`].
fn query(operation: &Value) -> Result<String, String> {
    let mut pairs = Vec::new();
    for parameter in operation["parameters"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if parameter["in"] != "query" || parameter["required"] != true {
            continue;
        }
        let name = parameter["name"].as_str().unwrap_or_default();
        let value = word_for(name).ok_or_else(|| format!("required query parameter {name}"))?;
        pairs.push(format!("{name}={}", value.as_str().unwrap_or_default()));
    }
    Ok(if pairs.is_empty() { String::new() } else { format!("?{}", pairs.join("&")) })
}

/// A JSON value for `schema`: an object gets its required fields, and the optional ones
/// that name a record or have a [`word_for`] value; a choice (`oneOf`) its first
/// alternative that is not `null`; an enum its first value; arrays one item. Sets
/// `foreign` when a field names one of Alice's records. `Err` names what it cannot make.
fn body(doc: &Value, schema: &Value, name: &str, r: &Records, foreign: &mut bool) -> Result<Value, String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let key = reference.strip_prefix("#/components/schemas/").ok_or_else(|| format!("reference {reference}"))?;
        let target = doc["components"]["schemas"].get(key).ok_or_else(|| format!("missing schema {key}"))?;
        return body(doc, target, name, r, foreign);
    }
    if let Some(record) = r.named_by_field(name) {
        *foreign = true;
        return Ok(json!(record));
    }
    if let Some(alternatives) = schema["oneOf"].as_array() {
        let first = alternatives.iter().find(|a| a["type"] != "null").ok_or_else(|| format!("{name}: only null"))?;
        return body(doc, first, name, r, foreign);
    }
    if let Some(value) = schema["enum"].get(0).or_else(|| schema.get("example")) {
        return Ok(value.clone());
    }
    // `["string", "null"]`: the first type that is not null.
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds.iter().find(|k| *k != "null").cloned().unwrap_or(Value::Null),
        kind => kind.clone(),
    };
    match kind.as_str() {
        Some("object") | None if schema["properties"].is_object() || kind == "object" => {
            let required: Vec<&str> =
                schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let mut object = Map::new();
            for (field, property) in schema["properties"].as_object().into_iter().flatten() {
                let wanted = required.contains(&field.as_str())
                    || r.named_by_field(field).is_some()
                    || word_for(field).is_some();
                if wanted {
                    object.insert(field.clone(), body(doc, property, field, r, foreign)?);
                }
            }
            Ok(Value::Object(object))
        }
        Some("array") => Ok(json!([body(doc, &schema["items"], name, r, foreign)?])),
        Some("string") => Ok(word_for(name).unwrap_or_else(|| json!("x"))),
        Some("integer" | "number") => Ok(json!(schema["minimum"].as_i64().unwrap_or(0))),
        Some("boolean") => Ok(json!(false)),
        _ => Err(format!("{name}: a schema the walker cannot fill: {schema}")),
    }
}

/// Bob's request for the documented operation `template` / `operation`.
fn probe_for(doc: &Value, template: &str, operation: &Value, r: &Records) -> Result<Probe, String> {
    let (path, mut foreign) = fill_path(template, r)?;
    let path = format!("{path}{}", query(operation)?);
    let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
    let body = if schema.is_null() {
        // An upload's body is raw bytes, which `send` makes up (see there).
        let raw = operation["requestBody"]["content"].get("application/octet-stream").is_some();
        if operation["requestBody"].is_object() && !raw {
            return Err("a request body that is not JSON".to_owned());
        }
        None
    } else {
        Some(body(doc, schema, "", r, &mut foreign)?)
    };
    Ok(Probe { path, body, foreign })
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
        .request(method.clone(), server.url(path))
        .header("x-opencode-directory", server.project_dir().to_str().expect("UTF-8 path"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    } else if method == Method::POST && path.starts_with("/api/uploads") {
        // The one route whose body is not JSON: a file's bytes.
        request = request.header("content-type", "application/octet-stream").body("bob's notes\n");
    }
    let res = request.send().await.expect("request reaches the server");
    let status = res.status();
    let streaming = res.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = if streaming {
        // A stream's first event (its snapshot) is what it shows of the records; the
        // rest would never end.
        let mut stream = SseStream::new(res);
        stream.next_event().await;
        stream.raw
    } else {
        res.bytes().await.expect("body").to_vec()
    };
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
                    "pending": session["state"]["pendingApprovals"], "queue": session["state"]["queue"],
                    "permissions": session["state"]["session"]["permissions"]},
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
    // A rule of her own (one that leaves her write asking), for Bob to try to delete.
    let rules = json!({"permissions": [{"tool": "read", "action": "deny"}]});
    let (status, _) = send(&server, "PATCH", &format!("/api/sessions/{session}"), Some(&alice), Some(&rules)).await;
    assert_eq!(status, StatusCode::OK);
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
    // A dead letter of hers: her session's first event sent to a webhook no node has.
    let delivery = {
        use spool_engine::store::prelude::*;
        let session: spool_protocol::SessionId = session.parse().expect("session id");
        let event = server.store.session_events(&session).await.expect("events").remove(0);
        server.store.fan_out(&event.id, &[("webhook:gone".into(), 0)], 0).await.expect("fan_out");
        let dead = Some(spool_engine::DeliveryStatus::Dead);
        loop {
            let found = server.store.list_deliveries(Some(&event.owner_id), dead, 1).await.expect("deliveries");
            if let Some(d) = found.first() {
                break d.id.to_string();
            }
            assert!(tokio::time::Instant::now() < deadline, "the delivery never died");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    // Her browser's push subscription (the store's: the API would need a reachable push service).
    let subscription = {
        use spool_engine::store::prelude::*;
        let owner = server.store.user_id("alice").await.expect("user").expect("alice");
        let subscription = spool_engine::store::PushSubscription {
            id: "psub_alice".into(),
            owner_id: owner,
            login_id: None,
            endpoint: "https://push.example/alice".into(),
            p256dh: "key".into(),
            auth: "auth".into(),
            user_agent: None,
            created_at: 1,
            last_ok_at: None,
            failures: 0,
        };
        server.store.save_push_subscription(&subscription).await.expect("save").id
    };
    // A file of hers.
    let attachment = {
        let upload = server
            .client
            .post(server.url("/api/uploads?name=notes.txt"))
            .bearer_auth(&alice)
            .header("content-type", "application/octet-stream")
            .body("alice's notes\n");
        let (status, file) = server.send(upload).await;
        assert_eq!(status, StatusCode::CREATED, "{file}");
        id_of(&file)
    };
    let records = Records { project, session, run, approval, message, delivery, subscription, attachment };
    let before = alices_world(&server, &alice, &records).await;

    let res = server.client.get(server.url("/api/openapi.json")).send().await.expect("document");
    let doc: Value = res.json().await.expect("JSON");
    let mut unfilled = Vec::new();
    let (mut secured_ops, mut foreign_ops) = (0, 0);
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let operation = &item[*method];
            let method = method.to_uppercase();
            let probe = probe_for(&doc, template, operation, &records);
            if !secured(&doc, operation) {
                // Public: answers without credentials (never 401).
                let path = probe.as_ref().map_or_else(|_| template.clone(), |p| p.path.clone());
                let (status, text) = send(&server, &method, &path, None, None).await;
                assert_ne!(status, StatusCode::UNAUTHORIZED, "public {method} {template}: {text}");
                continue;
            }
            secured_ops += 1;
            let Probe { path, body, foreign } = match probe {
                Ok(probe) => probe,
                Err(why) => {
                    unfilled.push(format!("{method} {template}: {why}"));
                    continue;
                }
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
            let sent = format!("{method} {path} {}", body.as_ref().map(Value::to_string).unwrap_or_default());
            if foreign {
                foreign_ops += 1;
                assert_eq!(status, StatusCode::NOT_FOUND, "{sent} as another user: {text}");
                let answer: Value = serde_json::from_str(&text).expect("JSON");
                assert_eq!(answer["error"]["code"], "not_found", "{sent}: {text}");
            } else {
                assert!(!status.is_server_error(), "{sent}: {status} {text}");
            }
            for id in records.all() {
                // A 404 may repeat the id Bob sent; nothing else may show one.
                let echoed = status == StatusCode::NOT_FOUND;
                assert!(echoed || !text.contains(id), "{sent} shows Alice's {id}: {text}");
            }
        }
    }
    eprintln!("{secured_ops} secured operations, {foreign_ops} naming another user's records");
    assert!(unfilled.is_empty(), "secured operations the walker cannot build a request for: {unfilled:#?}");
    assert!(secured_ops >= 49 && foreign_ops >= 35, "{secured_ops} secured, {foreign_ops} naming records");

    // Nothing Bob did had an effect.
    assert!(!server.project_dir().join("a.txt").exists(), "Bob's approval ran the call");
    assert_eq!(alices_world(&server, &alice, &records).await, before);
    let (status, notes) =
        send(&server, "GET", &format!("/api/attachments/{}", records.attachment), Some(&alice), None).await;
    assert_eq!((status, notes.as_str()), (StatusCode::OK, "alice's notes\n"), "Bob's delete removed her upload");
}

/// The walker refuses what it cannot fill instead of skipping it: a new collection, a
/// parameter it has no record for, a body schema it cannot make.
#[test]
fn a_route_the_walker_cannot_fill_is_named() {
    let r = Records {
        project: "prj_1".into(),
        session: "ses_1".into(),
        run: "run_1".into(),
        approval: "per_1".into(),
        message: "msg_1".into(),
        delivery: "dlv_1".into(),
        subscription: "psub_1".into(),
        attachment: "att_1".into(),
    };
    assert_eq!(
        fill_path("/api/sessions/{id}/approvals/{approval}", &r),
        Ok(("/api/sessions/ses_1/approvals/per_1".into(), true))
    );
    assert_eq!(fill_path("/api/projects", &r), Ok(("/api/projects".into(), false)));
    assert_eq!(fill_path("/api/widgets/{id}", &r), Err("path parameter {id} after /widgets".into()));
    assert!(fill_path("/api/sessions/{id}/rules/{slot}", &r).is_err());
    let doc = json!({"components": {"schemas": {"Odd": {"type": "object", "required": ["blob"], "properties": {"blob": {}}}}}});
    let mut foreign = false;
    assert!(body(&doc, &json!({"$ref": "#/components/schemas/Odd"}), "", &r, &mut foreign).is_err());
    let chat = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}, "sessionId": {"type": ["string", "null"]}, "note": {"type": "string"}}});
    assert_eq!(body(&doc, &chat, "", &r, &mut foreign), Ok(json!({"text": "hi", "sessionId": "ses_1"})));
    assert!(foreign, "a body naming Alice's session makes the probe foreign");
}
