//! The native session stream's rules (seed 000), through a real server on a real port:
//! replay within the buffer, every reason for a snapshot instead, the header beating the
//! query, a slow consumer cut while a fast one gets everything, and a client that
//! reconnects mid-run reassembling exactly the message the history endpoint returns.

use crate::common;

use common::{Open, ReceivedFrame, SseStream, TestOptions, TestServer, WAIT};
use spool_protocol::frame::SessionState;
use spool_protocol::{AgentEvent, Content, Message, StreamDelta, event::offset_len};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// A session with a title, so no asynchronous title update lands among the frames a
/// test counts.
async fn titled_session(server: &TestServer) -> String {
    let project = server.default_project().await;
    common::id_of(&server.create_session(&project, Some("stream test")).await)
}

fn is_settled(f: &ReceivedFrame) -> bool {
    f.event_type() == Some("agent_settled")
}

/// Runs `stream: n` to the end while one client records every frame; returns them
/// (snapshot first).
async fn record_run(server: &TestServer, session: &str, n: usize) -> Vec<ReceivedFrame> {
    let mut stream = server.events(session, Open::fresh()).await;
    let snapshot = stream.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.kind, "session.snapshot");
    server.start_run(session, &format!("stream: {n}")).await;
    let mut frames = vec![snapshot];
    frames.extend(stream.frames_until(is_settled).await);
    frames
}

fn assert_contiguous(frames: &[ReceivedFrame]) {
    for pair in frames.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "no hole and no duplicate: {} then {}", pair[0].json, pair[1].json);
        assert_eq!(pair[1].stream_id, pair[0].stream_id);
    }
}

#[tokio::test]
async fn a_cursor_within_the_buffer_replays_exactly_the_missed_frames() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let frames = record_run(&server, &session, 40).await;
    assert_contiguous(&frames[1..]);
    let from = &frames[10];

    let mut again = server.events(&session, Open::last_event_id(from.cursor())).await;
    let replayed = again.frames_until(is_settled).await;
    let expected: Vec<_> = frames[11..].iter().map(|f| (f.seq, f.json.clone())).collect();
    let got: Vec<_> = replayed.iter().map(|f| (f.seq, f.json.clone())).collect();
    assert_eq!(got, expected, "the replay is the same frames, byte for byte in content, in order");
    // Then it is live: the next frame is the next run's first, nothing before it.
    server.start_run(&session, "echo: live now").await;
    let live = again.next_frame().await.expect("live frame");
    assert_eq!(live.seq, frames.last().expect("frames").seq + 1);
    assert_eq!(live.kind, "run.accepted");
}

#[tokio::test]
async fn a_caught_up_cursor_replays_nothing_and_goes_live() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let frames = record_run(&server, &session, 10).await;
    let last = frames.last().expect("frames");
    let before_last = &frames[frames.len() - 2];

    // A client that read everything (header or query cursor) is owed nothing: no
    // snapshot, no frame, until something happens.
    let mut by_header = server.events(&session, Open::last_event_id(last.cursor())).await;
    let mut by_query = server.events(&session, Open::cursor(last.cursor())).await;
    // One frame behind: exactly that frame.
    let mut one_behind = server.events(&session, Open::last_event_id(before_last.cursor())).await;
    let missed = one_behind.next_frame().await.expect("the missed frame");
    assert_eq!((missed.seq, &missed.json), (last.seq, &last.json));

    server.start_run(&session, "echo: live now").await;
    for (stream, who) in [(&mut by_header, "header"), (&mut by_query, "query"), (&mut one_behind, "one behind")] {
        let live = stream.next_frame().await.expect("live frame");
        assert_eq!(live.kind, "run.accepted", "{who}: the first frame is live, not a snapshot");
        assert_eq!((live.seq, &live.stream_id), (last.seq + 1, &last.stream_id), "{who}");
    }
}

async fn first_frame(server: &TestServer, session: &str, open: Open) -> ReceivedFrame {
    server.events(session, open).await.next_frame().await.expect("a first frame")
}

#[tokio::test]
async fn unusable_cursors_get_one_snapshot_at_the_current_seq() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    // More than the 256-frame buffer.
    let frames = record_run(&server, &session, 400).await;
    let last = frames.last().expect("frames");
    let stream = &last.stream_id;
    let foreign = spool_protocol::StreamId::new();
    let cases = [
        // A cursor older than the buffer inside a logged run replays from the run's frame
        // log; one between runs gets a snapshot (replay.rs).
        (format!("{foreign}:{}", last.seq - 1), "from another stream"),
        (format!("{stream}:{}", last.seq + 5), "ahead of the current seq"),
        ("garbage".to_owned(), "malformed"),
    ];
    for (cursor, why) in cases {
        for open in [Open::last_event_id(cursor.clone()), Open::cursor(cursor.clone())] {
            let frame = first_frame(&server, &session, open).await;
            assert_eq!(frame.kind, "session.snapshot", "{why}");
            assert_eq!(frame.seq, last.seq, "{why}: a snapshot uses the current seq without incrementing it");
            assert_eq!(frame.stream_id, *stream);
        }
    }
    // A snapshot did not consume a seq: the next published frame is last + 1.
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    server.start_run(&session, "echo: next").await;
    assert_eq!(live.next_frame().await.expect("accepted").seq, last.seq + 1);
}

#[tokio::test]
async fn the_last_event_id_header_wins_over_the_cursor_query() {
    let server = TestServer::start().await;
    let session = titled_session(&server).await;
    let frames = record_run(&server, &session, 10).await;
    let good = frames[5].cursor();

    let both = Open { last_event_id: Some(good.clone()), cursor: Some("garbage".into()), approvals: false };
    let frame = first_frame(&server, &session, both).await;
    assert_eq!((frame.kind.as_str(), frame.seq), ("loop.event", frames[6].seq), "header used: replay");

    let both = Open { last_event_id: Some("garbage".into()), cursor: Some(good), approvals: false };
    let frame = first_frame(&server, &session, both).await;
    assert_eq!(frame.kind, "session.snapshot", "header used even when it is unusable");
}

#[tokio::test]
async fn a_slow_consumer_is_cut_while_a_fast_one_receives_every_frame() {
    const DELTAS: usize = 60_000;
    // The model is unpaced and shares the machine with the reading client, which on a
    // busy CI box can fall a megabyte behind for a moment; 4 MiB of headroom keeps the
    // test about cutting the client that never reads (15 MB of frames go by it).
    let limits = spool_engine::EventLimits { queue_bytes: 4 << 20, ..Default::default() };
    let engine = spool_engine::EngineConfig { limits, ..Default::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = titled_session(&server).await;

    // A client with a tiny receive window that never reads.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stuck = socket.connect(server.addr).await.expect("connect");
    stuck
        .write_all(format!("GET /api/sessions/{session}/events HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .expect("request");

    let mut fast = server.events(&session, Open::fresh()).await;
    fast.next_frame().await.expect("snapshot");
    server.start_run(&session, &format!("stream: {DELTAS}")).await;
    let frames = fast.frames_until(is_settled).await;
    assert_contiguous(&frames);
    let deltas = frames.iter().filter(|f| f.json["event"]["assistantMessageEvent"]["type"] == "text_delta").count();
    assert_eq!(deltas, DELTAS, "the reading client got every delta");

    // The stuck one was disconnected: its socket reaches EOF (or a reset) once drained,
    // and it never saw the end of the run.
    let mut received = Vec::new();
    let drained = tokio::time::timeout(WAIT, async {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stuck.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the server never closed the stuck connection");
    assert!(received.starts_with(b"HTTP/1.1 200 OK"));
    let text = String::from_utf8_lossy(&received);
    assert!(!text.contains("agent_settled"), "the stuck client cannot have kept up");
    assert!(received.len() < 32 << 20, "bounded: {} bytes were queued for it", received.len());
}

/// A browser-like store: applies frames, checks each delta lands at the offset it
/// expects, and yields the messages it ends up showing.
#[derive(Default)]
struct ClientView {
    messages: BTreeMap<u64, Message>,
    drafts: BTreeMap<u64, Message>,
    cursor: Option<(String, u64)>,
    duplicates: usize,
}

impl ClientView {
    fn apply(&mut self, frame: &ReceivedFrame) {
        if let Some((stream, seq)) = &self.cursor
            && *stream == frame.stream_id
        {
            if frame.seq <= *seq {
                self.duplicates += 1;
                return;
            }
            if frame.kind != "session.snapshot" {
                assert_eq!(frame.seq, seq + 1, "a hole in the incremental frames");
            }
        }
        self.cursor = Some((frame.stream_id.clone(), frame.seq));
        match frame.kind.as_str() {
            "session.snapshot" | "session.state" => {
                let state: SessionState = frame.state();
                for m in state.messages {
                    self.messages.insert(m.index, m.message);
                }
                self.drafts = state.drafts;
            }
            "loop.event" => {
                let index = frame.json["messageIndex"].as_u64();
                let event: AgentEvent = serde_json::from_value(frame.json["event"].clone()).expect("agent event");
                match event {
                    AgentEvent::MessageStart { message } if !message.is_user() => {
                        self.drafts.insert(index.expect("index"), message);
                    }
                    AgentEvent::MessageUpdate { assistant_message_event } => {
                        let draft = self.drafts.get_mut(&index.expect("index")).expect("a draft to update");
                        check_offset(draft, &assistant_message_event);
                        spool_engine::view::apply_delta(draft, &assistant_message_event);
                    }
                    AgentEvent::MessageEnd { message } => {
                        let index = index.expect("index");
                        self.drafts.remove(&index);
                        self.messages.insert(index, message);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

fn check_offset(draft: &Message, delta: &StreamDelta) {
    if let StreamDelta::TextDelta { content_index, offset, .. } = delta {
        let have = match draft.content().get(*content_index) {
            Some(Content::Text { text }) => offset_len(text),
            other => panic!("text delta for a non-text block: {other:?}"),
        };
        assert_eq!(*offset, have, "the delta starts exactly where the client's text ends");
    }
}

#[tokio::test]
async fn reconnecting_mid_run_with_the_last_id_reassembles_the_stored_message() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    let mut view = ClientView::default();

    // An observer that reads everything tells when the run has moved on without us.
    let mut observer = server.events(&session, Open::fresh()).await;
    observer.next_frame().await.expect("observer snapshot");
    let mut stream: SseStream = server.events(&session, Open::fresh()).await;
    view.apply(&stream.next_frame().await.expect("snapshot"));
    let run_id = server.start_run(&session, "stream: 300").await;
    // Drop the connection three times mid-answer and come back, with the last id seen,
    // only after the run has published more frames (a cursor behind the current seq).
    for cut_after in [25, 60, 90] {
        for _ in 0..cut_after {
            view.apply(&stream.next_frame().await.expect("frame"));
        }
        let (stream_id, seq) = view.cursor.clone().expect("cursor");
        drop(stream);
        observer.frames_until(|f| f.seq >= seq + 5).await;
        stream = server.events(&session, Open::last_event_id(format!("{stream_id}:{seq}"))).await;
        let first = stream.next_frame().await.expect("first after reconnect");
        assert_ne!(first.kind, "session.snapshot", "within the buffer: a replay, not a snapshot");
        assert_eq!(first.seq, seq + 1);
        view.apply(&first);
    }
    loop {
        let frame = stream.next_frame().await.expect("frame");
        view.apply(&frame);
        if is_settled(&frame) {
            break;
        }
    }
    assert_eq!(view.duplicates, 0);
    let run = server.wait_run(&run_id).await;
    assert_eq!(run["status"], "completed");

    let page = server.messages(&session, "").await;
    let stored: Vec<Message> = serde_json::from_value(page["messages"].clone()).expect("messages");
    let assistant = stored.iter().find(|m| !m.is_user()).expect("assistant message");
    let expected: String = (1..=300).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    assert_eq!(assistant.text(), expected);
    assert_eq!(view.messages.get(&1), Some(assistant), "the client shows exactly the stored message");
    assert!(view.drafts.is_empty());
}

#[tokio::test]
async fn a_snapshot_mid_run_carries_the_draft_and_deltas_continue_at_its_offset() {
    let server =
        TestServer::start_with(TestOptions { model_delay: Duration::from_millis(2), ..TestOptions::default() }).await;
    let session = titled_session(&server).await;
    let mut first = server.events(&session, Open::fresh()).await;
    first.next_frame().await.expect("snapshot");
    server.start_run(&session, "stream: 200").await;
    // Wait until the answer is under way, then connect a new client with no cursor.
    first.frames_until(|f| f.json["event"]["assistantMessageEvent"]["offset"].as_u64().is_some_and(|o| o > 100)).await;
    let mut view = ClientView::default();
    let mut late = server.events(&session, Open::fresh()).await;
    let snapshot = late.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.kind, "session.snapshot");
    let state = snapshot.state();
    assert_eq!(state.drafts.len(), 1, "the in-progress answer is in the snapshot: {}", snapshot.json);
    assert!(state.active_run.is_some());
    view.apply(&snapshot);
    loop {
        let frame = late.next_frame().await.expect("frame");
        view.apply(&frame);
        if is_settled(&frame) {
            break;
        }
    }
    let page = server.messages(&session, "").await;
    let stored: Vec<Message> = serde_json::from_value(page["messages"].clone()).expect("messages");
    assert_eq!(view.messages.get(&1), stored.get(1));
}
