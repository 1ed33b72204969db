//! Wire dialects: pure mappings from the engine's native frames to the events another
//! kind of client expects. A dialect's mapping does no I/O; what it needs to remember
//! between frames (a run's sequence number, the status an `agent_end` announced) is a
//! small value passed in. Transports read typed frames from the engine (never SSE or
//! JSON that Spool produced) and, through [`shared`], map and encode each frame once per
//! session and output form, whatever the number of subscribers. The transports that
//! feed them live in `http/`, except the run-following dialects' routes: the run stream,
//! the AI SDK and AG-UI are each a folder, `<name>/mod.rs` the mapping and
//! `<name>/routes.rs` its routes (over the feed they share, `http/run_feed.rs`).

pub mod ag_ui;
pub mod ai_sdk;
pub mod opencode;
pub mod run_fold;
pub mod run_stream;
pub mod shared;
pub mod ws_hub;

use spool_protocol::{Approval, ApprovalKind};
use std::sync::Arc;

/// The encode-once forms of the run-following dialects ([`shared::Forms`]): one set per
/// server, held in its application state, so two servers in one process (tests, a
/// cluster's nodes) share no fold.
#[derive(Default)]
pub struct RunForms {
    pub run_stream: shared::Forms<run_stream::RunForm, run_stream::RunStream>,
    pub ai_sdk: shared::Forms<ai_sdk::AiSdkForm, ai_sdk::AiSdkStream>,
    pub ag_ui: shared::Forms<ag_ui::AgUiForm, ag_ui::AgUiStream>,
}

impl RunForms {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }
}

/// The `question` tool's name. Its calls are the person's to answer: the AI SDK shows
/// one as a call of a tool the client answers, AG-UI as a `question` interrupt.
pub const QUESTION_TOOL: &str = "question";

/// Whether `approval` asks the person for an answer (the `question` tool's
/// `select_option` / `provide_input`) rather than whether a call may run.
pub fn asks_for_input(approval: &Approval) -> bool {
    approval.kind != ApprovalKind::ConfirmAction
}

/// Fixed ids and a frame builder shared by the dialects' golden tests, so every
/// snapshot names the same session, stream, run and owner.
#[cfg(test)]
pub(crate) mod fixtures {
    use spool_protocol::frame::{Frame, FrameBody};
    use spool_protocol::{
        AgentEvent, Approval, ApprovalKind, ApprovalStatus, Content, Message, RunId, SessionId, StopReason, Usage,
        UserId,
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

    /// A loop event of the fixed run.
    pub fn ev(message_index: Option<u64>, event: AgentEvent) -> FrameBody {
        FrameBody::LoopEvent { run_id: run_id(), message_index, message_id: None, event }
    }

    /// An assistant message of the scripted model.
    pub fn assistant(content: Vec<Content>, stop: StopReason) -> Message {
        Message::Assistant {
            content,
            stop_reason: Some(stop),
            usage: Usage::default(),
            model: "scripted".into(),
            error_message: None,
            timestamp: 0,
        }
    }

    /// A pending approval of a `write` call (`call_2`) in the fixed run.
    pub fn approval(expires_at: i64) -> Approval {
        Approval {
            id: "per_01jd0000000000000000000004".parse().expect("valid id"),
            run_id: run_id(),
            session_id: sid(),
            owner_id: owner(),
            tool_call_id: "call_2".into(),
            tool: "write".into(),
            kind: ApprovalKind::ConfirmAction,
            payload: serde_json::json!({"tool": "write", "summary": "out.txt"}),
            status: ApprovalStatus::Pending,
            decision: None,
            message: None,
            actor: None,
            created_at: 0,
            expires_at,
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
            payload: serde_json::json!({
                "question": "Which colour?",
                "options": [{"label": "red", "description": null}, {"label": "blue", "description": "like the sky"}],
                "other": true,
            }),
            ..approval(1)
        }
    }
}
