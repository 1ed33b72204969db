//! `SqliteStore` against the shared conformance suite (in memory and on disk), plus
//! what only a file database has: surviving a reopen, its connection settings, a
//! schema upgrade, concurrent writers, and rows corrupted behind the store's back.

use crate::support;

use spool_engine::store::prelude::*;
use spool_engine::{IdempotencyClaim, RunInsert, StoreError, Supersede};
use spool_protocol::*;
use spool_store::SqliteStore;
use sqlx::Connection;
use std::path::Path;
use std::sync::Arc;
use support::*;

#[tokio::test]
async fn in_memory_store_passes_the_suite() {
    let store = SqliteStore::open_in_memory().await.expect("open in memory");
    conformance(Arc::new(store)).await;
}

#[tokio::test]
async fn file_store_passes_the_suite_twice_on_one_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    conformance(Arc::new(store.clone())).await;
    store.close().await;
    // A second pass over a database that already holds rows (and a second run of
    // the migrations) must behave the same.
    let store = SqliteStore::open(&path).await.expect("reopen");
    conformance(Arc::new(store.clone())).await;
}

/// A search past its time limit is stopped by SQLite itself (the progress handler),
/// and the connection it ran on carries no deadline afterwards: the in-memory store
/// has one connection, so the next search runs on the very same one.
#[tokio::test]
async fn a_search_past_its_time_limit_is_interrupted_and_the_connection_recovers() {
    let store = SqliteStore::open_in_memory().await.expect("open in memory");
    let (project, _) = new_session(&store).await;
    for n in 0..50 {
        let session = session_in(&project, n, false);
        store.insert_session(&session).await.expect("session");
        let text = format!("line {n} of a long conversation ");
        store
            .insert_message(&session.id, &project.owner_id, &indexed(0, Message::user_text(text.repeat(20), 1)))
            .await
            .expect("message");
    }
    let cut = store.search_sessions(&project.owner_id, "needle", None, 10, std::time::Duration::ZERO).await;
    assert!(matches!(&cut, Err(StoreError::Backend(m)) if m.starts_with("the search was stopped at its time limit")), "{cut:?}");
    let found = store.search_sessions(&project.owner_id, "conversation", None, 10, A_WHILE).await.expect("search");
    assert_eq!(found.len(), 10);
}

#[tokio::test]
async fn in_memory_clones_share_one_database() {
    let store = SqliteStore::open_in_memory().await.expect("open in memory");
    let clone = store.clone();
    let (project, session) = new_session(&store).await;
    assert_eq!(clone.get_session(&session.id).await.expect("get"), Some(session.clone()));
    assert_eq!(clone.get_project(&project.id).await.expect("get"), Some(project));
    // Two separate in-memory stores are separate databases.
    let other = SqliteStore::open_in_memory().await.expect("open another");
    assert_eq!(other.get_session(&session.id).await.expect("get"), None);
}

#[tokio::test]
async fn data_survives_close_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A parent directory that does not exist yet: open creates it.
    let path = dir.path().join("nested").join("deeper").join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    let owner = store.ensure_user("alice").await.expect("user");
    let project = project_for(&owner, 10);
    store.insert_project(&project).await.expect("project");
    let session = session_in(&project, 20, false);
    store.insert_session(&session).await.expect("session");
    let messages = vec![
        indexed(0, Message::user_text("hello", 30)),
        indexed(
            1,
            Message::Assistant {
                content: vec![
                    Content::Thinking { thinking: "hm".into() },
                    Content::ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: serde_json::json!({"path": "a.rs"}),
                    },
                ],
                stop_reason: Some(StopReason::ToolUse),
                usage: Usage { input: 3, output: 4, ..Usage::default() },
                model: "m".into(),
                error_message: None,
                timestamp: 31,
            },
        ),
    ];
    for m in &messages {
        store.insert_message(&session.id, &owner, m).await.expect("message");
    }
    let run = run_in(&session, "req", RunStatus::Interrupted);
    store.insert_run(&run).await.expect("run");
    store.close().await;
    drop(store);
    assert!(path.exists(), "the database file is where it was asked to be");

    let store = SqliteStore::open(&path).await.expect("reopen");
    assert_eq!(store.ensure_user("alice").await.expect("user"), owner, "the user keeps its id");
    assert_eq!(store.list_projects(&owner).await.expect("projects"), vec![project.clone()]);
    assert_eq!(store.list_sessions(&project.id, false).await.expect("sessions"), vec![session.clone()]);
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("messages"), messages);
    assert_eq!(store.get_run(&run.id).await.expect("run"), Some(run.clone()));
    assert_eq!(
        store.insert_run(&run_in(&session, "req", RunStatus::Running)).await.expect("retry"),
        RunInsert::Existing(run),
        "idempotency survives a restart"
    );
}

/// The pragmas that are properties of the file (WAL) or that we depend on for
/// correctness (foreign keys) are checked from a separate connection.
#[tokio::test]
async fn file_database_is_in_wal_mode_with_the_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    store.close().await;

    let mut conn = raw_connection(&path).await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.expect("pragma");
    assert_eq!(mode, "wal");
    let mut tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'")
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
}

/// A database at `dir/spool.db` with the migrations before `first_missing` applied
/// (by file name, e.g. `"0012"`), as an older version left it; the connection to it.
async fn database_before(dir: &Path, first_missing: &str) -> sqlx::SqliteConnection {
    let path = dir.join("spool.db");
    let before = dir.join("migrations");
    std::fs::create_dir(&before).expect("mkdir");
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations")).expect("ls") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.as_str() < first_missing {
            std::fs::copy(entry.path(), before.join(&name)).expect("copy a migration");
        }
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("connect");
    let migrator = sqlx::migrate::Migrator::new(before.as_path()).await.expect("read migrations");
    migrator.run(&mut conn).await.expect("apply the older migrations");
    conn
}

/// A database written before approvals existed (only the first migration applied,
/// with a session in it) opens, is upgraded, and its session reads back with no rules.
#[tokio::test]
async fn a_database_from_before_approvals_is_upgraded_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let first_only = dir.path().join("migrations");
    std::fs::create_dir(&first_only).expect("mkdir");
    let initial = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join("0001_initial.sql");
    std::fs::copy(initial, first_only.join("0001_initial.sql")).expect("copy the first migration");

    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("connect");
    let migrator = sqlx::migrate::Migrator::new(first_only.as_path()).await.expect("read migrations");
    migrator.run(&mut conn).await.expect("apply 0001");
    let owner = UserId::new();
    let project = project_for(&owner, 10);
    let session = session_in(&project, 20, false);
    sqlx::query("INSERT INTO projects (id, owner_id, name, path, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)")
        .bind(project.id.as_str())
        .bind(owner.as_str())
        .bind(&project.name)
        .bind(&project.path)
        .bind(project.created_at)
        .bind(project.updated_at)
        .execute(&mut conn)
        .await
        .expect("old project");
    sqlx::query(
        "INSERT INTO sessions (id, project_id, owner_id, title, title_set, archived, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(session.id.as_str())
    .bind(project.id.as_str())
    .bind(owner.as_str())
    .bind(&session.title)
    .bind(session.title_set)
    .bind(session.archived)
    .bind(session.created_at)
    .bind(session.updated_at)
    .execute(&mut conn)
    .await
    .expect("old session");
    conn.close().await.expect("close");

    let store = SqliteStore::open(&path).await.expect("open and upgrade");
    assert_eq!(store.get_session(&session.id).await.expect("get"), Some(session.clone()), "no rules yet");
    let ruled = Session { permissions: approval::default_rules(), ..session };
    store.update_session(&ruled).await.expect("update");
    assert_eq!(store.get_session(&ruled.id).await.expect("get"), Some(ruled));
}

/// The approvals table is rebuilt to allow `superseded` (0011): approvals written
/// before keep every column — their checkpoint and "tool call started" mark included —
/// and the rebuilt table takes the new status.
#[tokio::test]
async fn approvals_from_before_superseded_survive_the_table_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let mut conn = database_before(dir.path(), "0011").await;
    let owner = UserId::new();
    let project = project_for(&owner, 1);
    let session = session_in(&project, 1, false);
    let run = run_in(&session, "r1", RunStatus::Running);
    let old = Approval {
        tool: "write".into(),
        payload: serde_json::json!({"tool": "write"}),
        status: ApprovalStatus::Resolved,
        decision: Some(Decision::Once),
        message: Some("go".into()),
        actor: Some(owner.clone()),
        resolved_at: Some(4),
        ..approval_for(&run, 3)
    };
    let ids = [owner.as_str(), project.id.as_str(), session.id.as_str(), run.id.as_str(), old.id.as_str()];
    let statements = [
        "INSERT INTO projects (id, owner_id, name, path, created_at, updated_at)
         VALUES (?2, ?1, 'old', '/tmp/old', 1, 1)",
        "INSERT INTO sessions (id, project_id, owner_id, title, title_set, archived, created_at, updated_at)
         VALUES (?3, ?2, ?1, 'old', 0, 0, 1, 1)",
        "INSERT INTO runs (id, session_id, owner_id, request_id, status, user_message_index, created_at, updated_at,
                           usage_input, usage_output)
         VALUES (?4, ?3, ?1, 'r1', 'running', 0, 1, 2, 0, 0)",
    ];
    for statement in statements {
        let mut query = sqlx::query(statement);
        for id in &ids[..4] {
            query = query.bind(*id);
        }
        query.execute(&mut conn).await.expect("an old row");
    }
    sqlx::query(
        "INSERT INTO approvals (id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status,
                                decision, message, actor, created_at, expires_at, resolved_at, checkpoint, started_at)
         VALUES (?, ?, ?, ?, ?, 'write', 'confirm_action', '{\"tool\":\"write\"}', 'resolved', '\"once\"', 'go', ?,
                 ?, ?, 4, '{\"nextIndex\":2}', 5)",
    )
    .bind(old.id.as_str())
    .bind(run.id.as_str())
    .bind(session.id.as_str())
    .bind(owner.as_str())
    .bind(&old.tool_call_id)
    .bind(owner.as_str())
    .bind(old.created_at)
    .bind(old.expires_at)
    .execute(&mut conn)
    .await
    .expect("an old approval");
    conn.close().await.expect("close");

    let store = SqliteStore::open(&path).await.expect("open and upgrade");
    let decided = store.decided_calls().await.expect("decided calls");
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0].approval, old);
    assert_eq!(decided[0].started_at, Some(5));
    assert_eq!(decided[0].checkpoint, serde_json::json!({"nextIndex": 2}));

    let (_, session) = new_session(&store).await;
    let (run, approval, _) = interrupted_run_in(&store, &session, "req", 200).await;
    let replacement = approval_for(&run, 201);
    let superseded = Supersede { id: &approval.id, from: ApprovalStatus::Pending, actor: None, at: 201 };
    assert!(
        store.supersede_approval(&superseded, &run, &replacement, &serde_json::json!({})).await.expect("supersede")
    );
    let stored = store.get_approval(&approval.id).await.expect("read").expect("stored").0;
    assert_eq!(stored.status, ApprovalStatus::Superseded);
    store.close().await;
}

/// Prompts queued before files could be queued (0030) read back with none, and the
/// upgraded table keeps a queued prompt's files.
#[tokio::test]
async fn prompts_queued_before_files_read_back_without_any() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let mut conn = database_before(dir.path(), "0030").await;
    let owner = UserId::new();
    let project = project_for(&owner, 1);
    let session = session_in(&project, 1, false);
    let old = queued_in(&session, "req-old", "from before", 5);
    let ids = [owner.as_str(), project.id.as_str(), session.id.as_str(), old.message.id.as_str()];
    let statements = [
        "INSERT INTO projects (id, owner_id, name, path, created_at, updated_at)
         VALUES (?2, ?1, 'old', '/tmp/old', 1, 1)",
        "INSERT INTO sessions (id, project_id, owner_id, title, title_set, archived, created_at, updated_at)
         VALUES (?3, ?2, ?1, 'old', 0, 0, 1, 1)",
        "INSERT INTO queued_messages (id, session_id, owner_id, request_id, text, on_disconnect, created_at)
         VALUES (?4, ?3, ?1, 'req-old', 'from before', 'continue', 5)",
    ];
    for statement in statements {
        let mut query = sqlx::query(statement);
        for id in ids {
            query = query.bind(id);
        }
        query.execute(&mut conn).await.expect("an old row");
    }
    conn.close().await.expect("close");

    let store = SqliteStore::open(&path).await.expect("open and upgrade");
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![old]);
    a_queued_message_keeps_its_files(&store).await;
    store.close().await;
}

/// The schema refuses what a settled or pending approval cannot be, so a caller bug
/// fails loudly instead of storing a half-decided approval.
#[tokio::test]
async fn settling_back_to_pending_is_refused() {
    let store = SqliteStore::open_in_memory().await.expect("open in memory");
    let (_, session) = new_session(&store).await;
    let (_, approval, checkpoint) = interrupted_run_in(&store, &session, "req", 200).await;
    let settled =
        store.settle_approval(&approval.id, ApprovalStatus::Pending, Some(&Decision::Once), None, None, 300).await;
    assert!(matches!(settled, Err(StoreError::Backend(_))), "got {settled:?}");
    assert_eq!(store.get_approval(&approval.id).await.expect("get"), Some((approval, checkpoint)));
}

/// Many concurrent first prompts with one requestId (a client retrying over a flaky
/// network) must produce exactly one run, and every caller must see that run.
#[tokio::test]
async fn concurrent_inserts_of_one_request_create_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("spool.db")).await.expect("open"));
    let (_, session) = new_session(store.as_ref()).await;

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
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
    assert_eq!(existing.len(), 7);
    assert!(existing.iter().all(|run| *run == created[0]), "every loser sees the winner's run");

    // The same for users: concurrent first logins agree on one id.
    let logins: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.ensure_user("carol").await.expect("ensure_user") })
        })
        .collect();
    let mut ids = Vec::new();
    for login in logins {
        ids.push(login.await.expect("task"));
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one user id for one name: {ids:?}");
}

/// Rows the store did not write (a hand edit, another tool) come back as errors,
/// never as a panic or a silently wrong value.
#[tokio::test]
async fn corrupt_rows_are_backend_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    let (_, session) = new_session(&store).await;
    store
        .insert_message(&session.id, &session.owner_id, &indexed(0, Message::user_text("hi", 1)))
        .await
        .expect("message");

    let mut conn = raw_connection(&path).await;
    // Edits SQLite's own constraints accept but the domain does not: an id of the
    // wrong shape, and message metadata that is JSON but not a message.
    for edit in ["UPDATE sessions SET owner_id = 'not-an-id'", "UPDATE messages SET meta = '{\"unexpected\": true}'"] {
        sqlx::query(edit).execute(&mut conn).await.expect("hand edit");
    }
    conn.close().await.expect("close");

    assert!(matches!(store.get_session(&session.id).await, Err(StoreError::Backend(_))));
    assert!(matches!(store.list_messages(&session.id, None, 10).await, Err(StoreError::Backend(_))));
    assert!(matches!(store.latest_rounds(&session.id, 1).await, Err(StoreError::Backend(_))));
}

/// JSON the database accepts (valid, an array) but the domain does not.
#[tokio::test]
async fn corrupt_rules_and_decisions_are_backend_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    let (_, session) = new_session(&store).await;
    let (_, approval, _) = interrupted_run_in(&store, &session, "req", 200).await;
    assert!(
        store
            .settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 300)
            .await
            .expect("settle")
    );

    let mut conn = raw_connection(&path).await;
    for edit in ["UPDATE sessions SET permissions = '[{\"tool\": 1}]'", "UPDATE approvals SET decision = '\"maybe\"'"] {
        sqlx::query(edit).execute(&mut conn).await.expect("hand edit");
    }
    // And what the schema itself refuses: rules that are not an array.
    assert!(sqlx::query("UPDATE sessions SET permissions = '{}'").execute(&mut conn).await.is_err());
    conn.close().await.expect("close");

    assert!(matches!(store.get_session(&session.id).await, Err(StoreError::Backend(_))));
    assert!(matches!(store.get_approval(&approval.id).await, Err(StoreError::Backend(_))));
}

async fn raw_connection(path: &Path) -> sqlx::SqliteConnection {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    sqlx::SqliteConnection::connect_with(&options).await.expect("raw connection")
}

/// A database that had a token before auth became sticky — even one revoked since —
/// comes out of the upgrade with auth on; one that never had a token with it off.
#[tokio::test]
async fn a_database_that_ever_had_a_token_keeps_auth_on_after_the_upgrade() {
    for had_token in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("spool.db");
        let before = dir.path().join("migrations");
        std::fs::create_dir(&before).expect("mkdir");
        for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations")).expect("ls") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.as_str() < "0008" {
                std::fs::copy(entry.path(), before.join(&name)).expect("copy a migration");
            }
        }
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("connect");
        let migrator = sqlx::migrate::Migrator::new(before.as_path()).await.expect("read migrations");
        migrator.run(&mut conn).await.expect("apply 0001-0007");
        if had_token {
            sqlx::query("INSERT INTO users (id, name, created_at) VALUES ('usr_old', 'old', 1)")
                .execute(&mut conn)
                .await
                .expect("old user");
            sqlx::query(
                "INSERT INTO tokens (id, user_id, hash, created_at, revoked_at) VALUES ('tok_old', 'usr_old', ?, 1, 2)",
            )
            .bind("a".repeat(64))
            .execute(&mut conn)
            .await
            .expect("old revoked token");
        }
        conn.close().await.expect("close");
        let store = SqliteStore::open(&path).await.expect("open and upgrade");
        assert_eq!(store.auth_enabled().await.expect("flag"), had_token);
        store.close().await;
    }
}

/// The idempotency table keeps one opaque answer from 0012 on: keys completed before
/// keep their body as the answer (the engine still reads those), and a claim still
/// open stays open.
#[tokio::test]
async fn idempotency_keys_from_before_0012_keep_their_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let mut conn = database_before(dir.path(), "0012").await;
    let body = r#"{"approvalId":"per_1","runId":"run_1","decision":"once","status":"resolved"}"#;
    sqlx::query(
        "INSERT INTO idempotency (scope, key, response_status, response_body, created_at)
         VALUES ('approval:per_1', 'done', 200, ?, 1), ('approval:per_1', 'open', NULL, NULL, 2)",
    )
    .bind(body)
    .execute(&mut conn)
    .await
    .expect("old rows");
    drop(conn);

    let store = SqliteStore::open(&path).await.expect("migrate to now");
    assert_eq!(
        store.claim_idempotency("approval:per_1", "done", 10).await.expect("claim"),
        IdempotencyClaim::Done(body.into())
    );
    assert_eq!(
        store.claim_idempotency("approval:per_1", "open", 10).await.expect("claim"),
        IdempotencyClaim::InProgress
    );
}

/// A shelved and unshelved turn's rows are the rows it had, byte for byte: the same
/// message ids, the same part ids, the same stored JSON text (SQLite keeps it as text,
/// so a re-encoding on the way would show).
#[tokio::test]
async fn a_shelved_turn_comes_back_with_the_rows_it_had() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spool.db");
    let store = SqliteStore::open(&path).await.expect("open");
    let (_, session) = new_session(&store).await;
    let arguments = serde_json::json!({"big": u64::MAX, "small": i64::MIN, "float": 0.1, "text": "ünï \"q\"\n🦀"});
    let messages = [
        Message::user_text("first", 1),
        Message::user_text("second", 2),
        Message::Assistant {
            content: vec![
                Content::Thinking { thinking: "hm\u{1}".into() },
                Content::ToolCall { id: "c".into(), name: "bash".into(), arguments },
                Content::Text { text: "done".into() },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage::default(),
            model: "m".into(),
            error_message: None,
            timestamp: 3,
        },
    ];
    for (index, message) in messages.into_iter().enumerate() {
        store.insert_message(&session.id, &session.owner_id, &indexed(index as u64, message)).await.expect("insert");
    }
    let mut conn = raw_connection(&path).await;
    let before = stored_rows(&mut conn, &session.id).await;
    assert_eq!(before.1.len(), 5);

    assert_eq!(store.shelve(&session.id, 1, BranchKind::Regenerate).await.expect("shelve"), Some(1));
    assert_eq!(stored_rows(&mut conn, &session.id).await.0.len(), 1, "the path holds the first message");
    store
        .insert_message(&session.id, &session.owner_id, &indexed(1, Message::user_text("second", 4)))
        .await
        .expect("insert");
    assert_eq!(store.unshelve(&session.id, 1).await.expect("switch back"), Some(2));
    assert_eq!(stored_rows(&mut conn, &session.id).await, before, "every row as it was");
    conn.close().await.expect("close");
}

type MessageRow = (String, i64, String, String, i64);
type PartRow = (String, String, i64, String, String);

/// A session's `messages` and `parts` rows as stored.
async fn stored_rows(conn: &mut sqlx::SqliteConnection, session: &SessionId) -> (Vec<MessageRow>, Vec<PartRow>) {
    let messages =
        sqlx::query_as("SELECT id, idx, role, meta, created_at FROM messages WHERE session_id = ? ORDER BY idx")
            .bind(session.as_str())
            .fetch_all(&mut *conn)
            .await
            .expect("messages");
    let parts =
        sqlx::query_as("SELECT id, message_id, position, kind, data FROM parts WHERE session_id = ? ORDER BY id")
            .bind(session.as_str())
            .fetch_all(&mut *conn)
            .await
            .expect("parts");
    (messages, parts)
}
