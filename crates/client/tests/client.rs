//! `spool-client` against a real server on a real port (built in-process as the
//! binary builds it: SQLite store, scripted model, workspace tools), with a TCP proxy
//! between the stream and the server that cuts connections mid-answer or drops a
//! frame, the way a flaky network or a broken proxy would.
//!
//! What a user would notice is checked: the answer the stream folds is the stored one,
//! word for word; the deltas it yields join to that text exactly once (no hole, no
//! repeat); approvals answered through the client run, or do not run, the tool call.

use spool_client::protocol::frame::{FrameBody, SessionState};
use spool_client::protocol::{AgentEvent, ApprovalId, Message, RunStatus, SessionId, SessionStatus, StreamDelta};
use spool_client::{SessionStream, Update};
use spool_engine::{Engine, EngineConfig, Models};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

// The README's example, verbatim (`the_readme_shows_the_example_this_test_runs`).
include!("readme/example.rs");

/// The longest any wait in these tests lasts before it fails.
const WAIT: Duration = Duration::from_secs(60);

struct Server {
    base: String,
    addr: SocketAddr,
    engine: Engine,
    dir: tempfile::TempDir,
    shutdown: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Server {
    /// A server whose scripted model pauses `delay` between deltas.
    async fn start(delay: Duration) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("project")).expect("project dir");
        let store = Arc::new(spool_store::SqliteStore::open(&dir.path().join("data/spool.db")).await.expect("store"));
        let models = Models::new(Arc::new(spool_model::ScriptedModel::new(delay)));
        let mut config = EngineConfig { data_dir: Some(dir.path().join("data")), ..EngineConfig::default() };
        // With a token, projects may only be registered under a root.
        config.workspace_roots.global.push(dir.path().to_path_buf());
        let engine = Engine::start(store, models, spool_tools::workspace_tools(), config).await.expect("engine");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let shutdown = CancellationToken::new();
        let state = spool_server::AppState::new(engine.clone(), spool_server::ServerConfig::default());
        tokio::spawn(spool_server::serve_state(listener, state, shutdown.clone()));
        Server { base: format!("http://{addr}"), addr, engine, dir, shutdown }
    }

    fn client(&self) -> Client {
        Client::new(&self.base).expect("a server URL")
    }

    fn project_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("project")
    }

    /// A new session in the server's project directory.
    async fn session(&self) -> SessionId {
        let client = self.client();
        let project = client.create_project(self.project_dir().to_str().expect("UTF-8"), None).await.expect("project");
        client.create_session(&project.id, None).await.expect("session").id
    }
}

/// Fast recovery, so the tests need no long waits.
fn quick() -> StreamOptions {
    StreamOptions {
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        watchdog: Duration::from_secs(20),
        interactive: true,
    }
}

/// What the proxy does to the stream connections it forwards.
#[derive(Clone)]
enum Plan {
    /// Connection `k` is cut after `after[k]` bytes of the server's answer; later ones pass.
    Cut { after: Vec<usize> },
    /// On the first connection, the `nth` SSE event containing `needle` never arrives.
    /// The request goes upstream as HTTP/1.0, so the answer is the raw event stream
    /// (no chunked framing to keep intact around the hole).
    Drop { needle: &'static str, nth: usize },
    /// The first connection forwards `after` bytes, then nothing more while staying
    /// open: a half-open connection, which only a watchdog notices.
    Stall { after: usize },
}

struct Proxy {
    base: String,
    /// Connections cut, events dropped.
    harmed: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, plan: Plan) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let harmed = Arc::new(AtomicUsize::new(0));
        let count = harmed.clone();
        tokio::spawn(async move {
            for k in 0.. {
                let Ok((client, _)) = listener.accept().await else { return };
                let Ok(server) = TcpStream::connect(upstream).await else { return };
                tokio::spawn(forward(client, server, plan.clone(), k, count.clone()));
            }
        });
        Proxy { base, harmed }
    }

    fn harmed(&self) -> usize {
        self.harmed.load(Ordering::SeqCst)
    }
}

async fn forward(client: TcpStream, server: TcpStream, plan: Plan, k: usize, harmed: Arc<AtomicUsize>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let downgrade = matches!(plan, Plan::Drop { .. }) && k == 0;
    // The request head, rewritten to HTTP/1.0 for a connection that drops an event.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client_read.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    if downgrade {
        let text = String::from_utf8_lossy(&head).replacen("HTTP/1.1\r\n", "HTTP/1.0\r\n", 1);
        head = text.into_bytes();
    }
    if server_write.write_all(&head).await.is_err() {
        return;
    }
    tokio::spawn(async move { tokio::io::copy(&mut client_read, &mut server_write).await });
    let mut sent = 0usize;
    let mut buffer = Vec::new();
    let mut seen = 0usize;
    let mut chunk = vec![0u8; 8192];
    loop {
        let n = match server_read.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match &plan {
            Plan::Cut { after } if k < after.len() => {
                let room = after[k] - sent;
                let take = n.min(room);
                if client_write.write_all(&chunk[..take]).await.is_err() {
                    return;
                }
                sent += take;
                if sent == after[k] {
                    harmed.fetch_add(1, Ordering::SeqCst);
                    return; // Both halves drop: the client sees the connection die.
                }
            }
            Plan::Stall { after } if k == 0 => {
                let take = n.min(after - sent);
                if client_write.write_all(&chunk[..take]).await.is_err() {
                    return;
                }
                sent += take;
                if sent == *after {
                    harmed.fetch_add(1, Ordering::SeqCst);
                    // Keep both ends open and silent for as long as the test runs.
                    return std::future::pending().await;
                }
            }
            Plan::Drop { needle, nth } if downgrade => {
                // Forward whole events (they end with a blank line), minus one.
                buffer.extend_from_slice(&chunk[..n]);
                while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = buffer.drain(..end + 2).collect();
                    if String::from_utf8_lossy(&event).contains(needle) {
                        seen += 1;
                        if seen == *nth {
                            harmed.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                    if client_write.write_all(&event).await.is_err() {
                        return;
                    }
                }
            }
            _ => {
                if client_write.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// What a test saw on a stream up to the end of a run.
#[derive(Default)]
struct Seen {
    /// Text deltas of `message_update` frames, in order, as applied.
    deltas: String,
    snapshots: usize,
    disconnects: usize,
    resyncs: Vec<String>,
}

impl Seen {
    fn note(&mut self, update: &Update) {
        match &update.event {
            Event::Snapshot => self.snapshots += 1,
            Event::Disconnected { .. } => self.disconnects += 1,
            Event::Resync { reason } => self.resyncs.push(reason.clone()),
            Event::Frame(frame) => {
                if let FrameBody::LoopEvent {
                    event: AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { delta, .. } },
                    ..
                } = &frame.body
                {
                    self.deltas.push_str(delta);
                }
            }
            _ => {}
        }
    }
}

/// Reads updates until `done` holds for the state; returns the last state.
async fn until(stream: &mut SessionStream, seen: &mut Seen, done: impl Fn(&SessionState) -> bool) -> Arc<SessionState> {
    let read = async {
        while let Some(update) = stream.next().await {
            seen.note(&update);
            if let Event::Failed { error } = &update.event {
                panic!("the stream failed: {error}");
            }
            if done(&update.state) {
                return update.state;
            }
        }
        panic!("the stream ended");
    };
    tokio::time::timeout(WAIT, read).await.expect("the stream got there in time")
}

/// The run is over and its answer committed.
fn answered(state: &SessionState) -> bool {
    state.status == SessionStatus::Idle
        && state.active_run.is_none()
        && state.messages.iter().any(|m| matches!(m.message, Message::Assistant { .. }))
}

fn last_answer(state: &SessionState) -> String {
    state
        .messages
        .iter()
        .rev()
        .find(|m| matches!(m.message, Message::Assistant { .. }))
        .expect("an answer")
        .message
        .text()
}

/// The committed answer as the server stores it (history, not the stream).
async fn stored_answer(client: &Client, session: &SessionId) -> String {
    let page = client.messages(session, None, None).await.expect("history");
    let answer = page.messages.iter().rev().find(|m| matches!(m.message, Message::Assistant { .. }));
    answer.expect("a stored answer").message.text()
}

fn words(n: usize) -> String {
    (1..=n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_off_five_times_folds_to_the_stored_text_with_nothing_lost_or_repeated() {
    let server = Server::start(Duration::from_millis(2)).await;
    let session = server.session().await;
    // Each cut lands mid-answer: 1,500 deltas make far more than 5 × 20 KB of frames.
    let proxy = Proxy::start(server.addr, Plan::Cut { after: vec![20_000; 5] }).await;
    let through_proxy = Client::new(&proxy.base).expect("proxy URL");
    let mut stream = through_proxy.follow(&session, quick()).await.expect("follow");
    let answer = server.client().say(&session, "stream: 1500").await.expect("prompt");
    assert!(matches!(answer, PromptAnswer::Started(_)), "{answer:?}");

    let mut seen = Seen::default();
    let state = until(&mut stream, &mut seen, answered).await;

    assert_eq!(proxy.harmed(), 5, "every planned cut happened");
    assert_eq!(seen.disconnects, 5, "each cut was noticed");
    assert_eq!(seen.snapshots, 1, "every reconnect resumed from the cursor: {:?}", seen.resyncs);
    let expected = words(1500);
    assert_eq!(stored_answer(&server.client(), &session).await, expected);
    assert_eq!(last_answer(&state), expected, "the folded answer is the stored one");
    assert_eq!(seen.deltas, expected, "the deltas yielded join to the answer exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_lost_in_transit_is_a_gap_and_a_snapshot_repairs_the_state() {
    let server = Server::start(Duration::from_millis(2)).await;
    let session = server.session().await;
    let proxy = Proxy::start(server.addr, Plan::Drop { needle: "\"text_delta\"", nth: 10 }).await;
    let through_proxy = Client::new(&proxy.base).expect("proxy URL");
    let mut stream = through_proxy.follow(&session, quick()).await.expect("follow");
    server.client().say(&session, "stream: 300").await.expect("prompt");

    let mut seen = Seen::default();
    let state = until(&mut stream, &mut seen, answered).await;

    assert_eq!(proxy.harmed(), 1, "one frame was dropped");
    assert_eq!(seen.resyncs.len(), 1, "{:?}", seen.resyncs);
    assert!(seen.resyncs[0].starts_with("gap after seq"), "{:?}", seen.resyncs);
    assert_eq!(seen.snapshots, 2, "the first, and the one the gap asked for");
    let expected = words(300);
    assert_eq!(stored_answer(&server.client(), &session).await, expected);
    assert_eq!(last_answer(&state), expected, "the snapshot filled the hole");
    assert!(!seen.deltas.contains("w9 w11"), "no delta was applied across the hole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_gone_silent_is_dropped_by_the_watchdog_and_the_stream_resumes() {
    let server = Server::start(Duration::from_millis(5)).await;
    let session = server.session().await;
    let proxy = Proxy::start(server.addr, Plan::Stall { after: 20_000 }).await;
    let through_proxy = Client::new(&proxy.base).expect("proxy URL");
    // 500 ms of silence at 5 ms a delta is ~100 frames: well inside the 256-frame
    // replay buffer, so the resume is a replay, not a snapshot.
    let options = StreamOptions { watchdog: Duration::from_millis(500), ..quick() };
    let mut stream = through_proxy.follow(&session, options).await.expect("follow");
    server.client().say(&session, "stream: 600").await.expect("prompt");

    let mut seen = Seen::default();
    let mut silent = Vec::new();
    let state = tokio::time::timeout(WAIT, async {
        while let Some(update) = stream.next().await {
            seen.note(&update);
            if let Event::Disconnected { reason, .. } = &update.event {
                silent.push(reason.clone());
            }
            if answered(&update.state) {
                return update.state;
            }
        }
        panic!("the stream ended");
    })
    .await
    .expect("in time");

    assert_eq!(proxy.harmed(), 1, "the first connection stalled");
    assert_eq!(silent.len(), 1, "{silent:?}");
    assert!(silent[0].starts_with("nothing arrived for"), "{silent:?}");
    assert_eq!(seen.snapshots, 1, "the new connection resumed from the cursor");
    let expected = words(600);
    assert_eq!(last_answer(&state), expected);
    assert_eq!(seen.deltas, expected);
}

/// The pending approval the stream shows, once it shows one.
async fn pending(stream: &mut SessionStream) -> ApprovalId {
    let state = until(stream, &mut Seen::default(), |s| !s.pending_approvals.is_empty()).await;
    state.pending_approvals[0].id.clone()
}

#[tokio::test]
async fn approvals_answered_through_the_client_run_or_skip_the_call() {
    let server = Server::start(Duration::ZERO).await;
    let session = server.session().await;
    let client = server.client();
    let mut stream = client.follow(&session, quick()).await.expect("follow");
    let write = |file: &str| format!(r#"tool: write {{"path": "{file}", "content": "hi\n"}}"#);
    let idle_after = |n: usize| move |s: &SessionState| s.status == SessionStatus::Idle && s.total as usize >= n;

    client.say(&session, &write("once.txt")).await.expect("prompt");
    let approval = pending(&mut stream).await;
    let decided = client.approve_once(&session, &approval).await.expect("approve");
    assert_eq!(decided.status, "resolved");
    until(&mut stream, &mut Seen::default(), idle_after(4)).await;
    assert_eq!(std::fs::read_to_string(server.project_dir().join("once.txt")).expect("written"), "hi\n");
    let again = client.approve_once(&session, &approval).await.expect_err("decided once only");
    assert_eq!(again.code(), Some("already_resolved"));

    client.say(&session, &write("rejected.txt")).await.expect("prompt");
    let approval = pending(&mut stream).await;
    client.reject(&session, &approval, Some("not that file")).await.expect("reject");
    let state = until(&mut stream, &mut Seen::default(), idle_after(8)).await;
    assert!(!server.project_dir().join("rejected.txt").exists(), "a rejected call never runs");
    let result = state.messages.iter().find_map(|m| match &m.message {
        Message::ToolResult { content, .. } if m.message.text().contains("not that file") => Some(content.len()),
        _ => None,
    });
    assert!(result.is_some(), "the model is told why: {:?}", state.messages);

    client.say(&session, &write("always.txt")).await.expect("prompt");
    let approval = pending(&mut stream).await;
    client.approve_always(&session, &approval).await.expect("always");
    until(&mut stream, &mut Seen::default(), idle_after(12)).await;
    client.say(&session, &write("always-again.txt")).await.expect("prompt");
    let state = until(&mut stream, &mut Seen::default(), idle_after(16)).await;
    assert!(state.pending_approvals.is_empty());
    assert!(server.project_dir().join("always-again.txt").exists(), "`always` allowed the next call without asking");
}

#[tokio::test]
async fn stop_cancels_the_run_and_a_deleted_session_is_not_found() {
    let server = Server::start(Duration::from_millis(20)).await;
    let session = server.session().await;
    let client = server.client();
    let mut stream = client.follow(&session, quick()).await.expect("follow");
    client.say(&session, "stream: 100000").await.expect("prompt");
    until(&mut stream, &mut Seen::default(), |s| s.drafts.values().any(|d| !d.text().is_empty())).await;
    let stopped = client.stop(&session).await.expect("stop");
    assert!(stopped.aborted);
    let run = stopped.run_id.expect("the run stopped");
    let state = until(&mut stream, &mut Seen::default(), |s| s.status == SessionStatus::Idle).await;
    assert!(
        state.prompt_timings.values().any(|t| t.status == Some(RunStatus::Cancelled) && t.run_id == Some(run.clone()))
    );
    assert!(!client.stop(&session).await.expect("a second stop").aborted, "nothing is running any more");

    client.delete_session(&session).await.expect("delete");
    let gone = client.session(&session).await.expect_err("deleted");
    assert_eq!(gone.code(), Some("not_found"));
    let failed = tokio::time::timeout(WAIT, async {
        while let Some(update) = stream.next().await {
            if let Event::Failed { error } = update.event {
                return error;
            }
        }
        panic!("the stream ended without saying why");
    })
    .await
    .expect("the stream gives up on a deleted session");
    assert!(failed.contains("not_found"), "{failed}");
    assert!(stream.next().await.is_none(), "and ends");
}

#[tokio::test]
async fn a_token_is_sent_with_every_call_and_the_stream_and_a_refusal_reads_as_the_servers_error() {
    let server = Server::start(Duration::ZERO).await;
    let bad = Client::new("ftp://example").expect_err("not http");
    assert!(matches!(bad, spool_client::Error::BadUrl(_)));
    let (_, secret) = server.engine.auth().create_token("alice").await.expect("a token");

    let refused = server.client().projects().await.expect_err("no token");
    assert_eq!(refused.code(), Some("unauthorized"), "{refused}");
    assert!(!refused.is_transient());
    let wrong = server.client().with_token("not-a-token").projects().await.expect_err("a wrong token");
    assert_eq!(wrong.code(), Some("invalid_token"), "{wrong}");

    let alice = server.client().with_token(secret);
    let project = alice.create_project(server.project_dir().to_str().expect("UTF-8"), None).await.expect("project");
    let session = alice.create_session(&project.id, Some("alice's")).await.expect("session").id;
    let mut stream = alice.follow(&session, quick()).await.expect("the stream takes the token too");
    alice.say(&session, "echo: hello alice").await.expect("prompt");
    let state = until(&mut stream, &mut Seen::default(), answered).await;
    assert_eq!(last_answer(&state), "hello alice");
    assert_eq!(state.session.title, "alice's");
    let listed = alice.sessions(&project.id, false).await.expect("list");
    assert_eq!(listed.iter().map(|s| &s.session.id).collect::<Vec<_>>(), vec![&session]);
}

#[tokio::test]
async fn the_readme_example_asks_and_gets_the_answer() {
    let server = Server::start(Duration::ZERO).await;
    let project = server.project_dir();
    let answer = tokio::time::timeout(WAIT, ask(&server.base, project.to_str().expect("UTF-8"), "echo: hi there"))
        .await
        .expect("in time")
        .expect("an answer");
    assert_eq!(answer, "hi there");
}

#[test]
fn the_readme_shows_the_example_this_test_runs() {
    let readme = include_str!("../../../README.md");
    let example = include_str!("readme/example.rs");
    assert!(readme.contains(example), "README.md's Rust client example differs from tests/readme/example.rs");
}
