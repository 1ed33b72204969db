//! The canonical agent events: one stream per session that every wire dialect maps from.
//!
//! Names follow the coding-agent contract of the seeds (`agent_start`, `message_update`,
//! `tool_execution_end`, …) and reach native clients unrenamed inside `loop.event`.
//!
//! # Why `message_update` carries a delta, not the message
//!
//! In the seed contract every `message_update` repeats the whole assistant message so
//! far, so an answer of n tokens costs O(n²) bytes on the wire: a 4,000-token answer
//! would be tens of megabytes per client. Spool sends only the model's own stream event
//! ([`StreamDelta`]): the content block it belongs to (`contentIndex`), the `offset` at
//! which the delta starts inside that block, and the delta. Whole messages travel only
//! in `message_start`, `message_end` and snapshots.
//!
//! `offset` counts UTF-16 code units (JavaScript's `String.length`), the unit a browser
//! can check without re-encoding. A client applies a delta only when `offset` equals the
//! length it already has: an equal offset it has passed is a duplicate to drop, a larger
//! one is a hole that asks for a snapshot. That makes deltas idempotent and holes visible.
//!
//! # Live tool output
//!
//! A tool that prints while it runs (`bash`) is streamed the same way: each
//! `tool_execution_update` carries only what was printed since the previous one
//! (`delta`), at its `offset` (UTF-16 code units) in the call's output so far, so a
//! client appends it exactly when `offset` equals what it holds. Updates are coalesced
//! (at most one per [`LIVE_OUTPUT_INTERVAL_MS`] unless [`LIVE_OUTPUT_CHUNK`] bytes are
//! waiting) and one call streams at most [`LIVE_OUTPUT_CAP`] bytes: the update that
//! reaches the cap says `truncated: true` and is the call's last. The session state's
//! tool execution holds the output so far while the call runs (`output`), so a snapshot
//! shows it; `tool_execution_end` carries the result, which supersedes it. A call the
//! run's Stop cuts short ends with a result that says so and keeps what was printed.

use crate::message::{Message, StopReason};
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// The most output, in bytes, one tool call streams live (256 KiB): enough to follow a
/// long build, small enough that a chatty command cannot flood the stream or the replay
/// buffer (4 MiB). The call's result keeps its own limits.
pub const LIVE_OUTPUT_CAP: usize = 256 * 1024;
/// Bytes waiting that are sent at once, without waiting for the interval.
pub const LIVE_OUTPUT_CHUNK: usize = 4 * 1024;
/// The shortest gap between two updates of one call, unless a chunk is full.
pub const LIVE_OUTPUT_INTERVAL_MS: u64 = 100;

/// One step of an agent run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    AgentStart {},
    TurnStart {},
    MessageStart {
        message: Message,
    },
    #[serde(rename_all = "camelCase")]
    MessageUpdate {
        assistant_message_event: StreamDelta,
    },
    MessageEnd {
        message: Message,
    },
    #[serde(rename_all = "camelCase")]
    ToolExecutionStart {
        tool_call_id: String,
        tool_name: String,
        args: serde_json::Value,
    },
    /// Output a running tool printed since its previous update (see the module docs on
    /// live tool output): `delta` starts at `offset` of the call's output so far.
    #[serde(rename_all = "camelCase")]
    ToolExecutionUpdate {
        tool_call_id: String,
        tool_name: String,
        /// Where `delta` starts in the call's output, in UTF-16 code units.
        offset: usize,
        delta: String,
        /// The call reached the live output cap ([`LIVE_OUTPUT_CAP`]): this is its last
        /// update, and the rest of what it prints shows only in its result.
        #[serde(default)]
        truncated: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolExecutionEnd {
        tool_call_id: String,
        tool_name: String,
        result: String,
        is_error: bool,
    },
    TurnEnd {},
    #[serde(rename_all = "camelCase")]
    AgentEnd {
        /// How the run ended: `completed`, `failed` or `cancelled`.
        status: String,
        /// The run's total usage and cost (per-step usage is on each assistant message).
        #[serde(default)]
        usage: crate::domain::Usage,
        /// Why a failed or cancelled run ended, as its record holds it, so no view reads
        /// the run back to tell. Absent on a completed run (and in frames stored before
        /// it was carried).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<crate::domain::RunError>,
    },
    #[serde(rename_all = "camelCase")]
    PromptTiming {
        user_message_index: u64,
        started_at: Millis,
        first_token_at: Option<Millis>,
        ended_at: Option<Millis>,
        /// How the run ended, once it has (see [`crate::frame::PromptTiming`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<crate::domain::RunStatus>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<crate::domain::RunError>,
    },
    AgentSettled {},
    SessionTitle {
        title: String,
    },
    /// The agent replaced its todo list (the `todo_write` tool): the whole new list.
    TodoWrite {
        todos: Vec<crate::hub::Todo>,
    },
    /// The model provider failed before any output and the call is retried.
    #[serde(rename_all = "camelCase")]
    AutoRetryStart {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        error_message: String,
    },
    #[serde(rename_all = "camelCase")]
    AutoRetryEnd {
        attempt: u32,
        success: bool,
    },
    /// Older turns are being summarized to fit the context budget.
    #[serde(rename_all = "camelCase")]
    CompactionStart {
        /// Estimated tokens of the conversation before compaction.
        tokens_before: u64,
    },
    #[serde(rename_all = "camelCase")]
    CompactionEnd {
        /// Messages now represented by the summary (absolute indexes below this one).
        summarized_before: u64,
        tokens_after: u64,
        /// False when summarizing failed and the run went on with the raw history.
        success: bool,
    },
    /// A tool call waits for a person; the run is `interrupted` until a decision.
    ApprovalRequested {
        approval: Box<crate::approval::Approval>,
    },
    /// An approval left the pending list: decided, expired or cancelled.
    #[serde(rename_all = "camelCase")]
    ApprovalResolved {
        approval_id: crate::ids::ApprovalId,
        /// `once`, `always`, `reject`, `fill`, `expired` or `cancelled`.
        decision: String,
        actor: Option<crate::ids::UserId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The project's files were recorded around a step whose calls may change them
    /// (see [`SnapshotPhase`]): `snapshot` names the recorded tree in the shadow
    /// repository Spool keeps for the project, for a later revert.
    #[serde(rename_all = "camelCase")]
    StepSnapshot {
        snapshot: String,
        phase: SnapshotPhase,
        /// The assistant message whose tool calls the step runs.
        message_index: u64,
    },
}

/// When a step snapshot was taken: before the step's first call or after its last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotPhase {
    Before,
    After,
}

impl AgentEvent {
    /// The `type` string on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentEvent::AgentStart {} => "agent_start",
            AgentEvent::TurnStart {} => "turn_start",
            AgentEvent::MessageStart { .. } => "message_start",
            AgentEvent::MessageUpdate { .. } => "message_update",
            AgentEvent::MessageEnd { .. } => "message_end",
            AgentEvent::ToolExecutionStart { .. } => "tool_execution_start",
            AgentEvent::ToolExecutionUpdate { .. } => "tool_execution_update",
            AgentEvent::ToolExecutionEnd { .. } => "tool_execution_end",
            AgentEvent::TurnEnd {} => "turn_end",
            AgentEvent::AgentEnd { .. } => "agent_end",
            AgentEvent::PromptTiming { .. } => "prompt_timing",
            AgentEvent::AgentSettled {} => "agent_settled",
            AgentEvent::SessionTitle { .. } => "session_title",
            AgentEvent::TodoWrite { .. } => "todo_write",
            AgentEvent::ApprovalRequested { .. } => "approval_requested",
            AgentEvent::AutoRetryStart { .. } => "auto_retry_start",
            AgentEvent::AutoRetryEnd { .. } => "auto_retry_end",
            AgentEvent::CompactionStart { .. } => "compaction_start",
            AgentEvent::CompactionEnd { .. } => "compaction_end",
            AgentEvent::ApprovalResolved { .. } => "approval_resolved",
            AgentEvent::StepSnapshot { .. } => "step_snapshot",
        }
    }
}

/// The model's own stream event inside `message_update` (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamDelta {
    #[serde(rename_all = "camelCase")]
    TextStart { content_index: usize },
    #[serde(rename_all = "camelCase")]
    TextDelta { content_index: usize, offset: usize, delta: String },
    #[serde(rename_all = "camelCase")]
    TextEnd { content_index: usize },
    #[serde(rename_all = "camelCase")]
    ThinkingStart { content_index: usize },
    #[serde(rename_all = "camelCase")]
    ThinkingDelta { content_index: usize, offset: usize, delta: String },
    #[serde(rename_all = "camelCase")]
    ThinkingEnd { content_index: usize },
    #[serde(rename_all = "camelCase")]
    ToolcallStart { content_index: usize, id: String, name: String },
    /// A piece of the tool call's JSON arguments, as the model streams them.
    #[serde(rename_all = "camelCase")]
    ToolcallDelta { content_index: usize, offset: usize, delta: String },
    #[serde(rename_all = "camelCase")]
    ToolcallEnd { content_index: usize },
    #[serde(rename_all = "camelCase")]
    Done { stop_reason: StopReason },
}

/// Length of `s` in the unit of [`StreamDelta`] offsets (UTF-16 code units).
pub fn offset_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}
