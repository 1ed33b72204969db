//! The AI SDK mapping's unit tests: a run's UI message chunks (golden), its
//! continuation after a decision, denied calls, questions, and failed runs.

use super::*;
use crate::dialect::test_frames::{
    self, approval_decided, assistant, ev, frame, frames_from, map_all, owner, read_write_run, run_id, tool_ended,
    tool_started,
};
use insta::assert_json_snapshot;
use spool_protocol::frame::FrameBody;
use spool_protocol::{StopReason, Usage};

fn approval() -> Approval {
    test_frames::approval(1)
}

fn run_frames() -> Vec<Frame> {
    read_write_run(approval(), false, None)
}

#[test]
fn a_run_maps_to_ui_message_chunks() {
    let mut fold = AiSdkStream::new(run_id());
    let chunks = map_all(&mut fold, &run_frames());
    assert!(fold.finished());
    assert_json_snapshot!(chunks);
}

#[test]
fn the_continuation_after_a_decision_maps_the_rest_of_the_run() {
    let frames = run_frames();
    let whole = map_all(&mut AiSdkStream::new(run_id()), &frames);
    let asked = frames
        .iter()
        .position(|f| matches!(&f.body, FrameBody::LoopEvent { event: AgentEvent::ApprovalRequested { .. }, .. }))
        .expect("an approval");
    let mut fold = AiSdkStream::continuing(&approval(), Some(approval().id), false);
    assert!(fold.waiting());
    let rest = map_all(&mut fold, &frames[asked + 1..]);
    let at = whole.iter().position(|c| matches!(c, UiChunk::ToolApprovalRequest { .. })).expect("asked");
    assert_eq!(rest, whole[at + 1..], "the same chunks as the whole run's after the request");
    assert!(!fold.waiting());
}

#[test]
fn a_rejected_call_is_denied_and_its_error_is_no_output() {
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::TurnStart {}),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(approval()) }),
            ev(
                None,
                AgentEvent::ApprovalResolved {
                    approval_id: approval().id,
                    decision: "reject".into(),
                    actor: Some(owner()),
                    message: Some("not now".into()),
                },
            ),
            ev(
                None,
                AgentEvent::ToolExecutionEnd {
                    tool_call_id: "call_2".into(),
                    tool_name: "write".into(),
                    result: "rejected: not now".into(),
                    is_error: true,
                },
            ),
            ev(None, AgentEvent::AgentEnd { status: "cancelled".into(), usage: Usage::default(), error: None }),
        ],
    );
    let chunks = map_all(&mut AiSdkStream::new(run_id()), &frames);
    assert_json_snapshot!(chunks);
}

/// A run that asks a question, is answered "green", and reads the answer.
fn question_frames() -> Vec<Frame> {
    let q = test_frames::question();
    let args = serde_json::json!({"question": "Which colour?", "options": [{"label": "red"}, {"label": "blue"}]});
    let call = Content::ToolCall { id: q.tool_call_id.clone(), name: q.tool.clone(), arguments: args };
    let answered = serde_json::json!({"answer": "green"});
    frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::TurnStart {}),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![call], StopReason::ToolUse) }),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(q.clone()) }),
            ev(None, approval_decided(&q, "fill", Some(owner()))),
            ev(None, tool_started(&q.tool_call_id, &q.tool, answered)),
            ev(None, tool_ended(&q.tool_call_id, &q.tool, "The person answered: green")),
            ev(None, AgentEvent::TurnEnd {}),
            ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        ],
    )
}

#[test]
fn a_question_is_a_call_the_client_answers_announced_when_asked() {
    let frames = question_frames();
    let asked = 4;
    let mut fold = AiSdkStream::new(run_id());
    let before = map_all(&mut fold, &frames[..asked]);
    assert!(fold.waiting());
    let q = test_frames::question();
    assert_eq!(
        before,
        vec![
            UiChunk::Start { message_id: run_id().to_string() },
            UiChunk::StartStep,
            UiChunk::ToolInputAvailable {
                tool_call_id: q.tool_call_id.clone(),
                tool_name: "question".into(),
                input: serde_json::json!({"question": "Which colour?", "options": [{"label": "red"}, {"label": "blue"}]}),
                dynamic: true,
                provider_executed: false,
                provider_metadata: Some(serde_json::json!({"spool": {"approvalId": q.id}})),
            },
        ],
        "no approval request: the call waits for the client's output"
    );
    let mut rest = AiSdkStream::continuing(&q, None, false);
    let after = map_all(&mut rest, &frames[asked..]);
    assert_eq!(
        after[0],
        UiChunk::ToolOutputAvailable {
            tool_call_id: q.tool_call_id.clone(),
            output: "The person answered: green".into(),
            dynamic: true,
        }
    );
    assert_eq!(after.last(), Some(&UiChunk::Finish { finish_reason: FinishReason::Stop }));
}

#[test]
fn a_question_never_asked_is_sent_as_a_call_spool_settled() {
    let frames = question_frames();
    let q = test_frames::question();
    // A rule denied it: no approval, the call ends with an error.
    let denied: Vec<Frame> = frames
        .into_iter()
        .filter(|f| {
            !matches!(
                &f.body,
                FrameBody::LoopEvent {
                    event: AgentEvent::ApprovalRequested { .. } | AgentEvent::ApprovalResolved { .. },
                    ..
                }
            )
        })
        .collect();
    let chunks = map_all(&mut AiSdkStream::new(run_id()), &denied);
    let input = chunks.iter().position(|c| {
        matches!(c, UiChunk::ToolInputAvailable { provider_executed: true, provider_metadata: None, .. })
    });
    let output = chunks.iter().position(
        |c| matches!(c, UiChunk::ToolOutputAvailable { tool_call_id, .. } if *tool_call_id == q.tool_call_id),
    );
    assert!(input.is_some() && input < output, "{chunks:?}");
}

#[test]
fn a_failed_run_ends_with_the_error_its_agent_end_carries_and_other_runs_map_to_nothing() {
    let other: RunId = "run_01jd0000000000000000000009".parse().expect("valid id");
    let mut fold = AiSdkStream::new(run_id());
    let before = frame(1, ev(None, AgentEvent::TurnStart {}));
    assert_eq!(fold.push(&before), vec![], "before run.accepted");
    fold.push(&frame(2, FrameBody::RunAccepted { request_id: "r".into(), run_id: run_id() }));
    let theirs =
        FrameBody::LoopEvent { run_id: other, message_index: None, message_id: None, event: AgentEvent::TurnStart {} };
    assert_eq!(fold.push(&frame(3, theirs)), vec![]);
    let error = RunError { code: "model_error".into(), message: "the provider went away".into() };
    let end = AgentEvent::AgentEnd { status: "failed".into(), usage: Usage::default(), error: Some(error) };
    let chunks = fold.push(&frame(4, ev(None, end)));
    assert!(fold.finished());
    assert_eq!(
        std::str::from_utf8(&encode(&chunks)).expect("utf-8"),
        "data: {\"type\":\"error\",\"errorText\":\"the provider went away\"}\n\n"
    );
}

/// A call of `get_weather`, a tool the client declared, parked for the client's result.
fn client_call() -> Approval {
    Approval {
        id: "per_01jd0000000000000000000008".parse().expect("valid id"),
        tool_call_id: "call_c".into(),
        tool: "get_weather".into(),
        kind: spool_protocol::ApprovalKind::ProvideInput,
        payload: serde_json::json!({
            "client": true,
            "tool": "get_weather",
            "arguments": {"city": "Oslo"},
            "description": "The weather in a city",
        }),
        ..approval()
    }
}

/// A run that reads a file and calls the client's `get_weather` in one message, parks
/// for the client's result (`result`, an error with `is_error`), reads it and answers.
fn client_call_frames(result: &str, is_error: bool) -> Vec<Frame> {
    let c = client_call();
    let read = serde_json::json!({"path": "README.md"});
    let calls = vec![
        Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: read.clone() },
        Content::ToolCall {
            id: c.tool_call_id.clone(),
            name: c.tool.clone(),
            arguments: c.payload["arguments"].clone(),
        },
    ];
    let ended = AgentEvent::ToolExecutionEnd {
        tool_call_id: c.tool_call_id.clone(),
        tool_name: c.tool.clone(),
        result: result.into(),
        is_error,
    };
    let answer = assistant(vec![Content::Text { text: "Noted.".into() }], StopReason::Stop);
    frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::TurnStart {}),
            ev(
                Some(1),
                test_frames::update(StreamDelta::ToolcallStart {
                    content_index: 1,
                    id: c.tool_call_id.clone(),
                    name: c.tool.clone(),
                }),
            ),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(calls, StopReason::ToolUse) }),
            ev(None, tool_started("call_1", "read", read)),
            ev(None, tool_ended("call_1", "read", "# Test")),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(c.clone()) }),
            ev(None, approval_decided(&c, "output", Some(owner()))),
            ev(None, tool_started(&c.tool_call_id, &c.tool, c.payload["arguments"].clone())),
            ev(None, ended),
            ev(None, AgentEvent::TurnEnd {}),
            ev(None, AgentEvent::TurnStart {}),
            ev(Some(4), AgentEvent::MessageEnd { message: answer }),
            ev(None, AgentEvent::TurnEnd {}),
            ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        ],
    )
}

/// The `tool-input-available` chunks of `call`.
fn inputs_of<'a>(chunks: &'a [UiChunk], call: &str) -> Vec<&'a UiChunk> {
    chunks
        .iter()
        .filter(|c| matches!(c, UiChunk::ToolInputAvailable { tool_call_id, .. } if tool_call_id == call))
        .collect()
}

#[test]
fn a_client_tool_call_is_announced_once_as_the_clients_when_it_parks() {
    let frames = client_call_frames("sunny", false);
    let asked = 7;
    let c = client_call();
    let mut fold = AiSdkStream::new(run_id());
    let before = map_all(&mut fold, &frames[..asked]);
    assert!(fold.waiting(), "the run waits for the client");
    let input = UiChunk::ToolInputAvailable {
        tool_call_id: c.tool_call_id.clone(),
        tool_name: "get_weather".into(),
        input: serde_json::json!({"city": "Oslo"}),
        dynamic: true,
        provider_executed: false,
        provider_metadata: Some(serde_json::json!({"spool": {"approvalId": c.id}})),
    };
    assert_eq!(inputs_of(&before, &c.tool_call_id), vec![&input], "once, as the client's: {before:?}");
    assert_eq!(before.last(), Some(&input), "announced when it parks, after Spool's own call: {before:?}");
    assert!(!before.iter().any(|c| matches!(c, UiChunk::ToolApprovalRequest { .. })), "no approval to ask: {before:?}");

    // The client's result: the continuation shows it as the call's output, then goes on.
    let after = map_all(&mut AiSdkStream::continuing(&c, None, false), &frames[asked..]);
    assert_eq!(
        after[0],
        UiChunk::ToolOutputAvailable { tool_call_id: c.tool_call_id.clone(), output: "sunny".into(), dynamic: true }
    );
    assert!(inputs_of(&after, &c.tool_call_id).is_empty(), "the client has its input: {after:?}");
    assert_eq!(after.last(), Some(&UiChunk::Finish { finish_reason: FinishReason::Stop }));

    // The same run followed from its start, and continued after a replay from its start.
    let whole = map_all(&mut AiSdkStream::new(run_id()), &frames);
    assert_eq!(inputs_of(&whole, &c.tool_call_id), vec![&input]);
    let muted = map_all(&mut AiSdkStream::muted_until(&c, None, false), &frames);
    assert_eq!(muted, after, "a continuation replayed from the run's start sends the same");
}

#[test]
fn a_client_tools_error_result_is_the_calls_output_error() {
    let frames = client_call_frames("no network", true);
    let c = client_call();
    let after = map_all(&mut AiSdkStream::continuing(&c, None, false), &frames[7..]);
    assert_eq!(
        after[0],
        UiChunk::ToolOutputError {
            tool_call_id: c.tool_call_id.clone(),
            error_text: "no network".into(),
            dynamic: true
        }
    );
    assert!(!after.iter().any(|c| matches!(c, UiChunk::ToolOutputDenied { .. })), "{after:?}");
}

#[test]
fn a_client_call_a_rule_asks_about_first_is_sent_again_as_the_clients() {
    let c = client_call();
    let confirm = Approval {
        kind: spool_protocol::ApprovalKind::ConfirmAction,
        payload: serde_json::json!({"tool": "get_weather"}),
        ..approval()
    };
    let confirm = Approval { tool_call_id: c.tool_call_id.clone(), tool: c.tool.clone(), ..confirm };
    let call = Content::ToolCall {
        id: c.tool_call_id.clone(),
        name: c.tool.clone(),
        arguments: c.payload["arguments"].clone(),
    };
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::TurnStart {}),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![call], StopReason::ToolUse) }),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(confirm.clone()) }),
            ev(None, approval_decided(&confirm, "once", Some(owner()))),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(c.clone()) }),
        ],
    );
    let asked = map_all(&mut AiSdkStream::new(run_id()), &frames[..4]);
    let kinds: Vec<_> = asked.iter().map(|c| serde_json::to_value(c).expect("json")["type"].clone()).collect();
    assert_eq!(kinds, ["start", "start-step", "tool-input-available", "tool-approval-request"]);
    let mut fold = AiSdkStream::continuing(&confirm, Some(confirm.id.clone()), false);
    let then = map_all(&mut fold, &frames[4..]);
    assert!(fold.waiting());
    assert!(
        matches!(&then[..], [UiChunk::ToolInputAvailable { provider_executed: false, provider_metadata: Some(_), .. }]),
        "{then:?}"
    );
}

#[test]
fn a_snapshot_draws_a_parked_client_call_as_the_clients() {
    let c = client_call();
    let call = Content::ToolCall {
        id: c.tool_call_id.clone(),
        name: c.tool.clone(),
        arguments: c.payload["arguments"].clone(),
    };
    let user = Message::User { content: vec![Content::Text { text: "weather?".into() }], timestamp: 0 };
    let messages =
        vec![test_frames::indexed(1, 0, user), test_frames::indexed(2, 1, assistant(vec![call], StopReason::ToolUse))];
    let mut state = test_frames::session_state(messages.clone());
    state.pending_approvals.push(c.clone());
    let run = test_frames::stored_run(RunStatus::Interrupted, None);
    let (fold, chunks) = AiSdkStream::from_snapshot(&run, &state, &messages);
    assert!(fold.waiting());
    let inputs = inputs_of(&chunks, &c.tool_call_id);
    assert!(
        matches!(
            &inputs[..],
            [UiChunk::ToolInputAvailable { provider_executed: false, provider_metadata: Some(_), .. }]
        ),
        "{chunks:?}"
    );
}

fn user_text(text: &str) -> Message {
    Message::User { content: vec![Content::Text { text: text.into() }], timestamp: 0 }
}

fn steers(chunks: &[UiChunk]) -> Vec<(String, serde_json::Value)> {
    chunks
        .iter()
        .filter_map(|c| match c {
            UiChunk::Steer { id, data } => Some((id.clone(), data.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_steer_the_run_took_is_a_data_part_and_its_prompt_is_not() {
    let steered = FrameBody::LoopEvent {
        run_id: run_id(),
        message_index: Some(2),
        message_id: Some("msg_01jd0000000000000000000003".parse().expect("id")),
        event: AgentEvent::MessageEnd { message: user_text("also the tests") },
    };
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::AgentStart {}),
            ev(Some(0), AgentEvent::MessageEnd { message: user_text("look around") }),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![], StopReason::Stop) }),
            steered,
        ],
    );
    let mut fold = AiSdkStream::new(run_id());
    let chunks = map_all(&mut fold, &frames);
    let want = serde_json::json!({"messageId": "msg_01jd0000000000000000000003", "text": "also the tests"});
    assert_eq!(steers(&chunks), [("usr_2".to_owned(), want.clone())], "{chunks:?}");
    let wire: serde_json::Value = serde_json::to_value(steers_chunk(&chunks)).expect("json");
    assert_eq!(wire, serde_json::json!({"type": "data-spool-steer", "id": "usr_2", "data": want}));

    // A fold that joins after the prompt (a continuation) sends every user message it
    // sees: each is a steer.
    let mut fold = AiSdkStream::continuing(&approval(), None, false);
    let chunks = map_all(&mut fold, &frames[4..]);
    assert_eq!(steers(&chunks).len(), 1, "{chunks:?}");
}

fn steers_chunk(chunks: &[UiChunk]) -> UiChunk {
    chunks.iter().find(|c| matches!(c, UiChunk::Steer { .. })).cloned().expect("a steer")
}

#[test]
fn a_snapshot_draws_the_steer_the_run_took_and_not_its_prompt() {
    let messages = vec![
        test_frames::indexed(1, 0, user_text("look around")),
        test_frames::indexed(2, 1, assistant(vec![Content::Text { text: "Looking.".into() }], StopReason::Stop)),
        test_frames::indexed(3, 2, user_text("also the tests")),
        test_frames::indexed(4, 3, assistant(vec![Content::Text { text: "Done.".into() }], StopReason::Stop)),
    ];
    let mut state = test_frames::session_state(messages.clone());
    state.prompt_timings.entry(0).or_default();
    let run = test_frames::stored_run(RunStatus::Completed, None);
    let (_, chunks) = AiSdkStream::from_snapshot(&run, &state, &messages);
    let want = serde_json::json!({"messageId": "msg_01jd0000000000000000000003", "text": "also the tests"});
    assert_eq!(steers(&chunks), [("usr_2".to_owned(), want)], "{chunks:?}");
    // Between the two answers' text.
    let at = chunks.iter().position(|c| matches!(c, UiChunk::Steer { .. })).expect("at");
    assert!(matches!(chunks[at - 1], UiChunk::TextEnd { .. }), "{chunks:?}");
    assert!(matches!(chunks[at + 1], UiChunk::TextStart { .. }), "{chunks:?}");
}

/// A steer sent with files carries them as the AI SDK's `FileUIPart`s (`mediaType`,
/// `filename`, the URL its owner fetches it from), live and drawn from a snapshot alike.
#[test]
fn a_steer_with_files_carries_them_as_file_ui_parts() {
    let steer = test_frames::user_with_files("echo: look", 0);
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::AgentStart {}),
            ev(Some(0), AgentEvent::MessageEnd { message: user_text("look around") }),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![], StopReason::Stop) }),
            FrameBody::LoopEvent {
                run_id: run_id(),
                message_index: Some(2),
                message_id: Some("msg_01jd0000000000000000000003".parse().expect("id")),
                event: AgentEvent::MessageEnd { message: steer.clone() },
            },
        ],
    );
    let live = steers_chunk(&map_all(&mut AiSdkStream::new(run_id()), &frames));
    assert_json_snapshot!(live);

    let messages = vec![
        test_frames::indexed(1, 0, user_text("look around")),
        test_frames::indexed(2, 1, assistant(vec![], StopReason::Stop)),
        test_frames::indexed(3, 2, steer),
    ];
    let mut state = test_frames::session_state(messages.clone());
    state.prompt_timings.entry(0).or_default();
    let run = test_frames::stored_run(RunStatus::Running, None);
    let (_, drawn) = AiSdkStream::from_snapshot(&run, &state, &messages);
    assert_eq!(steers_chunk(&drawn), live, "a client that resumes sees the same part");
}

/// A guardrail's pause before the run's second model call (see `Approval::is_guardrail`).
fn guardrail() -> Approval {
    Approval {
        id: "per_01jd0000000000000000000009".parse().expect("valid id"),
        tool_call_id: "guard_01jd0000000000000000000009".into(),
        tool: "guardrail".into(),
        kind: spool_protocol::ApprovalKind::ConfirmAction,
        payload: serde_json::json!({
            "guardrail": {"limit": "runCostUsd", "scope": "run", "value": 2.0, "used": 2.4},
            "change": "Continue past the run's cost limit",
            "argument": "This run has spent $2.40 (limit $2.00). Continue?",
            "reason": "This run has spent $2.40 (limit $2.00). Continue?",
        }),
        ..approval()
    }
}

#[test]
fn a_guardrail_is_a_part_of_spools_asked_for_approval_and_ended_when_the_run_goes_on() {
    let g = guardrail();
    let read = serde_json::json!({"path": "README.md"});
    let call = Content::ToolCall { id: "call_1".into(), name: "read".into(), arguments: read.clone() };
    let answer = assistant(vec![Content::Text { text: "Done.".into() }], StopReason::Stop);
    let frames = frames_from(
        1,
        vec![
            FrameBody::RunAccepted { request_id: "req-1".into(), run_id: run_id() },
            ev(None, AgentEvent::TurnStart {}),
            ev(Some(1), AgentEvent::MessageEnd { message: assistant(vec![call], StopReason::ToolUse) }),
            ev(None, tool_started("call_1", "read", read)),
            ev(None, tool_ended("call_1", "read", "# Test")),
            ev(None, AgentEvent::TurnEnd {}),
            ev(None, AgentEvent::ApprovalRequested { approval: Box::new(g.clone()) }),
            ev(None, approval_decided(&g, "once", Some(owner()))),
            ev(None, AgentEvent::TurnStart {}),
            ev(Some(3), AgentEvent::MessageEnd { message: answer }),
            ev(None, AgentEvent::TurnEnd {}),
            ev(None, AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None }),
        ],
    );
    let whole = map_all(&mut AiSdkStream::new(run_id()), &frames);
    let input = UiChunk::ToolInputAvailable {
        tool_call_id: g.tool_call_id.clone(),
        tool_name: "guardrail".into(),
        input: serde_json::json!({"guardrail": g.payload["guardrail"], "reason": g.payload["reason"]}),
        dynamic: true,
        provider_executed: true,
        provider_metadata: None,
    };
    assert_eq!(inputs_of(&whole, &g.tool_call_id), vec![&input], "{whole:?}");
    let at = |wanted: &dyn Fn(&UiChunk) -> bool| whole.iter().position(wanted).expect("sent");
    let shown = at(&|c| c == &input);
    let asked =
        at(&|c| matches!(c, UiChunk::ToolApprovalRequest { tool_call_id, .. } if *tool_call_id == g.tool_call_id));
    let ended =
        at(&|c| matches!(c, UiChunk::ToolOutputAvailable { tool_call_id, .. } if *tool_call_id == g.tool_call_id));
    assert!(shown < asked && asked < ended, "its input, its request, then its output: {whole:?}");
    assert_eq!(whole.last(), Some(&UiChunk::Finish { finish_reason: FinishReason::Stop }));
    // The continuation after the decision sends what the whole run sends after the request.
    let after = map_all(&mut AiSdkStream::continuing(&g, Some(g.id.clone()), false), &frames[7..]);
    assert_eq!(after, whole[asked + 1..], "{after:?}");
}

#[test]
fn presence_while_the_run_streams_is_a_transient_data_part_and_nothing_before_or_after() {
    let presence = spool_protocol::Presence { viewers: 2, answerers: 1, visible: 1, ..Default::default() };
    let body = || FrameBody::Presence { presence: presence.clone() };
    let mut frames = run_frames();
    let last = frames.last().map_or(0, |f| f.seq);
    frames.insert(0, frame(0, body()));
    frames.insert(2, frame(last + 1, body()));
    frames.push(frame(last + 2, body()));
    let mut fold = AiSdkStream::new(run_id());
    let chunks = map_all(&mut fold, &frames);
    let parts: Vec<_> = chunks.iter().filter(|c| matches!(c, UiChunk::Presence { .. })).collect();
    assert_eq!(parts.len(), 1, "only the one inside the run: {chunks:?}");
    let json = serde_json::to_value(parts[0]).expect("json");
    assert_eq!(
        json,
        serde_json::json!({"type": "data-spool-presence", "data": {"viewers": 2, "answerers": 1, "visible": 1}, "transient": true})
    );
}
