//! The sweep: one server at a time on the same data, killed at a random instant of each
//! round's work and started again, then checked (`checks.rs`); a failure keeps the data
//! and the log and names the seed that replays it.

use super::clients::{Ledger, Live, Rng, approvals_worker, rand_tag, streams_worker, watcher};
use crate::common::{self, Spool, TestDb, serve_logged};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a restarted server may take to settle what the kill left.
pub(super) const SETTLE: Duration = Duration::from_secs(60);
/// A repeated key must be answered within this; one held by a claim waits 30 s.
pub(super) const ANSWER: Duration = Duration::from_secs(10);
/// Sessions worked on at once: the first `APPROVAL_SLOTS` call tools, the rest stream.
const SLOTS: usize = 5;
const APPROVAL_SLOTS: usize = 3;
/// A session whose history grows past this is replaced by a new one (the messages
/// check reads the history in one page).
const RETIRE_AT: u64 = 150;

#[derive(Default)]
pub(super) struct Tally {
    pub(super) kills: u32,
    /// Kills of a server that was still recovering from the one before.
    recovery_kills: u32,
    pub(super) runs: usize,
    /// Approving decisions answered 2xx before a kill.
    pub(super) acknowledged: usize,
    /// Of those, the ones whose run says `tool_outcome_unknown`.
    pub(super) outcome_unknown: usize,
    /// Keys sent again after a restart, and the ones of those whose first request had
    /// never been answered (they decide now).
    pub(super) resent: usize,
    pub(super) resent_unanswered: usize,
    /// Of those, the ones told `already_resolved`: the kill came after the decision
    /// was taken, before its answer was stored.
    pub(super) resent_too_late: usize,
    /// Run endings after restarts, by error code (or status).
    pub(super) endings: BTreeMap<String, usize>,
    /// Runs the store showed `interrupted` with no pending approval before their
    /// session was opened after a restart (opening settles them).
    pub(super) interrupted_unparked: usize,
}

pub(super) struct Slot {
    pub(super) session: String,
    pub(super) total: u64,
}

pub(super) struct Sweep {
    label: &'static str,
    seed: u64,
    rng: Rng,
    dir: tempfile::TempDir,
    pub(super) data: PathBuf,
    pub(super) project: PathBuf,
    log: PathBuf,
    pub(super) db: Option<TestDb>,
    pub(super) client: reqwest::Client,
    server: Option<(Spool, String)>,
    project_id: String,
    pub(super) pool: Vec<Slot>,
    pub(super) tally: Tally,
}

impl Sweep {
    pub(super) fn new(label: &'static str, db: Option<TestDb>) -> Sweep {
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

    pub(super) fn base(&self) -> String {
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

    pub(super) async fn run(mut self, kills: u32) {
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

    pub(super) async fn call_ok(&self, req: reqwest::RequestBuilder) -> Value {
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
}
