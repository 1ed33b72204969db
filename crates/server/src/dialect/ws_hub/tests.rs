//! The hub mapping's unit tests: every event a run's frames give (golden), the
//! tally's memory, snapshots and joins, the queue, and the content form.

use super::*;
use crate::dialect::test_frames::{
    self, approval_decided, assistant_at, frame, frames_from, git_state, owner, run_id, session_state, sid, tool_ended,
    tool_started,
};
use insta::assert_json_snapshot;
use spool_protocol::frame::{ActiveRun, PromptTiming, SessionState};
use spool_protocol::{Content, RunError, RunStatus, SessionStatus};

const NOW: Millis = 1_764_000_002_000;

fn author() -> Author {
    Author { id: owner().to_string(), name: "alice".into() }
}

fn ev(index: Option<u64>, event: AgentEvent) -> FrameBody {
    // A committed message's end names its stored id, as the engine's frames do.
    let message_id = match (&event, index) {
        (AgentEvent::MessageEnd { .. }, Some(i)) => {
            Some(format!("msg_01jd00000000000000000000{i:02}").parse().expect("a message id"))
        }
        _ => None,
    };
    FrameBody::LoopEvent { run_id: run_id(), message_index: index, message_id, event }
}

fn assistant(content: Vec<Content>, stop: Option<StopReason>) -> Message {
    assistant_at(content, stop, 1_764_000_000_300)
}

fn approval(kind: ApprovalKind, payload: Value) -> Approval {
    test_frames::stored_approval(kind, payload)
}

fn state(active: bool) -> SessionState {
    let mut s = session_state(vec![]);
    if active {
        s.status = SessionStatus::Busy;
        s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
        s.drafts.insert(1, assistant(vec![Content::Text { text: "so far".into() }], None));
    }
    s
}

/// One of every frame a run can publish, in a plausible order.
fn every_frame() -> Vec<Frame> {
    let user = Message::user_text("tool: write {\"path\":\"out.txt\"}", 1_764_000_000_000);
    let write = approval(
        ApprovalKind::ConfirmAction,
        json!({"tool": "write", "argument": "out.txt", "change": "write out.txt (5 bytes)"}),
    );
    let bodies = vec![
        FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
        FrameBody::State { state: Box::new(state(true)) },
        ev(None, AgentEvent::AgentStart {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(0), AgentEvent::MessageStart { message: user.clone() }),
        ev(Some(0), AgentEvent::MessageEnd { message: user }),
        ev(
            None,
            AgentEvent::PromptTiming {
                user_message_index: 0,
                started_at: 1_764_000_000_000,
                first_token_at: None,
                ended_at: None,
                status: None,
                error: None,
            },
        ),
        ev(None, AgentEvent::CompactionStart { tokens_before: 120_000 }),
        ev(
            None,
            AgentEvent::AutoRetryStart {
                attempt: 1,
                max_attempts: 3,
                delay_ms: 500,
                error_message: "overloaded".into(),
            },
        ),
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None) }),
        ev(
            Some(1),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ThinkingDelta {
                    content_index: 0,
                    offset: 0,
                    delta: "Let me check".into(),
                },
            },
        ),
        ev(
            Some(1),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::TextDelta {
                    content_index: 1,
                    offset: 4,
                    delta: " réad🌍".into(),
                },
            },
        ),
        ev(
            Some(1),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ToolcallDelta {
                    content_index: 2,
                    offset: 0,
                    delta: "{\"pa".into(),
                },
            },
        ),
        ev(
            Some(1),
            AgentEvent::MessageEnd {
                message: assistant(
                    vec![
                        Content::Thinking { thinking: "Let me check".into() },
                        Content::Text { text: "I'll read it".into() },
                    ],
                    Some(StopReason::ToolUse),
                ),
            },
        ),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(write.clone()) }),
        ev(None, approval_decided(&write, "once", Some(owner()))),
        ev(None, tool_started("call_2", "write", json!({"path": "out.txt", "content": "hello"}))),
        ev(None, tool_ended("call_2", "write", "wrote 5 bytes to out.txt")),
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(
            Some(3),
            AgentEvent::MessageEnd {
                message: assistant(vec![Content::Text { text: "Done.".into() }], Some(StopReason::Stop)),
            },
        ),
        ev(
            None,
            AgentEvent::AgentEnd {
                status: "completed".into(),
                usage: Usage { input: 10, output: 4, ..Usage::default() },
                error: None,
            },
        ),
        ev(
            None,
            AgentEvent::PromptTiming {
                user_message_index: 0,
                started_at: 1_764_000_000_000,
                first_token_at: Some(1_764_000_000_020),
                ended_at: Some(1_764_000_001_500),
                status: None,
                error: None,
            },
        ),
        FrameBody::State { state: Box::new(state(false)) },
        ev(None, AgentEvent::AgentSettled {}),
        ev(None, AgentEvent::SessionTitle { title: "Write a file".into() }),
        ev(None, AgentEvent::TodoWrite { todos: todos() }),
        FrameBody::Git { git: git_state() },
    ];
    frames_from(20, bodies)
}

fn todos() -> Vec<spool_protocol::hub::Todo> {
    use spool_protocol::hub::{Todo, TodoPriority, TodoStatus};
    vec![
        Todo {
            content: "Write the file".into(),
            status: TodoStatus::Completed,
            active_form: None,
            priority: Some(TodoPriority::High),
            id: Some("1".into()),
        },
        Todo {
            content: "Check it".into(),
            status: TodoStatus::InProgress,
            active_form: None,
            priority: None,
            id: Some("2".into()),
        },
    ]
}

#[test]
fn every_hub_event_from_a_run() {
    let mut tally = RunTally::default();
    let events: Vec<Envelope> = every_frame().iter().filter_map(|f| map_frame(f, &mut tally, &author(), NOW)).collect();
    assert_json_snapshot!(events);
}

#[test]
fn each_frame_gives_at_most_one_event_with_its_own_cursor() {
    let frames = every_frame();
    let mut tally = RunTally::default();
    for f in &frames {
        if let Some(e) = map_frame(f, &mut tally, &author(), NOW) {
            assert_eq!(e.cursor, Some(f.cursor().to_string()));
            assert_eq!(e.channel_id, sid().to_string());
        }
    }
}

#[test]
fn a_tally_that_joined_mid_run_leaves_what_it_did_not_see_null() {
    let frames = every_frame();
    // From the last assistant message on.
    let from = frames.len() - 8;
    let mut tally = RunTally::default();
    let status: Vec<Envelope> = frames[from..]
        .iter()
        .filter_map(|f| map_frame(f, &mut tally, &author(), NOW))
        .filter(|e| e.kind == AGENT_STATUS)
        .collect();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].data["status"], "completed");
    assert_eq!(status[0].data["num_turns"], Value::Null);
    assert_eq!(status[0].data["duration_ms"], 1500);
}

#[test]
fn failed_and_cancelled_runs_report_errored_and_cancelled() {
    for (status, word) in [("failed", "errored"), ("cancelled", "cancelled")] {
        let mut tally = RunTally::default();
        map_frame(
            &frame(1, ev(None, AgentEvent::AgentEnd { status: status.into(), usage: Usage::default(), error: None })),
            &mut tally,
            &author(),
            NOW,
        );
        let e =
            map_frame(&frame(2, ev(None, AgentEvent::AgentSettled {})), &mut tally, &author(), NOW).expect("status");
        assert_eq!(e.data["status"], word);
    }
    // No agent_end seen: settling alone says nothing.
    assert_eq!(
        map_frame(&frame(3, ev(None, AgentEvent::AgentSettled {})), &mut RunTally::default(), &author(), NOW),
        None
    );
}

#[test]
fn a_choice_is_an_ask_user_card() {
    let a = approval(
        ApprovalKind::SelectOption,
        json!({"question": "Which file?", "options": [{"label": "a.txt", "description": "the first"}]}),
    );
    let mut tally = RunTally::default();
    let e = map_frame(
        &frame(5, ev(None, AgentEvent::ApprovalRequested { approval: Box::new(a) })),
        &mut tally,
        &author(),
        NOW,
    );
    assert_json_snapshot!(e);
}

#[test]
fn a_plan_to_accept_is_an_exit_plan_card() {
    let mut a = approval(ApprovalKind::ConfirmAction, json!({"plan": "# Plan\n1. edit a.txt"}));
    a.tool = "exit_plan".into();
    let (kind, data) = approval_requested(&a);
    assert_eq!(kind, AGENT_EXIT_PLAN);
    assert_eq!(data["plan"], "# Plan\n1. edit a.txt");
    assert_eq!(data["req_id"], json!(a.id));
    // Any other tool to confirm stays a gate approval.
    a.tool = "write".into();
    assert_eq!(approval_requested(&a).0, GATE_APPROVAL_REQUESTED);
}

#[test]
fn the_content_form_carries_each_block_so_far_from_where_a_join_found_it() {
    let delta = |seq, index, text: &str, thinking: bool| {
        let (content_index, offset, delta) = (0, 0, text.to_owned());
        let d = if thinking {
            StreamDelta::ThinkingDelta { content_index, offset, delta }
        } else {
            StreamDelta::TextDelta { content_index, offset, delta }
        };
        frame(seq, ev(Some(index), AgentEvent::MessageUpdate { assistant_message_event: d }))
    };
    let mut tally = RunTally::new(Streaming::Content);
    // Joined mid-answer: the draft holds "so far" (see `state`).
    joined(&frame(40, FrameBody::Snapshot { state: Box::new(state(true)) }), &mut tally, NOW);
    let mut map = |f: &Frame| map_frame(f, &mut tally, &author(), NOW).expect("an event").data;
    assert_eq!(map(&delta(41, 1, " and", false))["content"], "so far and");
    let grown = map(&delta(42, 1, " more", false));
    assert_eq!(grown["content"], "so far and more");
    assert_eq!((&grown["delta"], &grown["offset"]), (&Value::Null, &Value::Null), "no pieces in this form");
    // The next message starts from nothing; thinking grows apart from the text.
    assert_eq!(map(&delta(43, 3, "Hmm", true))["text"], "Hmm");
    assert_eq!(map(&delta(44, 3, ", yes", true))["text"], "Hmm, yes");
    assert_eq!(map(&delta(45, 3, "Yes", false))["content"], "Yes");
}

#[test]
fn snapshots_joins_and_global_events() {
    let snap = frame(40, FrameBody::Snapshot { state: Box::new(state(true)) });
    let mut tally = RunTally::default();
    let joined = joined(&snap, &mut tally, NOW);
    let kinds = |events: &[Envelope]| events.iter().map(|e| e.kind).collect::<Vec<_>>();
    assert_eq!(kinds(&joined), [CHANNEL_SNAPSHOT, AGENT_STATUS], "joining a run gives its text so far");
    assert_eq!(tally.model.as_deref(), Some("scripted"));
    let mut idle_state = state(false);
    idle_state.prompt_timings.insert(
        0,
        PromptTiming {
            user_message_index: 0,
            started_at: NOW - 1500,
            ended_at: Some(NOW),
            status: Some(RunStatus::Failed),
            error: Some(RunError { code: "tool_outcome_unknown".into(), message: "cut".into() }),
            ..PromptTiming::default()
        },
    );
    let idle = frame(41, FrameBody::Snapshot { state: Box::new(idle_state) });
    // The channel knew the run; the snapshot shows it over: its end is reported.
    let reported = snapshot(&idle, &mut tally, false, NOW);
    assert_eq!(kinds(&reported), [CHANNEL_SNAPSHOT, AGENT_STATUS]);
    assert_eq!(reported[1].data["status"], "errored");
    assert_eq!(snapshot(&idle, &mut tally, false, NOW).len(), 1, "reported once");
    assert!(super::joined(&idle, &mut tally, NOW).is_empty(), "an idle channel is joined silently");
    let project: ProjectId = "prj_01jd0000000000000000000004".parse().unwrap();
    let mut events = joined;
    events.extend(reported);
    events.extend([
        channel_created(&sid(), &project, NOW),
        channel_deleted(&sid(), NOW),
        channel_error("ses_nope", "not_found", "session not found", NOW),
        subscribed(&[sid().to_string()], NOW),
        error("invalid_message", "expected {\"type\":\"subscribe\",\"channels\":[…]}", NOW),
    ]);
    assert_json_snapshot!(events);
}

#[test]
fn a_queued_message_is_created_unprocessed_then_processed_or_deleted() {
    let (first, second): (MessageId, MessageId) =
        ("msg_01jd0000000000000000000031".parse().unwrap(), "msg_01jd0000000000000000000032".parse().unwrap());
    let queued = |id: &MessageId| spool_protocol::frame::QueuedMessage {
        id: id.clone(),
        request_id: format!("req-{id}"),
        text: "and then?".into(),
        created_at: NOW,
        files: Vec::new(),
    };
    let mut tally = RunTally::default();
    let mut map = |seq, queue, change| {
        map_frame(&frame(seq, FrameBody::Queue { queue, change, paused: false }), &mut tally, &author(), NOW)
    };
    let added = map(50, vec![queued(&first), queued(&second)], QueueChange::Added { message_id: second.clone() })
        .expect("a message joining the queue is created, not yet processed");
    assert_eq!((added.kind, &added.data["msg_id"]), (MESSAGE_CREATED, &json!(second)));
    assert_eq!((&added.data["is_processed"], &added.data["content"]), (&json!(false), &json!("and then?")));
    let taken = QueueChange::Taken { message_ids: vec![first.clone()], run_id: run_id() };
    let processed = map(51, vec![queued(&second)], taken).expect("an event");
    assert_eq!(processed.kind, MESSAGES_PROCESSED);
    assert_eq!(processed.data, json!({"msg_ids": [first], "run_id": run_id()}));
    assert_eq!(processed.cursor.as_deref(), Some("stm_01jd0000000000000000000002:51"));
    let deleted = map(52, vec![], QueueChange::Deleted { message_id: second.clone() }).expect("an event");
    assert_eq!((deleted.kind, deleted.channel_id.as_str()), (MESSAGE_DELETED, sid().as_str()));
    assert_eq!(deleted.data, json!({"msg_id": second}));
}

/// A user message's files ride on its `message.created` as `attachments` (id, name,
/// media type, size, URL), committed or queued, true to the payload schema publishers
/// are held to; a message without files has no such field, as in the seed.
#[test]
fn a_user_messages_files_are_the_attachments_of_its_message_created() {
    let user = test_frames::user_with_files("echo: look", 1_764_000_000_000);
    let mut tally = RunTally::default();
    let mut end = |seq, message| {
        let body = ev(Some(0), AgentEvent::MessageEnd { message });
        map_frame(&frame(seq, body), &mut tally, &author(), NOW).expect("message.created")
    };
    let created = end(60, user.clone());
    assert_eq!((created.kind, &created.data["content"]), (MESSAGE_CREATED, &json!("echo: look")));
    spool_protocol::hub::HubEventType::MessageCreated.parse(created.data.clone()).expect("true to its schema");
    assert_json_snapshot!(created.data["attachments"]);
    assert_eq!(end(61, Message::user_text("no files", 1_764_000_000_000)).data.get("attachments"), None);

    // The same files on a prompt that waits in the queue.
    let files = user.attachments();
    let id: MessageId = "msg_01jd0000000000000000000033".parse().unwrap();
    let queued = spool_protocol::frame::QueuedMessage {
        id: id.clone(),
        request_id: "req-files".into(),
        text: "echo: look".into(),
        created_at: NOW,
        files,
    };
    let body = FrameBody::Queue { queue: vec![queued], change: QueueChange::Added { message_id: id }, paused: false };
    let added = map_frame(&frame(62, body), &mut RunTally::default(), &author(), NOW).expect("message.created");
    assert_eq!((added.kind, &added.data["is_processed"]), (MESSAGE_CREATED, &json!(false)));
    spool_protocol::hub::HubEventType::MessageCreated.parse(added.data.clone()).expect("true to its schema");
    assert_eq!(added.data["attachments"], created.data["attachments"]);
}
