//! The WebSocket hub of seed 002 (`GET /api/ws`), mapped from the native session
//! frames. A channel is a session id; every event travels in the seed's envelope
//! `{type, channel_id, data, timestamp}`, plus `cursor` (`streamId:seq` of the frame it
//! came from) so a client that reconnects can ask for exactly what it missed.
//!
//! | native frame                         | hub event |
//! |--------------------------------------|-----------|
//! | `run.accepted`                       | `agent.status` `running` |
//! | `message_end` (user, assistant)      | `message.created` (not for a queued prompt, announced when queued; a user message's files as `attachments`) |
//! | `message_update` `text_delta`        | `message.streaming` (the delta at its offset; the text so far in the content form) |
//! | `message_update` `thinking_delta`    | `agent.thinking` (the delta at its offset; the block so far in the content form) |
//! | `message_start` (assistant), retries, compaction | `agent.activity` |
//! | `tool_execution_start` / `_end`      | `tool.use` (`input`: the arguments as JSON text) / `tool.result` |
//! | `tool_execution_update`              | nothing, on purpose: the seed's hub has no event for partial tool output, and `tool.result` carries the output |
//! | `approval_requested`                 | `gate.approval_requested` (a tool to confirm), `agent.ask_user` (a choice or input) or `agent.exit_plan` (a plan to accept) |
//! | `approval_resolved`                  | `gate.approval_resolved` |
//! | `agent_settled` after `agent_end`    | `agent.status` `completed` / `errored` / `cancelled` with duration, turns, stop reason, model, usage |
//! | `session_title`                      | `channel.updated` (`channel_id`, `title`) |
//! | `todo_write`                         | `agent.todo_write` (the whole list) |
//! | `session.git` (the git poller)       | `channel.updated` with branch, commit, diff additions/deletions |
//! | `session.queue` (a prompt queued / a run took queued messages / one was removed) | `message.created` with `is_processed: false` (its files as `attachments`) / `messages.processed` / `message.deleted` |
//! | `session.presence` (who is on the session changed)  | `channel.presence` (Spool's own: `viewers`, `answerers`, `visible`, `clients`) |
//!
//! Each frame gives at most one event, so a cursor names a point between events and
//! a replay from it can neither repeat nor skip one. Every event's `data` fits the
//! payload schema the OpenAPI document publishes for its type (`HubEvent`), which
//! admits Spool's own fields beside the seed's (`run_id`, `message_index`, …). Two
//! departures from the seed, both deliberate: by default `message.streaming` and
//! `agent.thinking` carry the piece that arrived and its offset instead of the whole
//! text so far — the seed's form ([`Streaming::Content`], `?streaming=content`) costs
//! O(n²) bytes for an answer of n pieces, so a client asks for it —, and the terminal
//! `agent.status` comes at `agent_settled` — the frame after which the run's status,
//! duration and usage are all known — rather than at `agent_end`.
//!
//! What the mapping remembers between frames of one channel (turns, model, the status
//! `agent_end` announced) is a [`RunTally`] the connection owns. A tally that joined
//! mid-run leaves the fields it never saw `null`.
//!
//! The routes are beside it: `routes.rs` serves the socket, `publish.rs` takes the
//! events other components publish (`POST /api/hub/events`).

pub(crate) mod publish;
pub(crate) mod routes;

use serde::Serialize;
use serde_json::{Value, json};
use spool_protocol::api::AttachmentInfo;
use spool_protocol::frame::{Frame, FrameBody, QueueChange};
use spool_protocol::hub::MessageAttachment;
use spool_protocol::time::Millis;
use spool_protocol::{
    AgentEvent, Approval, ApprovalKind, Message, MessageId, ProjectId, SessionId, StopReason, StreamDelta, Usage,
};

pub const MESSAGE_CREATED: &str = "message.created";
pub const MESSAGE_STREAMING: &str = "message.streaming";
pub const MESSAGE_DELETED: &str = "message.deleted";
pub const MESSAGES_PROCESSED: &str = "messages.processed";
pub const AGENT_STATUS: &str = "agent.status";
pub const AGENT_THINKING: &str = "agent.thinking";
pub const AGENT_ACTIVITY: &str = "agent.activity";
pub const AGENT_ASK_USER: &str = "agent.ask_user";
pub const AGENT_EXIT_PLAN: &str = "agent.exit_plan";
pub const AGENT_TODO_WRITE: &str = "agent.todo_write";
pub const TOOL_USE: &str = "tool.use";
pub const TOOL_RESULT: &str = "tool.result";
pub const GATE_APPROVAL_REQUESTED: &str = "gate.approval_requested";
pub const GATE_APPROVAL_RESOLVED: &str = "gate.approval_resolved";
pub const CHANNEL_CREATED: &str = "channel.created";
pub const CHANNEL_DELETED: &str = "channel.deleted";
pub const CHANNEL_UPDATED: &str = "channel.updated";
/// Sent instead of a replay when a subscribe message's cursor cannot be honoured:
/// `data.state` is the native session state; everything after it is live.
pub const CHANNEL_SNAPSHOT: &str = "channel.snapshot";
/// Who is on the channel's session changed (Spool's own; not in seed 002, and not a
/// type a publisher may send): `data` is the session's presence, as
/// `GET /api/sessions/{id}/presence` answers.
pub const CHANNEL_PRESENCE: &str = "channel.presence";
/// A subscribe message was applied: events of its channels that arrived before this
/// one belong to the previous filter (a channel restarted at a cursor repeats from
/// there).
pub const SUBSCRIBED: &str = "subscribed";
/// A subscribe message named a channel the client cannot follow.
pub const CHANNEL_ERROR: &str = "channel.error";
/// A client message the hub could not read (`channel_id` is empty).
pub const ERROR: &str = "error";

/// One hub event in the seed's envelope.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Envelope {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub channel_id: String,
    pub data: Value,
    /// When the hub sent it (ms since the epoch), as in the seed.
    pub timestamp: Millis,
    /// The native frame it came from; send it back in a subscribe message's `cursors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Envelope {
    fn global(kind: &'static str, channel: String, data: Value, now: Millis) -> Self {
        Self { kind, channel_id: channel, data, timestamp: now, cursor: None }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("envelopes are plain data and always serialize")
    }
}

/// What one channel's mapping remembers about the run in progress.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunTally {
    /// Model calls made so far; `None` when the run started before this tally did.
    turns: Option<u32>,
    model: Option<String>,
    stop_reason: Option<StopReason>,
    /// `agent_end`'s status and usage, reported at `agent_settled`.
    ended: Option<(String, Usage)>,
    duration_ms: Option<i64>,
    /// The run this channel knows to be going, once a frame of it was mapped: a
    /// snapshot that shows it ended reports its end (see [`snapshot`]).
    run: Option<spool_protocol::RunId>,
    /// The run's prompt: its stored message id and text (`trigger_msg_id`,
    /// `trigger_content`, `msg_id` of the seed's events).
    trigger: Option<(MessageId, String)>,
    /// Queued prompts announced as `message.created` (`is_processed: false`) that a run
    /// took: when the run commits one, it is not announced again (the seed's
    /// `messages.processed` said it was taken). Kept from `messages.processed` to the
    /// end of the run that took them.
    taken: Vec<MessageId>,
    streaming: Streaming,
    /// With [`Streaming::Content`]: the message that streams, its text and its thinking
    /// so far.
    so_far: Option<SoFar>,
}

/// How `message.streaming` and `agent.thinking` carry a growing answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Streaming {
    /// The piece that arrived and its `offset`: each event's size is its piece's, so an
    /// answer costs its own length on the wire. The default.
    #[default]
    Delta,
    /// The seed's form (`?streaming=content`): `content` (and thinking's `text`) is the
    /// whole block so far, so an answer of n pieces costs O(n²) bytes.
    Content,
}

/// The text and thinking of the message that streams (its index in the session).
#[derive(Clone, Debug, Default, PartialEq)]
struct SoFar {
    index: Option<u64>,
    text: String,
    thinking: String,
}

impl RunTally {
    /// An empty tally whose events stream in this form.
    pub fn new(streaming: Streaming) -> Self {
        RunTally { streaming, ..RunTally::default() }
    }

    /// A tally for a new run (or none), keeping its form and the queued prompts runs took.
    fn restart(&mut self, run: Option<spool_protocol::RunId>, turns: Option<u32>) -> RunTally {
        let (taken, streaming) = (std::mem::take(&mut self.taken), self.streaming);
        std::mem::replace(self, RunTally { turns, run, taken, streaming, ..RunTally::default() })
    }

    /// Joins a run going on in `state`: its model, and in the content form the text of
    /// its latest draft, which the next pieces continue.
    fn join(&mut self, run: spool_protocol::RunId, state: &spool_protocol::frame::SessionState) {
        self.restart(Some(run), None);
        self.model = draft_model(state);
        if self.streaming == Streaming::Content
            && let Some((index, draft)) = state.drafts.iter().next_back()
        {
            let thinking = draft
                .content()
                .iter()
                .filter_map(|c| match c {
                    spool_protocol::Content::Thinking { thinking } => Some(thinking.as_str()),
                    _ => None,
                })
                .collect();
            self.so_far = Some(SoFar { index: Some(*index), text: draft.text(), thinking });
        }
    }

    /// In the content form: the block so far after `delta`, of thinking or of text.
    fn grow(&mut self, index: Option<u64>, delta: &str, thinking: bool) -> Option<&str> {
        if self.streaming != Streaming::Content {
            return None;
        }
        let so_far = self.so_far.get_or_insert_with(SoFar::default);
        if so_far.index != index {
            *so_far = SoFar { index, ..SoFar::default() };
        }
        let block = if thinking { &mut so_far.thinking } else { &mut so_far.text };
        block.push_str(delta);
        Some(block.as_str())
    }
}

/// Who wrote a channel's user messages: the session's owner (only the owner follows a
/// session). Spool's agent writes the rest, as [`AGENT_AUTHOR`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Author {
    pub id: String,
    pub name: String,
}

/// The `author_id` and `author_name` of the agent's own messages.
pub const AGENT_AUTHOR: &str = "spool";

/// What the hub's mapping of one channel carries from frame to frame: its run tally and
/// the author of its user messages. It is the hub's encode-once form of a session
/// (`dialect/shared.rs`); encoding each event for the wire is the transport's
/// (`routes.rs`), and the server keeps the forms in its application state.
#[derive(Clone)]
pub struct HubForm(pub RunTally, pub Author);

/// Maps one native frame of a channel. `now` stamps the envelope.
pub fn map_frame(frame: &Frame, tally: &mut RunTally, author: &Author, now: Millis) -> Option<Envelope> {
    let data = match &frame.body {
        FrameBody::RunAccepted { request_id, run_id } => {
            tally.restart(Some(run_id.clone()), Some(0));
            (AGENT_STATUS, json!({"status": "running", "run_id": run_id, "request_id": request_id}))
        }
        FrameBody::LoopEvent { run_id, message_index, message_id, event } => {
            if !matches!(event, AgentEvent::AgentSettled {}) {
                tally.run = Some(run_id.clone());
            }
            let at =
                Place { session: &frame.session_id, run_id, index: *message_index, message_id: message_id.as_ref() };
            loop_event(&at, event, tally, author)?
        }
        FrameBody::Git { git } => (CHANNEL_UPDATED, git_updated(&frame.session_id, git)),
        FrameBody::Queue { change, queue, .. } => match change {
            QueueChange::Added { message_id } => {
                let queued = queue.iter().find(|m| &m.id == message_id)?;
                (MESSAGE_CREATED, queued_created(queued, author))
            }
            QueueChange::Taken { message_ids, run_id } => {
                tally.taken.extend(message_ids.iter().cloned());
                (MESSAGES_PROCESSED, json!({"msg_ids": message_ids, "run_id": run_id}))
            }
            QueueChange::Deleted { message_id } => (MESSAGE_DELETED, json!({"msg_id": message_id})),
            // The seed has no event for a paused queue; the state shows it.
            QueueChange::Paused | QueueChange::Resumed => return None,
        },
        FrameBody::Presence { presence } => {
            (CHANNEL_PRESENCE, serde_json::to_value(presence).expect("presence is plain data"))
        }
        FrameBody::State { .. } | FrameBody::Snapshot { .. } => return None,
    };
    let (kind, data) = data;
    Some(Envelope {
        kind,
        channel_id: frame.session_id.to_string(),
        data,
        timestamp: now,
        cursor: Some(frame.cursor().to_string()),
    })
}

/// A prompt that joined the queue: the seed's `message.created` of a message not yet
/// processed (`messages.processed` follows when a run takes it, `message.deleted` if it
/// is removed first).
fn queued_created(queued: &spool_protocol::frame::QueuedMessage, author: &Author) -> Value {
    let data = json!({
        "msg_id": queued.id,
        "author_id": author.id,
        "author_name": author.name,
        "content": queued.text,
        "is_bot": false,
        "is_processed": false,
        "priority": 0,
        "trigger_msg_id": null,
        "thread_id": null,
        "role": "user",
    });
    with_attachments(data, &queued.files)
}

/// `message.created`'s `data` with the user message's files as `attachments` (each file's
/// id, name, media type, size and URL), in the order sent; without the field when the
/// message has none, so a message without files reads as the seed's.
fn with_attachments(mut data: Value, files: &[AttachmentInfo]) -> Value {
    if !files.is_empty() {
        let attachments: Vec<MessageAttachment> = files
            .iter()
            .map(|f| MessageAttachment {
                id: f.id.to_string(),
                name: f.name.clone(),
                media_type: f.media_type.clone(),
                size: f.size,
                url: f.url.clone(),
            })
            .collect();
        data["attachments"] = serde_json::to_value(attachments).expect("attachments are plain data");
    }
    data
}

/// Where a loop event stands: its session, its run, and the message it belongs to.
struct Place<'a> {
    session: &'a SessionId,
    run_id: &'a spool_protocol::RunId,
    index: Option<u64>,
    /// Set on `message_end`: the stored message's id.
    message_id: Option<&'a MessageId>,
}

fn loop_event(
    at: &Place<'_>,
    event: &AgentEvent,
    tally: &mut RunTally,
    author: &Author,
) -> Option<(&'static str, Value)> {
    let (run_id, index) = (at.run_id, at.index);
    Some(match event {
        AgentEvent::TurnStart {} => {
            if let Some(t) = tally.turns.as_mut() {
                *t += 1;
            }
            return None;
        }
        AgentEvent::MessageStart { message: Message::Assistant { model, .. } } => {
            tally.model = Some(model.clone());
            (AGENT_ACTIVITY, json!({"activity": "model", "model": model, "description": "", "run_id": run_id}))
        }
        AgentEvent::MessageEnd { message } => match message {
            Message::User { .. } => {
                if let Some(id) = at.message_id {
                    tally.trigger = Some((id.clone(), message.text()));
                    if let Some(i) = tally.taken.iter().position(|t| t == id) {
                        // Announced when it was queued; `messages.processed` said it was taken.
                        tally.taken.swap_remove(i);
                        return None;
                    }
                }
                let data = json!({
                    "msg_id": at.message_id,
                    "author_id": author.id,
                    "author_name": author.name,
                    "content": message.text(),
                    "is_bot": false,
                    // Committed as its run takes it.
                    "is_processed": true,
                    "priority": 0,
                    "trigger_msg_id": null,
                    "thread_id": null,
                    "message_index": index,
                    "role": "user",
                    "run_id": run_id,
                });
                (MESSAGE_CREATED, with_attachments(data, &message.attachments()))
            }
            Message::Assistant { model, stop_reason, .. } => {
                tally.model = Some(model.clone());
                tally.stop_reason = *stop_reason;
                (
                    MESSAGE_CREATED,
                    json!({
                        "msg_id": at.message_id,
                        "author_id": AGENT_AUTHOR,
                        "author_name": AGENT_AUTHOR,
                        "content": message.text(),
                        "is_bot": true,
                        "is_processed": true,
                        "priority": 0,
                        "trigger_msg_id": tally.trigger.as_ref().map(|(id, _)| id),
                        "thread_id": null,
                        "message_index": index,
                        "role": "assistant",
                        "run_id": run_id,
                        "model": model,
                        "stop_reason": stop_reason.map(stop_reason_name),
                    }),
                )
            }
            // The tool's outcome already went out as `tool.result`.
            Message::ToolResult { .. } => return None,
        },
        AgentEvent::MessageUpdate { assistant_message_event: delta } => match delta {
            StreamDelta::TextDelta { content_index, offset, delta } => match tally.grow(index, delta, false) {
                Some(content) => (
                    MESSAGE_STREAMING,
                    json!({"run_id": run_id, "message_index": index, "content_index": content_index, "content": content}),
                ),
                None => (
                    MESSAGE_STREAMING,
                    json!({
                        "run_id": run_id,
                        "message_index": index,
                        "content_index": content_index,
                        "offset": offset,
                        "delta": delta,
                    }),
                ),
            },
            StreamDelta::ThinkingDelta { offset, delta, .. } => match tally.grow(index, delta, true) {
                Some(text) => (AGENT_THINKING, json!({"run_id": run_id, "message_index": index, "text": text})),
                None => {
                    (AGENT_THINKING, json!({"run_id": run_id, "message_index": index, "offset": offset, "text": delta}))
                }
            },
            _ => return None,
        },
        AgentEvent::ToolExecutionStart { tool_call_id, tool_name, args } => (
            TOOL_USE,
            // The seed's `input` is a string: the arguments as JSON text.
            json!({"tool_use_id": tool_call_id, "tool_name": tool_name, "input": args.to_string(), "run_id": run_id}),
        ),
        AgentEvent::ToolExecutionEnd { tool_call_id, tool_name, result, is_error } => (
            TOOL_RESULT,
            json!({
                "tool_use_id": tool_call_id,
                "tool_name": tool_name,
                "output": result,
                "is_error": is_error,
                "run_id": run_id,
            }),
        ),
        AgentEvent::AutoRetryStart { attempt, max_attempts, delay_ms, error_message } => (
            AGENT_ACTIVITY,
            json!({
                "activity": "retry",
                "description": error_message,
                "attempt": attempt,
                "max_attempts": max_attempts,
                "delay_ms": delay_ms,
                "run_id": run_id,
            }),
        ),
        AgentEvent::CompactionStart { tokens_before } => (
            AGENT_ACTIVITY,
            json!({
                "activity": "compaction",
                "description": "summarizing older turns",
                "tokens_before": tokens_before,
                "run_id": run_id,
            }),
        ),
        AgentEvent::ApprovalRequested { approval } => approval_requested(approval),
        AgentEvent::ApprovalResolved { approval_id, decision, actor, message } => (
            GATE_APPROVAL_RESOLVED,
            json!({
                "req_id": approval_id,
                "decision": decision,
                "actor": actor,
                "message": message,
                "run_id": run_id,
            }),
        ),
        AgentEvent::AgentEnd { status, usage, .. } => {
            tally.ended = Some((status.clone(), *usage));
            return None;
        }
        AgentEvent::PromptTiming { started_at, ended_at: Some(ended), .. } => {
            tally.duration_ms = Some(ended - started_at);
            return None;
        }
        AgentEvent::AgentSettled {} => {
            let (status, usage) = tally.ended.take()?;
            let status = match status.as_str() {
                "completed" => "completed",
                "cancelled" => "cancelled",
                _ => "errored",
            };
            let settled = tally.restart(None, None);
            // A run takes its queued prompts before it starts (`messages.processed`
            // comes after the previous run settled), so what is left was never
            // committed: nothing to hold on to.
            tally.taken.clear();
            (
                AGENT_STATUS,
                json!({
                    "status": status,
                    "run_id": run_id,
                    "duration_ms": settled.duration_ms,
                    "num_turns": settled.turns,
                    "stop_reason": settled.stop_reason.map(stop_reason_name),
                    "model": settled.model,
                    "trigger_content": settled.trigger.as_ref().map(|(_, text)| text),
                    "msg_id": settled.trigger.as_ref().map(|(id, _)| id),
                    "thread_id": null,
                    "usage": usage,
                }),
            )
        }
        AgentEvent::SessionTitle { title } => (CHANNEL_UPDATED, json!({"channel_id": at.session, "title": title})),
        AgentEvent::TodoWrite { todos } => (AGENT_TODO_WRITE, json!({"todos": todos, "run_id": run_id})),
        // Live tool output: no hub event (see the table in the module docs).
        AgentEvent::ToolExecutionUpdate { .. } => return None,
        _ => return None,
    })
}

/// Seed 002's `channel.updated` for a project's new git state (its payload type, as a
/// publisher would send it): the branch (absent when HEAD is detached), the commit and
/// the diff's line counts.
fn git_updated(session: &SessionId, git: &spool_protocol::git::GitState) -> Value {
    let data = spool_protocol::hub::ChannelUpdated {
        channel_id: session.to_string(),
        branch: git.branch.clone(),
        commit: git.commit.clone(),
        diff_additions: Some(git.additions),
        diff_deletions: Some(git.deletions),
        title: None,
    };
    serde_json::to_value(data).expect("hub payloads are plain data and always serialize")
}

/// A tool call to confirm is the seed's gate approval; a choice or missing input is
/// its `agent.ask_user` card; a plan-mode session's plan (the `exit_plan` tool) is its
/// `agent.exit_plan`. All carry `req_id`, the id to decide with.
pub fn approval_requested(approval: &Approval) -> (&'static str, Value) {
    let payload = &approval.payload;
    if approval.kind == ApprovalKind::ConfirmAction && approval.tool == "exit_plan" {
        return (
            AGENT_EXIT_PLAN,
            json!({
                "plan": payload.get("plan").cloned().unwrap_or_else(|| json!("")),
                "req_id": approval.id,
                "run_id": approval.run_id,
                "expires_at": approval.expires_at,
            }),
        );
    }
    match approval.kind {
        ApprovalKind::ConfirmAction => (
            GATE_APPROVAL_REQUESTED,
            json!({
                "req_id": approval.id,
                "run_id": approval.run_id,
                "kind": "tool",
                "target": payload.get("argument").cloned().unwrap_or(Value::Null),
                "message": payload.get("change").cloned().unwrap_or(Value::Null),
                "tool": approval.tool,
                "details": payload,
                "expires_at": approval.expires_at,
            }),
        ),
        ApprovalKind::SelectOption | ApprovalKind::ProvideInput => (
            AGENT_ASK_USER,
            json!({
                "req_id": approval.id,
                "run_id": approval.run_id,
                "questions": [{
                    "question": payload.get("question").or_else(|| payload.get("change")).cloned().unwrap_or_else(|| json!("")),
                    "header": approval.tool,
                    "options": payload.get("options").cloned().unwrap_or_else(|| json!([])),
                    "multi_select": false,
                }],
                "details": payload,
                "expires_at": approval.expires_at,
            }),
        ),
    }
}

/// The seed's stop-reason words.
fn stop_reason_name(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Stop => "end_turn",
        StopReason::ToolUse => "tool_use",
        StopReason::Length => "max_tokens",
        StopReason::Aborted => "aborted",
        StopReason::Error => "error",
    }
}

/// `channel.snapshot` for a `session.snapshot` frame: what a client gets instead of a
/// replay it asked for and cannot have. If the channel knew a run to be going and the
/// snapshot shows it over, the run's end follows as `agent.status` (the frames that
/// would have said so are what the snapshot replaced). `away`: the snapshot answers a
/// client's cursor (it reconnected), so this channel knows nothing of what the client
/// followed; the latest run that ended is reported then — perhaps again, as a status
/// may be: it says where the run is, it adds nothing to its text.
pub fn snapshot(frame: &Frame, tally: &mut RunTally, away: bool, now: Millis) -> Vec<Envelope> {
    let FrameBody::Snapshot { state } = &frame.body else {
        return Vec::new();
    };
    if away && tally.run.is_none() {
        tally.run = state.prompt_timings.values().rev().find(|t| t.status.is_some()).and_then(|t| t.run_id.clone());
    }
    let mut out = vec![Envelope {
        kind: CHANNEL_SNAPSHOT,
        channel_id: frame.session_id.to_string(),
        data: json!({ "state": state }),
        timestamp: now,
        cursor: Some(frame.cursor().to_string()),
    }];
    let still_going = |run: &spool_protocol::RunId| state.active_run.as_ref().is_some_and(|a| &a.run_id == run);
    if let Some(run) = tally.run.take_if(|run| !still_going(run)) {
        out.extend(ended_in_snapshot(frame, state, &run, now));
        tally.restart(None, None);
    }
    if let Some(active) = &state.active_run {
        // Going on from here: the snapshot's drafts name the model; the turn count is
        // unknown (the run began before this tally).
        tally.join(active.run_id.clone(), state);
    }
    out
}

/// `agent.status` for a run whose end only a snapshot showed: its status from the
/// snapshot's latest ended prompt timing.
fn ended_in_snapshot(
    frame: &Frame,
    state: &spool_protocol::frame::SessionState,
    run: &spool_protocol::RunId,
    now: Millis,
) -> Option<Envelope> {
    let timing = state
        .prompt_timings
        .values()
        .rev()
        .find(|t| t.status.is_some() && t.run_id.as_ref().is_none_or(|r| r == run))?;
    let status = match timing.status? {
        spool_protocol::RunStatus::Completed => "completed",
        spool_protocol::RunStatus::Cancelled => "cancelled",
        _ => "errored",
    };
    let duration_ms = timing.ended_at.map(|end| end - timing.started_at);
    Some(Envelope {
        kind: AGENT_STATUS,
        channel_id: frame.session_id.to_string(),
        data: json!({"status": status, "run_id": run, "duration_ms": duration_ms, "error": timing.error}),
        timestamp: now,
        cursor: None,
    })
}

fn draft_model(state: &spool_protocol::frame::SessionState) -> Option<String> {
    state.drafts.values().rev().find_map(|m| match m {
        Message::Assistant { model, .. } => Some(model.clone()),
        _ => None,
    })
}

/// For a channel followed without a cursor: the seed sends no history, but a run
/// already going is joined where it is — a `channel.snapshot` (the session's state
/// with the text streamed so far, and the cursor to resume from), then `agent.status`
/// `running` — so the deltas that follow continue text the client has. An idle
/// channel says nothing. The tally starts with the run's model, without its turn count.
pub fn joined(frame: &Frame, tally: &mut RunTally, now: Millis) -> Vec<Envelope> {
    let FrameBody::Snapshot { state } = &frame.body else {
        return Vec::new();
    };
    tally.restart(None, None);
    let Some(active) = state.active_run.as_ref() else { return Vec::new() };
    tally.join(active.run_id.clone(), state);
    vec![
        Envelope {
            kind: CHANNEL_SNAPSHOT,
            channel_id: frame.session_id.to_string(),
            data: json!({ "state": state }),
            timestamp: now,
            cursor: Some(frame.cursor().to_string()),
        },
        Envelope {
            kind: AGENT_STATUS,
            channel_id: frame.session_id.to_string(),
            data: json!({"status": "running", "run_id": active.run_id, "request_id": active.request_id}),
            timestamp: now,
            cursor: None,
        },
    ]
}

/// A session was created: sent to every subscriber, whatever its filter.
pub fn channel_created(session: &SessionId, project: &ProjectId, now: Millis) -> Envelope {
    Envelope::global(CHANNEL_CREATED, session.to_string(), json!({"channel_id": session, "project_id": project}), now)
}

/// A session was deleted: sent to every subscriber; no data, as in the seed.
pub fn channel_deleted(session: &SessionId, now: Millis) -> Envelope {
    Envelope::global(CHANNEL_DELETED, session.to_string(), Value::Null, now)
}

/// A channel the client asked for and cannot follow (unknown, not its own, a limit).
pub fn channel_error(channel: &str, code: &str, message: &str, now: Millis) -> Envelope {
    Envelope::global(CHANNEL_ERROR, channel.to_owned(), json!({"code": code, "message": message}), now)
}

/// The acknowledgement of a subscribe message, naming the channels it asked for
/// (none: every session).
pub fn subscribed(channels: &[String], now: Millis) -> Envelope {
    Envelope::global(SUBSCRIBED, String::new(), json!({ "channels": channels }), now)
}

/// A client message the hub could not read.
pub fn error(code: &str, message: &str, now: Millis) -> Envelope {
    Envelope::global(ERROR, String::new(), json!({"code": code, "message": message}), now)
}

#[cfg(test)]
mod tests;
