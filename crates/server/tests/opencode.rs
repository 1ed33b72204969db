//! The OpenCode-compatible API through a real server on a real port: what an OpenCode
//! client sends and reads — the JSON of each route, the bytes of `GET /event`, and the
//! text a client assembles from streamed deltas compared with the text Spool stored.
//!
//! The client these tests play (an `/event` connection, the text it assembles, the
//! routes it calls) is in `opencode/client.rs`; here are the tests.

mod client;
mod revert;
mod step_snapshots;

use crate::common;

use client::{
    Events, assembled, create, deltas, directory, last_id, messages, next_global, prompt_async, session_of,
    stored_text, types,
};
use common::{SseStream, TestOptions, TestServer, WAIT, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn sessions_by_directory_and_errors_in_both_shapes() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let (status, health) = server.get("/global/health").await;
    assert_eq!((status, health["healthy"].clone()), (StatusCode::OK, json!(true)));

    // The header is percent-encoded, like the SDK sends it; the directory becomes a project.
    let id = create(&server, &dir, "first").await;
    let (_, projects) = server.get("/api/projects").await;
    let registered: Vec<&str> = projects.as_array().expect("list").iter().filter_map(|p| p["path"].as_str()).collect();
    assert_eq!(registered, [dir.to_str().expect("utf-8")]);
    let other = create(&server, &dir, "second").await;
    assert_eq!(server.get("/api/projects").await.1.as_array().expect("list").len(), 1, "registered once");

    let (status, list) = server.get(&format!("/session?directory={}", urlencode(dir.to_str().expect("utf-8")))).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list.as_array().expect("list").iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(ids, [other.as_str(), id.as_str()], "most recently updated first");
    assert_eq!(list[1]["directory"], dir.to_str().expect("utf-8"));
    assert_eq!(list[1]["title"], "first");
    assert!(list[1]["time"]["created"].is_i64());

    let (status, s) = server.patch(&format!("/session/{id}"), json!({ "title": "renamed" })).await;
    assert_eq!((status, s["title"].as_str()), (StatusCode::OK, Some("renamed")));
    let (_, s) = server.patch(&format!("/session/{id}"), json!({ "time": { "archived": 1 } })).await;
    assert!(s["time"]["archived"].is_i64());
    let (_, s) = server.patch(&format!("/session/{id}"), json!({ "time": { "archived": null } })).await;
    assert!(s["time"].get("archived").is_none());
    let (status, s) = server.get(&format!("/session/{id}")).await;
    assert_eq!((status, s["title"].as_str()), (StatusCode::OK, Some("renamed")));
    let (status, deleted) = server.delete(&format!("/session/{id}")).await;
    assert_eq!((status, deleted), (StatusCode::OK, json!(true)));

    let (status, missing) = server.get(&format!("/session/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["name"], "NotFoundError");
    assert_eq!(missing["data"]["message"], missing["error"]["message"]);
    assert_eq!(missing["error"]["code"], "not_found");

    let nowhere = server.dir().join("does-not-exist");
    let request =
        server.client.get(server.url("/session")).header("x-opencode-directory", nowhere.to_str().expect("utf-8"));
    let (status, bad) = server.send(request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!((bad["name"].as_str(), bad["error"]["code"].as_str()), (Some("BadRequest"), Some("invalid_directory")));

    let (status, bad) = server
        .post(&format!("/session/{other}/prompt_async"), json!({ "parts": [{ "type": "agent", "name": "build" }] }))
        .await;
    assert_eq!((status, bad["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("unsupported_part")));
}

#[tokio::test]
async fn a_prompt_streams_on_the_global_stream_until_idle_and_the_deltas_are_the_stored_text() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "stream").await;
    let mut events = Events::open(&server, &dir, "").await;
    let first = events.next().await.expect("first event");
    assert_eq!(first["type"], "server.connected");

    let text = "streamed word by word, ünïcode 🌍 included";
    prompt_async(&server, &session, &format!("echo: {text}")).await;
    events.until_idle(&session).await;
    let list = messages(&server, &session).await;
    assert_eq!(list.len(), 2);
    let answer = &list[1];
    assert_eq!(answer["info"]["role"], "assistant");
    assert_eq!(answer["info"]["parentID"], list[0]["info"]["id"]);
    assert_eq!(stored_text(answer), text);
    assert_eq!(deltas(&events.seen, answer["info"]["id"].as_str().expect("id")), text);

    let kinds: Vec<String> = events
        .seen
        .iter()
        .filter(|e| session_of(e) == Some(&session))
        .map(|e| match e["type"].as_str().expect("type") {
            "message.part.updated" => format!("part:{}", e["properties"]["part"]["type"].as_str().expect("part type")),
            "session.status" => format!("status:{}", e["properties"]["status"]["type"].as_str().expect("status")),
            other => other.to_owned(),
        })
        .filter(|k| k != "message.part.delta")
        .collect();
    assert_eq!(
        kinds,
        [
            "session.updated",
            "status:busy",
            "message.updated",
            "part:text",
            "message.updated",
            "part:step-start",
            "part:text",
            "part:text",
            "part:step-finish",
            "message.updated",
            "status:idle",
            "session.idle",
        ],
        "{kinds:?}"
    );
    let finish = events.seen.iter().find(|e| e["properties"]["part"]["type"] == "step-finish").expect("step-finish");
    assert_eq!(finish["properties"]["part"]["reason"], "stop");
    assert!(finish["properties"]["part"]["tokens"]["output"].as_u64().is_some_and(|n| n > 0));
    // One `data:` line per event, a blank line after each.
    let raw = String::from_utf8(events.stream.raw.clone()).expect("utf-8");
    assert!(raw.split("\n\n").filter(|e| !e.is_empty()).all(|e| e.starts_with("data: {") && !e.contains('\n')));
}

#[tokio::test]
async fn a_permission_is_asked_listed_and_answered_once() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "permission").await;
    let mut events = Events::open(&server, &dir, "").await;
    prompt_async(&server, &session, r#"tool: write {"path":"x.txt","content":"hi"}"#).await;

    let updated = events.until(|e| e["type"] == "permission.updated").await;
    let asked = events.until(|e| e["type"] == "permission.asked").await;
    assert_eq!(updated["properties"], asked["properties"], "one permission, in both generations' words");
    let p = &asked["properties"];
    let id = p["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("per_"));
    assert_eq!((p["permission"].as_str(), p["type"].as_str()), (Some("write"), Some("write")));
    assert_eq!(p["patterns"], json!(["x.txt"]));
    assert_eq!(p["sessionID"], session);
    let list = messages(&server, &session).await;
    assert_eq!(p["tool"]["messageID"], list[1]["info"]["id"]);
    assert_eq!(list[1]["parts"][1]["state"]["status"], "pending");
    assert_eq!(list[1]["parts"][1]["state"]["input"], json!({"path": "x.txt", "content": "hi"}));

    let (status, pending) =
        server.get(&format!("/permission?directory={}", urlencode(dir.to_str().expect("utf-8")))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pending, json!([p.clone()]));
    let (status, busy) =
        server.get(&format!("/session/status?directory={}", urlencode(dir.to_str().expect("utf-8")))).await;
    assert_eq!((status, busy), (StatusCode::OK, json!({ session.clone(): { "type": "busy" } })));

    let (status, ok) = server.post(&format!("/permission/{id}/reply"), json!({ "reply": "once" })).await;
    assert_eq!((status, ok), (StatusCode::OK, json!(true)));
    let (status, again) =
        server.post(&format!("/session/{session}/permissions/{id}"), json!({ "response": "reject" })).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        (again["error"]["code"].as_str(), again["name"].as_str()),
        (Some("already_resolved"), Some("UnknownError"))
    );

    let replied = events.until(|e| e["type"] == "permission.replied").await;
    assert_eq!(replied["properties"]["permissionID"], id.as_str());
    assert_eq!(replied["properties"]["requestID"], id.as_str());
    assert_eq!(
        (replied["properties"]["response"].as_str(), replied["properties"]["reply"].as_str()),
        (Some("once"), Some("once"))
    );
    events.until_idle(&session).await;
    assert_eq!(std::fs::read_to_string(dir.join("x.txt")).expect("written"), "hi");

    let states: Vec<&str> = events
        .seen
        .iter()
        .filter(|e| e["properties"]["part"]["type"] == "tool")
        .map(|e| e["properties"]["part"]["state"]["status"].as_str().expect("status"))
        .collect();
    assert_eq!(states, ["pending", "pending", "running", "completed"]);
    let list = messages(&server, &session).await;
    let roles: Vec<&str> = list.iter().map(|m| m["info"]["role"].as_str().expect("role")).collect();
    assert_eq!(roles, ["user", "assistant", "assistant"], "tool results live in the tool part");
    assert_eq!(list[1]["parts"][1]["state"]["status"], "completed");
    assert_eq!(list[1]["info"]["finish"], "tool-calls");
    assert_eq!(list[2]["info"]["finish"], "stop");
    let (status, none) =
        server.get(&format!("/permission?directory={}", urlencode(dir.to_str().expect("utf-8")))).await;
    assert_eq!((status, none), (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn abort_stops_a_long_run_with_an_aborted_message_and_a_session_error() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "abort").await;
    let mut events = Events::open(&server, &dir, "").await;
    prompt_async(&server, &session, "stream: 5000").await;
    events.until(|e| e["type"] == "message.part.delta").await;
    // Queued behind the run; Stop pauses the queue, so it does not start after it.
    let (status, _) = server
        .post(&format!("/session/{session}/prompt_async"), json!({ "parts": [{ "type": "text", "text": "x" }] }))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, ok) = server.post(&format!("/session/{session}/abort"), json!({})).await;
    assert_eq!((status, ok), (StatusCode::OK, json!(true)));
    let error = events.until(|e| e["type"] == "session.error").await;
    assert_eq!(error["properties"]["error"]["name"], "MessageAbortedError");
    events.until_idle(&session).await;

    let list = messages(&server, &session).await;
    let last = list.last().expect("an answer");
    assert_eq!(last["info"]["error"]["name"], "MessageAbortedError");
    let partial = stored_text(last);
    assert!(partial.starts_with("w1") && !partial.ends_with("w5000"), "{}", &partial[..partial.len().min(40)]);
    assert_eq!(deltas(&events.seen, last["info"]["id"].as_str().expect("id")), partial);
}

#[tokio::test]
async fn a_prompt_while_a_run_is_busy_waits_its_turn_and_a_blocking_one_answers_with_its_own_run() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "queue").await;
    let mut events = Events::open(&server, &dir, "").await;
    prompt_async(&server, &session, "stream: 300").await;
    events.until(|e| e["type"] == "message.part.delta").await;
    prompt_async(&server, &session, "echo: second").await;
    let body = json!({ "parts": [{ "type": "text", "text": "echo: third" }] });
    let (status, reply) = server.post(&format!("/session/{session}/message"), body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(stored_text(&reply), "third");
    assert_eq!(reply["info"].get("error"), None, "{reply}");

    let list = messages(&server, &session).await;
    let texts: Vec<String> = list.iter().map(stored_text).collect();
    assert_eq!(texts.len(), 6, "{texts:?}");
    assert_eq!(texts[0], "stream: 300");
    assert!(texts[1].ends_with(" w300"), "the first run ran to its end");
    assert_eq!(&texts[2..], ["echo: second", "second", "echo: third", "third"]);
    assert!(list.iter().all(|m| m["info"].get("error").is_none()), "no run failed");
}

#[tokio::test]
async fn the_agents_question_is_an_opencode_question_answered_once() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "question").await;
    let mut events = Events::open(&server, &dir, "").await;
    let args = json!({"question": "Which colour?", "options": [{"label": "red"}, {"label": "blue"}]});
    prompt_async(&server, &session, &format!("tool: question {args}")).await;
    let asked = events.until(|e| e["type"] == "question.asked").await;
    let request = &asked["properties"];
    let id = request["id"].as_str().expect("id").to_owned();
    assert_eq!(request["questions"][0]["options"][1], json!({"label": "blue", "description": ""}));
    let at = urlencode(dir.to_str().expect("utf-8"));
    let (status, listed) = server.get(&format!("/question?directory={at}")).await;
    assert_eq!((status, &listed), (StatusCode::OK, &json!([request])));
    let (_, permissions) = server.get(&format!("/permission?directory={at}")).await;
    assert_eq!(permissions, json!([]), "a question is not a permission");

    let (status, ok) = server.post(&format!("/question/{id}/reply"), json!({"answers": [["blue"]]})).await;
    assert_eq!((status, ok), (StatusCode::OK, json!(true)));
    let replied = events.until(|e| e["type"] == "question.replied").await;
    assert_eq!(replied["properties"], json!({"sessionID": session, "requestID": id, "answers": [["blue"]]}));
    events.until_idle(&session).await;
    let list = messages(&server, &session).await;
    assert_eq!(
        stored_text(list.last().expect("an answer")),
        "Tool question returned 1 line: The person answered: blue"
    );

    for route in ["reply", "reject"] {
        let (status, refused) = server.post(&format!("/question/{id}/{route}"), json!({"answers": [["red"]]})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
        assert_eq!(
            (refused["_tag"].as_str(), refused["requestID"].as_str()),
            (Some("QuestionNotFoundError"), Some(id.as_str()))
        );
        assert_eq!(refused["name"], "NotFoundError");
    }
    assert!(!events.seen.iter().any(|e| e["type"] == "permission.asked"), "{}", types(&events.seen));
}

#[tokio::test]
async fn a_blocking_prompt_answers_when_the_run_settled() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "blocking").await;
    let body = json!({ "parts": [{ "type": "text", "text": "echo: all at once" }], "messageID": "msg_client_1" });
    let (status, reply) = server.post(&format!("/session/{session}/message"), body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["info"]["role"], "assistant");
    assert_eq!(reply["info"]["finish"], "stop");
    assert_eq!(stored_text(&reply), "all at once");
    // The client's messageID is the prompt's requestId: a retry runs nothing new.
    let (status, again) = server.post(&format!("/session/{session}/message"), body).await;
    assert_eq!((status, &again), (StatusCode::OK, &reply));
    assert_eq!(messages(&server, &session).await.len(), 2);

    let (status, limited) = server.get(&format!("/session/{session}/message?limit=1")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(limited, json!([reply]));
    let before = reply["info"]["id"].as_str().expect("id");
    let (_, earlier) = server.get(&format!("/session/{session}/message?before={before}")).await;
    assert_eq!(earlier.as_array().map(|l| l.len()), Some(1));
    assert_eq!(earlier[0]["info"]["role"], "user");
}

#[tokio::test]
async fn one_connection_sees_every_session_of_its_directory_and_no_other() {
    let server = TestServer::start().await;
    let (dir, elsewhere) = (directory(&server, "app"), directory(&server, "other"));
    let mut events = Events::open(&server, &dir, "").await;
    let a = create(&server, &dir, "a").await;
    let created = events.until(|e| e["type"] == "session.created").await;
    assert_eq!(created["properties"]["info"]["id"], a.as_str());
    let b = create(&server, &dir, "b").await;
    let outside = create(&server, &elsewhere, "outside").await;
    prompt_async(&server, &outside, "echo: not here").await;
    prompt_async(&server, &a, "echo: from a").await;
    prompt_async(&server, &b, "echo: from b").await;
    // Both runs end, in either order.
    let idle =
        |events: &Events, s: &str| events.seen.iter().any(|e| e["type"] == "session.idle" && session_of(e) == Some(s));
    while !(idle(&events, &a) && idle(&events, &b)) {
        events.until(|e| e["type"] == "session.idle").await;
    }
    assert!(events.seen.iter().all(|e| session_of(e) != Some(&outside)), "{}", types(&events.seen));
    for (session, text) in [(&a, "from a"), (&b, "from b")] {
        let list = messages(&server, session).await;
        assert_eq!(deltas(&events.seen, list[1]["info"]["id"].as_str().expect("id")), text);
    }
    let (status, deleted) = server.delete(&format!("/session/{b}")).await;
    assert_eq!((status, deleted), (StatusCode::OK, json!(true)));
    let deleted = events.until(|e| e["type"] == "session.deleted").await;
    assert_eq!(deleted["properties"]["info"]["id"], b.as_str());
}

#[tokio::test]
async fn a_client_that_connects_mid_run_or_reconnects_gets_the_run_so_far_as_deltas() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "late").await;
    // Started through Spool's own API, before any OpenCode client is connected.
    let run = server.start_run(&session, "stream: 300").await;
    // Join once part of the answer has streamed, as Spool's own stream shows it.
    let mut native = server.events(&session, common::Open::fresh()).await;
    let is_delta = |f: &common::ReceivedFrame| f.json["event"]["assistantMessageEvent"]["type"] == "text_delta";
    for _ in 0..20 {
        native.frames_until(is_delta).await;
    }

    let mut late = Events::open(&server, &dir, "").await;
    late.until(|e| e["type"] == "message.part.delta").await;
    // A second client drops its connection mid-run and comes back after more of the
    // answer went by (as the client that stayed sees it).
    let mut first = Events::open(&server, &dir, "").await;
    first.until(|e| e["type"] == "message.part.delta").await;
    drop(first);
    for _ in 0..20 {
        late.until(|e| e["type"] == "message.part.delta").await;
    }
    let mut again = Events::open(&server, &dir, "").await;
    assert_eq!(again.next().await.expect("connected")["type"], "server.connected");
    let status = again.until(|e| e["type"] == "session.status").await;
    assert_eq!(status["properties"]["status"]["type"], "busy", "a reconnect learns the session is busy");

    late.until_idle(&session).await;
    again.until_idle(&session).await;
    server.wait_run(&run).await;
    let list = messages(&server, &session).await;
    let answer = list.last().expect("answer");
    let id = answer["info"]["id"].as_str().expect("id");
    assert!(stored_text(answer).ends_with(" w300"));
    assert_eq!(deltas(&late.seen, id), stored_text(answer));
    assert_eq!(deltas(&again.seen, id), stored_text(answer));
    // Both saw the user message and the step start, though they joined after them.
    for events in [&late.seen, &again.seen] {
        assert!(events.iter().any(|e| e["type"] == "message.updated" && e["properties"]["info"]["role"] == "user"));
        assert!(events.iter().any(|e| e["properties"]["part"]["type"] == "step-start"));
    }
}

#[tokio::test]
async fn heartbeats_and_legacy_deltas() {
    let server =
        TestServer::start_with(TestOptions { heartbeat: Duration::from_millis(200), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "legacy").await;
    let mut events = Events::open(&server, &dir, "&deltas=legacy").await;
    events.until(|e| e["type"] == "server.heartbeat").await;
    prompt_async(&server, &session, "echo: one two three").await;
    events.until_idle(&session).await;
    let mut assembled = String::new();
    for e in events.seen.iter().filter(|e| e["type"] == "message.part.updated" && e["properties"]["delta"].is_string())
    {
        assembled.push_str(e["properties"]["delta"].as_str().expect("delta"));
        assert_eq!(e["properties"]["part"]["text"], assembled.as_str(), "the text so far");
    }
    assert_eq!(assembled, "one two three");
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_and_a_reconnect_starts_fresh() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "slow").await;
    let mut slow = Events::open(&server, &dir, "").await;
    assert_eq!(slow.next().await.expect("connected")["type"], "server.connected");
    // Far more than the per-connection queue (1 MiB of native frames) while nobody reads.
    prompt_async(&server, &session, "stream: 100000").await;
    // An unpaced 100,000-delta answer takes close to 15 s of a debug build on a busy
    // 2-core box; the test is about the cut, not about speed, so it waits longer.
    let (status, _) = tokio::time::timeout(Duration::from_secs(300), async {
        loop {
            let (status, s) =
                server.get(&format!("/session/status?directory={}", urlencode(dir.to_str().expect("utf-8")))).await;
            if s.get(&session).is_none() {
                return (status, s);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the run ends while the client sleeps");
    assert_eq!(status, StatusCode::OK);
    // Reading again: what was in flight arrives, then the response ends instead of
    // skipping frames.
    let ended =
        tokio::time::timeout(WAIT, async { while slow.next().await.is_some_and(|e| e["type"] != "session.idle") {} })
            .await;
    assert!(ended.is_ok(), "the cut connection ends");
    assert!(!slow.seen.iter().any(|e| e["type"] == "session.idle"), "a cut client does not see the end it missed");

    let mut fresh = Events::open(&server, &dir, "").await;
    assert_eq!(fresh.next().await.expect("connected")["type"], "server.connected");
    prompt_async(&server, &session, "echo: after the cut").await;
    fresh.until_idle(&session).await;
    let list = messages(&server, &session).await;
    assert_eq!(deltas(&fresh.seen, list.last().expect("answer")["info"]["id"].as_str().expect("id")), "after the cut");
}

#[tokio::test]
async fn a_client_back_with_its_last_event_id_is_told_the_run_that_ended_while_it_was_away() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "away").await;
    let mut events = Events::open(&server, &dir, "").await;
    let run = server.start_run(&session, "stream: 200").await;
    events.until(|e| e["type"] == "message.part.delta").await;
    let last = last_id(&events);
    drop(events);
    server.wait_run(&run).await;

    let mut back = Events::reopen(&server, &dir, Some(&last)).await;
    assert_eq!(back.next().await.expect("connected")["type"], "server.connected");
    back.until_idle(&session).await;
    let list = messages(&server, &session).await;
    let answer = list.last().expect("answer");
    let id = answer["info"]["id"].as_str().expect("id");
    let updated = back.seen.iter().find(|e| e["type"] == "message.updated" && e["properties"]["info"]["id"] == id);
    let updated = updated.expect("the finished answer's message.updated");
    assert!(updated["properties"]["info"]["time"]["completed"].is_number(), "{updated}");
    assert_eq!(assembled(&back.seen, id).0, stored_text(answer), "the whole answer, as parts to replace");
}

#[tokio::test]
async fn a_reconnect_mid_run_with_its_last_event_id_repeats_no_delta() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "resume").await;
    let mut first = Events::open(&server, &dir, "").await;
    let run = server.start_run(&session, "stream: 400").await;
    for _ in 0..20 {
        first.until(|e| e["type"] == "message.part.delta").await;
    }
    let last = last_id(&first);
    drop(first.stream);
    let mut again = Events::reopen(&server, &dir, Some(&last)).await;
    again.until_idle(&session).await;
    server.wait_run(&run).await;
    let list = messages(&server, &session).await;
    let answer = list.last().expect("answer");
    let id = answer["info"]["id"].as_str().expect("id");
    let stored = stored_text(answer);
    let mut both = first.seen.clone();
    both.extend(again.seen.iter().cloned());
    let (text, by_delta) = assembled(&both, id);
    assert_eq!(text, stored, "appending deltas and replacing parts gives the stored answer");
    assert!(by_delta <= stored.chars().count(), "no delta sent twice: {by_delta} delta chars for {}", stored.len());
}

#[tokio::test]
async fn a_permission_replied_while_the_client_was_away_is_told_on_reconnect() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "permission away").await;
    let mut events = Events::open(&server, &dir, "").await;
    prompt_async(&server, &session, r#"tool: write {"path":"x.txt","content":"hi"}"#).await;
    let asked = events.until(|e| e["type"] == "permission.asked").await;
    let id = asked["properties"]["id"].as_str().expect("id").to_owned();
    let last = last_id(&events);
    drop(events);
    let (status, ok) = server.post(&format!("/permission/{id}/reply"), json!({ "reply": "once" })).await;
    assert_eq!((status, ok), (StatusCode::OK, json!(true)));
    let mut back = Events::reopen(&server, &dir, Some(&last)).await;
    let replied = back.until(|e| e["type"] == "permission.replied").await;
    assert_eq!(replied["properties"]["permissionID"], id.as_str());
    assert_eq!(replied["properties"]["reply"], "once");
}

/// Drops `/event` at random points of a 1,500-word answer and comes back as an OpenCode
/// client does, with the `Last-Event-ID` of the last event it had: appending
/// `message.part.delta`s, replacing a part with `message.part.updated`. The client ends
/// holding the stored answer, no delta arrives twice, and `session.idle` comes.
#[tokio::test]
async fn random_drops_lose_and_repeat_no_word() {
    let mut rng = common::Rng::seeded(0x5eed_0004);
    let seed = rng.seed;
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(1), ..TestOptions::default() }).await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "drops").await;
    let mut events = Events::open(&server, &dir, "").await;
    let run = server.start_run(&session, "stream: 1500").await;
    let (mut all, mut drops) = (Vec::new(), 0);
    // Heartbeats keep a stream alive forever: a missed `session.idle` must fail, not hang.
    let deadline = tokio::time::Instant::now() + 4 * WAIT;
    'run: loop {
        let mut budget = 10 + rng.below(80);
        while budget > 0 {
            if tokio::time::Instant::now() > deadline {
                let tail = &all[all.len().saturating_sub(40)..];
                panic!("no session.idle after {drops} drops (seed {seed}); last events: {}", client::types(tail));
            }
            let e = events.next().await.expect("the stream stays open until dropped");
            all.push(e.clone());
            if e["type"] == "message.part.delta" {
                budget -= 1;
            }
            if e["type"] == "session.idle" && e["properties"]["sessionID"] == session.as_str() {
                break 'run;
            }
        }
        drops += 1;
        let last = last_id(&events);
        drop(events);
        events = Events::reopen(&server, &dir, Some(&last)).await;
    }
    server.wait_run(&run).await;
    let list = messages(&server, &session).await;
    let answer = list.last().expect("answer");
    let stored = stored_text(answer);
    let (text, by_delta) = assembled(&all, answer["info"]["id"].as_str().expect("id"));
    assert!(drops >= 10, "only {drops} drops (seed {seed})");
    assert_eq!(text, stored, "{drops} drops (seed {seed})");
    assert!(by_delta <= stored.chars().count(), "a delta sent twice: {by_delta} delta chars (seed {seed})");
}

#[tokio::test]
async fn a_todo_list_is_todo_updated_on_the_event_stream_and_get_todo() {
    let server = TestServer::start().await;
    let dir = directory(&server, "todos");
    let session = create(&server, &dir, "todos").await;
    let (status, empty) = server.get(&format!("/session/{session}/todo")).await;
    assert_eq!((status, empty), (StatusCode::OK, json!([])));
    let mut events = Events::open(&server, &dir, "").await;
    let args = json!({"todos": [
        {"content": "Read the code", "status": "completed", "priority": "low"},
        {"content": "Write the tool", "status": "in_progress"},
    ]});
    prompt_async(&server, &session, &format!("tool: todo_write {args}")).await;
    let updated = events.until(|e| e["type"] == "todo.updated").await;
    let todos = json!([
        {"content": "Read the code", "status": "completed", "priority": "low", "id": "1"},
        {"content": "Write the tool", "status": "in_progress", "priority": "medium", "id": "2"},
    ]);
    assert_eq!(updated["properties"], json!({"sessionID": session, "todos": todos}));
    events.until_idle(&session).await;
    let (status, listed) = server.get(&format!("/session/{session}/todo")).await;
    assert_eq!((status, listed), (StatusCode::OK, todos), "what the event said");
    let (status, _) = server.get("/session/ses_01jd0000000000000000000009/todo").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_git_change_of_an_idle_session_is_session_diff_on_the_event_stream() {
    let server = TestServer::start_with(common::git_polling(Duration::from_millis(50))).await;
    let dir = directory(&server, "repo");
    let repo = common::git_repo(&dir, &[("a.txt", "one\ntwo\n"), ("gone.txt", "x\n")]);
    let mut events = Events::open(&server, &dir, "").await;
    let session = create(&server, &dir, "git").await;
    events.until(|e| e["type"] == "session.created" && session_of(e) == Some(&session)).await;
    server.wait_git_primed(&session).await;

    std::fs::write(dir.join("a.txt"), "one\n2\n").expect("edit");
    std::fs::remove_file(dir.join("gone.txt")).expect("delete");
    std::fs::write(dir.join("new.txt"), "fresh\n").expect("new file");
    let diff = events.until(|e| e["type"] == "session.diff").await;
    assert_eq!(diff["properties"]["sessionID"], session.as_str());
    let file = |path: &str, status: &str, additions: u64, deletions: u64| json!({"file": path, "before": "", "after": "", "additions": additions, "deletions": deletions, "status": status});
    assert_eq!(
        diff["properties"]["diff"],
        json!([file("a.txt", "modified", 1, 1), file("gone.txt", "deleted", 0, 1), file("new.txt", "added", 1, 0)])
    );
    drop(repo);
}

#[tokio::test]
async fn a_prompts_model_as_seed_004s_string_or_the_sdks_object_picks_a_configured_model() {
    // The default model is one no run here could reach; the scripted model is the other.
    let unreachable = spool_model::OpenAiConfig::new("http://127.0.0.1:9/v1".to_owned(), None, "far-away");
    let far = std::sync::Arc::new(spool_model::OpenAiModel::new(unreachable).expect("model"));
    let models = spool_engine::Models::new(far).with(
        std::sync::Arc::new(spool_model::ScriptedModel::new(Duration::ZERO)),
        None,
        false,
    );
    let options = TestOptions { models: Some(common::ModelsOverride(models)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let dir = directory(&server, "models");
    let model_of = async |session: &str| {
        let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(status, StatusCode::OK, "{detail}");
        detail["model"].clone()
    };
    for (n, model) in
        [json!("spool/scripted"), json!({ "providerID": "spool", "modelID": "scripted" })].into_iter().enumerate()
    {
        let session = create(&server, &dir, &format!("model {n}")).await;
        let body = json!({ "parts": [{ "type": "text", "text": "echo: picked" }], "model": model });
        let (status, reply) = server.post(&format!("/session/{session}/message"), body).await;
        assert_eq!(status, StatusCode::OK, "{model}: {reply}");
        assert_eq!(stored_text(&reply), "picked", "{model} ran on the scripted model");
        assert_eq!(reply["info"]["modelID"], "scripted");
        assert_eq!(model_of(&session).await, "scripted");
    }
    // A model Spool does not have (the client's own provider) is no error: it is ignored.
    let session = create(&server, &dir, "unknown model").await;
    let body = json!({ "parts": [{ "type": "text", "text": "echo: x" }], "model": "anthropic/claude-sonnet-4" });
    let (status, reply) = server.post(&format!("/session/{session}/prompt_async"), body).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{reply}");
    assert_ne!(model_of(&session).await, "anthropic/claude-sonnet-4");
    let (status, _) = server.post(&format!("/session/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_global_stream_carries_every_directorys_sessions_each_under_its_directory() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let (one, two) = (directory(&server, "one"), directory(&server, "two"));
    // Busy before the connection opens: found at connect, in whichever project it is.
    let early = create(&server, &one, "early").await;
    prompt_async(&server, &early, "stream: 200").await;
    let res = server.client.get(server.url("/global/event")).send().await.expect("open /global/event");
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let mut seen: Vec<Value> = Vec::new();
    let first = next_global(&mut stream, &mut seen).await;
    assert_eq!(first["directory"], "global");
    assert_eq!(first["payload"]["type"], "server.connected");
    assert!(first["payload"]["id"].as_str().is_some_and(|id| id.starts_with("evt_")), "{first}");
    let late = create(&server, &two, "late").await;
    prompt_async(&server, &late, "echo: from two").await;
    let idle = |seen: &[Value], s: &str| {
        seen.iter().any(|e| e["payload"]["type"] == "session.idle" && e["payload"]["properties"]["sessionID"] == s)
    };
    while !(idle(&seen, &early) && idle(&seen, &late)) {
        next_global(&mut stream, &mut seen).await;
    }
    for (session, dir) in [(&early, &one), (&late, &two)] {
        let of = |e: &&Value| session_of(&e["payload"]) == Some(session.as_str());
        let events: Vec<&Value> = seen.iter().filter(of).collect();
        assert!(events.iter().all(|e| e["directory"] == dir.to_string_lossy().as_ref()), "{session}: {events:?}");
        let list = messages(&server, session).await;
        let payloads: Vec<Value> = events.iter().map(|e| e["payload"].clone()).collect();
        let text = stored_text(&list[1]);
        assert_eq!(deltas(&payloads, list[1]["info"]["id"].as_str().expect("id")), text);
    }
    // A deleted session is told under its directory too.
    let (status, _) = server.delete(&format!("/session/{late}")).await;
    assert_eq!(status, StatusCode::OK);
    loop {
        let e = next_global(&mut stream, &mut seen).await;
        if e["payload"]["type"] == "session.deleted" {
            assert_eq!(e["payload"]["properties"]["info"]["id"], late.as_str());
            assert_eq!(e["directory"], two.to_string_lossy().as_ref());
            break;
        }
    }
}

/// A call of a tool the prompt declared (issue 40) waits for the client that declared
/// it, not for a person: an OpenCode client sees its tool part running, is asked
/// nothing, and the part completes with the client's result.
#[tokio::test]
async fn a_client_tool_call_is_a_running_tool_part_and_never_a_permission() {
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "client tool").await;
    let mut events = Events::open(&server, &dir, "").await;
    let prompt = json!({
        "text": "tool: get_location {}",
        "tools": [{"name": "get_location", "description": "Where the person is"}],
    });
    let (status, started) = server.post(&format!("/api/sessions/{session}/prompt"), prompt).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let tool = |status: &'static str| {
        move |e: &Value| {
            e["properties"]["part"]["type"] == "tool" && e["properties"]["part"]["state"]["status"] == status
        }
    };
    events.until(tool("running")).await;
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let approval = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("the call waits").to_owned();
    let at = urlencode(dir.to_str().expect("utf-8"));
    let (_, permissions) = server.get(&format!("/permission?directory={at}")).await;
    assert_eq!(permissions, json!([]));
    let list = messages(&server, &session).await;
    assert_eq!(list[1]["parts"][1]["state"]["status"], "running", "the history says so too: {}", list[1]);

    let (status, taken) = server.post(&format!("/api/tool-calls/{approval}/result"), json!({"output": "Lisbon"})).await;
    assert_eq!(status, StatusCode::OK, "{taken}");
    events.until(tool("completed")).await;
    events.until_idle(&session).await;
    let asked = |e: &&Value| {
        let kind = e["type"].as_str().unwrap_or_default();
        kind.starts_with("permission.") || kind.starts_with("question.")
    };
    assert_eq!(events.seen.iter().find(asked), None, "{}", types(&events.seen));
    let list = messages(&server, &session).await;
    assert_eq!(list[1]["parts"][1]["state"]["status"], "completed", "{}", list[1]);
    assert_eq!(list[1]["parts"][1]["state"]["output"], "Lisbon");
}

/// A prompt's `file` part (`{type: "file", mime, filename, url}`, the bytes as a data
/// URL) reaches the model (issue 42); a `file://` URL, which names a file on the client's
/// machine, is refused saying what to send instead.
#[tokio::test]
async fn a_file_part_reaches_the_model_and_a_file_url_is_refused() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let server = TestServer::start().await;
    let dir = directory(&server, "app");
    let session = create(&server, &dir, "files").await;
    let log = b"line one\n";
    let url = format!("data:text/plain;base64,{}", base64::engine::general_purpose::STANDARD.encode(log));
    let file = json!({"type": "file", "mime": "text/plain", "filename": "app.log", "url": url});
    let body = json!({"parts": [file, {"type": "text", "text": "echo: seen"}]});
    let (status, reply) = server.post(&format!("/session/{session}/message"), body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let sha: String = sha2::Sha256::digest(log).iter().map(|b| format!("{b:02x}")).collect();
    let want = format!("Received app.log (text/plain, 9 bytes, sha256 {}…, bytes match)\nseen", &sha[..8]);
    assert_eq!(stored_text(&reply), want);

    let local = json!({"type": "file", "mime": "text/plain", "filename": "app.log", "url": "file:///home/me/app.log"});
    let body = json!({"parts": [local, {"type": "text", "text": "look"}]});
    let (status, refused) = server.post(&format!("/session/{session}/message"), body).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("unsupported_file_url")));
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("data URL")), "{refused}");
}
