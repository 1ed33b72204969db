//! Every run replayable exactly (issue 39): `GET /api/runs/:id/events?after=N` on a run
//! whose frames left the session's buffer, or that ran before a restart, replays from
//! the run's durable frame log the very bytes a live follower got from N on, not a
//! snapshot. A log that is not whole (its end or a chunk missing) is never replayed:
//! the client gets the snapshot, as before.

use crate::common::{Open, TestServer, WAIT};
use futures::StreamExt;
use serde_json::json;
use spool_engine::store::prelude::*;
use spool_protocol::RunId;
use std::time::Duration;

/// A run-stream body's events as their raw SSE blocks (`id:`, `event:`, `data:`
/// lines), comments (`: keep-alive`) left out; read to the stream's end.
async fn blocks(res: reqwest::Response) -> Vec<String> {
    assert_eq!(res.status(), 200);
    let text = tokio::time::timeout(WAIT, res.text()).await.expect("the stream ends").expect("body");
    text.split("\n\n").filter(|b| !b.is_empty() && !b.starts_with(':')).map(str::to_owned).collect()
}

/// The run-stream sequence of a block (its SSE id).
fn sequence(block: &str) -> u64 {
    let id = block.lines().find_map(|l| l.strip_prefix("id: ")).unwrap_or_else(|| panic!("no id: {block}"));
    id.parse().expect("a numeric id")
}

fn kind(block: &str) -> &str {
    block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_else(|| panic!("no event: {block}"))
}

/// Runs `text` in a new session through `POST /api/chat`: the run's id and every
/// event a live follower got.
async fn live_run(server: &TestServer, text: &str) -> (String, String, Vec<String>) {
    let session = server.new_session().await;
    let res = server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": text})).send();
    let live = blocks(res.await.expect("chat")).await;
    assert_eq!(kind(live.last().expect("events")), "done", "{live:?}");
    let data = live[0].lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
    let run =
        serde_json::from_str::<serde_json::Value>(data).expect("json")["runId"].as_str().expect("runId").to_owned();
    (session, run, live)
}

/// Waits until the run's frame log is written whole (the writer runs beside the run).
pub(crate) async fn logged(server: &TestServer, run: &str) -> usize {
    let run: RunId = run.parse().expect("run id");
    let wait = async {
        loop {
            let chunks = server.store.run_frames(&run).await.expect("read the log");
            if chunks.last().is_some_and(|c| c.complete) {
                return chunks.len();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("the run's log is written")
}

async fn replay(server: &TestServer, run: &str, after: u64) -> Vec<String> {
    let res = server.client.get(server.url(&format!("/api/runs/{run}/events?after={after}"))).send();
    blocks(res.await.expect("events")).await
}

/// The live events after `after`.
fn live_after(live: &[String], after: u64) -> Vec<String> {
    live.iter().filter(|b| sequence(b) > after).cloned().collect()
}

#[tokio::test]
async fn a_run_replayed_after_a_restart_from_after_n_equals_the_live_frames_from_n_on() {
    let server = TestServer::start().await;
    // A tool call, and an answer long enough to span several chunks of the log.
    let (_, tool_run, tool_live) = live_run(&server, "tool: read {\"path\":\"README.md\"}").await;
    let (_, long_run, long_live) = live_run(&server, "stream: 300").await;
    assert!(tool_live.iter().any(|b| kind(b) == "tool_finished"), "{tool_live:?}");
    logged(&server, &tool_run).await;
    assert!(logged(&server, &long_run).await >= 3, "300 deltas take several chunks");
    let server = server.restart().await;

    for (run, live) in [(&tool_run, &tool_live), (&long_run, &long_live)] {
        let last = sequence(live.last().expect("events"));
        for after in 0..last {
            assert_eq!(replay(&server, run, after).await, live_after(live, after), "after={after}");
        }
    }
}

#[tokio::test]
async fn a_run_that_left_the_buffer_replays_exactly_instead_of_a_snapshot() {
    let server = TestServer::start().await;
    let (session, run, live) = live_run(&server, "stream: 200").await;
    logged(&server, &run).await;
    // 300 later frames: the run's own are out of the replay window.
    for i in 0..300 {
        let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"title": format!("t{i}")})).await;
        assert_eq!(status, 200, "{body}");
    }
    for after in [0, 1, 100, 127, 128, 129, 200] {
        assert_eq!(replay(&server, &run, after).await, live_after(&live, after), "after={after}");
    }
}

#[tokio::test]
async fn an_incomplete_log_falls_back_to_a_snapshot() {
    let server = TestServer::start().await;
    let (session, run, live) = live_run(&server, "stream: 300").await;
    let chunks = logged(&server, &run).await;
    assert!(chunks >= 3);
    let text: String = live
        .iter()
        .filter(|b| kind(b) == "text_delta")
        .map(|b| {
            let data = b.lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
            serde_json::from_str::<serde_json::Value>(data).expect("json")["delta"].as_str().expect("delta").to_owned()
        })
        .collect();
    for i in 0..300 {
        server.patch(&format!("/api/sessions/{session}"), json!({"title": format!("t{i}")})).await;
    }
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", server.dir().join("data/spool.db").display()))
        .await
        .expect("open the store's file");
    let snapshot = |replayed: &[String]| {
        let kinds: Vec<&str> = replayed.iter().map(|b| kind(b)).collect();
        assert_eq!(kinds, ["snapshot", "done"], "{replayed:?}");
        let data = replayed[0].lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
        let snapshot: serde_json::Value = serde_json::from_str(data).expect("json");
        assert_eq!((&snapshot["status"], &snapshot["tools"]), (&json!("completed"), &json!([])), "{snapshot}");
        assert_eq!(snapshot["text"].as_str().map(str::len), Some(text.len()), "the whole answer");
        assert_eq!(replayed.last(), live.last(), "the run's end, with the run's number");
    };
    // The end is missing (a crash before the run's last chunk was written).
    let set_end = |complete: bool| {
        sqlx::query(
            "UPDATE run_frames SET complete = $1
             WHERE run_id = $2 AND chunk = (SELECT MAX(chunk) FROM run_frames WHERE run_id = $2)",
        )
        .bind(complete)
        .bind(run.clone())
        .execute(&db)
    };
    set_end(false).await.expect("drop the end");
    snapshot(&replay(&server, &run, 10).await);
    set_end(true).await.expect("put the end back");
    assert_eq!(replay(&server, &run, 10).await, live_after(&live, 10), "whole again");
    // A chunk in the middle is missing.
    let gone = sqlx::query("DELETE FROM run_frames WHERE run_id = $1 AND chunk = 1")
        .bind(&run)
        .execute(&db)
        .await
        .expect("delete chunk 1");
    assert_eq!(gone.rows_affected(), 1);
    snapshot(&replay(&server, &run, 10).await);
    db.close().await;
}

/// The numbers in BENCHMARKS.md ("Run frame log"): bytes per delta, as Spool's scripted
/// model streams them (` w123`) and with the same frames carrying English prose cut in
/// 4-byte tokens, and what writing one chunk costs on SQLite. Measures, asserts
/// nothing about speed:
/// `cargo nextest run -p spool-server -E 'test(measure_the_frame_log)' --run-ignored all --no-capture`
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn measure_the_frame_log() {
    let server = TestServer::start().await;
    let (_, run, live) = live_run(&server, "stream: 4000").await;
    logged(&server, &run).await;
    let chunks = server.store.run_frames(&run.parse().expect("run id")).await.expect("read");
    let deltas = live.iter().filter(|b| kind(b) == "text_delta").count();
    let stored: usize = chunks.iter().map(|c| c.data.len()).sum();
    let lines: Vec<String> =
        chunks.iter().map(|c| spool_engine::run_log::inflate(&c.data).expect("inflates")).collect();
    let raw: usize = lines.iter().map(String::len).sum();
    println!("scripted: {deltas} deltas, {} chunks, {raw} B of lines, {stored} B stored", chunks.len());
    println!(
        "scripted: {:.1} B per delta stored ({:.1} B of JSON)",
        stored as f64 / deltas as f64,
        raw as f64 / deltas as f64
    );

    // The same frames with prose in place of the scripted words.
    let prose = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    let mut tokens = prose.as_bytes().chunks(4).map(|t| String::from_utf8_lossy(t).into_owned()).cycle();
    let (mut prose_stored, mut prose_raw) = (0, 0);
    for text in &lines {
        let mut out = String::new();
        for line in text.lines() {
            let mut value: serde_json::Value = serde_json::from_str(line).expect("a line");
            let delta = &mut value["f"]["event"]["assistantMessageEvent"]["delta"];
            if delta.is_string() {
                *delta = json!(tokens.next().expect("cycles"));
            }
            out.push_str(&value.to_string());
            out.push('\n');
        }
        prose_raw += out.len();
        prose_stored += spool_engine::run_log::deflate(out.as_bytes()).len();
    }
    println!(
        "prose: {:.1} B per delta stored ({:.1} B of JSON)",
        prose_stored as f64 / deltas as f64,
        prose_raw as f64 / deltas as f64
    );

    // Encoding: deflating every chunk's lines, as the writer does before each write.
    let started = std::time::Instant::now();
    for text in &lines {
        std::hint::black_box(spool_engine::run_log::deflate(text.as_bytes()));
    }
    println!("deflate: {:?} per chunk", started.elapsed() / lines.len() as u32);

    // Writing: every chunk of the run again (an upsert each), timed.
    let rounds = 20;
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        for chunk in &chunks {
            server.store.append_run_frames(chunk).await.expect("write");
        }
    }
    let each = started.elapsed() / (rounds * chunks.len()) as u32;
    println!("sqlite: {each:?} per chunk write ({} chunks x {rounds})", chunks.len());

    // The same on PostgreSQL, when there is one: the run copied there first (its owner,
    // project and session), since a chunk belongs to a run.
    let Ok(url) = std::env::var("SPOOL_TEST_DATABASE_URL") else { return };
    let pg = spool_store::PgStore::connect(&url).await.expect("connect");
    let mut run = server.store.get_run(&chunks[0].run_id).await.expect("read").expect("the run");
    let mut session = server.store.get_session(&run.session_id).await.expect("read").expect("its session");
    let mut project = server.store.get_project(&session.project_id).await.expect("read").expect("its project");
    let owner = pg.ensure_user(&format!("frame-log-{}", spool_protocol::ProjectId::new())).await.expect("user");
    (project.owner_id, session.owner_id, run.owner_id) = (owner.clone(), owner.clone(), owner);
    project.path = format!("/bench/{}", project.id);
    pg.insert_project(&project).await.expect("project");
    pg.insert_session(&session).await.expect("session");
    pg.insert_run(&run).await.expect("run");
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        for chunk in &chunks {
            pg.append_run_frames(chunk).await.expect("write");
        }
    }
    let each = started.elapsed() / (rounds * chunks.len()) as u32;
    println!("postgres: {each:?} per chunk write ({} chunks x {rounds})", chunks.len());
    pg.delete_session(&session.id).await.expect("clean up");
}

#[tokio::test]
async fn retention_prunes_old_logs_and_their_runs_show_a_snapshot() {
    let server = TestServer::start().await;
    let (_, run, live) = live_run(&server, "stream: 20").await;
    logged(&server, &run).await;
    // Restarted keeping logs no time at all: pruning at start takes this one.
    let mut server = server;
    server.options.engine.frame_log_retention = Some(Duration::ZERO);
    let server = server.restart().await;
    let id: RunId = run.parse().expect("run id");
    let pruned = async {
        while !server.store.run_frames(&id).await.expect("read the log").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, pruned).await.expect("the log is pruned");
    let replayed = replay(&server, &run, 5).await;
    let kinds: Vec<&str> = replayed.iter().map(|b| kind(b)).collect();
    assert_eq!(kinds, ["snapshot", "done"], "{replayed:?}");
    assert_ne!(replayed, live_after(&live, 5));
}

/// A session-stream event as sent: its SSE id and data line, and the frame's type.
#[derive(Clone, Debug, PartialEq)]
struct Sent {
    id: String,
    data: String,
}

impl Sent {
    fn kind(&self) -> String {
        let json: serde_json::Value = serde_json::from_str(&self.data).expect("frame JSON");
        json["type"].as_str().expect("type").to_owned()
    }

    fn seq(&self) -> u64 {
        self.id.rsplit_once(':').expect("streamId:seq").1.parse().expect("seq")
    }
}

/// The next session-stream event that is not a heartbeat.
async fn next_sent(stream: &mut spool_test_support::SseStream) -> Sent {
    loop {
        let event = stream.next_event().await.expect("the stream goes on");
        if !spool_test_support::sse::is_heartbeat(&event) {
            return Sent { id: event.id.expect("an id"), data: event.data };
        }
    }
}

/// Reads `stream` up to and including the first event `until` accepts.
async fn read_until(stream: &mut spool_test_support::SseStream, until: impl Fn(&Sent) -> bool) -> Vec<Sent> {
    let mut sent = Vec::new();
    loop {
        let event = next_sent(stream).await;
        let last = until(&event);
        sent.push(event);
        if last {
            return sent;
        }
    }
}

/// Runs `text` in `session` while `stream` (open on it) follows: the run's id and every
/// frame the stream got up to the run's `agent_settled`.
async fn followed_run(
    server: &TestServer,
    session: &str,
    stream: &mut spool_test_support::SseStream,
    text: &str,
) -> (String, Vec<Sent>) {
    let run = server.start_run(session, text).await;
    server.wait_run(&run).await;
    let sent = read_until(stream, |s| s.kind() == "loop.event" && s.data.contains("\"agent_settled\"")).await;
    logged(server, &run).await;
    (run, sent)
}

/// The cursor of the frame just before the run's `run.accepted`.
fn before_run(sent: &[Sent]) -> String {
    let accepted = sent.iter().find(|s| s.kind() == "run.accepted").expect("run.accepted");
    let (stream, seq) = accepted.id.rsplit_once(':').expect("streamId:seq");
    format!("{stream}:{}", seq.parse::<u64>().expect("seq") - 1)
}

#[tokio::test]
async fn a_session_stream_cursor_whose_run_left_the_buffer_replays_the_log_then_goes_on_live() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stayed = server.events(&session, Open::fresh()).await;
    assert_eq!(next_sent(&mut stayed).await.kind(), "session.snapshot");
    // 300 deltas: the run's first frames are out of the 256-frame replay window.
    let (_, sent) = followed_run(&server, &session, &mut stayed, "stream: 300").await;
    assert!(sent.len() > 300, "{}", sent.len());
    let from_accepted = before_run(&sent);
    let mid_run = sent[20].id.clone();
    // Every frame the client that stayed got, live frames after the run included.
    let mut all = sent;
    for cursor in [from_accepted, mid_run] {
        let mut back = server.events(&session, Open::last_event_id(cursor.clone())).await;
        let seq: u64 = cursor.rsplit_once(':').expect("cursor").1.parse().expect("seq");
        let expected: Vec<Sent> = all.iter().filter(|s| s.seq() > seq).cloned().collect();
        let replayed = read_until(&mut back, |s| s.id == all.last().expect("frames").id).await;
        assert_eq!(replayed.len(), expected.len(), "cursor {cursor}");
        assert!(replayed == expected, "cursor {cursor}: the frames after it, byte for byte");
        // Then live frames, as the client that stayed gets them.
        let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"title": cursor})).await;
        assert_eq!(status, 200, "{body}");
        let live = next_sent(&mut stayed).await;
        assert_eq!(next_sent(&mut back).await, live, "the live frame right after the replay");
        all.push(live);
    }
}

#[tokio::test]
async fn after_a_restart_an_old_cursor_gets_the_rest_of_its_logged_run_then_a_snapshot() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stayed = server.events(&session, Open::fresh()).await;
    assert_eq!(next_sent(&mut stayed).await.kind(), "session.snapshot");
    let (_, sent) = followed_run(&server, &session, &mut stayed, "stream: 40").await;
    drop(stayed);
    let server = server.restart().await;

    for cursor in [before_run(&sent), sent[10].id.clone()] {
        let seq: u64 = cursor.rsplit_once(':').expect("cursor").1.parse().expect("seq");
        let expected: Vec<Sent> = sent.iter().filter(|s| s.seq() > seq).cloned().collect();
        let mut back = server.events(&session, Open::cursor(cursor.clone())).await;
        let replayed = read_until(&mut back, |s| s.kind() == "session.snapshot").await;
        let (snapshot, replayed) = replayed.split_last().expect("a snapshot");
        // The log ends with the run's last event, its `session.state`; what came after
        // (`agent_settled`) the snapshot holds.
        let end = expected.iter().rposition(|s| s.kind() == "session.state").expect("the run's end");
        assert!(replayed == &expected[..=end], "cursor {cursor}: the run's frames after it, byte for byte");
        let old_stream = cursor.split_once(':').expect("cursor").0;
        assert!(!snapshot.id.starts_with(old_stream), "then a snapshot of the new stream: {}", snapshot.id);
    }
    // A cursor past the run's last logged frame: nothing logged follows it, a snapshot.
    let mut back = server.events(&session, Open::cursor(sent.last().expect("frames").id.clone())).await;
    assert_eq!(next_sent(&mut back).await.kind(), "session.snapshot");
}

#[tokio::test]
async fn a_cursor_out_of_the_buffer_between_logged_runs_gets_a_snapshot() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stayed = server.events(&session, Open::fresh()).await;
    assert_eq!(next_sent(&mut stayed).await.kind(), "session.snapshot");
    let (_, sent) = followed_run(&server, &session, &mut stayed, "stream: 20").await;
    // 300 title changes, which no run logs: the run and the first of them leave the buffer.
    let mut titles = Vec::new();
    for i in 0..300 {
        let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"title": format!("t{i}")})).await;
        assert_eq!(status, 200, "{body}");
        titles.push(next_sent(&mut stayed).await);
    }
    // Inside the run: its log ends far behind the buffer, so it cannot join it. Between
    // the title changes: nothing logged holds the next frame.
    for cursor in [before_run(&sent), titles[5].id.clone()] {
        let mut back = server.events(&session, Open::cursor(cursor.clone())).await;
        let first = next_sent(&mut back).await;
        assert_eq!(first.kind(), "session.snapshot", "cursor {cursor}");
        // At the head the session has now: at least the last title's (a frame of the
        // run's own, its generated title, may come after the titles).
        assert!(first.seq() >= titles.last().expect("titles").seq(), "at the current seq, cursor {cursor}");
    }
}

/// A server whose ring holds few frames (about 100 deltas), and a model that streams
/// slowly enough that a run of 2000 deltas is still going while clients come back.
async fn small_ring() -> TestServer {
    let mut options = crate::common::TestOptions::default();
    options.engine.limits =
        spool_engine::EventLimits { replay_frames: 32, replay_bytes: 4 << 20, queue_bytes: 24 << 10 };
    options.model_delay = Duration::from_millis(2);
    TestServer::start_with(options).await
}

#[tokio::test]
async fn a_client_at_an_early_n_of_a_run_still_going_gets_every_event_once() {
    let server = small_ring().await;
    let session = server.new_session().await;
    let res = server.client.post(server.url("/api/chat")).json(&json!({"sessionId": session, "text": "stream: 2000"}));
    let res = res.send().await.expect("chat");
    assert_eq!(res.status(), 200);
    // The live follower: its first event names the run, the rest is read beside.
    let mut body = res.bytes_stream();
    let mut bytes = Vec::new();
    while !bytes.windows(2).any(|w| w == b"\n\n") {
        let chunk = tokio::time::timeout(WAIT, body.next()).await.expect("an event").expect("open").expect("bytes");
        bytes.extend_from_slice(&chunk);
    }
    let first = String::from_utf8_lossy(&bytes).into_owned();
    let data = first.lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
    let run =
        serde_json::from_str::<serde_json::Value>(data).expect("json")["runId"].as_str().expect("runId").to_owned();
    let live = tokio::spawn(async move {
        while let Some(chunk) = body.next().await {
            bytes.extend_from_slice(&chunk.expect("bytes"));
        }
        let text = String::from_utf8(bytes).expect("utf-8");
        text.split("\n\n").filter(|b| !b.is_empty() && !b.starts_with(':')).map(str::to_owned).collect::<Vec<_>>()
    });
    let past = async {
        loop {
            let chunks = server.store.run_frames(&run.parse().expect("run id")).await.expect("read the log");
            if chunks.len() >= 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, past).await.expect("the run's log grows");
    let mut replays = Vec::new();
    for after in [0, 1, 40, 150] {
        let res = server.client.get(server.url(&format!("/api/runs/{run}/events?after={after}"))).send();
        replays.push((after, tokio::spawn(blocks(res.await.expect("events")))));
    }
    let (status, body) = server.get(&format!("/api/runs/{run}")).await;
    assert_eq!((status.as_u16(), body["status"].as_str()), (200, Some("running")), "still going: {body}");
    let live = live.await.expect("the live stream");
    assert_eq!(kind(live.last().expect("events")), "done");
    assert!(live.len() > 2000, "{}", live.len());
    for (after, replay) in replays {
        let replay = replay.await.expect("a replay");
        assert_eq!(replay.first().map(|b| kind(b)), Some(if after == 0 { "run_started" } else { "text_delta" }));
        assert!(replay == live_after(&live, after), "after={after}: every event after it once, byte for byte");
    }
}

#[tokio::test]
async fn a_session_stream_cursor_early_in_a_run_still_going_gets_every_frame_once() {
    let server = small_ring().await;
    let session = server.new_session().await;
    let mut stayed = server.events(&session, Open::fresh()).await;
    assert_eq!(next_sent(&mut stayed).await.kind(), "session.snapshot");
    // The client that stays reads beside the test, so the small ring never cuts it.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        loop {
            let sent = next_sent(&mut stayed).await;
            let settled = sent.kind() == "loop.event" && sent.data.contains("\"agent_settled\"");
            if tx.send(sent).is_err() || settled {
                return;
            }
        }
    });
    let run = server.start_run(&session, "stream: 2000").await;
    let mut early = Vec::new();
    while early.len() < 10 {
        early.push(tokio::time::timeout(WAIT, rx.recv()).await.expect("a frame").expect("the stream goes on"));
    }
    let past = async {
        while server.store.run_frames(&run.parse().expect("run id")).await.expect("read the log").len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, past).await.expect("the run's log grows");
    let cursors = [before_run(&early), early[5].id.clone()];
    let mut backs = Vec::new();
    for cursor in &cursors {
        backs.push(server.events(&session, Open::last_event_id(cursor.clone())).await);
    }
    let (status, body) = server.get(&format!("/api/runs/{run}")).await;
    assert_eq!((status.as_u16(), body["status"].as_str()), (200, Some("running")), "still going: {body}");
    let mut all = early;
    while let Some(sent) = rx.recv().await {
        all.push(sent);
    }
    reader.await.expect("the client that stayed");
    let last = all.last().expect("frames").id.clone();
    for (cursor, mut back) in cursors.into_iter().zip(backs) {
        let seq: u64 = cursor.rsplit_once(':').expect("cursor").1.parse().expect("seq");
        let expected: Vec<Sent> = all.iter().filter(|s| s.seq() > seq).cloned().collect();
        let replayed = read_until(&mut back, |s| s.id == last).await;
        assert_eq!(replayed.len(), expected.len(), "cursor {cursor}");
        assert!(replayed == expected, "cursor {cursor}: every frame after it once, byte for byte");
    }
}
