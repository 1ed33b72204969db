//! Crash points: `spool serve` is SIGKILLed at random instants while its sessions run
//! approvals and streams, started again on the same data (a SQLite data directory, or
//! a PostgreSQL database), and after every restart the promises a person relies on are
//! checked:
//!
//! * no run is left `running` (in the store, not only in the runs we know of), and an
//!   `interrupted` run has its pending approval;
//! * a decision acknowledged with a 2xx that approved a call: the call's command ran
//!   exactly once, or its run says `tool_outcome_unknown`; a run that ended otherwise
//!   has the call's result in its history (its outcome is known). A command never ran
//!   twice, a rejected one never ran, and none ran without an approving decision;
//! * no idempotency key is stuck: the store holds no claim without a response, and each
//!   key used before the kill, sent again, is answered at once — with the first answer
//!   byte for byte when the client had received it;
//! * the messages a client read before the kill are unchanged after it;
//! * every session takes a new prompt, which completes.
//!
//! The work between kills runs concurrently: sessions whose scripted model calls `bash`
//! to append a unique token to `effects.txt` (which asks for approval; decided with
//! idempotency keys, in both API forms, sometimes twice with one key or by two keys
//! racing, sometimes rejected), sessions streaming long answers, and an open session
//! stream on each, whose ids must follow each other without a gap. Some restarts are
//! killed again within moments, so that recovery itself is crashed. The kill is the
//! only deliberate wait; everything else waits for a state to show.
//!
//! Sizes come from the environment, so that `cargo test` runs a short sweep and
//! `scripts/crash-points` the long one: `SPOOL_CRASH_KILLS` (SQLite, default 6),
//! `SPOOL_CRASH_KILLS_PG` (PostgreSQL, default 3) and `SPOOL_CRASH_SEED`. The seed is
//! printed first; it replays the kill instants and the choices, not the interleaving of
//! threads. With PostgreSQL a restarted server is a new node: the killed node's runs
//! settle when its lease expires (the server runs with `--lease-secs 2`), and a claim
//! it left is released after two minutes (README), which the test stands in for by
//! ageing the claims in the database instead of waiting.

use crate::common;

use common::{Spool, SseStream, TestDb, serve_logged};
use serde_json::{Value, json};
use spool_protocol::Cursor;
use sqlx::Connection;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a restarted server may take to settle what the kill left.
const SETTLE: Duration = Duration::from_secs(60);
/// A repeated key must be answered within this; one held by a claim waits 30 s.
const ANSWER: Duration = Duration::from_secs(10);
/// Sessions worked on at once: the first `APPROVAL_SLOTS` call tools, the rest stream.
const SLOTS: usize = 5;
const APPROVAL_SLOTS: usize = 3;
/// A session whose history grows past this is replaced by a new one (the messages
/// check reads the history in one page).
const RETIRE_AT: u64 = 150;

#[tokio::test]
async fn sqlite_keeps_its_promises_across_sigkills_at_random_instants() {
    let kills = kills_from_env("SPOOL_CRASH_KILLS", 6);
    Sweep::new("sqlite", None).run(kills).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn postgres_keeps_its_promises_across_sigkills_at_random_instants() {
    let kills = kills_from_env("SPOOL_CRASH_KILLS_PG", 3);
    let db = TestDb::create().await;
    Sweep::new("postgres", Some(db)).run(kills).await;
}

fn kills_from_env(var: &str, default: u32) -> u32 {
    match std::env::var(var) {
        Ok(n) => n.trim().parse().unwrap_or_else(|_| panic!("{var} must be a number of kills, got {n:?}")),
        Err(_) => default,
    }
}

/// SplitMix64: small and seedable, enough to pick instants and choices reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An independent generator for one task, drawn from this one.
    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

// ---- what the clients did and saw before a kill ---------------------------------------

/// Everything the clients of one round sent and were answered.
#[derive(Default)]
struct Ledger {
    prompts: Vec<PromptSent>,
    decisions: Vec<DecisionSent>,
    /// Per session, the history as last read before the kill.
    committed: HashMap<String, Vec<Value>>,
    /// Answers of a live server that break a promise (no kill explains them).
    wrong: Vec<String>,
}

struct PromptSent {
    session: String,
    request_id: String,
    text: String,
    /// The token its command appends, for a tool prompt.
    token: Option<String>,
    /// Set once the 202 arrived.
    run: Option<String>,
}

#[derive(Clone)]
struct DecisionSent {
    /// The route, without the server's address (a restart changes the port).
    path: String,
    body: Value,
    key: String,
    token: String,
    run: String,
    session: String,
    tool_call_id: String,
    approving: bool,
    /// Sent by the clients the kill interrupted (not by the checks after it).
    before_kill: bool,
    /// Status and body, once the whole answer arrived.
    answer: Option<(u16, String)>,
}

impl DecisionSent {
    fn acknowledged(&self) -> bool {
        self.answer.as_ref().is_some_and(|(status, _)| (200..300).contains(status))
    }
}

/// A request failed: the server is gone (or answered wrongly, which is in the ledger).
struct Gone;

/// One round's clients: they work until the server dies under them.
#[derive(Clone)]
struct Live {
    client: reqwest::Client,
    base: String,
    ledger: Arc<Mutex<Ledger>>,
}

impl Live {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().expect("no client task panics holding the ledger")
    }

    fn wrong(&self, what: String) -> Gone {
        self.ledger().wrong.push(what);
        Gone
    }

    async fn get(&self, path: &str) -> Result<Value, Gone> {
        let res = self.client.get(format!("{}{path}", self.base)).send().await.map_err(|_| Gone)?;
        let status = res.status().as_u16();
        let body = res.text().await.map_err(|_| Gone)?;
        if status != 200 {
            return Err(self.wrong(format!("GET {path}: {status} {body}")));
        }
        serde_json::from_str(&body).map_err(|e| self.wrong(format!("GET {path}: not JSON ({e}): {body}")))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(u16, String), Gone> {
        let res = self.client.post(format!("{}{path}", self.base)).json(body).send().await.map_err(|_| Gone)?;
        let status = res.status().as_u16();
        Ok((status, res.text().await.map_err(|_| Gone)?))
    }

    /// Sends a prompt and records it; the run's id.
    async fn prompt(&self, session: &str, text: String, token: Option<String>) -> Result<String, Gone> {
        let request_id = format!("q-{}", token.clone().unwrap_or_else(|| format!("{:x}", rand_tag())));
        let body = json!({"text": text, "requestId": request_id});
        let at = {
            let mut ledger = self.ledger();
            ledger.prompts.push(PromptSent {
                session: session.to_owned(),
                request_id: request_id.clone(),
                text,
                token,
                run: None,
            });
            ledger.prompts.len() - 1
        };
        let (status, answer) = self.post(&format!("/api/sessions/{session}/prompt"), &body).await?;
        if status != 202 {
            return Err(self.wrong(format!("prompt {body} in {session}: {status} {answer}")));
        }
        let run = serde_json::from_str::<Value>(&answer).ok().and_then(|a| a["runId"].as_str().map(str::to_owned));
        let run = run.ok_or_else(|| self.wrong(format!("prompt accepted without a runId: {answer}")))?;
        self.ledger().prompts[at].run = Some(run.clone());
        Ok(run)
    }

    /// Waits until the run is parked at its approval; the approval as the session shows it.
    async fn asked(&self, session: &str, run: &str) -> Result<Value, Gone> {
        loop {
            let shown = self.get(&format!("/api/runs/{run}")).await?;
            match shown["status"].as_str() {
                Some("interrupted") => break,
                Some("running") => {}
                _ => return Err(self.wrong(format!("the run ended without asking for approval: {shown}"))),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The run is stored interrupted before its session publishes the approval.
        loop {
            let detail = self.get(&format!("/api/sessions/{session}")).await?;
            let pending = detail["state"]["pendingApprovals"].as_array().cloned().unwrap_or_default();
            if let Some(approval) = pending.into_iter().find(|a| a["runId"] == run) {
                return Ok(approval);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the run has ended and its session is idle; the run.
    async fn settled(&self, session: &str, run: &str) -> Result<Value, Gone> {
        let shown = loop {
            let shown = self.get(&format!("/api/runs/{run}")).await?;
            if matches!(shown["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                break shown;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        while self.get(&format!("/api/sessions/{session}")).await?["status"] != "idle" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(shown)
    }

    /// Reads the session's history: what the kill must leave unchanged.
    async fn read_committed(&self, session: &str) -> Result<(), Gone> {
        let history = self.get(&format!("/api/sessions/{session}/messages?limit=500")).await?;
        let messages = history["messages"].as_array().cloned().unwrap_or_default();
        self.ledger().committed.insert(session.to_owned(), messages);
        Ok(())
    }

    /// Sends one decision and records it, with its answer once that arrived.
    async fn decide(&self, mut sent: DecisionSent) -> Result<(u16, String), Gone> {
        let at = {
            let mut ledger = self.ledger();
            ledger.decisions.push(sent.clone());
            ledger.decisions.len() - 1
        };
        let answer = self.post(&sent.path, &sent.body).await?;
        sent.answer = Some(answer.clone());
        self.ledger().decisions[at] = sent;
        Ok(answer)
    }
}

/// A tag that only has to differ between prompts of one session.
fn rand_tag() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_nanos()
}

/// Prompts whose `bash` call asks for approval, each decided in one of several ways.
async fn approvals_worker(live: Live, session: String, tag: String, mut rng: Rng) -> Result<(), Gone> {
    for n in 0.. {
        let token = format!("{tag}n{n}");
        // A third sleep after the effect, so a kill often cuts the tool off mid-call.
        let command = match rng.below(3) {
            0 => format!("echo {token} >> effects.txt; sleep 0.3"),
            _ => format!("echo {token} >> effects.txt"),
        };
        let run =
            live.prompt(&session, format!("tool: bash {}", json!({"command": command})), Some(token.clone())).await?;
        let approval = live.asked(&session, &run).await?;
        let id = approval["id"].as_str().unwrap_or_default().to_owned();
        let on_session = format!("/api/sessions/{session}/approvals/{id}");
        let sent = |path: &str, body: Value, key: String, approving: bool| DecisionSent {
            path: path.to_owned(),
            body,
            key,
            token: token.clone(),
            run: run.clone(),
            session: session.clone(),
            tool_call_id: approval["toolCallId"].as_str().unwrap_or_default().to_owned(),
            approving,
            before_kill: true,
            answer: None,
        };
        let key = format!("{token}-a");
        match rng.below(100) {
            0..50 => {
                let body = json!({"decision": "once", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, true)).await?)?;
            }
            50..65 => {
                let body = json!({"interruptId": id, "decision": "approve", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&format!("/api/runs/{run}/resume"), body, key, true)).await?)?;
            }
            65..75 => {
                // A client that sends its decision twice at once: one answer, twice.
                let body = json!({"decision": "once", "idempotencyKey": key});
                let one = sent(&on_session, body, key, true);
                let (a, b) = tokio::join!(live.decide(one.clone()), live.decide(one));
                let (a, b) = (a?, b?);
                if a != b || a.0 != 200 {
                    return Err(live.wrong(format!("one key sent twice at once was answered {a:?} and {b:?}")));
                }
            }
            75..85 => {
                // Two people deciding at once: one wins, the other is told it lost.
                let approve = sent(&on_session, json!({"decision": "once", "idempotencyKey": key}), key, true);
                let key = format!("{token}-b");
                let reject = sent(&on_session, json!({"decision": "reject", "idempotencyKey": key}), key, false);
                let (a, b) = tokio::join!(live.decide(approve), live.decide(reject));
                let (a, b) = (a?, b?);
                let mut statuses = [a.0, b.0];
                statuses.sort_unstable();
                let lost = if a.0 == 409 { &a.1 } else { &b.1 };
                if statuses != [200, 409] || !lost.contains("already_resolved") {
                    return Err(live.wrong(format!("two racing decisions were answered {a:?} and {b:?}")));
                }
            }
            85..93 => {
                let body = json!({"decision": "reject", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, false)).await?)?;
            }
            _ => {
                let body = json!({"decision": "reject", "message": "not this one", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, false)).await?)?;
            }
        }
        live.settled(&session, &run).await?;
        live.read_committed(&session).await?;
    }
    Ok(())
}

fn expect_ok(live: &Live, (status, body): (u16, String)) -> Result<(), Gone> {
    if status == 200 { Ok(()) } else { Err(live.wrong(format!("a lone decision was answered {status} {body}"))) }
}

/// Prompts that stream long answers.
async fn streams_worker(live: Live, session: String, mut rng: Rng) -> Result<(), Gone> {
    loop {
        let words = 50 + rng.below(450);
        let run = live.prompt(&session, format!("stream: {words}"), None).await?;
        live.settled(&session, &run).await?;
        live.read_committed(&session).await?;
    }
}

/// Reads the session's native stream until the server dies: within one connection
/// every frame's id is the stream's next seq, never a gap or a repeat.
async fn watcher(live: Live, session: String) -> Result<(), Gone> {
    let url = format!("{}/api/sessions/{session}/events", live.base);
    let res = live.client.get(url).send().await.map_err(|_| Gone)?;
    if res.status() != 200 {
        return Err(live.wrong(format!("session stream of {session}: {}", res.status())));
    }
    let mut stream = SseStream::new(res);
    let mut last: Option<Cursor> = None;
    while let Some(event) = stream.next_event_unbounded().await {
        let Some(id) = event.id else { continue };
        let cursor = Cursor::parse(&id).ok_or_else(|| live.wrong(format!("a frame id that is no cursor: {id}")))?;
        if let Some(prev) = &last
            && (prev.stream_id != cursor.stream_id || cursor.seq != prev.seq + 1)
        {
            return Err(live.wrong(format!("session {session}: frame {cursor} after {prev}")));
        }
        last = Some(cursor);
    }
    // The body ends with an error when the server is killed under it.
    if stream.error.is_some() { Err(Gone) } else { Ok(()) }
}

// ---- the sweep ----------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    kills: u32,
    /// Kills of a server that was still recovering from the one before.
    recovery_kills: u32,
    runs: usize,
    /// Approving decisions answered 2xx before a kill.
    acknowledged: usize,
    /// Of those, the ones whose run says `tool_outcome_unknown`.
    outcome_unknown: usize,
    /// Keys sent again after a restart, and the ones of those whose first request had
    /// never been answered (they decide now).
    resent: usize,
    resent_unanswered: usize,
    /// Of those, the ones told `already_resolved`: the kill came after the decision
    /// was taken, before its answer was stored.
    resent_too_late: usize,
    /// Run endings after restarts, by error code (or status).
    endings: BTreeMap<String, usize>,
    /// Runs the store showed `interrupted` with no pending approval before their
    /// session was opened after a restart (opening settles them).
    interrupted_unparked: usize,
}

struct Slot {
    session: String,
    total: u64,
}

struct Sweep {
    label: &'static str,
    seed: u64,
    rng: Rng,
    dir: tempfile::TempDir,
    data: PathBuf,
    project: PathBuf,
    log: PathBuf,
    db: Option<TestDb>,
    client: reqwest::Client,
    server: Option<(Spool, String)>,
    project_id: String,
    pool: Vec<Slot>,
    tally: Tally,
}

impl Sweep {
    fn new(label: &'static str, db: Option<TestDb>) -> Sweep {
        let seed = match std::env::var("SPOOL_CRASH_SEED") {
            Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("SPOOL_CRASH_SEED must be a number, got {s:?}")),
            Err(_) => rand_tag() as u64,
        };
        eprintln!("crash-points {label}: seed {seed} (SPOOL_CRASH_SEED={seed} replays the choices)");
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, project, log) = (dir.path().join("data"), dir.path().join("project"), dir.path().join("spool.log"));
        std::fs::create_dir(&project).expect("project dir");
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        Sweep {
            label,
            seed,
            rng: Rng(seed),
            dir,
            data,
            project,
            log,
            db,
            client,
            server: None,
            project_id: String::new(),
            pool: Vec::new(),
            tally: Tally::default(),
        }
    }

    fn base(&self) -> String {
        self.server.as_ref().expect("a server is up").1.clone()
    }

    fn note(&self, line: &str) {
        use std::io::Write;
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log");
        writeln!(log, "==== crash-points: {line}").expect("write the log");
    }

    fn start(&mut self) {
        assert!(self.server.is_none(), "one server at a time");
        let data = self.data.to_str().expect("a UTF-8 temp path").to_owned();
        let mut args = vec!["--addr", "127.0.0.1:0", "--scripted-delay-ms", "2", "--data-dir", &data];
        if let Some(db) = &self.db {
            args.extend(["--database-url", &db.url, "--lease-secs", "2"]);
        }
        self.server = Some(serve_logged(&args, &self.log));
        // A fresh client: none of its pooled connections can be one to a dead server.
        self.client = reqwest::Client::builder().no_proxy().build().expect("client");
    }

    fn kill(&mut self, why: &str) {
        self.note(why);
        // Dropping the handle sends SIGKILL and reaps the process.
        drop(self.server.take().expect("a server to kill"));
        self.tally.kills += 1;
    }

    /// Fails the test with what broke, how to replay it, and the kept data and log.
    fn fail(mut self, round: u32, violations: &[String]) -> ! {
        drop(self.server.take());
        if let Some(db) = self.db.take() {
            eprintln!("crash-points {}: the database {} is kept", self.label, db.url);
            std::mem::forget(db);
        }
        let kept = self.dir.keep();
        let log = std::fs::read_to_string(kept.join("spool.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect();
        panic!(
            "crash-points {}: seed {} round {round}: {} broken promise(s):\n  {}\n\
             data kept in {} (server log spool.log); its last lines:\n{}",
            self.label,
            self.seed,
            violations.len(),
            violations.join("\n  "),
            kept.display(),
            tail.join("\n")
        );
    }

    async fn run(mut self, kills: u32) {
        let began = Instant::now();
        self.start();
        let base = self.base();
        let project =
            self.call_ok(self.client.post(format!("{base}/api/projects")).json(&json!({"path": self.project}))).await;
        self.project_id = project["id"].as_str().expect("project id").to_owned();
        let mut round = 0;
        while self.tally.kills < kills {
            self.fill_pool().await;
            let ledger = Arc::new(Mutex::new(Ledger::default()));
            let live = Live { client: self.client.clone(), base: self.base(), ledger: ledger.clone() };
            let mut tasks = Vec::new();
            for (slot, s) in self.pool.iter().enumerate() {
                let rng = self.rng.fork();
                tasks.push(match slot < APPROVAL_SLOTS {
                    true => {
                        tokio::spawn(approvals_worker(live.clone(), s.session.clone(), format!("r{round}s{slot}"), rng))
                    }
                    false => tokio::spawn(streams_worker(live.clone(), s.session.clone(), rng)),
                });
                tasks.push(tokio::spawn(watcher(live.clone(), s.session.clone())));
            }
            // Mostly anywhere in the first 1.5 s of work; now and then at its very start.
            let delay = match self.rng.below(10) {
                0 => self.rng.below(50),
                _ => 50 + self.rng.below(1450),
            };
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.kill(&format!("round {round}: SIGKILL after {delay} ms of work"));
            // The clients fail on their own once the server is gone; the next server
            // may get the same port, so none may still be sending when it starts.
            for task in tasks {
                match tokio::time::timeout(SETTLE, task).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => panic!("a client task failed: {e}"),
                    Err(_) => panic!("a client task did not notice the kill within {SETTLE:?}"),
                }
            }
            self.start();
            if self.tally.kills < kills && self.rng.below(5) == 0 {
                let again = self.rng.below(100);
                tokio::time::sleep(Duration::from_millis(again)).await;
                self.kill(&format!("round {round}: SIGKILL again {again} ms after the restart"));
                self.tally.recovery_kills += 1;
                self.start();
            }
            let ledger = std::mem::take(&mut *ledger.lock().expect("the clients are done"));
            let violations = self.check(ledger).await;
            if !violations.is_empty() {
                self.fail(round, &violations);
            }
            round += 1;
        }
        let t = &self.tally;
        eprintln!(
            "crash-points {}: ok: seed {} kills {} (of which {} during recovery), rounds {round}, runs {}, \
             acknowledged approvals {} (tool_outcome_unknown {}), keys re-sent {} (never answered before {}, \
             of which already_resolved {}), \
             interrupted runs without a pending approval until opened {}, run endings {:?}, {:.1} s",
            self.label,
            self.seed,
            t.kills,
            t.recovery_kills,
            t.runs,
            t.acknowledged,
            t.outcome_unknown,
            t.resent,
            t.resent_unanswered,
            t.resent_too_late,
            t.interrupted_unparked,
            t.endings,
            began.elapsed().as_secs_f64()
        );
    }

    async fn call_ok(&self, req: reqwest::RequestBuilder) -> Value {
        common::call(req.timeout(ANSWER)).await
    }

    /// Sessions for the round: a retired one (too long a history) is replaced.
    async fn fill_pool(&mut self) {
        for slot in 0..SLOTS {
            if self.pool.get(slot).is_some_and(|s| s.total <= RETIRE_AT) {
                continue;
            }
            let base = self.base();
            let session = self
                .call_ok(self.client.post(format!("{base}/api/sessions")).json(&json!({"projectId": self.project_id})))
                .await;
            let session = Slot { session: session["id"].as_str().expect("session id").to_owned(), total: 0 };
            match self.pool.get_mut(slot) {
                Some(retired) => *retired = session,
                None => self.pool.push(session),
            }
        }
    }

    /// After a restart: every promise, checked against what the clients saw.
    async fn check(&mut self, mut ledger: Ledger) -> Vec<String> {
        let mut broken = std::mem::take(&mut ledger.wrong);
        let base = self.base();
        let db = self.database();

        // Before any session is opened: runs a kill left between a decision and its
        // run's restart, which opening the session settles.
        self.tally.interrupted_unparked += db.rows(INTERRUPTED_UNPARKED).await.len();

        // Claims a dead process left: released at start on SQLite; after two minutes on
        // PostgreSQL, which ageing them stands in for.
        if self.db.is_some() {
            db.age_open_claims().await;
            if let Err(left) = db.none_within(SETTLE, OPEN_CLAIMS).await {
                broken.push(format!("claims not released {SETTLE:?} after they were due: {left:?}"));
            }
        } else {
            let left = db.rows(OPEN_CLAIMS).await;
            if !left.is_empty() {
                broken.push(format!("claims without a response after a restart: {left:?}"));
            }
        }

        for slot in &self.pool {
            self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
        }

        // Every key used before the kill, again.
        let mut first: HashMap<String, DecisionSent> = HashMap::new();
        for d in &ledger.decisions {
            let seen = first.entry(d.key.clone()).or_insert_with(|| d.clone());
            if seen.answer.is_none() {
                seen.answer.clone_from(&d.answer);
            }
        }
        let mut again: Vec<DecisionSent> = first.into_values().collect();
        again.sort_by(|a, b| a.key.cmp(&b.key));
        for d in &again {
            self.tally.resent += 1;
            let res = self.client.post(format!("{base}{}", d.path)).json(&d.body).timeout(ANSWER).send().await;
            let answer = match res {
                Ok(res) => {
                    let status = res.status().as_u16();
                    (status, res.text().await.unwrap_or_default())
                }
                Err(e) => {
                    broken.push(format!("key {} sent again was not answered within {ANSWER:?}: {e}", d.key));
                    continue;
                }
            };
            match &d.answer {
                Some(was) if *was != answer => {
                    broken.push(format!("key {} was answered {was:?}, and {answer:?} when sent again", d.key));
                }
                Some(_) => {}
                None => {
                    self.tally.resent_unanswered += 1;
                    let lost = answer.0 == 409 && answer.1.contains("already_resolved");
                    self.tally.resent_too_late += usize::from(lost);
                    if answer.0 == 200 {
                        ledger.decisions.push(DecisionSent { answer: Some(answer), before_kill: false, ..d.clone() });
                    } else if !lost {
                        broken.push(format!("key {} (never answered) sent again: {answer:?}", d.key));
                    }
                }
            }
        }
        // Every prompt the server acknowledged, again: the same run, nothing new.
        for p in ledger.prompts.iter().filter(|p| p.run.is_some()) {
            let body = json!({"text": p.text, "requestId": p.request_id});
            let url = format!("{base}/api/sessions/{}/prompt", p.session);
            let answer = self.call_ok(self.client.post(url).json(&body)).await;
            if answer["runId"].as_str() != p.run.as_deref() {
                broken.push(format!("requestId {} named run {:?}, now {answer}", p.request_id, p.run));
            }
        }

        // Settle: nothing running; then decide what still waits, and settle again.
        loop {
            if let Err(left) = db.none_within(SETTLE, RUNNING).await {
                broken.push(format!("runs still running {SETTLE:?} after the restart: {left:?}"));
                return broken;
            }
            let mut decided = false;
            for slot in &self.pool {
                let detail = self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
                for approval in detail["state"]["pendingApprovals"].as_array().cloned().unwrap_or_default() {
                    decided = true;
                    let sent = self.decide_after_restart(&ledger, &slot.session, &approval, &mut broken).await;
                    ledger.decisions.extend(sent);
                }
            }
            if !decided {
                break;
            }
        }
        // A run a kill left between its decision and its restart is settled when its
        // session is opened (with PostgreSQL, once the dead node's lease has expired).
        let deadline = Instant::now() + SETTLE;
        loop {
            for slot in &self.pool {
                self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
            }
            let unparked = db.rows(INTERRUPTED_UNPARKED).await;
            if unparked.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                broken.push(format!("interrupted runs without a pending approval after opening: {unparked:?}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let open = db.rows(OPEN_CLAIMS).await;
        if !open.is_empty() {
            broken.push(format!("claims without a response once settled: {open:?}"));
        }

        // Every run the clients learned of has ended.
        let mut runs: HashMap<String, Value> = HashMap::new();
        for run in ledger.prompts.iter().filter_map(|p| p.run.clone()) {
            let shown = self.call_ok(self.client.get(format!("{base}/api/runs/{run}"))).await;
            if !matches!(shown["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                broken.push(format!("run {run} is {} once settled: {shown}", shown["status"]));
            }
            let ending = shown["error"]["code"].as_str().or(shown["status"].as_str()).unwrap_or("?").to_owned();
            *self.tally.endings.entry(ending).or_default() += 1;
            self.tally.runs += 1;
            runs.insert(run, shown);
        }

        self.check_effects(&ledger, &runs, &mut broken).await;
        self.check_history(&ledger, &mut broken).await;

        // Every session takes a new prompt, which completes.
        let pool: Vec<String> = self.pool.iter().map(|s| s.session.clone()).collect();
        for (slot, session) in pool.iter().enumerate() {
            match self.fresh_prompt(session).await {
                Ok(total) => self.pool[slot].total = total,
                Err(e) => broken.push(e),
            }
        }
        broken
    }

    /// Approves a call still waiting after a restart (with a key of its own), as a
    /// person would; the decision, acknowledged, joins the ledger.
    async fn decide_after_restart(
        &self,
        ledger: &Ledger,
        session: &str,
        approval: &Value,
        broken: &mut Vec<String>,
    ) -> Option<DecisionSent> {
        let base = self.base();
        let id = approval["id"].as_str().unwrap_or_default();
        let argument = approval["payload"]["argument"].as_str().unwrap_or_default();
        let token = ledger
            .prompts
            .iter()
            .filter_map(|p| p.token.clone())
            .find(|t| argument.contains(&format!("echo {t} ")))
            .unwrap_or_default();
        let path = format!("/api/sessions/{session}/approvals/{id}");
        // With PostgreSQL the dead node may hold the session's lease a moment longer:
        // the decision is then refused as too late, and made again with a new key.
        let deadline = Instant::now() + SETTLE;
        for attempt in 0.. {
            let key = format!("check-{id}-{attempt}");
            let body = json!({"decision": "once", "idempotencyKey": key});
            let res = self.client.post(format!("{base}{path}")).json(&body).timeout(ANSWER).send().await;
            let (status, text) = match res {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => {
                    broken.push(format!("deciding {id} after the restart: {e}"));
                    return None;
                }
            };
            if status == 200 {
                return Some(DecisionSent {
                    path,
                    body,
                    key,
                    token,
                    run: approval["runId"].as_str().unwrap_or_default().to_owned(),
                    session: session.to_owned(),
                    tool_call_id: approval["toolCallId"].as_str().unwrap_or_default().to_owned(),
                    approving: true,
                    before_kill: false,
                    answer: Some((status, text)),
                });
            }
            let still_pending = self.pending(session, id).await;
            if !still_pending || Instant::now() > deadline {
                broken.push(format!("deciding {id} after the restart: {status} {text} (pending: {still_pending})"));
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!("the loop returns")
    }

    async fn pending(&self, session: &str, approval: &str) -> bool {
        let detail = self.call_ok(self.client.get(format!("{}/api/sessions/{session}", self.base()))).await;
        detail["state"]["pendingApprovals"].as_array().is_some_and(|a| a.iter().any(|p| p["id"] == approval))
    }

    /// Each command's token in `effects.txt`, against the decisions the clients saw.
    async fn check_effects(&mut self, ledger: &Ledger, runs: &HashMap<String, Value>, broken: &mut Vec<String>) {
        let effects = std::fs::read_to_string(self.project.join("effects.txt")).unwrap_or_default();
        let mut ran: HashMap<&str, usize> = HashMap::new();
        for line in effects.lines() {
            *ran.entry(line.trim()).or_default() += 1;
        }
        for (token, n) in &ran {
            if *n > 1 {
                broken.push(format!("command {token} ran {n} times"));
            }
        }
        for token in ledger.prompts.iter().filter_map(|p| p.token.as_deref()) {
            let n = ran.get(token).copied().unwrap_or(0);
            let decisions: Vec<&DecisionSent> = ledger.decisions.iter().filter(|d| d.token == token).collect();
            let approved = decisions.iter().find(|d| d.approving && d.acknowledged());
            let rejected = decisions.iter().any(|d| !d.approving && d.acknowledged());
            let asked_to_run = decisions.iter().any(|d| d.approving);
            if !asked_to_run && n > 0 {
                broken.push(format!("command {token} ran with no approving decision sent"));
            }
            if rejected && n > 0 {
                broken.push(format!("command {token} ran though its rejection was acknowledged"));
            }
            let Some(approved) = approved else { continue };
            let run = runs.get(&approved.run).cloned();
            let run = match run {
                Some(run) => run,
                None => self.call_ok(self.client.get(format!("{}/api/runs/{}", self.base(), approved.run))).await,
            };
            let code = run["error"]["code"].as_str().unwrap_or_default();
            if approved.before_kill {
                self.tally.acknowledged += 1;
                if code == "tool_outcome_unknown" {
                    self.tally.outcome_unknown += 1;
                }
            }
            if code == "tool_outcome_unknown" {
                continue;
            }
            if n != 1 {
                broken.push(format!(
                    "command {token}: approval acknowledged ({}), ran {n} times, run {} ended {} {}",
                    approved.key, approved.run, run["status"], run["error"]
                ));
            } else if run["status"] != "completed" && !self.has_result(&approved.session, &approved.tool_call_id).await
            {
                broken.push(format!(
                    "command {token}: approval acknowledged ({}), run {} ended {} {} without the call's result",
                    approved.key, approved.run, run["status"], run["error"]
                ));
            }
        }
    }

    /// Whether the session's history holds the result of the call.
    async fn has_result(&self, session: &str, tool_call_id: &str) -> bool {
        let url = format!("{}/api/sessions/{session}/messages?limit=500", self.base());
        let history = self.call_ok(self.client.get(url)).await;
        history["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "toolResult" && m["toolCallId"] == tool_call_id))
    }

    /// The history read before the kill is still there, message for message.
    async fn check_history(&self, ledger: &Ledger, broken: &mut Vec<String>) {
        for (session, before) in &ledger.committed {
            let url = format!("{}/api/sessions/{session}/messages?limit=500", self.base());
            let after = self.call_ok(self.client.get(url)).await;
            let after: HashMap<u64, &Value> = after["messages"]
                .as_array()
                .map(|m| m.iter().filter_map(|m| Some((m["index"].as_u64()?, m))).collect())
                .unwrap_or_default();
            for message in before {
                let index = message["index"].as_u64().unwrap_or(u64::MAX);
                if after.get(&index) != Some(&message) {
                    broken
                        .push(format!("session {session}: message {index} was {message}, now {:?}", after.get(&index)));
                }
            }
        }
    }

    /// A new prompt in the session, accepted and completed; the session's message count.
    async fn fresh_prompt(&self, session: &str) -> Result<u64, String> {
        let base = self.base();
        let url = format!("{base}/api/sessions/{session}/prompt");
        let body = json!({"text": format!("echo: alive after kill {}", self.tally.kills)});
        let deadline = Instant::now() + SETTLE;
        let run = loop {
            let res = self.client.post(&url).json(&body).timeout(ANSWER).send().await;
            let res = res.map_err(|e| format!("session {session}: a new prompt: {e}"))?;
            let status = res.status().as_u16();
            let text = res.text().await.unwrap_or_default();
            let value: Value = serde_json::from_str(&text).unwrap_or_default();
            match status {
                202 => break value["runId"].as_str().unwrap_or_default().to_owned(),
                // With PostgreSQL the dead node's lease may be a moment from expiring.
                409 if self.db.is_some() && text.contains("session_busy") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return Err(format!("session {session} refused a new prompt: {status} {text}")),
            }
        };
        let run_url = format!("{base}/api/runs/{run}");
        let run = common::wait_for(&self.client, &run_url, SETTLE, |r| r["status"] != "running").await;
        if run["status"] != "completed" {
            return Err(format!("session {session}: the new prompt's run ended {run}"));
        }
        let detail = common::wait_for(&self.client, &format!("{base}/api/sessions/{session}"), SETTLE, |d| {
            d["status"] == "idle"
        })
        .await;
        Ok(detail["state"]["total"].as_u64().unwrap_or(0))
    }

    fn database(&self) -> Database {
        match &self.db {
            Some(db) => Database::Postgres(db.url.clone()),
            None => Database::Sqlite(self.data.join("spool.db")),
        }
    }
}

// ---- the store, read directly --------------------------------------------------------

/// The server's database, read beside it (SQLite read-only): the runs and claims no
/// client knows of count too.
enum Database {
    Sqlite(PathBuf),
    Postgres(String),
}

const RUNNING: &str = "SELECT id FROM runs WHERE status = 'running'";
const INTERRUPTED_UNPARKED: &str = "SELECT r.id FROM runs r WHERE r.status = 'interrupted' AND NOT EXISTS \
     (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')";
const OPEN_CLAIMS: &str = "SELECT scope || ' ' || key FROM idempotency WHERE answer IS NULL";

impl Database {
    async fn rows(&self, sql: &str) -> Vec<String> {
        match self {
            Database::Sqlite(path) => {
                use sqlx::ConnectOptions;
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
                let mut conn = options.connect().await.expect("open the database read-only");
                let rows = sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect("query");
                conn.close().await.expect("close");
                rows
            }
            Database::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect to the test database");
                let rows = sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect("query");
                conn.close().await.expect("close");
                rows
            }
        }
    }

    /// Makes the open claims look three minutes old: past the two after which a
    /// shared store's reaper releases them.
    async fn age_open_claims(&self) {
        let Database::Postgres(url) = self else { return };
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect to the test database");
        sqlx::query("UPDATE idempotency SET created_at = created_at - 180000 WHERE answer IS NULL")
            .execute(&mut conn)
            .await
            .expect("age the claims");
        conn.close().await.expect("close");
    }

    /// Polls the query until it finds nothing; what it finds after `within` otherwise.
    async fn none_within(&self, within: Duration, sql: &str) -> Result<(), Vec<String>> {
        let deadline = Instant::now() + within;
        loop {
            let left = self.rows(sql).await;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(left);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
