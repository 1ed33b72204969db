//! Wire dialects: pure mappings from the engine's native frames to the events another
//! kind of client expects. A dialect's mapping does no I/O; what it needs to remember
//! between frames (a run's sequence number, the status an `agent_end` announced) is a
//! small value passed in. Transports read typed frames from the engine (never SSE or
//! JSON that Spool produced) and, through [`shared`], map and encode each frame once per
//! session and output form, whatever the number of subscribers. Each dialect is a
//! folder, `<name>/mod.rs` the mapping and `<name>/routes.rs` the transport that feeds
//! it (OpenCode's is a folder, `routes/`; the hub's publishing route is
//! `ws_hub/publish.rs`). The run-following ones (the run stream, the AI SDK, AG-UI)
//! share a feed, `http/run_feed.rs`; the hub's socket runs the loop of `http/socket.rs`,
//! shared with `GET /api/streams`. `http/` holds everything else.

pub mod ag_ui;
pub mod ai_sdk;
pub mod opencode;
pub mod run_fold;
pub mod run_stream;
pub mod shared;
#[cfg(test)]
pub(crate) mod test_frames;
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

/// What the AG-UI and AI SDK streams tell a client of a live ask (a running call's
/// server asks the person for input, `Approval::is_live_ask`): who asks, the message,
/// the fields' schema, the expiry, and the route that answers it (`fill` with the
/// fields, or `reject`). Neither protocol has a way to ask mid-call that the run can
/// wait on without ending the client's stream, so this is told as data beside it.
pub fn live_ask_notice(approval: &Approval) -> serde_json::Value {
    let p = &approval.payload;
    serde_json::json!({
        "approvalId": approval.id,
        "toolCallId": approval.tool_call_id,
        "source": p["source"],
        "message": p["question"],
        "responseSchema": p["fields"],
        "expiresAt": spool_protocol::time::iso8601(approval.expires_at),
        "answerAt": format!("/api/sessions/{}/approvals/{}", approval.session_id, approval.id),
    })
}

/// Whether `approval` asks the person for an answer (the `question` tool's
/// `select_option` / `provide_input`) rather than whether a call may run.
pub fn asks_for_input(approval: &Approval) -> bool {
    approval.kind != ApprovalKind::ConfirmAction
}
