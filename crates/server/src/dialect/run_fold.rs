//! What the run-following folds (`ai_sdk`, `ag_ui`) share: the part of a run a snapshot
//! already drew ([`Drawn`]), so live deltas send only what lies beyond it, and a
//! continuation that replays the run from its start sending nothing up to an
//! approval's request ([`Muted`]). Both folds map a run's frames to a message stream
//! that a client builds up; these are the two places where what the client already
//! holds decides what a frame still sends, and they must agree between the dialects.

use spool_protocol::event::offset_len;
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::{AgentEvent, ApprovalId};
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
