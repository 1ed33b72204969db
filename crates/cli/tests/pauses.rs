//! A node that lost its lease writes nothing for what it lost (issue 43): two `spool
//! serve` nodes on one PostgreSQL database and one Redis, with a lease of two seconds.
//!
//! Node A runs a run that sits in a tool call; then A is taken away for longer than its
//! lease: frozen (SIGSTOP), or cut off from PostgreSQL by a proxy between them (its
//! connections closed, or its traffic held and delivered late), and while cut it says
//! it is not ready (`/api/ready`, 503). Node B's reaper settles the run `failed` with
//! `node_lost`, and B serves the session (a new prompt there completes). When A is back
//! it must leave all of that as it is: no message, run, event or session record
//! written for the lost run, and no frame published for it, so a client following the
//! session on either node sees the run end once, every frame once, in the same order on
//! both nodes. A then serves the session again like any node.
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`;
//! built without them the tests are ignored, except under CI (see `common`).

use crate::common;

use common::{Spool, TestDb, WAIT, call, redis_url, start_with, wait_for};
use serde_json::{Value, json};
use spool_test_support::ReceivedFrame;
use spool_test_support::proxy::Proxy;
use std::net::ToSocketAddrs;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

/// The lease's lifetime (`--lease-secs`): short, so a frozen node loses it within
/// seconds, and long enough that a busy test machine never misses a renewal (one
/// every third of it).
const LEASE_SECS: &str = "2";

/// A node's data directory with a config that lets `bash` run unasked: the run goes
/// straight into its tool call, with no approval to park at.
fn data_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let data = root.join(name);
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("config.toml"), "[[permission]]\ntool = \"bash\"\naction = \"allow\"\n").expect("config");
    data
}

/// One node, on the store at `db_url` and the bus at `redis`.
fn node(db_url: &str, redis: &str, root: &Path, name: &str) -> (Spool, String) {
    let data = data_dir(root, name);
    let id = format!("{name}-{}", std::process::id());
    let args = ["--redis-url", redis, "--node-id", &id, "--lease-secs", LEASE_SECS, "--scripted-delay-ms", "2"];
    start_with(db_url, &data, &args)
}

/// A client following the session's native stream on one node, from before the run:
/// every frame it reads, in order, goes to the test through a channel.
struct Follower {
    frames: mpsc::UnboundedReceiver<ReceivedFrame>,
    seen: Vec<ReceivedFrame>,
}

impl Follower {
    async fn open(client: &reqwest::Client, base: &str, session: &str) -> Follower {
        let res = client.get(format!("{base}/api/sessions/{session}/events")).send().await.expect("open the stream");
        assert_eq!(res.status(), 200);
        // Long enough for the node to be frozen and wake again.
        let mut stream = spool_test_support::SseStream::new(res).with_wait(WAIT);
        let (tx, frames) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(frame) = stream.next_frame().await {
                if tx.send(frame).is_err() {
                    return;
                }
            }
        });
        Follower { frames, seen: Vec::new() }
    }

    /// Reads on until a frame satisfies `done` (within [`WAIT`]).
    async fn until(&mut self, done: impl Fn(&ReceivedFrame) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.frames.recv())
                .await
                .unwrap_or_else(|_| panic!("no such frame within {WAIT:?}; read: {:#?}", kinds(&self.seen)))
                .expect("the stream goes on");
            let hit = done(&frame);
            self.seen.push(frame);
            if hit {
                return;
            }
        }
    }
}

/// A frame's type, and its agent event's with its run, for a failure message.
fn kinds(frames: &[ReceivedFrame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| {
            let event = f.event_type().unwrap_or("");
            format!("{}:{} {} {} {}", f.stream_id, f.seq, f.kind, event, f.json["runId"].as_str().unwrap_or(""))
        })
        .collect()
}

fn is_event(frame: &ReceivedFrame, run: &str, event: &str) -> bool {
    frame.json["runId"] == run && frame.event_type() == Some(event)
}

/// What a client must see on each node: every frame once, numbered without a gap, the
/// same frames on both nodes; the lost run ends once (`node_lost`), and nothing of it
/// comes after its `agent_settled`.
fn assert_seen_once(on_a: &[ReceivedFrame], on_b: &[ReceivedFrame], lost: &str) {
    for (node, seen) in [("A", on_a), ("B", on_b)] {
        assert_numbered_without_gap(node, seen);
        let ends: Vec<&ReceivedFrame> = seen.iter().filter(|f| is_event(f, lost, "agent_end")).collect();
        assert_eq!(ends.len(), 1, "on {node}, the lost run ends once: {:#?}", kinds(seen));
        assert_eq!(ends[0].json["event"]["error"]["code"], "node_lost", "on {node}: {}", ends[0].json);
        let settled = seen.iter().position(|f| is_event(f, lost, "agent_settled")).expect("the lost run settles");
        let after: Vec<String> = kinds(&seen[settled + 1..]).into_iter().filter(|k| k.ends_with(lost)).collect();
        assert!(after.is_empty(), "on {node}, nothing of the lost run after it settled: {after:#?}");
    }
    assert_alike(on_a, on_b);
}

/// Every frame `seen` on `node` follows the one before on the same stream, numbered
/// one up: none missing, none repeated.
fn assert_numbered_without_gap(node: &str, seen: &[ReceivedFrame]) {
    for pair in seen.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            after.stream_id == before.stream_id && after.seq == before.seq + 1,
            "on {node}, {}:{} follows {}:{}: {:#?}",
            after.stream_id,
            after.seq,
            before.stream_id,
            before.seq,
            kinds(seen)
        );
    }
}

/// Both clients got the same frames once both were following. Each began with a
/// snapshot of the state up to its first seq, and whichever opened later starts later:
/// its snapshot stands for the frame the other got under that seq (a presence frame,
/// say), so the frames compared are those after the later start.
fn assert_alike(on_a: &[ReceivedFrame], on_b: &[ReceivedFrame]) {
    let start = on_a[0].seq.max(on_b[0].seq);
    let after_start = |seen: &[ReceivedFrame]| -> Vec<(String, u64, Value)> {
        seen.iter().filter(|f| f.seq > start).map(|f| (f.stream_id.clone(), f.seq, f.json.clone())).collect()
    };
    assert!(
        after_start(on_a) == after_start(on_b),
        "the same frames on both nodes:\nA {:#?}\nB {:#?}",
        kinds(on_a),
        kinds(on_b)
    );
}

/// What the store holds of a session: its messages (index, role, text), its runs, the
/// outbox events about it and the session record, as comparable text.
async fn stored(db: &sqlx::PgPool, session: &str) -> Value {
    let rows = |sql: &'static str| {
        let db = db.clone();
        let session = session.to_owned();
        async move {
            let rows: Vec<(String,)> = sqlx::query_as(sql).bind(session).fetch_all(&db).await.expect(sql);
            rows.into_iter().map(|(row,)| serde_json::from_str::<Value>(&row).expect("json")).collect::<Vec<_>>()
        }
    };
    json!({
        "messages": rows("SELECT row_to_json(m)::text FROM (SELECT id, idx, role FROM messages
                          WHERE session_id = $1 ORDER BY idx) m").await,
        "parts": rows("SELECT row_to_json(p)::text FROM (SELECT message_id, position, kind, data FROM parts
                       WHERE session_id = $1 ORDER BY message_id, position) p").await,
        "runs": rows("SELECT row_to_json(r)::text FROM (SELECT * FROM runs WHERE session_id = $1 ORDER BY id) r").await,
        "events": rows("SELECT row_to_json(e)::text FROM (SELECT id, type, run_id FROM events
                        WHERE session_id = $1 ORDER BY id) e").await,
        "session": rows("SELECT row_to_json(s)::text FROM (SELECT * FROM sessions WHERE id = $1) s").await,
        "drafts": rows("SELECT row_to_json(d)::text FROM (SELECT session_id, run_id FROM message_drafts
                        WHERE session_id = $1) d").await,
        "notes": rows("SELECT row_to_json(n)::text FROM (SELECT t.todos, m.memory FROM sessions s
                       LEFT JOIN session_todos t ON t.session_id = s.id
                       LEFT JOIN session_memory m ON m.session_id = s.id WHERE s.id = $1) n").await,
    })
}

/// Prompts `text` on `base` until the node takes it (a node still winding a run down
/// answers busy), then waits for the run to settle; returns the run.
async fn prompt_when_free(client: &reqwest::Client, base: &str, session: &str, text: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    let accepted = loop {
        let res = client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": text}));
        let res = res.send().await.expect("prompt");
        let status = res.status();
        let body: Value = res.json().await.expect("json");
        if status.is_success() {
            break body;
        }
        assert_eq!(status, 409, "only busy while the node winds down: {body}");
        assert!(tokio::time::Instant::now() < deadline, "never free: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let run = accepted["runId"].as_str().expect("run id");
    wait_for(client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await
}

/// Two nodes on one database, a session on them followed by a client on each, and
/// what they need kept alive.
struct Scene {
    client: reqwest::Client,
    a: String,
    b: String,
    node_a: Spool,
    store: sqlx::PgPool,
    session: String,
    project_dir: std::path::PathBuf,
    on_a: Follower,
    on_b: Follower,
    _node_b: Spool,
    _dir: tempfile::TempDir,
    _db: TestDb,
}

impl Scene {
    /// Nodes A (on the store at `a_url` and the bus at `a_redis`: the services' own
    /// URLs or a proxy's) and B.
    async fn start(db: TestDb, a_url: &str, a_redis: &str) -> Scene {
        let dir = tempfile::tempdir().expect("tempdir");
        let project_dir = dir.path().join("project");
        std::fs::create_dir(&project_dir).expect("project dir");
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let ((node_a, a), (node_b, b)) =
            (node(a_url, a_redis, dir.path(), "a"), node(&db.url, &redis_url(), dir.path(), "b"));
        let store =
            sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&db.url).await.expect("the shared store");
        let project = call(client.post(format!("{a}/api/projects")).json(&json!({"path": project_dir}))).await;
        let session = call(client.post(format!("{a}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
        let session = session["id"].as_str().expect("session id").to_owned();
        let on_a = Follower::open(&client, &a, &session).await;
        let on_b = Follower::open(&client, &b, &session).await;
        Scene { client, a, b, node_a, store, session, project_dir, on_a, on_b, _node_b: node_b, _dir: dir, _db: db }
    }

    /// A run on A in a tool call that ends a second later, once the tool has started:
    /// whatever then takes A away, the call's result is there to be written when A is
    /// back. Returns the run's id.
    async fn run_in_a_tool_call_on_a(&self) -> String {
        let (client, a, session) = (&self.client, &self.a, &self.session);
        let prompt = format!("tool: bash {}", json!({"command": "echo started > started.txt; sleep 1"}));
        let lost = call(client.post(format!("{a}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
        let started = self.project_dir.join("started.txt");
        let deadline = tokio::time::Instant::now() + WAIT;
        while !started.exists() {
            assert!(tokio::time::Instant::now() < deadline, "the tool never started on A");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lost["runId"].as_str().expect("run id").to_owned()
    }

    /// B settles A's run `node_lost` once A's lease ends, and serves the session (a
    /// prompt there completes). Returns what the store holds then.
    async fn b_takes_over(&self, lost: &str) -> Value {
        let (client, b) = (&self.client, &self.b);
        let failed = wait_for(client, &format!("{b}/api/runs/{lost}"), WAIT, |r| r["status"] != "running").await;
        assert_eq!((failed["status"].as_str(), failed["error"]["code"].as_str()), (Some("failed"), Some("node_lost")));
        let on_b = prompt_when_free(client, b, &self.session, "echo: served by B").await;
        assert_eq!(on_b["status"], "completed", "{on_b}");
        stored(&self.store, &self.session).await
    }

    /// A is back: it serves the session again like any node, and nothing it did for
    /// the run it lost shows — not in the store (compared with `before`, what it held
    /// when B was done), not in the frames either node's client got.
    async fn a_left_no_trace(mut self, lost: &str, before: Value) {
        let again = prompt_when_free(&self.client, &self.a, &self.session, "echo: served by A again").await;
        assert_eq!(again["status"], "completed", "{again}");
        let again = again["id"].as_str().expect("run id").to_owned();

        let after = stored(&self.store, &self.session).await;
        assert_eq!(after["runs"].as_array().map(Vec::len), Some(3), "{after}");
        let lost_run = |s: &Value| s["runs"].as_array().and_then(|r| r.iter().find(|r| r["id"] == lost)).cloned();
        assert_eq!(lost_run(&after), lost_run(&before), "the lost run as B settled it");
        let messages = after["messages"].as_array().expect("messages");
        assert_eq!(
            &messages[..4],
            before["messages"].as_array().expect("messages").as_slice(),
            "nothing appended by A"
        );
        let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap_or("?")).collect();
        let expected = ["user", "assistant", "user", "assistant", "user", "assistant"];
        assert_eq!(roles, expected, "no tool result of the lost run");
        let lost_events = |s: &Value| s["events"].as_array().map(|e| e.iter().filter(|e| e["run_id"] == lost).count());
        assert_eq!(lost_events(&after), lost_events(&before), "no event about the lost run from A");
        assert_eq!(after["drafts"], json!([]), "{after}");
        assert_eq!(after["notes"], before["notes"], "the session's todos and memory as they were");
        let title = |s: &Value| s["session"][0]["title"].clone();
        assert_eq!(title(&after), title(&before), "the session record as it was");

        self.on_a.until(|f| is_event(f, &again, "agent_settled")).await;
        self.on_b.until(|f| is_event(f, &again, "agent_settled")).await;
        assert_seen_once(&self.on_a.seen, &self.on_b.seen, lost);
        self.store.close().await;
    }
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_frozen_past_its_lease_writes_and_publishes_nothing_for_the_run_it_lost() {
    let db = TestDb::create().await;
    let url = db.url.clone();
    let scene = Scene::start(db, &url, &redis_url()).await;
    let lost = scene.run_in_a_tool_call_on_a().await;
    scene.node_a.pause();
    let before = scene.b_takes_over(&lost).await;
    // A wakes. It finds its lease gone and stops the run without a trace.
    scene.node_a.resume();
    scene.a_left_no_trace(&lost, before).await;
}

/// A proxy to the service at `url` (on `default_port` when it names none), and `url`
/// pointed at the proxy instead.
fn proxied(url: &str, default_port: u16) -> (Proxy, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), authority),
    };
    let host = if host.contains(':') { host.to_owned() } else { format!("{host}:{default_port}") };
    let upstream = host.to_socket_addrs().expect("resolve the service").next().expect("an address");
    let proxy = Proxy::start(upstream);
    let url = format!("{scheme}://{user}{}{path}", proxy.addr());
    (proxy, url)
}

/// Polls A's `/api/ready` until it answers `code`; returns the answer.
async fn ready_is(client: &reqwest::Client, base: &str, code: u16) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let res = client.get(format!("{base}/api/ready")).send().await.expect("ready");
        let status = res.status().as_u16();
        let body: Value = res.json().await.expect("json");
        if status == code {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {code}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Node A cut off from PostgreSQL (a proxy between them, `partition` playing the
/// network) past its lease while its run is in a tool call, then healed: A is out of
/// rotation while cut, B takes the session over, and A writes and publishes nothing
/// for the run it lost.
async fn a_partitioned_node(partition: impl Fn(&Proxy)) {
    let db = TestDb::create().await;
    let (proxy, a_url) = proxied(&db.url, 5432);
    let scene = Scene::start(db, &a_url, &redis_url()).await;
    let lost = scene.run_in_a_tool_call_on_a().await;
    partition(&proxy);
    let unready = ready_is(&scene.client, &scene.a, 503).await;
    assert!(unready["reason"].as_str().is_some_and(|r| r.starts_with("store")), "{unready}");
    let before = scene.b_takes_over(&lost).await;
    proxy.heal();
    ready_is(&scene.client, &scene.a, 200).await;
    scene.a_left_no_trace(&lost, before).await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_cut_off_from_the_database_past_its_lease_is_out_of_rotation_and_leaves_no_trace() {
    // Its connections closed, new ones refused: its writes fail until the heal.
    a_partitioned_node(Proxy::cut).await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_whose_database_traffic_is_held_past_its_lease_leaves_no_trace_when_it_arrives() {
    // Nothing passes, nothing is refused: what A sends meanwhile (a renewal, the
    // tool's result) reaches PostgreSQL after the heal, when B has settled the run.
    a_partitioned_node(Proxy::stall).await;
}

/// Node A cut off from Redis (a proxy between them, `partition` playing the network)
/// while B runs a prompt on the session, then healed: A is out of rotation while cut
/// (its bus check fails), and afterwards the client following on A has every frame of
/// that run once and in order, the same frames as the client on B, with no snapshot
/// in place of any (A listens again from its cursor). Nothing runs on A, so the store
/// is B's alone.
async fn a_node_partitioned_from_redis(partition: impl Fn(&Proxy)) {
    let db = TestDb::create().await;
    let (proxy, a_redis) = proxied(&redis_url(), 6379);
    let url = db.url.clone();
    let mut scene = Scene::start(db, &url, &a_redis).await;
    let warm = prompt_when_free(&scene.client, &scene.b, &scene.session, "echo: before the cut").await;
    let warm = warm["id"].as_str().expect("run id").to_owned();
    scene.on_a.until(|f| is_event(f, &warm, "agent_settled")).await;
    scene.on_b.until(|f| is_event(f, &warm, "agent_settled")).await;

    partition(&proxy);
    let unready = ready_is(&scene.client, &scene.a, 503).await;
    assert!(unready["reason"].as_str().is_some_and(|r| r.starts_with("bus")), "{unready}");
    let text = format!("echo: {}", "while A is cut off, ".repeat(40));
    let during = prompt_when_free(&scene.client, &scene.b, &scene.session, &text).await;
    assert_eq!(during["status"], "completed", "{during}");
    let during = during["id"].as_str().expect("run id").to_owned();
    scene.on_b.until(|f| is_event(f, &during, "agent_settled")).await;

    proxy.heal();
    ready_is(&scene.client, &scene.a, 200).await;
    scene.on_a.until(|f| is_event(f, &during, "agent_settled")).await;
    let (on_a, on_b) = (&scene.on_a.seen, &scene.on_b.seen);
    for (node, seen) in [("A", on_a), ("B", on_b)] {
        assert!(
            seen.iter().all(|f| f.kind != "session.snapshot" || f.seq == seen[0].seq),
            "on {node}, a snapshot mid-stream: {:#?}",
            kinds(seen)
        );
        assert_numbered_without_gap(node, seen);
        let deltas = seen
            .iter()
            .filter(|f| f.json["runId"] == during.as_str() && f.event_type() == Some("message_update"))
            .count();
        assert!(deltas > 1, "on {node}, the run streamed: {:#?}", kinds(seen));
    }
    assert_alike(on_a, on_b);
    scene.store.close().await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_cut_off_from_redis_is_out_of_rotation_and_its_clients_miss_nothing_after_the_heal() {
    a_node_partitioned_from_redis(Proxy::cut).await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_node_whose_redis_traffic_is_held_gets_every_frame_once_when_it_arrives() {
    a_node_partitioned_from_redis(Proxy::stall).await;
}

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_run_on_a_node_cut_off_from_redis_reaches_every_client_once_after_the_heal() {
    // A keeps its lease (that is PostgreSQL's) and runs the prompt to the end while
    // no frame of it can reach the bus, which orders every node's frames, A's own
    // clients' included. After the heal each client gets the run once: its frames as
    // A publishes them then, or, where a publish failed meanwhile, one snapshot of the
    // working state in place of the frames it had queued, and the frames after it.
    let db = TestDb::create().await;
    let (proxy, a_redis) = proxied(&redis_url(), 6379);
    let url = db.url.clone();
    let mut scene = Scene::start(db, &url, &a_redis).await;
    proxy.cut();
    ready_is(&scene.client, &scene.a, 503).await;
    let answer = "run on A while cut, ".repeat(20);
    let during = prompt_when_free(&scene.client, &scene.a, &scene.session, &format!("echo: {answer}")).await;
    assert_eq!(during["status"], "completed", "{during}");
    let during = during["id"].as_str().expect("run id").to_owned();
    proxy.heal();
    ready_is(&scene.client, &scene.a, 200).await;
    let next = prompt_when_free(&scene.client, &scene.b, &scene.session, "echo: next on B").await;
    let next = next["id"].as_str().expect("run id").to_owned();
    scene.on_a.until(|f| is_event(f, &next, "agent_settled")).await;
    scene.on_b.until(|f| is_event(f, &next, "agent_settled")).await;

    let (on_a, on_b) = (&scene.on_a.seen, &scene.on_b.seen);
    for (node, seen) in [("A", on_a), ("B", on_b)] {
        assert_numbered_without_gap(node, seen);
        let ends = seen.iter().filter(|f| is_event(f, &during, "agent_end")).count();
        // The run's end came as its own frame, or inside a snapshot that holds the
        // answer with no run active.
        let in_snapshot = seen.iter().any(|f| {
            f.kind == "session.snapshot"
                && f.json["state"]["activeRun"].is_null()
                && f.json["state"]["messages"].to_string().contains(answer.trim())
        });
        assert!(ends == 1 || (ends == 0 && in_snapshot), "on {node}, the run ends once: {:#?}", kinds(seen));
    }
    assert_alike(on_a, on_b);
    scene.store.close().await;
}
