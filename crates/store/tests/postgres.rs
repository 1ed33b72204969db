//! `PgStore` against the shared conformance suite, plus what matters on a database
//! that several nodes share: races spread over several store handles (one per node),
//! migrations that run again or at once, and rows edited behind the store's back.
//!
//! The server comes from `SPOOL_TEST_DATABASE_URL` (for example
//! `postgres://postgres@127.0.0.1:5432/postgres`); the role needs `CREATEDB`. Every test
//! creates a database of its own with a random name and drops it when done (also
//! when it fails), so tests run in parallel and again without seeing each other. Built
//! with no URL the tests are ignored, except under CI, where they fail: build.rs sets
//! `cfg(spool_postgres)` when the variable (or `CI`) is set at build time, and each test
//! carries `#[cfg_attr(not(spool_postgres), ignore = …)]`, since libtest has no skip
//! at run time (a test that returned early would show as "ok").

use crate::support;

use spool_engine::store::prelude::*;
use spool_engine::{RunInsert, StoreError};
use spool_protocol::*;
use spool_store::PgStore;
use spool_test_support::TestDb;
use sqlx::Connection;
use std::sync::Arc;
use support::*;

/// Racers for the PostgreSQL races: more than any node's pool has connections, spread
/// over [`NODES`] handles, so they queue on several pools and race on the server.
const PG_RACERS: usize = 50;
const NODES: usize = 3;

/// A store on the test's own database.
async fn store_on(db: &TestDb) -> PgStore {
    PgStore::connect(&db.url).await.expect("connect PgStore")
}

/// `NODES` handles on one database, like the nodes of a deployment.
async fn nodes(db: &TestDb) -> Vec<Arc<dyn Store>> {
    let mut nodes: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..NODES {
        nodes.push(Arc::new(store_on(db).await));
    }
    nodes
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn pg_store_passes_the_suite_twice_on_one_database() {
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    conformance(Arc::new(store.clone())).await;
    store.close().await;
    // Reconnecting runs the migrations again; a database that already holds a pass's
    // rows must behave the same.
    let store = store_on(&db).await;
    conformance(Arc::new(store.clone())).await;
    store.close().await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn fifty_concurrent_decisions_on_one_approval_have_one_winner() {
    let db = TestDb::create().await;
    concurrent_settles_have_exactly_one_winner(&nodes(&db).await, PG_RACERS).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn fifty_claimers_on_three_nodes_never_share_a_delivery() {
    let db = TestDb::create().await;
    concurrent_claims_never_share_a_delivery(&nodes(&db).await, PG_RACERS).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn fifty_concurrent_idempotency_claims_have_one_winner() {
    let db = TestDb::create().await;
    concurrent_claims_of_one_key_have_exactly_one_winner(&nodes(&db).await, PG_RACERS).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn fifty_nodes_wanting_one_session_get_one_lease() {
    let db = TestDb::create().await;
    concurrent_lease_acquisitions_have_exactly_one_winner(&nodes(&db).await, PG_RACERS).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_node_writing_through_its_fence_lands_nothing_after_another_takes_the_lease() {
    let db = TestDb::create().await;
    a_fenced_writer_racing_a_takeover_lands_nothing_after_it(&nodes(&db).await).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn fifty_nodes_taking_one_queued_prompt_start_one_run() {
    let db = TestDb::create().await;
    concurrent_takes_of_one_queued_prompt_have_exactly_one_winner(&nodes(&db).await, PG_RACERS).await;
}

/// Retried first prompts on several nodes: one run, and every caller sees it; first
/// logins on several nodes: one user id.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn concurrent_inserts_of_one_request_create_one_run() {
    let db = TestDb::create().await;
    let nodes = nodes(&db).await;
    let (_, session) = new_session(nodes[0].as_ref()).await;

    let tasks: Vec<_> = (0..PG_RACERS)
        .map(|i| {
            let store = nodes[i % NODES].clone();
            let run = run_in(&session, "same-request", RunStatus::Running);
            tokio::spawn(async move { (run.clone(), store.insert_run(&run).await.expect("insert_run")) })
        })
        .collect();
    let mut created = Vec::new();
    let mut existing = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (run, RunInsert::Created) => created.push(run),
            (_, RunInsert::Existing(run)) => existing.push(run),
        }
    }
    assert_eq!(created.len(), 1, "exactly one insert wins");
    assert_eq!(existing.len(), PG_RACERS - 1);
    assert!(existing.iter().all(|run| *run == created[0]), "every loser sees the winner's run");

    let logins: Vec<_> = (0..PG_RACERS)
        .map(|i| {
            let store = nodes[i % NODES].clone();
            tokio::spawn(async move { store.ensure_user("carol").await.expect("ensure_user") })
        })
        .collect();
    let mut ids = Vec::new();
    for login in logins {
        ids.push(login.await.expect("task"));
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one user id for one name: {ids:?}");
}

/// Running the migrations again changes nothing (no new rows in sqlx's table, data
/// kept), and nodes that start together on an empty database migrate it once.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn migrations_run_twice_are_a_no_op_and_concurrent_starts_migrate_once() {
    let db = TestDb::create().await;
    let starts: Vec<_> = (0..NODES)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { PgStore::connect(&url).await.expect("connect at once") })
        })
        .collect();
    let mut stores = Vec::new();
    for start in starts {
        stores.push(start.await.expect("task"));
    }
    let (project, session) = new_session(&stores[0]).await;

    let mut conn = db.raw().await;
    let applied = || async {
        let mut conn = db.raw().await;
        let rows: Vec<(i64, bool)> = sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .expect("migrations table");
        rows
    };
    let before = applied().await;
    // Every file of migrations-pg, by its number, once and successful.
    let mut files: Vec<(i64, bool)> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations-pg"))
        .expect("migrations-pg")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.split_once('_').and_then(|(n, _)| n.parse().ok()))
        .map(|version| (version, true))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    assert_eq!(before, files, "each migration applied once");
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'public' AND table_name NOT LIKE '\\_%' ORDER BY table_name",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    tables.sort();
    assert_eq!(
        tables,
        [
            "approvals",
            "attachments",
            "auth_settings",
            "branch_messages",
            "branches",
            "cluster_key",
            "deliveries",
            "events",
            "idempotency",
            "listeners",
            "login_sessions",
            "message_draft_chunks",
            "message_drafts",
            "messages",
            "parts",
            "projects",
            "push_subscriptions",
            "queue_pauses",
            "queued_messages",
            "run_frames",
            "runs",
            "server_keys",
            "session_leases",
            "session_memory",
            "session_reverts",
            "session_todos",
            "session_tool_sources",
            "sessions",
            "step_snapshots",
            "tokens",
            "users",
            "webhook_endpoints"
        ]
    );
    for store in &stores {
        store.close().await;
    }

    let again = store_on(&db).await;
    assert_eq!(applied().await, before, "a second run applies nothing");
    assert_eq!(again.get_session(&session.id).await.expect("get"), Some(session));
    assert_eq!(again.get_project(&project.id).await.expect("get"), Some(project));
    again.close().await;
}

/// What the schema refuses and what the store refuses to decode: a settle back to
/// pending, rules that are not an array, and rows that are valid SQL but not domain
/// values all come back as `Backend` errors, never as a panic or a wrong value.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn refused_writes_and_corrupt_rows_are_backend_errors() {
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    let (_, session) = new_session(&store).await;
    store
        .insert_message(&session.id, &session.owner_id, &indexed(0, Message::user_text("hi", 1)))
        .await
        .expect("message");
    let (_, approval, checkpoint) = interrupted_run_in(&store, &session, "req", 200).await;
    let settled =
        store.settle_approval(&approval.id, ApprovalStatus::Pending, Some(&Decision::Once), None, None, 300).await;
    assert!(matches!(settled, Err(StoreError::Backend(_))), "got {settled:?}");
    assert_eq!(store.get_approval(&approval.id).await.expect("get"), Some((approval.clone(), checkpoint)));

    let mut conn = db.raw().await;
    assert!(sqlx::query("UPDATE sessions SET permissions = '{}'").execute(&mut conn).await.is_err());
    for edit in [
        "UPDATE sessions SET owner_id = 'not-an-id'",
        "UPDATE messages SET meta = '{\"unexpected\": true}'",
        "UPDATE approvals SET payload = '{}', status = 'resolved', resolved_at = 1, decision = '\"maybe\"'",
    ] {
        sqlx::query(edit).execute(&mut conn).await.expect("hand edit");
    }
    conn.close().await.expect("close");
    assert!(matches!(store.get_session(&session.id).await, Err(StoreError::Backend(_))));
    assert!(matches!(store.list_messages(&session.id, None, 10).await, Err(StoreError::Backend(_))));
    assert!(matches!(store.get_approval(&approval.id).await, Err(StoreError::Backend(_))));
    store.close().await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    // Nothing listens on port 1; connecting fails at once, naming the server.
    let err = PgStore::connect("postgres://spool@127.0.0.1:1/nowhere").await.expect_err("unreachable");
    let StoreError::Backend(message) = err else { panic!("expected a Backend error, got {err:?}") };
    assert!(message.contains("cannot connect to PostgreSQL at 127.0.0.1:1/nowhere"), "{message}");
    let err = PgStore::connect("postgres://spool:secret@127.0.0.1:1/nowhere").await.expect_err("unreachable");
    assert!(!err.to_string().contains("secret"), "the password is never shown: {err}");
}

/// The cluster key (what nodes seal their Redis messages with) is stored once: nodes
/// that ask at the same moment, each offering a fresh key, all get the same one — one
/// of those offered — and later askers get it too.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn the_cluster_key_is_stored_once_and_every_node_reads_it() {
    let db = TestDb::create().await;
    let mut stores = Vec::new();
    for _ in 0..NODES {
        stores.push(store_on(&db).await);
    }
    let asks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, store)| {
            let store = store.clone();
            tokio::spawn(async move { store.cluster_key(&[i as u8; 32]).await })
        })
        .collect();
    let mut keys = Vec::new();
    for ask in asks {
        keys.push(ask.await.expect("task").expect("cluster key"));
    }
    assert!(keys.iter().all(|k| *k == keys[0]), "one key for every node");
    assert!((0..NODES).any(|i| keys[0] == vec![i as u8; 32]), "one of those offered");
    assert_eq!(stores[0].cluster_key(&[99; 32]).await.expect("again"), keys[0], "kept");
    for store in &stores {
        store.close().await;
    }
}

/// A search past its time limit is cancelled by PostgreSQL itself (`statement_timeout`,
/// local to the search's transaction), and the store searches normally after it.
#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_search_past_its_time_limit_is_cancelled_by_postgres() {
    let db = TestDb::create().await;
    let store = store_on(&db).await;
    let (project, session) = new_session(&store).await;
    // 50,000 text parts without the needle in one session: a scan of them takes far
    // longer than a millisecond. Written in two statements, not 100,000 round trips.
    let mut conn = db.raw().await;
    let owner = project.owner_id.as_str();
    sqlx::query(
        "INSERT INTO messages (id, session_id, owner_id, idx, role, meta, created_at)
         SELECT 'msg_pg' || g, $1, $2, g, 'user', '{}'::jsonb, 1 FROM generate_series(0, 49999) g",
    )
    .bind(session.id.as_str())
    .bind(owner)
    .execute(&mut conn)
    .await
    .expect("messages");
    sqlx::query(
        "INSERT INTO parts (id, message_id, session_id, owner_id, position, kind, data)
         SELECT 'prt_pg' || g, 'msg_pg' || g, $1, $2, 0, 'text', jsonb_build_object('text', repeat('hay ', 50))
           FROM generate_series(0, 49999) g",
    )
    .bind(session.id.as_str())
    .bind(owner)
    .execute(&mut conn)
    .await
    .expect("parts");
    let cut = store.search_sessions(&project.owner_id, "needle", None, 10, std::time::Duration::from_millis(1)).await;
    assert!(
        matches!(&cut, Err(StoreError::Backend(m)) if m.starts_with("the search was stopped at its time limit")),
        "{cut:?}"
    );
    let found = store.search_sessions(&project.owner_id, "hay", None, 10, A_WHILE).await.expect("search after");
    assert_eq!(found.len(), 1);
    store.close().await;
}
