//! Web Push through a real server and a local push service (issue 41): the service
//! (`spool_test_support::push_service`) checks each push's VAPID signature and decrypts
//! its body with the subscription's private key, as a browser's push service and the
//! browser would; the decision token a push carries then decides its approval once,
//! through the same path as every other decision.

use crate::common;

use common::{TestOptions, TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::store::PushSubscription;
use spool_engine::store::prelude::*;
use spool_reach::push::{PushConfig, PushWhen, WebPush};
use spool_test_support::push_service::PushService;
use std::sync::Arc;

/// A server that pushes at once (no `away` delay) and may push to loopback.
async fn pushing_server() -> TestServer {
    let push = PushConfig {
        when: PushWhen::Always,
        allow_insecure_endpoints: true,
        contact: "mailto:tests@spool.invalid".into(),
        ..PushConfig::default()
    };
    TestServer::start_with(TestOptions { push, ..TestOptions::default() }).await
}

/// Subscribes a new "browser" of `service` through the API; returns its id and endpoint.
async fn subscribe(server: &TestServer, service: &PushService) -> (String, String) {
    let (status, key) = server.get("/api/push/key").await;
    assert_eq!(status, StatusCode::OK, "{key}");
    let browser = service.subscribe(key["publicKey"].as_str().expect("publicKey"));
    let (status, body) = server.post("/api/push/subscriptions", browser.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (id_of(&body), browser["endpoint"].as_str().expect("endpoint").to_owned())
}

/// A write that needs approval; its content is what must never leave in a push.
const SECRET: &str = "s3cret-content-7f3a";

fn write_prompt(path: &str) -> String {
    format!("tool: write {}", json!({"path": path, "content": SECRET}))
}

/// The same server's Web Push, for minting tokens a test needs (same store, same keys).
fn web_push(server: &TestServer) -> Arc<WebPush> {
    WebPush::new(server.store.clone(), PushConfig::default())
}

async fn decide(server: &TestServer, token: &str, decision: &str) -> (StatusCode, Value) {
    server.post("/api/decision-tokens/decide", json!({"token": token, "decision": decision})).await
}

#[tokio::test]
async fn an_approval_reaches_the_push_service_encrypted_and_signed() {
    let server = pushing_server().await;
    let service = PushService::start().await;
    let (_, endpoint) = subscribe(&server, &service).await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, &write_prompt("pushed.txt")).await;

    let pushes = service.wait_for(1, WAIT).await;
    let push = &pushes[0];
    assert_eq!(push.endpoint, endpoint);
    // Encrypted: the body on the wire is not the message.
    assert!(!String::from_utf8_lossy(&push.ciphertext).contains("approval"));
    assert_eq!(push.claims["aud"], service.origin.as_str(), "VAPID names the push service's origin");
    assert_eq!(push.claims["sub"], "mailto:tests@spool.invalid");
    assert_eq!(push.headers["urgency"], "high");
    assert_eq!(push.headers["topic"].len(), 32);
    let message = push.json();
    assert_eq!(message["v"], 1);
    assert_eq!(message["kind"], "approval");
    assert_eq!(message["approvalId"], approval["id"]);
    assert_eq!(message["sessionId"], session.as_str());
    assert_eq!(message["url"], format!("/#/s/{session}"));
    assert_eq!(message["actions"], json!(["once", "reject"]));
    assert!(message["title"].as_str().expect("title").contains("write"), "the title names the tool: {message}");
    assert!(message["token"].as_str().expect("a token").starts_with("v1."));
    let text = String::from_utf8(push.plaintext.clone()).expect("utf-8");
    assert!(!text.contains(SECRET), "no call arguments leave in a push: {text}");
    assert!(push.plaintext.len() <= 3 * 1024);
    assert!(service.refused().is_empty(), "{:?}", service.refused());
}

#[tokio::test]
async fn a_decision_token_decides_once() {
    let server = pushing_server().await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, &write_prompt("once.txt")).await;
    let message = service.wait_for(1, WAIT).await[0].json();
    let token = message["token"].as_str().expect("token").to_owned();

    let (status, peeked) = server.post("/api/decision-tokens/peek", json!({"token": token})).await;
    assert_eq!(status, StatusCode::OK, "{peeked}");
    assert_eq!((peeked["approvalId"].clone(), peeked["status"].clone()), (approval["id"].clone(), json!("pending")));
    assert_eq!(peeked["tool"], "write");

    // Two taps at once (two devices, or a double tap): one decides, the other is refused.
    let (a, b) = tokio::join!(decide(&server, &token, "once"), decide(&server, &token, "once"));
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{a:?} {b:?}");
    let refused = if a.0 == StatusCode::CONFLICT { a.1 } else { b.1 };
    assert_eq!(refused["error"]["code"], "token_used", "{refused}");
    let (status, again) = decide(&server, &token, "once").await;
    assert_eq!((status, again["error"]["code"].clone()), (StatusCode::CONFLICT, json!("token_used")));

    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let results = server.tool_results(&session).await;
    assert_eq!(results.iter().filter(|(tool, ..)| tool == "write").count(), 1, "one tool result: {results:?}");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("once.txt")).expect("written"), SECRET);

    // Another token for the same approval, decided after: the approval already was.
    let push = web_push(&server);
    let subscription = server.store.push_subscriptions(server.engine.local_user()).await.expect("list")[0].clone();
    let late = mint(&push, &approval, server.engine.local_user().as_str(), &subscription.id, i64::MAX).await;
    let (status, body) = decide(&server, &late, "reject").await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::CONFLICT, json!("already_resolved")), "{body}");
}

async fn mint(push: &WebPush, approval: &Value, user: &str, subscription: &str, expires: i64) -> String {
    let now = spool_protocol::time::now_ms();
    push.mint_token(approval["id"].as_str().expect("id"), user, &format!("push:{subscription}"), expires, now)
        .await
        .expect("mint")
}

#[tokio::test]
async fn another_users_token_is_refused() {
    let server = pushing_server().await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, &write_prompt("theirs.txt")).await;
    // Bob has a subscription of his own, and a token that names him for this approval
    // (signed with the server's key: only the approval's owner does not match).
    let bob = server.store.ensure_user("bob").await.expect("bob");
    let subscription = PushSubscription {
        id: "psub_bob".into(),
        owner_id: bob.clone(),
        login_id: None,
        endpoint: "https://push.example/bob".into(),
        p256dh: "x".into(),
        auth: "y".into(),
        user_agent: None,
        created_at: 1,
        last_ok_at: None,
        failures: 0,
    };
    server.store.save_push_subscription(&subscription).await.expect("save");
    let token = mint(&web_push(&server), &approval, bob.as_str(), "psub_bob", i64::MAX).await;
    let (status, body) = decide(&server, &token, "once").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = server.post("/api/decision-tokens/peek", json!({"token": token})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"].as_array().map(Vec::len), Some(1), "still pending");
}

#[tokio::test]
async fn forged_expired_and_revoked_tokens_are_refused() {
    let server = pushing_server().await;
    let service = PushService::start().await;
    let (subscription, _) = subscribe(&server, &service).await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, &write_prompt("refused.txt")).await;
    let push = web_push(&server);
    let user = server.engine.local_user().as_str().to_owned();

    let good = mint(&push, &approval, &user, &subscription, i64::MAX).await;
    let (payload_start, rest) = good.split_at(4);
    let forged = format!("{payload_start}{}{}", if rest.starts_with('e') { 'f' } else { 'e' }, &rest[1..]);
    for bad in [forged.as_str(), "v1.e30.AAAA", "not a token"] {
        let (status, body) = decide(&server, bad, "once").await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (StatusCode::UNAUTHORIZED, json!("invalid_token")),
            "{bad}"
        );
    }

    let past = spool_protocol::time::now_ms() - 1;
    let expired = mint(&push, &approval, &user, &subscription, past).await;
    let (status, body) = decide(&server, &expired, "once").await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::GONE, json!("token_expired")));

    // Unsubscribing revokes what that browser's notifications carry.
    let (status, _) = server.delete(&format!("/api/push/subscriptions/{subscription}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = decide(&server, &good, "once").await;
    assert_eq!((status, body["error"]["code"].clone()), (StatusCode::UNAUTHORIZED, json!("token_revoked")));

    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"].as_array().map(Vec::len), Some(1), "nothing was decided");
}

#[tokio::test]
async fn a_410_removes_the_subscription() {
    let server = pushing_server().await;
    let service = PushService::start().await;
    let (subscription, endpoint) = subscribe(&server, &service).await;
    let (status, listed) = server.get("/api/push/subscriptions").await;
    assert_eq!((status, listed["subscriptions"][0]["id"].clone()), (StatusCode::OK, json!(subscription)));

    let (status, tested) = server.post(&format!("/api/push/subscriptions/{subscription}/test"), json!({})).await;
    assert_eq!((status, tested["delivered"].clone()), (StatusCode::OK, json!(true)), "{tested}");
    assert_eq!(service.wait_for(1, WAIT).await[0].json()["kind"], "test");

    service.gone(&endpoint);
    let (_, tested) = server.post(&format!("/api/push/subscriptions/{subscription}/test"), json!({})).await;
    assert_eq!((tested["delivered"].clone(), tested["status"].clone()), (json!(false), json!(410)), "{tested}");
    let (status, _) = server.get(&format!("/api/push/subscriptions/{subscription}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a gone subscription is removed");
}

#[tokio::test]
async fn a_private_endpoint_is_refused() {
    // The default: https with a host name only, and names that resolve to public addresses.
    let server = TestServer::start().await;
    let service = PushService::start().await;
    let (_, key) = server.get("/api/push/key").await;
    let browser = service.subscribe(key["publicKey"].as_str().expect("publicKey"));
    let port = service.origin.rsplit(':').next().expect("port").to_owned();
    for endpoint in [
        browser["endpoint"].as_str().expect("endpoint").to_owned(),
        format!("https://127.0.0.1:{port}/push/x"),
        format!("https://[::1]:{port}/push/x"),
        "https://10.0.0.7/push/x".to_owned(),
        "ftp://push.example/x".to_owned(),
    ] {
        let body = json!({"endpoint": endpoint, "keys": browser["keys"]});
        let (status, answer) = server.post("/api/push/subscriptions", body).await;
        assert_eq!(
            (status, answer["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("invalid_endpoint")),
            "{endpoint}"
        );
    }
    // A name is taken, but one that resolves only to loopback reaches nothing.
    let body = json!({"endpoint": format!("https://localhost:{port}/push/x"), "keys": browser["keys"]});
    let (status, answer) = server.post("/api/push/subscriptions", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (_, tested) = server.post(&format!("/api/push/subscriptions/{}/test", id_of(&answer)), json!({})).await;
    assert_eq!(tested["delivered"], false, "{tested}");
    assert!(tested["error"].as_str().expect("error").contains("no public address"), "{tested}");
    assert!(service.received().is_empty() && service.refused().is_empty(), "nothing reached the service");
    // Keys that are not a P-256 point and a 16-byte secret are refused too.
    let body = json!({"endpoint": "https://push.example/x", "keys": {"p256dh": "AAAA", "auth": "AAAA"}});
    let (status, _) = server.post("/api/push/subscriptions", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn revoking_the_token_that_subscribed_removes_the_subscription() {
    let server = pushing_server().await;
    let service = PushService::start().await;
    let (token, secret) = server.engine.auth().create_token("carol").await.expect("token");
    let (_, key) = server.send(server.client.get(server.url("/api/push/key")).bearer_auth(&secret)).await;
    let browser = service.subscribe(key["publicKey"].as_str().expect("publicKey"));
    let request = server.client.post(server.url("/api/push/subscriptions")).bearer_auth(&secret).json(&browser);
    let (status, body) = server.send(request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = id_of(&body);
    assert!(server.store.get_push_subscription(&id).await.expect("get").is_some());

    server.engine.auth().revoke_token(&token.id).await.expect("revoke");
    assert_eq!(server.store.get_push_subscription(&id).await.expect("get"), None, "gone with its token");
}

// ---- `[push] when`: pushed only to someone away, and told when it was decided ----

/// A server that pushes under `when` after `delay_secs`, to loopback.
async fn server_pushing(when: PushWhen, delay_secs: u64) -> TestServer {
    let push = PushConfig { when, delay_secs, allow_insecure_endpoints: true, ..PushConfig::default() };
    TestServer::start_with(TestOptions { push, ..TestOptions::default() }).await
}

type Page = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A web page on `session` that can answer its approvals (the UI's `/api/streams`
/// socket, opened with `approvals`), shown or hidden as `visible` says; returned once
/// the server counts it.
async fn page(server: &TestServer, session: &str, visible: bool) -> Page {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let url = format!("ws://{}/api/streams", server.addr);
    let (mut ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    let open = json!({"op": "open", "id": "s1", "session": session, "approvals": true, "visible": visible});
    ws.send(Message::Text(open.to_string().into())).await.expect("open");
    loop {
        let message =
            tokio::time::timeout(WAIT, ws.next()).await.expect("a message in time").expect("open").expect("ok");
        if matches!(&message, Message::Text(text) if text.starts_with("s1\nevent: open")) {
            break;
        }
    }
    presence_until(server, session, |p| p["answerers"] == 1 && p["visible"] == u64::from(visible)).await;
    ws
}

/// `GET /api/sessions/{id}/presence`, asked until `done` holds (a socket's message or
/// its closing reaches the server a moment after it is sent).
async fn presence_until(server: &TestServer, session: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, presence) = server.get(&format!("/api/sessions/{session}/presence")).await;
        assert_eq!(status, StatusCode::OK, "{presence}");
        if done(&presence) {
            return presence;
        }
        assert!(tokio::time::Instant::now() < deadline, "presence still {presence} after {WAIT:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The push delivery of the event `kind` once it is finished (delivered, skipped or
/// dead), waiting out its delay and the dispatcher's poll.
async fn finished_push(server: &TestServer, kind: &str) -> spool_engine::Delivery {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = server.store.list_deliveries(None, None, 100).await.expect("deliveries");
        let row = rows.into_iter().find(|d| d.target.starts_with("push:") && d.event.kind.as_str() == kind);
        match row {
            Some(row) if row.status != spool_engine::DeliveryStatus::Pending => return row,
            row => assert!(tokio::time::Instant::now() < deadline, "the {kind} push is still {row:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Decides `approval` from the page (the session's approval route, not a push).
async fn decide_on_page(server: &TestServer, session: &str, approval: &Value) {
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(approval));
    let (status, body) = server.post(&path, json!({"decision": "once", "idempotencyKey": "page"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn kinds(service: &PushService) -> Vec<String> {
    service.received().iter().map(|p| p.json()["kind"].as_str().expect("kind").to_owned()).collect()
}

#[tokio::test]
async fn away_a_visible_page_that_can_answer_gets_no_push_nor_its_decision() {
    let server = server_pushing(PushWhen::Away, 1).await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let _page = page(&server, &session, true).await;
    let (_, approval) = server.park(&session, &write_prompt("seen.txt")).await;

    let asked = finished_push(&server, "approval.requested").await;
    assert_eq!(asked.status, spool_engine::DeliveryStatus::Skipped, "{asked:?}");
    assert_eq!(asked.last_error.as_deref(), Some("someone is watching the session"));
    assert!(asked.next_at >= asked.event.created_at + 1000, "it waited delay_secs: {asked:?}");

    // Answered on the page: the browser was never told of it, so not of its decision.
    decide_on_page(&server, &session, &approval).await;
    let decided = finished_push(&server, "approval.resolved").await;
    assert_eq!(decided.status, spool_engine::DeliveryStatus::Skipped, "{decided:?}");
    assert!(service.received().is_empty(), "nothing reached the browser: {:?}", kinds(&service));
}

#[tokio::test]
async fn away_a_hidden_page_gets_the_push_and_then_its_decision() {
    let server = server_pushing(PushWhen::Away, 1).await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let _page = page(&server, &session, false).await;
    let (_, approval) = server.park(&session, &write_prompt("hidden.txt")).await;

    let pushed = service.wait_for(1, WAIT).await[0].json();
    assert_eq!((pushed["kind"].clone(), pushed["approvalId"].clone()), (json!("approval"), approval["id"].clone()));
    let asked = finished_push(&server, "approval.requested").await;
    assert_eq!(asked.status, spool_engine::DeliveryStatus::Delivered);

    decide_on_page(&server, &session, &approval).await;
    let told = service.wait_for(2, WAIT).await[1].json();
    assert_eq!((told["kind"].clone(), told["body"].clone()), (json!("resolved"), json!("Approved")), "{told}");
    assert_eq!(told["approvalId"], approval["id"]);
    assert!(told.get("token").is_none(), "a decision carries no token: {told}");
}

#[tokio::test]
async fn away_a_page_that_closed_no_longer_holds_the_push_back() {
    let server = server_pushing(PushWhen::Away, 1).await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let page = page(&server, &session, true).await;
    drop(page);
    presence_until(&server, &session, |p| p["viewers"] == 0).await;
    let (_, approval) = server.park(&session, &write_prompt("gone.txt")).await;

    let pushed = service.wait_for(1, WAIT).await[0].json();
    assert_eq!((pushed["kind"].clone(), pushed["approvalId"].clone()), (json!("approval"), approval["id"].clone()));
}

#[tokio::test]
async fn away_an_approval_decided_within_the_delay_is_never_pushed() {
    // Long enough that the page's decision, just after the park, lands inside it.
    let server = server_pushing(PushWhen::Away, 3).await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let (_, approval) = server.park(&session, &write_prompt("quick.txt")).await;
    decide_on_page(&server, &session, &approval).await;

    let asked = finished_push(&server, "approval.requested").await;
    assert_eq!(
        (asked.status, asked.last_error.as_deref()),
        (spool_engine::DeliveryStatus::Skipped, Some("already decided")),
        "{asked:?}"
    );
    let decided = finished_push(&server, "approval.resolved").await;
    assert_eq!(decided.status, spool_engine::DeliveryStatus::Skipped, "{decided:?}");
    assert!(service.received().is_empty(), "nothing reached the browser: {:?}", kinds(&service));
}

#[tokio::test]
async fn always_pushes_at_once_even_to_someone_watching() {
    // The delay is `away`'s: `always` sends at once, whatever it says.
    let server = server_pushing(PushWhen::Always, 3600).await;
    let service = PushService::start().await;
    subscribe(&server, &service).await;
    let session = server.new_session().await;
    let _page = page(&server, &session, true).await;
    let (_, approval) = server.park(&session, &write_prompt("always.txt")).await;

    let pushed = service.wait_for(1, WAIT).await[0].json();
    assert_eq!((pushed["kind"].clone(), pushed["approvalId"].clone()), (json!("approval"), approval["id"].clone()));
    decide_on_page(&server, &session, &approval).await;
    assert_eq!(service.wait_for(2, WAIT).await[1].json()["kind"], "resolved");
}
