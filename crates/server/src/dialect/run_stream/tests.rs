//! The run stream mapping's unit tests: a run's events with their dense sequence
//! (golden), interrupts, failed runs, resuming after an event, shared bytes, snapshots
//! and summaries.

use super::*;
use crate::dialect::test_frames::{
    self, approval_decided, assistant_at, frame, frames_from, indexed, owner, run_id, session_state, stored_run as run,
    tool_ended, tool_started,
};
use insta::assert_json_snapshot;
use spool_protocol::frame::ActiveRun;
use spool_protocol::{Content, SessionStatus, StopReason, Usage};
use std::sync::Arc;

fn other_run() -> RunId {
    "run_01jd0000000000000000000009".parse().unwrap()
}

fn ev(run: RunId, index: Option<u64>, event: AgentEvent) -> FrameBody {
    FrameBody::LoopEvent { run_id: run, message_index: index, message_id: None, event }
}

fn assistant(text: &str, stop: StopReason) -> Message {
    assistant_at(vec![Content::Text { text: text.into() }], Some(stop), 1_764_000_000_300)
}

fn state(messages: Vec<IndexedMessage>, active: Option<RunStatus>) -> SessionState {
    let mut s = session_state(messages);
    s.total = s.messages.last().map_or(0, |m| m.index + 1);
    if let Some(status) = active {
        s.status = SessionStatus::Busy;
        s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status });
    }
    s
}

fn approval() -> Approval {
    test_frames::stored_approval(
        ApprovalKind::ConfirmAction,
        serde_json::json!({"tool": "write", "argument": "out.txt", "change": "write out.txt (5 bytes)"}),
    )
}

fn text_delta(offset: usize, delta: &str) -> AgentEvent {
    AgentEvent::MessageUpdate {
        assistant_message_event: StreamDelta::TextDelta { content_index: 0, offset, delta: delta.into() },
    }
}

/// The frames of a run that reads a file, asks to write one, is approved, and
/// completes — with another run's frames and unmapped events mixed in.
fn tool_run_frames() -> Vec<Frame> {
    let r = run_id;
    let user = Message::user_text("tool: read {\"path\":\"README.md\"}", 1_764_000_000_000);
    let call = assistant("", StopReason::ToolUse);
    let answer = assistant("Tool read returned 3 lines", StopReason::Stop);
    let bodies = vec![
        ev(other_run(), None, AgentEvent::AgentSettled {}),
        FrameBody::RunAccepted { request_id: "req-1".into(), run_id: r() },
        FrameBody::State { state: Box::new(state(vec![], Some(RunStatus::Running))) },
        ev(r(), None, AgentEvent::AgentStart {}),
        ev(r(), None, AgentEvent::TurnStart {}),
        ev(r(), Some(0), AgentEvent::MessageStart { message: user.clone() }),
        ev(r(), Some(0), AgentEvent::MessageEnd { message: user.clone() }),
        ev(r(), Some(1), AgentEvent::MessageEnd { message: call.clone() }),
        ev(r(), None, tool_started("call_1", "read", serde_json::json!({"path": "README.md"}))),
        ev(r(), None, tool_ended("call_1", "read", "# Test project\n\nUsed by the server tests.\n")),
        ev(r(), None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }),
        ev(r(), None, approval_decided(&approval(), "once", Some(owner()))),
        ev(
            r(),
            Some(3),
            AgentEvent::MessageUpdate {
                assistant_message_event: StreamDelta::ThinkingDelta { content_index: 0, offset: 0, delta: "hm".into() },
            },
        ),
        ev(r(), Some(3), text_delta(0, "Tool read")),
        ev(r(), Some(3), text_delta(9, " returned 3 lines")),
        ev(other_run(), Some(3), text_delta(0, "not this run")),
        ev(r(), Some(3), AgentEvent::MessageEnd { message: answer.clone() }),
        ev(r(), None, AgentEvent::TurnEnd {}),
        ev(r(), None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        FrameBody::State {
            state: Box::new(state(
                vec![
                    indexed(10, 0, user),
                    indexed(11, 1, call),
                    indexed(
                        12,
                        2,
                        Message::ToolResult {
                            tool_call_id: "call_1".into(),
                            tool_name: "read".into(),
                            content: vec![Content::Text { text: "# Test project".into() }],
                            is_error: false,
                            timestamp: 0,
                            diff: None,
                        },
                    ),
                    indexed(13, 3, answer),
                ],
                None,
            )),
        },
        ev(r(), None, AgentEvent::AgentSettled {}),
    ];
    frames_from(7, bodies)
}

fn map_all(fold: &mut RunStream, frames: &[Frame]) -> Vec<RunEvent> {
    frames.iter().filter_map(|f| fold.push(f)).collect()
}

/// Where the frame of event `n` stands in `frames`, as the engine marks it.
fn frame_of_event(frames: &[Frame], n: u64) -> usize {
    let mut count = RunCount::new(run_id());
    frames.iter().position(|f| count.step(&f.body) == Some(n)).expect("the run has that many events")
}

#[test]
fn a_run_maps_to_seed_003_events_with_a_dense_sequence() {
    let mut fold = RunStream::new(run_id());
    let events = map_all(&mut fold, &tool_run_frames());
    assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(fold.finished());
    assert_json_snapshot!(events);
}

#[test]
fn the_same_frames_always_number_the_same() {
    let frames = tool_run_frames();
    let once = map_all(&mut RunStream::new(run_id()), &frames);
    let again = map_all(&mut RunStream::new(run_id()), &frames);
    assert_eq!(once, again);
}

#[test]
fn frames_before_the_run_started_map_to_nothing() {
    let frames = tool_run_frames();
    let accepted = frames.iter().position(|f| matches!(f.body, FrameBody::RunAccepted { .. })).unwrap();
    let mut fold = RunStream::new(run_id());
    assert!(map_all(&mut fold, &frames[accepted + 1..]).is_empty(), "without run.accepted the start is unknown");
}

#[test]
fn an_interrupt_waits_until_its_approval_is_resolved() {
    let frames = tool_run_frames();
    let mut fold = RunStream::new(run_id());
    let requested = frames
        .iter()
        .position(|f| matches!(&f.body, FrameBody::LoopEvent { event: AgentEvent::ApprovalRequested { .. }, .. }))
        .unwrap();
    let events = map_all(&mut fold, &frames[..=requested]);
    assert_eq!(events.last().unwrap().kind(), "interrupt");
    assert_eq!(fold.waiting(), Some(&approval().id));
    map_all(&mut fold, &frames[requested + 1..requested + 2]);
    assert_eq!(fold.waiting(), None);
}

#[test]
fn a_failed_run_ends_with_the_error_its_agent_end_carries() {
    let mut fold = RunStream::new(run_id());
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(run_id(), Some(1), text_delta(0, "partial")),
            ev(
                run_id(),
                None,
                AgentEvent::AgentEnd {
                    status: "failed".into(),
                    usage: Usage::default(),
                    error: Some(RunError { code: "model_error".into(), message: "the provider went away".into() }),
                },
            ),
        ],
    );
    assert!(fold.push(&frames[0]).is_some() && fold.push(&frames[1]).is_some());
    let error = fold.push(&frames[2]).expect("the run's last event");
    assert!(fold.finished());
    assert_json_snapshot!(error);
}

#[test]
fn the_fold_resumed_after_an_event_maps_the_rest_as_from_the_start() {
    let frames = tool_run_frames();
    let whole = map_all(&mut RunStream::new(run_id()), &frames);
    let at = frame_of_event(&frames, 3);
    let rest = map_all(&mut RunStream::resume(RunCount::after(run_id(), 3), None), &frames[at + 1..]);
    assert_eq!(rest, whole[3..], "same events, same numbers, same done");
}

#[test]
fn streams_of_one_run_share_each_events_bytes_whatever_their_after() {
    use crate::dialect::shared::{Follow, Forms};
    let forms = Forms::<RunForm, RunStream>::default();
    let frames = tool_run_frames();
    let whole: Vec<(u64, Bytes)> =
        map_all(&mut RunStream::new(run_id()), &frames).iter().map(|e| (e.sequence, e.to_sse())).collect();
    // One stream from the run's start, one re-attached after event 3 (from its frame).
    let at = frame_of_event(&frames, 3);
    let mut first = Follow::new(RunForm::Run(run_id()), RunStream::new(run_id()));
    let mut late = Follow::new(RunForm::Run(run_id()), RunStream::resume(RunCount::after(run_id(), 3), None));
    let mut got = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let out = first.map(&forms, f).expect("mapped");
        got.extend(out.event.clone());
        if i > at {
            let theirs = late.map(&forms, f).expect("mapped");
            assert!(Arc::ptr_eq(&out, &theirs), "frame {i}: one mapping, the same bytes");
        }
    }
    assert_eq!(got, whole);
    // A stream numbered by a client's own last sequence maps alone.
    assert_ne!(RunForm::of(&run_id(), &Numbering::After(5)), RunForm::of(&run_id(), &Numbering::After(5)));
}

#[test]
fn a_snapshot_of_a_streaming_run_carries_its_text_and_tool_calls_at_the_runs_sequence() {
    let user = indexed(10, 0, Message::user_text("tool: read {}", 1));
    let mut call = assistant("Reading. ", StopReason::ToolUse);
    if let Message::Assistant { content, .. } = &mut call {
        for id in ["call_1", "call_2"] {
            let arguments = serde_json::json!({"path": "README.md"});
            content.push(Content::ToolCall { id: id.into(), name: "read".into(), arguments });
        }
    }
    let call = indexed(11, 1, call);
    let result = Message::ToolResult {
        tool_call_id: "call_1".into(),
        tool_name: "read".into(),
        content: vec![Content::Text { text: "# Test project\n\nUsed by the server tests.\n".into() }],
        is_error: false,
        timestamp: 0,
        diff: None,
    };
    let mut s = state(vec![indexed(9, 0, Message::user_text("older", 0))], None);
    s.messages = vec![user.clone(), call.clone(), indexed(12, 2, result)];
    s.status = SessionStatus::Busy;
    s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
    s.drafts.insert(3, assistant("Tool read ret", StopReason::Stop));
    // Neither call has started as far as this counter knows: only the one with a
    // result shows; `call_2` waits for its `tool_started`.
    let announced = RunCount::after(run_id(), 41);
    let (_, events) =
        RunStream::from_snapshot(&run(RunStatus::Running, None), &s, &s.messages, Numbering::Run(announced));
    let RunEventBody::Snapshot { tools, .. } = &events[0].body else { panic!("{events:?}") };
    assert_eq!(
        tools.iter().map(|t| (t.call_id.as_str(), t.status)).collect::<Vec<_>>(),
        [("call_1", ToolState::Success)]
    );
    // Event 41 was `call_2`'s `tool_started`: it runs.
    let mut count = RunCount::after(run_id(), 40);
    let start = AgentEvent::ToolExecutionStart {
        tool_call_id: "call_2".into(),
        tool_name: "read".into(),
        args: serde_json::json!({"path": "README.md"}),
    };
    assert_eq!(count.step(&ev(run_id(), None, start)), Some(41));
    let (mut fold, events) =
        RunStream::from_snapshot(&run(RunStatus::Running, None), &s, &s.messages, Numbering::Run(count));
    assert_json_snapshot!(events);
    // Live frames continue the run's numbering.
    let next = fold.push(&frame(90, ev(run_id(), Some(3), text_delta(13, "urned"))));
    assert!(matches!(next, Some(RunEvent { sequence: 42, .. })), "{next:?}");
}

#[test]
fn a_snapshot_of_a_parked_run_repeats_its_interrupt() {
    let mut s = state(vec![], Some(RunStatus::Interrupted));
    s.pending_approvals.push(approval());
    let (fold, events) = RunStream::from_snapshot(&run(RunStatus::Interrupted, None), &s, &[], Numbering::After(0));
    assert_eq!(events.iter().map(RunEvent::kind).collect::<Vec<_>>(), ["snapshot", "interrupt"]);
    assert_eq!(fold.waiting(), Some(&approval().id));
    // Numbered by the run, the interrupt keeps its own number and the snapshot
    // stands for the events before it.
    let mut count = RunCount::new(run_id());
    count.step(&FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() });
    count.step(&ev(run_id(), None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }));
    let (_, events) = RunStream::from_snapshot(&run(RunStatus::Interrupted, None), &s, &[], Numbering::Run(count));
    assert_eq!(
        events.iter().map(|e| (e.kind(), e.sequence)).collect::<Vec<_>>(),
        [("snapshot".into(), 1), ("interrupt".into(), 2)]
    );
}

#[test]
fn a_snapshot_of_a_settled_run_ends_with_done_or_error() {
    let messages = vec![
        indexed(10, 4, Message::user_text("echo: hi", 1)),
        indexed(11, 5, assistant("hi", StopReason::Stop)),
        indexed(12, 6, Message::user_text("next", 2)),
        indexed(13, 7, assistant("later run", StopReason::Stop)),
    ];
    let mut done_run = run(RunStatus::Completed, None);
    done_run.user_message_index = 4;
    let s = state(vec![], None);
    let (fold, events) = RunStream::from_snapshot(&done_run, &s, &messages, Numbering::After(3));
    assert!(fold.finished());
    assert_json_snapshot!("settled_completed", events);
    let cancelled =
        run(RunStatus::Cancelled, Some(RunError { code: "aborted".into(), message: "the run was aborted".into() }));
    let (_, events) = RunStream::from_snapshot(&cancelled, &s, &[], Numbering::After(0));
    assert_eq!(events.iter().map(RunEvent::kind).collect::<Vec<_>>(), ["snapshot", "error"]);
    assert_eq!(events[1].body, RunEventBody::Error { code: "aborted".into(), message: "the run was aborted".into() });
}

#[test]
fn summaries_are_one_short_line() {
    assert_eq!(summary(""), "");
    assert_eq!(summary("\n\nonly\n"), "only");
    assert_eq!(summary("a\nb\nc"), "a (+2 more lines)");
    assert_eq!(summary("a\nb"), "a (+1 more line)");
    let long = "x".repeat(300);
    assert_eq!(summary(&long).chars().count(), SUMMARY_CHARS + 1);
}

/// A run whose prompt is answered with a call of `read`, that takes a steer after the
/// tool's result, and answers.
fn steered_run_frames() -> Vec<Frame> {
    let r = run_id;
    let prompt = Message::user_text("look around", 1_764_000_000_000);
    let steer = Message::user_text("mind the tests", 1_764_000_000_100);
    let steer_id: MessageId = "msg_01jd0000000000000000000014".parse().expect("valid id");
    let bodies = vec![
        FrameBody::RunAccepted { request_id: "req-1".into(), run_id: r() },
        ev(r(), None, AgentEvent::AgentStart {}),
        ev(r(), None, AgentEvent::TurnStart {}),
        ev(r(), Some(0), AgentEvent::MessageStart { message: prompt.clone() }),
        ev(r(), Some(0), AgentEvent::MessageEnd { message: prompt }),
        ev(r(), Some(1), AgentEvent::MessageEnd { message: assistant("", StopReason::ToolUse) }),
        ev(r(), None, tool_started("call_1", "read", serde_json::json!({"path": "README.md"}))),
        ev(r(), None, tool_ended("call_1", "read", "# Test project")),
        ev(r(), None, AgentEvent::TurnEnd {}),
        ev(r(), None, AgentEvent::TurnStart {}),
        ev(r(), Some(3), AgentEvent::MessageStart { message: steer.clone() }),
        FrameBody::LoopEvent {
            run_id: r(),
            message_index: Some(3),
            message_id: Some(steer_id),
            event: AgentEvent::MessageEnd { message: steer },
        },
        ev(r(), Some(4), text_delta(0, "Noted.")),
        ev(r(), Some(4), AgentEvent::MessageEnd { message: assistant("Noted.", StopReason::Stop) }),
        ev(r(), None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        FrameBody::State { state: Box::new(state(vec![], None)) },
    ];
    frames_from(1, bodies)
}

#[test]
fn a_steer_is_a_user_message_event_of_the_run_and_its_prompt_is_not() {
    let events = map_all(&mut RunStream::new(run_id()), &steered_run_frames());
    assert_eq!(
        events.iter().map(|e| (e.kind(), e.sequence)).collect::<Vec<_>>(),
        [
            ("run_started".into(), 1),
            ("tool_started".into(), 2),
            ("tool_finished".into(), 3),
            ("user_message".into(), 4),
            ("text_delta".into(), 5),
            ("done".into(), 6),
        ]
    );
    assert_json_snapshot!("steered", events);
    // A stream resumed after the `tool_finished` (a re-attach) numbers it the same.
    let frames = steered_run_frames();
    let rest = map_all(&mut RunStream::resume(RunCount::after(run_id(), 3), None), &frames[8..]);
    assert_eq!(rest, events[3..]);
    // So does a run continued from an approval: it has no `agent_start`.
    let parked = RunCount::parked(run_id(), 3, approval().id);
    let rest = map_all(&mut RunStream::resume(parked, None), &frames[8..]);
    assert_eq!(rest, events[3..]);
}

#[test]
fn a_snapshot_holds_what_the_run_did_after_a_steer_and_not_the_next_run() {
    let user = |n, index, text: &str| indexed(n, index, Message::user_text(text, 1));
    let messages = vec![
        user(10, 0, "look around"),
        indexed(11, 1, assistant("Looking. ", StopReason::ToolUse)),
        user(12, 2, "mind the tests"),
        indexed(13, 3, assistant("Noted.", StopReason::Stop)),
        user(14, 4, "the next prompt"),
        indexed(15, 5, assistant("later run", StopReason::Stop)),
    ];
    let mut s = state(messages.clone(), None);
    for prompt in [0, 4] {
        let timing = spool_protocol::frame::PromptTiming { user_message_index: prompt, ..Default::default() };
        s.prompt_timings.insert(prompt, timing);
    }
    let (_, events) = RunStream::from_snapshot(&run(RunStatus::Completed, None), &s, &messages, Numbering::After(0));
    let RunEventBody::Snapshot { text, steers, .. } = &events[0].body else { panic!("a snapshot first: {events:?}") };
    assert_eq!(text, "Looking. Noted.");
    let steer = RunSteer { message_id: messages[2].id.clone(), text: "mind the tests".into(), files: vec![] };
    assert_eq!(steers, &[steer]);
    assert_eq!(events[1].body, RunEventBody::Done { message_id: Some(messages[3].id.clone()) });
}

/// A steer sent with files: its `user_message` event lists them (the attachment records,
/// each with the URL its owner fetches it from), and so does a snapshot's `steers`.
#[test]
fn a_steer_with_files_lists_them_live_and_in_a_snapshot() {
    let with_files = test_frames::user_with_files("mind the tests", 1);
    let mut frames = steered_run_frames();
    for f in &mut frames {
        if let FrameBody::LoopEvent { event: AgentEvent::MessageEnd { message }, .. } = &mut f.body
            && message.text() == "mind the tests"
        {
            *message = with_files.clone();
        }
    }
    let events = map_all(&mut RunStream::new(run_id()), &frames);
    let steer = events.iter().find(|e| e.kind() == "user_message").expect("the steer");
    assert_json_snapshot!(steer);

    let messages = vec![
        indexed(10, 0, Message::user_text("look around", 1)),
        indexed(11, 1, assistant("Looking. ", StopReason::ToolUse)),
        indexed(12, 2, with_files.clone()),
    ];
    let mut s = state(messages.clone(), Some(RunStatus::Running));
    s.prompt_timings.insert(0, spool_protocol::frame::PromptTiming { user_message_index: 0, ..Default::default() });
    let (_, events) = RunStream::from_snapshot(&run(RunStatus::Running, None), &s, &messages, Numbering::After(0));
    let RunEventBody::Snapshot { steers, .. } = &events[0].body else { panic!("a snapshot first: {events:?}") };
    assert_eq!(steers[0].files, with_files.attachments());
    let RunEventBody::UserMessage { files, .. } = &steer.body else { panic!("a user message: {steer:?}") };
    assert_eq!(&steers[0].files, files, "the snapshot lists what the event did");
}

#[test]
fn presence_inside_the_run_is_an_unnumbered_event_and_the_numbers_stay_as_they_were() {
    let presence = Presence { viewers: 2, answerers: 1, visible: 1, ..Default::default() };
    let plain = tool_run_frames();
    // The same run with presence before its start, in its middle and after its end.
    let mut bodies: Vec<FrameBody> = plain.iter().map(|f| f.body.clone()).collect();
    let body = || FrameBody::Presence { presence: presence.clone() };
    bodies.insert(0, body());
    bodies.insert(5, body());
    bodies.push(body());
    let with = frames_from(1, bodies);
    let steps = |frames: &[Frame]| {
        let mut fold = RunStream::new(run_id());
        frames.iter().map(|f| fold.map(f)).collect::<Vec<Step>>()
    };
    let numbered = |steps: &[Step]| steps.iter().filter_map(|s| s.event.clone()).collect::<Vec<_>>();
    let (before, after) = (steps(&plain), steps(&with));
    assert_eq!(numbered(&after), numbered(&before), "presence takes no number");
    let sent: Vec<&Bytes> = after.iter().filter_map(|s| s.presence.as_ref()).collect();
    assert_eq!(sent.len(), 1, "only the one inside the run");
    let text = std::str::from_utf8(sent[0]).expect("utf-8");
    let data = text.strip_prefix("event: presence\ndata: ").expect("named, no id line").trim_end();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(data).expect("JSON"),
        serde_json::json!({"type": "presence", "runId": run_id(), "viewers": 2, "answerers": 1, "visible": 1})
    );
}
