//! Standard Webhooks from the durable outbox, through a real server and a real local
//! receiver that verifies every signature the way the specification tells receivers
//! to (HMAC-SHA256 over `{id}.{timestamp}.{body}` with the secret's key, the timestamp
//! near now): a receiver that fails the first tries still processes each event once by
//! its id; a delivery that keeps failing is dead, listed and replayed; a 410 Gone
//! disables the endpoint.

use crate::common;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{TestOptions, TestServer, id_of};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use spool_engine::store::prelude::*;
use spool_reach::dispatch::DispatchSettings;
use spool_reach::webhook::WebhookEndpoint;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The receiver's secret, as an operator would write it in `config.toml`.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Long enough for every retry of the schedules below, on a busy machine.
const WAIT: Duration = Duration::from_secs(60);

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// A 500 to an id's first try, a stall past the sender's timeout to its second,
    /// then 200.
    FailFirst,
    /// 500 to everything.
    Broken,
    /// 200 to everything.
    Fine,
    /// 410 Gone to everything.
    Gone,
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
struct Seen {
    id: String,
    timestamp: i64,
    kind: String,
    data: Value,
}

#[derive(Default)]
struct Log {
    tries: Vec<Seen>,
    /// Ids processed (a 200 answered or about to be): each once, however often it came.
    processed: BTreeMap<String, Seen>,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    mode: Arc<Mutex<Mode>>,
    log: Arc<Mutex<Log>>,
}

impl Receiver {
    async fn start(mode: Mode) -> Receiver {
        let receiver = Receiver { url: String::new(), mode: Arc::new(Mutex::new(mode)), log: Arc::default() };
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let receiver = receiver.clone();
                move |headers: HeaderMap, body: axum::body::Bytes| {
                    let receiver = receiver.clone();
                    async move { receiver.receive(headers, body).await }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, ..receiver }
    }

    /// What a receiver following the spec does: verify, then process once per id.
    async fn receive(&self, headers: HeaderMap, body: axum::body::Bytes) -> StatusCode {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let (id, timestamp, signatures) =
            (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let timestamp: i64 = timestamp.parse().expect("webhook-timestamp is unix seconds");
        let now = spool_protocol::time::now_ms() / 1000;
        assert!((now - timestamp).abs() <= 300, "the timestamp is the try's own: {timestamp} vs {now}");
        let key = BASE64.decode(SECRET.strip_prefix("whsec_").expect("whsec_")).expect("base64 key");
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("key");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(&body);
        let expected = format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()));
        assert!(signatures.split(' ').any(|s| s == expected), "no valid signature among {signatures:?}");
        let event: Value = serde_json::from_slice(&body).expect("a JSON body");
        assert!(event["timestamp"].as_str().is_some_and(|t| t.contains('T')), "an RFC 3339 timestamp: {event}");
        let seen = Seen {
            id: id.clone(),
            timestamp,
            kind: event["type"].as_str().expect("type").to_owned(),
            data: event["data"].clone(),
        };
        let (mode, tries_of_id) = {
            let mut log = self.log.lock().unwrap();
            log.tries.push(seen.clone());
            (*self.mode.lock().unwrap(), log.tries.iter().filter(|t| t.id == id).count())
        };
        let answer = match (mode, tries_of_id) {
            (Mode::FailFirst, 1) | (Mode::Broken, _) => return StatusCode::INTERNAL_SERVER_ERROR,
            (Mode::Gone, _) => return StatusCode::GONE,
            (Mode::FailFirst, 2) => {
                // Processed, but answered too late: the sender gives up and tries again.
                tokio::time::sleep(Duration::from_secs(2)).await;
                StatusCode::OK
            }
            _ => StatusCode::OK,
        };
        self.log.lock().unwrap().processed.entry(id).or_insert(seen);
        answer
    }

    fn processed(&self) -> Vec<Seen> {
        self.log.lock().unwrap().processed.values().cloned().collect()
    }

    fn tries(&self) -> Vec<Seen> {
        self.log.lock().unwrap().tries.clone()
    }

    /// Waits until `done` holds of what was processed.
    async fn wait_for(&self, what: &str, done: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let processed = self.processed();
            if done(&processed) {
                return processed;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: {:?}", self.tries());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn endpoint(receiver: &Receiver, events: &[&str]) -> WebhookEndpoint {
    WebhookEndpoint {
        name: "ci".into(),
        url: receiver.url.parse().expect("url"),
        keys: vec![spool_reach::webhook::parse_secret(SECRET).expect("secret")],
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        users: None,
        timeout: Duration::from_secs(1),
    }
}

async fn server_for(receiver: &Receiver, events: &[&str], retry_secs: &[u64]) -> TestServer {
    let mut options = TestOptions::default();
    options.outbox.webhooks = vec![endpoint(receiver, events)];
    options.outbox.dispatch =
        DispatchSettings { retry: retry_secs.iter().map(|s| Duration::from_secs(*s)).collect(), ..Default::default() };
    TestServer::start_with(options).await
}

/// `GET /api/webhooks/deliveries?status=…` until `done` holds.
async fn deliveries_until(server: &TestServer, query: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body) = server.get(&format!("/api/webhooks/deliveries{query}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let list = body["deliveries"].as_array().expect("deliveries").clone();
        if done(&list) {
            return list;
        }
        assert!(tokio::time::Instant::now() < deadline, "deliveries never got there: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_receiver_that_fails_first_sees_each_event_once_by_id() {
    let receiver = Receiver::start(Mode::FailFirst).await;
    let server = server_for(&receiver, &[], &[1, 1, 1]).await;
    let session = server.new_session().await;
    let (run_id, approval) = server.park(&session, "tool: bash {\"command\": \"echo ran >> count.txt\"}").await;
    let (status, body) = server
        .post(&format!("/api/sessions/{session}/approvals/{}", id_of(&approval)), json!({"decision": "once"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run_id).await["status"], "completed");

    let kinds = ["session.created", "approval.requested", "approval.resolved", "run.settled"];
    let processed =
        receiver.wait_for("all four events processed", |p| kinds.iter().all(|k| p.iter().any(|s| s.kind == *k))).await;
    let by_kind: BTreeMap<&str, Vec<&Seen>> =
        kinds.iter().map(|k| (*k, processed.iter().filter(|s| s.kind == *k).collect())).collect();
    for (kind, seen) in &by_kind {
        assert_eq!(seen.len(), 1, "{kind} is one event, one id: {seen:?}");
    }
    assert_eq!(by_kind["approval.requested"][0].data["approvalId"], id_of(&approval));
    assert_eq!(by_kind["approval.resolved"][0].data["decision"], "once");
    assert_eq!(by_kind["run.settled"][0].data["status"], "completed");
    assert_eq!(by_kind["approval.requested"][0].data.get("argument"), None, "never the raw arguments");

    // Every event was tried at least three times (500, a stall, 200), under one id, each
    // try signed at its own time.
    let tries = receiver.tries();
    for seen in &processed {
        let times: Vec<i64> = tries.iter().filter(|t| t.id == seen.id).map(|t| t.timestamp).collect();
        assert!(times.len() >= 3, "{}: {times:?}", seen.kind);
        assert!(times.windows(2).all(|w| w[0] < w[1]), "a retry is signed anew: {times:?}");
    }
    let delivered = deliveries_until(&server, "?status=delivered", |l| l.len() == 4).await;
    assert!(
        delivered.iter().all(|d| d["target"] == "webhook:ci" && d["attempts"].as_u64() >= Some(3)),
        "{delivered:?}"
    );
    let ids: BTreeSet<_> = delivered.iter().map(|d| d["eventId"].as_str().expect("eventId").to_owned()).collect();
    assert_eq!(ids, processed.iter().map(|s| s.id.clone()).collect(), "the ids the receiver saw");
}

#[tokio::test]
async fn a_dead_letter_is_listed_and_replayed() {
    let receiver = Receiver::start(Mode::Broken).await;
    let server = server_for(&receiver, &["session.created"], &[1]).await;
    server.new_session().await;
    let dead = deliveries_until(&server, "?status=dead", |l| l.len() == 1).await.remove(0);
    assert_eq!((dead["attempts"].as_u64(), dead["lastStatus"].as_u64()), (Some(2), Some(500)), "{dead}");
    assert_eq!(receiver.tries().len(), 2, "tried once, then once more, then dead");
    assert!(receiver.processed().is_empty());

    *receiver.mode.lock().unwrap() = Mode::Fine;
    let delivery = dead["id"].as_str().expect("id");
    let (status, body) = server.post(&format!("/api/webhooks/deliveries/{delivery}/replay"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let processed = receiver.wait_for("the replay processed", |p| p.len() == 1).await;
    assert_eq!(processed[0].id, dead["eventId"].as_str().expect("eventId"), "replayed under its id");
    let delivered = deliveries_until(&server, "?status=delivered", |l| l.len() == 1).await;
    assert_eq!(delivered[0]["id"], dead["id"]);

    // Only a finished delivery of the caller's is replayed.
    let (status, _) = server.post(&format!("/api/webhooks/deliveries/{delivery}/replay"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "a delivered one may be sent again");
    let (status, _) = server.post("/api/webhooks/deliveries/dlv_00000000000000000000000000/replay", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server.get("/api/webhooks/deliveries?status=lost").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_410_disables_the_endpoint() {
    let receiver = Receiver::start(Mode::Gone).await;
    let server = server_for(&receiver, &["session.created"], &[1, 1]).await;
    server.new_session().await;
    let dead = deliveries_until(&server, "?status=dead", |l| l.len() == 1).await.remove(0);
    assert_eq!(dead["lastStatus"], 410, "{dead}");
    let disabled = server.store.disabled_webhooks().await.expect("disabled");
    assert_eq!(disabled.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["ci"]);

    // A later event is fanned out to no one: nothing more reaches the receiver.
    let second = server.new_session().await;
    let second: spool_protocol::SessionId = second.parse().expect("session id");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let unfanned = server.store.unfanned_events(1_000).await.expect("unfanned");
        if !unfanned.iter().any(|e| e.session_id.as_ref() == Some(&second)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the second event was never fanned out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = deliveries_until(&server, "", |_| true).await;
    assert_eq!(all.len(), 1, "no delivery to a disabled endpoint: {all:?}");
    assert_eq!(receiver.tries().len(), 1, "one try, answered 410, and no more");

    // An operator enables it again: the next event goes out.
    assert!(server.store.enable_webhook("ci").await.expect("enable"));
    *receiver.mode.lock().unwrap() = Mode::Fine;
    server.new_session().await;
    receiver.wait_for("the next event after enabling", |p| p.len() == 1).await;
}

/// Two nodes drain one outbox: the test server's dispatcher and a second one on its own
/// handle (its own connection pool) of the same database. Every event reaches the
/// receiver once: a delivery is claimed by one node at a time, and fanned out once.
#[tokio::test]
async fn two_nodes_deliver_each_event_once() {
    let receiver = Receiver::start(Mode::Fine).await;
    let server = server_for(&receiver, &["session.created"], &[1, 1]).await;
    let other: Arc<dyn spool_engine::Store> =
        Arc::new(spool_store::SqliteStore::open(&server.dir().join("data/spool.db")).await.expect("a second handle"));
    let channel =
        spool_reach::webhook::WebhookChannel::new(vec![endpoint(&receiver, &["session.created"])], other.clone())
            .expect("channel");
    let node_b = spool_reach::dispatch::Dispatcher::new(other, "node-b", vec![Arc::new(channel)], Default::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(node_b.run(stop.clone().cancelled_owned()));

    const SESSIONS: usize = 20;
    for _ in 0..SESSIONS {
        server.new_session().await;
    }
    let processed = receiver.wait_for("every session told", |p| p.len() == SESSIONS).await;
    assert_eq!(processed.len(), SESSIONS);
    let delivered = deliveries_until(&server, "?status=delivered", |l| l.len() == SESSIONS).await;
    assert!(delivered.iter().all(|d| d["attempts"] == 1), "{delivered:?}");
    assert_eq!(receiver.tries().len(), SESSIONS, "no event was sent twice");
    stop.cancel();
    running.await.expect("node b stops");
}
