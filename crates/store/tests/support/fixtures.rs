//! What the checks build on: fresh users, projects, sessions, messages, runs and
//! approvals, each with new ids so that no two checks (and no two passes over one
//! database) see each other's rows.

use serde_json::json;
use spool_engine::Store;
use spool_protocol::time::Millis;
use spool_protocol::*;

/// A time limit no search in these checks comes near.
pub const A_WHILE: std::time::Duration = std::time::Duration::from_secs(60);

/// A name no other check (or earlier pass over the same database) has used.
pub(super) fn unique_name(prefix: &str) -> String {
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

pub(super) fn user(text: &str) -> Message {
    Message::user_text(text, 10)
}

pub(super) fn assistant(text: &str) -> Message {
    Message::Assistant {
        content: vec![Content::Text { text: text.into() }],
        stop_reason: Some(StopReason::Stop),
        usage: Usage { input: 1, output: 2, ..Usage::default() },
        model: "scripted".into(),
        error_message: None,
        timestamp: 11,
    }
}

pub(super) fn tool_result(text: &str) -> Message {
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
pub(super) async fn append_all(store: &dyn Store, session: &Session, messages: Vec<Message>) -> Vec<IndexedMessage> {
    let mut stored = Vec::new();
    for (i, message) in messages.into_iter().enumerate() {
        let m = indexed(i as u64, message);
        store.insert_message(&session.id, &session.owner_id, &m).await.expect("insert_message");
        stored.push(m);
    }
    stored
}

pub(super) async fn all_messages(store: &dyn Store, session: &Session) -> Vec<IndexedMessage> {
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

pub(super) fn indices(messages: &[IndexedMessage]) -> Vec<u64> {
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
pub(super) fn checkpoint_for(approval: &Approval) -> serde_json::Value {
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

pub(super) async fn stored_approval(store: &dyn Store, id: &ApprovalId) -> Option<(Approval, serde_json::Value)> {
    store.get_approval(id).await.expect("get_approval")
}
