//! The JSON API and the basics of the session stream, through a real server on a real
//! port: status codes, error bodies, records as stored, runs reaching their end.

use crate::common;

use common::{Open, TestOptions, TestServer, WAIT, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

fn assert_error(status: StatusCode, body: &Value, want_status: StatusCode, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], want_code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "error without message: {body}");
}

fn indexes(page: &Value) -> Vec<u64> {
    page["messages"].as_array().expect("messages array").iter().map(|m| m["index"].as_u64().expect("index")).collect()
}

#[tokio::test]
async fn health_names_the_version_and_model() {
    let server = TestServer::start().await;
    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION"), "model": "scripted" }));
}

#[tokio::test]
async fn ready_lists_its_checks_without_a_token() {
    let server = TestServer::start().await;
    server.engine.auth().create_token("alice").await.expect("token");
    // Ready once the lease loop's first pass (started with the engine) is done.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (status, body) = loop {
        let (status, body) = server.get("/api/ready").await;
        if status == StatusCode::OK || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        assert_eq!(body["reason"], "leases: the lease loop has not finished a pass yet", "{body}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status, StatusCode::OK, "{body}");
    // No frame bus here: no `bus` check.
    assert_eq!(body, json!({"status": "ready", "checks": {"store": {"state": "ok"}, "leases": {"state": "ok"}}}));
}

#[tokio::test]
async fn every_response_carries_a_request_id_kept_from_the_client_when_plain() {
    let server = TestServer::start().await;
    let id_of = |res: &reqwest::Response| res.headers()["x-request-id"].to_str().expect("ASCII").to_owned();
    let get = |id: Option<&str>| {
        let req = server.client.get(server.url("/api/health"));
        match id {
            Some(id) => req.header("x-request-id", id),
            None => req,
        }
        .send()
    };
    let (a, b) = (get(None).await.expect("request"), get(None).await.expect("request"));
    assert_eq!(id_of(&a).len(), 36, "a fresh UUID: {}", id_of(&a));
    assert_ne!(id_of(&a), id_of(&b), "one id per request");
    assert_eq!(id_of(&get(Some("lb-7f3a:42")).await.expect("request")), "lb-7f3a:42", "a proxy's id is kept");
    for unusable in ["x".repeat(65), "a b".into(), "{\"forged\":1}".into()] {
        let answered = id_of(&get(Some(&unusable)).await.expect("request"));
        assert_eq!(answered.len(), 36, "{unusable:?} is replaced by a UUID, got {answered:?}");
    }
}

#[tokio::test]
async fn projects_are_created_canonical_renamed_listed_and_deleted() {
    let server = TestServer::start().await;
    let dir = server.project_dir();
    let canonical = std::fs::canonicalize(&dir).expect("canonical path");

    // A roundabout spelling of the directory is stored canonical; the name defaults to
    // the directory's name.
    let roundabout = dir.join("src").join("..");
    let (status, project) = server.post("/api/projects", json!({ "path": roundabout })).await;
    assert_eq!(status, StatusCode::CREATED, "{project}");
    assert_eq!(project["path"], canonical.to_str().expect("utf-8 path"));
    assert_eq!(project["name"], "project");
    let id = id_of(&project);
    assert!(id.starts_with("prj_"));
    assert!(project["ownerId"].as_str().is_some_and(|o| o.starts_with("usr_")));

    // The same directory again is a conflict.
    let (status, body) = server.post("/api/projects", json!({ "path": dir })).await;
    assert_error(status, &body, StatusCode::CONFLICT, "project_exists");

    // Not a directory, and missing: 400 with the engine's code.
    let (status, body) = server.post("/api/projects", json!({ "path": dir.join("README.md") })).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_path");
    let (status, body) = server.post("/api/projects", json!({ "path": dir.join("no-such-dir") })).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_path");

    // An explicit name.
    let other = server.new_dir("other");
    let (status, named) = server.post("/api/projects", json!({ "path": other, "name": "Other one" })).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(named["name"], "Other one");

    let (status, renamed) = server.patch(&format!("/api/projects/{id}"), json!({ "name": "Renamed" })).await;
    assert_eq!(status, StatusCode::OK, "{renamed}");
    assert_eq!(renamed["name"], "Renamed");
    let (status, body) = server.patch(&format!("/api/projects/{id}"), json!({ "name": "  " })).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_name");

    let (status, list) = server.get("/api/projects").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list.as_array().expect("array").iter().map(|p| p["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["Renamed", "Other one"]);

    // Deleting a project deletes its sessions.
    let session = id_of(&server.create_session(&id, Some("doomed")).await);
    let (status, body) = server.delete(&format!("/api/projects/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(body, Value::Null);
    let (status, body) = server.get(&format!("/api/sessions/{session}")).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = server.get(&format!("/api/projects/{id}/sessions")).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = server.delete(&format!("/api/projects/{id}")).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (_, list) = server.get("/api/projects").await;
    assert_eq!(list.as_array().expect("array").len(), 1);
    // The files are untouched.
    assert!(dir.join("README.md").is_file());
}

#[tokio::test]
async fn sessions_are_created_listed_by_archive_flag_patched_and_deleted() {
    let server = TestServer::start().await;
    let project = server.default_project().await;

    let (status, session) = server.post("/api/sessions", json!({ "projectId": project, "title": "First" })).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    assert_eq!(session["title"], "First");
    assert_eq!(session["archived"], false);
    assert_eq!(session["projectId"], project.as_str());
    let first = id_of(&session);
    let second = id_of(&server.create_session(&project, None).await);

    let list_ids = |list: &Value| -> Vec<String> { list.as_array().expect("array").iter().map(id_of).collect() };
    let (status, list) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(status, StatusCode::OK);
    let mut ids = list_ids(&list);
    ids.sort();
    assert_eq!(ids, [first.clone(), second.clone()]);
    assert!(list.as_array().expect("array").iter().all(|s| s["status"] == "idle"));

    // Archive the first: it moves to the archived list.
    let (status, patched) = server.patch(&format!("/api/sessions/{first}"), json!({ "archived": true })).await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["archived"], true);
    assert_eq!(patched["title"], "First");
    let (_, active) = server.get(&format!("/api/projects/{project}/sessions?archived=false")).await;
    assert_eq!(list_ids(&active), vec![second.clone()]);
    let (_, default) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(list_ids(&default), vec![second.clone()]);
    let (_, archived) = server.get(&format!("/api/projects/{project}/sessions?archived=true")).await;
    assert_eq!(list_ids(&archived), vec![first.clone()]);
    let (status, body) = server.get(&format!("/api/projects/{project}/sessions?archived=maybe")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_query");

    // Title patch; wrong types are refused, unknown fields ignored.
    let (status, patched) =
        server.patch(&format!("/api/sessions/{second}"), json!({ "title": "Named", "color": "blue" })).await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["title"], "Named");
    assert_eq!(patched["titleSet"], true);
    let (status, body) = server.patch(&format!("/api/sessions/{second}"), json!({ "archived": "yes" })).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_body");

    // The detail carries the snapshot state and its cursor.
    let (status, detail) = server.get(&format!("/api/sessions/{second}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["id"], second.as_str());
    assert_eq!(detail["title"], "Named");
    assert_eq!(detail["status"], "idle");
    assert_eq!(detail["state"]["session"]["id"], second.as_str());
    assert_eq!(detail["state"]["total"], 0);
    assert!(detail["streamId"].as_str().is_some_and(|s| s.starts_with("stm_")));
    assert!(detail["seq"].is_u64());

    let (status, body) = server.delete(&format!("/api/sessions/{second}")).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    for path in [format!("/api/sessions/{second}"), format!("/api/sessions/{second}/messages")] {
        let (status, body) = server.get(&path).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    }
    let (status, body) = server.delete(&format!("/api/sessions/{second}")).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (_, archived) = server.get(&format!("/api/projects/{project}/sessions?archived=true")).await;
    assert_eq!(list_ids(&archived), [first]);
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_json_404s() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let project = server.default_project().await;
    let missing = [
        format!("/api/sessions/{}", spool_protocol::SessionId::new()),
        format!("/api/sessions/{}/messages", spool_protocol::SessionId::new()),
        format!("/api/sessions/{}/events", spool_protocol::SessionId::new()),
        format!("/api/projects/{}/sessions", spool_protocol::ProjectId::new()),
        format!("/api/runs/{}", spool_protocol::RunId::new()),
        "/api/sessions/nope".into(),
        "/api/sessions/ses_short".into(),
        // Well-formed, but the wrong kind of id.
        format!("/api/sessions/{project}"),
        format!("/api/runs/{session}"),
        "/api/projects/%FF%FE/sessions".into(),
    ];
    for path in missing {
        let (status, body) = server.get(&path).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    }
    let (status, body) = server.post("/api/sessions/nope/prompt", json!({ "text": "hi" })).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = server.post("/api/sessions", json!({ "projectId": "prj_nope" })).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = server.post("/api/sessions", json!({ "projectId": spool_protocol::ProjectId::new() })).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt_url = server.url(&format!("/api/sessions/{session}/prompt"));
    let json_post =
        |body: &'static str| server.client.post(&prompt_url).header("content-type", "application/json").body(body);

    let (status, body) = server.send(json_post("{\"text\": ")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "malformed_json");
    let (status, body) = server.send(json_post("{\"text\": 5}")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_body");
    let (status, body) = server.send(json_post("{}")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_body");
    let (status, body) = server.send(server.client.post(&prompt_url).body("{\"text\": \"hi\"}")).await;
    assert_error(status, &body, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let (status, body) = server.send(json_post("{\"text\": \"   \"}")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "empty_prompt");

    let (status, body) = server.get(&format!("/api/sessions/{session}/messages?limit=abc")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_query");
    let (status, body) = server.get(&format!("/api/sessions/{session}/messages?before=-1")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_query");
    let (status, body) = server.get(&format!("/api/sessions/{session}/messages?limit=0")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_limit");

    let (status, body) = server.get("/api/nothing-here").await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = server.get("/api/sessions/ses_01jd0000000000000000000000/nope").await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");

    let res = server.client.delete(server.url("/api/health")).send().await.expect("request");
    assert_eq!(res.headers().get("allow").and_then(|v| v.to_str().ok()), Some("GET,HEAD"));
    let status = res.status();
    let body: Value = res.json().await.expect("json body");
    assert_error(status, &body, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
}

#[tokio::test]
async fn a_body_over_one_mebibyte_is_a_json_413() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let text = "x".repeat((1 << 20) + 1);
    let (status, body) = server.post("/api/projects", json!({ "path": text })).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    // The prompt route takes larger bodies (files inline, see README "Attachments"); its
    // text has a limit of its own.
    let (status, body) = server.prompt(&session, &text, None).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "prompt_too_large");
    // The server is fine afterwards.
    let (status, _) = server.get("/api/health").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_prompt_runs_to_completion_and_lands_in_history() {
    let server = TestServer::start().await;
    let session = server.new_session().await;

    let (status, accepted) = server.prompt(&session, "echo: hello brave world", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run_id = accepted["runId"].as_str().expect("runId").to_owned();
    assert!(run_id.starts_with("run_"));
    let request_id = accepted["requestId"].as_str().expect("a requestId is assigned");
    assert!(!request_id.is_empty());

    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["id"], run_id.as_str());
    assert_eq!(run["sessionId"], session.as_str());
    assert_eq!(run["requestId"], request_id);
    assert_eq!(run["userMessageIndex"], 0);
    assert!(run["endedAt"].is_u64() && run["firstTokenAt"].is_u64(), "{run}");
    assert!(run["usage"]["output"].as_u64().is_some_and(|n| n > 0), "{run}");

    let page = server.messages(&session, "").await;
    assert_eq!(page["total"], 2);
    assert_eq!(indexes(&page), [0, 1]);
    let messages = page["messages"].as_array().expect("array");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"][0]["text"], "echo: hello brave world");
    assert_eq!(messages[1]["role"], "assistant");
    let text: String =
        messages[1]["content"].as_array().expect("content").iter().filter_map(|c| c["text"].as_str()).collect();
    assert_eq!(text, "hello brave world");

    // The session is idle again and got its title from the first prompt.
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["status"], "idle");
    assert_eq!(detail["state"]["total"], 2);
}

#[tokio::test]
async fn history_pages_backwards_with_absolute_indexes() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    for word in ["one", "two", "three"] {
        let run = server.run_prompt(&session, &format!("echo: {word}")).await;
        assert_eq!(run["status"], "completed");
    }
    let latest = server.messages(&session, "?limit=2").await;
    assert_eq!((indexes(&latest), latest["total"].clone()), (vec![4, 5], json!(6)));
    assert_eq!(latest["messages"][0]["content"][0]["text"], "echo: three");
    let earlier = server.messages(&session, "?before=4&limit=2").await;
    assert_eq!((indexes(&earlier), earlier["total"].clone()), (vec![2, 3], json!(6)));
    let first = server.messages(&session, "?before=2").await;
    assert_eq!(indexes(&first), [0, 1]);
    let none = server.messages(&session, "?before=0").await;
    assert_eq!((indexes(&none), none["total"].clone()), (vec![], json!(6)));
}

#[tokio::test]
async fn the_same_request_id_twice_is_one_run() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (status, first) = server.prompt(&session, "echo: once", Some("req-abc-1")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(first["requestId"], "req-abc-1");
    let (status, again) = server.prompt(&session, "echo: once", Some("req-abc-1")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(again, first);
    let run_id = first["runId"].as_str().expect("runId");
    server.wait_run(run_id).await;
    // A retry after the run settled still names the same run and starts nothing.
    let (_, late) = server.prompt(&session, "echo: once", Some("req-abc-1")).await;
    assert_eq!(late, first);

    let page = server.messages(&session, "").await;
    let users = page["messages"].as_array().expect("array").iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "{page}");
    assert_eq!(page["total"], 2);
}

#[tokio::test]
async fn a_busy_session_refuses_prompts_and_abort_cancels_the_run() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(20), ..TestOptions::default() }).await;
    let session = server.new_session().await;

    // Nothing running: abort is a no-op.
    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "aborted": false, "runId": null }));

    let run_id = server.start_run(&session, "stream: 200").await;
    let (status, body) = server.prompt(&session, "echo: me too", None).await;
    assert_error(status, &body, StatusCode::CONFLICT, "session_busy");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["status"], "busy");
    assert_eq!(detail["state"]["activeRun"]["runId"], run_id.as_str());

    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "aborted": true, "runId": run_id }));
    // Abort answers once the run is settled.
    let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
    assert_eq!(run["status"], "cancelled", "{run}");

    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), Value::Null).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "aborted": false, "runId": null })));
    // The session takes prompts again.
    let (status, _) = server.prompt(&session, "echo: after", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_fresh_stream_starts_with_a_snapshot_and_has_the_sse_headers() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;

    let mut stream = server.events(&session, Open::fresh()).await;
    assert_eq!(stream.header("content-type"), "text/event-stream");
    assert_eq!(stream.header("cache-control"), "no-cache, no-transform");
    assert_eq!(stream.header("x-accel-buffering"), "no");

    let event = stream.next_event().await.expect("a first event");
    assert_eq!(event.event, None, "business frames have no event field");
    let json: Value = serde_json::from_str(&event.data).expect("JSON data");
    assert_eq!(json["type"], "session.snapshot");
    assert_eq!(json["sessionId"], session.as_str());
    assert_eq!(json["streamId"], detail["streamId"]);
    assert_eq!(json["seq"], detail["seq"]);
    let id = format!("{}:{}", json["streamId"].as_str().expect("streamId"), json["seq"]);
    assert_eq!(event.id.as_deref(), Some(id.as_str()));
    assert_eq!(json["state"]["session"]["id"], session.as_str());

    // A cursor that does not parse (header or query) is no cursor: a snapshot again.
    for open in [Open::last_event_id("garbage"), Open::cursor("stm_x:1"), Open { approvals: true, ..Open::default() }] {
        let mut again = server.events(&session, open).await;
        let frame = again.next_frame().await.expect("a frame");
        assert_eq!(frame.kind, "session.snapshot");
    }
}

#[tokio::test]
async fn heartbeats_come_every_interval_without_an_id() {
    let server =
        TestServer::start_with(TestOptions { heartbeat: Duration::from_secs(1), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    let after_snapshot = stream.raw.len();

    // Exactly the heartbeat bytes, twice, in a silence (when they come is the timer's
    // own test, on a paused clock: `http::sse::tests`).
    for _ in 0..2 {
        let event = stream.next_event_within(common::WAIT).await.expect("heartbeat in time").expect("open");
        assert_eq!(event.event.as_deref(), Some("heartbeat"));
        assert_eq!(event.data, "{}");
        assert_eq!(event.id, None);
    }
    assert_eq!(&stream.raw[after_snapshot..], b"event: heartbeat\ndata: {}\n\nevent: heartbeat\ndata: {}\n\n");
}

#[tokio::test]
async fn live_frames_follow_the_snapshot_and_deleting_the_session_ends_the_stream() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    let snapshot = stream.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.kind, "session.snapshot");
    assert_eq!(snapshot.state().total, 0);

    let run_id = server.start_run(&session, "echo: live words").await;
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let accepted = &frames[0];
    assert_eq!(accepted.kind, "run.accepted");
    assert_eq!(accepted.json["runId"], run_id.as_str());
    assert!(frames.iter().all(|f| f.stream_id == snapshot.stream_id && f.session_id == session));
    // Dense seq after the snapshot's.
    let seqs: Vec<u64> = frames.iter().map(|f| f.seq).collect();
    let expected: Vec<u64> = (snapshot.seq + 1..=snapshot.seq + frames.len() as u64).collect();
    assert_eq!(seqs, expected);

    let (status, _) = server.delete(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    stream.expect_end(WAIT).await;
    assert_eq!(stream.error, None, "the body ends cleanly");
}
