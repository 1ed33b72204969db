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
