//! The core the run-following folds (`ai_sdk`, `ag_ui`) share. Both map a run's frames
//! to a message stream that a client builds up, and both are the same state machine:
//! which run they follow and whether it started ([`Core::read`]), the text or reasoning
//! part being streamed (opened once, closed when another part starts or its block
//! ends), what the run waits for, the part of the run a snapshot already drew
//! ([`Drawn`], so live deltas send only what lies beyond it), and a continuation that
//! replays the run from its start sending nothing up to an approval's request
//! ([`Muted`]). A fold is a [`PartFold`]: it says how its dialect writes a part's
//! start, content and end, and maps the frames that are its own (tool calls,
//! approvals, the run's end); the rest is written here once, so the two dialects
//! cannot disagree about what the client already holds.

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use spool_protocol::event::offset_len;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::{
    AgentEvent, ApprovalId, Content, IndexedMessage, Message, Run, RunId, SessionId, StreamDelta, sse,
};
use std::collections::BTreeMap;

/// How much of each block a snapshot already sent, by `(message index, content index)`,
/// in delta offset units (UTF-16 code units, as `StreamDelta` offsets count).
#[derive(Clone, Debug, Default)]
pub struct Drawn(BTreeMap<(u64, usize), usize>);

impl Drawn {
    /// The snapshot sent `text` as the whole of block `key` so far.
    pub fn record(&mut self, key: (u64, usize), text: &str) {
        self.0.insert(key, offset_len(text));
    }

    /// What of `delta` (starting at `offset` of block `key`) the client does not have
    /// yet: all of it for a block no snapshot drew, `None` when it has all of it.
    pub fn unsent(&self, key: (u64, usize), offset: usize, delta: &str) -> Option<String> {
        let Some(&have) = self.0.get(&key) else { return Some(delta.to_owned()) };
        if offset + offset_len(delta) <= have {
            return None;
        }
        let mut skip = have.saturating_sub(offset);
        let cut = delta
            .char_indices()
            .find(|(_, c)| {
                let before = skip == 0;
                skip = skip.saturating_sub(c.len_utf16());
                before
            })
            .map_or(delta.len(), |(i, _)| i);
        Some(delta[cut..].to_owned())
    }
}

/// Output held back until an approval's request has passed: a continuation replaying
/// the run from its start (the engine no longer knew the interrupt's place) folds the
/// frames the client has without sending them. `waiting` is what the run waits for once
/// the request passed (the engine said so as the subscription started); `W` is how the
/// fold names it.
#[derive(Clone, Debug)]
pub struct Muted<W> {
    pub until: ApprovalId,
    pub waiting: Option<W>,
}

impl<W> Muted<W> {
    /// Whether `frame` is the request the output was held back to: the frames after it
    /// are sent.
    pub fn ends_at(&self, frame: &Frame) -> bool {
        matches!(&frame.body, FrameBody::LoopEvent { event: AgentEvent::ApprovalRequested { approval }, .. }
            if approval.id == self.until)
    }
}

/// A text or reasoning block of an assistant message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    Text,
    Reasoning,
}

/// The part being streamed: its block's kind and the dialect's id for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub block: Block,
    pub id: String,
}

/// What every run-following fold keeps, whatever its dialect. `W` is how the fold names
/// what the run waits for.
#[derive(Clone, Debug)]
pub struct Core<W> {
    pub run_id: RunId,
    /// `run.accepted` was seen (or the fold continues a run begun elsewhere).
    pub started: bool,
    /// The part being streamed.
    pub open: Option<Part>,
    /// Tool calls whose input is streaming, by `(message index, content index)`.
    pub streaming: BTreeMap<(u64, usize), String>,
    /// What the run waits for, when it waits for a person.
    pub waiting: Option<W>,
    /// Output held back until an approval's request has passed.
    pub muted: Option<Muted<W>>,
    /// What a snapshot already sent: live deltas send only what lies beyond.
    pub drawn: Drawn,
}

/// A frame of the followed run, as a fold reads it.
pub enum RunFrame<'f> {
    /// The run's `run.accepted`, the first time.
    Accepted,
    /// One of the run's loop events once it started, with its message's index (0 for
    /// none).
    Event(u64, &'f AgentEvent),
}

impl<W> Core<W> {
    /// The core of a fold that starts at `run_id`'s `run.accepted`.
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            started: false,
            open: None,
            streaming: BTreeMap::new(),
            waiting: None,
            muted: None,
            drawn: Drawn::default(),
        }
    }

    /// What `frame` is to the fold: `None` for another run's frames, and for this run's
    /// before its `run.accepted`.
    pub fn read<'f>(&mut self, frame: &'f Frame) -> Option<RunFrame<'f>> {
        match &frame.body {
            FrameBody::RunAccepted { run_id, .. } if *run_id == self.run_id && !self.started => {
                self.started = true;
                Some(RunFrame::Accepted)
            }
            FrameBody::LoopEvent { run_id, message_index, event, .. } if *run_id == self.run_id && self.started => {
                Some(RunFrame::Event(message_index.unwrap_or(0), event))
            }
            _ => None,
        }
    }
}

/// A tool call of message `index` of `session`, as a snapshot shows it.
pub struct DrawnCall<'a> {
    pub session: &'a SessionId,
    pub index: u64,
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a serde_json::Value,
}

/// A tool result of `session`, as a snapshot shows it.
pub struct DrawnResult<'a> {
    pub session: &'a SessionId,
    pub tool_call_id: &'a str,
    pub text: String,
    pub is_error: bool,
}

/// A run-following fold over a [`Core`]: the dialect says how a part is written and
/// maps the frames that are its own; opening and closing parts, what a delta still
/// sends, drawing a snapshot's blocks and muting are the core's.
pub trait PartFold {
    /// One event of the dialect's stream.
    type Event;
    /// How the fold names what the run waits for.
    type Waiting;

    fn core(&mut self) -> &mut Core<Self::Waiting>;
    /// The dialect's id for block `content` of message `index` of `session`: the same
    /// for the same block, so a replay names the same parts.
    fn part_id(session: &SessionId, block: Block, index: u64, content: usize) -> String;
    /// Writes what opens `part`.
    fn start_part(&mut self, part: &Part, out: &mut Vec<Self::Event>);
    /// Writes `delta` as content of the open `part`.
    fn part_content(part: &Part, delta: String, out: &mut Vec<Self::Event>);
    /// Writes what closes `part`.
    fn end_part(part: Part, out: &mut Vec<Self::Event>);
    /// Writes a tool call that a snapshot shows.
    fn draw_call(&mut self, call: DrawnCall<'_>, out: &mut Vec<Self::Event>);
    /// Writes a tool result that a snapshot shows (the part being streamed is closed).
    fn draw_result(&mut self, result: DrawnResult<'_>, out: &mut Vec<Self::Event>);
    /// Maps one frame of the run's session, muted or not.
    fn map_frame(&mut self, frame: &Frame) -> Vec<Self::Event>;

    /// Maps one native frame of the run's session to its events: none while muted,
    /// where the frame is folded all the same.
    fn push(&mut self, frame: &Frame) -> Vec<Self::Event> {
        let Some(ends) = self.core().muted.as_ref().map(|muted| muted.ends_at(frame)) else {
            return self.map_frame(frame);
        };
        let _ = self.map_frame(frame);
        if ends {
            let core = self.core();
            core.waiting = core.muted.take().and_then(|muted| muted.waiting);
        }
        Vec::new()
    }

    /// Closes the part being streamed, if any.
    fn close_part(&mut self, out: &mut Vec<Self::Event>) {
        if let Some(part) = self.core().open.take() {
            Self::end_part(part, out);
        }
    }

    /// Opens `part` unless it is the part being streamed (closing that one first).
    fn open_part(&mut self, part: Part, out: &mut Vec<Self::Event>) {
        if self.core().open.as_ref() == Some(&part) {
            return;
        }
        self.close_part(out);
        self.start_part(&part, out);
        self.core().open = Some(part);
    }

    /// Opens `part` and sends `text` as its content.
    fn send_part(&mut self, part: Part, text: String, out: &mut Vec<Self::Event>) {
        self.open_part(part, out);
        if let Some(part) = &self.core().open {
            Self::part_content(part, text, out);
        }
    }

    /// Maps a text or thinking delta of message `index`: what the client does not have
    /// of it, in its part; its block's end closes the part. Any other delta (a tool
    /// call's) is given back for the fold to map.
    fn block_delta<'d>(
        &mut self,
        session: &SessionId,
        index: u64,
        delta: &'d StreamDelta,
        out: &mut Vec<Self::Event>,
    ) -> Option<&'d StreamDelta> {
        let (block, content, offset, text) = match delta {
            StreamDelta::TextDelta { content_index, offset, delta } => (Block::Text, *content_index, *offset, delta),
            StreamDelta::ThinkingDelta { content_index, offset, delta } => {
                (Block::Reasoning, *content_index, *offset, delta)
            }
            StreamDelta::TextEnd { content_index } | StreamDelta::ThinkingEnd { content_index } => {
                let ids =
                    [Block::Text, Block::Reasoning].map(|block| Self::part_id(session, block, index, *content_index));
                if self.core().open.as_ref().is_some_and(|part| ids.contains(&part.id)) {
                    self.close_part(out);
                }
                return None;
            }
            other => return Some(other),
        };
        let text = self.core().drawn.unsent((index, content), offset, text)?;
        let part = Part { block, id: Self::part_id(session, block, index, content) };
        self.send_part(part, text, out);
        None
    }

    /// Message `index` as a snapshot shows it; a draft's blocks are noted as sent so far,
    /// and its last block stays open for the deltas that follow.
    fn draw(&mut self, session: &SessionId, index: u64, message: &Message, done: bool, out: &mut Vec<Self::Event>) {
        match message {
            Message::Assistant { content, .. } => {
                for (ci, block) in content.iter().enumerate() {
                    match block {
                        Content::Text { text } => self.draw_block(session, Block::Text, index, ci, text, out),
                        Content::Thinking { thinking } => {
                            self.draw_block(session, Block::Reasoning, index, ci, thinking, out)
                        }
                        Content::ToolCall { id, name, arguments } => {
                            self.draw_call(DrawnCall { session, index, id, name, input: arguments }, out)
                        }
                        // Files come in user messages only.
                        Content::File { .. } => {}
                    }
                }
                if done {
                    self.close_part(out);
                }
            }
            Message::ToolResult { tool_call_id, content, is_error, .. } => {
                self.close_part(out);
                let text = result_text(content);
                self.draw_result(DrawnResult { session, tool_call_id, text, is_error: *is_error }, out);
            }
            Message::User { .. } => {}
        }
    }

    /// Block `content` of message `index` as a snapshot shows it: sent whole in its part,
    /// and noted as sent so far (a draft's part stays open for the deltas that follow).
    fn draw_block(
        &mut self,
        session: &SessionId,
        block: Block,
        index: u64,
        content: usize,
        text: &str,
        out: &mut Vec<Self::Event>,
    ) {
        let part = Part { block, id: Self::part_id(session, block, index, content) };
        match text.is_empty() {
            true => self.open_part(part, out),
            false => self.send_part(part, text.to_owned(), out),
        }
        self.core().drawn.record((index, content), text);
    }
}

/// The messages of `run` a snapshot shows, after its prompt: the committed ones
/// (`messages`, the state's own when they reach back that far), then the drafts being
/// streamed; each with whether it is done.
pub fn shown<'a>(
    run: &Run,
    state: &'a SessionState,
    messages: &'a [IndexedMessage],
) -> impl Iterator<Item = (u64, &'a Message, bool)> {
    let prompt = run.user_message_index;
    let committed = messages.iter().filter(move |m| m.index > prompt).map(|m| (m.index, &m.message, true));
    let drafts = state.drafts.iter().filter(move |(i, _)| **i > prompt).map(|(i, m)| (*i, m, false));
    committed.chain(drafts)
}

/// A tool result's text: its text blocks, joined.
pub fn result_text(content: &[Content]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            Content::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `data: <json>` and a blank line: how the AI SDK and AG-UI write each event.
pub fn data_event<T: Serialize>(event: &T) -> Bytes {
    let json = serde_json::to_string(event).expect("events are plain data and always serialize");
    sse::encode(None, None, &json)
}

/// `events`, each as a [`data_event`], in one buffer.
pub fn data_events<T: Serialize>(events: &[T]) -> Bytes {
    let mut out = BytesMut::new();
    for event in events {
        out.extend_from_slice(&data_event(event));
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_sends_only_what_the_snapshot_did_not_draw() {
        let mut drawn = Drawn::default();
        assert_eq!(drawn.unsent((1, 0), 0, "new"), Some("new".into()), "an undrawn block sends all");
        drawn.record((1, 0), "héllo 🎈");
        assert_eq!(drawn.unsent((1, 0), 0, "hél"), None, "all of it drawn");
        assert_eq!(drawn.unsent((1, 0), 3, "lo 🎈!"), Some("!".into()), "only the part beyond");
        // The balloon is two UTF-16 units: a delta cut inside what was drawn resumes after it.
        assert_eq!(drawn.unsent((1, 0), 6, "🎈 ok"), Some(" ok".into()));
        assert_eq!(drawn.unsent((1, 0), 8, " ok"), Some(" ok".into()), "past the drawn part: whole");
    }
}
