//! The `Store` conformance suite: behaviour every implementation must show, written
//! against `&dyn Store` only, so the SQLite store runs it today and a PostgreSQL
//! store can run the very same checks later.
//!
//! Each check makes its own user, project and sessions with fresh ids, so checks do
//! not see each other's rows and the suite can run twice on one database (the file
//! test reopens a store that already holds a previous pass). The global operations
//! (`fail_running_runs`, `all_pending_approvals`) are handled inside their checks
//! (see there). The races take stores as `Arc`s because their tasks are spawned, and
//! a slice of them so a backend shared by several processes can race several handles
//! (nodes) against each other; the suite itself races one.

use serde_json::json;
use spool_engine::{
    ApprovalPolicy, Draft, IdempotencyClaim, Lease, Listener, LoginSession, OnDisconnect, QueueInsert, QueueLimits,
    QueuedPrompt, RuleRemoval, RunInsert, Store, StoreError, Supersede,
};
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::sync::Arc;

/// How many tasks each race of the suite spawns.
pub const RACERS: usize = 20;

/// Runs every check in order.
pub async fn conformance(shared: Arc<dyn Store>) {
    let store = shared.as_ref();
    users_are_created_once(store).await;
    projects_round_trip_in_creation_order(store).await;
    sessions_list_by_archived_flag_newest_first(store).await;
    sessions_keep_their_permission_rules(store).await;
    one_rule_is_removed_only_while_it_is_the_one_named(store).await;
    concurrent_removals_of_one_rule_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    search_finds_titles_and_message_text_of_one_owner_newest_first_in_pages(store).await;
    messages_round_trip_for_every_role_and_content_kind(store).await;
    a_taken_message_index_is_a_conflict(store).await;
    list_messages_pages_backwards_from_before(store).await;
    latest_rounds_starts_at_the_nth_last_user_message(store).await;
    insert_run_is_idempotent_per_request_id(store).await;
    start_run_writes_the_run_and_its_prompt_together(store).await;
    update_run_writes_the_mutable_fields(store).await;
    fail_running_runs_touches_only_running_runs(store).await;
    drafts_are_appended_and_orphaned_once_their_run_settles(store).await;
    interrupt_run_writes_the_approval_and_the_run_together(store).await;
    pending_approvals_are_listed_oldest_first(store).await;
    waiting_sessions_are_those_with_a_pending_approval(store).await;
    settle_approval_decides_once(store).await;
    supersede_replaces_an_approval_whose_call_has_not_started(store).await;
    concurrent_settles_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    idempotency_keys_replay_the_first_response(store).await;
    concurrent_claims_of_one_key_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    session_memory_is_replaced_whole_and_deleted_with_the_session(store).await;
    todo_lists_are_replaced_whole_and_deleted_with_the_session(store).await;
    tokens_are_found_by_hash_until_revoked(store).await;
    login_sessions_end_by_logout_expiry_and_revocation(store).await;
    the_auth_flag_and_listeners_are_kept(store).await;
    runs_since_lists_a_sessions_runs_from_an_index_in_order(store).await;
    deleting_a_session_removes_its_messages_runs_and_approvals(store).await;
    deleting_a_project_removes_everything_under_it(store).await;
    leases_are_taken_renewed_and_released(store).await;
    concurrent_lease_acquisitions_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
    queued_prompts_wait_in_order_within_their_limit(store).await;
    a_paused_queue_is_left_out_until_resumed(store).await;
    queued_prompts_are_bounded_per_owner_by_count_and_bytes(store).await;
    sessions_are_counted_per_owner_and_projects_listed_for_all(store).await;
    taking_a_queued_prompt_inserts_its_run_once(store).await;
    concurrent_takes_of_one_queued_prompt_have_exactly_one_winner(std::slice::from_ref(&shared), RACERS).await;
}

// ---- fixtures -------------------------------------------------------------------

/// A time limit no search in these checks comes near.
pub const A_WHILE: std::time::Duration = std::time::Duration::from_secs(60);

/// A name no other check (or earlier pass over the same database) has used.
fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", UserId::new())
}

/// The user message a run answers, as the engine stores it with the run.
pub fn prompt_of(run: &Run, id: MessageId, text: &str) -> IndexedMessage {
    IndexedMessage { id, index: run.user_message_index, message: Message::user_text(text, run.created_at) }
}

pub async fn new_user(store: &dyn Store) -> UserId {
    store.ensure_user(&unique_name("user")).await.expect("ensure_user")
}

pub fn project_for(owner: &UserId, created_at: Millis) -> Project {
    Project {
        id: ProjectId::new(),
        owner_id: owner.clone(),
        name: "spool".into(),
        path: format!("/home/dev/{}", ProjectId::new()),
        created_at,
        updated_at: created_at,
        dir: Some(spool_protocol::DirIdentity { dev: u64::MAX - 1, ino: 1 << 63 }),
    }
}

pub fn session_in(project: &Project, updated_at: Millis, archived: bool) -> Session {
    Session {
        id: SessionId::new(),
        project_id: project.id.clone(),
        owner_id: project.owner_id.clone(),
        title: format!("session updated at {updated_at}"),
        title_set: archived,
        archived,
        permissions: vec![],
        model: None,
        mode: Default::default(),
        read_index: None,
        created_at: 1,
        updated_at,
    }
}

/// A user, a project and one live session, all stored.
pub async fn new_session(store: &dyn Store) -> (Project, Session) {
    let owner = new_user(store).await;
    let project = project_for(&owner, 1_000);
    store.insert_project(&project).await.expect("insert_project");
    let session = session_in(&project, 1_000, false);
    store.insert_session(&session).await.expect("insert_session");
    (project, session)
}

pub fn indexed(index: u64, message: Message) -> IndexedMessage {
    IndexedMessage { id: MessageId::new(), index, message }
}

fn user(text: &str) -> Message {
    Message::user_text(text, 10)
}

fn assistant(text: &str) -> Message {
    Message::Assistant {
        content: vec![Content::Text { text: text.into() }],
        stop_reason: Some(StopReason::Stop),
        usage: Usage { input: 1, output: 2, ..Usage::default() },
        model: "scripted".into(),
        error_message: None,
        timestamp: 11,
    }
}

fn tool_result(text: &str) -> Message {
    Message::ToolResult {
        tool_call_id: "call_1".into(),
        tool_name: "read".into(),
        content: vec![Content::Text { text: text.into() }],
        is_error: false,
        timestamp: 12,
        diff: None,
    }
}

/// Stores `messages` at indices 0.. and returns them as stored.
async fn append_all(store: &dyn Store, session: &Session, messages: Vec<Message>) -> Vec<IndexedMessage> {
    let mut stored = Vec::new();
    for (i, message) in messages.into_iter().enumerate() {
        let m = indexed(i as u64, message);
        store.insert_message(&session.id, &session.owner_id, &m).await.expect("insert_message");
        stored.push(m);
    }
    stored
}

async fn all_messages(store: &dyn Store, session: &Session) -> Vec<IndexedMessage> {
    store.list_messages(&session.id, None, u32::MAX).await.expect("list_messages")
}

pub fn run_in(session: &Session, request_id: &str, status: RunStatus) -> Run {
    Run {
        id: RunId::new(),
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        request_id: request_id.into(),
        status,
        user_message_index: 0,
        created_at: 100,
        updated_at: 100,
        first_token_at: None,
        ended_at: None,
        usage: Usage::default(),
        error: None,
    }
}

fn indices(messages: &[IndexedMessage]) -> Vec<u64> {
    messages.iter().map(|m| m.index).collect()
}

/// A pending approval of `run`'s bash call, expiring ten minutes after `created_at`.
pub fn approval_for(run: &Run, created_at: Millis) -> Approval {
    Approval {
        id: ApprovalId::new(),
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        owner_id: run.owner_id.clone(),
        tool_call_id: format!("call-{created_at}"),
        tool: "bash".into(),
        kind: ApprovalKind::ConfirmAction,
        payload: json!({"command": "rm -rf build/", "summary": "deletes build/ (3 files)", "risk": ["delete"]}),
        status: ApprovalStatus::Pending,
        decision: None,
        message: None,
        actor: None,
        created_at,
        expires_at: created_at + 600_000,
        resolved_at: None,
    }
}

/// What an engine might keep to resume a run: opaque to the store, but it must come
/// back exactly.
fn checkpoint_for(approval: &Approval) -> serde_json::Value {
    json!({
        "toolCallId": approval.tool_call_id,
        "pendingCalls": [{"id": "a", "args": {"path": "ünï/🦀.rs"}}, {"id": "b", "args": null}],
        "usage": {"input": u64::MAX, "output": 0.5},
        "empty": {},
    })
}

/// A running run in `session` that then stops on an approval; returns the stored run,
/// approval and checkpoint.
pub async fn interrupted_run_in(
    store: &dyn Store,
    session: &Session,
    request_id: &str,
    at: Millis,
) -> (Run, Approval, serde_json::Value) {
    let run = run_in(session, request_id, RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");
    let run = Run { status: RunStatus::Interrupted, updated_at: at, first_token_at: Some(at - 1), ..run };
    let approval = approval_for(&run, at);
    let checkpoint = checkpoint_for(&approval);
    store.interrupt_run(&run, &approval, &checkpoint).await.expect("interrupt_run");
    (run, approval, checkpoint)
}

async fn stored_approval(store: &dyn Store, id: &ApprovalId) -> Option<(Approval, serde_json::Value)> {
    store.get_approval(id).await.expect("get_approval")
}

// ---- checks ---------------------------------------------------------------------

pub async fn users_are_created_once(store: &dyn Store) {
    let name = unique_name("alice");
    let first = store.ensure_user(&name).await.expect("ensure_user");
    let again = store.ensure_user(&name).await.expect("ensure_user again");
    assert_eq!(first, again, "the same name must map to the same user");
    let other = store.ensure_user(&unique_name("bob")).await.expect("ensure_user bob");
    assert_ne!(first, other);
}

pub async fn projects_round_trip_in_creation_order(store: &dyn Store) {
    let owner = new_user(store).await;
    let older = project_for(&owner, 100);
    let newer = project_for(&owner, 200);
    // Inserted newest first, so the list order has to come from created_at.
    store.insert_project(&newer).await.expect("insert newer");
    store.insert_project(&older).await.expect("insert older");
    let stranger = new_user(store).await;
    let theirs = Project { path: older.path.clone(), ..project_for(&stranger, 50) };
    store.insert_project(&theirs).await.expect("another owner may register the same path");

    assert_eq!(store.list_projects(&owner).await.expect("list"), vec![older.clone(), newer.clone()]);
    assert_eq!(store.list_projects(&stranger).await.expect("list"), vec![theirs.clone()]);
    assert_eq!(store.get_project(&older.id).await.expect("get"), Some(older.clone()));
    assert_eq!(store.get_project(&ProjectId::new()).await.expect("get absent"), None);

    let duplicate = Project { path: older.path.clone(), ..project_for(&owner, 300) };
    match store.insert_project(&duplicate).await {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("registering a path twice must be a Conflict, got {other:?}"),
    }
    assert_eq!(store.list_projects(&owner).await.expect("list").len(), 2, "the duplicate must not be stored");

    // update_project writes the name and updated_at, and nothing else.
    let edited =
        Project { name: "renamed".into(), updated_at: 999, path: "/elsewhere".into(), created_at: 7, ..older.clone() };
    store.update_project(&edited).await.expect("update");
    let expected = Project { name: "renamed".into(), updated_at: 999, ..older.clone() };
    assert_eq!(store.get_project(&older.id).await.expect("get"), Some(expected));
}

pub async fn sessions_list_by_archived_flag_newest_first(store: &dyn Store) {
    let (project, first) = new_session(store).await; // updated_at 1000, live
    let newest = session_in(&project, 3_000, false);
    let middle = session_in(&project, 2_000, false);
    let archived = session_in(&project, 5_000, true);
    for s in [&middle, &archived, &newest] {
        store.insert_session(s).await.expect("insert_session");
    }
    let (_, elsewhere) = new_session(store).await;

    let live = store.list_sessions(&project.id, false).await.expect("list live");
    assert_eq!(live, vec![newest.clone(), middle.clone(), first.clone()]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list archived"), vec![archived.clone()]);
    assert_eq!(store.get_session(&elsewhere.id).await.expect("get"), Some(elsewhere.clone()));
    assert_eq!(store.get_session(&SessionId::new()).await.expect("get absent"), None);

    // update_session writes title, title_set, archived, permissions, mode and updated_at only.
    let edited = Session {
        title: "Fix the parser".into(),
        title_set: true,
        archived: true,
        permissions: vec![PermissionRule::new("read", "*", PermissionAction::Allow)],
        mode: spool_protocol::SessionMode::Plan,
        updated_at: 9_000,
        created_at: 42,
        ..first.clone()
    };
    store.update_session(&edited).await.expect("update");
    let expected = Session { created_at: first.created_at, ..edited };
    assert_eq!(store.get_session(&first.id).await.expect("get"), Some(expected.clone()));
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list live"), vec![newest, middle]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list archived"), vec![expected, archived]);
}

pub async fn search_finds_titles_and_message_text_of_one_owner_newest_first_in_pages(store: &dyn Store) {
    // A word no earlier pass over the same database wrote.
    let word = format!("quokka{}", &SessionId::new().as_str()[4..]).to_lowercase();
    let (project, unrelated) = new_session(store).await; // updated_at 1000, no match
    let titled = Session { title: format!("Fix the {word} parser"), ..session_in(&project, 2_000, false) };
    let in_prompt = session_in(&project, 3_000, false);
    let in_answer = session_in(&project, 4_000, true); // archived sessions are searched too
    let in_tool_call = session_in(&project, 5_000, false);
    for s in [&titled, &in_prompt, &in_answer, &in_tool_call] {
        store.insert_session(s).await.expect("insert_session");
    }
    let owner = project.owner_id.clone();
    let prompt_text = format!("where is the {} defined?", word.to_uppercase());
    store.insert_message(&in_prompt.id, &owner, &indexed(0, user("hello"))).await.expect("insert");
    store.insert_message(&in_prompt.id, &owner, &indexed(1, user(&prompt_text))).await.expect("insert");
    store.insert_message(&in_answer.id, &owner, &indexed(0, user("hi"))).await.expect("insert");
    store
        .insert_message(&in_answer.id, &owner, &indexed(1, assistant(&format!("the {word} lives here"))))
        .await
        .expect("insert");
    // Only text is searched: a tool call's arguments are not what a person wrote or read.
    let call = Message::Assistant {
        content: vec![Content::ToolCall { id: "c1".into(), name: "read".into(), arguments: json!({"path": word}) }],
        stop_reason: Some(StopReason::ToolUse),
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 11,
    };
    store.insert_message(&in_tool_call.id, &owner, &indexed(0, call)).await.expect("insert");
    // Another user's session with the word in its title and text stays invisible.
    let (other_project, other) = new_session(store).await;
    let other = Session { title: format!("{word} too"), ..other };
    store.update_session(&other).await.expect("update");
    store.insert_message(&other.id, &other_project.owner_id, &indexed(0, user(&word))).await.expect("insert");

    let all = store.search_sessions(&owner, &word.to_uppercase(), None, 10, A_WHILE).await.expect("search");
    let found: Vec<(&SessionId, Option<&str>)> = all.iter().map(|m| (&m.session.id, m.text.as_deref())).collect();
    let answer_text = format!("the {word} lives here");
    assert_eq!(
        found,
        vec![
            (&in_answer.id, Some(answer_text.as_str())),
            (&in_prompt.id, Some(prompt_text.as_str())),
            (&titled.id, None)
        ],
        "case-insensitive, newest first, this owner's only, with the matching text"
    );
    assert_eq!(all[2].session, titled);
    assert!(!found.iter().any(|(id, _)| **id == unrelated.id || **id == in_tool_call.id));

    let first = store.search_sessions(&owner, &word, None, 2, A_WHILE).await.expect("page 1");
    assert_eq!(first.iter().map(|m| &m.session.id).collect::<Vec<_>>(), vec![&in_answer.id, &in_prompt.id]);
    let last = &first[1].session;
    let rest = store
        .search_sessions(&owner, &word, Some((last.updated_at, last.id.clone())), 2, A_WHILE)
        .await
        .expect("page 2");
    assert_eq!(rest.iter().map(|m| &m.session.id).collect::<Vec<_>>(), vec![&titled.id]);

    // LIKE's wildcards in the query match themselves, not everything.
    assert_eq!(store.search_sessions(&owner, "%", None, 10, A_WHILE).await.expect("search %"), vec![]);
    assert_eq!(store.search_sessions(&owner, "_", None, 10, A_WHILE).await.expect("search _"), vec![]);
}

pub async fn sessions_keep_their_permission_rules(store: &dyn Store) {
    let (project, plain) = new_session(store).await;
    assert_eq!(store.get_session(&plain.id).await.expect("get").expect("stored").permissions, vec![]);

    use PermissionAction::*;
    // A default pattern (`*`, left out of the JSON), wildcards, order that matters
    // (the last match wins), and characters JSON has to escape.
    let rules = vec![
        PermissionRule::new("*", "*", Ask),
        PermissionRule::new("bash", "git *", Allow),
        PermissionRule::new("bash", "git push*", Deny),
        PermissionRule::new("write", "src/\"quoted\"/ünï?.rs", Allow),
    ];
    let session = Session { permissions: rules.clone(), ..session_in(&project, 2_000, false) };
    store.insert_session(&session).await.expect("insert_session");
    assert_eq!(store.get_session(&session.id).await.expect("get"), Some(session.clone()));
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![session.clone(), plain]);

    // update_session replaces the rules whole: reordered, then none at all.
    let reordered = Session { permissions: rules.iter().rev().cloned().collect(), updated_at: 3_000, ..session };
    store.update_session(&reordered).await.expect("update");
    assert_eq!(store.get_session(&reordered.id).await.expect("get"), Some(reordered.clone()));
    let cleared = Session { permissions: vec![], updated_at: 4_000, ..reordered };
    store.update_session(&cleared).await.expect("update");
    assert_eq!(store.get_session(&cleared.id).await.expect("get"), Some(cleared));
}

pub async fn one_rule_is_removed_only_while_it_is_the_one_named(store: &dyn Store) {
    use PermissionAction::{Allow, Deny};
    let (_, session) = new_session(store).await;
    let rules = vec![PermissionRule::new("read", "*", Deny), PermissionRule::new("bash", "git *", Allow)];
    store.update_session(&Session { permissions: rules.clone(), ..session.clone() }).await.expect("update");
    // Another tool or another action at that index: nothing changes.
    let at_zero = Some(rules[0].clone());
    assert_eq!(
        store.remove_session_rule(&session.id, 0, "bash", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(at_zero.clone())
    );
    assert_eq!(
        store.remove_session_rule(&session.id, 0, "read", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(at_zero)
    );
    assert_eq!(
        store.remove_session_rule(&session.id, 2, "bash", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(None)
    );
    let unchanged = store.get_session(&session.id).await.expect("get").expect("session");
    assert_eq!((unchanged.permissions, unchanged.updated_at), (rules.clone(), session.updated_at));
    // The named one goes, with its pattern; the rest stay in order.
    assert_eq!(
        store.remove_session_rule(&session.id, 1, "bash", Allow, 7_000).await.expect("remove"),
        RuleRemoval::Removed(vec![rules[0].clone()])
    );
    let stored = store.get_session(&session.id).await.expect("get").expect("session");
    assert_eq!((stored.permissions, stored.updated_at), (vec![rules[0].clone()], 7_000));
    assert_eq!(
        store.remove_session_rule(&SessionId::new(), 0, "read", Deny, 9).await.expect("remove"),
        RuleRemoval::NoSession
    );
}

/// Racers remove the same rule (index 0, `bash` allow) from one list: exactly one wins,
/// the others find another rule there, and the rule behind it is never lost.
pub async fn concurrent_removals_of_one_rule_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    use PermissionAction::Allow;
    let (_, session) = new_session(stores[0].as_ref()).await;
    let rules = vec![PermissionRule::new("bash", "*", Allow), PermissionRule::new("write", "*", Allow)];
    stores[0].update_session(&Session { permissions: rules.clone(), ..session.clone() }).await.expect("update");
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let (store, id) = (stores[i % stores.len()].clone(), session.id.clone());
            tokio::spawn(async move { store.remove_session_rule(&id, 0, "bash", Allow, 1).await })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        match task.await.expect("task").expect("remove") {
            RuleRemoval::Removed(left) => {
                won += 1;
                assert_eq!(left, vec![rules[1].clone()]);
            }
            RuleRemoval::Mismatch(there) => assert_eq!(there, Some(rules[1].clone())),
            RuleRemoval::NoSession => panic!("the session is there"),
        }
    }
    assert_eq!(won, 1);
    let stored = stores[0].get_session(&session.id).await.expect("get").expect("session");
    assert_eq!(stored.permissions, vec![rules[1].clone()]);
}

pub async fn messages_round_trip_for_every_role_and_content_kind(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let every_kind = || {
        vec![
            Content::Thinking { thinking: "let me think\nabout \"quotes\" and ünïcødé 🦀".into() },
            Content::Text { text: String::new() },
            Content::ToolCall {
                id: "call_1".into(),
                name: "bash".into(),
                arguments: json!({
                    "command": "ls -la",
                    "nested": {"list": [1, -2, 3.5, null, true, "x"], "empty": {}},
                    "big": u64::MAX,
                    "small": i64::MIN,
                    "float": 0.1,
                }),
            },
            Content::Text { text: "the end".into() },
        ]
    };
    let messages = vec![
        Message::User { content: every_kind(), timestamp: 1_700_000_000_000 },
        Message::Assistant {
            content: every_kind(),
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input: 12_345, output: 678, ..Usage::default() },
            model: "claude-test".into(),
            error_message: None,
            timestamp: 1_700_000_000_001,
        },
        Message::ToolResult {
            tool_call_id: "call_1".into(),
            tool_name: "bash".into(),
            content: every_kind(),
            is_error: true,
            timestamp: 1_700_000_000_002,
            diff: None,
        },
        // The optional fields set the other way, and no content at all.
        Message::Assistant {
            content: vec![],
            stop_reason: None,
            usage: Usage::default(),
            model: String::new(),
            error_message: Some("model overloaded".into()),
            timestamp: 1_700_000_000_003,
        },
        Message::User { content: vec![], timestamp: 0 },
        Message::ToolResult {
            tool_call_id: String::new(),
            tool_name: "read".into(),
            content: vec![Content::Text { text: "ok".into() }],
            is_error: false,
            timestamp: -5,
            // What a write changed, kept with its result for the card after a reload.
            diff: Some("--- a (before the write)\n+++ a (after the write)\n@@ -1 +1 @@\n-\"old\"\n+ünï\n".into()),
        },
        Message::Assistant {
            content: vec![Content::Text { text: "done".into() }],
            stop_reason: Some(StopReason::Aborted),
            usage: Usage { input: 0, output: 1, ..Usage::default() },
            model: "m".into(),
            error_message: Some(String::new()),
            timestamp: 9,
        },
    ];
    let stored = append_all(store, &session, messages).await;
    assert_eq!(all_messages(store, &session).await, stored, "messages must come back exactly as written");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), stored.len() as u64);

    let (_, empty) = new_session(store).await;
    assert_eq!(store.count_messages(&empty.id).await.expect("count"), 0);
    assert_eq!(all_messages(store, &empty).await, vec![]);
}

pub async fn a_taken_message_index_is_a_conflict(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let original = indexed(0, user("first"));
    store.insert_message(&session.id, &session.owner_id, &original).await.expect("insert");

    let rival = indexed(0, assistant("second writer"));
    match store.insert_message(&session.id, &session.owner_id, &rival).await {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("a taken index must be a Conflict, got {other:?}"),
    }
    assert_eq!(all_messages(store, &session).await, vec![original.clone()], "the first writer's message must stand");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1);

    // The same index in another session is a different slot.
    let (_, other) = new_session(store).await;
    store.insert_message(&other.id, &other.owner_id, &indexed(0, user("elsewhere"))).await.expect("other session");

    // A message for a session that does not exist is refused, not stored as an orphan.
    let ghost = SessionId::new();
    assert!(store.insert_message(&ghost, &session.owner_id, &indexed(0, user("lost"))).await.is_err());
    assert_eq!(store.count_messages(&ghost).await.expect("count"), 0);
}

pub async fn list_messages_pages_backwards_from_before(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let messages =
        (0..10).map(|i| if i % 2 == 0 { user(&format!("u{i}")) } else { assistant(&format!("a{i}")) }).collect();
    let stored = append_all(store, &session, messages).await;
    // Another session's messages must never leak into this one's pages.
    let (_, noise) = new_session(store).await;
    append_all(store, &noise, vec![user("noise"), assistant("noise")]).await;

    let id = &session.id;
    let page = |before: Option<u64>, limit: u32| async move {
        store.list_messages(id, before, limit).await.expect("list_messages")
    };
    assert_eq!(page(None, 3).await, stored[7..10].to_vec(), "the latest page, ascending");
    assert_eq!(page(Some(7), 3).await, stored[4..7].to_vec(), "the page before it");
    assert_eq!(page(Some(4), 3).await, stored[1..4].to_vec());
    assert_eq!(indices(&page(Some(1), 3).await), vec![0], "a short first page");
    assert_eq!(page(Some(0), 3).await, vec![], "nothing before the first message");
    assert_eq!(page(None, 0).await, vec![], "a zero limit");
    assert_eq!(page(None, 100).await, stored, "a limit beyond the history returns all");
    assert_eq!(indices(&page(Some(1_000), 2).await), vec![8, 9], "before beyond the end");
    assert_eq!(indices(&page(Some(u64::MAX), 2).await), vec![8, 9]);
}

pub async fn latest_rounds_starts_at_the_nth_last_user_message(store: &dyn Store) {
    // One round: a prompt, a tool call, its result, the answer.
    let round =
        |n: usize| vec![user(&format!("prompt {n}")), assistant("calling"), tool_result("output"), assistant("answer")];
    let rounds_of = |sizes: usize| (0..sizes).flat_map(round).collect::<Vec<_>>();
    let from =
        |stored: &[IndexedMessage], index: u64| stored.iter().filter(|m| m.index >= index).cloned().collect::<Vec<_>>();

    // No messages at all.
    let (_, empty) = new_session(store).await;
    for n in [0, 1, 3] {
        assert_eq!(
            store.latest_rounds(&empty.id, n).await.expect("latest_rounds"),
            vec![],
            "empty session, {n} rounds"
        );
    }

    // Messages but no user message (0 user rounds): fewer than asked, so everything.
    let (_, no_user) = new_session(store).await;
    let stored = append_all(store, &no_user, vec![assistant("hello"), tool_result("x")]).await;
    assert_eq!(store.latest_rounds(&no_user.id, 1).await.expect("latest_rounds"), stored);

    // One round.
    let (_, one) = new_session(store).await;
    let stored = append_all(store, &one, rounds_of(1)).await;
    for n in [1, 3, 5] {
        assert_eq!(store.latest_rounds(&one.id, n).await.expect("latest_rounds"), stored, "1 round, asked {n}");
    }

    // Three rounds: user messages at 0, 4, 8.
    let (_, three) = new_session(store).await;
    let stored = append_all(store, &three, rounds_of(3)).await;
    assert_eq!(store.latest_rounds(&three.id, 1).await.expect("latest_rounds"), from(&stored, 8));
    assert_eq!(store.latest_rounds(&three.id, 2).await.expect("latest_rounds"), from(&stored, 4));
    assert_eq!(store.latest_rounds(&three.id, 3).await.expect("latest_rounds"), stored);
    assert_eq!(store.latest_rounds(&three.id, 5).await.expect("latest_rounds"), stored);
    assert_eq!(store.latest_rounds(&three.id, 0).await.expect("latest_rounds"), vec![], "zero rounds is nothing");

    // Five rounds after a leading non-user message, with an unanswered last prompt:
    // user messages at 1, 5, 9, 13, 17 and the history ends at 17.
    let (_, five) = new_session(store).await;
    let mut messages = vec![assistant("welcome")];
    messages.extend(rounds_of(4));
    messages.push(user("still waiting"));
    let stored = append_all(store, &five, messages).await;
    assert_eq!(indices(&store.latest_rounds(&five.id, 1).await.expect("latest_rounds")), vec![17]);
    assert_eq!(store.latest_rounds(&five.id, 3).await.expect("latest_rounds"), from(&stored, 9));
    assert_eq!(store.latest_rounds(&five.id, 5).await.expect("latest_rounds"), from(&stored, 1));
    assert_eq!(store.latest_rounds(&five.id, 6).await.expect("latest_rounds"), stored, "more rounds than exist");
    assert_eq!(store.latest_rounds(&five.id, usize::MAX).await.expect("latest_rounds"), stored);
}

pub async fn insert_run_is_idempotent_per_request_id(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    let run = Run {
        user_message_index: 4,
        first_token_at: Some(150),
        usage: Usage { input: 5, output: 6, ..Usage::default() },
        ..run_in(&session, "req-1", RunStatus::Running)
    };
    assert_eq!(store.insert_run(&run).await.expect("insert_run"), RunInsert::Created);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(store.find_run_by_request(&session.id, "req-1").await.expect("find"), Some(run.clone()));
    assert_eq!(store.find_run_by_request(&session.id, "req-2").await.expect("find"), None);

    // The retry carries a fresh run id; it must get the first run back and write nothing.
    let retry = Run { user_message_index: 9, ..run_in(&session, "req-1", RunStatus::Running) };
    assert_eq!(store.insert_run(&retry).await.expect("insert_run retry"), RunInsert::Existing(run.clone()));
    assert_eq!(store.get_run(&retry.id).await.expect("get_run"), None, "the retry must not be stored");

    // The existing run is returned as it is now, whatever state it reached.
    let finished = Run { status: RunStatus::Completed, ended_at: Some(300), updated_at: 300, ..run.clone() };
    store.update_run(&finished).await.expect("update_run");
    assert_eq!(store.insert_run(&retry).await.expect("insert_run retry"), RunInsert::Existing(finished));

    // The same requestId in another session is another run.
    let other_session = session_in(&project, 2_000, false);
    store.insert_session(&other_session).await.expect("insert_session");
    let elsewhere = run_in(&other_session, "req-1", RunStatus::Running);
    assert_eq!(store.insert_run(&elsewhere).await.expect("insert_run"), RunInsert::Created);
    assert_eq!(store.find_run_by_request(&other_session.id, "req-1").await.expect("find"), Some(elsewhere));
    assert_eq!(store.get_run(&RunId::new()).await.expect("get absent"), None);
}

/// A prompt answered "accepted" is in the store with its run: the two are written in
/// one transaction, so neither can exist without the other.
pub async fn start_run_writes_the_run_and_its_prompt_together(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let run = run_in(&session, "req-start", RunStatus::Running);
    let prompt = prompt_of(&run, MessageId::new(), "read the README");
    assert_eq!(store.start_run(&run, &prompt).await.expect("start_run"), RunInsert::Created);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("list"), vec![prompt.clone()]);

    // A retry gets the first run back and writes neither a run nor a second prompt.
    let retry = Run { user_message_index: 1, ..run_in(&session, "req-start", RunStatus::Running) };
    let retry_prompt = prompt_of(&retry, MessageId::new(), "read the README");
    assert_eq!(store.start_run(&retry, &retry_prompt).await.expect("start_run retry"), RunInsert::Existing(run));
    assert_eq!(store.get_run(&retry.id).await.expect("get_run"), None);
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("list"), vec![prompt.clone()]);

    // A prompt that cannot be written takes its run with it: no run without its prompt.
    let clash = Run { user_message_index: 0, ..run_in(&session, "req-clash", RunStatus::Running) };
    let clash_prompt = prompt_of(&clash, MessageId::new(), "at a taken index");
    let error = store.start_run(&clash, &clash_prompt).await.expect_err("index 0 is taken");
    assert!(matches!(error, StoreError::Conflict(_)), "{error:?}");
    assert_eq!(store.get_run(&clash.id).await.expect("get_run"), None, "the run was rolled back");
    assert_eq!(store.find_run_by_request(&session.id, "req-clash").await.expect("find"), None);
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

pub async fn update_run_writes_the_mutable_fields(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let run = run_in(&session, "req-update", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");

    let interrupted = Run { status: RunStatus::Interrupted, updated_at: 150, first_token_at: Some(120), ..run.clone() };
    store.update_run(&interrupted).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(interrupted.clone()));

    let failed = Run {
        status: RunStatus::Failed,
        updated_at: 400,
        ended_at: Some(400),
        usage: Usage { input: 1_000, output: 2_000, ..Usage::default() },
        error: Some(RunError { code: "model_error".into(), message: "the model went away".into() }),
        ..interrupted
    };
    store.update_run(&failed).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(failed.clone()));

    // Clearing optional fields must clear them in storage too.
    let cleared = Run { error: None, first_token_at: None, ended_at: None, status: RunStatus::Running, ..failed };
    store.update_run(&cleared).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(cleared));
}

pub async fn fail_running_runs_touches_only_running_runs(store: &dyn Store) {
    let crash = RunError { code: "server_restarted".into(), message: "the server restarted during this run".into() };
    // fail_running_runs is global; settle whatever earlier checks (or an earlier pass
    // over the same database) left running, so the count below is exactly ours.
    store.fail_running_runs(&crash, 1, &[]).await.expect("fail_running_runs");

    let (_, session) = new_session(store).await;
    let (_, other_session) = new_session(store).await;
    let running = [run_in(&session, "r1", RunStatus::Running), run_in(&other_session, "r2", RunStatus::Running)];
    let untouched = [
        run_in(&session, "i", RunStatus::Interrupted),
        Run { ended_at: Some(200), ..run_in(&session, "c", RunStatus::Completed) },
        Run {
            ended_at: Some(200),
            error: Some(RunError { code: "earlier".into(), message: "an earlier failure".into() }),
            ..run_in(&session, "f", RunStatus::Failed)
        },
        Run { ended_at: Some(200), ..run_in(&session, "x", RunStatus::Cancelled) },
    ];
    // A run this node still runs, named in `keep`: the one argument the two databases
    // bind differently (an array on PostgreSQL, a JSON list on SQLite).
    let kept = run_in(&session, "k", RunStatus::Running);
    for run in running.iter().chain(&untouched).chain([&kept]) {
        assert_eq!(store.insert_run(run).await.expect("insert_run"), RunInsert::Created);
    }
    let keep = [kept.id.clone(), RunId::new()];

    assert_eq!(store.fail_running_runs(&crash, 5_000, &keep).await.expect("fail_running_runs"), 2);
    for run in &running {
        let expected = Run {
            status: RunStatus::Failed,
            error: Some(crash.clone()),
            updated_at: 5_000,
            ended_at: Some(5_000),
            ..run.clone()
        };
        assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(expected));
    }
    for run in untouched.iter().chain([&kept]) {
        assert_eq!(
            store.get_run(&run.id).await.expect("get_run").as_ref(),
            Some(run),
            "{:?} must not change",
            run.status
        );
    }
    assert_eq!(
        store.fail_running_runs(&crash, 6_000, &keep).await.expect("fail_running_runs"),
        0,
        "nothing left running but the kept run"
    );
    assert_eq!(store.fail_running_runs(&crash, 7_000, &[]).await.expect("fail_running_runs"), 1, "the kept run");
}

/// A draft is the message it began as plus the chunks appended to it; chunk 0 starts a
/// new one and replaces the session's previous draft; a chunk never extends another
/// message's draft; a chunk written again replaces itself (a retried write). Listed as
/// orphaned, rebuilt whole, only once its run is neither running nor interrupted;
/// deleted by `delete_draft` and with its session.
pub async fn drafts_are_appended_and_orphaned_once_their_run_settles(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let mut run = run_in(&session, "draft", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");
    let began = |content: Vec<Content>| Message::Assistant {
        content,
        stop_reason: None,
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 7,
    };
    let head = |id: &MessageId| Draft {
        session_id: session.id.clone(),
        run_id: run.id.clone(),
        owner_id: session.owner_id.clone(),
        message: IndexedMessage { id: id.clone(), index: 1, message: began(Vec::new()) },
    };
    let start = StreamDelta::TextStart { content_index: 0 };
    let text = |offset: usize, t: &str| StreamDelta::TextDelta { content_index: 0, offset, delta: t.into() };
    let ours = |all: Vec<Draft>| all.into_iter().filter(|d| d.session_id == session.id).collect::<Vec<_>>();

    let stale = MessageId::new();
    store.append_draft(&head(&stale), 0, &[start.clone(), text(0, "stale")]).await.expect("a first draft");
    let id = MessageId::new();
    assert!(
        store.append_draft(&head(&id), 1, &[text(0, "x")]).await.is_err(),
        "a chunk never extends another message's draft"
    );
    let written = store.append_draft(&head(&id), 0, &[start.clone(), text(0, "w1")]).await.expect("replaces");
    assert!(written > 0, "counts what it wrote");
    store.append_draft(&head(&id), 1, &[text(2, " w2")]).await.expect("appends");
    store.append_draft(&head(&id), 1, &[text(2, " w2")]).await.expect("a retried chunk replaces itself");
    store.append_draft(&head(&id), 2, &[text(5, " w3")]).await.expect("appends");
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty(), "its run is still running");

    run.status = RunStatus::Failed;
    store.update_run(&run).await.expect("update_run");
    let whole = Draft {
        message: IndexedMessage {
            message: began(vec![Content::Text { text: "w1 w2 w3".into() }]),
            ..head(&id).message
        },
        ..head(&id)
    };
    assert_eq!(ours(store.orphaned_drafts().await.expect("orphaned")), vec![whole], "rebuilt from its chunks");

    store.delete_draft(&session.id).await.expect("delete_draft");
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty());
    store.append_draft(&head(&id), 0, &[start]).await.expect("a draft again");
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty(), "gone with its session");
}

pub async fn interrupt_run_writes_the_approval_and_the_run_together(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), None);
    let (run, approval, checkpoint) = interrupted_run_in(store, &session, "req-interrupt", 200).await;

    assert_eq!(store.get_run(&run.id).await.expect("get_run").expect("stored").status, RunStatus::Interrupted);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()), "written as update_run would");
    assert_eq!(stored_approval(store, &approval.id).await, Some((approval.clone(), checkpoint)));
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), Some(run.clone()));
    assert_eq!(store.get_approval(&ApprovalId::new()).await.expect("get absent"), None);

    // Another session's interrupted run is not this one's; a running run is not interrupted.
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    store.insert_run(&run_in(&other, "req-running", RunStatus::Running)).await.expect("insert_run");
    assert_eq!(store.interrupted_run(&other.id).await.expect("interrupted_run"), None);

    // Start-up recovery fails running runs; an interrupted one waits for its person.
    let crash = RunError { code: "server_restarted".into(), message: "the server restarted during this run".into() };
    store.fail_running_runs(&crash, 9_000, &[]).await.expect("fail_running_runs");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()), "still interrupted");
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), Some(run));
    assert_eq!(stored_approval(store, &approval.id).await.expect("stored").0.status, ApprovalStatus::Pending);

    // All or nothing: when the run cannot be written (a token count no database
    // integer holds), the approval inserted before it in the transaction is gone too.
    let (_, lonely) = new_session(store).await;
    let running = run_in(&lonely, "req-atomic", RunStatus::Running);
    store.insert_run(&running).await.expect("insert_run");
    let unwritable = Run {
        status: RunStatus::Interrupted,
        usage: Usage { input: u64::MAX, output: 0, ..Usage::default() },
        ..running.clone()
    };
    let orphan = approval_for(&unwritable, 300);
    assert!(store.interrupt_run(&unwritable, &orphan, &json!({})).await.is_err());
    assert_eq!(stored_approval(store, &orphan.id).await, None, "the approval is rolled back with the run");
    assert_eq!(store.get_run(&running.id).await.expect("get_run"), Some(running.clone()));
    assert_eq!(store.interrupted_run(&lonely.id).await.expect("interrupted_run"), None);

    // And the other way: an approval that cannot be stored (its id is taken) leaves
    // the run as it was.
    let interrupted = Run { status: RunStatus::Interrupted, updated_at: 400, ..running.clone() };
    let taken = Approval { id: approval.id.clone(), ..approval_for(&interrupted, 400) };
    assert!(store.interrupt_run(&interrupted, &taken, &json!({})).await.is_err());
    assert_eq!(store.get_run(&running.id).await.expect("get_run"), Some(running));
    assert_eq!(store.pending_approvals(&lonely.id).await.expect("pending"), vec![]);
}

pub async fn pending_approvals_are_listed_oldest_first(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    let run = Run { status: RunStatus::Interrupted, ..run_in(&session, "req-pending", RunStatus::Running) };
    store.insert_run(&run).await.expect("insert_run");
    // One run can stop several times; written newest first, so order comes from created_at.
    let [late, early, middle] = [300, 100, 200].map(|at| approval_for(&run, at));
    for approval in [&late, &early, &middle] {
        store.interrupt_run(&run, approval, &checkpoint_for(approval)).await.expect("interrupt_run");
    }
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    let (_, elsewhere, _) = interrupted_run_in(store, &other, "req-elsewhere", 150).await;

    assert_eq!(
        store.pending_approvals(&session.id).await.expect("pending"),
        vec![early.clone(), middle.clone(), late.clone()]
    );
    assert_eq!(store.pending_approvals(&other.id).await.expect("pending"), vec![elsewhere.clone()]);
    assert_eq!(store.pending_approvals(&SessionId::new()).await.expect("pending"), vec![]);

    assert!(store.settle_approval(&middle.id, ApprovalStatus::Expired, None, None, None, 250).await.expect("settle"));
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![early.clone(), late.clone()]);

    // all_pending_approvals sees every session, including earlier checks' and passes',
    // so only our rows are compared exactly; the whole list must still be in order.
    let all = store.all_pending_approvals().await.expect("all_pending_approvals");
    let ours = [&early, &middle, &late, &elsewhere].map(|a| a.id.clone());
    let mine: Vec<Approval> = all.iter().filter(|a| ours.contains(&a.id)).cloned().collect();
    assert_eq!(mine, vec![early, elsewhere, late]);
    assert!(all.iter().all(|a| a.status == ApprovalStatus::Pending));
    assert!(
        all.windows(2).all(|w| (w[0].created_at, w[0].id.as_str()) <= (w[1].created_at, w[1].id.as_str())),
        "oldest first"
    );
}

pub async fn waiting_sessions_are_those_with_a_pending_approval(store: &dyn Store) {
    let (project, parked) = new_session(store).await;
    let idle = session_in(&project, 2_000, false);
    store.insert_session(&idle).await.expect("insert_session");
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![]);
    // Two pending approvals of one session list it once.
    let (run, first, _) = interrupted_run_in(store, &parked, "req-waiting", 100).await;
    let second = approval_for(&run, 200);
    store.interrupt_run(&run, &second, &checkpoint_for(&second)).await.expect("interrupt_run");
    let (_, elsewhere) = new_session(store).await;
    interrupted_run_in(store, &elsewhere, "req-waiting-elsewhere", 100).await;

    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![parked.id.clone()]);
    assert_eq!(store.waiting_sessions(&elsewhere.project_id).await.expect("waiting"), vec![elsewhere.id.clone()]);
    assert!(store.settle_approval(&first.id, ApprovalStatus::Expired, None, None, None, 250).await.expect("settle"));
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![parked.id.clone()], "one still waits");
    assert!(store.settle_approval(&second.id, ApprovalStatus::Cancelled, None, None, None, 260).await.expect("settle"));
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![]);
}

pub async fn settle_approval_decides_once(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (_, approval, checkpoint) = interrupted_run_in(store, &session, "req-settle", 200).await;
    let alice = new_user(store).await;
    let mallory = new_user(store).await;

    let fill = Decision::Fill(json!({"command": "rm -rf build/tmp", "why": "narrower"}));
    assert!(
        store
            .settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&fill), Some("only tmp"), Some(&alice), 500)
            .await
            .expect("settle")
    );
    let resolved = Approval {
        status: ApprovalStatus::Resolved,
        decision: Some(fill),
        message: Some("only tmp".into()),
        actor: Some(alice),
        resolved_at: Some(500),
        ..approval.clone()
    };
    assert_eq!(stored_approval(store, &approval.id).await, Some((resolved.clone(), checkpoint.clone())));

    // The loser of the race changes nothing, whatever it carried.
    assert!(
        !store
            .settle_approval(
                &approval.id,
                ApprovalStatus::Cancelled,
                Some(&Decision::Reject),
                Some("no"),
                Some(&mallory),
                600
            )
            .await
            .expect("settle again")
    );
    assert!(
        !store
            .settle_approval(&approval.id, ApprovalStatus::Expired, None, None, None, 700)
            .await
            .expect("expire after the decision")
    );
    assert_eq!(stored_approval(store, &approval.id).await, Some((resolved, checkpoint)));
    assert!(
        !store
            .settle_approval(&ApprovalId::new(), ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 800)
            .await
            .expect("settle absent")
    );

    // Every decision comes back as it went in, and expiry records no decision or actor.
    for (i, decision) in [Decision::Once, Decision::Always, Decision::Reject].into_iter().enumerate() {
        let (_, approval, _) = interrupted_run_in(store, &session, &format!("req-decision-{i}"), 300).await;
        assert!(
            store
                .settle_approval(
                    &approval.id,
                    ApprovalStatus::Resolved,
                    Some(&decision),
                    None,
                    Some(&session.owner_id),
                    400
                )
                .await
                .expect("settle")
        );
        let stored = stored_approval(store, &approval.id).await.expect("stored").0;
        assert_eq!((stored.decision, stored.message), (Some(decision), None));
    }
    let (_, expiring, _) = interrupted_run_in(store, &session, "req-expire", 300).await;
    assert!(store.settle_approval(&expiring.id, ApprovalStatus::Expired, None, None, None, 900).await.expect("expire"));
    let expected = Approval { status: ApprovalStatus::Expired, resolved_at: Some(900), ..expiring.clone() };
    assert_eq!(stored_approval(store, &expiring.id).await.expect("stored").0, expected);
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![]);
}

/// Re-check before acting: an approval whose call's file changed is replaced, in one
/// step, by a new pending one — only from the status the caller saw, and only while its
/// call has not started; the loser writes nothing, not even the new approval.
pub async fn supersede_replaces_an_approval_whose_call_has_not_started(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (run, old, _) = interrupted_run_in(store, &session, "req-supersede", 200).await;
    let alice = new_user(store).await;
    let replacement = Approval { tool_call_id: old.tool_call_id.clone(), ..approval_for(&run, 201) };
    let checkpoint = json!({"resource": {"path": "a.txt", "fingerprint": "sha256:00"}});
    let run = Run { updated_at: 201, ..run };
    let from_pending = Supersede { id: &old.id, from: ApprovalStatus::Pending, actor: Some(&alice), at: 201 };
    assert!(store.supersede_approval(&from_pending, &run, &replacement, &checkpoint).await.expect("supersede"));
    let superseded = Approval {
        status: ApprovalStatus::Superseded,
        actor: Some(alice.clone()),
        resolved_at: Some(201),
        ..old.clone()
    };
    assert_eq!(stored_approval(store, &old.id).await.expect("old").0, superseded);
    assert_eq!(stored_approval(store, &replacement.id).await, Some((replacement.clone(), checkpoint.clone())));
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![replacement.clone()]);
    assert_eq!(store.get_run(&run.id).await.expect("run"), Some(run.clone()));

    // Twice, or from a status it no longer has: nothing is written.
    let another = approval_for(&run, 202);
    assert!(!store.supersede_approval(&from_pending, &run, &another, &checkpoint).await.expect("again"));
    assert_eq!(stored_approval(store, &another.id).await, None);

    // A decided call (a crash kept it from starting) may be superseded; a started one never.
    assert!(
        store
            .settle_approval(&replacement.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 203)
            .await
            .expect("decide")
    );
    store.mark_call_started(&replacement.id, 204).await.expect("started");
    let from_resolved = Supersede { id: &replacement.id, from: ApprovalStatus::Resolved, actor: None, at: 205 };
    assert!(!store.supersede_approval(&from_resolved, &run, &another, &checkpoint).await.expect("started"));
    assert_eq!(stored_approval(store, &replacement.id).await.expect("kept").0.status, ApprovalStatus::Resolved);
    assert_eq!(stored_approval(store, &another.id).await, None);
    let (run, decided, _) = interrupted_run_in(store, &session, "req-supersede-decided", 300).await;
    assert!(
        store
            .settle_approval(&decided.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 301)
            .await
            .expect("decide")
    );
    let from_resolved = Supersede { id: &decided.id, from: ApprovalStatus::Resolved, actor: None, at: 302 };
    let asked_again = approval_for(&run, 302);
    assert!(store.supersede_approval(&from_resolved, &run, &asked_again, &checkpoint).await.expect("supersede"));
    let stored = stored_approval(store, &decided.id).await.expect("old").0;
    assert_eq!((stored.status, stored.decision), (ApprovalStatus::Superseded, Some(Decision::Once)));
}

/// Many deciders at once (two tabs, a retry, the expiry timer): exactly one wins and
/// the stored outcome is the winner's.
pub async fn concurrent_settles_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let (_, session) = new_session(store.as_ref()).await;
    let (_, approval, _) = interrupted_run_in(store.as_ref(), &session, "req-race", 200).await;

    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            let id = approval.id.clone();
            tokio::spawn(async move {
                let actor = UserId::new();
                let decision = if i % 2 == 0 { Decision::Once } else { Decision::Reject };
                let message = format!("racer {i}");
                let won = store
                    .settle_approval(
                        &id,
                        ApprovalStatus::Resolved,
                        Some(&decision),
                        Some(&message),
                        Some(&actor),
                        1_000 + i as Millis,
                    )
                    .await
                    .expect("settle_approval");
                (won, decision, message, actor, 1_000 + i as Millis)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let outcome = task.await.expect("task");
        if outcome.0 {
            winners.push(outcome);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one settle wins");
    let (_, decision, message, actor, at) = winners.remove(0);
    let stored = stored_approval(store.as_ref(), &approval.id).await.expect("stored").0;
    assert_eq!(
        (stored.status, stored.decision, stored.message, stored.actor, stored.resolved_at),
        (ApprovalStatus::Resolved, Some(decision), Some(message), Some(actor), Some(at)),
        "the stored outcome is the winner's"
    );
}

pub async fn idempotency_keys_replay_the_first_response(store: &dyn Store) {
    let scope = unique_name("user");
    let claim = |scope: &str, key: &str| {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        async move { store.claim_idempotency(&scope, &key, 1_000).await.expect("claim_idempotency") }
    };

    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::Claimed);
    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::InProgress, "the first request is still working");
    // Keys are per scope: the same key under another scope is free.
    assert_eq!(claim(&unique_name("user"), "k1").await, IdempotencyClaim::Claimed);

    // A body that a lossy store would mangle: escapes, CRLF, tabs, non-ASCII,
    // trailing whitespace, and enough of it to leave any inline limit behind.
    let body = format!("{{\"title\":\"\\\"ünï\\\" 🦀\"}}\r\n\t  {}  \n", "x".repeat(100_000));
    store.complete_idempotency(&scope, "k1", &body).await.expect("complete_idempotency");
    match claim(&scope, "k1").await {
        IdempotencyClaim::Done(stored) => assert_eq!(stored.as_bytes(), body.as_bytes(), "byte for byte"),
        other => panic!("a completed key replays its response, got {other:?}"),
    }

    // The response is written once; a second completion and a late release change nothing.
    assert!(matches!(store.complete_idempotency(&scope, "k1", "different").await, Err(StoreError::Conflict(_))));
    store.release_idempotency(&scope, "k1").await.expect("release_idempotency");
    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::Done(body.clone()));

    // A failed request releases its claim and the retry runs it again.
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::Claimed);
    store.release_idempotency(&scope, "k2").await.expect("release_idempotency");
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::Claimed, "released keys can be claimed again");
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::InProgress);
    // Releasing or completing a key nobody claimed writes nothing.
    store.release_idempotency(&scope, "never").await.expect("release unclaimed");
    assert!(matches!(store.complete_idempotency(&scope, "never", "different").await, Err(StoreError::Conflict(_))));
    assert_eq!(claim(&scope, "never").await, IdempotencyClaim::Claimed);
}

/// A client retrying a request over a flaky network: one retry does the work, every
/// other one sees it in progress, and after completion every one sees its response.
pub async fn concurrent_claims_of_one_key_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let scope = unique_name("user");
    let race = || async {
        let tasks: Vec<_> = (0..racers)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let scope = scope.clone();
                tokio::spawn(async move { store.claim_idempotency(&scope, "retry", 1_000).await.expect("claim") })
            })
            .collect();
        let mut claims = Vec::new();
        for task in tasks {
            claims.push(task.await.expect("task"));
        }
        claims
    };

    let claims = race().await;
    assert_eq!(claims.iter().filter(|c| **c == IdempotencyClaim::Claimed).count(), 1, "exactly one claim: {claims:?}");
    assert_eq!(claims.iter().filter(|c| **c == IdempotencyClaim::InProgress).count(), racers - 1);

    let answer = "{\"ok\":true}";
    store.complete_idempotency(&scope, "retry", answer).await.expect("complete_idempotency");
    let claims = race().await;
    assert!(claims.iter().all(|c| *c == IdempotencyClaim::Done(answer.into())), "{claims:?}");
}

pub async fn deleting_a_session_removes_its_messages_runs_and_approvals(store: &dyn Store) {
    let (project, doomed) = new_session(store).await;
    let kept = session_in(&project, 2_000, false);
    store.insert_session(&kept).await.expect("insert_session");
    append_all(store, &doomed, vec![user("bye"), assistant("bye")]).await;
    let kept_messages = append_all(store, &kept, vec![user("hi")]).await;
    let doomed_run = run_in(&doomed, "req", RunStatus::Completed);
    let kept_run = run_in(&kept, "req", RunStatus::Completed);
    store.insert_run(&doomed_run).await.expect("insert_run");
    store.insert_run(&kept_run).await.expect("insert_run");
    let (doomed_interrupted, doomed_approval, _) = interrupted_run_in(store, &doomed, "req-ask", 200).await;
    let (_, kept_approval, kept_checkpoint) = interrupted_run_in(store, &kept, "req-ask", 200).await;

    assert!(store.delete_session(&doomed.id).await.expect("delete_session"));
    assert_eq!(store.get_session(&doomed.id).await.expect("get"), None);
    assert_eq!(store.count_messages(&doomed.id).await.expect("count"), 0);
    assert_eq!(all_messages(store, &doomed).await, vec![]);
    assert_eq!(store.get_run(&doomed_run.id).await.expect("get_run"), None);
    assert_eq!(store.get_run(&doomed_interrupted.id).await.expect("get_run"), None);
    assert_eq!(stored_approval(store, &doomed_approval.id).await, None);
    assert_eq!(store.pending_approvals(&doomed.id).await.expect("pending"), vec![]);
    let all_pending = store.all_pending_approvals().await.expect("all_pending_approvals");
    assert!(all_pending.iter().all(|a| a.id != doomed_approval.id), "no pending approval outlives its session");
    assert!(!store.delete_session(&doomed.id).await.expect("delete again"), "a second delete finds nothing");

    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![kept.clone()]);
    assert_eq!(all_messages(store, &kept).await, kept_messages);
    assert_eq!(store.get_run(&kept_run.id).await.expect("get_run"), Some(kept_run));
    assert_eq!(stored_approval(store, &kept_approval.id).await, Some((kept_approval.clone(), kept_checkpoint)));
    assert_eq!(store.pending_approvals(&kept.id).await.expect("pending"), vec![kept_approval]);

    // The index and requestId of a deleted session are free again if the id comes back.
    store.insert_session(&doomed).await.expect("reinsert session");
    store.insert_message(&doomed.id, &doomed.owner_id, &indexed(0, user("again"))).await.expect("index 0 is free");
}

pub async fn deleting_a_project_removes_everything_under_it(store: &dyn Store) {
    let (project, first) = new_session(store).await;
    let second = session_in(&project, 2_000, true);
    store.insert_session(&second).await.expect("insert_session");
    append_all(store, &first, vec![user("a"), assistant("b")]).await;
    append_all(store, &second, vec![user("c")]).await;
    let run = run_in(&second, "req", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");
    let (_, approval, _) = interrupted_run_in(store, &first, "req-ask", 200).await;
    let sibling = project_for(&project.owner_id, 2_000);
    store.insert_project(&sibling).await.expect("insert sibling");
    let (_, unrelated) = new_session(store).await;
    let unrelated_messages = append_all(store, &unrelated, vec![user("safe")]).await;

    assert!(store.delete_project(&project.id).await.expect("delete_project"));
    assert_eq!(store.get_project(&project.id).await.expect("get"), None);
    assert_eq!(store.list_projects(&project.owner_id).await.expect("list"), vec![sibling]);
    for session in [&first, &second] {
        assert_eq!(store.get_session(&session.id).await.expect("get_session"), None);
        assert_eq!(store.count_messages(&session.id).await.expect("count"), 0);
    }
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list"), vec![]);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), None);
    assert_eq!(stored_approval(store, &approval.id).await, None);
    assert!(!store.delete_project(&project.id).await.expect("delete again"));

    assert_eq!(all_messages(store, &unrelated).await, unrelated_messages, "other projects are untouched");
}

async fn session_memory_is_replaced_whole_and_deleted_with_the_session(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.get_memory(&session.id).await.expect("get"), SessionMemory::default());
    let memory = SessionMemory {
        facts: vec![Fact { text: "README.md has 3 lines".into(), source: FactSource::Tool, at: 5 }],
        summary: Some("the user asked about the readme".into()),
        summarized_before: 4,
    };
    store.put_memory(&session.id, &session.owner_id, &memory).await.expect("put");
    assert_eq!(store.get_memory(&session.id).await.expect("get"), memory);
    let replaced = SessionMemory { facts: vec![], summary: None, summarized_before: 9 };
    store.put_memory(&session.id, &session.owner_id, &replaced).await.expect("put again");
    assert_eq!(store.get_memory(&session.id).await.expect("get"), replaced);
    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert_eq!(store.get_memory(&session.id).await.expect("get"), SessionMemory::default());
}

async fn todo_lists_are_replaced_whole_and_deleted_with_the_session(store: &dyn Store) {
    use spool_protocol::hub::{Todo, TodoPriority, TodoStatus};
    let (_, session) = new_session(store).await;
    let (_, other) = new_session(store).await;
    assert_eq!(store.get_todos(&session.id).await.expect("get"), vec![], "no list until the agent writes one");
    let todo = |id: &str, content: &str, status, priority| Todo {
        content: content.into(),
        status,
        active_form: None,
        priority,
        id: Some(id.into()),
    };
    let first = vec![
        todo("1", "Read the code ✓ — ünïcode", TodoStatus::Completed, Some(TodoPriority::High)),
        todo("2", "Write the tool", TodoStatus::InProgress, None),
        todo("3", "Drop it", TodoStatus::Cancelled, Some(TodoPriority::Low)),
    ];
    store.put_todos(&session.id, &session.owner_id, &first).await.expect("put");
    store.put_todos(&other.id, &other.owner_id, &first[..1]).await.expect("put other");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), first, "order and every field kept");
    let replaced = vec![todo("2", "Write the tool", TodoStatus::Completed, None)];
    store.put_todos(&session.id, &session.owner_id, &replaced).await.expect("put again");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), replaced, "replaced whole");
    store.put_todos(&session.id, &session.owner_id, &[]).await.expect("clear");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), vec![]);
    assert_eq!(store.get_todos(&other.id).await.expect("get other"), first[..1].to_vec(), "per session");
    assert!(store.delete_session(&other.id).await.expect("delete"));
    assert_eq!(store.get_todos(&other.id).await.expect("get"), vec![], "deleted with its session");
}

pub async fn tokens_are_found_by_hash_until_revoked(store: &dyn Store) {
    let name = unique_name("tok");
    let user = store.ensure_user(&name).await.expect("user");
    let hash = format!("{:064x}", u128::from_str_radix(&UserId::new().as_str()[4..20], 36).unwrap_or(7));
    let token = ApiToken {
        id: TokenId::new(),
        user_id: user.clone(),
        user_name: name.clone(),
        hash: hash.clone(),
        created_at: 10,
        revoked_at: None,
    };
    store.insert_token(&token).await.expect("insert");
    assert_eq!(store.find_token(&hash).await.expect("find"), Some(token.clone()));
    assert_eq!(store.find_token(&"0".repeat(64)).await.expect("find"), None);
    assert!(store.list_tokens().await.expect("list").contains(&token));
    assert!(store.revoke_token(&token.id, 20).await.expect("revoke"));
    assert!(!store.revoke_token(&token.id, 30).await.expect("revoke twice"), "revoking twice changes nothing");
    assert_eq!(store.find_token(&hash).await.expect("find"), None, "a revoked token authenticates nobody");
    let listed = store.list_tokens().await.expect("list");
    assert_eq!(listed.iter().find(|t| t.id == token.id).and_then(|t| t.revoked_at), Some(20));
}

/// A 64-hex-digit hash no other check uses.
fn unique_hash() -> String {
    use std::fmt::Write;
    UserId::new().as_str().bytes().chain(UserId::new().as_str().bytes()).take(32).fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

pub async fn login_sessions_end_by_logout_expiry_and_revocation(store: &dyn Store) {
    let name = unique_name("login");
    let user = store.ensure_user(&name).await.expect("user");
    let token = ApiToken {
        id: TokenId::new(),
        user_id: user.clone(),
        user_name: name,
        hash: unique_hash(),
        created_at: 1_000,
        revoked_at: None,
    };
    store.insert_token(&token).await.expect("token");
    let login = |expires_at| LoginSession {
        id: LoginId::new(),
        token_id: token.id.clone(),
        user_id: user.clone(),
        hash: unique_hash(),
        created_at: 1_000,
        expires_at,
        ended_at: None,
    };
    let (kept, ended, expiring) = (login(9_000), login(9_000), login(3_000));
    for l in [&kept, &ended, &expiring] {
        store.insert_login(l).await.expect("insert login");
    }
    assert_eq!(store.find_login(&kept.hash, 2_000).await.expect("find"), Some(kept.clone()));
    assert_eq!(store.find_login(&expiring.hash, 3_000).await.expect("find"), None, "expired at 3000");
    assert!(store.end_login(&ended.id, 2_500).await.expect("end"));
    assert!(!store.end_login(&ended.id, 2_600).await.expect("end twice"), "ending twice changes nothing");
    assert_eq!(store.find_login(&ended.hash, 2_700).await.expect("find"), None, "logged out");
    let since = store.credentials_ended_since(2_000, 3_500).await.expect("ended since");
    assert!(since.contains(&ended.id.to_string()) && since.contains(&expiring.id.to_string()), "{since:?}");
    assert!(!since.contains(&kept.id.to_string()), "{since:?}");
    let later = store.credentials_ended_since(3_000, 3_500).await.expect("ended since");
    assert!(!later.contains(&ended.id.to_string()) && !later.contains(&expiring.id.to_string()), "{later:?}");

    assert!(store.revoke_token(&token.id, 4_000).await.expect("revoke"));
    assert_eq!(store.find_login(&kept.hash, 4_001).await.expect("find"), None, "a revoked token's logins end");
    let since = store.credentials_ended_since(3_999, 4_001).await.expect("ended since");
    assert!(since.contains(&token.id.to_string()), "{since:?}");
}

pub async fn the_auth_flag_and_listeners_are_kept(store: &dyn Store) {
    store.set_auth_enabled(true, 10).await.expect("on");
    assert!(store.auth_enabled().await.expect("read"));
    store.set_auth_enabled(false, 20).await.expect("off");
    assert!(!store.auth_enabled().await.expect("read"));
    let node = unique_name("node");
    let listener = Listener { node_id: node.clone(), addr: "0.0.0.0:4747".into(), public: true, updated_at: 10 };
    store.record_listener(&listener).await.expect("record");
    let moved = Listener { addr: "127.0.0.1:4747".into(), public: false, updated_at: 20, ..listener };
    store.record_listener(&moved).await.expect("refresh");
    let found: Vec<Listener> =
        store.listeners().await.expect("list").into_iter().filter(|l| l.node_id == node).collect();
    assert_eq!(found, vec![moved]);
    store.remove_listener(&node).await.expect("remove");
    assert!(store.listeners().await.expect("list").iter().all(|l| l.node_id != node));
}

pub async fn runs_since_lists_a_sessions_runs_from_an_index_in_order(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    for (request, index) in [("c", 4u64), ("a", 0), ("b", 2)] {
        let run = Run { user_message_index: index, ..run_in(&session, request, RunStatus::Completed) };
        assert_eq!(store.insert_run(&run).await.expect("insert"), RunInsert::Created);
    }
    let since: Vec<u64> =
        store.runs_since(&session.id, 2).await.expect("runs").iter().map(|r| r.user_message_index).collect();
    assert_eq!(since, [2, 4]);
    assert_eq!(store.runs_since(&session.id, 5).await.expect("runs"), vec![]);
}

/// The lease's life: taken when free, refused while another node holds it, extended by
/// its holder, lost on expiry (renewal then fails: the holder must stop), taken over
/// once expired, released only by its holder, and gone with its session.
pub async fn leases_are_taken_renewed_and_released(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);

    assert!(store.acquire_lease(&session.id, "node-a", 1_000, 500).await.expect("acquire free"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 1_500));
    assert!(!store.acquire_lease(&session.id, "node-b", 1_100, 500).await.expect("acquire held"));
    assert_eq!(
        store.get_lease(&session.id).await.expect("get_lease"),
        lease_of(&session, "node-a", 1_500),
        "the loser wrote nothing"
    );
    assert!(store.acquire_lease(&session.id, "node-a", 1_200, 500).await.expect("acquire ours again"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 1_700));

    assert!(store.renew_lease(&session.id, "node-a", 1_600, 500).await.expect("renew"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 2_100));
    assert!(!store.renew_lease(&session.id, "node-b", 1_700, 500).await.expect("renew someone else's"));
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release someone else's"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 2_100));

    // node-a stops renewing: at its expiry the lease is listed as expired, its own late
    // renewal fails, and another node takes it over.
    let session_id = &session.id;
    let expired_at = |now: Millis| async move {
        let all = store.expired_leases(now).await.expect("expired_leases");
        assert!(all.windows(2).all(|w| w[0].expires_at <= w[1].expires_at), "oldest expiry first");
        all.into_iter().filter(|l| l.session_id == *session_id).collect::<Vec<_>>()
    };
    assert_eq!(expired_at(2_099).await, vec![], "live until its expiry");
    assert_eq!(expired_at(2_100).await, lease_of(&session, "node-a", 2_100).into_iter().collect::<Vec<_>>());
    assert!(!store.renew_lease(&session.id, "node-a", 2_100, 500).await.expect("renew expired"));
    assert!(store.acquire_lease(&session.id, "node-b", 2_200, 500).await.expect("take over"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-b", 2_700));
    assert_eq!(expired_at(2_200).await, vec![]);
    assert!(!store.acquire_lease(&session.id, "node-a", 2_300, 500).await.expect("the old holder is refused"));

    assert!(store.release_lease(&session.id, "node-b").await.expect("release"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release twice"));
    assert!(store.acquire_lease(&session.id, "node-a", 2_400, 500).await.expect("acquire released"));

    // Leases are per session, and go with their session.
    let (_, other) = new_session(store).await;
    assert!(store.acquire_lease(&other.id, "node-b", 2_400, 500).await.expect("acquire another session"));
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert_eq!(store.get_lease(&other.id).await.expect("get_lease"), lease_of(&other, "node-b", 2_900));
    // A lease for a session that does not exist is refused, not stored.
    assert!(store.acquire_lease(&SessionId::new(), "node-a", 2_400, 500).await.is_err());
}

fn lease_of(session: &Session, node: &str, expires_at: Millis) -> Option<Lease> {
    Some(Lease { session_id: session.id.clone(), node_id: node.into(), expires_at })
}

/// Several nodes wanting one session at once (a prompt reaching each): exactly one
/// takes it, and the stored lease names that one; after it expires the race repeats
/// with one new winner.
pub async fn concurrent_lease_acquisitions_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let (_, session) = new_session(stores[0].as_ref()).await;
    let race = |now: Millis| {
        let tasks: Vec<_> = (0..racers)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let id = session.id.clone();
                tokio::spawn(async move {
                    let node = format!("node-{i}");
                    let won = store.acquire_lease(&id, &node, now, 1_000).await.expect("acquire_lease");
                    (won, node)
                })
            })
            .collect::<Vec<_>>();
        async move {
            let mut winners = Vec::new();
            for task in tasks {
                let (won, node) = task.await.expect("task");
                if won {
                    winners.push(node);
                }
            }
            winners
        }
    };
    for now in [10_000, 11_000] {
        let winners = race(now).await;
        assert_eq!(winners.len(), 1, "exactly one node takes the lease at {now}: {winners:?}");
        assert_eq!(
            stores[0].get_lease(&session.id).await.expect("get_lease"),
            lease_of(&session, &winners[0], now + 1_000),
            "the stored lease is the winner's"
        );
    }
}

// ---- queued prompts -------------------------------------------------------------

pub fn queued_in(session: &Session, request_id: &str, text: &str, created_at: Millis) -> QueuedPrompt {
    QueuedPrompt {
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        message: frame::QueuedMessage {
            id: MessageId::new(),
            request_id: request_id.into(),
            text: text.into(),
            created_at,
        },
        approval_policy: None,
        on_disconnect: OnDisconnect::Continue,
    }
}

async fn queue_texts(store: &dyn Store, session: &Session) -> Vec<String> {
    let queued = store.queued_prompts(&session.id).await.expect("queued_prompts");
    queued.into_iter().map(|q| q.message.text).collect()
}

pub async fn queued_prompts_are_bounded_per_owner_by_count_and_bytes(store: &dyn Store) {
    let (project, first) = new_session(store).await;
    let second = session_in(&project, 2_000, false);
    store.insert_session(&second).await.expect("insert_session");
    let (_, strangers) = new_session(store).await;
    // "ü" is two bytes: the byte limit counts bytes, not characters.
    let limits = QueueLimits { per_session: 10, per_owner: 3, per_owner_bytes: 10 };
    let queue = |q: QueuedPrompt| async move { store.queue_prompt(&q, limits).await.expect("queue") };
    assert_eq!(queue(queued_in(&first, "a", "üüü", 1)).await, QueueInsert::Queued);
    assert_eq!(queue(queued_in(&second, "b", "xxxx", 1)).await, QueueInsert::Queued);
    // 6 + 4 bytes queued: one more byte in any of the owner's sessions is too many.
    assert_eq!(queue(queued_in(&second, "c", "y", 1)).await, QueueInsert::OwnerFull);
    assert_eq!(queue(queued_in(&strangers, "c", "other", 1)).await, QueueInsert::Queued);
    assert_eq!(
        queue(queued_in(&first, "a", "retry", 1)).await,
        QueueInsert::Existing(store.queued_prompts(&first.id).await.expect("q")[0].clone())
    );
    let roomy = QueueLimits { per_owner_bytes: 1_000, ..limits };
    assert_eq!(store.queue_prompt(&queued_in(&first, "d", "z", 1), roomy).await.expect("q"), QueueInsert::Queued);
    // Three queued: the count limit, across sessions.
    assert_eq!(store.queue_prompt(&queued_in(&second, "e", "z", 1), roomy).await.expect("q"), QueueInsert::OwnerFull);
    assert_eq!(queue_texts(store, &second).await, ["xxxx"], "nothing written when refused");
    // A full session is still `Full`, whatever the owner has.
    let tight = QueueLimits { per_session: 2, ..roomy };
    assert_eq!(store.queue_prompt(&queued_in(&first, "f", "z", 1), tight).await.expect("q"), QueueInsert::Full);
}

pub async fn sessions_are_counted_per_owner_and_projects_listed_for_all(store: &dyn Store) {
    let (project, _) = new_session(store).await;
    let other_project = project_for(&project.owner_id, 2_000);
    store.insert_project(&other_project).await.expect("insert_project");
    for archived in [false, true, true] {
        store.insert_session(&session_in(&other_project, 3_000, archived)).await.expect("insert_session");
    }
    let (strangers, _) = new_session(store).await;
    assert_eq!(store.count_sessions(&project.owner_id, false).await.expect("count"), 2, "in every project");
    assert_eq!(store.count_sessions(&project.owner_id, true).await.expect("count"), 2);
    assert_eq!(store.count_sessions(&strangers.owner_id, false).await.expect("count"), 1);
    let all: Vec<ProjectId> = store.all_projects().await.expect("all").into_iter().map(|p| p.id).collect();
    for id in [&project.id, &other_project.id, &strangers.id] {
        assert!(all.contains(id), "{id} in {all:?}");
    }

    // Overlap is by whole path components: `x_` is not inside `x`, and `%`/`_` are
    // plain characters.
    let base = format!("/srv/{}", ProjectId::new());
    let at = |path: String, owner: &UserId| Project { path, ..project_for(owner, 5_000) };
    let (x, inside, holder, beside, wild) = (
        at(format!("{base}/x"), &project.owner_id),
        at(format!("{base}/x/y"), &strangers.owner_id),
        at(base.clone(), &strangers.owner_id),
        at(format!("{base}/x_"), &strangers.owner_id),
        at(format!("{base}/%"), &strangers.owner_id),
    );
    for p in [&x, &inside, &holder, &beside, &wild] {
        store.insert_project(p).await.expect("insert_project");
    }
    let ids = |found: Vec<Project>| found.into_iter().map(|p| p.id).collect::<Vec<_>>();
    let found = ids(store.projects_overlapping(&x.path).await.expect("overlapping"));
    assert_eq!(found.len(), 3, "{found:?}");
    for p in [&x, &inside, &holder] {
        assert!(found.contains(&p.id), "{} in {found:?}", p.path);
    }
    assert_eq!(ids(store.projects_overlapping(&format!("{base}/y")).await.expect("overlapping")), vec![holder.id]);
}

/// Stop pauses a queue (issue 36): a paused session is not among the queues start-up
/// and the reaper start, its prompts stay, and resuming brings it back.
pub async fn a_paused_queue_is_left_out_until_resumed(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    store.queue_prompt(&queued_in(&session, "req-p", "waits", 1), QueueLimits::session(3)).await.expect("queue");
    assert!(!store.queue_paused(&session.id).await.expect("paused"));
    store.pause_queue(&session.id, 10).await.expect("pause");
    store.pause_queue(&session.id, 20).await.expect("pausing twice is no error");
    assert!(store.queue_paused(&session.id).await.expect("paused"));
    assert!(!store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
    assert_eq!(queue_texts(store, &session).await, ["waits"], "the prompts stay");
    assert!(store.resume_queue(&session.id).await.expect("resume"));
    assert!(!store.resume_queue(&session.id).await.expect("resume"), "not paused any more");
    assert!(!store.queue_paused(&session.id).await.expect("paused"));
    assert!(store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
}

pub async fn queued_prompts_wait_in_order_within_their_limit(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    // All in one millisecond: the order is the order they were queued in.
    let first = QueuedPrompt {
        approval_policy: Some(ApprovalPolicy::Deny),
        on_disconnect: OnDisconnect::Cancel,
        ..queued_in(&session, "req-a", "first ünï 🦀", 500)
    };
    assert_eq!(store.queue_prompt(&first, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);
    let second = queued_in(&session, "req-b", "second", 500);
    assert_eq!(store.queue_prompt(&second, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![first.clone(), second.clone()]);
    assert_eq!(store.get_queued(&first.message.id).await.expect("get"), Some(first.clone()));

    // A retry (same request id, fresh message id) gets the first message back.
    let retry = queued_in(&session, "req-a", "first again", 600);
    assert_eq!(
        store.queue_prompt(&retry, QueueLimits::session(3)).await.expect("retry"),
        QueueInsert::Existing(first.clone())
    );
    assert_eq!(store.get_queued(&retry.message.id).await.expect("get"), None, "the retry is not stored");

    // The limit counts this session only; past it nothing is written.
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    assert_eq!(
        store.queue_prompt(&queued_in(&other, "req-a", "elsewhere", 1), QueueLimits::session(1)).await.expect("queue"),
        QueueInsert::Queued
    );
    assert_eq!(
        store.queue_prompt(&queued_in(&session, "req-c", "third", 700), QueueLimits::session(3)).await.expect("queue"),
        QueueInsert::Queued
    );
    let fourth = queued_in(&session, "req-d", "fourth", 800);
    assert_eq!(store.queue_prompt(&fourth, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Full);
    assert_eq!(queue_texts(store, &session).await, ["first ünï 🦀", "second", "third"]);
    assert_eq!(
        store.queue_prompt(&queued_in(&session, "req-a", "x", 1), QueueLimits::session(3)).await.expect("q"),
        QueueInsert::Existing(first.clone()),
        "a full queue still finds a retry"
    );

    let waiting = store.queued_sessions(u32::MAX).await.expect("queued_sessions");
    assert!(waiting.contains(&session.id) && waiting.contains(&other.id), "{waiting:?}");

    // Removing is once; what stays keeps its order.
    assert!(store.delete_queued(&second.message.id).await.expect("delete"));
    assert!(!store.delete_queued(&second.message.id).await.expect("delete again"));
    assert!(!store.delete_queued(&MessageId::new()).await.expect("delete unknown"));
    assert_eq!(queue_texts(store, &session).await, ["first ünï 🦀", "third"]);

    // A queue goes with its session.
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![]);
    assert_eq!(store.get_queued(&first.message.id).await.expect("get"), None);
    assert!(!store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
    assert!(store.delete_session(&other.id).await.expect("delete_session"));
}

pub async fn taking_a_queued_prompt_inserts_its_run_once(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let next = queued_in(&session, "req-next", "next", 100);
    let later = queued_in(&session, "req-later", "later", 100);
    for q in [&next, &later] {
        assert_eq!(store.queue_prompt(q, QueueLimits::session(32)).await.expect("queue"), QueueInsert::Queued);
    }
    let run = run_in(&session, "req-next", RunStatus::Running);
    let prompt = prompt_of(&run, next.message.id.clone(), "next");
    assert_eq!(store.take_queued(&next.message.id, &run, &prompt).await.expect("take"), Some(RunInsert::Created));
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(queue_texts(store, &session).await, ["later"]);
    // The queued text became the run's user message, under the queued message's id.
    let history = store.list_messages(&session.id, None, 10).await.expect("list_messages");
    assert_eq!(history, vec![prompt.clone()], "the prompt is stored with its run");
    // Taken is taken: a second taker writes nothing.
    let again = run_in(&session, "req-next", RunStatus::Running);
    let again_prompt = prompt_of(&again, next.message.id.clone(), "next");
    assert_eq!(store.take_queued(&next.message.id, &again, &again_prompt).await.expect("take again"), None);
    assert_eq!(store.get_run(&again.id).await.expect("get_run"), None);
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "no second prompt");

    // A prompt whose request id already has a run leaves the queue and starts nothing.
    let ran = run_in(&session, "req-later", RunStatus::Completed);
    store.insert_run(&ran).await.expect("insert_run");
    let late = run_in(&session, "req-later", RunStatus::Running);
    let late_prompt = prompt_of(&late, later.message.id.clone(), "later");
    assert_eq!(
        store.take_queued(&later.message.id, &late, &late_prompt).await.expect("take"),
        Some(RunInsert::Existing(ran))
    );
    assert_eq!(store.get_run(&late.id).await.expect("get_run"), None);
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "nothing started, nothing written");
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![]);
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

pub async fn concurrent_takes_of_one_queued_prompt_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let (_, session) = new_session(store.as_ref()).await;
    let queued = queued_in(&session, "req-race", "once", 100);
    assert_eq!(store.queue_prompt(&queued, QueueLimits::session(32)).await.expect("queue"), QueueInsert::Queued);
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            let (id, run) = (queued.message.id.clone(), run_in(&session, "req-race", RunStatus::Running));
            let prompt = prompt_of(&run, id.clone(), "once");
            tokio::spawn(async move { (run.id.clone(), store.take_queued(&id, &run, &prompt).await.expect("take")) })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        if let (run, Some(taken)) = task.await.expect("task") {
            assert_eq!(taken, RunInsert::Created);
            winners.push(run);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one taker starts the prompt");
    assert_eq!(store.runs_since(&session.id, 0).await.expect("runs").len(), 1, "one run in the store");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "one prompt in the store");
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}
