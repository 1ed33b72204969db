//! What streamed stays: the assistant message a run is streaming is checkpointed to the
//! store while it streams, so a crash or a stop never takes away text a person watched.
//!
//! Writes are coalesced — at most one per [`DRAFT_EVERY`] unless [`DRAFT_BYTES`] of new
//! text piled up first — and never one per delta: token-level deltas live only in the
//! replay buffer. A crash loses at most the last interval. [`Checkpoints`] is the small
//! piece of arithmetic that decides when; it takes the time as an argument so its rule
//! is tested without a clock.
//!
//! A run that ends normally commits its message and deletes the draft. A draft whose
//! run ended without committing it (the process died; a node was declared dead) is
//! committed at the next chance by [`commit_orphaned_drafts`], marked with the
//! run's failure, so history, snapshots, the OpenCode views and the UI show the partial
//! answer together with why it stopped.

use crate::store::{Draft, Store, StoreError};
use spool_protocol::{Content, Message, StopReason};
use std::time::Duration;
use tokio::time::Instant;

/// Longest time streamed text may go without being checkpointed.
pub(crate) const DRAFT_EVERY: Duration = Duration::from_millis(250);
/// New text that is checkpointed at once, however recent the last checkpoint.
pub(crate) const DRAFT_BYTES: usize = 8 * 1024;

/// When the streaming draft is written: the bytes since the last write, and when the
/// oldest of them arrived.
#[derive(Debug, Default)]
pub(crate) struct Checkpoints {
    unsaved: usize,
    since: Option<Instant>,
}

impl Checkpoints {
    /// Notes `bytes` of new content arriving at `now`.
    pub fn grew(&mut self, bytes: usize, now: Instant) {
        self.unsaved += bytes;
        self.since.get_or_insert(now);
    }

    /// When the draft must be written at the latest; `None` while nothing is unsaved.
    pub fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + DRAFT_EVERY)
    }

    /// Whether to write now: enough new bytes, or unsaved text older than the interval.
    pub fn should_write(&self, now: Instant) -> bool {
        self.unsaved >= DRAFT_BYTES || self.due().is_some_and(|due| now >= due)
    }

    /// The draft was written.
    pub fn written(&mut self) {
        *self = Self::default();
    }
}

/// A draft turned into the message history keeps: the text and thinking streamed so
/// far, marked as stopped by `reason`. A half-streamed tool call is dropped — it never
/// ran, and a call without a result would make the conversation invalid for a model.
pub(crate) fn settled(message: &Message, reason: &str) -> Message {
    match message {
        Message::Assistant { content, usage, model, timestamp, .. } => Message::Assistant {
            content: content.iter().filter(|c| !matches!(c, Content::ToolCall { .. })).cloned().collect(),
            stop_reason: Some(StopReason::Error),
            usage: *usage,
            model: model.clone(),
            error_message: Some(reason.to_owned()),
            timestamp: *timestamp,
        },
        other => other.clone(),
    }
}

/// Commits every draft whose run ended without committing it, marked with the run's
/// failure, and deletes it. A draft whose index is taken already (the process died
/// between committing the message and deleting the draft) is only deleted. Returns
/// how many messages were committed.
pub(crate) async fn commit_orphaned_drafts(store: &dyn Store) -> Result<usize, StoreError> {
    let mut committed = 0;
    for draft in store.orphaned_drafts().await? {
        let Draft { session_id, run_id, owner_id, mut message } = draft;
        let reason = match store.get_run(&run_id).await? {
            Some(run) => match run.error {
                Some(error) => format!("{} ({})", error.message, error.code),
                None => format!("the run ended ({}) before this answer finished", run.status.as_str()),
            },
            None => "the run ended before this answer finished".to_owned(),
        };
        message.message = settled(&message.message, &reason);
        match store.insert_message(&session_id, &owner_id, &message).await {
            Ok(()) => committed += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
        store.delete_draft(&session_id).await?;
        tracing::info!(session = %session_id, run = %run_id, "kept the answer a stopped run had streamed");
    }
    Ok(committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_after_the_interval_or_a_burst_of_bytes_never_per_delta() {
        let start = Instant::now();
        let mut c = Checkpoints::default();
        assert_eq!(c.due(), None, "nothing unsaved, nothing due");
        c.grew(10, start);
        assert!(!c.should_write(start));
        c.grew(10, start + Duration::from_millis(100));
        assert!(!c.should_write(start + Duration::from_millis(249)), "a delta alone never writes");
        assert_eq!(c.due(), Some(start + DRAFT_EVERY), "due counts from the oldest unsaved text");
        assert!(c.should_write(start + DRAFT_EVERY));
        c.written();
        assert_eq!(c.due(), None);
        c.grew(DRAFT_BYTES, start + DRAFT_EVERY);
        assert!(c.should_write(start + DRAFT_EVERY), "8 KiB of new text is written at once");
    }

    #[test]
    fn a_settled_draft_keeps_its_text_and_says_why_it_stopped() {
        let draft = Message::Assistant {
            content: vec![
                Content::Text { text: "half an ans".into() },
                Content::ToolCall { id: "c1".into(), name: "bash".into(), arguments: serde_json::json!({}) },
            ],
            stop_reason: None,
            usage: Default::default(),
            model: "scripted".into(),
            error_message: None,
            timestamp: 1,
        };
        let kept = settled(&draft, "the server stopped (server_restarted)");
        assert_eq!(kept.text(), "half an ans");
        assert_eq!(kept.content().len(), 1, "the half-streamed tool call is dropped");
        assert!(matches!(
            kept,
            Message::Assistant { stop_reason: Some(StopReason::Error), error_message: Some(ref m), .. }
                if m.contains("server_restarted")
        ));
    }
}
