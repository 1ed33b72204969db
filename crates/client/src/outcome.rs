//! Reading a run's end from a folded state: what a caller that sent a prompt waits for.
//!
//! The state says it whatever way it was reached — frame by frame or by a snapshot
//! after a reconnect — because a run's prompt timing carries its run id and its end,
//! and the committed messages after its prompt are its answer.

use spool_protocol::frame::SessionState;
use spool_protocol::{Message, RunId, RunStatus};

/// How a run ended, and the text it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// `completed`, `failed` or `cancelled`.
    pub status: RunStatus,
    /// The text of the assistant messages after the run's prompt, joined.
    pub text: String,
}

/// `Some` once `run` has ended and its messages are committed, while its round is
/// among the latest three that a state holds.
pub fn finished(state: &SessionState, run: &RunId) -> Option<Finished> {
    let timing = state.prompt_timings.values().find(|t| t.run_id.as_ref() == Some(run))?;
    let status = timing.status.filter(|s| s.is_terminal() && timing.ended_at.is_some())?;
    if state.active_run.as_ref().is_some_and(|a| &a.run_id == run) || !state.drafts.is_empty() {
        return None; // Ended, but its last messages are not committed yet.
    }
    let text = state
        .messages
        .iter()
        .filter(|m| m.index > timing.user_message_index)
        .take_while(|m| !m.message.is_user())
        .filter(|m| matches!(m.message, Message::Assistant { .. }))
        .map(|m| m.message.text())
        .collect();
    Some(Finished { status, text })
}
