//! The parts of an assistant message as a step grows them: text and reasoning blocks
//! (opened empty, grown by deltas, closed whole), tool states and live output, the
//! step's end (`step-finish`, `message.updated`) and the run's end.

use super::*;

impl Mapper {
    pub(super) fn update(&mut self, index: u64, delta: &StreamDelta, now: Millis, out: &mut Vec<Event>) {
        match delta {
            StreamDelta::TextStart { content_index } => {
                self.open_block(index, *content_index, BlockKind::Text, now, out)
            }
            StreamDelta::ThinkingStart { content_index } => {
                self.open_block(index, *content_index, BlockKind::Reasoning, now, out)
            }
            StreamDelta::ToolcallStart { content_index, id, name } => {
                self.run.calls.insert(id.clone(), (index, *content_index));
                let state = ToolState::Pending { input: serde_json::json!({}), raw: String::new() };
                let kind = BlockKind::Tool { call_id: id.clone(), name: name.clone(), state };
                self.open_block(index, *content_index, kind, now, out);
            }
            StreamDelta::TextDelta { content_index, offset, delta }
            | StreamDelta::ThinkingDelta { content_index, offset, delta } => {
                self.append(index, *content_index, *offset, delta, now, out)
            }
            StreamDelta::TextEnd { content_index } | StreamDelta::ThinkingEnd { content_index } => {
                self.close_block(index, *content_index, now, out)
            }
            // Tool arguments arrive whole at `message_end`; streaming them would repeat
            // the arguments so far on every piece.
            StreamDelta::ToolcallDelta { .. } | StreamDelta::ToolcallEnd { .. } | StreamDelta::Done { .. } => {}
        }
    }

    pub(super) fn block_mut(&mut self, index: u64, content: usize) -> Option<&mut Block> {
        self.run.steps.get_mut(&index)?.blocks.get_mut(content)?.as_mut()
    }

    /// The part a block is now.
    pub(super) fn block_part(&self, index: u64, content: usize) -> Option<Part> {
        let block = self.run.steps.get(&index)?.blocks.get(content)?.as_ref()?;
        let kind = match &block.kind {
            BlockKind::Text => PartKind::Text { text: block.text.clone(), time: Some(block.time) },
            BlockKind::Reasoning => PartKind::Reasoning { text: block.text.clone(), time: block.time },
            BlockKind::Tool { call_id, name, state } => {
                PartKind::Tool { call_id: call_id.clone(), tool: name.clone(), state: state.clone() }
            }
        };
        Some(self.scope.part(index, ids::content_part(content), kind))
    }

    pub(super) fn emit_block(&self, index: u64, content: usize, now: Millis, out: &mut Vec<Event>) {
        if let Some(part) = self.block_part(index, content) {
            out.push(self.part_updated(part, now, None));
        }
    }

    pub(super) fn open_block(
        &mut self,
        index: u64,
        content: usize,
        kind: BlockKind,
        now: Millis,
        out: &mut Vec<Event>,
    ) {
        let Some(step) = self.run.steps.get_mut(&index) else { return };
        if step.blocks.len() <= content {
            step.blocks.resize_with(content + 1, || None);
        }
        let time = PartTime { start: now, end: None };
        step.blocks[content] = Some(Block { kind, text: String::new(), sent: 0, time });
        self.emit_block(index, content, now, out);
    }

    /// Applies a delta at `offset`: the part of it not sent yet goes out (see the module
    /// docs); a delta entirely behind what was sent is a duplicate and sends nothing.
    pub(super) fn append(
        &mut self,
        index: u64,
        content: usize,
        offset: usize,
        delta: &str,
        now: Millis,
        out: &mut Vec<Event>,
    ) {
        let Some(block) = self.block_mut(index, content) else { return };
        if offset + offset_len(delta) <= block.sent {
            return;
        }
        // `offset > sent` would be a hole; within one subscription frames never skip,
        // so the text is appended as it comes.
        let fresh = skip_utf16(delta, block.sent.saturating_sub(offset)).to_owned();
        block.text.push_str(&fresh);
        block.sent += offset_len(&fresh);
        let Some(part) = self.block_part(index, content) else { return };
        out.push(Event::PartDelta {
            session_id: self.sid(),
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            field: "text",
            delta: fresh.clone(),
        });
        if self.legacy_deltas {
            out.push(self.part_updated(part, now, Some(fresh)));
        }
    }

    /// Ends a text or reasoning block (a tool part ends with its tool, not its block).
    pub(super) fn close_block(&mut self, index: u64, content: usize, now: Millis, out: &mut Vec<Event>) {
        let Some(block) = self.block_mut(index, content) else { return };
        if block.time.end.is_some() || matches!(block.kind, BlockKind::Tool { .. }) {
            return;
        }
        block.time.end = Some(now);
        self.emit_block(index, content, now, out);
    }

    /// A running tool printed more: the part's `metadata.output` grows, as OpenCode's
    /// bash tool reports it, up to [`LIVE_METADATA_CHARS`]. Each update repeats the
    /// output so far (OpenCode has no delta for it), which that bound keeps small;
    /// past it the part stays as it is, and the result completes it.
    pub(super) fn tool_output(&mut self, call_id: &str, delta: &str, now: Millis, out: &mut Vec<Event>) {
        let Some(&(index, content)) = self.run.calls.get(call_id) else { return };
        let Some(Block { kind: BlockKind::Tool { state, .. }, .. }) = self.block_mut(index, content) else { return };
        let ToolState::Running { metadata, .. } = state else { return };
        let metadata = metadata.get_or_insert_with(|| serde_json::json!({"output": ""}));
        let Some(serde_json::Value::String(output)) = metadata.get_mut("output") else { return };
        let room = LIVE_METADATA_CHARS.saturating_sub(output.chars().count());
        if room == 0 || delta.is_empty() {
            return;
        }
        output.extend(delta.chars().take(room));
        self.emit_block(index, content, now, out);
    }

    pub(super) fn set_tool_state(
        &mut self,
        call_id: &str,
        now: Millis,
        out: &mut Vec<Event>,
        next: impl FnOnce(&ToolState) -> ToolState,
    ) {
        let Some(&(index, content)) = self.run.calls.get(call_id) else { return };
        let Some(Block { kind: BlockKind::Tool { state, .. }, .. }) = self.block_mut(index, content) else { return };
        *state = next(state);
        self.emit_block(index, content, now, out);
    }

    pub(super) fn end_message(&mut self, index: u64, message: &Message, now: Millis, out: &mut Vec<Event>) {
        match message {
            Message::User { content, timestamp } => {
                self.run.user = Some(index);
                let model = self.session.as_ref().and_then(|s| s.model.as_deref());
                let info = self.scope.user_info(index, *timestamp, model);
                out.push(Event::MessageUpdated { session_id: self.sid(), info });
                for part in user_parts(&self.scope, index, content) {
                    out.push(self.part_updated(part, now, None));
                }
            }
            Message::Assistant { content, stop_reason, usage, model, error_message, timestamp } => {
                if !self.run.steps.contains_key(&index) {
                    self.start_step(index, model, *timestamp, now, out);
                }
                self.reconcile(index, content, now, out);
                let asks_tools = content.iter().any(|c| matches!(c, Content::ToolCall { .. }));
                if let Some(step) = self.run.steps.get_mut(&index) {
                    step.ended = true;
                    step.stop = *stop_reason;
                    step.usage = *usage;
                    step.error = error_message.clone();
                }
                if *stop_reason == Some(StopReason::Error) {
                    self.run.error = error_message.clone().or_else(|| Some("the model failed".into()));
                }
                if !(asks_tools && *stop_reason == Some(StopReason::ToolUse)) {
                    self.finish_step(index, now, out);
                }
            }
            Message::ToolResult { .. } => {}
        }
    }

    /// Brings every block up to the committed message: sends any text not sent yet,
    /// closes open blocks, and gives tool parts their parsed input.
    pub(super) fn reconcile(&mut self, index: u64, content: &[Content], now: Millis, out: &mut Vec<Event>) {
        for (ci, c) in content.iter().enumerate() {
            match c {
                Content::Text { text } | Content::Thinking { thinking: text } => {
                    if self.block_mut(index, ci).is_none() {
                        let kind =
                            if matches!(c, Content::Text { .. }) { BlockKind::Text } else { BlockKind::Reasoning };
                        self.open_block(index, ci, kind, now, out);
                    }
                    let Some(block) = self.block_mut(index, ci) else { continue };
                    if let Some(tail) = text.strip_prefix(block.text.as_str()) {
                        let (sent, tail) = (block.sent, tail.to_owned());
                        if !tail.is_empty() {
                            self.append(index, ci, sent, &tail, now, out);
                        }
                    } else {
                        // Cannot happen with an engine that applies its own deltas; the
                        // committed text wins, as a whole-part replacement.
                        block.text = text.clone();
                        block.sent = offset_len(text);
                        self.emit_block(index, ci, now, out);
                    }
                    self.close_block(index, ci, now, out);
                }
                // Files come in user messages only; an assistant's has none to stream.
                Content::File { .. } => {}
                Content::ToolCall { id, name, arguments } => {
                    if self.block_mut(index, ci).is_none() {
                        self.run.calls.insert(id.clone(), (index, ci));
                        let state = ToolState::Pending { input: serde_json::json!({}), raw: String::new() };
                        let kind = BlockKind::Tool { call_id: id.clone(), name: name.clone(), state };
                        self.open_block(index, ci, kind, now, out);
                    }
                    let (input, raw) = tool_input(arguments);
                    self.set_tool_state(id, now, out, |state| match state {
                        ToolState::Pending { .. } => ToolState::Pending { input, raw },
                        other => other.clone(),
                    });
                }
            }
        }
    }

    /// Ends a step: `step-finish` if it ended normally, then the completed message.
    pub(super) fn finish_step(&mut self, index: u64, now: Millis, out: &mut Vec<Event>) {
        let Some(mut step) = self.run.steps.remove(&index) else { return };
        complete(&mut step.info, step.stop, step.error.as_deref(), step.usage, now);
        if let Some(reason) = step.stop.and_then(finish_reason) {
            let finish = step_finish(reason, step.usage, step.trees.after);
            let part = self.scope.part(index, ids::content_part(step.blocks.len()), finish);
            out.push(self.part_updated(part, now, None));
        }
        out.push(Event::MessageUpdated { session_id: self.sid(), info: MessageInfo::Assistant(Box::new(step.info)) });
    }

    /// The run settled: whatever is still open ends with it, and a failed or cancelled
    /// run is a `session.error`.
    pub(super) fn end_run(&mut self, status: &str, now: Millis, out: &mut Vec<Event>) {
        // An answer whose call never started (the run was stopped first) was not used.
        for (_, request) in std::mem::take(&mut self.answered) {
            out.push(Event::QuestionRejected { session_id: self.sid(), request_id: request.to_string() });
        }
        let open: Vec<u64> = self.run.steps.keys().copied().collect();
        for index in open {
            let blocks = self.run.steps.get(&index).map_or(0, |s| s.blocks.len());
            for ci in 0..blocks {
                self.close_block(index, ci, now, out);
                let Some(Block { kind: BlockKind::Tool { call_id, .. }, .. }) = self.block_mut(index, ci) else {
                    continue;
                };
                let call_id = call_id.clone();
                let error = format!("the run was {status} before this tool finished");
                self.set_tool_state(&call_id, now, out, |state| match state {
                    ToolState::Pending { input, .. } => {
                        ToolState::Error { input: input.clone(), error, time: SpanTime { start: now, end: now } }
                    }
                    ToolState::Running { input, time, .. } => {
                        ToolState::Error { input: input.clone(), error, time: SpanTime { start: time.start, end: now } }
                    }
                    done => done.clone(),
                });
            }
            if status != "completed"
                && let Some(step) = self.run.steps.get_mut(&index)
            {
                // It ended by asking for tools, then the run stopped: not a normal finish.
                step.stop = Some(if status == "cancelled" { StopReason::Aborted } else { StopReason::Error });
                step.error = step.error.take().or_else(|| self.run.error.clone());
            }
            self.finish_step(index, now, out);
        }
        let error = match status {
            "cancelled" => Some(ErrorInfo::aborted("the run was aborted")),
            "failed" => Some(match self.run.error.take() {
                Some(message) => ErrorInfo::api(message),
                None => ErrorInfo::unknown("the run failed"),
            }),
            _ => None,
        };
        if let Some(error) = error {
            out.push(Event::SessionError { session_id: self.sid(), error });
        }
        self.run = RunTrack::default();
    }
}

/// `s` without its first `units` UTF-16 code units (whole characters only).
fn skip_utf16(s: &str, units: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen >= units {
            return &s[i..];
        }
        seen += c.len_utf16();
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::skip_utf16;

    #[test]
    pub(super) fn skips_utf16_units_by_whole_characters() {
        assert_eq!(skip_utf16("héllo", 2), "llo");
        assert_eq!(skip_utf16("a🌍b", 3), "b");
        assert_eq!(skip_utf16("ab", 5), "");
        assert_eq!(skip_utf16("ab", 0), "ab");
    }
}
