//! Frames of the native session stream (`GET /api/sessions/:id/events`, seed 000).
//!
//! | `type`             | carries                                              |
//! |--------------------|------------------------------------------------------|
//! | `session.snapshot` | the session's [`SessionState`], on connect or when replay is impossible |
//! | `session.state`    | the same state after a command-state change or run settlement |
//! | `run.accepted`     | `requestId` and `runId` of a newly accepted prompt    |
//! | `loop.event`       | one [`AgentEvent`] unrenamed, with `runId` and optional `messageIndex` |
//! | `session.git`      | the project's new [`GitState`](crate::git::GitState) (the git poller saw it change) |
//! | `session.queue`    | the session's queue of prompts waiting for the run, and what changed in it |
//! | `session.presence` | who is on the session now ([`Presence`](crate::presence::Presence)), when it changed |
//!
//! Every frame has `sessionId`, `streamId` and `seq`; its SSE id is `streamId:seq` and
//! it has no SSE `event:` field (browsers read it through `onmessage`). A frame is
//! serialized once, when it is published, and the same bytes go to every subscriber.
//! `message_update` carries a delta with its offset, not the whole message: see
//! [`crate::event`] for why.

use crate::cursor::Cursor;
use crate::domain::{RunError, Session, SessionStatus};
use crate::event::AgentEvent;
use crate::ids::{MessageId, RunId, SessionId, StreamId};
use crate::message::{IndexedMessage, Message};
use crate::time::Millis;
use crate::{RunStatus, sse};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

pub const SNAPSHOT: &str = "session.snapshot";
pub const STATE: &str = "session.state";
pub const RUN_ACCEPTED: &str = "run.accepted";
pub const LOOP_EVENT: &str = "loop.event";
pub const GIT: &str = "session.git";
pub const QUEUE: &str = "session.queue";
pub const PRESENCE: &str = "session.presence";

/// How many of the latest user rounds a snapshot carries; earlier ones load from the
/// history endpoint.
pub const SNAPSHOT_USER_ROUNDS: usize = 3;

/// One business frame of a session stream (the `data` of a native stream event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Frame {
    #[serde(flatten)]
    pub body: FrameBody,
    pub session_id: SessionId,
    pub stream_id: StreamId,
    pub seq: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum FrameBody {
    #[serde(rename = "session.snapshot")]
    Snapshot { state: Box<SessionState> },
    #[serde(rename = "session.state")]
    State { state: Box<SessionState> },
    #[serde(rename = "run.accepted", rename_all = "camelCase")]
    RunAccepted { request_id: String, run_id: RunId },
    #[serde(rename = "loop.event", rename_all = "camelCase")]
    LoopEvent {
        run_id: RunId,
        #[serde(skip_serializing_if = "Option::is_none")]
        message_index: Option<u64>,
        /// The committed message's id, on `message_end` (what history pages and
        /// snapshots call the message).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<MessageId>,
        event: AgentEvent,
    },
    /// The project's git state changed (branch, commit or diff). An announcement, not
    /// part of the state: snapshots do not carry it, and a session's first reading
    /// after it is loaded is not announced (there is nothing to compare it with).
    #[serde(rename = "session.git")]
    Git { git: crate::git::GitState },
    /// The queue changed: `queue` is all of it now (what the state's `queue` becomes),
    /// `change` what happened. A frame of its own, not a `session.state`, so the hub can
    /// say which messages were taken and which removed. `paused` (absent when false):
    /// Stop paused the queue, and nothing in it runs until it is resumed or a prompt is
    /// sent (what the state's `queuePaused` becomes).
    #[serde(rename = "session.queue")]
    Queue {
        queue: Vec<QueuedMessage>,
        change: QueueChange,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        paused: bool,
    },
    /// Who is on the session changed (views, answerers, visible ones, by kind of
    /// client; all nodes): what the state's `presence` becomes. Announced a moment
    /// after the change settles, so a page that reconnects makes no flurry.
    #[serde(rename = "session.presence")]
    Presence { presence: crate::presence::Presence },
}

impl FrameBody {
    pub fn kind(&self) -> &'static str {
        match self {
            FrameBody::Snapshot { .. } => SNAPSHOT,
            FrameBody::State { .. } => STATE,
            FrameBody::RunAccepted { .. } => RUN_ACCEPTED,
            FrameBody::LoopEvent { .. } => LOOP_EVENT,
            FrameBody::Git { .. } => GIT,
            FrameBody::Queue { .. } => QUEUE,
            FrameBody::Presence { .. } => PRESENCE,
        }
    }
}

impl Frame {
    pub fn cursor(&self) -> Cursor {
        Cursor { stream_id: self.stream_id.clone(), seq: self.seq }
    }

    /// The complete SSE event (`id: streamId:seq`, `data: json`, blank line), ready to
    /// be shared by every subscriber.
    pub fn to_sse(&self) -> Bytes {
        let json = serde_json::to_string(self).expect("frames are plain data and always serialize");
        sse::encode(Some(&self.cursor().to_string()), None, &json)
    }
}

/// The state a snapshot carries: what a client needs to draw the session from nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    pub session: Session,
    pub status: SessionStatus,
    pub active_run: Option<ActiveRun>,
    /// Committed messages of the latest three user rounds, oldest first.
    pub messages: Vec<IndexedMessage>,
    /// Absolute index of `messages[0]`; equals `total` when `messages` is empty.
    pub first_index: u64,
    /// Number of committed messages in the whole session.
    pub total: u64,
    /// Messages still being streamed, by the absolute index they will have.
    // JSON object keys are strings: the schema says so (a `u64` key would read as an
    // integer `propertyNames`, which no JSON key matches).
    #[serde(with = "index_map")]
    #[schema(value_type = BTreeMap<String, Message>)]
    pub drafts: BTreeMap<u64, Message>,
    /// Tool executions of the shown rounds, merged by tool call id.
    pub tool_executions: BTreeMap<String, ToolExecution>,
    /// Prompt timings by user message index.
    #[serde(with = "index_map")]
    #[schema(value_type = BTreeMap<String, PromptTiming>)]
    pub prompt_timings: BTreeMap<u64, PromptTiming>,
    /// Approvals waiting for a decision, oldest first.
    pub pending_approvals: Vec<crate::approval::Approval>,
    /// The most recent resolution, so a client can show what happened to a card.
    #[serde(default)]
    pub last_approval: Option<crate::approval::LastApproval>,
    /// The agent's todo list, as its last `todo_write` left it (stored; empty when it
    /// never wrote one).
    #[serde(default)]
    pub todos: Vec<crate::hub::Todo>,
    /// Prompts sent with `queue: true` while a run was going, next first (absent when
    /// there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueuedMessage>,
    /// Stop paused the queue (absent when not): its prompts wait until
    /// `POST /api/sessions/:id/queue/resume` or the next prompt sent with `queue: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue_paused: bool,
    /// The user turns of the shown rounds that have other versions (an edit or a
    /// regenerate shelved one), for a switcher on each (absent when none has).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<crate::branch::VariantSet>,
    /// The revert an unrevert can still undo (absent when none is pending): every view
    /// draws it from here, so a client that keeps sessions from their streams sees it
    /// come with the revert and go with the unrevert or the prompt that makes it final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<crate::revert::PendingRevert>,
    /// Who is on the session, as the last `session.presence` frame said (absent while
    /// nobody is, or before the first).
    #[serde(default, skip_serializing_if = "crate::presence::Presence::is_empty")]
    pub presence: crate::presence::Presence,
}

/// A prompt waiting for the session's active run to settle. Its id becomes the user
/// message's id once a run takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    pub id: MessageId,
    /// The client's `requestId` (or one Spool made up): the run that takes the message
    /// has it, so a retried prompt finds the message queued or its run.
    pub request_id: String,
    pub text: String,
    pub created_at: Millis,
    /// The files sent with it (issue 42), already held by the session: its user message
    /// holds them before its text once a run takes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::api::AttachmentInfo>,
}

/// What changed in a session's queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum QueueChange {
    /// A prompt joined the end of the queue.
    #[serde(rename_all = "camelCase")]
    Added { message_id: MessageId },
    /// A run took these messages (it starts right after this frame).
    #[serde(rename_all = "camelCase")]
    Taken { message_ids: Vec<MessageId>, run_id: RunId },
    /// A person removed a message before any run took it.
    #[serde(rename_all = "camelCase")]
    Deleted { message_id: MessageId },
    /// Stop paused the queue: its prompts stay, and none starts on its own.
    Paused,
    /// The queue goes on (Resume, or a prompt sent while it was paused).
    Resumed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveRun {
    pub run_id: RunId,
    pub request_id: String,
    pub status: RunStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Running,
    Success,
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: serde_json::Value,
    pub status: ToolStatus,
    pub result: Option<String>,
    /// What the call has printed so far while it runs (its `tool_execution_update`
    /// deltas joined); absent before the first update and once the call has ended,
    /// when `result` takes over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The live output reached its cap; nothing more streams for this call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// What a finished `write` or `edit` changed, as its stored result keeps it (see
    /// [`crate::Message::ToolResult`]'s `diff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptTiming {
    pub user_message_index: u64,
    pub started_at: Millis,
    pub first_token_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// How the prompt's run ended (`completed`, `failed`, `cancelled`), once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// Why a run that did not complete ended: a view explains it beside the timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The run that answers the prompt (a view that saw only a snapshot can name the
    /// run whose end it shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
}

impl PromptTiming {
    /// The timing row of `run`'s prompt as the run record has it now.
    pub fn of(run: &crate::domain::Run) -> PromptTiming {
        let ended = run.ended_at.is_some();
        PromptTiming {
            user_message_index: run.user_message_index,
            started_at: run.created_at,
            first_token_at: run.first_token_at,
            ended_at: run.ended_at,
            status: ended.then_some(run.status),
            error: run.error.clone().filter(|_| ended),
            run_id: Some(run.id.clone()),
        }
    }

    /// The `prompt_timing` event that sets this row.
    pub fn event(&self) -> AgentEvent {
        AgentEvent::PromptTiming {
            user_message_index: self.user_message_index,
            started_at: self.started_at,
            first_token_at: self.first_token_at,
            ended_at: self.ended_at,
            status: self.status,
            error: self.error.clone(),
        }
    }

    /// The row a `prompt_timing` event sets, if it is one.
    pub fn from_event(event: &AgentEvent) -> Option<PromptTiming> {
        match event {
            AgentEvent::PromptTiming { user_message_index, started_at, first_token_at, ended_at, status, error } => {
                Some(PromptTiming {
                    user_message_index: *user_message_index,
                    started_at: *started_at,
                    first_token_at: *first_token_at,
                    ended_at: *ended_at,
                    status: *status,
                    error: error.clone(),
                    run_id: None,
                })
            }
            _ => None,
        }
    }
}

/// Maps keyed by message index. JSON object keys are strings; serde's derive reads them
/// back as integers only when it sees the map directly, not when the map sits inside a
/// flattened or internally tagged frame (it buffers the keys as strings first). Reading
/// string keys and parsing them works in both places.
mod index_map {
    use serde::de::{DeserializeOwned, Error};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<T: Serialize, S: Serializer>(map: &BTreeMap<u64, T>, s: S) -> Result<S::Ok, S::Error> {
        map.serialize(s)
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, T>, D::Error> {
        BTreeMap::<String, T>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| {
                k.parse::<u64>().map(|k| (k, v)).map_err(|_| D::Error::custom(format!("`{k}` is not a message index")))
            })
            .collect()
    }
}
