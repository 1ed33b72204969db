//! Joining a session mid-run, and what a client back after a drop missed.
//!
//! A connection that starts following a session usually resumes from a cursor (see
//! `global.rs`) and sees the run's frames from its `run.accepted` on. When it cannot,
//! it gets a snapshot. If the session is busy, the mapper replays the current run from
//! it through the same code as live frames: the user message, each assistant message
//! with its text as one catch-up delta, tool states, pending permissions. (A snapshot
//! does not say where the run began; the caller tells the mapper, [`Mapper::run_start`].)
//! A client therefore sees every part start empty and grow by deltas, and the deltas it
//! received always add up to the stored text. After that the live deltas continue at
//! the offsets the snapshot implied; a delta at an offset already sent is dropped, so
//! nothing is counted twice.

use super::*;

impl Mapper {
    /// Starts from a snapshot: remembers the session and, if it is busy, replays the
    /// current run through [`Self::event`] (see the module docs).
    pub(super) fn snapshot(&mut self, state: &SessionState, now: Millis, out: &mut Vec<Event>) {
        self.run = RunTrack::default();
        self.session = Some(state.session.clone());
        self.revert.clone_from(&state.revert);
        let info = || super::super::records::session_info(&state.session, state.revert.as_ref(), &self.scope.directory);
        match std::mem::replace(&mut self.announce, Announce::Nothing) {
            Announce::Nothing => {}
            Announce::Created => out.push(Event::SessionCreated { session_id: self.sid(), info: info() }),
            Announce::Updated => out.push(Event::SessionUpdated { session_id: self.sid(), info: info() }),
        }
        self.pending = state.pending_approvals.iter().map(|a| a.id.clone()).collect();
        self.accepted = state.active_run.is_some();
        self.busy = state.status == SessionStatus::Busy || self.accepted;
        if !self.busy && self.pending.is_empty() {
            // A reconnecting client whose session was busy when its stream looked (so the
            // discovery left it to this follow) and ended before this snapshot: it is told
            // what it missed, its end included, or it would wait for `session.idle` forever.
            if let Some(since) = self.since.take() {
                let missed = self.missed(state, since, now);
                let told = |e: &Event| matches!(e, Event::MessageUpdated { .. } | Event::PermissionReplied { .. });
                if missed.iter().any(told) {
                    out.extend(missed);
                }
            }
            return;
        }
        self.busy = true;
        out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Busy });
        let from = self
            .run_start
            .and_then(|start| state.messages.iter().position(|m| m.index >= start))
            .unwrap_or(state.messages.len());
        let waiting: Vec<&str> = state.pending_approvals.iter().map(|a| a.tool_call_id.as_str()).collect();
        for m in &state.messages[from..] {
            let index = Some(m.index);
            match &m.message {
                Message::User { .. } => {
                    self.event(&AgentEvent::MessageStart { message: m.message.clone() }, index, now, out);
                    self.event(&AgentEvent::MessageEnd { message: m.message.clone() }, index, now, out);
                }
                Message::Assistant { content, .. } => {
                    self.replay_assistant(m.index, &m.message, true, now, out);
                    for c in content {
                        let Content::ToolCall { id, .. } = c else { continue };
                        let Some(exec) = state.tool_executions.get(id) else { continue };
                        if waiting.contains(&id.as_str()) {
                            continue;
                        }
                        let start = AgentEvent::ToolExecutionStart {
                            tool_call_id: id.clone(),
                            tool_name: exec.tool_name.clone(),
                            args: exec.args.clone(),
                        };
                        self.event(&start, None, now, out);
                        if let Some(output) = &exec.output {
                            let update = AgentEvent::ToolExecutionUpdate {
                                tool_call_id: id.clone(),
                                tool_name: exec.tool_name.clone(),
                                offset: 0,
                                delta: output.clone(),
                                truncated: exec.output_truncated,
                            };
                            self.event(&update, None, now, out);
                        }
                        if let (ToolStatus::Success | ToolStatus::Error, Some(result)) = (exec.status, &exec.result) {
                            let end = AgentEvent::ToolExecutionEnd {
                                tool_call_id: id.clone(),
                                tool_name: exec.tool_name.clone(),
                                result: result.clone(),
                                is_error: exec.status == ToolStatus::Error,
                            };
                            self.event(&end, None, now, out);
                        }
                    }
                }
                Message::ToolResult { .. } => {}
            }
        }
        for (index, draft) in &state.drafts {
            self.replay_assistant(*index, draft, false, now, out);
        }
        self.questions.clear();
        self.answered.clear();
        self.client.clear();
        for approval in &state.pending_approvals {
            let requested = AgentEvent::ApprovalRequested { approval: Box::new(approval.clone()) };
            self.event(&requested, None, now, out);
        }
        if let Some(since) = self.since.take() {
            out.extend(self.replied_since(state, since));
        }
        // Any later snapshot re-anchors a client that has this text already.
        self.resuming = true;
    }

    /// `permission.replied` for the session's last resolved approval, if that was after
    /// `since`.
    pub(super) fn replied_since(&self, state: &SessionState, since: Millis) -> Option<Event> {
        // A client call's result was no permission's reply.
        let last = state.last_approval.as_ref().filter(|a| a.at > since && a.decision != "output")?;
        let reply = Reply::from_resolution(&last.decision);
        Some(Event::PermissionReplied {
            session_id: self.sid(),
            permission_id: last.id.to_string(),
            request_id: last.id.to_string(),
            response: reply,
            reply,
        })
    }

    /// What a client away since `since` (ms) missed of an idle session: the messages that
    /// changed since (each with its parts, whole), the permission last replied to if
    /// that was since, and that it is idle. Sent on reconnect, before live events.
    pub fn missed(&mut self, state: &SessionState, since: Millis, now: Millis) -> Vec<Event> {
        let mut out = Vec::new();
        self.session = Some(state.session.clone());
        self.revert.clone_from(&state.revert);
        self.busy = false;
        let model = state.session.model.as_deref();
        // The state names no step snapshots: a missed step's parts come without them.
        let trees = super::super::records::StepTrees::default();
        for m in super::super::records::history(&self.scope, &state.messages, model, &trees) {
            let changed = match &m.info {
                MessageInfo::User(info) => info.time.created > since,
                MessageInfo::Assistant(info) => info.time.completed.unwrap_or(info.time.created) > since,
            };
            if !changed {
                continue;
            }
            out.push(Event::MessageUpdated { session_id: self.sid(), info: m.info });
            for part in m.parts {
                out.push(self.part_updated(part, now, None));
            }
        }
        out.extend(self.replied_since(state, since));
        // Last, as live: the session went idle after its messages were done.
        out.push(Event::SessionStatus { session_id: self.sid(), status: Status::Idle });
        out.push(Event::SessionIdle { session_id: self.sid() });
        out
    }

    /// Replays one assistant message as if it streamed: start, each block with its whole
    /// text as one delta, and — for a committed message — its end. A draft's last block
    /// stays open: its next live delta continues it.
    pub(super) fn replay_assistant(
        &mut self,
        index: u64,
        message: &Message,
        committed: bool,
        now: Millis,
        out: &mut Vec<Event>,
    ) {
        let Message::Assistant { content, model, timestamp, .. } = message else { return };
        if self.run.steps.values().any(|s| s.ended) {
            // A later model call means the previous turn ended.
            self.event(&AgentEvent::TurnEnd {}, None, now, out);
        }
        let skeleton = Message::Assistant {
            content: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            model: model.clone(),
            error_message: None,
            timestamp: *timestamp,
        };
        let at = Some(index);
        self.event(&AgentEvent::MessageStart { message: skeleton }, at, now, out);
        let last = content.len().saturating_sub(1);
        for (ci, c) in content.iter().enumerate() {
            let (start, delta, end) = match c {
                Content::Text { text } => (
                    StreamDelta::TextStart { content_index: ci },
                    StreamDelta::TextDelta { content_index: ci, offset: 0, delta: text.clone() },
                    StreamDelta::TextEnd { content_index: ci },
                ),
                Content::Thinking { thinking } => (
                    StreamDelta::ThinkingStart { content_index: ci },
                    StreamDelta::ThinkingDelta { content_index: ci, offset: 0, delta: thinking.clone() },
                    StreamDelta::ThinkingEnd { content_index: ci },
                ),
                Content::ToolCall { id, name, .. } => {
                    let start = StreamDelta::ToolcallStart { content_index: ci, id: id.clone(), name: name.clone() };
                    self.event(&AgentEvent::MessageUpdate { assistant_message_event: start }, at, now, out);
                    continue;
                }
                // Files come in user messages only.
                Content::File { .. } => continue,
            };
            for d in [Some(start), Some(delta), (committed || ci < last).then_some(end)].into_iter().flatten() {
                let catch_up = matches!(d, StreamDelta::TextDelta { .. } | StreamDelta::ThinkingDelta { .. });
                if catch_up && self.resuming {
                    // The text so far as a whole part, which replaces what the client
                    // holds; the block remembers it as sent, so live deltas continue it.
                    self.event(&AgentEvent::MessageUpdate { assistant_message_event: d }, at, now, &mut Vec::new());
                    if let Some(part) = self.block_part(index, ci) {
                        out.push(self.part_updated(part, now, None));
                    }
                    continue;
                }
                self.event(&AgentEvent::MessageUpdate { assistant_message_event: d }, at, now, out);
            }
        }
        if committed {
            self.event(&AgentEvent::MessageEnd { message: message.clone() }, at, now, out);
        }
    }
}
