//! `GET /api/openapi.json` through a real server: the document is public, is OpenAPI
//! 3.1, names every route the server answers (and no route it does not), its `$ref`s
//! resolve, and its schemas match what the server sends.
//!
//! How "every route" is checked, both ways:
//! * each documented path and method is probed and must not hit the router's fallbacks
//!   (the JSON 404 `no route for …` or the 405 `method_not_allowed`), and every other
//!   method on a documented path must hit the 405 fallback;
//! * a fixed list of the routes a client relies on must all be documented, so a route
//!   served outside the document (a plain `.route()`) fails here.

use crate::common;

use common::TestServer;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Every route of the API, as a client sees it.
const KNOWN_ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/ui/{path}"),
    ("GET", "/sw.js"),
    ("GET", "/d"),
    ("GET", "/metrics"),
    ("GET", "/api/openapi.json"),
    ("GET", "/api/health"),
    ("GET", "/api/ready"),
    ("GET", "/api/models"),
    ("GET", "/api/auth"),
    ("POST", "/api/login"),
    ("POST", "/api/logout"),
    ("GET", "/api/projects"),
    ("POST", "/api/projects"),
    ("GET", "/api/projects/{id}"),
    ("PATCH", "/api/projects/{id}"),
    ("DELETE", "/api/projects/{id}"),
    ("GET", "/api/projects/{id}/sessions"),
    ("POST", "/api/sessions"),
    ("GET", "/api/sessions/{id}"),
    ("PATCH", "/api/sessions/{id}"),
    ("DELETE", "/api/sessions/{id}"),
    ("GET", "/api/sessions/{id}/messages"),
    ("GET", "/api/sessions/search"),
    ("GET", "/api/sessions/{id}/runs"),
    ("GET", "/api/sessions/{id}/memory"),
    ("GET", "/api/sessions/{id}/permissions"),
    ("DELETE", "/api/sessions/{id}/permissions/{index}"),
    ("POST", "/api/sessions/{id}/facts"),
    ("POST", "/api/sessions/{id}/fork"),
    ("GET", "/api/sessions/{id}/branches"),
    ("POST", "/api/sessions/{id}/branch"),
    ("GET", "/api/sessions/{id}/revert"),
    ("POST", "/api/sessions/{id}/revert"),
    ("POST", "/api/sessions/{id}/unrevert"),
    ("POST", "/api/sessions/{id}/steer"),
    ("GET", "/api/sessions/{id}/presence"),
    ("GET", "/api/webhooks/deliveries"),
    ("POST", "/api/webhooks/deliveries/{id}/replay"),
    ("GET", "/api/mcp"),
    ("PUT", "/api/sessions/{id}/mcp/{server}"),
    ("POST", "/api/mcp/{server}/retry"),
    ("POST", "/api/sessions/{id}/read"),
    ("POST", "/api/sessions/{id}/prompt"),
    ("POST", "/api/sessions/{id}/abort"),
    ("POST", "/api/sessions/{id}/queue/resume"),
    ("DELETE", "/api/messages/{id}"),
    ("POST", "/api/uploads"),
    ("DELETE", "/api/uploads/{id}"),
    ("GET", "/api/attachments/{id}"),
    ("POST", "/api/markdown"),
    ("POST", "/api/sessions/{id}/approvals/{approval}"),
    ("GET", "/api/sessions/{id}/events"),
    ("GET", "/api/workspaces/events"),
    ("GET", "/api/runs/{id}"),
    ("GET", "/api/runs/{id}/events"),
    ("POST", "/api/runs/{id}/resume"),
    ("POST", "/api/tool-calls/{approvalId}/result"),
    ("GET", "/api/gate/approvals"),
    ("POST", "/api/gate/approvals/{id}"),
    ("GET", "/api/push/key"),
    ("POST", "/api/push/subscriptions"),
    ("GET", "/api/push/subscriptions"),
    ("GET", "/api/push/subscriptions/{id}"),
    ("DELETE", "/api/push/subscriptions/{id}"),
    ("POST", "/api/push/subscriptions/{id}/test"),
    ("POST", "/api/decision-tokens/peek"),
    ("POST", "/api/decision-tokens/decide"),
    ("POST", "/api/chat"),
    ("POST", "/api/ai-sdk/chat"),
    ("GET", "/api/ai-sdk/chat/{id}/stream"),
    ("DELETE", "/api/ai-sdk/chat/{id}/stream"),
    ("POST", "/api/ag-ui"),
    ("GET", "/api/ag-ui/runs/{runId}/events"),
    ("GET", "/api/ws"),
    ("GET", "/api/streams"),
    ("POST", "/api/hub/events"),
    ("GET", "/global/health"),
    ("GET", "/session"),
    ("POST", "/session"),
    ("GET", "/session/status"),
    ("GET", "/session/{id}"),
    ("PATCH", "/session/{id}"),
    ("DELETE", "/session/{id}"),
    ("GET", "/session/{id}/message"),
    ("POST", "/session/{id}/message"),
    ("POST", "/session/{id}/prompt_async"),
    ("POST", "/session/{id}/abort"),
    ("GET", "/session/{id}/todo"),
    ("POST", "/session/{id}/fork"),
    ("POST", "/session/{id}/revert"),
    ("POST", "/session/{id}/unrevert"),
    ("POST", "/session/{id}/permissions/{permission}"),
    ("GET", "/permission"),
    ("POST", "/permission/{id}/reply"),
    ("GET", "/question"),
    ("POST", "/question/{id}/reply"),
    ("POST", "/question/{id}/reject"),
    ("GET", "/event"),
    ("GET", "/global/event"),
];

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

async fn document(server: &TestServer) -> Value {
    let res = server.client.get(server.url("/api/openapi.json")).send().await.expect("fetch the document");
    assert_eq!(res.status(), StatusCode::OK);
    let content_type = res.headers()["content-type"].to_str().expect("ASCII").to_owned();
    assert!(content_type.starts_with("application/json"), "content type {content_type}");
    res.json().await.expect("the document is JSON")
}

/// The documented operations as `(METHOD, path)`.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths is an object");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let item = item.as_object().expect("a path item is an object");
            METHODS.iter().filter(|m| item.contains_key(&m.to_lowercase())).map(move |m| (m.to_string(), path.clone()))
        })
        .collect()
}

/// `path` with each `{param}` replaced by a value of the right shape that names nothing
/// (a well-formed id of the right kind), or a real UI file for the asset route.
fn concrete(path: &str) -> String {
    let id = |prefix: &str| format!("{prefix}_00000000000000000000000000");
    let session = id("ses");
    let run = id("run");
    let approval = id("per");
    let project = id("prj");
    path.replace("/ui/{path}", "/ui/index.html")
        .replace("/api/projects/{id}", &format!("/api/projects/{project}"))
        .replace("/api/runs/{id}", &format!("/api/runs/{run}"))
        .replace("/api/messages/{id}", &format!("/api/messages/{}", id("msg")))
        .replace("/permission/{id}", &format!("/permission/{approval}"))
        .replace("/api/gate/approvals/{id}", &format!("/api/gate/approvals/{approval}"))
        .replace("{approval}", &approval)
        .replace("{permission}", &approval)
        .replace("{index}", "0")
        .replace("{server}", "everything")
        .replace("{id}", &session)
}

/// Sends `method path` (a JSON `{}` body with writes) and returns the status and the
/// start of the body; streams are not read to their end.
async fn probe(server: &TestServer, method: &str, path: &str) -> (StatusCode, Value) {
    let method = Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = server
        .client
        .request(method.clone(), server.url(path))
        // The OpenCode routes' directory: the test project rather than the test's cwd.
        .header("x-opencode-directory", server.project_dir().to_str().expect("UTF-8 path"));
    if method != Method::GET && method != Method::DELETE {
        request = request.json(&json!({}));
    }
    let res = request.send().await.expect("request reaches the server");
    let status = res.status();
    let is_json = res.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body = if is_json { res.json().await.expect("a JSON body") } else { Value::Null };
    (status, body)
}

/// True when the router itself answered: no route, or no such method on the route.
fn fallback(status: StatusCode, body: &Value) -> bool {
    let no_route = status == StatusCode::NOT_FOUND
        && body["error"]["message"].as_str().is_some_and(|m| m.starts_with("no route for"));
    no_route || (status == StatusCode::METHOD_NOT_ALLOWED && body["error"]["code"] == "method_not_allowed")
}

#[tokio::test]
async fn the_document_is_public_openapi_3_1() {
    let server = TestServer::start().await;
    // A token exists: every data route now needs one, the document does not.
    server.engine.auth().create_token("alice").await.expect("token");
    let (status, _) = server.get("/api/projects").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let doc = document(&server).await;
    let version = doc["openapi"].as_str().expect("an openapi version");
    assert!(version.starts_with("3.1."), "OpenAPI {version}");
    assert_eq!(doc["info"]["title"], "Spool");
    let schemes = doc["components"]["securitySchemes"].as_object().expect("security schemes");
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["cookie"]["in"], "cookie");
    assert_eq!(schemes["cookie"]["name"], "spool_login");
    // Public routes say so; the rest inherit the document's bearer-or-cookie rule.
    assert_eq!(doc["paths"]["/api/health"]["get"]["security"], json!([{}]));
    assert_eq!(doc["paths"]["/api/ready"]["get"]["security"], json!([{}]), "a load balancer has no token");
    assert_eq!(doc["security"], json!([{"bearer": []}, {"cookie": []}]));
}

#[tokio::test]
async fn every_known_route_is_documented_and_nothing_else() {
    let server = TestServer::start().await;
    let documented = operations(&document(&server).await);
    let known: BTreeSet<(String, String)> = KNOWN_ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    let missing: Vec<_> = known.difference(&documented).collect();
    assert!(missing.is_empty(), "served but not documented: {missing:?}");
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(unknown.is_empty(), "documented but not in this test's list (add them): {unknown:?}");
}

#[tokio::test]
async fn operation_ids_are_unique() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let mut seen = BTreeSet::new();
    for (method, path) in operations(&doc) {
        let id = doc["paths"][&path][method.to_lowercase()]["operationId"].as_str().expect("an operationId").to_owned();
        assert!(seen.insert(id.clone()), "operationId {id} twice ({method} {path})");
    }
    assert!(seen.contains("get_api_sessions_id_messages"), "{seen:?}");
}

#[tokio::test]
async fn the_server_answers_every_documented_operation_and_only_those() {
    let server = TestServer::start().await;
    let documented = operations(&document(&server).await);
    let paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    for path in paths {
        let url = concrete(path);
        for method in METHODS {
            let (status, body) = probe(&server, method, &url).await;
            if documented.contains(&(method.to_string(), path.clone())) {
                assert!(!fallback(status, &body), "{method} {url} is documented but not routed: {status} {body}");
                assert!(!status.is_server_error(), "{method} {url}: {status} {body}");
            } else {
                assert_eq!(
                    status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {url} is routed but not documented: {status} {body}"
                );
            }
        }
    }
}

/// Every `"$ref": "#/components/schemas/X"` in `value`.
fn refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                out.insert(r.clone());
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn every_reference_resolves() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let schemas = doc["components"]["schemas"].as_object().expect("component schemas");
    let mut found = BTreeSet::new();
    refs(&doc, &mut found);
    assert!(found.contains("#/components/schemas/ErrorBody"));
    for r in found {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("unexpected $ref {r}"));
        assert!(schemas.contains_key(name), "$ref {r} names no schema");
    }
}

/// Two dialects' bodies of one name once shared a component: OpenCode's revert was
/// documented with the native `{index}` (a client following the document got 400), and
/// its fork with `{beforeIndex, title}`. Each route's body names its own fields.
#[tokio::test]
async fn each_routes_body_is_its_own_where_dialects_share_a_name() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let fields = |path: &str| -> BTreeSet<String> {
        let schema = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
        // An optional body is `oneOf: [null, {$ref}]`.
        let named = schema["oneOf"].as_array().and_then(|one| one.iter().find_map(|s| s["$ref"].as_str()));
        let name = schema["$ref"].as_str().or(named).unwrap_or_else(|| panic!("{path}: a named body schema: {schema}"));
        let name = name.strip_prefix("#/components/schemas/").expect("a component");
        let properties = doc["components"]["schemas"][name]["properties"].as_object();
        properties.unwrap_or_else(|| panic!("{path}: {name} has properties")).keys().cloned().collect()
    };
    for (path, field) in [
        ("/session/{id}/revert", "messageID"),
        ("/session/{id}/fork", "messageID"),
        ("/api/sessions/{id}/revert", "index"),
        ("/api/sessions/{id}/fork", "beforeIndex"),
    ] {
        assert!(fields(path).contains(field), "{path} documents {:?}, not {field}", fields(path));
    }
}

/// Where the document states a limit or an optional body, the server agrees.
#[tokio::test]
async fn stated_limits_and_optional_bodies_hold() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let params = doc["paths"]["/api/sessions/{id}/messages"]["get"]["parameters"].as_array().expect("parameters");
    let limit = params.iter().find(|p| p["name"] == "limit").expect("a limit parameter");
    assert_eq!(limit["schema"]["minimum"], 1);
    assert_eq!(limit["schema"]["maximum"], spool_engine::MAX_PAGE);
    let session = server.new_session().await;
    for (limit, status) in [(0, 400), (1, 200), (spool_engine::MAX_PAGE, 200), (spool_engine::MAX_PAGE + 1, 400)] {
        let (got, body) = server.get(&format!("/api/sessions/{session}/messages?limit={limit}")).await;
        assert_eq!(got.as_u16(), status, "limit={limit}: {body}");
    }

    // OpenCode's create and patch bodies may be absent, and so `null`.
    assert!(doc["paths"]["/session"]["post"]["requestBody"]["required"] != json!(true));
    let request = server
        .client
        .post(server.url("/session"))
        .header("x-opencode-directory", server.project_dir().to_str().expect("UTF-8"));
    let (status, created) = server.send(request.header("content-type", "application/json").body("null")).await;
    assert_eq!(status, StatusCode::OK, "{created}");
}

/// The JSON the server sends has exactly the fields its schema names (camelCase), and
/// an error has the shared error body.
#[tokio::test]
async fn schemas_name_the_fields_the_server_sends() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let keys = |v: &Value| v.as_object().expect("an object").keys().cloned().collect::<BTreeSet<_>>();

    let (_, project) = server.get(&format!("/api/projects/{}", server.default_project().await)).await;
    let project_schema = schema("Project");
    assert_eq!(keys(&project), keys(&project_schema["properties"]), "Project: {project}");
    assert!(keys(&project).contains("createdAt"));

    let run_id = server.start_run(&server.new_session().await, "hello").await;
    let run = server.wait_run(&run_id).await;
    let run_schema = schema("Run");
    assert_eq!(keys(&run), keys(&run_schema["properties"]), "Run: {run}");
    for required in run_schema["required"].as_array().expect("required fields") {
        assert!(run.get(required.as_str().expect("a name")).is_some(), "Run lacks {required}");
    }

    let (status, error) = server.get("/api/runs/run_00000000000000000000000000").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let error_schema = schema("ErrorBody");
    assert_eq!(keys(&error), keys(&error_schema["properties"]));
    let responses = &doc["paths"]["/api/runs/{id}"]["get"]["responses"];
    assert_eq!(responses["404"]["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody");
}

/// Every route that decides an approval lists `resource_changed` among its 409s, the
/// error body documents the `approvalId` that comes with it, and an approval may be
/// `superseded`.
#[tokio::test]
async fn decision_routes_document_resource_changed() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    for path in [
        "/api/sessions/{id}/approvals/{approval}",
        "/api/runs/{id}/resume",
        "/session/{id}/permissions/{permission}",
        "/permission/{id}/reply",
        "/api/gate/approvals/{id}",
    ] {
        let conflict = &doc["paths"][path]["post"]["responses"]["409"]["description"];
        let text = conflict.as_str().unwrap_or_else(|| panic!("{path} documents a 409: {conflict}"));
        assert!(text.contains("`resource_changed`") && text.contains("`already_resolved`"), "{path}: {text}");
    }
    let detail = &doc["components"]["schemas"]["ErrorDetail"]["properties"];
    assert!(detail.get("approvalId").is_some(), "{detail}");
    let status = doc["components"]["schemas"]["ApprovalStatus"].to_string();
    assert!(status.contains("superseded"), "{status}");
}
