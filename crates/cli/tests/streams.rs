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
//! under the tests running beside it. Built without them the tests are ignored, except
//! under CI, where they fail (see `common`).

use crate::common;

use common::{Spool, SseStream, TestDb, WAIT, call, redis_url, start_with, wait_for};
use serde_json::{Value, json};
use spool_engine::view::apply_frame;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{AgentEvent, Cursor, StreamDelta};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A native session stream (`GET /api/sessions/:id/events`), folded as it is read.
struct Follower {
    /// The connection; `None` once the client dropped it.
    stream: Option<SseStream>,
    /// Every frame received, in order.
    frames: Vec<Frame>,
    /// The last frame taken, on this connection or (resumed) the one before.
    at: Option<Cursor>,
    state: Option<SessionState>,
    /// The answer's text as the client shows it after each frame, when it is checked
    /// never to lose text it showed (one run, one answer).
    shown: Option<String>,
}

impl Follower {
    async fn open(client: &reqwest::Client, base: &str, session: &str, cursor: Option<&Cursor>) -> Follower {
        let mut req = client.get(format!("{base}/api/sessions/{session}/events"));
        if let Some(cursor) = cursor {
            req = req.header("Last-Event-ID", cursor.to_string());
        }
        let res = req.send().await.expect("open the session stream");
        assert!(res.status().is_success(), "{}", res.status());
        let stream = Some(SseStream::new(res).with_wait(WAIT));
        Follower { stream, frames: Vec::new(), at: None, state: None, shown: None }
    }

    /// Carries on from another follower's state (a client that reconnected).
    fn resuming(mut self, from: &Follower) -> Follower {
        self.state = from.state.clone();
        self.at = from.at.clone();
        self
    }

    /// Drops the connection, as a client whose network went away.
    fn disconnect(&mut self) {
        self.stream = None;
    }

    fn cursor(&self) -> Cursor {
        self.at.clone().expect("a frame was read")
    }

    /// Reads the next frame and folds it; returns it. Heartbeats are skipped.
    async fn next(&mut self) -> &Frame {
        let stream = self.stream.as_mut().expect("connected");
        let event = loop {
            let event = stream.next_event().await.expect("the session stream stays open");
            if !spool_test_support::sse::is_heartbeat(&event) {
                break event;
            }
        };
        let frame: Frame = serde_json::from_str(&event.data).expect("a frame is JSON");
        assert_eq!(event.id, Some(frame.cursor().to_string()), "the SSE id is the frame's cursor");
        self.fold(frame);
        self.frames.last().expect("just pushed")
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
        if let (Some(before), Some(state)) = (&self.shown, &self.state) {
            let now = shown(state);
            assert!(
                now.starts_with(before.as_str()),
                "at {}: the answer went from {before:?} to {now:?}",
                frame.cursor()
            );
            self.shown = Some(now);
        }
        self.at = Some(frame.cursor());
        self.frames.push(frame);
    }

    /// Reads until a frame satisfies `done`.
    async fn until(&mut self, done: impl Fn(&Frame) -> bool) {
        while !done(self.next().await) {}
    }

    /// Reads until the stream is at `seq` of its current stream id. A follower that
    /// resumed at `seq` already is there: a caught-up cursor gets no frame at all.
    async fn read_to_seq(&mut self, seq: u64) {
        while self.at.as_ref().is_none_or(|at| at.seq < seq) {
            self.next().await;
        }
        assert_eq!(self.at.as_ref().map(|at| at.seq), Some(seq), "passed the node's seq");
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

/// The answer's text as a client shows it: the draft being streamed, else the last
/// committed assistant message.
fn shown(state: &SessionState) -> String {
    match state.drafts.values().next_back() {
        Some(draft) => draft.text(),
        None => match state.messages.last().map(|m| &m.message) {
            Some(message @ spool_protocol::Message::Assistant { .. }) => message.text(),
            _ => String::new(),
        },
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
    follower.read_to_seq(detail["seq"].as_u64().expect("seq")).await;
    let folded = serde_json::to_value(follower.state.as_ref().expect("a state")).expect("json");
    assert_eq!(folded, detail["state"], "the folded stream is the node's view at seq {}", detail["seq"]);
}

/// A project and a session in it, made on `base`; the session id.
async fn session_on(client: &reqwest::Client, base: &str, dir: &std::path::Path) -> String {
    let project_dir = dir.join("project");
    std::fs::create_dir_all(&project_dir).expect("project dir");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    session_in(client, base, &project["id"]).await
}

/// Another session in `project`; its id.
async fn session_in(client: &reqwest::Client, base: &str, project: &serde_json::Value) -> String {
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project}))).await;
    session["id"].as_str().expect("session id").to_owned()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("client")
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_client_follows_a_run_from_another_node_and_resumes_on_a_third_with_its_cursor() {
    let db = TestDb::create().await;
    let redis = redis_url();
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
    // The run's record is A's to write; C's stream may show the end a moment earlier.
    let settled = wait_for(&client, &format!("{c}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(settled["status"], "completed", "{settled}");

    // Nothing lost, nothing twice: the text streamed over both connections is the
    // answer — unless a node whose Redis link fell behind sent a snapshot meanwhile
    // (README, "When Redis fails"; seen on a loaded machine), whose text then is not in
    // the deltas. Either way `fold` checked the answer never lost text, and the folded
    // state is C's view (and A's) at the same seq.
    let is_snapshot = |f: &&Frame| matches!(f.body, FrameBody::Snapshot { .. });
    let snapshots = on_b.frames[1..].iter().chain(&on_c.frames).filter(is_snapshot).count();
    if snapshots == 0 {
        assert_eq!(on_b.streamed_text() + &on_c.streamed_text(), words(400));
    }
    agrees_with_node(&mut on_c, &client, &c, &session).await;
    let answer = &on_c.state.as_ref().expect("state").messages.last().expect("a message").message;
    assert_eq!(answer.text(), words(400));
    let mut on_a = Follower::open(&client, &a, &session, Some(&on_c.cursor())).await.resuming(&on_c);
    agrees_with_node(&mut on_a, &client, &a, &session).await;
}

/// A Redis of the test's own, on a free loopback port, keeping nothing on disk.
struct PrivateRedis {
    child: Child,
    url: String,
    port: u16,
}

impl PrivateRedis {
    const SERVER_VAR: &str = "SPOOL_TEST_REDIS_SERVER";

    /// Only in tests gated on Redis: where one runs, `redis-server` is installed too
    /// (`.ci/services` sees to it).
    fn start() -> PrivateRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let child = Self::spawn(port);
        let redis = PrivateRedis { child, url: format!("redis://127.0.0.1:{port}"), port };
        redis.wait_ready();
        redis
    }

    fn spawn(port: u16) -> Child {
        let bin = std::env::var(Self::SERVER_VAR).unwrap_or_else(|_| "redis-server".into());
        Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} ({e}): install redis-server or set {}", Self::SERVER_VAR))
    }

    fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        while self.try_command("PING").as_deref() != Some("+PONG") {
            assert!(std::time::Instant::now() < deadline, "redis did not answer on port {} within {WAIT:?}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: gone at once, with everything it held.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new, empty Redis on the same port.
    fn restart(&mut self) {
        self.child = Self::spawn(self.port);
        self.wait_ready();
    }

    /// Sends a one-word command; its one-line answer.
    fn try_command(&self, command: &str) -> Option<String> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        conn.write_all(format!("*1\r\n${}\r\n{command}\r\n", command.len()).as_bytes()).ok()?;
        let mut answer = [0u8; 64];
        let n = conn.read(&mut answer).ok()?;
        Some(String::from_utf8_lossy(&answer[..n]).trim_end().to_owned())
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn flushall_in_the_middle_of_a_stream_costs_clients_a_snapshot_never_a_hole() {
    let db = TestDb::create().await;
    let redis = PrivateRedis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), format!("flush-{n}"));
        start_with(&db.url, &data, &["--redis-url", &redis.url, "--node-id", &id, "--scripted-delay-ms", "3"])
    };
    let ((_node_a, a), (_node_b, b)) = (node("a"), node("b"));
    let session = session_on(&client, &a, dir.path()).await;

    // One client on the node running the session, one on the other.
    let mut followers = Vec::new();
    for base in [&a, &b] {
        let mut follower = Follower::open(&client, base, &session, None).await;
        follower.next().await;
        follower.shown = Some(String::new());
        followers.push(follower);
    }
    let epoch = followers[0].cursor().stream_id;
    let accepted =
        call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 600"}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    while text_deltas(&followers[1].frames) < 150 {
        followers[1].next().await;
    }
    assert_eq!(redis.try_command("FLUSHALL").as_deref(), Some("+OK"));
    let flushed_at = followers[1].frames.len();

    for (follower, base) in followers.iter_mut().zip([&a, &b]) {
        follower.until(is_settled).await;
        // The stream went on in a new epoch, entered through a snapshot; `fold` checked
        // that every other frame followed the one before, and that the answer on screen
        // never lost text it had shown (the snapshot carried the text streamed so far).
        let entered = follower.frames.iter().find(|f| f.stream_id != epoch).expect("a frame of the new epoch");
        assert!(matches!(entered.body, FrameBody::Snapshot { .. }), "{base}: a new epoch begins with a snapshot");
        // The answer is whole: the snapshot carried the text streamed before the flush.
        let state = follower.state.as_ref().expect("state");
        assert_eq!(state.messages.last().expect("a message").message.text(), words(600), "{base}");
        agrees_with_node(follower, &client, base, &session).await;
    }
    assert!(followers[1].frames.len() > flushed_at + 10, "the run streamed on after the flush");
    let settled = wait_for(&client, &format!("{b}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(settled["status"], "completed", "{settled}");
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn clients_on_the_other_nodes_see_a_killed_nodes_run_end_as_node_lost() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("lost-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        let args = ["--redis-url", &redis, "--node-id", &id, "--lease-secs", "1", "--scripted-delay-ms", "20"];
        start_with(&db.url, &data, &args)
    };
    let ((node_a, a), (_node_b, b), (_node_c, c)) = (node("a"), node("b"), node("c"));
    let session = session_on(&client, &a, dir.path()).await;
    let mut followers = Vec::new();
    for base in [&b, &c] {
        let mut follower = Follower::open(&client, base, &session, None).await;
        follower.next().await;
        followers.push(follower);
    }
    let accepted =
        call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 100000"}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    for follower in &mut followers {
        while text_deltas(&follower.frames) < 10 {
            follower.next().await;
        }
    }

    drop(node_a); // SIGKILL: no shutdown, no lease release.
    for (follower, base) in followers.iter_mut().zip([&b, &c]) {
        follower.until(is_settled).await;
        let ended = follower.frames.iter().rev().find_map(|f| match &f.body {
            FrameBody::LoopEvent { run_id, event: AgentEvent::AgentEnd { status, .. }, .. } => Some((run_id, status)),
            _ => None,
        });
        assert_eq!(ended.map(|(r, s)| (r.to_string(), s.as_str())), Some((run.clone(), "failed")), "{base}");
        let state = follower.state.as_ref().expect("state");
        assert!(state.active_run.is_none() && state.drafts.is_empty(), "{base}: {:?}", state.status);
        agrees_with_node(follower, &client, base, &session).await;
    }
    let failed = wait_for(&client, &format!("{c}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!((failed["status"].as_str(), failed["error"]["code"].as_str()), (Some("failed"), Some("node_lost")));
    let idle = wait_for(&client, &format!("{b}/api/sessions/{session}"), WAIT, |s| s["status"] == "idle").await;
    assert!(idle["state"]["activeRun"].is_null(), "{idle}");
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_client_joining_a_run_on_another_node_gets_the_text_streamed_so_far() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("join-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "3"])
    };
    let ((_node_a, a), (_node_b, b)) = (node("a"), node("b"));
    let session = session_on(&client, &a, dir.path()).await;
    call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 400"}))).await;
    wait_for(&client, &format!("{a}/api/sessions/{session}"), WAIT, |s| s["seq"].as_u64().is_some_and(|n| n > 100))
        .await;

    // Node B has not loaded the session yet: it begins following it mid-answer.
    let mut on_b = Follower::open(&client, &b, &session, None).await;
    on_b.next().await;
    assert!(matches!(on_b.frames[0].body, FrameBody::Snapshot { .. }), "a stream without a cursor starts so");
    let so_far = shown(on_b.state.as_ref().expect("state"));
    assert!(so_far.split(' ').count() >= 50 && words(400).starts_with(&so_far), "the snapshot shows {so_far:?}");
    on_b.shown = Some(so_far);
    on_b.until(is_settled).await;
    assert_eq!(shown(on_b.state.as_ref().expect("state")), words(400));
    agrees_with_node(&mut on_b, &client, &b, &session).await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_runs_on_while_redis_is_away_and_its_clients_catch_up_when_it_is_back() {
    let db = TestDb::create().await;
    let mut redis = PrivateRedis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let args = ["--redis-url", &redis.url, "--node-id", "away-a", "--scripted-delay-ms", "3"];
    let (_node, a) = start_with(&db.url, &dir.path().join("a"), &args);
    let session = session_on(&client, &a, dir.path()).await;
    let detail = call(client.get(format!("{a}/api/sessions/{session}"))).await;
    let unopened = session_in(&client, &a, &detail["state"]["session"]["projectId"]).await;
    let mut follower = Follower::open(&client, &a, &session, None).await;
    follower.next().await;

    redis.kill();
    // A session this node follows already runs and is stored as usual.
    let accepted =
        call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 50"}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let done = wait_for(&client, &format!("{a}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    // One it would have to start following cannot be opened until Redis is back.
    let refused = client.get(format!("{a}/api/sessions/{unopened}")).send().await.expect("request");
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(body["error"]["code"], "bus_unavailable", "{body}");

    // Redis is back, empty: the open stream continues from a snapshot with the answer.
    redis.restart();
    let before = follower.cursor().stream_id;
    follower.until(|f| f.stream_id != before).await;
    assert!(matches!(follower.frames.last().expect("frame").body, FrameBody::Snapshot { .. }));
    assert_eq!(shown(follower.state.as_ref().expect("state")), words(50));
    agrees_with_node(&mut follower, &client, &a, &session).await;
    call(client.get(format!("{a}/api/sessions/{unopened}"))).await;
}

/// Sends one command to the Redis at `url` (`redis://host:port[/db]`); its first line.
fn redis_command(url: &str, args: &[&str]) -> String {
    let server = url.trim_start_matches("redis://").split('/').next().expect("host:port");
    let mut conn = TcpStream::connect(server).expect("connect to redis");
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    conn.write_all(request.as_bytes()).expect("send");
    let mut answer = [0u8; 256];
    let n = conn.read(&mut answer).expect("answer");
    String::from_utf8_lossy(&answer[..n]).lines().next().unwrap_or_default().to_owned()
}

/// Waits until `node` has recorded clients on `session`'s stream (the bus's watcher
/// entry): a readiness check for tests where another node must count them.
async fn until_recorded(redis: &str, session: &str, node: &str) {
    let key = format!("spool:{{{session}}}:watch");
    let deadline = tokio::time::Instant::now() + WAIT;
    while redis_command(redis, &["HEXISTS", &key, node]) != ":1" {
        assert!(tokio::time::Instant::now() < deadline, "{node} did not record its clients within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_run_that_ends_with_its_last_listener_counts_the_listeners_on_every_node() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("watch-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "20"])
    };
    let ((_node_a, a), (_node_b, b)) = (node("a"), node("b"));
    let session = session_on(&client, &a, dir.path()).await;

    // The run's only listener is on B.
    let mut on_b = Follower::open(&client, &b, &session, None).await;
    on_b.next().await;
    until_recorded(&redis, &session, &name("b")).await;
    let prompt = json!({"text": "stream: 100000", "onDisconnect": "cancel"});
    let accepted = call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&prompt)).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    while text_deltas(&on_b.frames) < 20 {
        on_b.next().await;
    }
    // A listener comes and goes on A: the one on B still counts.
    let mut on_a = Follower::open(&client, &a, &session, None).await;
    on_a.next().await;
    drop(on_a);
    // Long enough for A to have looked at B's count more than once (every second).
    while text_deltas(&on_b.frames) < 150 {
        on_b.next().await;
    }
    assert_eq!(call(client.get(format!("{a}/api/runs/{run}"))).await["status"], "running");

    // Cancelled, by the leaving: the 2,000 s answer cannot have ended on its own.
    on_b.disconnect();
    let ended = wait_for(&client, &format!("{a}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(ended["status"], "cancelled", "{ended}");
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn an_interactive_view_on_another_node_keeps_a_deny_policy_approval_waiting() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("views-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id])
    };
    let ((_node_a, a), (_node_b, b)) = (node("a"), node("b"));
    let session = session_on(&client, &a, dir.path()).await;
    let view = client.get(format!("{b}/api/sessions/{session}/events?approvals=1")).send().await.expect("open");
    assert!(view.status().is_success());
    until_recorded(&redis, &session, &name("b")).await;

    // Policy deny: an approval nobody could answer fails at once. Someone can, on B.
    let prompt = format!("tool: bash {}", json!({"command": "echo ran"}));
    let body = json!({"text": prompt, "approvalPolicy": "deny"});
    let accepted = call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&body)).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let parked = wait_for(&client, &format!("{a}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(parked["status"], "interrupted", "waits for the person on B: {parked}");
    // B learns of the approval from A's frames, through Redis: a moment after A parked.
    let pending = |d: &Value| d["state"]["pendingApprovals"].as_array().is_some_and(|a| !a.is_empty());
    let detail = wait_for(&client, &format!("{b}/api/sessions/{session}"), WAIT, pending).await;
    assert_eq!(detail["state"]["pendingApprovals"][0]["tool"], "bash", "{detail}");
    drop(view);
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn an_opencode_client_on_another_node_follows_the_run() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client();
    let name = |n: &str| format!("opencode-{n}-{}", std::process::id());
    let node = |n: &str| -> (Spool, String) {
        let (data, id) = (dir.path().join(n), name(n));
        start_with(&db.url, &data, &["--redis-url", &redis, "--node-id", &id, "--scripted-delay-ms", "3"])
    };
    let ((_node_a, a), (_node_b, b)) = (node("a"), node("b"));
    let session = session_on(&client, &a, dir.path()).await;
    let project_dir = dir.path().join("project").canonicalize().expect("project dir");

    // OpenCode's event stream on B (legacy deltas: each update carries the text so far).
    let directory: String = url_encode(project_dir.to_str().expect("utf-8"));
    let res = client.get(format!("{b}/event?directory={directory}&deltas=legacy")).send().await.expect("/event");
    assert!(res.status().is_success(), "{}", res.status());
    let mut events = SseStream::new(res).with_wait(WAIT);
    while events.next_json().await.expect("the stream stays open")["type"] != "server.connected" {}

    call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": "stream: 200"}))).await;
    let mut text = String::new();
    loop {
        let event = events.next_json().await.expect("the stream stays open");
        if event["properties"]["sessionID"] != session.as_str() {
            continue;
        }
        if event["type"] == "message.part.updated" && event["properties"]["delta"].is_string() {
            text = event["properties"]["part"]["text"].as_str().expect("text").to_owned();
        }
        if event["type"] == "session.idle" {
            break;
        }
    }
    assert_eq!(text, words(200), "the answer, streamed through B");
}

fn url_encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
