//! The embedded web UI through the real server: `/` is the page, `/ui/…` its modules
//! and styles with the right types, a same-origin-only CSP and revalidation by ETag;
//! nothing outside `web/app` can be reached; the API keeps its JSON 404s; `POST
//! /api/markdown` renders answers in order and refuses batches over its limits.
//! (The page's behaviour is tested in a real browser by `web/tests`.)

use crate::common;

use common::TestServer;
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use serde_json::json;

async fn fetch(server: &TestServer, path: &str) -> reqwest::Response {
    server.client.get(server.url(path)).send().await.expect("request reaches the server")
}

#[tokio::test]
async fn the_page_and_its_modules_are_served_from_the_binary() {
    let server = TestServer::start().await;
    let page = fetch(&server, "/").await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(page.headers()[CACHE_CONTROL], "no-cache");
    let csp = page.headers()[CONTENT_SECURITY_POLICY].to_str().expect("ascii").to_owned();
    assert!(csp.contains("default-src 'self'") && csp.contains("connect-src 'self'"), "{csp}");
    let html = page.text().await.expect("body");
    assert!(html.contains(r#"<script type="module" src="/ui/js/main.js">"#), "{html}");

    // Every module and stylesheet the page names is there, with a type the browser runs.
    for (path, kind) in [
        ("/ui/js/main.js", "text/javascript; charset=utf-8"),
        ("/ui/js/store.js", "text/javascript; charset=utf-8"),
        ("/ui/css/base.css", "text/css; charset=utf-8"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let res = fetch(&server, path).await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert_eq!(res.headers()[CONTENT_TYPE], kind, "{path}");
    }
    let main = fetch(&server, "/ui/js/main.js").await.text().await.expect("body");
    for import in main.lines().filter_map(|l| l.split(" from './").nth(1)) {
        let file = import.trim_end_matches("';");
        let res = fetch(&server, &format!("/ui/js/{file}")).await;
        assert_eq!(res.status(), StatusCode::OK, "main.js imports {file}");
    }
}

#[tokio::test]
async fn the_service_worker_and_the_decision_page_have_paths_of_their_own() {
    // `/sw.js` at the root, so the worker's scope can be the whole site; `/d`, the page a
    // decision link opens. Both are embedded files with the page's headers.
    let server = TestServer::start().await;
    for (path, kind, marker) in [
        ("/sw.js", "text/javascript; charset=utf-8", "addEventListener('push'"),
        ("/d", "text/html; charset=utf-8", r#"<script type="module" src="/ui/js/decide.js">"#),
    ] {
        let res = fetch(&server, path).await;
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert_eq!(res.headers()[CONTENT_TYPE], kind, "{path}");
        assert_eq!(res.headers()[CACHE_CONTROL], "no-cache", "{path}");
        let csp = res.headers()[CONTENT_SECURITY_POLICY].to_str().expect("ascii").to_owned();
        assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"), "{path}: {csp}");
        let body = res.text().await.expect("body");
        assert!(body.contains(marker), "{path}: {body}");
    }
    for path in ["/ui/js/decide.js", "/ui/css/decide.css"] {
        assert_eq!(fetch(&server, path).await.status(), StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn an_unchanged_asset_revalidates_with_a_304() {
    let server = TestServer::start().await;
    let first = fetch(&server, "/ui/js/store.js").await;
    let etag = first.headers()[ETAG].clone();
    let again = server.client.get(server.url("/ui/js/store.js")).header(IF_NONE_MATCH, etag).send().await.expect("ok");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert!(again.bytes().await.expect("body").is_empty());
}

#[tokio::test]
async fn nothing_outside_the_ui_directory_is_reachable_and_api_404s_stay_json() {
    let server = TestServer::start().await;
    for path in
        ["/ui/../Cargo.toml", "/ui/%2e%2e/Cargo.toml", "/ui/js/nope.js", "/ui/tests/package.json", "/index.html"]
    {
        let res = fetch(&server, path).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
        let body: serde_json::Value = res.json().await.expect("json error body");
        assert_eq!(body["error"]["code"], "not_found", "{path}");
    }
    let (status, body) = server.get("/api/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test]
async fn markdown_renders_each_text_in_order_and_refuses_what_is_over_its_limits() {
    let server = TestServer::start().await;
    let texts = json!({"texts": ["# One", "*two* <b>raw</b>", "[x](javascript:alert(1))"]});
    let (status, body) = server.post("/api/markdown", texts).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["html"], json!(["<h1>One</h1>\n", "<p><em>two</em> &lt;b&gt;raw&lt;/b&gt;</p>\n", "<p>x</p>\n"]));

    let (status, body) = server.post("/api/markdown", json!({"texts": vec!["a"; 65]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("too_many_texts")), "{body}");
    let long = "a".repeat(256 * 1024 + 1);
    let (status, body) = server.post("/api/markdown", json!({"texts": ["fine", long]})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("text_too_large")),
        "{body}"
    );
    assert_eq!(body["error"]["message"], "texts[1] is over 256 KiB");
    let (status, body) = server.post("/api/markdown", json!({"texts": "not a list"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_body")), "{body}");
}
