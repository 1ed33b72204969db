//! Session streams across nodes (`--redis-url`: the Redis Streams frame bus): a client
//! follows a run on a node that is not running it, resumes on a third node with its
//! cursor and misses nothing and repeats nothing; a Redis that loses everything
//! mid-stream (`FLUSHALL`) costs clients a snapshot, never a hole; a run whose node is
//! killed is seen ending on the other nodes' streams.
//!
//! Every client here folds what it receives into a state (`view::apply_frame`, as the
//! web client does) and checks it against what the node answers for the same seq, so a
//! lost, repeated or misplaced frame shows as a wrong state, not only as a wrong count.
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`.
//! The `FLUSHALL` test starts a Redis of its own (`redis-server` on the `PATH`, or
//! `SPOOL_TEST_REDIS_SERVER`), since flushing the shared one would pull the ground from
//! under the tests running beside it. Without them a test prints a notice and passes,
//! except under CI, where it fails.

mod common;

use common::{Spool, TestDb, WAIT, call, redis_url, start_with, wait_for};
use serde_json::json;
use spool_engine::view::apply_frame;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::sse::Decoder;
use spool_protocol::{AgentEvent, Cursor, StreamDelta};

/// A native session stream (`GET /api/sessions/:id/events`), folded as it is read.
struct Follower {
    /// The connection; `None` once the client dropped it.
    res: Option<reqwest::Response>,
    decoder: Decoder,
    /// Every frame received, in order.
    frames: Vec<Frame>,
    /// The last frame taken, on this connection or (resumed) the one before.
    at: Option<Cursor>,
    state: Option<SessionState>,
}

impl Follower {
    async fn open(client: &reqwest::Client, base: &str, session: &str, cursor: Option<&Cursor>) -> Follower {
        let mut req = client.get(format!("{base}/api/sessions/{session}/events"));
        if let Some(cursor) = cursor {
            req = req.header("Last-Event-ID", cursor.to_string());
        }
        let res = req.send().await.expect("open the session stream");
        assert!(res.status().is_success(), "{}", res.status());
        Follower { res: Some(res), decoder: Decoder::new(), frames: Vec::new(), at: None, state: None }
    }

    /// Carries on from another follower's state (a client that reconnected).
    fn resuming(mut self, from: &Follower) -> Follower {
        self.state = from.state.clone();
        self.at = from.at.clone();
        self
    }

    /// Drops the connection, as a client whose network went away.
    fn disconnect(&mut self) {
        self.res = None;
    }

    fn cursor(&self) -> Cursor {
        self.at.clone().expect("a frame was read")
    }

    /// Reads the next chunk of frames and folds them; returns the last. Heartbeats are
    /// skipped.
    async fn next(&mut self) -> &Frame {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let res = self.res.as_mut().expect("connected");
            let chunk = tokio::time::timeout_at(deadline, res.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!("no frame within {WAIT:?} after {:?}", self.frames.last().map(Frame::cursor))
                })
                .expect("read the session stream")
                .expect("the session stream stays open");
            let mut got = false;
            for event in self.decoder.push(&chunk) {
                if event.event.as_deref() == Some("heartbeat") {
                    continue;
                }
                let frame: Frame = serde_json::from_str(&event.data).expect("a frame is JSON");
                assert_eq!(event.id, Some(frame.cursor().to_string()), "the SSE id is the frame's cursor");
                self.fold(frame);
                got = true;
            }
            if got {
                return self.frames.last().expect("just pushed");
            }
        }
    }

    fn fold(&mut self, frame: Frame) {
        match (&frame.body, &mut self.state, &self.at) {
            (FrameBody::Snapshot { state }, _, _) => self.state = Some((**state).clone()),
            (_, Some(state), Some(at)) => {
                // No hole, no duplicate: a frame that is not a snapshot follows the last
                // one taken (on a resumed stream, the cursor it resumed from).
                assert_eq!(
                    (&frame.stream_id, frame.seq),
                    (&at.stream_id, at.seq + 1),
                    "a frame out of order after {at}"
                );
                apply_frame(state, &frame.body);
            }
            _ => panic!("a stream without a cursor starts with a snapshot, got {}", frame.cursor()),
        }
        self.at = Some(frame.cursor());
        self.frames.push(frame);
    }

    /// Reads until a frame satisfies `done`.
    async fn until(&mut self, done: impl Fn(&Frame) -> bool) {
        while !done(self.next().await) {}
    }

    /// Reads until the stream is at `seq` of its current stream id.
    async fn to_seq(&mut self, seq: u64) {
        while self.frames.last().is_none_or(|f| f.seq < seq) {
            self.next().await;
        }
        assert_eq!(self.frames.last().map(|f| f.seq), Some(seq), "passed the node's seq");
    }

    /// The text deltas received, concatenated.
    fn streamed_text(&self) -> String {
        self.frames
            .iter()
            .filter_map(|f| match &f.body {
                FrameBody::LoopEvent {
                    event: AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { delta, .. } },
                    ..
                } => Some(delta.to_string()),
                _ => None,
            })
            .collect()
    }
}

fn is_settled(frame: &Frame) -> bool {
    matches!(&frame.body, FrameBody::LoopEvent { event: AgentEvent::AgentSettled {}, .. })
}

fn text_deltas(frames: &[Frame]) -> usize {
    frames
        .iter()
        .filter(|f| {
            matches!(
                &f.body,
                FrameBody::LoopEvent {
                    event: AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { .. } },
                    ..
                }
            )
        })
        .count()
}

/// The scripted model's answer to `stream: n`.
fn words(n: usize) -> String {
    (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// Checks a follower's folded state against the node's own view at the same seq: the
/// follower reads on until it is where the node's answer was.
async fn agrees_with_node(follower: &mut Follower, client: &reqwest::Client, base: &str, session: &str) {
    let detail = call(client.get(format!("{base}/api/sessions/{session}"))).await;
    assert_eq!(detail["streamId"], json!(follower.cursor().stream_id), "same stream on every node");
    follower.to_seq(detail["seq"].as_u64().expect("seq")).await;
    let folded = serde_json::to_value(follower.state.as_ref().expect("a state")).expect("json");
    assert_eq!(folded, detail["state"], "the folded stream is the node's view at seq {}", detail["seq"]);
}

/// A project and a session in it, made on `base`; the session id.
async fn session_on(client: &reqwest::Client, base: &str, dir: &std::path::Path) -> String {
    let project_dir = dir.join("project");
    std::fs::create_dir_all(&project_dir).expect("project dir");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    session["id"].as_str().expect("session id").to_owned()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("client")
}

#[tokio::test]
async fn a_client_follows_a_run_from_another_node_and_resumes_on_a_third_with_its_cursor() {
    let Some(db) = TestDb::create().await else { return };
    let Some(redis) = redis_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("follow-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "3"])
    };
    let ((_node_a, a), (_node_b, b), (_node_c, c)) = (node("a"), node("b"), node("c"));
    let session = session_on(&client, &a, dir.path()).await;

    // The client connects to B before the run starts on A.
    let mut on_b = Follower::open(&client, &b, &session, None).await;
    assert!(matches!(on_b.next().await.body, FrameBody::Snapshot { .. }));
    let accepted =
        call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 400"}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();

    // It sees the run live through B, then drops mid-answer.
    while text_deltas(&on_b.frames) < 100 {
        on_b.next().await;
    }
    let cursor = on_b.cursor();
    on_b.disconnect();
    // The run goes on meanwhile: A is well past the cursor before the client is back.
    wait_for(&client, &format!("{a}/api/sessions/{session}"), WAIT, |s| {
        s["seq"].as_u64().is_some_and(|seq| seq > cursor.seq + 50) || s["status"] == "idle"
    })
    .await;

    // Back on C with its cursor: exactly the frames it missed, then live ones.
    let mut on_c = Follower::open(&client, &c, &session, Some(&cursor)).await.resuming(&on_b);
    on_c.next().await;
    let first = on_c.frames[0].clone();
    assert!(!matches!(first.body, FrameBody::Snapshot { .. }), "a replay, not a snapshot: {}", first.cursor());
    assert_eq!((&first.stream_id, first.seq), (&cursor.stream_id, cursor.seq + 1), "the frame after the cursor");
    on_c.until(is_settled).await;
    let settled = call(client.get(format!("{c}/api/runs/{run}"))).await;
    assert_eq!(settled["status"], "completed", "{settled}");

    // Nothing lost, nothing twice: the text streamed over both connections is the
    // answer, and the folded state is C's view (and A's) at the same seq.
    let streamed = on_b.streamed_text() + &on_c.streamed_text();
    assert_eq!(streamed, words(400));
    agrees_with_node(&mut on_c, &client, &c, &session).await;
    let answer = &on_c.state.as_ref().expect("state").messages.last().expect("a message").message;
    assert_eq!(answer.text(), words(400));
    let mut on_a = Follower::open(&client, &a, &session, Some(&on_c.cursor())).await.resuming(&on_c);
    agrees_with_node(&mut on_a, &client, &a, &session).await;
}
