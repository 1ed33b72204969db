//! The session state projection: how each committed message, draft, tool execution and
//! timing changes the [`SessionState`] that snapshots carry.
//!
//! The projection keeps only the latest three user rounds (seed 000): when a fourth
//! user message is committed, the oldest round leaves the state together with its tool
//! executions and prompt timings. Absolute indexes and `total` keep their meaning, and
//! earlier rounds load from the history endpoint.
//!
//! It lives in the protocol crate, beside the frames it folds, because every side
//! needs the same fold: the engine's run loop and a node that follows another node's
//! session (`spool_engine::view` re-exports this module), and clients such as
//! `spool-client`, which fold a snapshot and the frames after it into what they show.

use crate::frame::{PromptTiming, SNAPSHOT_USER_ROUNDS, SessionState, ToolExecution, ToolStatus};
use crate::{Content, IndexedMessage, Message, Session, SessionStatus};
use std::collections::BTreeMap;

/// A fresh state from the session record and its latest committed rounds.
pub fn initial_state(session: Session, latest: Vec<IndexedMessage>, total: u64) -> SessionState {
    let first_index = latest.first().map_or(total, |m| m.index);
    let mut state = SessionState {
        session,
        status: SessionStatus::Idle,
        active_run: None,
        messages: Vec::new(),
        first_index,
        total,
        drafts: BTreeMap::new(),
        tool_executions: BTreeMap::new(),
        prompt_timings: BTreeMap::new(),
        pending_approvals: Vec::new(),
        last_approval: None,
        todos: Vec::new(),
        queue: Vec::new(),
        queue_paused: false,
        variants: Vec::new(),
        revert: None,
        presence: Default::default(),
    };
    for m in latest {
        record_tool_results(&mut state, &m.message);
        state.messages.push(m);
    }
    state
}

/// Commits a message: it replaces any draft at its index and joins the shown rounds.
pub fn commit_message(state: &mut SessionState, message: IndexedMessage) {
    state.drafts.remove(&message.index);
    record_tool_results(state, &message.message);
    state.total = state.total.max(message.index + 1);
    // A message at a pending revert's index makes the revert final (the store's rule:
    // the session holds a message there again), so no view offers to undo it.
    if state.revert.as_ref().is_some_and(|r| message.index >= r.index) {
        state.revert = None;
    }
    // A view read from the store may already hold the message whose frame follows
    // (a node that began following a session mid-run): once is enough.
    match state.messages.iter_mut().rev().find(|m| m.index == message.index) {
        Some(held) => *held = message,
        None => state.messages.push(message),
    }
    trim_rounds(state);
}

/// Keeps the latest [`SNAPSHOT_USER_ROUNDS`] user rounds.
fn trim_rounds(state: &mut SessionState) {
    let user_positions: Vec<usize> =
        state.messages.iter().enumerate().filter(|(_, m)| m.message.is_user()).map(|(i, _)| i).collect();
    if user_positions.len() <= SNAPSHOT_USER_ROUNDS {
        return;
    }
    let cut = user_positions[user_positions.len() - SNAPSHOT_USER_ROUNDS];
    let dropped: Vec<IndexedMessage> = state.messages.drain(..cut).collect();
    state.first_index = state.messages.first().map_or(state.total, |m| m.index);
    let first_index = state.first_index;
    state.variants.retain(|v| v.index >= first_index);
    for m in &dropped {
        match &m.message {
            Message::Assistant { content, .. } => {
                for c in content {
                    if let Content::ToolCall { id, .. } = c {
                        state.tool_executions.remove(id);
                    }
                }
            }
            Message::User { .. } => {
                state.prompt_timings.remove(&m.index);
            }
            Message::ToolResult { tool_call_id, .. } => {
                state.tool_executions.remove(tool_call_id);
            }
        }
    }
}

/// Merges tool results (from committed tool-result messages) into the executions map,
/// so a snapshot shows each tool call once with its outcome.
fn record_tool_results(state: &mut SessionState, message: &Message) {
    match message {
        Message::Assistant { content, .. } => {
            for c in content {
                if let Content::ToolCall { id, name, arguments } = c {
                    state.tool_executions.entry(id.clone()).or_insert_with(|| ToolExecution {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        args: arguments.clone(),
                        status: ToolStatus::Running,
                        result: None,
                        output: None,
                        output_truncated: false,
                        diff: None,
                    });
                }
            }
        }
        Message::ToolResult { tool_call_id, tool_name, is_error, diff, .. } => {
            let exec = state.tool_executions.entry(tool_call_id.clone()).or_insert_with(|| ToolExecution {
                tool_call_id: tool_call_id.clone(),
                tool_name: tool_name.clone(),
                args: serde_json::Value::Null,
                status: ToolStatus::Running,
                result: None,
                output: None,
                output_truncated: false,
                diff: None,
            });
            exec.status = if *is_error { ToolStatus::Error } else { ToolStatus::Success };
            exec.result = Some(message.text());
            exec.diff.clone_from(diff);
            end_tool_output(exec);
        }
        Message::User { .. } => {}
    }
}

/// Appends a `tool_execution_update` to the call's output so far. The run loop and a
/// following node apply updates through this one function, so both hold the same text.
/// A delta not at the end of what is held (a duplicate) changes nothing.
pub fn append_tool_output(state: &mut SessionState, tool_call_id: &str, offset: usize, delta: &str, truncated: bool) {
    let Some(exec) = state.tool_executions.get_mut(tool_call_id) else { return };
    let output = exec.output.get_or_insert_with(String::new);
    if crate::event::offset_len(output) == offset {
        output.push_str(delta);
        exec.output_truncated |= truncated;
    }
}

/// A call has its result: the live output has done its job (the result supersedes it),
/// so snapshots stop carrying it. The run loop and [`apply_frame`] both call this at
/// `tool_execution_end`.
pub fn end_tool_output(exec: &mut ToolExecution) {
    exec.output = None;
    exec.output_truncated = false;
}

pub fn set_timing(state: &mut SessionState, timing: PromptTiming) {
    state.prompt_timings.insert(timing.user_message_index, timing);
}

/// Applies one stream delta to a draft assistant message. The run loop and the session
/// state apply the same deltas through this one function, so the draft a snapshot shows
/// is exactly the message the run will commit.
pub fn apply_delta(message: &mut Message, delta: &crate::StreamDelta) {
    use crate::StreamDelta as D;
    let Message::Assistant { content, stop_reason, .. } = message else {
        return;
    };
    match delta {
        D::TextStart { .. } => content.push(Content::Text { text: String::new() }),
        D::ThinkingStart { .. } => content.push(Content::Thinking { thinking: String::new() }),
        D::ToolcallStart { id, name, .. } => content.push(Content::ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: serde_json::Value::String(String::new()),
        }),
        D::TextDelta { content_index, delta, .. } => {
            if let Some(Content::Text { text }) = content.get_mut(*content_index) {
                text.push_str(delta);
            }
        }
        D::ThinkingDelta { content_index, delta, .. } => {
            if let Some(Content::Thinking { thinking }) = content.get_mut(*content_index) {
                thinking.push_str(delta);
            }
        }
        // While streaming, a tool call's arguments are the raw JSON text so far.
        D::ToolcallDelta { content_index, delta, .. } => {
            if let Some(Content::ToolCall { arguments: serde_json::Value::String(raw), .. }) =
                content.get_mut(*content_index)
            {
                raw.push_str(delta);
            }
        }
        // At its end the raw text becomes JSON when it parses (an empty text is `{}`);
        // otherwise it stays a string and the tool call fails with a clear error.
        D::ToolcallEnd { content_index } => {
            if let Some(Content::ToolCall { arguments, .. }) = content.get_mut(*content_index)
                && let serde_json::Value::String(raw) = arguments
            {
                if raw.trim().is_empty() {
                    *arguments = serde_json::json!({});
                } else if let Ok(value) = serde_json::from_str(raw) {
                    *arguments = value;
                }
            }
        }
        D::TextEnd { .. } | D::ThinkingEnd { .. } => {}
        D::Done { stop_reason: reason } => *stop_reason = Some(*reason),
    }
}

/// Applies one frame to a state, as a client that holds a snapshot does: the frames a
/// session publishes after a snapshot, folded over it in order, give the state a fresh
/// snapshot shows (`tests/fold.rs` checks this over real runs). A node that follows a
/// session it does not run needs exactly this.
///
pub fn apply_frame(state: &mut SessionState, body: &crate::frame::FrameBody) {
    use crate::AgentEvent as E;
    use crate::frame::FrameBody as F;
    let (index, run_id, event) = match body {
        F::Snapshot { state: s } | F::State { state: s } => {
            *state = (**s).clone();
            return;
        }
        F::RunAccepted { .. } | F::Git { .. } => return,
        F::Queue { queue, paused, .. } => {
            state.queue = queue.clone();
            state.queue_paused = *paused;
            return;
        }
        F::Presence { presence } => {
            state.presence = presence.clone();
            return;
        }
        F::LoopEvent { message_index, message_id, event, run_id } => (*message_index, run_id, (message_id, event)),
    };
    let (message_id, event) = event;
    match (event, index) {
        (E::MessageStart { message: m @ Message::Assistant { .. } }, Some(i)) => {
            state.drafts.insert(i, m.clone());
        }
        (E::MessageUpdate { assistant_message_event }, Some(i)) => {
            if let Some(draft) = state.drafts.get_mut(&i) {
                apply_delta(draft, assistant_message_event);
            }
        }
        (E::MessageEnd { message }, Some(i)) => {
            // Frames from before message ids were sent: a placeholder until the next state.
            let id = message_id.clone().unwrap_or_default();
            commit_message(state, IndexedMessage { id, index: i, message: message.clone() });
        }
        (E::ToolExecutionStart { tool_call_id, tool_name, args }, _) => {
            let exec = ToolExecution {
                tool_call_id: tool_call_id.clone(),
                tool_name: tool_name.clone(),
                args: args.clone(),
                status: ToolStatus::Running,
                result: None,
                output: None,
                output_truncated: false,
                diff: None,
            };
            state.tool_executions.insert(tool_call_id.clone(), exec);
        }
        (E::ToolExecutionEnd { tool_call_id, result, is_error, .. }, _) => {
            if let Some(exec) = state.tool_executions.get_mut(tool_call_id) {
                exec.status = if *is_error { ToolStatus::Error } else { ToolStatus::Success };
                exec.result = Some(result.clone());
                end_tool_output(exec);
            }
        }
        (E::ToolExecutionUpdate { tool_call_id, offset, delta, truncated, .. }, _) => {
            append_tool_output(state, tool_call_id, *offset, delta, *truncated);
        }
        (E::TodoWrite { todos }, _) => state.todos = todos.clone(),
        (event @ E::PromptTiming { .. }, _) => {
            if let Some(mut timing) = PromptTiming::from_event(event) {
                timing.run_id = Some(run_id.clone());
                set_timing(state, timing);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageId, ProjectId, SessionId, UserId};

    fn session() -> Session {
        Session {
            id: SessionId::new(),
            project_id: ProjectId::new(),
            owner_id: UserId::new(),
            title: String::new(),
            title_set: false,
            archived: false,
            permissions: Vec::new(),
            model: None,
            mode: Default::default(),
            read_index: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    fn msg(index: u64, message: Message) -> IndexedMessage {
        IndexedMessage { id: MessageId::new(), index, message }
    }

    #[test]
    fn keeps_latest_three_user_rounds_with_absolute_indexes() {
        let mut state = initial_state(session(), vec![], 0);
        for round in 0..5u64 {
            commit_message(&mut state, msg(round * 2, Message::user_text(format!("q{round}"), 0)));
            commit_message(
                &mut state,
                msg(
                    round * 2 + 1,
                    Message::ToolResult {
                        tool_call_id: format!("c{round}"),
                        tool_name: "read".into(),
                        content: vec![Content::Text { text: "ok".into() }],
                        is_error: false,
                        timestamp: 0,
                        diff: None,
                    },
                ),
            );
        }
        assert_eq!(state.total, 10);
        assert_eq!(state.first_index, 4);
        assert_eq!(state.messages.iter().map(|m| m.index).collect::<Vec<_>>(), vec![4, 5, 6, 7, 8, 9]);
        assert_eq!(state.tool_executions.keys().cloned().collect::<Vec<_>>(), vec!["c2", "c3", "c4"]);
        assert_eq!(state.tool_executions["c4"].status, ToolStatus::Success);
    }

    #[test]
    fn a_turns_versions_leave_with_its_round() {
        let mut state = initial_state(session(), vec![msg(0, Message::user_text("q0", 0))], 1);
        state.variants = vec![crate::VariantSet { index: 0, position: 2, versions: vec![Some(1), None] }];
        for round in 1..3u64 {
            commit_message(&mut state, msg(round, Message::user_text(format!("q{round}"), 0)));
        }
        assert_eq!(state.variants.len(), 1, "the third round back is still shown, with its switcher");
        commit_message(&mut state, msg(3, Message::user_text("q3", 0)));
        assert_eq!(state.first_index, 1);
        assert_eq!(state.variants, vec![], "its round left the view: so did its versions");
    }

    #[test]
    fn a_message_at_a_pending_reverts_index_makes_it_final() {
        let mut state = initial_state(session(), vec![msg(0, Message::user_text("q0", 0))], 1);
        let report = crate::RevertReport { index: 1, ..Default::default() };
        state.revert = Some(crate::PendingRevert { index: 1, ordinal: Some(1), report, snapshot: None, diff: None });
        commit_message(&mut state, msg(0, Message::user_text("q0 again", 0)));
        assert!(state.revert.is_some(), "a message before the revert's index leaves it pending");
        commit_message(&mut state, msg(1, Message::user_text("q1", 0)));
        assert_eq!(state.revert, None, "the prompt sent after the revert made it final: no view offers Redo");
    }
}
