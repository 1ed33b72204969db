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
