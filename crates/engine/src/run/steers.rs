//! Steers (issue 40): user messages sent into the running run. The run takes them at
//! its safe boundaries — after a tool batch, before the next model call, and after a
//! model call that asked for no tools (the run then goes on to answer them instead of
//! completing) — so the model's next request holds them. Each is taken in one
//! transaction with its user message at the run's next index (see
//! [`store::Queue::take_steer`]); the run's node holds the session's lease, so no
//! other run takes them, and a steer one misses stays in the queue as a prompt.

use super::*;
use spool_protocol::frame::QueueChange;

impl RunTask {
    /// Takes the session's waiting steers into the conversation, in order, publishing
    /// each as a user message of this run and the queue without them. True when it
    /// took any. A store that cannot be read leaves them waiting (the run goes on; a
    /// later boundary, or the queue, takes them).
    pub(super) async fn take_steers(&mut self) -> Result<bool, Outcome> {
        let session = self.run.session_id.clone();
        let steers = match self.store.queued_steers(&session).await {
            Ok(steers) => steers,
            Err(e) => {
                tracing::warn!(run = %self.run.id, error = %e, "cannot read the session's steers; they wait");
                return Ok(false);
            }
        };
        let mut taken = Vec::new();
        for steer in steers {
            let mut message = Message::user_text(steer.message.text.clone(), now_ms());
            crate::engine::with_files(&mut message, steer.message.files.clone());
            let index = self.next_index + taken.len() as u64;
            let indexed = IndexedMessage { id: steer.message.id.clone(), index, message };
            let took = self
                .store
                .take_steer(&steer.message.id, &session, &self.run.owner_id, &indexed)
                .await
                .map_err(|e| failure("storage_error", format!("could not take a steer into the run: {e}")))?;
            // Not taken: removed by its sender a moment ago.
            if took {
                taken.push(indexed);
            }
        }
        if taken.is_empty() {
            return Ok(false);
        }
        // The queue without them first, as when a run takes a queued prompt: the hub
        // then knows the user messages that follow as taken, not new.
        let ids = taken.iter().map(|m| m.id.clone()).collect();
        match self.store.queued_prompts(&session).await {
            Ok(queue) => {
                let queue = queue.into_iter().map(|q| q.message).collect();
                let paused = self.store.queue_paused(&session).await.unwrap_or(false);
                let change = QueueChange::Taken { message_ids: ids, run_id: self.run.id.clone() };
                self.loaded.events.publish_body(FrameBody::Queue { queue, change, paused });
            }
            Err(e) => tracing::warn!(run = %self.run.id, error = %e, "cannot read the queue back after a steer"),
        }
        for indexed in taken {
            self.emit(AgentEvent::MessageStart { message: indexed.message.clone() }, Some(indexed.index));
            self.publish_committed(indexed);
        }
        Ok(true)
    }
}
