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
//!
//! The pieces: [`sweep`] starts, kills and restarts the server round after round;
//! [`clients`] are the concurrent work between kills and what it recorded; [`checks`]
//! holds the promises against that record after each restart; [`store`] reads the
//! server's database beside it.

mod checks;
mod clients;
mod store;
mod sweep;

use crate::common::TestDb;
use sweep::Sweep;

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
