//! Auth through a real server: browsers log in with an HttpOnly cookie; cookie writes
//! from another origin are refused; streams carry only their user's sessions. That every
//! secured route needs credentials and hides another user's records is checked for
//! every operation of the OpenAPI document in `auth_matrix.rs`.

use crate::common;

use common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn call(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = server.client.request(method, server.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.expect("request");
    let status = res.status();
    let text = res.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test]
async fn browsers_log_in_with_a_cookie_and_cross_site_writes_are_refused() {
    let server = TestServer::start().await;
    let (status, body) = server.get("/api/auth").await;
    assert_eq!((status, body["required"].clone()), (StatusCode::OK, json!(false)));
    let (_, secret) = server.engine.auth().create_token("carol").await.expect("token");
    let (_, body) = server.get("/api/auth").await;
    assert_eq!(body["required"], true);
    assert_eq!(body["user"], Value::Null);

    let login =
        server.client.post(server.url("/api/login")).json(&json!({"token": secret})).send().await.expect("login");
    assert_eq!(login.status(), StatusCode::OK);
    let cookie = login.headers()["set-cookie"].to_str().expect("cookie").to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().expect("pair").to_owned();

    let host = server.addr.to_string();
    let read = server.client.get(server.url("/api/projects")).header("cookie", &pair).send().await.expect("get");
    assert_eq!(read.status(), StatusCode::OK, "the cookie authenticates reads");
    let dir = server.project_dir();
    let same = server
        .client
        .post(server.url("/api/projects"))
        .header("cookie", &pair)
        .header("origin", format!("http://{host}"))
        .json(&json!({"path": dir}))
        .send()
        .await
        .expect("post");
    assert_eq!(same.status(), StatusCode::CREATED, "same-origin writes work");
    for origin in [Some("http://evil.example"), None] {
        let mut req =
            server.client.post(server.url("/api/projects")).header("cookie", &pair).json(&json!({"path": dir}));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let res = req.send().await.expect("post");
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "origin {origin:?}");
        let body: Value = res.json().await.expect("json");
        assert_eq!(body["error"]["code"], "bad_origin");
    }
    let bad =
        server.client.post(server.url("/api/login")).json(&json!({"token": "spool_nope"})).send().await.expect("login");
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    let out = server.client.post(server.url("/api/logout")).send().await.expect("logout");
    assert!(out.headers()["set-cookie"].to_str().expect("cookie").contains("Max-Age=0"));
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the WebSocket hub as the holder of `token` (a header, as a non-browser client).
async fn hub(server: &TestServer, token: &str, query: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{}/api/ws{query}", server.addr).into_client_request().expect("request");
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    let (ws, res) = tokio::time::timeout(common::WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect in time")
        .expect("handshake");
    assert_eq!(res.status(), 101);
    ws
}

/// Every text message the socket receives within `within`, as JSON.
async fn hub_messages(ws: &mut Ws, within: std::time::Duration) -> Vec<Value> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(deadline, ws.next()).await {
        if let Message::Text(text) = message {
            seen.push(serde_json::from_str(&text).expect("JSON"));
        }
    }
    seen
}

/// Every SSE event an open stream delivers within `within`, raw.
async fn sse_text(stream: &mut common::SseStream, within: std::time::Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match stream.next_event_within(left).await {
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return String::from_utf8_lossy(&stream.raw).into_owned(),
        }
    }
}

async fn open_sse(server: &TestServer, token: &str, path: &str) -> common::SseStream {
    let res = server.client.get(server.url(path)).bearer_auth(token).send().await.expect("open stream");
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    common::SseStream::new(res)
}

#[tokio::test]
async fn streams_carry_only_their_users_sessions() {
    use std::time::Duration;
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    use reqwest::Method as M;
    let dir = server.project_dir();
    let (_, project) = call(&server, M::POST, "/api/projects", Some(&alice), Some(json!({"path": dir}))).await;
    let project = id_of(&project);
    let (_, session) =
        call(&server, M::POST, "/api/sessions", Some(&alice), Some(json!({"projectId": project, "title": "t"}))).await;
    let session = id_of(&session);

    // Bob listens everywhere he can: every session on the hub, Alice's session by name,
    // the list stream and OpenCode's stream for Alice's directory.
    let mut bob_all = hub(&server, &bob, "").await;
    let mut bob_named = hub(&server, &bob, &format!("?channels={session}")).await;
    let mut bob_lists = open_sse(&server, &bob, "/api/workspaces/events").await;
    let encoded = common::urlencode(&dir.to_string_lossy());
    let mut bob_opencode = open_sse(&server, &bob, &format!("/event?directory={encoded}")).await;
    // Alice's own hub is the control: what Bob would see if the filter were missing.
    let mut alice_all = hub(&server, &alice, "").await;

    let named = hub_messages(&mut bob_named, Duration::from_millis(300)).await;
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(
        (named[0]["type"].as_str(), named[0]["data"]["code"].as_str()),
        (Some("channel.error"), Some("not_found"))
    );

    let (status, _) = call(
        &server,
        M::POST,
        &format!("/api/sessions/{session}/prompt"),
        Some(&alice),
        Some(json!({"text": "hello there"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, renamed) = call(
        &server,
        M::PATCH,
        &format!("/api/projects/{project}"),
        Some(&alice),
        Some(json!({"name": "secret plans"})),
    )
    .await;
    assert_eq!(renamed["name"], "secret plans");

    let mine = hub_messages(&mut alice_all, Duration::from_millis(1500)).await;
    assert!(
        mine.iter().any(|e| e["channel_id"] == session.as_str() && e["type"] == "agent.status"),
        "Alice follows her own run: {mine:?}"
    );
    let quiet = Duration::from_millis(300);
    let leaks: Vec<(&str, String)> = vec![
        ("hub, every session", format!("{:?}", hub_messages(&mut bob_all, quiet).await)),
        ("hub, Alice's channel", format!("{:?}", hub_messages(&mut bob_named, quiet).await)),
        ("list stream", sse_text(&mut bob_lists, quiet).await),
        ("OpenCode /event", sse_text(&mut bob_opencode, quiet).await),
    ];
    for (stream, seen) in leaks {
        for secret in [session.as_str(), project.as_str(), "secret plans", "hello there"] {
            assert!(!seen.contains(secret), "Bob's {stream} shows {secret:?}: {seen}");
        }
    }
}

#[tokio::test]
async fn the_hub_and_event_streams_authenticate_with_the_login_cookie() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let server = TestServer::start().await;
    let (_, secret) = server.engine.auth().create_token("dana").await.expect("token");
    let login =
        server.client.post(server.url("/api/login")).json(&json!({"token": secret})).send().await.expect("login");
    let cookie = login.headers()["set-cookie"].to_str().expect("cookie").split(';').next().expect("pair").to_owned();
    let session = {
        let (_, project) = call(
            &server,
            reqwest::Method::POST,
            "/api/projects",
            Some(&secret),
            Some(json!({"path": server.project_dir()})),
        )
        .await;
        let (_, session) = call(
            &server,
            reqwest::Method::POST,
            "/api/sessions",
            Some(&secret),
            Some(json!({"projectId": id_of(&project)})),
        )
        .await;
        id_of(&session)
    };

    // EventSource sends the cookie and nothing else.
    let stream = |cookie: Option<&str>| {
        let mut req = server.client.get(server.url(&format!("/api/sessions/{session}/events")));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.send()
    };
    assert_eq!(stream(Some(&cookie)).await.expect("stream").status(), StatusCode::OK);
    assert_eq!(stream(None).await.expect("stream").status(), StatusCode::UNAUTHORIZED);
    let forged = format!("{}=spool_forged", cookie.split('=').next().expect("name"));
    assert_eq!(stream(Some(&forged)).await.expect("stream").status(), StatusCode::UNAUTHORIZED);

    // A browser's WebSocket: the cookie and the page's origin.
    let own = format!("http://{}", server.addr);
    let socket = |cookie: Option<&str>, origin: &str| {
        let mut request = format!("ws://{}/api/ws", server.addr).into_client_request().expect("request");
        if let Some(c) = cookie {
            request.headers_mut().insert("cookie", c.parse().expect("header"));
        }
        request.headers_mut().insert("origin", origin.parse().expect("header"));
        tokio_tungstenite::connect_async(request)
    };
    assert!(socket(Some(&cookie), &own).await.is_ok(), "the login cookie opens the hub from our own page");
    for (cookie, origin, status) in [(None, own.as_str(), 401), (Some(cookie.as_str()), "http://evil.example", 403)] {
        match socket(cookie, origin).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), status, "{origin}"),
            other => panic!("cookie {cookie:?} from {origin} must be refused: {other:?}"),
        }
    }
}

/// Logs in with `token` and returns the `name=value` cookie pair.
async fn login(server: &TestServer, token: &str) -> String {
    let res = server.client.post(server.url("/api/login")).json(&json!({"token": token})).send().await.expect("login");
    assert_eq!(res.status(), StatusCode::OK);
    res.headers()["set-cookie"].to_str().expect("cookie").split(';').next().expect("pair").to_owned()
}

async fn get_with_cookie(server: &TestServer, path: &str, cookie: &str) -> StatusCode {
    server.client.get(server.url(path)).header("cookie", cookie).send().await.expect("get").status()
}

#[tokio::test]
async fn revoking_every_token_leaves_auth_on() {
    let server = TestServer::start().await;
    let (token, secret) = server.engine.auth().create_token("erin").await.expect("token");
    server.engine.auth().revoke_token(&token.id).await.expect("revoke");

    // Not one open route: the page is asked for a token, and every data route says 401.
    let (_, auth) = server.get("/api/auth").await;
    assert_eq!((auth["required"].clone(), auth["user"].clone()), (json!(true), Value::Null));
    for path in ["/api/projects", "/api/workspaces/events", "/session"] {
        let (status, body) = server.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        let (status, _) = call(&server, reqwest::Method::GET, path, Some(&secret), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with the revoked token");
    }
    let (status, _) = server.post("/api/projects", json!({"path": server.project_dir()})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_server_on_a_public_address_never_serves_with_auth_off() {
    let server = TestServer::start().await;
    use spool_engine::store::{Credentials, Nodes};
    // The server records its own (loopback) address as it starts serving; wait for that,
    // so it cannot overwrite the public one announced next.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.store.listeners().await.expect("listeners").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the server never recorded its address");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // As the binary does after binding 0.0.0.0 (a test can only reach loopback).
    server.engine.auth().announce_listener("0.0.0.0:4747".parse().expect("addr")).await.expect("announce");
    let (_, secret) = server.engine.auth().create_token("fay").await.expect("token");
    // The flag cleared under the running server, as a hand-edited store would.
    server.store.set_auth_enabled(false, 0).await.expect("clear flag");
    let refused = spool_engine::auth::disable_auth(&*server.store).await;
    assert!(refused.is_err(), "`spool auth disable` is refused while this server is public");

    let (status, _) = server.get("/api/projects").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "still closed, long after the flag's 1 s cache");
    let (status, _) = call(&server, reqwest::Method::GET, "/api/projects", Some(&secret), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_login_cookie_is_a_login_session_that_logout_and_revocation_end() {
    let server = TestServer::start().await;
    let (token, secret) = server.engine.auth().create_token("gail").await.expect("token");
    let cookie = login(&server, &secret).await;
    assert!(!cookie.contains(&secret), "the cookie is not the token: {cookie}");
    let name = cookie.split('=').next().expect("name");
    assert_eq!(get_with_cookie(&server, "/api/projects", &cookie).await, StatusCode::OK);
    // A raw token in the cookie is not a login.
    assert_eq!(get_with_cookie(&server, "/api/projects", &format!("{name}={secret}")).await, StatusCode::UNAUTHORIZED);

    // Logout ends the login session on the server: the old value, replayed, is refused.
    let out = server.client.post(server.url("/api/logout")).header("cookie", &cookie).send().await.expect("logout");
    assert_eq!(out.status(), StatusCode::OK);
    assert_eq!(get_with_cookie(&server, "/api/projects", &cookie).await, StatusCode::UNAUTHORIZED);
    let (_, auth) = call(&server, reqwest::Method::GET, "/api/auth", None, None).await;
    assert_eq!(auth["user"], Value::Null);

    // Revoking the token ends every login made with it.
    let (first, second) = (login(&server, &secret).await, login(&server, &secret).await);
    assert_ne!(first, second, "each login is a session of its own");
    assert_eq!(get_with_cookie(&server, "/api/projects", &first).await, StatusCode::OK);
    server.engine.auth().revoke_token(&token.id).await.expect("revoke");
    for cookie in [&first, &second] {
        assert_eq!(get_with_cookie(&server, "/api/projects", cookie).await, StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn logout_closes_that_login_sessions_streams_only() {
    let server = TestServer::start().await;
    let (_, secret) = server.engine.auth().create_token("hana").await.expect("token");
    let (leaving, staying) = (login(&server, &secret).await, login(&server, &secret).await);
    let open = |cookie: &str| server.client.get(server.url("/api/workspaces/events")).header("cookie", cookie).send();
    let mut leaving_stream = common::SseStream::new(open(&leaving).await.expect("stream"));
    let mut staying_stream = common::SseStream::new(open(&staying).await.expect("stream"));
    assert_eq!((leaving_stream.status, staying_stream.status), (StatusCode::OK, StatusCode::OK));
    leaving_stream.next_event().await.expect("lists.reset");
    staying_stream.next_event().await.expect("lists.reset");

    let out = server.client.post(server.url("/api/logout")).header("cookie", &leaving).send().await.expect("out");
    assert_eq!(out.status(), StatusCode::OK);
    leaving_stream.expect_end(std::time::Duration::from_secs(10)).await;
    // The other login's stream stays open: it still hears hana's next change, and that
    // change is the next thing on it.
    let dir = server.new_dir("after-logout");
    let (status, project) =
        call(&server, reqwest::Method::POST, "/api/projects", Some(&secret), Some(json!({"path": dir}))).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    let event = loop {
        let event = staying_stream.next_event().await.expect("the other login's stream stays open");
        if event.event.as_deref() != Some("heartbeat") {
            break event;
        }
    };
    let frame: Value = serde_json::from_str(&event.data).expect("a list frame");
    assert_eq!((frame["type"].as_str(), &frame["workspaceId"]), (Some("projects.changed"), &project["id"]), "{frame}");
}
