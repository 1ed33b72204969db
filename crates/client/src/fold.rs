//! The cursor rules of a session stream (seed 001), as the browser's `SessionStore`
//! applies them, over the one state projection every side shares
//! (`spool_protocol::view::apply_frame`).
//!
//! * every applied frame moves the cursor `{streamId, seq}`;
//! * an incremental frame at or behind the cursor is a duplicate and is dropped;
//! * one from another stream, or past cursor + 1 (a gap), is not applied: the stream
//!   reconnects without a cursor, which yields a fresh snapshot;
//! * a snapshot of the same stream behind the cursor is older than what we hold: ignored;
//! * a text, thinking or tool-argument delta applies only at the offset the draft has
//!   reached: behind is a duplicate, ahead (or with no draft) is a hole → snapshot.
//!
//! Pure: no I/O and no clock, so the tests below drive it with hand-made frames.

use spool_protocol::event::offset_len;
use spool_protocol::frame::{Frame, FrameBody, SessionState};
use spool_protocol::view::apply_frame;
use spool_protocol::{AgentEvent, Content, Cursor, Message, StreamDelta};
use std::sync::Arc;

/// What became of one frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Applied; the cursor moved.
    Applied,
    /// Already held (at or behind the cursor, or an older snapshot): dropped.
    Duplicate,
    /// Not applicable: the stream must reconnect for a snapshot, for this reason.
    Resync(String),
}

/// A session's state as a client holds it, with the cursor of the last frame applied.
#[derive(Debug)]
pub(crate) struct Fold {
    pub state: Arc<SessionState>,
    pub cursor: Cursor,
}

impl Fold {
    /// Starts from a snapshot frame; `None` for any other frame.
    pub fn from_snapshot(frame: Frame) -> Option<Fold> {
        let cursor = frame.cursor();
        match frame.body {
            FrameBody::Snapshot { state } => Some(Fold { state: Arc::new(*state), cursor }),
            _ => None,
        }
    }

    /// Applies one frame. A snapshot replaces the state (unless it is older than it);
    /// anything else must be the next frame of the same stream.
    pub fn apply(&mut self, frame: &Frame) -> Verdict {
        if let FrameBody::Snapshot { state } = &frame.body {
            if frame.stream_id == self.cursor.stream_id && frame.seq < self.cursor.seq {
                return Verdict::Duplicate;
            }
            self.state = Arc::new((**state).clone());
            self.cursor = frame.cursor();
            return Verdict::Applied;
        }
        if frame.stream_id != self.cursor.stream_id {
            return Verdict::Resync("the stream changed".into());
        }
        if frame.seq <= self.cursor.seq {
            return Verdict::Duplicate;
        }
        if frame.seq != self.cursor.seq + 1 {
            return Verdict::Resync(format!("gap after seq {}", self.cursor.seq));
        }
        // The seq is right, so the frame is applied (or the state is replaced by a
        // snapshot) either way; a hole means what we hold is wrong, not the frame.
        let hole = delta_hole(&self.state, &frame.body);
        self.cursor = frame.cursor();
        match hole {
            Some(DeltaCheck::Hole(reason)) => Verdict::Resync(reason),
            Some(DeltaCheck::Behind) => Verdict::Applied,
            None => {
                // Copies the state only while a consumer still holds an earlier one.
                apply_frame(Arc::make_mut(&mut self.state), &frame.body);
                Verdict::Applied
            }
        }
    }
}

impl Fold {
    /// Takes the place of a frame whose type this client does not know: the same
    /// cursor rules, nothing applied.
    pub fn skip(&mut self, cursor: &Cursor) -> Verdict {
        if cursor.stream_id != self.cursor.stream_id {
            return Verdict::Resync("the stream changed".into());
        }
        if cursor.seq <= self.cursor.seq {
            return Verdict::Duplicate;
        }
        if cursor.seq != self.cursor.seq + 1 {
            return Verdict::Resync(format!("gap after seq {}", self.cursor.seq));
        }
        self.cursor = cursor.clone();
        Verdict::Applied
    }
}

enum DeltaCheck {
    /// The delta starts before the end of what we hold: already applied.
    Behind,
    Hole(String),
}

/// Checks a streamed delta against the draft it extends (`None`: apply it).
fn delta_hole(state: &SessionState, body: &FrameBody) -> Option<DeltaCheck> {
    let FrameBody::LoopEvent { event: AgentEvent::MessageUpdate { assistant_message_event }, message_index, .. } = body
    else {
        return None;
    };
    let (content_index, offset) = match assistant_message_event {
        StreamDelta::TextDelta { content_index, offset, .. }
        | StreamDelta::ThinkingDelta { content_index, offset, .. }
        | StreamDelta::ToolcallDelta { content_index, offset, .. } => (*content_index, *offset),
        _ => return None,
    };
    let Some(Message::Assistant { content, .. }) = message_index.and_then(|i| state.drafts.get(&i)) else {
        return Some(DeltaCheck::Hole(format!("a delta for a draft we do not hold ({message_index:?})")));
    };
    let held = match content.get(content_index) {
        Some(Content::Text { text }) => offset_len(text),
        Some(Content::Thinking { thinking }) => offset_len(thinking),
        Some(Content::ToolCall { arguments: serde_json::Value::String(raw), .. }) => offset_len(raw),
        _ => return Some(DeltaCheck::Hole(format!("a delta for block {content_index}, which we do not hold"))),
    };
    match offset.cmp(&held) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Less => Some(DeltaCheck::Behind),
        std::cmp::Ordering::Greater => Some(DeltaCheck::Hole(format!("a delta at offset {offset}, we hold {held}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::view::initial_state;
    use spool_protocol::{ProjectId, RunId, Session, SessionId, StreamId, UserId};

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

    struct Frames {
        session: SessionId,
        stream: StreamId,
        run: RunId,
    }

    impl Frames {
        fn new() -> Frames {
            Frames { session: SessionId::new(), stream: StreamId::new(), run: RunId::new() }
        }

        fn frame(&self, seq: u64, body: FrameBody) -> Frame {
            Frame { body, session_id: self.session.clone(), stream_id: self.stream.clone(), seq }
        }

        fn snapshot(&self, seq: u64) -> Frame {
            self.frame(seq, FrameBody::Snapshot { state: Box::new(initial_state(session(), vec![], 0)) })
        }

        fn event(&self, seq: u64, event: AgentEvent) -> Frame {
            let body =
                FrameBody::LoopEvent { run_id: self.run.clone(), message_index: Some(1), message_id: None, event };
            self.frame(seq, body)
        }

        fn start(&self, seq: u64) -> Frame {
            let message = Message::Assistant {
                content: vec![Content::Text { text: String::new() }],
                stop_reason: None,
                usage: Default::default(),
                model: "scripted".into(),
                error_message: None,
                timestamp: 0,
            };
            self.event(seq, AgentEvent::MessageStart { message })
        }

        fn delta(&self, seq: u64, offset: usize, delta: &str) -> Frame {
            let delta = StreamDelta::TextDelta { content_index: 0, offset, delta: delta.into() };
            self.event(seq, AgentEvent::MessageUpdate { assistant_message_event: delta })
        }
    }

    fn draft_text(fold: &Fold) -> String {
        fold.state.drafts.get(&1).map(Message::text).unwrap_or_default()
    }

    #[test]
    fn frames_apply_in_order_and_duplicates_are_dropped() {
        let f = Frames::new();
        let mut fold = Fold::from_snapshot(f.snapshot(3)).expect("a snapshot");
        assert_eq!(fold.apply(&f.start(4)), Verdict::Applied);
        assert_eq!(fold.apply(&f.delta(5, 0, "Hello")), Verdict::Applied);
        assert_eq!(fold.apply(&f.delta(5, 0, "Hello")), Verdict::Duplicate, "a replayed seq");
        assert_eq!(fold.apply(&f.delta(6, 5, ", world")), Verdict::Applied);
        assert_eq!(draft_text(&fold), "Hello, world");
        assert_eq!(fold.cursor.seq, 6);
        assert_eq!(fold.apply(&f.snapshot(2)), Verdict::Duplicate, "an older snapshot of the same stream");
        assert_eq!(draft_text(&fold), "Hello, world");
    }

    #[test]
    fn a_gap_a_new_stream_or_a_delta_hole_asks_for_a_snapshot() {
        let f = Frames::new();
        let mut fold = Fold::from_snapshot(f.snapshot(3)).expect("a snapshot");
        assert_eq!(fold.apply(&f.start(4)), Verdict::Applied);
        assert_eq!(fold.apply(&f.delta(6, 0, "x")), Verdict::Resync("gap after seq 4".into()));
        let other = Frames { stream: StreamId::new(), ..Frames::new() };
        assert_eq!(fold.apply(&other.delta(5, 0, "x")), Verdict::Resync("the stream changed".into()));
        assert!(matches!(fold.apply(&f.delta(5, 3, "x")), Verdict::Resync(r) if r.contains("offset 3")));
        assert_eq!(draft_text(&fold), "", "nothing of a refused frame is applied");
        // A snapshot of another stream (the server restarted) is taken as it is.
        assert_eq!(fold.apply(&other.snapshot(1)), Verdict::Applied);
        assert_eq!(fold.cursor, other.snapshot(1).cursor());
    }

    #[test]
    fn a_delta_behind_the_draft_is_not_applied_twice() {
        let f = Frames::new();
        let mut fold = Fold::from_snapshot(f.snapshot(0)).expect("a snapshot");
        fold.apply(&f.start(1));
        fold.apply(&f.delta(2, 0, "ab"));
        assert_eq!(fold.apply(&f.delta(3, 0, "ab")), Verdict::Applied, "its seq is new, its text is not");
        assert_eq!(draft_text(&fold), "ab");
    }
}
