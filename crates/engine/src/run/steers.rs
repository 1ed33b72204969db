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
        let steers = match self.env.store.queued_steers(&session).await {
            Ok(steers) => steers,
            Err(e) => {
                tracing::warn!(run = %self.run.id, error = %e, "cannot read the session's steers; they wait");
                return Ok(false);
            }
        };
        let mut taken = Vec::new();
        for steer in steers {
            let message = Message::user_text(steer.message.text.clone(), now_ms());
            let indexed = IndexedMessage { id: steer.message.id.clone(), index: self.next_index, message };
            let took = self
                .env
                .store
                .take_steer(&steer.message.id, &session, &self.run.owner_id, &indexed)
                .await
                .map_err(|e| failure("storage_error", format!("could not take a steer into the run: {e}")))?;
            if !took {
                // Removed by its sender a moment ago.
                continue;
            }
            self.emit(AgentEvent::MessageStart { message: indexed.message.clone() }, Some(indexed.index));
            self.publish_committed(indexed);
            taken.push(steer.message.id);
        }
        if taken.is_empty() {
            return Ok(false);
        }
        let queue = self.env.store.queued_prompts(&session).await;
        let paused = self.env.store.queue_paused(&session).await.unwrap_or(false);
        match queue {
            Ok(queue) => {
                let queue = queue.into_iter().map(|q| q.message).collect();
                let change = QueueChange::Taken { message_ids: taken, run_id: self.run.id.clone() };
                self.loaded.events.publish_body(FrameBody::Queue { queue, change, paused });
            }
            Err(e) => tracing::warn!(run = %self.run.id, error = %e, "cannot read the queue back after a steer"),
        }
        Ok(true)
    }
}
