//! Publishing seed 002 hub events (`POST /api/hub/events`) through a real server on a
//! real port, read by a real WebSocket client subscribed as the seed describes: every
//! event type arrives with its payload (golden frames); a refused batch delivers
//! nothing; a reconnect replays by cursor or gets a `channel.snapshot`; a user gets only
//! what was granted to them, "all channels" included; a publisher token reads nothing
//! and a user's token cannot publish.
//!
//! "Nothing arrived" is never shown by waiting: a marker event published afterwards is
//! the next thing each subscriber must receive.

use crate::common;

use common::{TestServer, WAIT};
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect(server: &TestServer, token: Option<&str>) -> Ws {
    let mut request = format!("ws://{}/api/ws", server.addr).into_client_request().expect("request");
    if let Some(token) = token {
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().expect("header"));
    }
    let (ws, res) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect in time")
        .expect("WebSocket handshake");
    assert_eq!(res.status(), 101);
    ws
}

/// The next event (pings skipped), checked to be the seed's envelope.
async fn recv(ws: &mut Ws) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("no WebSocket message within {WAIT:?}"))
            .expect("the socket is open")
            .expect("a message");
        let text = match message {
            Message::Text(text) => text,
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected message {other:?}"),
        };
        let event: Value = serde_json::from_str(&text).expect("JSON");
        assert!(event["type"].is_string() && event["channel_id"].is_string(), "{event}");
        assert!(event["timestamp"].as_i64().is_some_and(|t| t > 1_700_000_000_000), "{event}");
        return event;
    }
}

/// Sends a subscribe message and waits for its acknowledgement.
async fn subscribe(ws: &mut Ws, channels: &[&str], cursors: Value) {
    let message = json!({"type": "subscribe", "channels": channels, "cursors": cursors});
    ws.send(Message::Text(message.to_string().into())).await.expect("send");
    loop {
        let event = recv(ws).await;
        if event["type"] == "subscribed" {
            return;
        }
    }
}

async fn publish(server: &TestServer, token: Option<&str>, body: Value) -> (StatusCode, Value) {
    let mut request = server.client.post(server.url("/api/hub/events")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    server.send(request).await
}

/// Publishes and returns the cursors; panics unless 200.
async fn published(server: &TestServer, token: Option<&str>, body: Value) -> Vec<String> {
    let (status, answer) = publish(server, token, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["events"].as_array().expect("events").iter().map(|e| e["cursor"].as_str().expect("cursor").into()).collect()
}

fn marker(channel: &str, id: &str) -> Value {
    json!({"type": "ticket.updated", "channel_id": channel, "data": {"ticket_id": id}, "audience": "public"})
}

/// One example of every seed 002 event type, with the seed's payload fields.
fn every_type() -> Vec<Value> {
    let container = |status: &str| {
        json!({"container_id": "abc123def456", "channel_id": "chan_a", "type": "agent", "status": status,
               "container_name": "loop-my-project-a1b2c3"})
    };
    let run = json!({"run_id": "wfr-a1b2c3d4e5f67890", "workflow_name": "code-review", "channel_id": "chan_a",
                     "status": "paused", "paused_node_id": "approve", "error": ""});
    let node =
        json!({"run_id": "wfr-a1b2c3d4e5f67890", "node_id": "diff", "status": "success", "output": "+added line"});
    let instance =
        json!({"instance_id": "inst-1", "name": "reviewer", "status": "running", "metadata": {"gpu": false}});
    [
        ("message.created", json!({"msg_id": "m1", "author_id": "user123", "author_name": "Alice",
            "content": "Hello, world!", "is_bot": false, "is_processed": false, "priority": 0, "trigger_msg_id": "u1"})),
        ("message.streaming", json!({"content": "Here is the partial response so far..."})),
        ("message.deleted", json!({"msg_id": "m1"})),
        ("agent.status", json!({"status": "completed", "run_id": "a1b2c3d4e5f67890", "duration_ms": 12345,
            "num_turns": 3, "stop_reason": "end_turn", "model": "claude-sonnet-4-20250514", "trigger_content": "hi",
            "msg_id": "m1", "thread_id": "thread_abc123"})),
        ("tool.use", json!({"tool_use_id": "toolu_017fNc", "tool_name": "Bash", "input": "ls -la"})),
        ("agent.thinking", json!({"text": "Let me check how the existing tests cover this path..."})),
        ("tool.result", json!({"tool_use_id": "toolu_017fNc", "output": "package api\n", "is_error": false})),
        ("agent.activity", json!({"activity": "model", "model": "claude-sonnet-4-20250514", "description": ""})),
        ("agent.ask_user", json!({"questions": [{"question": "Where should the file be created?", "header": "Location",
            "options": [{"label": "Root directory", "description": "Create in the project root"},
                        {"label": "src/ folder", "description": "Create inside the src directory"}],
            "multi_select": false}]})),
        ("agent.exit_plan", json!({"plan": "# My Plan\n\n1. Do this", "planFilePath": "/path/to/plan.md"})),
        ("agent.todo_write", json!({"todos": [{"content": "write tests", "status": "in_progress",
            "active_form": "writing tests"}]})),
        ("messages.processed", json!({"msg_ids": ["m1", "m2"]})),
        ("channel.created", json!({"channel_id": "new_thread_id"})),
        ("channel.deleted", Value::Null),
        ("channel.updated", json!({"channel_id": "chan_a", "branch": "feat/git-panel", "commit": "dbd4bbd",
            "diff_additions": 1477, "diff_deletions": 6})),
        ("agent_instance.registered", instance.clone()),
        ("agent_instance.unregistered", instance.clone()),
        ("agent_instance.metadata", instance),
        ("image.build_status", json!({"image": "loop/agent:latest", "status": "building", "message": "step 3/9",
            "progress": 33.5})),
        ("image.update_available", json!({"image": "loop/agent", "current": "1.2.0", "latest": "1.3.0"})),
        ("workflow.run_started", run.clone()),
        ("workflow.run_completed", run.clone()),
        ("workflow.run_paused", run),
        ("workflow.node_started", node.clone()),
        ("workflow.node_completed", node),
        ("gate.approval_requested", json!({"req_id": "gate-req-8f1c", "kind": "docker-http",
            "target": "POST /containers/abc123/exec", "message": "agent wants to exec into a container",
            "details": {"cmd": "bash, -c, whoami", "user": "root", "privileged": "true"}})),
        ("gate.approval_resolved", json!({"req_id": "gate-req-8f1c", "decision": "once", "actor": "U01ABCD2EF"})),
        ("container.registered", container("running")),
        ("container.status_changed", {
            let mut c = container("pending-removal");
            c["remove_at"] = json!("2026-03-31T12:05:00Z");
            c
        }),
        ("container.removed", container("pending-removal")),
        ("ticket.created", json!({"ticket_id": "tic-a1b2c3d4"})),
        ("ticket.updated", json!({"ticket_id": "tic-a1b2c3d4"})),
        ("ticket.deleted", json!({"ticket_id": "tic-a1b2c3d4"})),
        ("playground.update", json!({"name": "snake-game", "html": "<div id='app'>...</div>",
            "css": "body { margin: 0; }", "js": "console.log('hello')", "import_map": "{\"imports\":{}}",
            "description": "Added score counter"})),
        ("quality.session_started", json!({"dir_path": "/work", "branch": "main"})),
        ("quality.scanned", json!({"quality_signal": 4200, "rules": {"passed": [], "failed": []}})),
        ("quality.rules_violated", json!({
            "passed": [{"name": "no_import_cycles", "severity": "pass", "message": "no import cycles detected"}],
            "failed": [{"name": "signal_floor", "severity": "fail", "message": "quality_signal=4200 below floor 5000"}]})),
        ("quality.session_ended", json!({"branch": "main", "ok": true, "error": "", "repo_too_large": false})),
        ("quality.scan_progress", json!({"phase": "metrics", "done": 3, "total": 9})),
        ("quality.scan_cancelled", json!({"reason": "asked"})),
        ("review.comment", json!({"id": "rev-7f2a", "path": "internal/api/foo.go", "line": 42, "side": "RIGHT",
            "body": "This nil check looks redundant."})),
        ("review.status", json!({"status": "reviewing", "error": ""})),
    ]
    .into_iter()
    .map(|(kind, data)| json!({"type": kind, "channel_id": "chan_a", "data": data}))
    .collect()
}

/// A server with auth on: a publisher token, and user tokens for alice and bob.
async fn with_tokens() -> (TestServer, String, String, String) {
    let server = TestServer::start().await;
    let auth = server.engine.auth();
    let (_, publisher) = auth.create_publisher_token("ci").await.expect("publisher token");
    let (_, alice) = auth.create_token("alice").await.expect("alice");
    let (_, bob) = auth.create_token("bob").await.expect("bob");
    (server, publisher, alice, bob)
}

#[tokio::test]
async fn every_seed_event_type_reaches_a_subscriber_with_its_payload() {
    let (server, publisher, alice, _) = with_tokens().await;
    let mut ws = connect(&server, Some(&alice)).await;
    subscribe(&mut ws, &["chan_a"], json!({})).await;
    let events = every_type();
    let cursors = published(&server, Some(&publisher), json!({"events": events, "audience": ["alice"]})).await;
    assert_eq!(cursors.len(), events.len());

    let mut frames = Vec::new();
    for sent in &events {
        let got = recv(&mut ws).await;
        assert_eq!(got["type"], sent["type"]);
        assert_eq!(got["data"], sent["data"], "the payload arrives as published");
        let global = ["channel.updated", "image.", "workflow.", "container.", "ticket.", "playground."]
            .iter()
            .any(|p| sent["type"].as_str().is_some_and(|t| t.starts_with(p)));
        assert_eq!(got["channel_id"], if global { "" } else { "chan_a" }, "{got}");
        frames.push(got);
    }
    // Each channel counts on by one; global events have a stream of their own.
    let seqs = |channel: &str| -> Vec<u64> {
        frames
            .iter()
            .filter(|f| f["channel_id"] == channel)
            .map(|f| f["cursor"].as_str().and_then(|c| c.rsplit_once(':')).expect("cursor").1.parse().expect("seq"))
            .collect()
    };
    for channel in ["chan_a", ""] {
        let seqs = seqs(channel);
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{channel:?}");
    }
    let mut settings = insta::Settings::clone_current();
    settings.add_redaction("[].timestamp", "[timestamp]");
    // The stream id differs per run; the seq is what the snapshot keeps.
    settings.add_redaction(
        "[].cursor",
        insta::dynamic_redaction(|value, _| {
            let seq = value.as_str().and_then(|c| c.rsplit_once(':')).map(|(_, s)| s.to_owned());
            format!("[stream]:{}", seq.expect("a cursor"))
        }),
    );
    settings.bind(|| insta::assert_json_snapshot!("published_every_type", frames));

    // The OpenAPI document describes the route and every payload.
    let (_, doc) = server.get("/api/openapi.json").await;
    assert!(doc["paths"]["/api/hub/events"]["post"].is_object());
    for schema in ["MessageCreated", "AskUser", "Container", "WorkflowRun", "QualityRulesReport", "ReviewComment"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} is in the document");
    }
    let types = &doc["components"]["schemas"]["HubEventType"]["enum"];
    assert_eq!(types.as_array().map(Vec::len), Some(events.len()), "{types}");
}

#[tokio::test]
async fn a_bad_payload_refuses_the_whole_batch_and_nobody_gets_any_of_it() {
    let (server, publisher, alice, _) = with_tokens().await;
    let mut ws = connect(&server, Some(&alice)).await;
    subscribe(&mut ws, &[], json!({})).await;
    let good = json!({"type": "ticket.created", "data": {"ticket_id": "t1"}});
    let bad = json!({"type": "tool.use", "channel_id": "chan_b", "data": {"tool_use_id": "x"}});
    let cases = [
        (json!({"events": [good.clone(), bad], "audience": "public"}), "events[1].data", "tool_name"),
        (
            json!({"events": [good.clone(), {"type": "nope.nope", "data": {}}], "audience": "public"}),
            "events[1].type",
            "nope.nope",
        ),
        (
            json!({"events": [good.clone(), {"type": "review.status", "data": {"status": "ready"}}], "audience": "public"}),
            "events[1].channel_id",
            "channel",
        ),
        (
            json!({"events": [{"type": "ticket.created", "data": {"ticket_id": 7}}], "audience": "public"}),
            "events[0].data.ticket_id",
            "string",
        ),
        (
            json!({"events": [{"type": "agent.thinking", "channel_id": "x".repeat(129), "data": {"text": "t"}}],
                   "audience": "public"}),
            "events[0].channel_id",
            "128",
        ),
        (
            json!({"events": [{"type": "agent.thinking", "channel_id": "c", "data": {"text": "x".repeat(300 * 1024)}}],
                   "audience": "public"}),
            "events[0].data",
            "bytes",
        ),
        (json!({"events": vec![good.clone(); 101], "audience": "public"}), "events", "100"),
        (json!({"events": [good.clone()]}), "audience", "required"),
        (json!({"events": [good.clone()], "audience": ["not a name"]}), "audience", "user name"),
    ];
    for (body, field, words) in cases {
        let (status, answer) = publish(&server, Some(&publisher), body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        let message = answer["error"]["message"].as_str().expect("message");
        assert!(answer["error"]["code"].is_string(), "{answer}");
        assert!(message.starts_with(field) && message.contains(words), "{field}/{words}: {message}");
    }
    // Over the body limit: 413, before anything is read.
    let huge = json!({"type": "agent.thinking", "channel_id": "c", "data": {"text": "x".repeat(2 << 20)}, "audience": "public"});
    let (status, answer) = publish(&server, Some(&publisher), huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");

    // The first thing the subscriber gets is the marker: no part of a refused batch.
    published(&server, Some(&publisher), marker("chan_m", "marker")).await;
    let got = recv(&mut ws).await;
    assert_eq!((got["type"].as_str(), got["data"]["ticket_id"].as_str()), (Some("ticket.updated"), Some("marker")));
}

#[tokio::test]
async fn a_reconnect_replays_by_cursor_or_gets_a_snapshot_when_too_old() {
    let server = TestServer::start().await;
    let event = |n: u64| {
        json!({"type": "review.comment", "channel_id": "chan_r",
        "data": {"id": format!("c{n}"), "path": "a.rs", "body": format!("comment {n}")}})
    };
    let mut ws = connect(&server, None).await;
    subscribe(&mut ws, &["chan_r"], json!({})).await;
    published(&server, None, json!({"events": [event(1), event(2), event(3)], "audience": "public"})).await;
    let mut last = String::new();
    for n in 1..=3 {
        let got = recv(&mut ws).await;
        assert_eq!(got["data"]["id"], format!("c{n}"));
        last = got["cursor"].as_str().expect("cursor").to_owned();
    }
    drop(ws);
    published(&server, None, json!({"events": [event(4), event(5)], "audience": "public"})).await;

    let mut ws = connect(&server, None).await;
    subscribe(&mut ws, &["chan_r"], json!({"chan_r": last})).await;
    for n in 4..=5 {
        assert_eq!(recv(&mut ws).await["data"]["id"], format!("c{n}"), "exactly the missed events, in order");
    }
    published(&server, None, json!({"events": [event(6)], "audience": "public"})).await;
    let live = recv(&mut ws).await;
    assert_eq!(live["data"]["id"], "c6", "then live, nothing repeated");
    let stream = live["cursor"].as_str().and_then(|c| c.rsplit_once(':')).expect("cursor").0.to_owned();
    drop(ws);

    // Past the ring (256 events): a cursor from the start gets a snapshot at the head.
    for batch in 0..3 {
        let events: Vec<Value> = (0..100).map(|k| event(100 + batch * 100 + k)).collect();
        published(&server, None, json!({"events": events, "audience": "public"})).await;
    }
    let mut ws = connect(&server, None).await;
    subscribe(&mut ws, &["chan_r"], json!({"chan_r": format!("{stream}:1")})).await;
    let snapshot = recv(&mut ws).await;
    assert_eq!(snapshot["type"], "channel.snapshot", "{snapshot}");
    assert_eq!(snapshot["channel_id"], "chan_r");
    assert_eq!(snapshot["data"], json!({"state": null}));
    assert_eq!(snapshot["cursor"], format!("{stream}:306"));
    published(&server, None, json!({"events": [event(7)], "audience": "public"})).await;
    let next = recv(&mut ws).await;
    assert_eq!((next["data"]["id"].as_str(), next["cursor"].as_str()), (Some("c7"), Some(&*format!("{stream}:307"))));
}

#[tokio::test]
async fn a_user_never_receives_what_was_not_granted_to_them() {
    let (server, publisher, alice, bob) = with_tokens().await;
    let mut alice_all = connect(&server, Some(&alice)).await;
    subscribe(&mut alice_all, &[], json!({})).await;
    let mut bob_all = connect(&server, Some(&bob)).await;
    subscribe(&mut bob_all, &[], json!({})).await;
    let mut bob_named = connect(&server, Some(&bob)).await;
    subscribe(&mut bob_named, &["chan_secret"], json!({})).await;

    let secret = json!({"events": [
        {"type": "message.created", "channel_id": "chan_secret", "data": {"msg_id": "s1", "content": "for alice"}},
        {"type": "ticket.created", "data": {"ticket_id": "secret-ticket"}},
    ], "audience": ["alice"]});
    let cursors = published(&server, Some(&publisher), secret).await;
    published(&server, Some(&publisher), marker("chan_secret", "marker")).await;
    assert_eq!(recv(&mut alice_all).await["data"]["msg_id"], "s1");
    assert_eq!(recv(&mut alice_all).await["data"]["ticket_id"], "secret-ticket");
    for ws in [&mut alice_all, &mut bob_all, &mut bob_named] {
        let got = recv(ws).await;
        assert_eq!(got["data"]["ticket_id"], "marker", "bob's first event is the public marker: {got}");
    }
    // A cursor does not open a channel either: bob's replay skips what is alice's.
    let stream = cursors[0].rsplit_once(':').expect("cursor").0;
    subscribe(&mut bob_named, &["chan_secret"], json!({"chan_secret": format!("{stream}:0")})).await;
    let public = json!({"type": "review.status", "channel_id": "chan_secret", "data": {"status": "ready"},
                        "audience": "public"});
    published(&server, Some(&publisher), public).await;
    let got = recv(&mut bob_named).await;
    assert_eq!((got["type"].as_str(), got["cursor"].as_str()), (Some("review.status"), Some(&*format!("{stream}:2"))));

    // The publisher token reads nothing and a user's token cannot publish.
    let project = server.new_dir("alice-project");
    let (status, created) = server
        .send(server.client.post(server.url("/api/projects")).bearer_auth(&alice).json(&json!({"path": project})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    for path in ["/api/projects".to_owned(), format!("/api/projects/{}", created["id"].as_str().expect("id"))] {
        let (status, body) = server.send(server.client.get(server.url(&path)).bearer_auth(&publisher)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(body["error"]["code"], "publisher_token");
    }
    let (status, body) =
        server.send(server.client.post(server.url("/api/login")).json(&json!({"token": publisher}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no browser login for a publisher: {body}");
    let request = {
        let mut r = format!("ws://{}/api/ws", server.addr).into_client_request().expect("request");
        r.headers_mut().insert("authorization", format!("Bearer {publisher}").parse().expect("header"));
        r
    };
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status(), 403),
        other => panic!("a publisher cannot open the hub: {:?}", other.map(|(_, r)| r.status())),
    }
    let (status, body) = publish(&server, Some(&alice), marker("chan_x", "nope")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("not_a_publisher")));
    let (status, _) = publish(&server, None, marker("chan_x", "nope")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_embedded_component_publishes_through_the_broadcaster() {
    use spool_engine::hub::{Broadcaster, Grant};
    use spool_protocol::hub::TicketRef;
    let server = TestServer::start().await;
    let mut ws = connect(&server, None).await;
    subscribe(&mut ws, &["chan_e"], json!({})).await;
    let hub = server.engine.hub().to(Grant::Public);
    let cursor = hub.broadcast_channel_created("chan_e", "chan_e_thread").await.expect("published");
    hub.broadcast_ticket_deleted(TicketRef { ticket_id: "t9".into() }).await.expect("published");
    let created = recv(&mut ws).await;
    assert_eq!(created["type"], "channel.created");
    assert_eq!(created["data"], json!({"channel_id": "chan_e_thread"}));
    assert_eq!(created["cursor"], cursor.to_string());
    assert_eq!(recv(&mut ws).await["type"], "ticket.deleted");
    let refused = hub.broadcast_review_status(
        "bad channel",
        spool_protocol::hub::ReviewStatus { status: "ready".into(), error: None },
    );
    assert!(refused.await.is_err(), "the same checks as the HTTP route");
}

/// A publisher cannot speak on a Spool session's channel, however it spells it: not as
/// the event's channel, and not as the channel a global `channel.updated` (or a
/// `channel.created`) names in its data — which reached the session's own sockets
/// before. Each is refused (422, nothing published), and the session's owner, who
/// follows the session's channel, hears none of it: the next thing on her socket is a
/// marker published afterwards.
#[tokio::test]
async fn a_publisher_cannot_speak_on_a_sessions_channel_however_spelled() {
    let (server, publisher, alice, _bob) = with_tokens().await;
    let project = server.new_dir("alice-sessions");
    let (status, created) = server
        .send(server.client.post(server.url("/api/projects")).bearer_auth(&alice).json(&json!({"path": project})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, session) = server
        .send(
            server
                .client
                .post(server.url("/api/sessions"))
                .bearer_auth(&alice)
                .json(&json!({"projectId": created["id"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let session = session["id"].as_str().expect("session id").to_owned();
    let mut ws = connect(&server, Some(&alice)).await;
    subscribe(&mut ws, &[&session], json!({})).await;

    let spellings = [session.clone(), session.to_uppercase(), format!("{session}x"), format!("SES-{}", &session[4..])];
    for spelled in &spellings {
        let bodies = [
            json!({"type": "channel.updated", "data": {"channel_id": spelled, "branch": "evil", "commit": "0000000"},
                   "audience": "public"}),
            json!({"type": "channel.created", "channel_id": "chan_parent", "data": {"channel_id": spelled},
                   "audience": "public"}),
            json!({"type": "message.created", "channel_id": spelled, "data": {"msg_id": "m1", "content": "evil"},
                   "audience": ["alice"]}),
        ];
        for body in bodies {
            let (status, answer) = publish(&server, Some(&publisher), body.clone()).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body} → {answer}");
            assert_eq!(answer["error"]["code"], "invalid_event", "{answer}");
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("channel_id") && message.contains("session"), "{message}");
        }
    }
    published(&server, Some(&publisher), marker("chan_m", "after")).await;
    let got = recv(&mut ws).await;
    assert_eq!(got["data"]["ticket_id"], "after", "nothing reached the session's owner before the marker: {got}");
}

/// An audience names users that exist: an unknown name refuses the publish (422,
/// nothing published) and creates no user record — each one made a user before.
#[tokio::test]
async fn an_audience_of_unknown_users_is_refused_and_creates_nobody() {
    use spool_engine::store::Users;
    let (server, publisher, alice, _bob) = with_tokens().await;
    let store = server.store.clone();
    let mut ws = connect(&server, Some(&alice)).await;
    subscribe(&mut ws, &[], json!({})).await;
    for ghosts in [json!(["ghost-1"]), json!(["alice", "ghost-2"])] {
        let body = json!({"type": "ticket.created", "data": {"ticket_id": "t-ghost"}, "audience": ghosts});
        let (status, answer) = publish(&server, Some(&publisher), body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["error"]["code"], "unknown_audience", "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("ghost-"), "{answer}");
    }
    for ghost in ["ghost-1", "ghost-2"] {
        assert_eq!(store.user_id(ghost).await.expect("look up"), None, "{ghost} was created");
    }
    // Known users still are an audience, and nothing of the refused batches went out.
    let only_alice = json!({"type": "ticket.created", "data": {"ticket_id": "t-alice"}, "audience": ["alice"]});
    published(&server, Some(&publisher), only_alice).await;
    assert_eq!(recv(&mut ws).await["data"]["ticket_id"], "t-alice");
}
