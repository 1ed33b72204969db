//! Settlement: how a run ends — its record written, its lease dropped, `agent_end`,
//! the idle state and `agent_settled` published, and the session's queue asked to go
//! on — and how the calls of a parked run that will never run are ended.

use super::*;
use crate::StoreError;

impl RunTask {
    pub(super) async fn settle(mut self, outcome: Outcome) {
        let outcome = match (outcome, self.handle.failed_as.get()) {
            (Outcome::Cancelled, Some(error)) => failure(&error.code, error.message.clone()),
            (other, _) => other,
        };
        if let Outcome::Interrupted = outcome {
            tracing::info!(status = outcome.status().as_str(), "run settled");
            self.env.metrics.run_settled(outcome.status());
            // Durable already; the run continues when someone decides, on whichever
            // node wins the decision: no lease is held while it waits.
            self.env.drop_lease(&self.run.session_id).await;
            self.handle.finished.cancel();
            return;
        }
        let now = now_ms();
        self.run.status = outcome.status();
        self.run.ended_at = Some(now);
        self.run.updated_at = now;
        match &outcome {
            Outcome::Failed(error) => {
                tracing::warn!(run = %self.run.id, code = %error.code, message = %error.message, "run failed");
                self.run.error = Some(error.clone());
            }
            Outcome::Rejected(error) => self.run.error = Some(error.clone()),
            _ => {}
        }
        match self.store.update_run(&self.run).await {
            Ok(()) => {}
            // Another node took the lease over: it settled the run and announced it.
            Err(StoreError::Fenced(_)) => {
                self.stop_quietly().await;
                self.env.drop_lease(&self.run.session_id).await;
                return;
            }
            // Not stored (the database out of reach): announced, the end would
            // contradict the store, which still says `running`. The lease is left to
            // expire; a reaper then settles the run `node_lost` and announces that.
            Err(e) => {
                tracing::error!(run = %self.run.id, error = %e, "could not save the settled run; it is left to the reaper");
                self.stop_quietly().await;
                self.env.abandon_lease(&self.run.session_id).await;
                return;
            }
        }
        tracing::info!(status = outcome.status().as_str(), "run settled");
        self.env.metrics.run_settled(outcome.status());
        self.env.drop_lease(&self.run.session_id).await;
        // The end goes out even past the lease's end as this node knew it: the settled
        // record went through the fence, so no other node settled the run.
        let end = AgentEvent::AgentEnd {
            status: self.run.status.as_str().into(),
            usage: self.run.usage,
            error: self.run.error.clone(),
        };
        self.emit_stored(end, None, None);
        self.emit_stored(PromptTiming::of(&self.run).event(), None, None);
        self.loaded.set_active(None);
        self.loaded.publish_idle();
        self.emit_stored(AgentEvent::AgentSettled {}, None, None);
        self.handle.finished.cancel();
        // Completed, failed or cancelled (a Stop ends this run only), the queue goes on —
        // unless this node is stopping or lost the session: its next runner takes it.
        if self.handle.failed_as.get().is_none() {
            self.env.run_settled(&self.run.session_id);
        }
    }

    /// Ends `calls`, none of which ran, from the run's next index on (see
    /// [`end_unrun_calls`]), through the run's fenced store.
    pub(super) async fn end_unrun(&mut self, calls: Vec<Call>, why: impl Fn(&str) -> String) {
        let at = (self.next_index, calls);
        self.next_index = end_unrun_calls(&*self.store, Some(&self.lease), &self.loaded, &self.run, at, why).await;
    }

    /// The end of a run whose settling this node could not store: another node took
    /// the lease over (it settled the run and told every client), or the database was
    /// out of reach (a reaper will). This node writes nothing more and publishes
    /// nothing; it only forgets the run, so the session is free here again (its view
    /// follows the frames of whoever settles the run, or is reloaded from the store).
    /// The caller decides what becomes of the lease.
    async fn stop_quietly(&self) {
        tracing::warn!(run = %self.run.id, "the run stops here without a trace; its end is another node's or a reaper's");
        self.loaded.set_active(None);
        self.handle.finished.cancel();
    }
}

/// Ends the calls of a run parked at an approval that will never run them (the run was
/// stopped, or the approval expired): each gets a `tool_execution_end` with an error and
/// a stored tool result, so every view — and the model, at the next prompt — sees the
/// call ended instead of running for ever. Then the prompt's timing ends. `run` is the
/// run as settled; `checkpoint` the one stored with its approval.
pub(crate) async fn end_parked_calls(env: &RunEnv, loaded: &Loaded, run: &Run, checkpoint: serde_json::Value) {
    let reason = run.error.as_ref().map_or("the run was cancelled", |e| e.message.as_str()).to_owned();
    let (index, calls) = match serde_json::from_value::<Checkpoint>(checkpoint) {
        // A guardrail's pause before a model call has no call waiting: its pending
        // call only names the approval.
        Ok(c) if c.guard.is_some_and(|g| g.before == super::guard::Before::ModelCall) => (c.next_index, Vec::new()),
        Ok(c) => (c.next_index, std::iter::once(c.pending).chain(c.remaining).collect()),
        Err(e) => {
            tracing::warn!(run = %run.id, error = %e, "unreadable checkpoint: the parked calls stay open");
            (0, Vec::new())
        }
    };
    let why = |name: &str| format!("The {name} call was cancelled before it ran: {reason}.");
    end_unrun_calls(&*env.store, None, loaded, run, (index, calls), why).await;
    let event = PromptTiming::of(run).event();
    loaded.events.publish_body(FrameBody::LoopEvent {
        run_id: run.id.clone(),
        message_index: None,
        message_id: None,
        event,
    });
}

/// Ends `calls`, none of which ran, from message `index` on: for each, a
/// `tool_execution_end` with an error saying `why`, and a stored tool result (so the
/// conversation stays well-formed for the model), written to `store` (a running run's
/// is held to its `lease`, which also decides whether the ends go out: see
/// [`RunTask::emit`]). Returns the next free index.
async fn end_unrun_calls(
    store: &dyn crate::Store,
    lease: Option<&Held>,
    loaded: &Loaded,
    run: &Run,
    (mut index, calls): (u64, Vec<Call>),
    why: impl Fn(&str) -> String,
) -> u64 {
    let publish = |event, message_index, message_id| {
        loaded.events.publish_body(FrameBody::LoopEvent { run_id: run.id.clone(), message_index, message_id, event });
    };
    let speaks = || lease.is_none_or(Held::speaks);
    for Call { id, name, .. } in calls {
        let result = why(&name);
        let end = AgentEvent::ToolExecutionEnd {
            tool_call_id: id.clone(),
            tool_name: name.clone(),
            result: result.clone(),
            is_error: true,
        };
        if speaks() {
            publish(end, None, None);
        }
        let message = Message::ToolResult {
            tool_call_id: id,
            tool_name: name,
            content: vec![Content::Text { text: result }],
            is_error: true,
            timestamp: now_ms(),
            diff: None,
        };
        if speaks() {
            publish(AgentEvent::MessageStart { message: message.clone() }, Some(index), None);
        }
        let indexed = IndexedMessage { id: MessageId::new(), index, message };
        if let Err(e) = store.insert_message(&run.session_id, &run.owner_id, &indexed).await {
            tracing::warn!(run = %run.id, error = %e, "could not save the result of a call that never ran");
            break;
        }
        publish(AgentEvent::MessageEnd { message: indexed.message }, Some(index), Some(indexed.id));
        index += 1;
    }
    index
}
