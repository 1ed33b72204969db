//! The AG-UI mapping's unit tests: a run's events (golden), a run parked at an
//! approval as two AG-UI runs, failed and cancelled runs, questions, and runs drawn
//! from a snapshot.

use super::events::{QUESTION, TOOL_APPROVAL};
use super::*;
use crate::dialect::test_frames::{
    self, approval_decided, assistant, ev, frame, frames_from, indexed, map_all, read_write_run, run_id, sid,
    stored_run as run, tool_started, update,
};
use insta::assert_json_snapshot;
use spool_protocol::frame::FrameBody;
use spool_protocol::{ApprovalStatus, Decision, Session, StopReason, Usage};
use spool_test_support::ag_ui::user_texts;

fn approval() -> Approval {
    test_frames::approval(1_796_313_600_000)
}

fn frames(bodies: Vec<FrameBody>) -> Vec<Frame> {
    frames_from(1, bodies)
}

fn run_frames() -> Vec<Frame> {
    read_write_run(approval(), true, Some("Writing out.txt"))
}

fn asked_at(frames: &[Frame]) -> usize {
    frames
        .iter()
        .position(|f| matches!(&f.body, FrameBody::LoopEvent { event: AgentEvent::ApprovalRequested { .. }, .. }))
        .expect("an approval")
}

/// The events of a stream as JSON, opening and end included, the way the wire has them.
fn wire(bytes: &[Bytes]) -> Vec<Value> {
    bytes
        .iter()
        .flat_map(|b| std::str::from_utf8(b).expect("utf-8").split("\n\n").map(str::to_owned).collect::<Vec<_>>())
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("a data line")).expect("JSON"))
        .collect()
}

#[test]
fn a_run_parked_at_an_approval_is_two_ag_ui_runs() {
    let frames = run_frames();
    let asked = asked_at(&frames);
    let state = json!({"sessionId": sid(), "title": "", "todos": []});

    let mut fold = AgUiStream::new(run_id());
    let before = map_all(&mut fold, &frames[..=asked]);
    let waiting = fold.waiting().cloned().expect("parked");
    let first = wire(&[
        opening("thread-1", &run_id(), state.clone()),
        encode(&before),
        closing("thread-1", &run_id(), Close::Waiting(vec![waiting])),
    ]);
    assert_json_snapshot!("interrupted", first);

    let mut fold = AgUiStream::continuing(&approval(), Some(approval()));
    let after = map_all(&mut fold, &frames[asked + 1..]);
    assert_eq!(fold.ended(), Some(RunStatus::Completed));
    assert!(fold.waiting().is_none());
    let decided = Approval { decision: Some(Decision::Once), status: ApprovalStatus::Resolved, ..approval() };
    let second = wire(&[
        opening("thread-1", &run_id(), state),
        resolved(&decided),
        encode(&after),
        closing("thread-1", &run_id(), Close::Completed),
    ]);
    assert_json_snapshot!("continued", second);
}

/// The fixed run's `write` call (`call_2`) as a call of a tool the client declared.
fn client_call() -> Approval {
    let payload = json!({"client": true, "tool": "write", "arguments": {"path": "out.txt"}, "description": "Write"});
    Approval { kind: spool_protocol::ApprovalKind::ProvideInput, payload, ..approval() }
}

#[test]
fn a_run_parked_at_a_client_call_finishes_with_the_call_pending_and_goes_on_with_its_result() {
    let frames = read_write_run(client_call(), false, None);
    let asked = asked_at(&frames);
    let state = json!({"sessionId": sid(), "title": "", "todos": []});

    let mut fold = AgUiStream::new(run_id());
    let before = map_all(&mut fold, &frames[..=asked]);
    let close = fold.close().expect("parked");
    assert_eq!(close, Close::ClientCalls(vec![client_call()]));
    let first = wire(&[opening("t", &run_id(), state.clone()), encode(&before), closing("t", &run_id(), close)]);
    let end = first.last().expect("an end");
    assert_eq!(end["outcome"], json!({"type": "success", "pendingToolCallIds": ["call_2"]}));
    assert!(!first.iter().any(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_2"));
    assert!(first.iter().any(|e| e["type"] == "TOOL_CALL_END" && e["toolCallId"] == "call_2"));

    // The request with the call's result: nothing announces the decision, and the
    // result the client sent is not sent back to it; the rest of the run follows.
    let mut fold = AgUiStream::continuing(&client_call(), None);
    let after = map_all(&mut fold, &frames[asked + 1..]);
    let second = wire(&[opening("t", &run_id(), state), encode(&after), closing("t", &run_id(), Close::Completed)]);
    let kinds: Vec<&str> = second.iter().map(|e| e["type"].as_str().expect("a type")).collect();
    assert_eq!(kinds[..2], ["RUN_STARTED", "STATE_SNAPSHOT"], "{kinds:?}");
    assert!(!kinds.contains(&"TOOL_CALL_RESULT"), "{kinds:?}");
    assert!(kinds.contains(&"TEXT_MESSAGE_CONTENT"), "the run goes on: {kinds:?}");
    assert!(!kinds.contains(&"CUSTOM") && !kinds.contains(&"TOOL_CALL_START"), "{kinds:?}");
    assert_eq!(second.last().expect("an end")["outcome"], json!({"type": "success"}));
}

#[test]
fn the_whole_run_and_its_parts_map_to_the_same_events() {
    let frames = run_frames();
    let asked = asked_at(&frames);
    let whole = map_all(&mut AgUiStream::new(run_id()), &frames);
    let mut parts = map_all(&mut AgUiStream::new(run_id()), &frames[..=asked]);
    // The transport sends the decision first (`resolved`), and the fold not again.
    parts.push(resolved_event(&approval().id, Some("call_2"), Some("once"), None));
    let decided = parts.len();
    parts.extend(map_all(&mut AgUiStream::continuing(&approval(), None), &frames[asked + 1..]));
    assert_eq!(parts, whole);
    // A continuation that had to replay from the run's start sends the same rest.
    let mut muted = AgUiStream::muted_until(&approval(), None);
    assert_eq!(map_all(&mut muted, &frames), whole[decided..]);
    assert_eq!(muted.ended(), Some(RunStatus::Completed));
}

#[test]
fn a_failed_or_cancelled_run_ends_with_run_error_or_the_cancelled_outcome() {
    let mut fold = AgUiStream::new(run_id());
    let body = frames(vec![
        FrameBody::RunAccepted { request_id: "r".into(), run_id: run_id() },
        ev(Some(1), update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Hal".into() })),
        ev(None, AgentEvent::AgentEnd { status: "cancelled".into(), usage: Usage::default(), error: None }),
    ]);
    let events = map_all(&mut fold, &body);
    assert_eq!(fold.ended(), Some(RunStatus::Cancelled));
    let error = RunError { code: "model_error".into(), message: "the provider went away".into() };
    let end = [
        closing("t", &run_id(), Close::Cancelled),
        closing("t", &run_id(), Close::Failed(Some(error))),
        closing("t", &run_id(), Close::Failed(None)),
    ];
    assert_json_snapshot!((wire(&[encode(&events)]), wire(&end)));
}

#[test]
fn a_failed_run_closes_with_the_error_its_agent_end_carries() {
    let mut fold = AgUiStream::new(run_id());
    let error = RunError { code: "model_error".into(), message: "the provider went away".into() };
    let body = frames(vec![
        FrameBody::RunAccepted { request_id: "r".into(), run_id: run_id() },
        ev(None, AgentEvent::AgentEnd { status: "failed".into(), usage: Usage::default(), error: Some(error.clone()) }),
    ]);
    map_all(&mut fold, &body);
    assert_eq!(fold.close(), Some(Close::Failed(Some(error))));
}

#[test]
fn frames_of_other_runs_and_before_run_accepted_map_to_nothing() {
    let other: RunId = "run_01jd0000000000000000000009".parse().expect("valid id");
    let mut fold = AgUiStream::new(run_id());
    assert!(
        fold.push(&frame(
            1,
            ev(Some(1), update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "early".into() }))
        ))
        .is_empty()
    );
    fold.push(&frame(2, FrameBody::RunAccepted { request_id: "r".into(), run_id: run_id() }));
    let theirs = FrameBody::LoopEvent {
        run_id: other,
        message_index: Some(1),
        message_id: None,
        event: update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "theirs".into() }),
    };
    assert!(fold.push(&frame(3, theirs)).is_empty());
}

fn snapshot_state(messages: Vec<IndexedMessage>) -> SessionState {
    let session = Session {
        project_id: "prj_01jd0000000000000000000006".parse().expect("valid id"),
        created_at: 0,
        updated_at: 0,
        ..test_frames::session()
    };
    spool_engine::view::initial_state(session, messages, 0)
}

fn tool_result(call: &str, text: &str) -> Message {
    Message::ToolResult {
        tool_call_id: call.into(),
        tool_name: "read".into(),
        content: vec![Content::Text { text: text.into() }],
        is_error: false,
        timestamp: 0,
        diff: None,
    }
}

fn stored_run(status: RunStatus) -> Run {
    Run { request_id: "ag-ui:m1".into(), created_at: 0, updated_at: 0, ..run(status, None) }
}

fn text(events: &[AgUiEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AgUiEvent::TextMessageContent { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// A running run drawn from a snapshot: its committed messages after the prompt and
/// the draft being streamed, then live deltas only past what was drawn.
#[test]
fn a_run_drawn_from_a_snapshot_goes_on_with_the_live_frames_without_repeating_text() {
    let read = Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
    let messages = vec![
        indexed(1, 0, Message::user_text("tool: read", 0)),
        indexed(2, 1, assistant(vec![Content::Text { text: "Let me look.".into() }, read], StopReason::ToolUse)),
        indexed(3, 2, tool_result("call_1", "# A")),
    ];
    let mut state = snapshot_state(messages.clone());
    state.drafts.insert(3, assistant(vec![Content::Text { text: "Half".into() }], StopReason::Stop));
    let run = stored_run(RunStatus::Running);
    let (mut fold, mut events) = AgUiStream::from_snapshot(&run, &state, &messages, None);
    let live = frames(vec![
        ev(Some(3), update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Ha".into() })),
        ev(Some(3), update(StreamDelta::TextDelta { content_index: 0, offset: 2, delta: "lf do".into() })),
        ev(Some(3), update(StreamDelta::TextDelta { content_index: 0, offset: 7, delta: "ne".into() })),
        ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
    ]);
    events.extend(map_all(&mut fold, &live));
    assert_eq!(fold.ended(), Some(RunStatus::Completed));
    assert_eq!(text(&events), "Let me look.Half done");
    assert_json_snapshot!(events);
}

/// A continuation drawn from a snapshot starts after the interrupt: not the message
/// with the call, not the results of the calls before it.
#[test]
fn a_continuation_drawn_from_a_snapshot_starts_after_the_interrupt() {
    let read = Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
    let write = Content::ToolCall { id: "call_2".into(), name: "write".into(), arguments: json!({"path": "b"}) };
    let first = assistant(vec![Content::Text { text: "Writing.".into() }, read, write], StopReason::ToolUse);
    let messages = vec![
        indexed(1, 0, Message::user_text("tool: write", 0)),
        indexed(2, 1, first),
        indexed(3, 2, tool_result("call_1", "# A")),
        indexed(4, 3, tool_result("call_2", "wrote b")),
        indexed(5, 4, assistant(vec![Content::Text { text: "Done.".into() }], StopReason::Stop)),
    ];
    let state = snapshot_state(messages.clone());
    let (fold, events) =
        AgUiStream::from_snapshot(&stored_run(RunStatus::Completed), &state, &messages, Some(&approval()));
    let kinds: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_value(e).expect("JSON")["type"].as_str().expect("a type").to_owned())
        .collect();
    assert_eq!(kinds, ["TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]);
    assert!(matches!(&events[0], AgUiEvent::ToolCallResult { tool_call_id, .. } if tool_call_id == "call_2"));
    assert_eq!(text(&events), "Done.");
    assert_eq!(fold.ended(), Some(RunStatus::Completed));
    // While the run goes on, the decision's frame adds nothing (the transport sent
    // it), nor does the call's execution start (the client has the call).
    let (mut running, _) =
        AgUiStream::from_snapshot(&stored_run(RunStatus::Running), &state, &messages, Some(&approval()));
    let late = frames(vec![
        ev(None, approval_decided(&approval(), "once", None)),
        ev(None, tool_started("call_2", "write", json!({"path": "b"}))),
    ]);
    assert_eq!(map_all(&mut running, &late), vec![]);
}

#[test]
fn a_question_is_an_interrupt_asking_for_an_answer() {
    let interrupt = Interrupt::of(&test_frames::question());
    assert_eq!(interrupt.reason, QUESTION);
    assert_eq!(interrupt.message, "Which colour?");
    assert_eq!(interrupt.response_schema["required"], json!(["answer"]));
    assert_eq!(interrupt.response_schema["properties"]["answer"]["examples"], json!(["red", "blue"]));
    assert_eq!(interrupt.metadata["spool"]["card"]["options"][1]["description"], "like the sky");
    assert_eq!(Interrupt::of(&approval()).reason, TOOL_APPROVAL);
}

#[test]
fn a_guardrail_is_a_tool_approval_asking_its_question() {
    let question = "This run has spent $2.40 (limit $2.00). Continue?";
    let guardrail = Approval {
        tool: "guardrail".into(),
        tool_call_id: "guard_01jd0000000000000000000009".into(),
        payload: json!({"guardrail": {"limit": "runCostUsd", "scope": "run", "value": 2.0, "used": 2.4}, "reason": question}),
        ..approval()
    };
    let interrupt = Interrupt::of(&guardrail);
    assert_eq!((interrupt.reason.as_str(), interrupt.message.as_str()), (TOOL_APPROVAL, question));
    assert_eq!(interrupt.metadata["spool"]["card"]["guardrail"]["limit"], "runCostUsd");
}

#[test]
fn an_interrupt_expires_at_its_approvals_expiry_in_iso_8601_utc() {
    let mut approval = approval();
    approval.expires_at = 1_796_313_600_123;
    assert_eq!(Interrupt::of(&approval).expires_at, "2026-12-03T16:00:00.123Z");
}

/// A run whose prompt is followed by a call of `read`, then a steer the run took after
/// the tool's result, then its answer.
fn steered_run() -> Vec<Frame> {
    let read = json!({"path": "README.md"});
    let call = Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: read.clone() };
    let user = |index: u64, text: &str| FrameBody::LoopEvent {
        run_id: run_id(),
        message_index: Some(index),
        message_id: Some(format!("msg_01jd00000000000000000000{index:02}").parse().expect("valid id")),
        event: AgentEvent::MessageEnd { message: Message::user_text(text, 0) },
    };
    frames(vec![
        FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
        ev(None, AgentEvent::AgentStart {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(0), AgentEvent::MessageStart { message: Message::user_text("look around", 0) }),
        user(0, "look around"),
        ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![call], StopReason::ToolUse) }),
        ev(None, tool_started("call_1", "read", read)),
        ev(None, test_frames::tool_ended("call_1", "read", "# Test")),
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(3), AgentEvent::MessageStart { message: Message::user_text("mind the tests", 0) }),
        user(3, "mind the tests"),
        ev(Some(4), update(StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Noted.".into() })),
        ev(
            Some(4),
            AgentEvent::MessageEnd {
                message: assistant(vec![Content::Text { text: "Noted.".into() }], StopReason::Stop),
            },
        ),
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
    ])
}

#[test]
fn a_steer_is_a_user_text_message_and_the_prompt_is_not_sent_back() {
    let events = map_all(&mut AgUiStream::new(run_id()), &steered_run());
    let events: Vec<Value> = events.iter().map(|e| serde_json::to_value(e).expect("json")).collect();
    assert_eq!(user_texts(&events), [(format!("{}:3", sid()), "mind the tests".to_owned())], "{events:#?}");
    // Between the tool's result and the answer, as the run took it.
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let at = kinds.iter().position(|k| *k == "TEXT_MESSAGE_START").expect("a text message");
    assert_eq!(kinds[at - 1], "TOOL_CALL_RESULT", "{kinds:?}");
    assert_json_snapshot!("steered", events);
}

#[test]
fn a_run_continued_after_an_approval_shows_the_steer_it_takes() {
    // The continuation has no `agent_start`: every user message it takes is a steer.
    let frames = steered_run();
    let mut fold = AgUiStream::continuing(&approval(), None);
    let events = map_all(&mut fold, &frames[8..]);
    let events: Vec<Value> = events.iter().map(|e| serde_json::to_value(e).expect("json")).collect();
    assert_eq!(user_texts(&events), [(format!("{}:3", sid()), "mind the tests".to_owned())], "{events:#?}");
}

#[test]
fn a_snapshot_draws_the_steer_but_not_the_next_runs_prompt() {
    let read = Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: json!({"path": "a"}) };
    let messages = vec![
        indexed(1, 0, Message::user_text("look around", 0)),
        indexed(2, 1, assistant(vec![read], StopReason::ToolUse)),
        indexed(3, 2, tool_result("call_1", "# A")),
        indexed(4, 3, Message::user_text("mind the tests", 0)),
        indexed(5, 4, assistant(vec![Content::Text { text: "Noted.".into() }], StopReason::Stop)),
        indexed(6, 5, Message::user_text("next prompt", 0)),
    ];
    let mut state = snapshot_state(messages.clone());
    for prompt in [0, 5] {
        let timing = spool_protocol::frame::PromptTiming { user_message_index: prompt, ..Default::default() };
        state.prompt_timings.insert(prompt, timing);
    }
    let (_, events) = AgUiStream::from_snapshot(&stored_run(RunStatus::Completed), &state, &messages, None);
    let events: Vec<Value> = events.iter().map(|e| serde_json::to_value(e).expect("json")).collect();
    assert_eq!(user_texts(&events), [(format!("{}:3", sid()), "mind the tests".to_owned())], "{events:#?}");
}

/// A steer sent with files: its `TEXT_MESSAGE_START` carries them as AG-UI 1.0 content
/// parts (`image` / `document` with a `url` source, `metadata.filename`), live and drawn
/// from a snapshot alike; a steer without files has no `metadata`.
#[test]
fn a_steer_with_files_carries_them_as_content_parts_on_its_message_start() {
    let steer = test_frames::user_with_files("mind the tests", 0);
    let mut bodies: Vec<FrameBody> = steered_run().into_iter().map(|f| f.body).collect();
    for body in &mut bodies {
        if let FrameBody::LoopEvent {
            message_index: Some(3),
            event: AgentEvent::MessageStart { message } | AgentEvent::MessageEnd { message },
            ..
        } = body
        {
            *message = steer.clone();
        }
    }
    let starts = |events: &[AgUiEvent]| -> Vec<Value> {
        events
            .iter()
            .map(|e| serde_json::to_value(e).expect("json"))
            .filter(|e| e["type"] == "TEXT_MESSAGE_START" && e["role"] == "user")
            .collect()
    };
    let live = starts(&map_all(&mut AgUiStream::new(run_id()), &frames(bodies)));
    assert_eq!(live.len(), 1, "{live:#?}");
    assert_json_snapshot!(live[0]);

    let messages = vec![
        indexed(1, 0, Message::user_text("look around", 0)),
        indexed(2, 1, assistant(vec![Content::Text { text: "Looked.".into() }], StopReason::Stop)),
        indexed(4, 2, steer),
    ];
    let mut state = snapshot_state(messages.clone());
    let timing = spool_protocol::frame::PromptTiming { user_message_index: 0, ..Default::default() };
    state.prompt_timings.insert(0, timing);
    let (_, drawn) = AgUiStream::from_snapshot(&stored_run(RunStatus::Running), &state, &messages, None);
    let drawn = starts(&drawn);
    assert_eq!(drawn.len(), 1, "{drawn:#?}");
    assert_eq!(drawn[0]["metadata"], live[0]["metadata"], "a client that re-attaches sees the same files");

    let plain = starts(&map_all(&mut AgUiStream::new(run_id()), &steered_run()));
    assert_eq!(plain[0].get("metadata"), None);
}

#[test]
fn a_call_of_the_asked_turn_that_runs_after_the_decision_is_not_announced_again_on_any_path() {
    // The fixed run with the asking call first: the read runs after the decision.
    let mut bodies: Vec<FrameBody> = run_frames().into_iter().map(|f| f.body).collect();
    let is_read = |b: &FrameBody| {
        matches!(b, FrameBody::LoopEvent { event: AgentEvent::ToolExecutionStart { tool_call_id, .. }
            | AgentEvent::ToolExecutionEnd { tool_call_id, .. }, .. } if tool_call_id == "call_1")
    };
    let read: Vec<FrameBody> = bodies.iter().filter(|b| is_read(b)).cloned().collect();
    assert_eq!(read.len(), 2);
    bodies.retain(|b| !is_read(b));
    let ended = bodies
        .iter()
        .position(|b| matches!(b, FrameBody::LoopEvent { event: AgentEvent::ToolExecutionEnd { .. }, .. }))
        .expect("the write ends");
    bodies.splice(ended + 1..ended + 1, read);
    let frames = frames(bodies);
    let asked = asked_at(&frames);

    let whole = map_all(&mut AgUiStream::new(run_id()), &frames);
    let starts = whole.iter().filter(|e| matches!(e, AgUiEvent::ToolCallStart { .. })).count();
    assert_eq!(starts, 2, "each call announced once: {whole:?}");
    let before = map_all(&mut AgUiStream::new(run_id()), &frames[..=asked]).len() + 1;
    let continued = map_all(&mut AgUiStream::continuing(&approval(), None), &frames[asked + 1..]);
    assert_eq!(continued, whole[before..], "the live continuation");
    let muted = map_all(&mut AgUiStream::muted_until(&approval(), None), &frames);
    assert_eq!(muted, continued, "the continuation replayed from the run's start");
    assert!(
        continued
            .iter()
            .any(|e| matches!(e, AgUiEvent::ToolCallResult { tool_call_id, .. } if tool_call_id == "call_1"))
    );
}

#[test]
fn presence_inside_the_run_is_a_custom_event_apart_from_the_numbered_bytes() {
    let presence = spool_protocol::Presence { viewers: 2, answerers: 1, visible: 1, ..Default::default() };
    let body = || FrameBody::Presence { presence: presence.clone() };
    let plain = run_frames();
    let mut bodies: Vec<FrameBody> = plain.iter().map(|f| f.body.clone()).collect();
    bodies.insert(0, body());
    bodies.insert(3, body());
    let with = frames(bodies);
    let steps = |frames: &[Frame]| {
        let mut fold = AgUiStream::new(run_id());
        frames.iter().map(|f| fold.map(f)).collect::<Vec<_>>()
    };
    let bytes = |steps: &[Step]| steps.iter().map(|s| s.bytes.clone()).filter(|b| !b.is_empty()).collect::<Vec<_>>();
    let (before, after) = (steps(&plain), steps(&with));
    assert_eq!(bytes(&after), bytes(&before), "the events a stream numbers are the same");
    let sent: Vec<Bytes> = after.iter().filter_map(|s| s.presence.clone()).collect();
    assert_eq!(
        wire(&sent),
        [
            serde_json::json!({"type": "CUSTOM", "name": "spool.presence", "value": {"viewers": 2, "answerers": 1, "visible": 1}})
        ],
        "only the one after the run started"
    );
}
