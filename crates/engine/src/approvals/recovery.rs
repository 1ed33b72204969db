//! Decided calls after a crash: which resume, which fail as `tool_outcome_unknown`
//! (started, no result; never re-run), and the idempotency claims left open.

use super::*;

/// What [`sort_decided`] found.
#[derive(Default)]
pub(crate) struct SortedCalls {
    /// Decided calls that never started, their runs marked `running` again: resume each.
    pub resume: Vec<DecidedCall>,
    /// Runs failed with `tool_outcome_unknown` (their call started, no result).
    pub unknown: Vec<Run>,
}

/// Sorts the decided calls of runs whose process died (at start-up for one process on
/// its own store; for a session whose lease expired on a shared store, `only` that
/// session): a call that never started and whose conversation is still at its
/// checkpoint is returned to be resumed — also when the process died between recording
/// the decision and marking the run `running` again; one that started without a result
/// has its run failed with `tool_outcome_unknown`, never re-run. Every other running
/// run is left to the caller (`server_restarted`, `node_lost`).
pub(crate) async fn sort_decided(
    store: &dyn Store,
    only: Option<&SessionId>,
    metrics: &crate::metrics::Metrics,
) -> Result<SortedCalls> {
    let mut sorted = SortedCalls::default();
    for decided in store.decided_calls().await? {
        if only.is_some_and(|s| s != &decided.approval.session_id) {
            continue;
        }
        let Ok(checkpoint) = serde_json::from_value::<Checkpoint>(decided.checkpoint.clone()) else {
            continue;
        };
        // Messages past the checkpoint: the decided call has its result; what was lost
        // came after it.
        if store.count_messages(&decided.approval.session_id).await? != checkpoint.next_index {
            continue;
        }
        let Some(mut run) = store.get_run(&decided.approval.run_id).await? else { continue };
        // A client's result is approving too: its call never started here (it ran in
        // the client), so it always resumes, and committing it is repeatable.
        let approving = matches!(
            decided.approval.decision,
            Some(Decision::Once | Decision::Always | Decision::Fill(_) | Decision::Output(_))
        );
        let now = now_ms();
        match decided.started_at {
            // A reject never starts its call; once the run went on past it, a crash
            // fails it like any other running run.
            None if approving || run.status == RunStatus::Interrupted => {
                if run.status != RunStatus::Running {
                    run.status = RunStatus::Running;
                    run.updated_at = now;
                    store.update_run(&run).await?;
                }
                sorted.resume.push(decided);
            }
            None => {}
            Some(_) => {
                run.status = RunStatus::Failed;
                run.updated_at = now;
                run.ended_at = Some(now);
                run.error = Some(RunError {
                    code: "tool_outcome_unknown".into(),
                    message: format!(
                        "the server stopped while the approved {} call was running; it is not run again, \
                         and whether it finished is unknown",
                        decided.approval.tool
                    ),
                });
                // The call (and any later one of its message) gets a result saying so:
                // no view shows it running for ever, and the model is told at the next
                // prompt that its outcome is unknown.
                let cut = &checkpoint.pending;
                let unknown = format!(
                    "The server stopped while this {} call was running. It was not run again; whether it \
                     finished, and what it changed, is unknown.",
                    cut.name
                );
                let mut results = vec![(cut, unknown)];
                for later in &checkpoint.remaining {
                    results.push((
                        later,
                        format!("The {} call was cancelled before it ran: the server stopped.", later.name),
                    ));
                }
                for (offset, (call, text)) in results.into_iter().enumerate() {
                    let message = Message::ToolResult {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content: vec![Content::Text { text }],
                        is_error: true,
                        timestamp: now,
                        diff: None,
                    };
                    let index = checkpoint.next_index + offset as u64;
                    let indexed = IndexedMessage { id: MessageId::new(), index, message };
                    store.insert_message(&run.session_id, &run.owner_id, &indexed).await?;
                }
                store.update_run(&run).await?;
                metrics.run_settled(RunStatus::Failed);
                tracing::warn!(run = %run.id, approval = %decided.approval.id, "an approved call was cut off by a crash: tool_outcome_unknown");
                sorted.unknown.push(run);
            }
        }
    }
    Ok(sorted)
}

/// Says, once per key, that a claim was released: a retry with it now runs again.
pub(crate) fn log_released(released: Vec<(String, String)>) {
    for (scope, key) in released {
        tracing::warn!(%scope, %key, "released an idempotency claim left by a request that never finished");
    }
}
