//! Golden tests of the OpenCode mapping: native frames in, OpenCode events out, and the
//! stored history in OpenCode's shapes. A changed snapshot is a wire-format change.
//!
//! Besides the goldens, [`fold`] plays an OpenCode client — `message.updated` and
//! `message.part.updated` replace, `message.part.delta` appends — and checks that what
//! a client ends up with from the stream is what the history endpoint returns.

use super::mapper::{Announce, Mapper};
use super::records::{self, Scope};
use super::wire::*;
use crate::dialect::test_frames::{self, git_state, run_id, sid};
use insta::{assert_json_snapshot, assert_snapshot};
use serde_json::{Value, json};
use spool_engine::view::initial_state;
use spool_protocol::frame::{ActiveRun, FrameBody, SessionState, ToolExecution, ToolStatus};
use spool_protocol::*;
use std::collections::BTreeMap;

const T0: i64 = 1_764_000_000_000;

fn scope() -> Scope {
    Scope { session_id: sid(), directory: "/work/project".into(), default_model: "scripted".into() }
}

fn session() -> Session {
    Session { title: "Write a file".into(), created_at: T0, updated_at: T0 + 1, ..test_frames::session() }
}

fn approval() -> Approval {
    Approval {
        tool_call_id: "call_1".into(),
        payload: json!({"tool": "write", "argument": "x.txt", "change": "write 2 bytes to x.txt", "reason": "asks"}),
        created_at: T0 + 40,
        expires_at: T0 + 86_400_000,
        ..test_frames::stored_approval(ApprovalKind::ConfirmAction, Value::Null)
    }
}

/// A session state: `busy`, with these pending approvals.
fn state(busy: bool, pending: Vec<Approval>) -> SessionState {
    let mut s = initial_state(session(), vec![], 0);
    if busy {
        s.status = SessionStatus::Busy;
        s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
    }
    s.pending_approvals = pending;
    s
}

fn assistant(content: Vec<Content>, stop: Option<StopReason>, usage: Usage, error: Option<&str>) -> Message {
    Message::Assistant {
        content,
        stop_reason: stop,
        usage,
        model: "scripted".into(),
        error_message: error.map(str::to_owned),
        timestamp: T0 + 10,
    }
}

fn text(t: &str) -> Content {
    Content::Text { text: t.into() }
}

fn usage() -> Usage {
    Usage { input: 12, output: 5, reasoning: 2, cache_read: 3, cache_write: 1, cost: 0.0042, estimated: false }
}

fn tool_result(call: &str, name: &str, result: &str, is_error: bool) -> Message {
    Message::ToolResult {
        tool_call_id: call.into(),
        tool_name: name.into(),
        content: vec![text(result)],
        is_error,
        timestamp: T0 + 60,
        diff: None,
    }
}

/// One native input: a frame body, or a loop event at an optional message index.
enum In {
    Body(FrameBody),
    Ev(Option<u64>, AgentEvent),
}

fn ev(index: Option<u64>, event: AgentEvent) -> In {
    In::Ev(index, event)
}

fn delta(index: u64, d: StreamDelta) -> In {
    In::Ev(Some(index), AgentEvent::MessageUpdate { assistant_message_event: d })
}

fn body(b: FrameBody) -> In {
    In::Body(b)
}

fn busy_state() -> In {
    body(FrameBody::State { state: Box::new(state(true, vec![])) })
}

fn idle_state() -> In {
    body(FrameBody::State { state: Box::new(state(false, vec![])) })
}

/// Feeds the inputs; part times are `T0 + 1000 + k` for the k-th input.
fn run(mapper: &mut Mapper, inputs: Vec<In>) -> Vec<Event> {
    let mut out = Vec::new();
    for (k, input) in inputs.into_iter().enumerate() {
        let b = match input {
            In::Body(b) => b,
            In::Ev(message_index, event) => {
                FrameBody::LoopEvent { run_id: run_id(), message_index, message_id: None, event }
            }
        };
        out.extend(mapper.map(&b, T0 + 1000 + k as i64));
    }
    out
}

fn user_turn(prompt: &str) -> Vec<In> {
    user_turn_of(Message::user_text(prompt, T0))
}

/// The run's opening, up to its user message `user` (index 0) committed.
fn user_turn_of(user: Message) -> Vec<In> {
    vec![
        body(FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() }),
        busy_state(),
        ev(None, AgentEvent::AgentStart {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(0), AgentEvent::MessageStart { message: user.clone() }),
        ev(Some(0), AgentEvent::MessageEnd { message: user }),
    ]
}

fn settle(status: &str) -> Vec<In> {
    vec![
        ev(None, AgentEvent::AgentEnd { status: status.into(), usage: usage(), error: None }),
        idle_state(),
        ev(None, AgentEvent::AgentSettled {}),
    ]
}

/// A run that thinks, answers in three deltas (one repeated), and stops.
fn text_run() -> Vec<In> {
    let answer = assistant(
        vec![Content::Thinking { thinking: "hm".into() }, text("Hello 🌍")],
        Some(StopReason::Stop),
        usage(),
        None,
    );
    let mut inputs = user_turn("echo: Hello 🌍");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::ThinkingStart { content_index: 0 }),
        delta(1, StreamDelta::ThinkingDelta { content_index: 0, offset: 0, delta: "hm".into() }),
        delta(1, StreamDelta::ThinkingEnd { content_index: 0 }),
        delta(1, StreamDelta::TextStart { content_index: 1 }),
        delta(1, StreamDelta::TextDelta { content_index: 1, offset: 0, delta: "Hello".into() }),
        // A repeated delta (offset already passed) sends nothing.
        delta(1, StreamDelta::TextDelta { content_index: 1, offset: 0, delta: "Hello".into() }),
        delta(1, StreamDelta::TextDelta { content_index: 1, offset: 5, delta: " 🌍".into() }),
        delta(1, StreamDelta::TextEnd { content_index: 1 }),
        delta(1, StreamDelta::Done { stop_reason: StopReason::Stop }),
        ev(Some(1), AgentEvent::MessageEnd { message: answer }),
        ev(None, AgentEvent::TurnEnd {}),
    ]);
    inputs.extend(settle("completed"));
    inputs
}

fn write_call() -> Content {
    Content::ToolCall {
        id: "call_1".into(),
        name: "write".into(),
        arguments: json!({"path": "x.txt", "content": "hi"}),
    }
}

/// The committed messages of [`tool_run`], for comparing with the history.
fn tool_run_messages() -> Vec<IndexedMessage> {
    let msg = |index: u64, message: Message| IndexedMessage { id: MessageId::new(), index, message };
    vec![
        msg(0, Message::user_text("tool: write", T0)),
        msg(1, assistant(vec![write_call()], Some(StopReason::ToolUse), usage(), None)),
        msg(2, tool_result("call_1", "write", "wrote 2 bytes", false)),
        msg(3, assistant(vec![text("Tool write returned 1 line")], Some(StopReason::Stop), usage(), None)),
    ]
}

/// A run whose tool call asks, is approved, runs, and is summarized by a second step.
fn tool_run() -> Vec<In> {
    let m = tool_run_messages();
    let mut inputs = user_turn("tool: write");
    let mut asking = state(true, vec![approval()]);
    asking.active_run.as_mut().expect("busy").status = RunStatus::Interrupted;
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::ToolcallStart { content_index: 0, id: "call_1".into(), name: "write".into() }),
        delta(1, StreamDelta::ToolcallDelta { content_index: 0, offset: 0, delta: "{\"path\":".into() }),
        delta(1, StreamDelta::ToolcallEnd { content_index: 0 }),
        delta(1, StreamDelta::Done { stop_reason: StopReason::ToolUse }),
        ev(Some(1), AgentEvent::MessageEnd { message: m[1].message.clone() }),
        body(FrameBody::State { state: Box::new(asking) }),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }),
        busy_state(),
        ev(
            None,
            AgentEvent::ApprovalResolved {
                approval_id: approval().id,
                decision: "once".into(),
                actor: None,
                message: None,
            },
        ),
        ev(
            None,
            AgentEvent::ToolExecutionStart {
                tool_call_id: "call_1".into(),
                tool_name: "write".into(),
                args: json!({"path": "x.txt", "content": "hi"}),
            },
        ),
        ev(
            None,
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "call_1".into(),
                tool_name: "write".into(),
                result: "wrote 2 bytes".into(),
                is_error: false,
            },
        ),
        ev(Some(2), AgentEvent::MessageStart { message: m[2].message.clone() }),
        ev(Some(2), AgentEvent::MessageEnd { message: m[2].message.clone() }),
        ev(None, AgentEvent::TurnEnd {}),
        ev(None, AgentEvent::TurnStart {}),
        ev(Some(3), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(3, StreamDelta::TextStart { content_index: 0 }),
        delta(3, StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Tool write".into() }),
        delta(3, StreamDelta::TextDelta { content_index: 0, offset: 10, delta: " returned 1 line".into() }),
        delta(3, StreamDelta::TextEnd { content_index: 0 }),
        ev(Some(3), AgentEvent::MessageEnd { message: m[3].message.clone() }),
        ev(None, AgentEvent::TurnEnd {}),
    ]);
    inputs.extend(settle("completed"));
    inputs
}

fn json_of(events: &[Event]) -> Value {
    serde_json::to_value(events).expect("events serialize")
}

#[test]
fn a_text_run() {
    let mut mapper = Mapper::new(scope());
    let events = run(&mut mapper, text_run());
    assert!(!mapper.is_active(), "an idle session is not followed any longer");
    assert_json_snapshot!(json_of(&events));
}

#[test]
fn a_tool_run_with_a_permission() {
    let mut mapper = Mapper::new(scope());
    let events = run(&mut mapper, tool_run());
    assert_json_snapshot!(json_of(&events));
}

#[test]
fn seed_004_legacy_deltas_repeat_the_text_so_far() {
    let mut mapper = Mapper::new(scope()).legacy_deltas(true);
    let events = run(&mut mapper, text_run());
    let legacy: Vec<&Event> =
        events.iter().filter(|e| matches!(e, Event::PartUpdated { delta: Some(_), .. })).collect();
    assert_eq!(legacy.len(), 3, "one per fresh delta (thinking, and the two text deltas)");
    assert_json_snapshot!(serde_json::to_value(&legacy).expect("serializes"));
}

#[test]
fn an_aborted_run_and_a_failed_run() {
    let mut mapper = Mapper::new(scope());
    let mut inputs = user_turn("stream: 5000");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::TextStart { content_index: 0 }),
        delta(1, StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "w1".into() }),
        delta(1, StreamDelta::TextEnd { content_index: 0 }),
        ev(
            Some(1),
            AgentEvent::MessageEnd {
                message: assistant(vec![text("w1")], Some(StopReason::Aborted), Usage::default(), None),
            },
        ),
    ]);
    inputs.extend(settle("cancelled"));
    let aborted = run(&mut mapper, inputs);

    let mut inputs = user_turn("anything");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        ev(
            Some(1),
            AgentEvent::MessageEnd {
                message: assistant(vec![], Some(StopReason::Error), Usage::default(), Some("bad credentials")),
            },
        ),
    ]);
    inputs.extend(settle("failed"));
    let failed = run(&mut mapper, inputs);
    assert_json_snapshot!(json!({ "aborted": json_of(&aborted), "failed": json_of(&failed) }));
}

#[test]
fn a_run_cancelled_while_a_permission_waits() {
    let mut mapper = Mapper::new(scope());
    let m = tool_run_messages();
    let mut inputs = user_turn("tool: write");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::ToolcallStart { content_index: 0, id: "call_1".into(), name: "write".into() }),
        ev(Some(1), AgentEvent::MessageEnd { message: m[1].message.clone() }),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }),
        ev(
            None,
            AgentEvent::ApprovalResolved {
                approval_id: approval().id,
                decision: "cancelled".into(),
                actor: None,
                message: None,
            },
        ),
    ]);
    inputs.extend(settle("cancelled"));
    let events = run(&mut mapper, inputs);
    assert_json_snapshot!(json_of(&events));
}

#[test]
fn joining_mid_run_replays_it_as_deltas_and_continues_at_the_right_offset() {
    // Committed: the user message (4), a step that wrote a file (5) and its result (6);
    // streaming: a draft (7) whose text so far is "Partial an".
    let msg = |index: u64, message: Message| IndexedMessage { id: MessageId::new(), index, message };
    let earlier = vec![
        msg(0, Message::user_text("an earlier run", T0 - 100)),
        msg(1, assistant(vec![text("its answer")], Some(StopReason::Stop), usage(), None)),
    ];
    let current = vec![
        msg(4, Message::user_text("tool: write", T0)),
        msg(5, assistant(vec![write_call()], Some(StopReason::ToolUse), usage(), None)),
        msg(6, tool_result("call_1", "write", "wrote 2 bytes", false)),
    ];
    let mut s = initial_state(session(), earlier.into_iter().chain(current).collect(), 7);
    s.status = SessionStatus::Busy;
    s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
    s.tool_executions.insert(
        "call_1".into(),
        ToolExecution {
            tool_call_id: "call_1".into(),
            tool_name: "write".into(),
            args: json!({"path": "x.txt", "content": "hi"}),
            status: ToolStatus::Success,
            result: Some("wrote 2 bytes".into()),
            output: None,
            output_truncated: false,
            diff: None,
        },
    );
    s.drafts.insert(7, assistant(vec![text("Partial an")], None, Usage::default(), None));
    let mut mapper = Mapper::new(scope()).run_start(Some(4));
    let mut events = run(&mut mapper, vec![body(FrameBody::Snapshot { state: Box::new(s) })]);
    assert!(mapper.is_active());
    // Live frames after the snapshot: one overlapping what the snapshot carried, one new.
    events.extend(run(
        &mut mapper,
        vec![
            delta(7, StreamDelta::TextDelta { content_index: 0, offset: 5, delta: "al answer".into() }),
            delta(7, StreamDelta::TextDelta { content_index: 0, offset: 14, delta: "!".into() }),
        ],
    ));
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            Event::PartDelta { message_id, delta, .. } if message_id.ends_with("0000000007") => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Partial answer!");
    assert!(
        !serde_json::to_string(&events).expect("serializes").contains("its answer"),
        "the earlier run is not replayed"
    );
    assert_json_snapshot!(json_of(&events));
}

#[test]
fn a_snapshot_announces_a_new_or_changed_session_and_stays_quiet_when_idle() {
    let snap = || vec![body(FrameBody::Snapshot { state: Box::new(state(false, vec![])) })];
    let created = run(&mut Mapper::new(scope()).announce(Announce::Created), snap());
    let changed = run(&mut Mapper::new(scope()).announce(Announce::Updated), snap());
    let mut quiet = Mapper::new(scope());
    assert!(run(&mut quiet, snap()).is_empty());
    assert!(!quiet.is_active());
    assert_eq!(created.len(), 1);
    assert!(matches!(changed.as_slice(), [Event::SessionUpdated { .. }]));
    assert_json_snapshot!(json_of(&created));
}

/// A client back with its `Last-Event-ID` follows a session its discovery saw busy; the
/// run ends before the follow's snapshot, which shows the session idle. The client is
/// told the answer it missed and that the session is idle (it once heard nothing and
/// waited for `session.idle` forever); a session idle since before it left stays quiet.
#[test]
fn a_reconnecting_clients_snapshot_of_a_session_that_just_ended_tells_the_end() {
    let mut s = state(false, vec![]);
    s.messages = vec![
        IndexedMessage { id: MessageId::new(), index: 0, message: Message::user_text("echo: hi", T0) },
        IndexedMessage {
            id: MessageId::new(),
            index: 1,
            message: assistant(vec![text("hi")], Some(StopReason::Stop), usage(), None),
        },
    ];
    s.total = 2;
    let snap = || vec![body(FrameBody::Snapshot { state: Box::new(s.clone()) })];
    let events = run(&mut Mapper::new(scope()).since(Some(T0 + 5)), snap());
    let names: Vec<Value> =
        events.iter().map(|e| serde_json::to_value(e).expect("serializes")["type"].clone()).collect();
    assert_eq!(names.last(), Some(&json!("session.idle")), "{names:?}");
    assert!(names.contains(&json!("message.updated")), "{names:?}");
    let earlier = run(&mut Mapper::new(scope()).since(Some(T0 + 500)), snap());
    assert!(earlier.is_empty(), "{earlier:?}");
}

#[test]
fn a_snapshot_with_a_waiting_permission_is_active_and_asks_again() {
    let mut s = state(true, vec![approval()]);
    s.messages = vec![
        IndexedMessage { id: MessageId::new(), index: 0, message: Message::user_text("tool: write", T0) },
        IndexedMessage {
            id: MessageId::new(),
            index: 1,
            message: assistant(vec![write_call()], Some(StopReason::ToolUse), usage(), None),
        },
    ];
    s.total = 2;
    let mut mapper = Mapper::new(scope()).run_start(Some(0));
    let events = run(&mut mapper, vec![body(FrameBody::Snapshot { state: Box::new(s) })]);
    let asked: Vec<&Event> = events.iter().filter(|e| matches!(e, Event::PermissionAsked(_))).collect();
    let [Event::PermissionAsked(p)] = asked.as_slice() else { panic!("one permission.asked: {events:?}") };
    assert_eq!(p.tool.message_id, super::ids::message_id(&sid(), 1));
    let tool_states: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::PartUpdated { part: Part { kind: PartKind::Tool { state, .. }, .. }, .. } => Some(match state {
                ToolState::Pending { .. } => "pending",
                ToolState::Running { .. } => "running",
                ToolState::Completed { .. } => "completed",
                ToolState::Error { .. } => "error",
            }),
            _ => None,
        })
        .collect();
    assert_eq!(tool_states, ["pending", "pending"], "the asking call is not running");
    assert!(mapper.is_active());
}

#[test]
fn retries_and_compaction() {
    let mut mapper = Mapper::new(scope());
    let events = run(
        &mut mapper,
        vec![
            ev(
                None,
                AgentEvent::AutoRetryStart {
                    attempt: 1,
                    max_attempts: 3,
                    delay_ms: 2000,
                    error_message: "overloaded".into(),
                },
            ),
            ev(None, AgentEvent::AutoRetryEnd { attempt: 1, success: true }),
            ev(None, AgentEvent::CompactionEnd { summarized_before: 4, tokens_after: 10, success: true }),
        ],
    );
    assert_json_snapshot!(json_of(&events));
}

// ---- the stream agrees with the history -------------------------------------------------

/// What an OpenCode client holds after applying the events: messages by id with their
/// parts by id, in id order.
fn fold(events: &[Event]) -> Value {
    let mut messages: BTreeMap<String, (Value, BTreeMap<String, Value>)> = BTreeMap::new();
    for e in events {
        match e {
            Event::MessageUpdated { info, .. } => {
                let info = serde_json::to_value(info).expect("serializes");
                let id = info["id"].as_str().expect("id").to_owned();
                messages.entry(id).or_insert_with(|| (Value::Null, BTreeMap::new())).0 = info;
            }
            Event::PartUpdated { part, .. } => {
                let entry = messages.entry(part.message_id.clone()).or_insert_with(|| (Value::Null, BTreeMap::new()));
                entry.1.insert(part.id.clone(), serde_json::to_value(part).expect("serializes"));
            }
            Event::PartDelta { message_id, part_id, field, delta, .. } => {
                let part =
                    messages.get_mut(message_id).and_then(|m| m.1.get_mut(part_id)).expect("delta of a known part");
                let text = part[*field].as_str().expect("text field").to_owned() + delta;
                part[*field] = Value::String(text);
            }
            _ => {}
        }
    }
    let list: Vec<Value> = messages
        .into_values()
        .map(|(info, parts)| json!({ "info": info, "parts": parts.into_values().collect::<Vec<_>>() }))
        .collect();
    without_times(json!(list))
}

/// Times differ by construction (the stream stamps when it saw things, the history has
/// only the stored timestamps); everything else must agree.
fn without_times(mut v: Value) -> Value {
    match &mut v {
        Value::Object(map) => {
            map.remove("time");
            for value in map.values_mut() {
                *value = without_times(value.take());
            }
        }
        Value::Array(items) => {
            for value in items.iter_mut() {
                *value = without_times(value.take());
            }
        }
        _ => {}
    }
    v
}

#[test]
fn what_a_client_folds_from_the_stream_is_the_history() {
    let events = run(&mut Mapper::new(scope()), tool_run());
    let history = serde_json::to_value(records::history(&scope(), &tool_run_messages(), None, &Default::default()))
        .expect("serializes");
    assert_eq!(fold(&events), without_times(history));
}

#[test]
fn a_step_snapshot_updates_the_step_start_in_place_and_the_fold_is_the_history_with_its_trees() {
    let snapshot =
        |phase, tree: &str| ev(None, AgentEvent::StepSnapshot { snapshot: tree.into(), phase, message_index: 1 });
    // As the engine sends them: `before` once the model asked for the calls (the step
    // started already), `after` once the last call finished, before the turn ends.
    let mut inputs = tool_run();
    let asked = inputs
        .iter()
        .position(|i| matches!(i, In::Ev(Some(1), AgentEvent::MessageEnd { .. })))
        .expect("the first step asks");
    inputs.insert(asked + 1, snapshot(SnapshotPhase::Before, "tree-before"));
    let ran =
        inputs.iter().position(|i| matches!(i, In::Ev(_, AgentEvent::ToolExecutionEnd { .. }))).expect("the call ran");
    inputs.insert(ran + 1, snapshot(SnapshotPhase::After, "tree-after"));
    let events = run(&mut Mapper::new(scope()), inputs);

    let step_parts = |kind: &str| -> Vec<Value> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::PartUpdated { part, .. } => Some(serde_json::to_value(part).expect("serializes")),
                _ => None,
            })
            .filter(|p| p["type"] == kind)
            .collect()
    };
    let starts = step_parts("step-start");
    assert_eq!(starts.len(), 3, "two steps, the first sent again with its tree: {starts:?}");
    assert_eq!((starts[0]["id"].clone(), starts[0].get("snapshot")), (starts[1]["id"].clone(), None));
    assert_eq!(starts[1]["snapshot"], "tree-before");
    assert_eq!(starts[2].get("snapshot"), None, "the answer's step changed no files");
    let finishes: Vec<Option<Value>> = step_parts("step-finish").iter().map(|p| p.get("snapshot").cloned()).collect();
    assert_eq!(finishes, [Some(json!("tree-after")), None]);

    let trees = records::StepTrees::from_steps([(
        1,
        records::Trees { before: Some("tree-before".into()), after: Some("tree-after".into()) },
    )]);
    let history = records::history(&scope(), &tool_run_messages(), None, &trees);
    assert_eq!(fold(&events), without_times(serde_json::to_value(history).expect("serializes")));
}

#[test]
fn a_client_joining_mid_run_folds_the_same_history() {
    // Replay the committed messages of the tool run from a snapshot taken after its first
    // step, then the rest live.
    let m = tool_run_messages();
    let mut s = initial_state(session(), m[..3].to_vec(), 3);
    s.status = SessionStatus::Busy;
    s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
    s.tool_executions.get_mut("call_1").expect("recorded").args = json!({"path": "x.txt", "content": "hi"});
    let mut mapper = Mapper::new(scope()).run_start(Some(0));
    let mut inputs = vec![body(FrameBody::Snapshot { state: Box::new(s) })];
    let live = tool_run();
    let from =
        live.iter().position(|i| matches!(i, In::Ev(Some(3), AgentEvent::MessageStart { .. }))).expect("second step");
    inputs.push(ev(None, AgentEvent::TurnStart {}));
    inputs.extend(live.into_iter().skip(from));
    let events = run(&mut mapper, inputs);
    let history = serde_json::to_value(records::history(&scope(), &m, None, &Default::default())).expect("serializes");
    assert_eq!(fold(&events), without_times(history));
}

/// A prompt's files are `file` parts of its user message, before its text part: on the
/// stream when the message is announced, in the history, and replayed to a client that
/// joins mid-run; what a client folds from the stream is the history.
#[test]
fn a_prompts_files_are_file_parts_live_in_the_history_and_on_a_join() {
    let user = test_frames::user_with_files("echo: look", T0);
    let answer = assistant(vec![text("look")], Some(StopReason::Stop), usage(), None);
    let mut inputs = user_turn_of(user.clone());
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::TextStart { content_index: 0 }),
        delta(1, StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "look".into() }),
        delta(1, StreamDelta::TextEnd { content_index: 0 }),
        ev(Some(1), AgentEvent::MessageEnd { message: answer.clone() }),
        ev(None, AgentEvent::TurnEnd {}),
    ]);
    inputs.extend(settle("completed"));
    let events = run(&mut Mapper::new(scope()), inputs);

    let msg = |index: u64, message: Message| IndexedMessage { id: MessageId::new(), index, message };
    let messages = vec![msg(0, user), msg(1, answer)];
    let history = records::history(&scope(), &messages, None, &Default::default());
    let history = serde_json::to_value(&history).expect("serializes");
    assert_eq!(fold(&events), without_times(history.clone()));
    // The user message as `GET /session/:id/message` lists it (the wire shape).
    assert_json_snapshot!(history[0]);
    let kinds: Vec<&str> =
        history[0]["parts"].as_array().expect("parts").iter().map(|p| p["type"].as_str().expect("type")).collect();
    assert_eq!(kinds, ["file", "file", "text"], "the files first, as the prompt sent them");

    // A client joining while the answer streams is sent the same parts.
    let mut s = initial_state(session(), messages[..1].to_vec(), 1);
    s.status = SessionStatus::Busy;
    s.active_run = Some(ActiveRun { run_id: run_id(), request_id: "req-1".into(), status: RunStatus::Running });
    let joined =
        run(&mut Mapper::new(scope()).run_start(Some(0)), vec![body(FrameBody::Snapshot { state: Box::new(s) })]);
    let sent: Vec<Value> = joined
        .iter()
        .filter_map(|e| match e {
            Event::PartUpdated { part, .. } => Some(serde_json::to_value(part).expect("serializes")),
            _ => None,
        })
        .collect();
    assert_eq!(json!(sent), history[0]["parts"]);
}

// ---- records ---------------------------------------------------------------------------

#[test]
fn history_session_and_permission_records() {
    let mut s = session();
    s.permissions = vec![PermissionRule::new("write", "*", PermissionAction::Allow)];
    s.archived = true;
    let mut messages = tool_run_messages();
    // A step whose call never ran (its run was cancelled while the call waited for a
    // permission; the same call id comes again later), and one whose call waits now.
    let msg = |index: u64, message: Message| IndexedMessage { id: MessageId::new(), index, message };
    messages.extend([
        msg(4, Message::user_text("again", T0 + 70)),
        msg(5, assistant(vec![text("w1"), write_call()], Some(StopReason::ToolUse), usage(), None)),
        msg(6, Message::user_text("and again", T0 + 80)),
        msg(7, assistant(vec![write_call()], Some(StopReason::ToolUse), usage(), None)),
    ]);
    assert_json_snapshot!(json!({
        "session": records::session_info(&s, None, "/work/project"),
        "history": records::history(&scope(), &messages, Some("big"), &Default::default()),
        "permission": records::permission(&approval(), Some(1)),
    }));
}

#[test]
fn events_are_one_data_line_with_an_id_and_no_event_field() {
    let event = Event::SessionIdle { session_id: sid().to_string() };
    assert_snapshot!(String::from_utf8(event.to_sse("evt_1").to_vec()).expect("utf-8"));
}

#[test]
fn an_event_written_from_its_shared_body_is_byte_for_byte_the_event() {
    let events = [
        Event::SessionIdle { session_id: sid().to_string() },
        Event::PartDelta {
            session_id: sid().to_string(),
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            field: "text",
            delta: "a \"quoted\"\nline é".into(),
        },
    ];
    for event in events {
        let mut shared = bytes::BytesMut::new();
        sse_with_id(&mut shared, format_args!("evt_{:07}", 42), &event.shared_body());
        assert_eq!(shared.freeze(), event.to_sse("evt_0000042"));
    }
}

#[test]
fn a_todo_list_and_a_git_change_are_todo_updated_and_session_diff() {
    use spool_protocol::hub::{Todo, TodoPriority, TodoStatus};
    let todo = |id: Option<&str>, content: &str, status, priority| Todo {
        content: content.into(),
        status,
        active_form: None,
        priority,
        id: id.map(str::to_owned),
    };
    let todos = vec![
        todo(Some("1"), "Read the code", TodoStatus::Completed, Some(TodoPriority::High)),
        todo(Some("7"), "Write the tool", TodoStatus::InProgress, None),
        // A list from before ids were kept: its position names the item.
        todo(None, "Drop it", TodoStatus::Cancelled, Some(TodoPriority::Low)),
    ];
    let mut mapper = Mapper::new(scope());
    let events =
        run(&mut mapper, vec![ev(None, AgentEvent::TodoWrite { todos }), body(FrameBody::Git { git: git_state() })]);
    assert_json_snapshot!(json_of(&events));
}

/// Live tool output lands where OpenCode's own bash tool puts it: the running part's
/// `metadata.output`, the output so far, bounded at 30,000 characters; an update past
/// the bound changes nothing, so it sends nothing.
#[test]
fn live_tool_output_is_the_running_parts_metadata_output() {
    let call = Content::ToolCall { id: "call_1".into(), name: "bash".into(), arguments: json!({"command": "make"}) };
    let update = |offset: usize, delta: &str, truncated: bool| {
        ev(
            None,
            AgentEvent::ToolExecutionUpdate {
                tool_call_id: "call_1".into(),
                tool_name: "bash".into(),
                offset,
                delta: delta.into(),
                truncated,
            },
        )
    };
    let mut inputs = user_turn("tool: bash");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::ToolcallStart { content_index: 0, id: "call_1".into(), name: "bash".into() }),
        delta(1, StreamDelta::ToolcallEnd { content_index: 0 }),
        ev(
            Some(1),
            AgentEvent::MessageEnd { message: assistant(vec![call], Some(StopReason::ToolUse), usage(), None) },
        ),
        ev(
            None,
            AgentEvent::ToolExecutionStart {
                tool_call_id: "call_1".into(),
                tool_name: "bash".into(),
                args: json!({"command": "make"}),
            },
        ),
        update(0, "building\n", false),
        update(9, &"x".repeat(40_000), true),
        update(40_009, "past the bound", false),
    ]);
    let mut mapper = Mapper::new(scope());
    let events = json_of(&run(&mut mapper, inputs));
    let running: Vec<Value> = events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["properties"]["part"])
        .filter(|p| p["type"] == "tool" && p["state"]["status"] == "running")
        .map(|p| p["state"]["metadata"]["output"].clone())
        .collect();
    let full = format!("building\n{}", "x".repeat(30_000 - 9));
    assert_eq!(running, [Value::Null, json!("building\n"), json!(full)]);
}

/// An approval of the `question` tool (what `crates/tools/src/question.rs` asks).
fn question_approval(id: &str, call: &str, options: Value) -> Approval {
    let kind = if options.as_array().is_some_and(|o| o.is_empty()) {
        ApprovalKind::ProvideInput
    } else {
        ApprovalKind::SelectOption
    };
    Approval {
        id: id.parse().expect("valid id"),
        tool_call_id: call.into(),
        tool: "question".into(),
        kind,
        payload: json!({"question": "Which colour?", "options": options, "other": true}),
        ..approval()
    }
}

fn question_call(call: &str) -> Content {
    Content::ToolCall { id: call.into(), name: "question".into(), arguments: json!({"question": "Which colour?"}) }
}

#[test]
fn a_question_is_asked_and_answered_or_dismissed_never_as_a_permission() {
    let options = json!([{"label": "red", "description": null}, {"label": "blue", "description": "like the sky"}]);
    let answered = question_approval("per_01jd0000000000000000000008", "call_q1", options);
    let dismissed = question_approval("per_01jd0000000000000000000009", "call_q2", json!([]));
    let resolved = |approval: &Approval, decision: &str| AgentEvent::ApprovalResolved {
        approval_id: approval.id.clone(),
        decision: decision.into(),
        actor: None,
        message: None,
    };
    let start = |call: &str, args: Value| AgentEvent::ToolExecutionStart {
        tool_call_id: call.into(),
        tool_name: "question".into(),
        args,
    };
    let step =
        assistant(vec![question_call("call_q1"), question_call("call_q2")], Some(StopReason::ToolUse), usage(), None);
    let mut inputs = user_turn("tool: question");
    inputs.extend([
        ev(Some(1), AgentEvent::MessageStart { message: assistant(vec![], None, Usage::default(), None) }),
        delta(1, StreamDelta::ToolcallStart { content_index: 0, id: "call_q1".into(), name: "question".into() }),
        delta(1, StreamDelta::ToolcallStart { content_index: 1, id: "call_q2".into(), name: "question".into() }),
        ev(Some(1), AgentEvent::MessageEnd { message: step }),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(answered.clone()) }),
        ev(None, resolved(&answered, "fill")),
        ev(None, start("call_q1", json!({"answer": "blue"}))),
        ev(None, AgentEvent::ApprovalRequested { approval: Box::new(dismissed.clone()) }),
        ev(None, resolved(&dismissed, "reject")),
    ]);
    inputs.extend(settle("cancelled"));
    let events = run(&mut Mapper::new(scope()), inputs);
    let json = json_of(&events);
    let types: Vec<&str> = json.as_array().expect("events").iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(!types.iter().any(|t| t.starts_with("permission.")), "{types:?}");
    let questions: Vec<&Value> = json
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("question.")))
        .collect();
    let message_id = super::ids::message_id(&sid(), 1);
    assert_eq!(
        questions,
        [
            &json!({"type": "question.asked", "properties": {
                "id": answered.id, "sessionID": sid(),
                "questions": [{
                    "question": "Which colour?", "header": "question",
                    "options": [{"label": "red", "description": ""}, {"label": "blue", "description": "like the sky"}],
                    "multiple": false, "custom": true,
                }],
                "tool": {"messageID": message_id, "callID": "call_q1"},
            }}),
            &json!({"type": "question.replied", "properties": {
                "sessionID": sid(), "requestID": answered.id, "answers": [["blue"]],
            }}),
            &json!({"type": "question.asked", "properties": {
                "id": dismissed.id, "sessionID": sid(),
                "questions": [{"question": "Which colour?", "header": "question", "options": [], "multiple": false, "custom": true}],
                "tool": {"messageID": message_id, "callID": "call_q2"},
            }}),
            &json!({"type": "question.rejected", "properties": {"sessionID": sid(), "requestID": dismissed.id}}),
        ]
    );
}
