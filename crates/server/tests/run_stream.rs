//! The run stream of seed 003 through a real server on a real port: `POST /api/chat`
//! answers with `event:` / `data:` SSE numbered 1, 2, 3 …, ends after `interrupt`,
//! `done` or `error`, and `GET /api/runs/:id/events?after=N` re-attaches with exactly
//! the missed events — or, once they left the buffer, a snapshot at the run's current
//! sequence. A run's sequence is the run's: every stream of one run continues it.
//!
//! The client these tests play (reading and checking events, and a seed 003 client
//! that rebuilds a run from several streams) is in `run_stream/client.rs`; the models
//! that script a run's tool calls are in `run_stream/models.rs`.

mod client;
mod models;

use crate::common;

use client::{
    Client, Event, assert_dense, kinds, next, open_chat, open_events, push_out_of_the_buffer, read_to_end,
    resume_stream, run_id, run_stream, stored_answer, text_of,
};
use common::{ModelsOverride, TestOptions, TestServer, WAIT, id_of};
use models::{Chatty, TwoCalls};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, Models};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn chat_streams_a_run_as_seed_003_events_ending_with_done() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let res = open_chat(
        &server,
        json!({"projectId": project, "text": "tool: read {\"path\":\"README.md\"}", "requestId": "golden-1"}),
    )
    .await;
    let mut stream = run_stream(res);
    let events = read_to_end(&mut stream).await;
    assert_dense(&events, 1);
    assert_eq!(kinds(&events).first(), Some(&"run_started"));
    assert_eq!(kinds(&events).last(), Some(&"done"));
    let session = events[0].data["sessionId"].as_str().expect("sessionId").to_owned();
    let (text, message_id) = stored_answer(&server, &session).await;
    assert_eq!(text_of(&events), text, "the deltas add up to the stored answer");
    assert_eq!(events.last().expect("done").data["messageId"], message_id.as_str());
    let finished = events.iter().find(|e| e.kind == "tool_finished").expect("tool_finished");
    assert_eq!(finished.data["status"], "success");
    assert_eq!(finished.data["summary"], "# Test project (+1 more line)");

    let golden: Vec<&Value> =
        events.iter().filter(|e| e.kind != "text_delta" || e.sequence() <= 4).map(|e| &e.data).collect();
    spool_test_support::golden::settings().bind(|| insta::assert_json_snapshot!(golden));
}

#[tokio::test]
async fn chat_refusals_are_json_and_leave_nothing_behind() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let cases = [
        (json!({"text": "hi"}), StatusCode::BAD_REQUEST, "missing_session"),
        (json!({"projectId": project, "text": "  "}), StatusCode::BAD_REQUEST, "empty_prompt"),
        (json!({"sessionId": "ses_01jd0000000000000000000000", "text": "hi"}), StatusCode::NOT_FOUND, "not_found"),
        (json!({"projectId": "prj_nope", "text": "hi"}), StatusCode::NOT_FOUND, "not_found"),
        (json!({"projectId": project}), StatusCode::BAD_REQUEST, "invalid_body"),
    ];
    for (body, status, code) in cases {
        let (got, error) = server.send(server.client.post(server.url("/api/chat")).json(&body)).await;
        assert_eq!((got, error["error"]["code"].as_str()), (status, Some(code)), "{body}");
    }
    let (_, sessions) = server.get(&format!("/api/projects/{project}/sessions")).await;
    assert_eq!(sessions, json!([]), "a refused chat creates no session");

    // A prompt while a run is active is refused the same way.
    let session = server.new_session().await;
    let mut view = server.events(&session, common::Open { approvals: true, ..Default::default() }).await;
    view.next_frame().await.expect("snapshot");
    let parked =
        open_chat(&server, json!({"sessionId": session, "text": "tool: write {\"path\":\"a\",\"content\":\"b\"}"}))
            .await;
    let events = read_to_end(&mut run_stream(parked)).await;
    assert_eq!(kinds(&events).last(), Some(&"interrupt"));
    let (status, error) = server
        .send(server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": "hi"})))
        .await;
    assert_eq!((status, error["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("session_busy")));
}

#[tokio::test]
async fn an_interrupt_ends_the_stream_and_the_continuation_follows_the_decision() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut view = server.events(&session, common::Open { approvals: true, ..Default::default() }).await;
    view.next_frame().await.expect("snapshot");
    let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    assert_dense(&first, 1);
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    assert_eq!(interrupt.data["kind"], "confirm_action");
    assert!(interrupt.data["payload"]["change"].as_str().is_some_and(|c| c.contains("out.txt")), "{}", interrupt.data);
    let run = run_id(&first);

    // Re-attaching while it waits: the same events, the same numbers, the same end.
    let again = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    assert_eq!(again, first);
    let nothing =
        read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={}", interrupt.sequence())).await))
            .await;
    assert_eq!(nothing, vec![], "nothing after the interrupt yet, and the run still waits");

    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let (status, body) = server
        .post(
            &format!("/api/runs/{run}/resume"),
            json!({"interruptId": approval, "decision": "approve", "idempotencyKey": "once"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = interrupt.sequence();
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={after}")).await)).await;
    assert_dense(&rest, after + 1);
    assert_eq!(kinds(&rest)[..2], ["tool_started", "tool_finished"]);
    assert_eq!(kinds(&rest).last(), Some(&"done"));
    assert_eq!(std::fs::read_to_string(server.project_dir().join("out.txt")).expect("written"), "hello");

    // From the start, a decided interrupt no longer ends the stream.
    let whole = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    let mut joined = first.clone();
    joined.extend(rest);
    assert_eq!(whole, joined);
}

/// Seed 003: a plain reject only changes states. The run ends `cancelled` with an
/// `error` event, and the call that never ran is never said to have started.
#[tokio::test]
async fn a_plain_reject_cancels_the_run_and_no_tool_starts() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt = format!("tool: write {}", json!({"path": "no.txt", "content": "x"}));
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    let run = run_id(&first);
    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let (status, body) = server
        .post(
            &format!("/api/runs/{run}/resume"),
            json!({"interruptId": approval, "decision": "reject", "idempotencyKey": "no"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let after = interrupt.sequence();
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={after}")).await)).await;
    assert_eq!(kinds(&rest), ["tool_finished", "error"], "nothing starts; the call ends, then the run");
    assert_eq!(rest[0].data["status"], "error", "{}", rest[0].data);
    assert_eq!(rest[1].data["code"], "approval_rejected", "{}", rest[1].data);
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    assert!(!server.project_dir().join("no.txt").exists());
}

#[tokio::test]
async fn a_client_that_drops_mid_run_reattaches_to_exactly_what_it_missed() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(3), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 60", "requestId": "drop-1"})).await,
    );
    let mut seen = Vec::new();
    while seen.len() < 10 {
        seen.push(next(&mut stream).await.expect("an event"));
    }
    drop(stream);
    let run = run_id(&seen);

    // Last-Event-ID (what an EventSource sends) beats the query.
    let request = server
        .client
        .get(server.url(&format!("/api/runs/{run}/events?after=1")))
        .header("last-event-id", seen.last().expect("seen").sequence().to_string());
    let res = tokio::time::timeout(WAIT, request.send()).await.expect("in time").expect("re-attach");
    let rest = read_to_end(&mut run_stream(res)).await;
    assert_dense(&rest, 11);
    seen.extend(rest);
    assert_eq!(kinds(&seen).last(), Some(&"done"));
    let (text, _) = stored_answer(&server, &session).await;
    assert_eq!(text_of(&seen), text, "no delta repeated, none missing");

    // A retried POST with the same requestId follows the same run: the same events.
    let retried = read_to_end(&mut run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 60", "requestId": "drop-1"})).await,
    ))
    .await;
    assert_eq!(retried, seen);
}

/// Once the frames after the client's last event left the buffer, the run's frame log
/// replays them exactly (`replay.rs` has the byte-for-byte checks, and the snapshot a
/// run without a whole log gets).
#[tokio::test]
async fn once_the_missed_frames_left_the_buffer_a_reattach_replays_them_from_the_runs_log() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(1), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = run_stream(open_chat(&server, json!({"sessionId": session, "text": "stream: 1000"})).await);
    let mut seen = Vec::new();
    while seen.len() < 300 {
        seen.push(next(&mut stream).await.expect("an event"));
    }
    drop(stream);
    let run = run_id(&seen);
    // 700 more deltas: the frames after the client's last event are gone.
    server.wait_run(&run).await;
    crate::replay::logged(&server, &run).await;
    let (text, _) = stored_answer(&server, &session).await;
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, "?after=300").await)).await;
    // The run's numbers: run_started, 1,000 deltas, done.
    assert_dense(&rest, 301);
    assert_eq!(kinds(&rest).last(), Some(&"done"));
    assert_eq!(rest.last().expect("done").sequence(), 1002);
    assert_eq!(text_of(&seen) + &text_of(&rest), text, "no word lost or repeated");

    // Without `after`, the whole run.
    let again = read_to_end(&mut run_stream(open_events(&server, &run, "").await)).await;
    assert_eq!(again[300..], rest[..]);
    // With everything, nothing: the run has ended.
    let nothing = read_to_end(&mut run_stream(open_events(&server, &run, "?after=1002").await)).await;
    assert_eq!(nothing, vec![]);
}

#[tokio::test]
async fn a_failed_run_ends_with_its_error_and_keep_alives_fill_the_silence() {
    let engine = EngineConfig { max_turns: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions {
        engine,
        heartbeat: Duration::from_millis(50),
        model_delay: Duration::from_millis(150),
        ..TestOptions::default()
    })
    .await;
    let session = server.new_session().await;
    // One model call is allowed; the tool result needs a second.
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "tool: read {\"path\":\"README.md\"}"})).await,
    );
    let events = read_to_end(&mut stream).await;
    assert_dense(&events, 1);
    let error = events.last().expect("events");
    assert_eq!(error.kind, "error", "{:?}", kinds(&events));
    assert_eq!(error.data["code"], "max_turns_exceeded");
    assert!(error.data["message"].as_str().is_some_and(|m| !m.is_empty()));
    let raw = String::from_utf8_lossy(&stream.raw);
    assert!(raw.contains("\n\n: keep-alive\n\n") || raw.starts_with(": keep-alive\n\n"), "{raw}");
}

/// The dialects learn a failed run's error from its `agent_end`, not from the store: the
/// native frame carries the error the run's record holds.
#[tokio::test]
async fn a_failed_runs_agent_end_carries_the_error_its_record_holds() {
    let engine = EngineConfig { max_turns: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, common::Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");
    let run_id = server.start_run(&session, "tool: read {\"path\":\"README.md\"}").await;
    let run = server.wait_run(&run_id).await;
    assert_eq!((&run["status"], &run["error"]["code"]), (&json!("failed"), &json!("max_turns_exceeded")), "{run}");
    let frames = stream.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let end = frames.iter().find(|f| f.event_type() == Some("agent_end")).expect("agent_end");
    assert_eq!(end.json["event"]["status"], "failed", "{}", end.json);
    assert_eq!(end.json["event"]["error"], run["error"], "{}", end.json);
}

#[tokio::test]
async fn on_disconnect_cancel_cancels_the_run_when_the_chat_stream_goes() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut stream = run_stream(
        open_chat(&server, json!({"sessionId": session, "text": "stream: 2000", "onDisconnect": "cancel"})).await,
    );
    let started = next(&mut stream).await.expect("run_started");
    next(&mut stream).await.expect("a delta");
    drop(stream);
    let run = server.wait_run(started.data["runId"].as_str().expect("runId")).await;
    assert_eq!(run["status"], "cancelled");
    // The re-attach tells how it ended.
    let after = read_to_end(&mut run_stream(open_events(&server, &id_of(&run), "?after=2").await)).await;
    assert_eq!(kinds(&after).last(), Some(&"error"));
    assert_eq!(after.last().expect("error").data["code"], "cancelled");
}

#[tokio::test]
async fn reattaching_to_someone_elses_or_no_run_is_a_404() {
    let server = TestServer::start().await;
    for id in ["run_01jd0000000000000000000000", "nope"] {
        let (status, body) = server.get(&format!("/api/runs/{id}/events")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    }
    let (status, body) = server.get("/api/runs/run_01jd0000000000000000000000/events?after=x").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_query")));
}

// ---- re-attaching as a seed 003 client does (issue 15) ---------------------------------
#[tokio::test]
async fn a_retried_chat_continues_the_runs_sequence_instead_of_restarting_at_1() {
    // Without the run frame log, which would replay the run from its first event
    // (replay.rs): here the buffer cannot, and the snapshot numbers on.
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..without_frame_log() }).await;
    let session = server.new_session().await;
    let body = json!({"sessionId": session, "text": "stream: 1000", "requestId": "retry-1"});
    let mut client = Client::default();
    let mut stream = run_stream(open_chat(&server, body.clone()).await);
    while client.last < 300 {
        client.take(&next(&mut stream).await.expect("an event"));
    }
    drop(stream);
    // 300 events in, the run's first frame is far behind the 256-frame buffer.
    let mut retried = run_stream(open_chat(&server, body).await);
    let first = next(&mut retried).await.expect("an event");
    assert!(first.sequence() > 1, "the run's sequence goes on, it does not restart: {first:?}");
    client.take(&first);
    for e in read_to_end(&mut retried).await {
        client.take(&e);
    }
    client.assert_holds_the_stored_run(&server, &session).await;
}

#[tokio::test]
async fn a_streamed_resume_continues_after_the_interrupt_once_the_runs_start_left_the_buffer() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
    let mut client = Client::default();
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    first.iter().for_each(|e| assert!(client.take(e)));
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    push_out_of_the_buffer(&server, &session, 300).await;

    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let rest = read_to_end(&mut resume_stream(&server, &run_id(&first), approval, "k1").await).await;
    assert_eq!(rest.first().map(Event::sequence), Some(interrupt.sequence() + 1), "{:?}", kinds(&rest));
    assert_dense(&rest, interrupt.sequence() + 1);
    rest.iter().for_each(|e| assert!(client.take(e), "{e:?} was new"));
    client.assert_holds_the_stored_run(&server, &session).await;
}

#[tokio::test]
async fn a_reattach_replays_from_after_once_the_runs_start_left_the_buffer() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(5), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let mut client = Client::default();
    let mut stream = run_stream(open_chat(&server, json!({"sessionId": session, "text": "stream: 1000"})).await);
    let mut started = None;
    while client.last < 400 {
        let e = next(&mut stream).await.expect("an event");
        started.get_or_insert_with(|| run_id(std::slice::from_ref(&e)));
        client.take(&e);
    }
    drop(stream);
    let run = started.expect("run_started");
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={}", client.last)).await)).await;
    assert_eq!(rest.first().map(|e| e.kind.as_str()), Some("text_delta"), "a replay, not a snapshot");
    assert_dense(&rest, client.last + 1);
    rest.iter().for_each(|e| assert!(client.take(e)));
    assert_eq!(client.snapshots, 0);
    client.assert_holds_the_stored_run(&server, &session).await;
}

#[tokio::test]
async fn a_snapshot_carries_the_runs_tool_calls_and_the_stream_goes_on_to_the_end() {
    let server = TestServer::start_with(without_frame_log()).await;
    let session = server.new_session().await;
    let (status, _) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    // The command runs until the test creates `gate`.
    let prompt =
        format!("tool: bash {}", json!({"command": "while [ ! -f gate ]; do sleep 0.01; done; echo released"}));
    let mut client = Client::default();
    let mut stream = run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await);
    // The client drops just as the call starts: it never sees `tool_started`.
    let started = loop {
        let e = next(&mut stream).await.expect("an event");
        if e.kind == "tool_started" {
            break e;
        }
        client.take(&e);
    };
    drop(stream);
    push_out_of_the_buffer(&server, &session, 300).await;

    let run = started.data["runId"].as_str().expect("runId");
    let mut again = run_stream(open_events(&server, run, &format!("?after={}", client.last)).await);
    let snapshot = next(&mut again).await.expect("snapshot");
    assert_eq!(snapshot.kind, "snapshot", "{}", snapshot.data);
    assert_eq!(snapshot.sequence(), started.sequence(), "at the run's sequence");
    assert_eq!(snapshot.data["status"], "running");
    assert_eq!(
        snapshot.data["tools"],
        json!([{"callId": started.data["callId"], "tool": "bash", "status": "running"}]),
        "the call still running is in the snapshot"
    );
    client.take(&snapshot);
    std::fs::write(server.project_dir().join("gate"), "").expect("open the gate");
    let rest = read_to_end(&mut again).await;
    assert_eq!(kinds(&rest)[..1], ["tool_finished"], "{:?}", kinds(&rest));
    assert_eq!(kinds(&rest).last(), Some(&"done"));
    rest.iter().for_each(|e| assert!(client.take(e)));
    client.assert_holds_the_stored_run(&server, &session).await;
}
/// A call the model announced that has not started is no step of a live client's
/// list until its `tool_started`: a snapshot leaves it out too, instead of showing it
/// `running` while the call before it runs.
#[tokio::test]
async fn a_snapshot_leaves_out_a_call_announced_but_not_started() {
    let command = "while [ ! -f gate ]; do sleep 0.01; done; echo released".to_owned();
    let models = Models::new(Arc::new(TwoCalls { command }));
    let server =
        TestServer::start_with(TestOptions { models: Some(ModelsOverride(models)), ..without_frame_log() }).await;
    let session = server.new_session().await;
    let (status, _) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut client = Client::default();
    let mut stream = run_stream(open_chat(&server, json!({"sessionId": session, "text": "two calls"})).await);
    // The client drops just as `bash` starts: it never sees its `tool_started`.
    let started = loop {
        let e = next(&mut stream).await.expect("an event");
        if e.kind == "tool_started" {
            break e;
        }
        client.take(&e);
    };
    assert_eq!(started.data["callId"], "call_bash");
    drop(stream);
    push_out_of_the_buffer(&server, &session, 300).await;

    let run = run_id(std::slice::from_ref(&started));
    let mut again = run_stream(open_events(&server, &run, &format!("?after={}", client.last)).await);
    let snapshot = next(&mut again).await.expect("snapshot");
    assert_eq!(snapshot.kind, "snapshot", "{}", snapshot.data);
    assert_eq!(snapshot.sequence(), started.sequence(), "at the run's sequence");
    assert_eq!(
        snapshot.data["tools"],
        json!([{"callId": "call_bash", "tool": "bash", "status": "running"}]),
        "only the call that started; `read` waits for its turn"
    );
    client.take(&snapshot);
    std::fs::write(server.project_dir().join("gate"), "").expect("open the gate");
    let rest = read_to_end(&mut again).await;
    assert_eq!(kinds(&rest)[..3], ["tool_finished", "tool_started", "tool_finished"], "{:?}", kinds(&rest));
    assert_eq!(rest[1].data["callId"], "call_read");
    rest.iter().for_each(|e| assert!(client.take(e), "{e:?} was new"));
    client.assert_holds_the_stored_run(&server, &session).await;
}

/// A run's sequence is the run's for its whole lifetime, a server restart included: a
/// run parked at an approval keeps its interrupt's number with the approval, so the
/// continuation after a restart numbers on from it and a client that holds everything
/// up to the interrupt drops nothing of it.
#[tokio::test]
async fn after_a_restart_a_parked_runs_continuation_numbers_on_from_its_interrupt() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
    let mut client = Client::default();
    let first =
        read_to_end(&mut run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await)).await;
    first.iter().for_each(|e| assert!(client.take(e)));
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    let server = server.restart().await;

    // Re-attached before the decision: nothing new, and the stream ends at the interrupt.
    let run = run_id(&first);
    let waiting =
        read_to_end(&mut run_stream(open_events(&server, &run, &format!("?after={}", client.last)).await)).await;
    waiting.iter().for_each(|e| assert!(client.take(e), "{e:?} was new"));
    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let rest = read_to_end(&mut resume_stream(&server, &run, approval, "k1").await).await;
    assert_eq!(kinds(&rest).first(), Some(&"tool_started"), "{rest:?}");
    assert_dense(&rest, client.last + 1);
    rest.iter().for_each(|e| assert!(client.take(e), "{e:?} was new"));
    client.assert_holds_the_stored_run(&server, &session).await;
    // A client that has only the run's start gets the run's own numbers too.
    let again = read_to_end(&mut run_stream(open_events(&server, &run, "?after=1").await)).await;
    assert_eq!(kinds(&again), ["snapshot", "done"]);
    assert_eq!(again.last(), rest.last(), "the run's end, with the run's number");
}

#[tokio::test]
async fn a_reattach_is_one_stream_of_the_users_limit() {
    let engine = EngineConfig { max_streams_per_user: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let run = server.start_run(&session, "stream: 60").await;
    server.wait_run(&run).await;
    // Every event is still buffered, and the one stream allowed is enough to replay them.
    let rest = read_to_end(&mut run_stream(open_events(&server, &run, "?after=10").await)).await;
    assert_eq!(rest.first().map(|e| e.kind.as_str()), Some("text_delta"), "a replay, not a snapshot");
    assert_dense(&rest, 11);
    assert_eq!(kinds(&rest).last(), Some(&"done"));
}
/// Drops the run stream at random points of a 2,000-word answer with two tool calls and
/// comes back as a seed 003 client does — the `requestId` again (`POST /api/chat`), or
/// `Last-Event-ID` with the last sequence it has — dropping what it already has and
/// applying snapshots. The client ends holding exactly the stored run.
#[tokio::test]
async fn random_drops_lose_and_repeat_no_word_and_every_tool_call_ends() {
    let mut rng = common::Rng::seeded(0x5eed_0015);
    let seed = rng.seed;
    let models = Models::new(Arc::new(Chatty { delay: Duration::from_millis(1) }));
    let server =
        TestServer::start_with(TestOptions { models: Some(ModelsOverride(models)), ..TestOptions::default() }).await;
    let session = server.new_session().await;
    let body = json!({"sessionId": session, "text": "talk and read", "requestId": "drops-1"});
    let mut client = Client::default();
    let mut run: Option<String> = None;
    let mut drops = 0;
    let mut stream = run_stream(open_chat(&server, body.clone()).await);
    loop {
        // Events this connection gets before it drops (the ones already had do not count).
        let mut budget = 10 + rng.below(60);
        while budget > 0 {
            let Some(e) = next(&mut stream).await else { break };
            run.get_or_insert_with(|| run_id(std::slice::from_ref(&e)));
            if client.take(&e) {
                budget -= 1;
            }
        }
        if client.end.is_some() {
            break;
        }
        assert!(budget == 0, "a stream ended before the run did (seed {seed}, last sequence {})", client.last);
        drops += 1;
        drop(stream);
        stream = match &run {
            Some(run) if rng.below(3) > 0 => {
                let request = server
                    .client
                    .get(server.url(&format!("/api/runs/{run}/events")))
                    .header("last-event-id", client.last.to_string());
                run_stream(tokio::time::timeout(WAIT, request.send()).await.expect("in time").expect("re-attach"))
            }
            _ => run_stream(open_chat(&server, body.clone()).await),
        };
    }
    assert!(drops >= 30, "only {drops} drops (seed {seed})");
    client.assert_holds_the_stored_run(&server, &session).await;
}

/// A server that keeps no run frame log (`[frame_log] enabled = false`): a re-attach
/// whose frames left the buffer gets the snapshot, which these tests look at.
fn without_frame_log() -> TestOptions {
    let mut options = TestOptions::default();
    options.engine.frame_log = false;
    options
}

/// A stream read to its end as it came: its numbered events (framed as [`next`] checks
/// them) and, apart, its `presence` events, which carry no id and no sequence.
async fn read_with_presence(stream: &mut common::SseStream) -> (Vec<Event>, Vec<Value>) {
    let (mut events, mut presence) = (Vec::new(), Vec::new());
    while let Some(raw) = stream.next_event().await {
        let data: Value = serde_json::from_str(&raw.data).expect("JSON");
        if raw.event.as_deref() == Some("presence") {
            assert_eq!(raw.id, None, "presence is unnumbered: {data}");
            assert_eq!((&data["type"], data.get("sequence")), (&json!("presence"), None), "{data}");
            assert!(data["runId"].as_str().is_some_and(|r| r.starts_with("run_")), "{data}");
            presence.push(data);
            continue;
        }
        let kind = raw.event.expect("named event");
        assert_eq!(raw.id, Some(data["sequence"].to_string()), "the SSE id is the sequence");
        events.push(Event { kind, data });
    }
    (events, presence)
}

/// Presence comes on a timer, so it takes no number: a second viewer joining while the
/// run waits at an approval reaches the continuation as an unnumbered `presence` event
/// with the counts, and the run's events are numbered as they always were.
#[tokio::test]
async fn a_viewer_joining_while_the_run_waits_shows_as_an_unnumbered_presence_event() {
    let mut options = TestOptions::default();
    options.engine.presence = Some(Duration::from_millis(50));
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    let mut view = server.events(&session, common::Open { approvals: true, ..Default::default() }).await;
    view.next_frame().await.expect("snapshot");
    let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
    let mut chat = run_stream(open_chat(&server, json!({"sessionId": session, "text": prompt})).await);
    let (first, _) = read_with_presence(&mut chat).await;
    drop(chat);
    assert_dense(&first, 1);
    let interrupt = first.last().expect("events").clone();
    assert_eq!(interrupt.kind, "interrupt", "{:?}", kinds(&first));
    let run = run_id(&first);

    // A terminal joins while the run waits; its stream hears the counts settle.
    let url = server.url(&format!("/api/sessions/{session}/events?approvals=1&client=cli"));
    let mut terminal = common::SseStream::new(server.client.get(url).send().await.expect("events"));
    terminal.next_frame().await.expect("snapshot");
    let two = |p: &Value| p["viewers"] == 2 && p["clients"]["cli"] == 1;
    loop {
        let frame = terminal.next_json().await.expect("a frame");
        if frame["type"] == "session.presence" && two(&frame["presence"]) {
            break;
        }
    }

    // The continuation carries it, unnumbered; its events are numbered on from the
    // interrupt as before.
    let approval = interrupt.data["interruptId"].as_str().expect("interruptId");
    let (rest, presence) = read_with_presence(&mut resume_stream(&server, &run, approval, "once").await).await;
    assert_dense(&rest, interrupt.sequence() + 1);
    assert_eq!(kinds(&rest).last(), Some(&"done"));
    let seen = presence.iter().find(|p| two(p)).unwrap_or_else(|| panic!("the two views: {presence:?}"));
    assert_eq!((&seen["runId"], &seen["answerers"]), (&json!(run), &json!(2)), "{seen}");

    // A client re-attaching from the start gets the run's events as numbered before.
    let (whole, _) = read_with_presence(&mut run_stream(open_events(&server, &run, "").await)).await;
    let mut joined = first.clone();
    joined.extend(rest);
    assert_eq!(whole, joined);
}
