//! Stored records in OpenCode's shapes: sessions, the message history, permissions and
//! questions.
//!
//! Spool and OpenCode cut a conversation differently. Spool stores what the model saw:
//! user, assistant (one per model call) and tool-result messages. OpenCode shows user
//! and assistant messages only; an assistant message is one *step* — `step-start`, its
//! text, reasoning and tool parts, `step-finish` — and a tool's result lives in its tool
//! part. So a tool-result message becomes the `completed` (or `error`) state of the tool
//! part that asked for it, and is not listed on its own. The mapper in `mapper.rs` makes
//! the same cut live; a test folds its events and compares them with [`history`].
//!
//! A step whose calls may change files has snapshots (issue 39): `step-start` names the
//! tree before its first call and `step-finish` the tree after its last, read from the
//! store's `step_snapshots` once per history request ([`StepTrees`]).

use super::ids;
use super::wire::*;
use spool_protocol::time::Millis;
use spool_protocol::{
    Approval, Content, IndexedMessage, Message, PendingRevert, Session, SessionId, StopReason, Usage,
};
use std::collections::HashMap;

/// The snapshot trees of a session's steps, by the index of the step's assistant message.
#[derive(Clone, Debug, Default)]
pub struct StepTrees(HashMap<u64, Trees>);

/// A step's trees: `after` is `None` until its last call finished.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trees {
    pub before: Option<String>,
    pub after: Option<String>,
}

impl StepTrees {
    /// From the session's `step_snapshots` rows.
    pub fn from_rows(rows: &[spool_engine::store::StepSnapshot]) -> StepTrees {
        StepTrees::from_steps(
            rows.iter()
                .map(|r| (r.message_index, Trees { before: Some(r.before_tree.clone()), after: r.after_tree.clone() })),
        )
    }

    /// From the trees of each step, by its message's index.
    pub fn from_steps(steps: impl IntoIterator<Item = (u64, Trees)>) -> StepTrees {
        StepTrees(steps.into_iter().collect())
    }

    /// The trees of the step of assistant message `index` (none for a step without).
    pub fn of(&self, index: u64) -> Trees {
        self.0.get(&index).cloned().unwrap_or_default()
    }
}

/// What every OpenCode record of one session needs beyond the native data.
#[derive(Clone, Debug)]
pub struct Scope {
    pub session_id: SessionId,
    /// The project's directory: OpenCode's `directory`, `path.cwd` and `path.root`.
    pub directory: String,
    /// The model a user message is reported with when the session names none.
    pub default_model: String,
}

impl Scope {
    pub fn message_id(&self, index: u64) -> String {
        ids::message_id(&self.session_id, index)
    }

    pub fn part(&self, index: u64, part: usize, kind: PartKind) -> Part {
        Part {
            id: ids::part_id(&self.session_id, index, part),
            session_id: self.session_id.to_string(),
            message_id: self.message_id(index),
            kind,
        }
    }

    pub fn user_info(&self, index: u64, created: Millis, model: Option<&str>) -> MessageInfo {
        MessageInfo::User(UserInfo {
            id: self.message_id(index),
            session_id: self.session_id.to_string(),
            time: UserTime { created },
            agent: AGENT,
            model: ModelRef { provider_id: PROVIDER, model_id: model.unwrap_or(&self.default_model).to_owned() },
        })
    }

    /// A started assistant message: no completion, no usage yet.
    pub fn assistant_info(&self, index: u64, parent: Option<u64>, created: Millis, model: &str) -> AssistantInfo {
        AssistantInfo {
            id: self.message_id(index),
            session_id: self.session_id.to_string(),
            time: AssistantTime { created, completed: None },
            error: None,
            parent_id: parent.map(|p| self.message_id(p)).unwrap_or_default(),
            model_id: model.to_owned(),
            provider_id: PROVIDER,
            mode: AGENT,
            agent: AGENT,
            path: MessagePath { cwd: self.directory.clone(), root: self.directory.clone() },
            cost: 0.0,
            tokens: Tokens::default(),
            finish: None,
        }
    }
}

/// How an ended step reads in OpenCode: `finish` for a normal end, `error` otherwise.
pub fn complete(
    info: &mut AssistantInfo,
    stop: Option<StopReason>,
    error_message: Option<&str>,
    usage: Usage,
    at: Millis,
) {
    info.time.completed = Some(at);
    info.cost = usage.cost;
    info.tokens = usage.into();
    info.finish = stop.and_then(finish_reason).map(str::to_owned);
    info.error = match stop {
        Some(StopReason::Aborted) => Some(ErrorInfo::aborted("the run was aborted")),
        Some(StopReason::Error) => Some(ErrorInfo::api(error_message.unwrap_or("the model failed"))),
        _ => None,
    };
}

/// The `step-finish` reason of a step that ended normally.
pub fn finish_reason(stop: StopReason) -> Option<&'static str> {
    match stop {
        StopReason::Stop => Some("stop"),
        StopReason::ToolUse => Some("tool-calls"),
        StopReason::Length => Some("length"),
        StopReason::Aborted | StopReason::Error => None,
    }
}

pub fn step_finish(reason: &str, usage: Usage, snapshot: Option<String>) -> PartKind {
    PartKind::StepFinish { reason: reason.to_owned(), cost: usage.cost, tokens: usage.into(), snapshot }
}

/// A tool call's arguments as OpenCode's `input` (always an object) and `raw` text.
pub fn tool_input(arguments: &serde_json::Value) -> (serde_json::Value, String) {
    match arguments {
        serde_json::Value::Object(_) => (arguments.clone(), arguments.to_string()),
        // Arguments that never parsed stay the model's raw text.
        serde_json::Value::String(raw) => (serde_json::json!({}), raw.clone()),
        other => (serde_json::json!({ "value": other }), other.to_string()),
    }
}

/// A session as OpenCode shows it, with its pending revert (`SessionState.revert`, or
/// the list's one read of them).
pub fn session_info(session: &Session, revert: Option<&PendingRevert>, directory: &str) -> SessionInfo {
    SessionInfo {
        id: session.id.to_string(),
        slug: session.id.to_string(),
        project_id: session.project_id.to_string(),
        directory: directory.to_owned(),
        // OpenCode always has a title; an untitled Spool session gets one on its first prompt.
        title: if session.title.is_empty() { "New session".to_owned() } else { session.title.clone() },
        version: env!("CARGO_PKG_VERSION"),
        time: SessionTime {
            created: session.created_at,
            updated: session.updated_at,
            archived: session.archived.then_some(session.updated_at),
        },
        permission: session
            .permissions
            .iter()
            .map(|r| Rule { permission: r.tool.clone(), pattern: r.pattern.clone(), action: r.action })
            .collect(),
        revert: revert.map(|r| session_revert(&session.id, r)),
    }
}

/// A session's pending revert as OpenCode's `Session.revert`: the user message it went
/// back to, the snapshot of the files just before it (what unrevert puts back; a tree of
/// Spool's shadow repository, as `step-start` names them) and the diff of what it did to
/// the files. A revert that put back no file has neither, as OpenCode leaves them out
/// when it has none.
fn session_revert(session: &SessionId, pending: &PendingRevert) -> SessionRevert {
    SessionRevert {
        message_id: ids::message_id(session, pending.index),
        part_id: None,
        snapshot: pending.snapshot.clone(),
        diff: pending.diff.clone(),
    }
}

/// A pending approval as an OpenCode permission. `message` is the index of the assistant
/// message that made the call, when known.
pub fn permission(approval: &Approval, message: Option<u64>) -> Permission {
    let argument = approval.payload.get("argument").and_then(|a| a.as_str()).map(str::to_owned);
    let change = approval.payload.get("change").and_then(|c| c.as_str()).unwrap_or(&approval.tool);
    let message_id = message.map(|i| ids::message_id(&approval.session_id, i)).unwrap_or_default();
    Permission {
        id: approval.id.to_string(),
        session_id: approval.session_id.to_string(),
        permission: approval.tool.clone(),
        patterns: vec![argument.clone().unwrap_or_else(|| "*".into())],
        metadata: approval.payload.clone(),
        always: always_patterns(approval),
        tool: ToolRef { message_id: message_id.clone(), call_id: approval.tool_call_id.clone() },
        kind: approval.tool.clone(),
        pattern: argument,
        message_id,
        call_id: approval.tool_call_id.clone(),
        title: change.to_owned(),
        time: UserTime { created: approval.created_at },
    }
}

/// Whether an approval asks the person a question (the `question` tool's
/// `select_option` / `provide_input`) rather than for a permission: OpenCode shows it
/// as a question, answered on its own routes. A client tool call is neither.
pub fn is_question(approval: &Approval) -> bool {
    approval.kind != spool_protocol::ApprovalKind::ConfirmAction && !approval.is_client_call()
}

/// Whether an approval asks the person for a permission: OpenCode lists it and asks.
/// A client tool call (`Approval::is_client_call`) waits for the client that declared
/// the tool to post its result, not for a person: OpenCode shows its tool part running.
pub fn is_permission(approval: &Approval) -> bool {
    approval.kind == spool_protocol::ApprovalKind::ConfirmAction && !approval.is_client_call()
}

/// Shows the tool part of each client tool call in `pending` (a session's pending
/// approvals) running, as `/event` does: the call is out with the client, which runs it.
pub fn running_client_calls(history: &mut [MessageWithParts], pending: &[Approval]) {
    for approval in pending.iter().filter(|a| a.is_client_call()) {
        let parts = history.iter_mut().flat_map(|m| m.parts.iter_mut());
        for part in parts {
            let PartKind::Tool { call_id, state, .. } = &mut part.kind else { continue };
            if *call_id != approval.tool_call_id {
                continue;
            }
            if let ToolState::Pending { input, .. } = state {
                let input = std::mem::take(input);
                *state = ToolState::Running { input, time: StartTime { start: approval.created_at }, metadata: None };
            }
        }
    }
}

/// A pending question approval as OpenCode's question request. `message` is the index
/// of the assistant message that made the call, when known.
pub fn question(approval: &Approval, message: Option<u64>) -> QuestionRequest {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let payload = &approval.payload;
    let options = payload.get("options").and_then(|o| o.as_array()).map(Vec::as_slice).unwrap_or_default();
    // A tool's server asking while its call runs: a question per field it asks for.
    let questions = match approval.is_live_ask() {
        true => super::live_ask::questions(approval),
        false => vec![QuestionInfo {
            question: text(payload.get("question").or_else(|| payload.get("change"))),
            header: approval.tool.clone(),
            options: options
                .iter()
                .map(|o| QuestionOption { label: text(o.get("label")), description: text(o.get("description")) })
                .collect(),
            multiple: false,
            custom: true,
        }],
    };
    QuestionRequest {
        id: approval.id.to_string(),
        session_id: approval.session_id.to_string(),
        questions,
        tool: ToolRef {
            message_id: message.map(|i| ids::message_id(&approval.session_id, i)).unwrap_or_default(),
            call_id: approval.tool_call_id.clone(),
        },
    }
}

/// What an OpenCode `always` reply allows from then on: for a command, this exact
/// command (OpenCode's reply names no pattern, and Spool never widens it); for another
/// tool, all of it.
fn always_patterns(approval: &Approval) -> Vec<String> {
    match approval.payload.get("alwaysOptions").and_then(|o| o.as_array()) {
        Some(options) => options
            .iter()
            .find(|o| o.get("exact").and_then(|e| e.as_bool()) == Some(true))
            .and_then(|o| serde_json::from_value(o.get("patterns")?.clone()).ok())
            .unwrap_or_default(),
        None => vec!["*".into()],
    }
}

/// The index of the assistant message among `messages` that holds tool call `call_id`.
pub fn message_of_call(messages: &[IndexedMessage], call_id: &str) -> Option<u64> {
    messages.iter().rev().find_map(|m| match &m.message {
        Message::Assistant { content, .. } => {
            content.iter().any(|c| matches!(c, Content::ToolCall { id, .. } if id == call_id)).then_some(m.index)
        }
        _ => None,
    })
}

/// A user message's parts: its files as `file` parts, then its text, each named by its
/// content block (so the live stream and the history name them alike).
///
/// A file's `url` is Spool's own `/api/attachments/{id}`, relative: the SDK types it as
/// any string (OpenCode itself stores the `data:` or `file://` URL a client sent), and
/// Spool does not know the address it is reached at behind a proxy, so a client resolves
/// it against the server it talks to and fetches it with the same credentials. Sent
/// back in a prompt, the same URL names the same attachment.
pub fn user_parts(scope: &Scope, index: u64, content: &[Content]) -> Vec<Part> {
    content
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let kind = match c {
                Content::Text { text } => PartKind::Text { text: text.clone(), time: None },
                Content::File { name, media_type, url, .. } => {
                    PartKind::File { mime: media_type.clone(), filename: name.clone(), url: url.clone() }
                }
                Content::Thinking { .. } | Content::ToolCall { .. } => return None,
            };
            Some(scope.part(index, ids::content_part(i), kind))
        })
        .collect()
}

/// Committed messages (ascending by index) as OpenCode's message list, the steps'
/// snapshots from `trees`.
pub fn history(
    scope: &Scope,
    messages: &[IndexedMessage],
    model: Option<&str>,
    trees: &StepTrees,
) -> Vec<MessageWithParts> {
    let mut out = Vec::new();
    let mut parent = None;
    for (position, m) in messages.iter().enumerate() {
        match &m.message {
            Message::User { content, timestamp } => {
                parent = Some(m.index);
                let parts = user_parts(scope, m.index, content);
                out.push(MessageWithParts { info: scope.user_info(m.index, *timestamp, model), parts });
            }
            Message::Assistant { content, stop_reason, usage, model, error_message, timestamp } => {
                // The results of this step's calls are the tool results right after it
                // (call ids need not be unique across a whole session).
                let results: HashMap<&str, &Message> = messages[position + 1..]
                    .iter()
                    .map_while(|r| match &r.message {
                        Message::ToolResult { tool_call_id, .. } => Some((tool_call_id.as_str(), &r.message)),
                        _ => None,
                    })
                    .collect();
                // A later message means the run moved on: a call still without a result
                // never ran (its run was cancelled while it waited for a permission).
                let following = messages[position + 1..]
                    .iter()
                    .take_while(|r| matches!(r.message, Message::ToolResult { .. }))
                    .count();
                let abandoned = messages.get(position + 1 + following).map(|n| message_time(&n.message));
                let mut info = scope.assistant_info(m.index, parent, *timestamp, model);
                let Trees { before, after } = trees.of(m.index);
                let mut parts = vec![scope.part(m.index, 0, PartKind::StepStart { snapshot: before })];
                let mut end = *timestamp;
                let mut all_ran = true;
                for (i, c) in content.iter().enumerate() {
                    let time = PartTime { start: *timestamp, end: Some(*timestamp) };
                    let kind = match c {
                        Content::Text { text } => PartKind::Text { text: text.clone(), time: Some(time) },
                        Content::Thinking { thinking } => PartKind::Reasoning { text: thinking.clone(), time },
                        // Files come in user messages only.
                        Content::File { .. } => continue,
                        Content::ToolCall { id, name, arguments } => {
                            let (input, raw) = tool_input(arguments);
                            let state = match results.get(id.as_str()) {
                                Some(result @ Message::ToolResult { is_error, timestamp: at, .. }) => {
                                    end = end.max(*at);
                                    let time = SpanTime { start: *timestamp, end: *at };
                                    ToolState::settled(input, result.text(), *is_error, name.clone(), time)
                                }
                                _ => match abandoned {
                                    Some(at) => ToolState::Error {
                                        input,
                                        error: "the run ended before this tool ran".into(),
                                        time: SpanTime { start: *timestamp, end: at },
                                    },
                                    None => {
                                        all_ran = false;
                                        ToolState::Pending { input, raw }
                                    }
                                },
                            };
                            PartKind::Tool { call_id: id.clone(), tool: name.clone(), state }
                        }
                    };
                    parts.push(scope.part(m.index, ids::content_part(i), kind));
                }
                // A step that asked for tools finishes once they all ran, as it does live;
                // an abandoned one ends aborted.
                let finished = stop_reason.is_some_and(|s| s != StopReason::ToolUse || all_ran);
                if finished {
                    let stop = match (stop_reason, abandoned, all_calls_ran(content, &results)) {
                        (Some(StopReason::ToolUse), Some(_), false) => Some(StopReason::Aborted),
                        _ => *stop_reason,
                    };
                    complete(&mut info, stop, error_message.as_deref(), *usage, end);
                    if let Some(reason) = stop.and_then(finish_reason) {
                        let finish = step_finish(reason, *usage, after);
                        parts.push(scope.part(m.index, ids::content_part(content.len()), finish));
                    }
                }
                out.push(MessageWithParts { info: MessageInfo::Assistant(Box::new(info)), parts });
            }
            Message::ToolResult { .. } => {}
        }
    }
    out
}

fn all_calls_ran(content: &[Content], results: &HashMap<&str, &Message>) -> bool {
    content.iter().all(|c| !matches!(c, Content::ToolCall { id, .. } if !results.contains_key(id.as_str())))
}

fn message_time(message: &Message) -> Millis {
    match message {
        Message::User { timestamp, .. }
        | Message::Assistant { timestamp, .. }
        | Message::ToolResult { timestamp, .. } => *timestamp,
    }
}
