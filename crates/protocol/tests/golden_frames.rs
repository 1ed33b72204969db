//! Golden frames: the exact JSON and SSE bytes of every native frame type and every
//! agent event a client can see. A change here is a wire-format change: review the
//! snapshot diff as you would an API change.

use insta::{assert_json_snapshot, assert_snapshot};
use spool_protocol::frame::{
    ActiveRun, PromptTiming, QueueChange, QueuedMessage, SessionState, ToolExecution, ToolStatus,
};
use spool_protocol::*;
use std::collections::BTreeMap;

fn sid() -> SessionId {
    "ses_01jd0000000000000000000001".parse().unwrap()
}
fn stream() -> StreamId {
    "stm_01jd0000000000000000000002".parse().unwrap()
}
fn run_id() -> RunId {
    "run_01jd0000000000000000000003".parse().unwrap()
}

fn frame(seq: u64, body: FrameBody) -> Frame {
    Frame { body, session_id: sid(), stream_id: stream(), seq }
}

fn state() -> SessionState {
    let session = Session {
        id: sid(),
        project_id: "prj_01jd0000000000000000000004".parse().unwrap(),
        owner_id: "usr_01jd0000000000000000000005".parse().unwrap(),
        title: "Read the readme".into(),
        title_set: true,
        archived: false,
        permissions: vec![],
        model: None,
        mode: Default::default(),
        read_index: None,
        created_at: 1_764_000_000_000,
        updated_at: 1_764_000_000_500,
    };
    let mut drafts = BTreeMap::new();
    drafts.insert(
        3,
        Message::Assistant {
            content: vec![Content::Text { text: "The read".into() }],
            stop_reason: None,
            usage: Usage::default(),
            model: "scripted".into(),
            error_message: None,
            timestamp: 1_764_000_000_300,
        },
    );
    let mut tools = BTreeMap::new();
    tools.insert(
        "call_1".to_string(),
        ToolExecution {
            tool_call_id: "call_1".into(),
            tool_name: "read".into(),
            args: serde_json::json!({"path": "README.md"}),
            status: ToolStatus::Success,
            result: Some("# Hello".into()),
            output: None,
            output_truncated: false,
            diff: None,
        },
    );
    // A call still running shows what it printed so far.
    tools.insert(
        "call_2".to_string(),
        ToolExecution {
            tool_call_id: "call_2".into(),
            tool_name: "bash".into(),
            args: serde_json::json!({"command": "make"}),
            status: ToolStatus::Running,
            result: None,
            output: Some("building…\n".into()),
            output_truncated: true,
            diff: None,
        },
    );
    let mut timings = BTreeMap::new();
    timings.insert(
        0,
        PromptTiming {
            user_message_index: 0,
            started_at: 1_764_000_000_000,
            first_token_at: Some(1_764_000_000_020),
            ended_at: None,
            status: None,
            error: None,
            run_id: Some("run_01jd0000000000000000000003".parse().expect("a run id")),
        },
    );
    SessionState {
        session,
        status: SessionStatus::Busy,
        active_run: Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running }),
        messages: vec![
            IndexedMessage {
                id: "msg_01jd0000000000000000000006".parse().unwrap(),
                index: 0,
                message: Message::user_text("tool: read {\"path\":\"README.md\"}", 1_764_000_000_000),
            },
            IndexedMessage {
                id: "msg_01jd0000000000000000000007".parse().unwrap(),
                index: 1,
                message: Message::Assistant {
                    content: vec![Content::ToolCall {
                        id: "call_1".into(),
                        name: "read".into(),
                        arguments: serde_json::json!({"path": "README.md"}),
                    }],
                    stop_reason: Some(StopReason::ToolUse),
                    usage: Usage { input: 8, output: 3, ..Usage::default() },
                    model: "scripted".into(),
                    error_message: None,
                    timestamp: 1_764_000_000_100,
                },
            },
            IndexedMessage {
                id: "msg_01jd0000000000000000000008".parse().unwrap(),
                index: 2,
                message: Message::ToolResult {
                    tool_call_id: "call_1".into(),
                    tool_name: "read".into(),
                    content: vec![Content::Text { text: "# Hello".into() }],
                    is_error: false,
                    timestamp: 1_764_000_000_200,
                    diff: None,
                },
            },
        ],
        first_index: 0,
        total: 3,
        drafts,
        tool_executions: tools,
        prompt_timings: timings,
        pending_approvals: vec![],
        last_approval: None,
        todos: todos(),
        queue: Vec::new(),
        queue_paused: false,
        variants: Vec::new(),
        revert: None,
        presence: Default::default(),
    }
}

fn todos() -> Vec<hub::Todo> {
    vec![
        hub::Todo {
            content: "Read the readme".into(),
            status: hub::TodoStatus::InProgress,
            active_form: None,
            priority: Some(hub::TodoPriority::High),
            id: Some("1".into()),
        },
        hub::Todo {
            content: "Summarize it".into(),
            status: hub::TodoStatus::Pending,
            active_form: None,
            priority: None,
            id: Some("2".into()),
        },
    ]
}

fn approval() -> Approval {
    Approval {
        id: "per_01jd0000000000000000000009".parse().unwrap(),
        run_id: run_id(),
        session_id: sid(),
        owner_id: "usr_01jd0000000000000000000005".parse().unwrap(),
        tool_call_id: "call_3".into(),
        tool: "write".into(),
        kind: ApprovalKind::ConfirmAction,
        payload: serde_json::json!({"tool": "write", "argument": "out.txt", "change": "write out.txt (5 bytes)"}),
        status: ApprovalStatus::Pending,
        decision: None,
        message: None,
        actor: None,
        created_at: 1_764_000_001_000,
        expires_at: 1_764_086_401_000,
        resolved_at: None,
    }
}

#[test]
fn state_frame_with_a_pending_approval() {
    let mut s = state();
    s.status = SessionStatus::Busy;
    s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Interrupted });
    s.drafts.clear();
    s.pending_approvals = vec![approval()];
    s.last_approval = Some(LastApproval {
        id: "per_01jd0000000000000000000008".parse().unwrap(),
        decision: "once".into(),
        actor: None,
        at: 1_764_000_000_900,
        via: None,
    });
    let f = frame(9, FrameBody::State { state: Box::new(s) });
    let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f);
    assert_json_snapshot!(f);
}

fn loop_event(seq: u64, index: Option<u64>, event: AgentEvent) -> Frame {
    frame(seq, FrameBody::LoopEvent { run_id: run_id(), message_index: index, message_id: None, event })
}

#[test]
fn snapshot_frame() {
    let f = frame(7, FrameBody::Snapshot { state: Box::new(state()) });
    let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f, "a snapshot with drafts and timings round-trips");
    assert_json_snapshot!(f);
}

#[test]
fn state_frame() {
    let mut s = state();
    s.status = SessionStatus::Idle;
    s.active_run = None;
    s.drafts.clear();
    assert_json_snapshot!(frame(8, FrameBody::State { state: Box::new(s) }));
}

#[test]
fn run_accepted_frame_and_its_sse_bytes() {
    let f = frame(1, FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() });
    assert_json_snapshot!(f);
    let sse = f.to_sse();
    assert_snapshot!(std::str::from_utf8(&sse).unwrap());
}

#[test]
fn git_frame() {
    use spool_protocol::git::{FileChange, FileStatus, GitState};
    let git = GitState {
        branch: Some("main".into()),
        commit: Some("dbd4bbd".into()),
        additions: 3,
        deletions: 1,
        files: vec![FileChange { path: "a.txt".into(), status: FileStatus::Modified, additions: 3, deletions: 1 }],
        truncated: false,
    };
    let f = frame(30, FrameBody::Git { git });
    let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f, "a git frame round-trips");
    assert_json_snapshot!(f);
}

#[test]
fn every_loop_event() {
    let assistant = Message::Assistant {
        content: vec![],
        stop_reason: None,
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 1_764_000_000_300,
    };
    let events = vec![
        loop_event(2, None, AgentEvent::AgentStart {}),
        loop_event(3, None, AgentEvent::TurnStart {}),
        loop_event(4, Some(3), AgentEvent::MessageStart { message: assistant.clone() }),
        loop_event(
            5,
            Some(3),
            AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextStart { content_index: 0 } },
        ),
        loop_event(
            6,
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::TextDelta {
                    content_index: 0,
                    offset: 4,
                    delta: " réad🌍".into(),
                },
            },
        ),
        loop_event(
            7,
            Some(3),
            AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextEnd { content_index: 0 } },
        ),
        loop_event(
            8,
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ThinkingDelta { content_index: 1, offset: 0, delta: "hm".into() },
            },
        ),
        loop_event(
            9,
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ToolcallStart {
                    content_index: 2,
                    id: "call_2".into(),
                    name: "list".into(),
                },
            },
        ),
        loop_event(
            10,
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ToolcallDelta {
                    content_index: 2,
                    offset: 0,
                    delta: "{\"pa".into(),
                },
            },
        ),
        loop_event(
            11,
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::Done { stop_reason: StopReason::ToolUse },
            },
        ),
        loop_event(12, Some(3), AgentEvent::MessageEnd { message: assistant }),
        loop_event(
            13,
            None,
            AgentEvent::ToolExecutionStart {
                tool_call_id: "call_2".into(),
                tool_name: "list".into(),
                args: serde_json::json!({"path": "."}),
            },
        ),
        loop_event(
            14,
            None,
            AgentEvent::ToolExecutionUpdate {
                tool_call_id: "call_2".into(),
                tool_name: "list".into(),
                offset: 0,
                delta: "a\n".into(),
                truncated: false,
            },
        ),
        loop_event(
            15,
            None,
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "call_2".into(),
                tool_name: "list".into(),
                result: "a\nb/".into(),
                is_error: false,
            },
        ),
        loop_event(16, None, AgentEvent::TurnEnd {}),
        loop_event(
            17,
            None,
            AgentEvent::AgentEnd {
                status: "completed".into(),
                usage: Usage { input: 8, output: 3, cost: 0.0021, ..Usage::default() },
                error: None,
            },
        ),
        loop_event(
            18,
            None,
            AgentEvent::PromptTiming {
                user_message_index: 0,
                started_at: 1_764_000_000_000,
                first_token_at: Some(1_764_000_000_020),
                ended_at: Some(1_764_000_000_900),
                status: Some(RunStatus::Completed),
                error: None,
            },
        ),
        loop_event(19, None, AgentEvent::AgentSettled {}),
        loop_event(20, None, AgentEvent::SessionTitle { title: "Read the readme".into() }),
        loop_event(21, None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }),
        loop_event(
            22,
            None,
            AgentEvent::ApprovalResolved {
                approval_id: approval().id,
                decision: "reject".into(),
                actor: Some("usr_01jd0000000000000000000005".parse().unwrap()),
                message: Some("not that file".into()),
            },
        ),
        loop_event(23, None, AgentEvent::TodoWrite { todos: todos() }),
    ];
    for f in &events {
        let back: Frame = serde_json::from_value(serde_json::to_value(f).unwrap()).unwrap();
        assert_eq!(&back, f, "frames round-trip through JSON");
    }
    assert_json_snapshot!(events);
}

#[test]
fn queue_frames_and_a_state_with_a_queue() {
    let queued = |n: u8, text: &str| QueuedMessage {
        id: format!("msg_01jd00000000000000000000{n:02}").parse().unwrap(),
        request_id: format!("req-q{n}"),
        text: text.into(),
        created_at: 1_764_000_002_000 + i64::from(n),
        files: Vec::new(),
    };
    let (next, later) = (queued(41, "and then the tests"), queued(42, "and a summary"));
    let frames = vec![
        frame(
            30,
            FrameBody::Queue {
                queue: vec![next.clone(), later.clone()],
                change: QueueChange::Added { message_id: later.id.clone() },
                paused: false,
            },
        ),
        frame(
            31,
            FrameBody::Queue {
                queue: vec![later.clone()],
                change: QueueChange::Taken { message_ids: vec![next.id.clone()], run_id: run_id() },
                paused: false,
            },
        ),
        frame(
            32,
            FrameBody::Queue {
                queue: vec![],
                change: QueueChange::Deleted { message_id: later.id.clone() },
                paused: false,
            },
        ),
        // Stop with a prompt waiting: the queue stays, paused, then goes on.
        frame(34, FrameBody::Queue { queue: vec![later.clone()], change: QueueChange::Paused, paused: true }),
        frame(35, FrameBody::Queue { queue: vec![later.clone()], change: QueueChange::Resumed, paused: false }),
    ];
    for f in &frames {
        let back: Frame = serde_json::from_str(&serde_json::to_string(f).unwrap()).unwrap();
        assert_eq!(&back, f);
    }
    let mut s = state();
    s.queue = vec![later];
    s.queue_paused = true;
    assert_json_snapshot!((frames, frame(33, FrameBody::State { state: Box::new(s) })));
}

#[test]
fn heartbeat_bytes() {
    assert_eq!(sse::HEARTBEAT, b"event: heartbeat\ndata: {}\n\n");
}

#[test]
fn a_failed_agent_end_says_why_and_one_stored_without_it_still_reads() {
    let failed = AgentEvent::AgentEnd {
        status: "failed".into(),
        usage: Usage::default(),
        error: Some(RunError { code: "model_error".into(), message: "the provider went away".into() }),
    };
    let json = serde_json::to_value(&failed).expect("serializes");
    assert_eq!(json["error"], serde_json::json!({"code": "model_error", "message": "the provider went away"}));
    assert_eq!(serde_json::from_value::<AgentEvent>(json).expect("reads back"), failed);
    let stored = serde_json::json!({"type": "agent_end", "status": "failed"});
    match serde_json::from_value::<AgentEvent>(stored).expect("an older agent_end reads") {
        AgentEvent::AgentEnd { status, error, .. } => assert_eq!((status.as_str(), error), ("failed", None)),
        other => panic!("not an agent_end: {other:?}"),
    }
    let completed = AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None };
    assert!(serde_json::to_value(&completed).expect("serializes").get("error").is_none(), "no error on success");
}

#[test]
fn presence_frame_and_a_state_that_carries_it() {
    use spool_protocol::presence::{ClientKind, Presence};
    let presence = Presence {
        viewers: 3,
        answerers: 2,
        visible: 1,
        clients: [(ClientKind::Web, 2), (ClientKind::AgUi, 1)].into_iter().collect(),
    };
    let f = frame(40, FrameBody::Presence { presence: presence.clone() });
    let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f);
    let mut s = state();
    spool_protocol::view::apply_frame(&mut s, &f.body);
    assert_eq!(s.presence, presence, "the fold keeps the latest");
    let nobody = serde_json::to_value(state()).unwrap();
    assert!(nobody.get("presence").is_none(), "absent while nobody is there: {nobody}");
    assert_json_snapshot!((f, frame(41, FrameBody::State { state: Box::new(s) })));
}

/// A user message with a file (issue 42): the file's block before the text, with what
/// a client shows and the URL it fetches the bytes from; never the bytes.
#[test]
fn a_user_message_with_a_file() {
    let id: AttachmentId = "att_01jd0000000000000000000009".parse().unwrap();
    let message = Message::User {
        content: vec![
            Content::File {
                url: format!("/api/attachments/{id}"),
                id,
                name: "shot.png".into(),
                media_type: "image/png".into(),
                size: 5120,
                sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into(),
            },
            Content::Text { text: "what broke?".into() },
        ],
        timestamp: 1_764_000_000_000,
    };
    let f = loop_event(31, Some(0), AgentEvent::MessageEnd { message });
    let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back, f, "a file block round-trips");
    assert_json_snapshot!(f);
}
