//! What the dialects' unit tests share: fixed ids, a frame builder, the loop events a
//! run's frames are made of, the stored records (session, state, approvals) and the one
//! run that reads a file and asks to write one. Every golden snapshot names the same
//! session, stream, run and owner, and no dialect's tests keep a copy of these.

use super::run_fold::PartFold;
use serde_json::{Value, json};
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::time::Millis;
use spool_protocol::{
    AgentEvent, Approval, ApprovalKind, ApprovalStatus, Content, IndexedMessage, Message, Run, RunError, RunId,
    RunStatus, Session, SessionId, StopReason, StreamDelta, Usage, UserId,
};

pub fn sid() -> SessionId {
    "ses_01jd0000000000000000000001".parse().expect("valid id")
}
pub fn run_id() -> RunId {
    "run_01jd0000000000000000000003".parse().expect("valid id")
}
pub fn owner() -> UserId {
    "usr_01jd0000000000000000000005".parse().expect("valid id")
}
pub fn frame(seq: u64, body: FrameBody) -> Frame {
    Frame { body, session_id: sid(), stream_id: "stm_01jd0000000000000000000002".parse().expect("valid id"), seq }
}

/// A user message as a prompt with files makes it: the files (a screenshot and a PDF)
/// before the text, each with the URL its owner fetches it from.
pub fn user_with_files(text: &str, timestamp: Millis) -> Message {
    let file = |id: &str, name: &str, media_type: &str, size: u64| Content::File {
        id: id.parse().expect("valid id"),
        name: name.into(),
        media_type: media_type.into(),
        size,
        sha256: "0123abcd".repeat(8),
        url: format!("/api/attachments/{id}"),
    };
    Message::User {
        content: vec![
            file("att_01jd0000000000000000000007", "shot.png", "image/png", 5120),
            file("att_01jd0000000000000000000008", "spec.pdf", "application/pdf", 73_000),
            Content::Text { text: text.into() },
        ],
        timestamp,
    }
}

/// Every event a run-following `fold` maps `frames` to, in order.
pub fn map_all<F: PartFold>(fold: &mut F, frames: &[Frame]) -> Vec<F::Event> {
    frames.iter().flat_map(|f| fold.push(f)).collect()
}

/// `bodies` as the session's frames, numbered from `first`.
pub fn frames_from(first: u64, bodies: Vec<FrameBody>) -> Vec<Frame> {
    bodies.into_iter().zip(first..).map(|(body, seq)| frame(seq, body)).collect()
}

/// A loop event of the fixed run.
pub fn ev(message_index: Option<u64>, event: AgentEvent) -> FrameBody {
    FrameBody::LoopEvent { run_id: run_id(), message_index, message_id: None, event }
}

/// A streamed piece of the assistant message.
pub fn update(delta: StreamDelta) -> AgentEvent {
    AgentEvent::MessageUpdate { assistant_message_event: delta }
}

/// A tool call starts running.
pub fn tool_started(id: &str, name: &str, args: Value) -> AgentEvent {
    AgentEvent::ToolExecutionStart { tool_call_id: id.into(), tool_name: name.into(), args }
}

/// A tool call ends without error.
pub fn tool_ended(id: &str, name: &str, result: &str) -> AgentEvent {
    AgentEvent::ToolExecutionEnd {
        tool_call_id: id.into(),
        tool_name: name.into(),
        result: result.into(),
        is_error: false,
    }
}

/// `approval` is decided (`once`, `fill`…) by `actor`, with no message.
pub fn approval_decided(approval: &Approval, decision: &str, actor: Option<UserId>) -> AgentEvent {
    AgentEvent::ApprovalResolved { approval_id: approval.id.clone(), decision: decision.into(), actor, message: None }
}

/// An assistant message of the scripted model.
pub fn assistant(content: Vec<Content>, stop: StopReason) -> Message {
    assistant_at(content, Some(stop), 0)
}

/// An assistant message of the scripted model, written at `timestamp`.
pub fn assistant_at(content: Vec<Content>, stop: Option<StopReason>, timestamp: Millis) -> Message {
    Message::Assistant {
        content,
        stop_reason: stop,
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp,
    }
}

/// The fixed session, as stored.
pub fn session() -> Session {
    Session {
        id: sid(),
        project_id: "prj_01jd0000000000000000000004".parse().expect("valid id"),
        owner_id: owner(),
        title: "t".into(),
        title_set: true,
        archived: false,
        permissions: vec![],
        model: None,
        mode: Default::default(),
        read_index: None,
        created_at: 1_764_000_000_000,
        updated_at: 1_764_000_000_000,
    }
}

/// The fixed session's state with `messages`, as a subscriber is first sent it.
pub fn session_state(messages: Vec<IndexedMessage>) -> SessionState {
    spool_engine::view::initial_state(session(), messages, 0)
}

/// Message `index` of the fixed session, stored as `msg_…{n}`.
pub fn indexed(n: u64, index: u64, message: Message) -> IndexedMessage {
    IndexedMessage { id: format!("msg_01jd00000000000000000000{n:02}").parse().expect("valid id"), index, message }
}

/// The fixed run, as stored, in `status`.
pub fn stored_run(status: RunStatus, error: Option<RunError>) -> Run {
    Run {
        id: run_id(),
        session_id: sid(),
        owner_id: owner(),
        request_id: "req-1".into(),
        status,
        user_message_index: 0,
        created_at: 1_764_000_000_000,
        updated_at: 1_764_000_000_900,
        first_token_at: None,
        ended_at: None,
        usage: Usage::default(),
        error,
    }
}

/// A pending approval of a `write` call (`call_2`) in the fixed run.
pub fn approval(expires_at: Millis) -> Approval {
    Approval {
        id: "per_01jd0000000000000000000004".parse().expect("valid id"),
        payload: json!({"tool": "write", "summary": "out.txt"}),
        created_at: 0,
        expires_at,
        ..stored_approval(ApprovalKind::ConfirmAction, Value::Null)
    }
}

/// A pending approval of a `write` call (`call_2`) in the fixed run, as the store keeps
/// one: asked a second after the run began, expiring a day later.
pub fn stored_approval(kind: ApprovalKind, payload: Value) -> Approval {
    Approval {
        id: "per_01jd0000000000000000000007".parse().expect("valid id"),
        run_id: run_id(),
        session_id: sid(),
        owner_id: owner(),
        tool_call_id: "call_2".into(),
        tool: "write".into(),
        kind,
        payload,
        status: ApprovalStatus::Pending,
        decision: None,
        message: None,
        actor: None,
        created_at: 1_764_000_001_000,
        expires_at: 1_764_086_401_000,
        resolved_at: None,
    }
}

/// A pending question (`call_q`) in the fixed run: "Which colour?", red or blue.
pub fn question() -> Approval {
    Approval {
        id: "per_01jd0000000000000000000006".parse().expect("valid id"),
        tool_call_id: "call_q".into(),
        tool: super::QUESTION_TOOL.into(),
        kind: ApprovalKind::SelectOption,
        payload: json!({
            "question": "Which colour?",
            "options": [{"label": "red", "description": null}, {"label": "blue", "description": "like the sky"}],
            "other": true,
        }),
        ..approval(1)
    }
}

/// A run that thinks, reads a file (streaming the call's input), asks to write one
/// (`approval`), is approved, writes, and answers. `thinking_kept`: the finished
/// message keeps its thinking; `title`: the session is titled before the turn ends.
pub fn read_write_run(approval: Approval, thinking_kept: bool, title: Option<&str>) -> Vec<Frame> {
    let read = json!({"path": "README.md"});
    let write = json!({"path": "out.txt", "content": "hi"});
    let thinking = thinking_kept.then(|| Content::Thinking { thinking: "hm".into() });
    let calls = [
        Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: read.clone() },
        Content::ToolCall { id: "call_2".into(), name: "write".into(), arguments: write.clone() },
    ];
    let first = thinking.into_iter().chain(calls).collect();
    let answer = assistant(vec![Content::Text { text: "Done.".into() }], StopReason::Stop);
    let allowed = approval_decided(&approval, "once", Some(owner()));
    let mut bodies = vec![
        FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
        ev(None, AgentEvent::AgentStart {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(1), update(StreamDelta::ThinkingDelta { content_index: 0, offset: 0, delta: "hm".into() })),
        ev(Some(1), update(StreamDelta::ThinkingEnd { content_index: 0 })),
        ev(Some(1), update(StreamDelta::ToolcallStart { content_index: 1, id: "call_1".into(), name: "read".into() })),
        ev(Some(1), update(StreamDelta::ToolcallDelta { content_index: 1, offset: 0, delta: "{\"path\":".into() })),
        ev(Some(1), update(StreamDelta::ToolcallDelta { content_index: 1, offset: 8, delta: "\"README.md\"}".into() })),
        ev(Some(1), AgentEvent::MessageEnd { message: assistant(first, StopReason::ToolUse) }),
        ev(None, tool_started("call_1", "read", read)),
        ev(None, tool_ended("call_1", "read", "# Test")),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(approval) }),
        ev(None, allowed),
        ev(None, tool_started("call_2", "write", write)),
        ev(None, tool_ended("call_2", "write", "wrote out.txt")),
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(4), update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Done".into() })),
        ev(Some(4), update(StreamDelta::TextDelta { content_index: 0, offset: 4, delta: ".".into() })),
        ev(Some(4), AgentEvent::MessageEnd { message: answer }),
    ];
    bodies.extend(title.map(|title| ev(None, AgentEvent::SessionTitle { title: title.into() })));
    bodies.extend([
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        ev(None, AgentEvent::AgentSettled {}),
    ]);
    frames_from(1, bodies)
}

/// A working tree with one file of each kind of change (added, changed, deleted).
pub fn git_state() -> spool_protocol::git::GitState {
    use spool_protocol::git::{FileChange, FileStatus, GitState};
    GitState {
        branch: Some("feat/git-panel".into()),
        commit: Some("dbd4bbd".into()),
        additions: 12,
        deletions: 5,
        files: vec![
            FileChange { path: "gone.txt".into(), status: FileStatus::Deleted, additions: 0, deletions: 2 },
            FileChange { path: "out.txt".into(), status: FileStatus::Added, additions: 1, deletions: 0 },
            FileChange { path: "src/main.rs".into(), status: FileStatus::Modified, additions: 11, deletions: 3 },
        ],
        truncated: false,
    }
}
