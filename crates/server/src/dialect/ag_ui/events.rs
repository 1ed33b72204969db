//! The AG-UI wire: its events (the serde names are the wire `type`s), how a run ends
//! ([`Outcome`]) and an approval as an interrupt ([`Interrupt`]).

use crate::dialect::asks_for_input;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use spool_protocol::{Approval, ApprovalId, RunId, sse};

/// The protocol version Spool speaks, declared on `RUN_STARTED`.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The interrupt `reason` of an approval.
pub const TOOL_APPROVAL: &str = "tool_approval";

/// The interrupt `reason` of a question (the `question` tool), answered `{answer}`.
pub const QUESTION: &str = "question";

/// The `CUSTOM` event's name for a decision taken.
pub const APPROVAL_RESOLVED: &str = "spool.approval_resolved";
/// The `CUSTOM` event of a live ask: a running tool's server asks the person for input
/// while its call (and the run) goes on, so it cannot be an interrupt, which ends the
/// run's stream. Answered through Spool's decision route (`fill` with the fields, or
/// `reject`); `spool.approval_resolved` follows.
pub const INPUT_REQUESTED: &str = "spool.input_requested";
/// The `CUSTOM` event of who is on the session (`session.presence`), unnumbered.
pub const PRESENCE: &str = "spool.presence";

/// One AG-UI event. The serde names are the wire `type`s.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgUiEvent {
    #[serde(rename_all = "camelCase")]
    RunStarted {
        thread_id: String,
        run_id: RunId,
        protocol_version: String,
    },
    #[serde(rename_all = "camelCase")]
    RunFinished {
        thread_id: String,
        run_id: RunId,
        outcome: Outcome,
    },
    RunError {
        message: String,
        code: String,
    },
    /// `metadata`: a user message's files, `{spool: {files: [ContentPart…]}}` (see
    /// `user_message` in the module above); absent otherwise. `@ag-ui/client` merges an
    /// event's metadata into the message it builds, so the message keeps them.
    #[serde(rename_all = "camelCase")]
    TextMessageStart {
        message_id: String,
        role: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        metadata: Option<Value>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageEnd {
        message_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningStart {
        message_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageStart {
        message_id: String,
        role: String,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageContent {
        message_id: String,
        delta: String,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageEnd {
        message_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningEnd {
        message_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd {
        tool_call_id: String,
    },
    /// `content` is what the tool returned, as the model saw it.
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        metadata: Option<Value>,
    },
    /// `{sessionId, title, todos}`: Spool's view of the thread. Read-only: the input's
    /// `state` is not applied.
    StateSnapshot {
        #[schema(value_type = Object)]
        snapshot: Value,
    },
    /// JSON Patch operations on the snapshot's state.
    StateDelta {
        #[schema(value_type = Vec<Object>)]
        delta: Vec<Value>,
    },
    Custom {
        name: String,
        #[schema(value_type = Object)]
        value: Value,
    },
}

/// Why an AG-UI run ended (`RUN_FINISHED.outcome`).
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Outcome {
    /// The run ended, or it waits for the client: `pendingToolCallIds` names the calls
    /// of the client's own tools (`RunAgentInput.tools`) it waits for, each answered by
    /// a `tool` message with its `toolCallId` in the next request.
    #[serde(rename_all = "camelCase")]
    Success {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pending_tool_call_ids: Vec<String>,
    },
    /// The run waits for these decisions; the next request's `resume` answers them.
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

/// An approval, as AG-UI's interrupt: answered by a resume entry with its `id`. A
/// question asks for `{answer}` (its options are the schema's `examples`; an answer of
/// one's own is always allowed), any other approval for `{approved, reason?}`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    /// The `per_…` approval.
    pub id: ApprovalId,
    /// `tool_approval` or `question`.
    pub reason: String,
    pub message: String,
    pub tool_call_id: String,
    /// What a resume entry's `payload` carries: `{approved, reason?}`, or a
    /// question's `{answer}`.
    #[schema(value_type = Object)]
    pub response_schema: Value,
    /// ISO 8601, UTC.
    pub expires_at: String,
    /// `{spool: {tool, card}}`: the tool and the approval's redacted card (argument
    /// summary, preview), whole.
    #[schema(value_type = Object)]
    pub metadata: Value,
}

impl Interrupt {
    pub fn of(approval: &Approval) -> Self {
        let (reason, message, response_schema) = match asks_for_input(approval) {
            true => question(approval),
            false => {
                let summary = approval.payload["summary"].as_str().filter(|s| !s.is_empty());
                let message = match summary {
                    // A guardrail asks whether the run goes on: "This run has spent …".
                    _ if approval.is_guardrail() => {
                        approval.payload["reason"].as_str().unwrap_or("Continue?").to_owned()
                    }
                    Some(summary) => format!("Allow {}: {summary}?", approval.tool),
                    None => format!("Allow {}?", approval.tool),
                };
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "approved": {"type": "boolean"},
                        "reason": {"type": "string", "description": "Told to the model when the call is denied"},
                    },
                    "required": ["approved"],
                });
                (TOOL_APPROVAL, message, schema)
            }
        };
        Self {
            id: approval.id.clone(),
            reason: reason.to_owned(),
            message,
            tool_call_id: approval.tool_call_id.clone(),
            response_schema,
            expires_at: spool_protocol::time::iso8601(approval.expires_at),
            metadata: json!({"spool": {"tool": approval.tool, "card": approval.payload}}),
        }
    }
}

/// A question's interrupt reason, message (the question) and answer schema.
fn question(approval: &Approval) -> (&'static str, String, Value) {
    let message = approval.payload["question"].as_str().unwrap_or_default().to_owned();
    let labels: Vec<&Value> =
        approval.payload["options"].as_array().into_iter().flatten().map(|o| &o["label"]).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "minLength": 1,
                "description": "One of the options' labels, or an answer in the person's own words",
                "examples": labels,
            },
        },
        "required": ["answer"],
    });
    (QUESTION, message, schema)
}

impl AgUiEvent {
    /// `data: <json>` and a blank line.
    pub fn to_sse(&self) -> Bytes {
        let json = serde_json::to_string(self).expect("events are plain data and always serialize");
        sse::encode(None, None, &json)
    }
}
