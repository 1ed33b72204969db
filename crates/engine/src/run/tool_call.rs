//! The tool call: what a call the model asked for goes through — the rules and the
//! mode decide whether it runs, an approval parks the run, the tool executes with its
//! live output streamed, and its result is published and committed.

use super::*;
use crate::approvals::{AskingCall, CallAsker};
use spool_protocol::SnapshotPhase;

impl RunTask {
    /// Runs a turn's calls in order; stops at the first that parks, fails or aborts.
    /// Each call runs in a `tool_call` span (a child of the run's): the tool, the call's
    /// id, the person's decision when one resumed it, and whether it ended in an error
    /// (`parked` when it stopped for an approval instead).
    pub(super) async fn run_calls(
        &mut self,
        turn: usize,
        calls: Vec<Call>,
        mut resolution: Option<Resolution>,
    ) -> Result<(), Outcome> {
        let snapshots = self.step_snapshots(&calls);
        // A resumed step had its `before` taken when it began, before it parked.
        let begun = resolution.is_some() || std::mem::take(&mut self.resumed_step);
        if let Some(snapshots) = snapshots.as_ref().filter(|_| !begun) {
            let message_index = self.next_index.saturating_sub(1);
            let taken = snapshots.before(&*self.store, &self.loaded, &self.run, turn, message_index).await;
            if let Some(snapshot) = taken {
                self.emit(AgentEvent::StepSnapshot { snapshot, phase: SnapshotPhase::Before, message_index }, None);
            }
        }
        for (i, call) in calls.iter().enumerate() {
            let decision = resolution.as_ref().map(|r| match r {
                Resolution::Approved { .. } => "approved",
                Resolution::Rejected { .. } => "rejected",
                Resolution::ClientResult(_) => "output",
                Resolution::Continue(_) => "continue",
            });
            // A call no decision resumed counts against the run's guardrails first.
            if resolution.is_none() {
                self.guard_call(turn, call, &calls[i + 1..]).await?;
            }
            let span = tracing::info_span!(
                "tool_call",
                tool = %call.name,
                call_id = %call.id,
                decision = decision,
                outcome = tracing::field::Empty,
            );
            let done = tracing::Instrument::instrument(
                self.execute_tool(call.clone(), resolution.take(), turn, &calls[i + 1..]),
                span.clone(),
            )
            .await;
            if let Err(Outcome::Interrupted) = &done {
                span.record("outcome", "parked");
            }
            done?;
        }
        // After the last call only: a step that parked, failed or was stopped keeps no
        // `after` (a revert then compares with the files as they are).
        if let Some(snapshots) = snapshots
            && let Some((snapshot, message_index)) = snapshots.after(&*self.store, &self.loaded, &self.run, turn).await
        {
            self.emit(AgentEvent::StepSnapshot { snapshot, phase: SnapshotPhase::After, message_index }, None);
        }
        Ok(())
    }

    /// The recorder, when step snapshots are on and one of `calls` may change files
    /// (see [`crate::snapshots`]); in plan mode none runs, so none is taken.
    fn step_snapshots(&self, calls: &[Call]) -> Option<crate::snapshots::StepSnapshotting> {
        let snapshots = self.env.snapshots.clone()?;
        let changing =
            |call: &Call| self.tools.get(&call.name).is_some_and(|t| crate::snapshots::may_change_files(&*t));
        (self.mode() != SessionMode::Plan && calls.iter().any(changing)).then_some(snapshots)
    }

    /// The session's mode now (a person may switch it while the run goes on).
    pub(super) fn mode(&self) -> SessionMode {
        self.loaded.events.read(|s| s.session.mode)
    }

    /// Switches the session's mode, durably, and tells every view (a tool's
    /// [`crate::Tool::mode_after`], after the person accepted).
    pub(super) async fn switch_mode(&mut self, mode: SessionMode) -> Result<(), Outcome> {
        let _record = self.loaded.record.lock().await;
        let mut session = self.loaded.events.read(|s| s.session.clone());
        if session.mode == mode {
            return Ok(());
        }
        session.mode = mode;
        session.updated_at = now_ms();
        if let Err(e) = self.store.update_session(&session).await {
            return Err(failure(
                "storage_error",
                format!("could not switch the session to {} mode: {e}", mode.as_str()),
            ));
        }
        self.loaded.publish_session(session);
        Ok(())
    }

    /// The permission for a call now: a server deny is final; within the rest the
    /// session's own rules decide (see [`evaluate_call_verdict`]).
    /// A client tool is allowed unless a rule says otherwise (the client gates its own
    /// tools; see [`crate::client_tools::client_rules`]).
    pub(super) fn permission(&self, tool: &dyn crate::Tool, name: &str, args: &serde_json::Value) -> PermissionAction {
        self.verdict(tool, name, args).action
    }

    /// [`permission`](Self::permission) with the wait of the rule behind an `ask`.
    fn verdict(&self, tool: &dyn crate::Tool, name: &str, args: &serde_json::Value) -> Verdict {
        let subject = tool.subject(args);
        let session_rules = self.loaded.events.read(|s| s.session.permissions.clone());
        if self.is_client_tool(name) {
            let server = crate::client_tools::client_rules(&self.env.settings.rules, name);
            return evaluate_call_verdict(&server, &session_rules, name, &subject);
        }
        evaluate_call_verdict(&self.env.settings.rules, &session_rules, name, &subject)
    }

    /// One call, in its steps: whether it runs ([`decide`](Self::decide): the rules, the
    /// mode, or the decision that resumed the run — or it parks for a person), its
    /// execution ([`run_tool`](Self::run_tool)) and its result
    /// ([`finish_call`](Self::finish_call)). A plain reject ends it and the run unrun.
    pub(super) async fn execute_tool(
        &mut self,
        call: Call,
        resolution: Option<Resolution>,
        turn: usize,
        remaining: &[Call],
    ) -> Result<(), Outcome> {
        let plain_reject = matches!(&resolution, Some(Resolution::Rejected { message, .. })
            if message.as_deref().is_none_or(|m| m.trim().is_empty()));
        if plain_reject {
            return Err(self.reject_unrun(call, remaining).await);
        }
        // The client ran it and reported its result: committed as it is. Never marked
        // started: committing a kept result is repeatable, and a resume after a crash
        // that already committed it stops at the checkpoint's message count.
        if let Some(Resolution::ClientResult(output)) = resolution {
            self.decided = None;
            return self.client_result(&call, output).await;
        }
        let tool = self.tools.get(&call.name);
        let client = self.is_client_tool(&call.name);
        let verdict = self.decide(tool.as_deref(), &call, resolution, turn, remaining).await?;
        let decided = self.decided.take();
        // Allowed (by the rules, or by a person asked first): the client runs it.
        if client && let Ok(args) = verdict {
            return Err(self.park_client(call, args, turn, remaining, decided).await);
        }
        // A decided call is about to run: say so durably first (exactly once, at least once).
        if let (Some(approval), Some(_), Ok(_)) = (decided, &tool, &verdict)
            && let Err(e) = self.store.mark_call_started(&approval, now_ms()).await
        {
            return Err(failure("storage_error", format!("could not mark the approved call started: {e}")));
        }
        let (output, aborted) = self.run_tool(tool.as_deref(), &call, verdict).await;
        self.finish_call(&call, output, aborted).await?;
        if aborted { Err(Outcome::Cancelled) } else { Ok(()) }
    }

    /// A plain reject: nothing about this call starts — no `tool_execution_start`, so no
    /// stream shows it running — and the run stops here. The call (and any later call of
    /// the message) ends as rejected in every view and in the conversation.
    async fn reject_unrun(&mut self, call: Call, remaining: &[Call]) -> Outcome {
        let name = call.name.clone();
        let calls: Vec<Call> = std::iter::once(call).chain(remaining.iter().cloned()).collect();
        let why = |tool: &str| format!("The person rejected this {tool} call; the run was cancelled.");
        self.end_unrun(calls, why).await;
        Outcome::Rejected(RunError {
            code: "approval_rejected".into(),
            message: format!("the {name} call was rejected; the run was cancelled"),
        })
    }

    /// Whether the call runs: the arguments it runs with, or the reason it does not
    /// (its error result). The rules decide, or the decision that resumed the run; a
    /// rule that says deny wins even over an approval given earlier. `Err`: the run
    /// parked at an approval (or failed parking).
    async fn decide(
        &mut self,
        tool: Option<&dyn crate::Tool>,
        call: &Call,
        resolution: Option<Resolution>,
        turn: usize,
        remaining: &[Call],
    ) -> Result<Result<serde_json::Value, String>, Outcome> {
        let Call { name, args, .. } = call;
        let mode = self.mode();
        Ok(match (tool, resolution) {
            // Approved, but its source stopped offering it while the run was parked.
            (None, Some(Resolution::Approved { .. })) => {
                Err(format!("{name} is no longer offered (its source withdrew it while the call waited for approval)"))
            }
            (None, _) => Err(format!("unknown tool {name:?}")),
            // The model was not offered it; a person's earlier approval does not change
            // the mode's promise either (the mode may have changed since).
            (Some(tool), _) if !tool.available_in(mode) => Err(unavailable(name, mode)),
            (Some(_), _) if !args.is_object() => Err(format!(
                "invalid arguments for {name}: expected a JSON object, got {}",
                truncate(&args.to_string(), 200)
            )),
            // Handled before (`execute_tool`): a client's result is never decided.
            (_, Some(Resolution::ClientResult(_))) => Err(format!("{name} got a client's result out of turn")),
            // Handled before (`continue_from`): a guardrail's decision is the run's.
            (_, Some(Resolution::Continue(_))) => Err(format!("{name} got a guardrail's decision out of turn")),
            // Nobody answered and the rule said deny: its message says so.
            (Some(_), Some(Resolution::Rejected { message: Some(m), person: false })) if !m.trim().is_empty() => {
                Err(format!("{m}. The {name} call did not run."))
            }
            (Some(_), Some(Resolution::Rejected { message, .. })) => Err(match message {
                Some(m) if !m.trim().is_empty() => format!("The user rejected this {name} call: {m}"),
                _ => format!("The user rejected this {name} call."),
            }),
            (Some(tool), Some(Resolution::Approved { args })) => {
                if !args.is_object() {
                    Err(format!("invalid arguments for {name}: expected a JSON object"))
                } else if self.permission(tool, name, &args) == PermissionAction::Deny {
                    Err(format!("{name} is denied by a permission rule (changed after the approval was asked)"))
                } else {
                    Ok(args)
                }
            }
            (Some(tool), None) if let Err(reason) = tool.check(args) => Err(reason),
            (Some(tool), None) => match self.verdict(tool, name, args) {
                Verdict { action: PermissionAction::Deny, .. } => Err(format!("{name} is denied by a permission rule")),
                // A question always waits for the person, unless nobody can answer; the
                // timeout of an `ask` rule behind it holds, an `allow` rule has none.
                Verdict { wait, .. } if tool.asks(args).is_some() => {
                    if self.policy == ApprovalPolicy::Deny && self.interactive_views().await == 0 {
                        Err(format!("{name} asks the person and no one is connected to answer (approval policy: deny)"))
                    } else {
                        return Err(self.interrupt(tool, call.clone(), turn, remaining, wait).await);
                    }
                }
                Verdict { action: PermissionAction::Allow, .. } => Ok(args.clone()),
                Verdict { action: PermissionAction::Ask, .. }
                    if self.policy == ApprovalPolicy::Deny && self.interactive_views().await == 0 =>
                {
                    Err(format!("{name} needs approval and no one is connected to give it (approval policy: deny)"))
                }
                Verdict { action: PermissionAction::Ask, wait } => {
                    return Err(self.interrupt(tool, call.clone(), turn, remaining, wait).await);
                }
            },
        })
    }

    /// Announces the call (`tool_execution_start`, with the arguments it runs with) and
    /// runs it, its live output streamed, until it finishes or the run is stopped.
    /// Returns its output and whether the stop cut it short.
    async fn run_tool(
        &mut self,
        tool: Option<&dyn crate::Tool>,
        call: &Call,
        verdict: Result<serde_json::Value, String>,
    ) -> (ToolOutput, bool) {
        let Call { id: call_id, name, args } = call;
        let shown_args = verdict.as_ref().map_or_else(|_| args.clone(), Clone::clone);
        let start =
            AgentEvent::ToolExecutionStart { tool_call_id: call_id.clone(), tool_name: name.clone(), args: shown_args };
        self.emit(start, None);
        let cancel = self.handle.cancel.clone();
        let (tool, args) = match (tool, verdict) {
            (_, Err(reason)) => return (ToolOutput::error(reason), false),
            (None, Ok(_)) => return (ToolOutput::error(format!("unknown tool {name:?}")), false),
            (Some(tool), Ok(args)) => (tool, args),
        };
        let (progress, mut reader) = crate::ToolProgress::channel();
        let mut ctx = self.env.tool_context(&self.loaded, cancel.clone());
        ctx.progress = progress;
        // What the tool asks the person while it runs waits here, the run still running.
        let asking = AskingCall {
            store: self.store.clone(),
            run_id: self.run.id.clone(),
            call_id: call_id.clone(),
            tool: name.clone(),
            policy: self.policy,
            cancel: cancel.clone(),
        };
        let asker = Arc::new(CallAsker::new(self.env.clone(), self.loaded.clone(), asking));
        ctx.asker = crate::LiveAsker::new(asker.clone());
        // What it asks the session's model answers with the model this run uses.
        let choice = self.loaded.events.read(|s| s.session.model.clone());
        let model = self.env.models.resolve(choice.as_deref()).clone();
        let sampler = Arc::new(super::sampling::RunSampler::new(model, cancel.clone()));
        ctx.sampler = crate::Sampler::new(sampler.clone());
        let mut live = LiveOutput::new(call_id, name);
        let started = self.env.clock.now_ms();
        let mut running = Box::pin(tool.call(args, &ctx));
        let finished = loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break None,
                out = &mut running => break Some(out),
                chunk = reader.next() => self.stream_output(&mut live, chunk, false),
            }
        };
        // Stopped: the call is dropped first (which kills what it started), so
        // nothing more is printed after the output the result keeps.
        drop(running);
        // An ask the call left open (stopped, timed out, or gave up on it) ends with it.
        asker.close().await;
        self.run.usage.add(sampler.used());
        self.env.metrics.tool_call(name, self.env.clock.now_ms() - started);
        self.stream_output(&mut live, reader.rest(), true);
        match finished {
            Some(output) => (output, false),
            None => (ToolOutput::error(live.stopped_result()), true),
        }
    }

    /// The call's result: its todo list and what it confirmed kept, the mode it switches
    /// to applied, then `tool_execution_end` and the committed tool-result message.
    async fn finish_call(&mut self, call: &Call, mut output: ToolOutput, aborted: bool) -> Result<(), Outcome> {
        let Call { id: call_id, name, .. } = call;
        if let Some(todos) = output.todos.take().filter(|_| !output.is_error && !aborted)
            && let Err(reason) = self.replace_todos(todos).await
        {
            output = ToolOutput::error(reason);
        }
        // A tool that prints an environment secret (a failing command echoing a key)
        // must not carry it into events, the store or the next model call.
        let (result, is_error) = (redact(&output.text), output.is_error);
        // The diff shows file text the call wrote, which may hold a secret as well.
        let diff = output.diff.as_deref().filter(|_| !is_error && !aborted).map(redact);
        if !is_error && !aborted {
            self.remember_tool_fact(call, &result).await;
            if let Some(mode) = self.tools.get(name).and_then(|t| t.mode_after()) {
                self.switch_mode(mode).await?;
            }
        }
        let outcome = if aborted {
            "aborted"
        } else if is_error {
            "error"
        } else {
            "ok"
        };
        tracing::Span::current().record("outcome", outcome);
        let end = AgentEvent::ToolExecutionEnd {
            tool_call_id: call_id.clone(),
            tool_name: name.clone(),
            result: result.clone(),
            is_error,
        };
        self.emit(end, None);
        let message = Message::ToolResult {
            tool_call_id: call_id.clone(),
            tool_name: name.clone(),
            content: vec![Content::Text { text: result }],
            is_error,
            timestamp: now_ms(),
            diff,
        };
        self.emit(AgentEvent::MessageStart { message: message.clone() }, Some(self.next_index));
        self.commit(message).await
    }

    /// Publishes a chunk of a running call's output as `tool_execution_update` (redacted
    /// like the result) and adds it to the call's output in the session state. `last`:
    /// the call is over, so nothing is held back any more.
    fn stream_output(&self, live: &mut LiveOutput, chunk: crate::ProgressChunk, last: bool) {
        let mut text = std::mem::take(&mut live.held);
        text.push_str(&chunk.text);
        let mut text = redact_with(&text, &live.secrets);
        if !last && !chunk.truncated {
            let keep = secret_prefix_len(&text, &live.secrets);
            live.held = text.split_off(text.len() - keep);
        }
        if text.is_empty() && !chunk.truncated {
            return;
        }
        let offset = spool_protocol::event::offset_len(&live.sent);
        live.sent.push_str(&text);
        live.truncated |= chunk.truncated;
        let update = AgentEvent::ToolExecutionUpdate {
            tool_call_id: live.tool_call_id.clone(),
            tool_name: live.tool_name.clone(),
            offset,
            delta: text,
            truncated: chunk.truncated,
        };
        self.emit(update, None);
    }

    /// Parks the run at an approval: persist the approval and checkpoint with the run's
    /// `interrupted` status (one transaction), and only then publish the state and the
    /// `approval_requested` event. A call that changes one file is looked at first: the
    /// card shows the change, and the checkpoint keeps the file's fingerprint.
    pub(super) async fn interrupt(
        &mut self,
        tool: &dyn crate::Tool,
        call: Call,
        turn: usize,
        remaining: &[Call],
        wait: RuleTimeout,
    ) -> Outcome {
        let inspected =
            tool.inspect(&call.args, &self.env.tool_context(&self.loaded, self.handle.cancel.clone())).await;
        // The approval's times are the engine clock's: its expiry is timed by it.
        let now = self.env.clock.now_ms();
        let settings = &self.env.settings;
        let approval = new_approval(
            (settings.approval_ttl, wait),
            &settings.rules,
            tool,
            &self.run,
            &call,
            inspected.as_ref(),
            now,
        );
        self.park(approval, call, turn, remaining, inspected.map(|i| i.resource)).await
    }

    /// Parks the run at a call of a client tool the rules allow (or a person allowed):
    /// an approval of kind `provide_input` marked `"client": true`, naming the tool,
    /// the arguments it is called with and its description, expiring after the client
    /// tool TTL. The client runs the call and answers it with its result
    /// (`Decision::Output`); nothing of the call is published until then but the
    /// approval (no `tool_execution_start`). `after`: the approval a person approved
    /// this call at (an `ask` rule), which this one must come after.
    pub(super) async fn park_client(
        &mut self,
        call: Call,
        args: serde_json::Value,
        turn: usize,
        remaining: &[Call],
        after: Option<ApprovalId>,
    ) -> Outcome {
        let mut now = self.env.clock.now_ms();
        // Later than the approval it follows, always: recovery reads a run's latest
        // approval, and must find this one (pending), not the decided ask.
        if let Some(after) = after
            && let Ok(Some((asked, _))) = self.store.get_approval(&after).await
        {
            now = now.max(asked.created_at + 1);
        }
        let ttl = i64::try_from(self.env.settings.client_tool_ttl.as_millis()).unwrap_or(i64::MAX);
        let description =
            self.client_tools.iter().find(|t| t.name == call.name).map(|t| t.description.clone()).unwrap_or_default();
        // The arguments as the model wrote them, not redacted: the client runs the call
        // with them (it is the client's own tool, and it saw them stream already).
        let payload = serde_json::json!({
            "client": true,
            "tool": call.name,
            "arguments": args,
            "description": description,
        });
        let approval =
            pending_approval(&self.run, (&call.id, &call.name), ApprovalKind::ProvideInput, payload, now, ttl);
        let call = Call { args, ..call };
        self.park(approval, call, turn, remaining, None).await
    }

    /// Stores `approval` with the checkpoint of `call` and the run `interrupted` (one
    /// transaction), then publishes the state and `approval_requested`.
    pub(super) async fn park(
        &mut self,
        approval: Approval,
        call: Call,
        turn: usize,
        remaining: &[Call],
        resource: Option<crate::Resource>,
    ) -> Outcome {
        let now = approval.created_at;
        // The `interrupt` below is the run's next event: nothing else of the run is
        // published before it.
        let sequence = self.loaded.events.next_run_sequence(&self.run.id, crate::session::READ_YOUR_WRITES).await;
        let checkpoint = Checkpoint {
            next_index: self.next_index,
            turn,
            pending: call,
            remaining: remaining.to_vec(),
            policy: self.policy,
            usage: self.run.usage,
            resource,
            sequence,
            client_tools: self.client_tools.clone(),
            guard_state: self.guard.state_at(self.env.clock.now_ms()),
            guard: self.guard_pause.take(),
        };
        self.run.status = RunStatus::Interrupted;
        self.run.updated_at = now;
        let checkpoint = serde_json::to_value(&checkpoint).expect("plain data serializes");
        if let Err(e) = self.store.interrupt_run(&self.run, &approval, &checkpoint).await {
            return failure("storage_error", format!("could not save the approval: {e}"));
        }
        let shown = approval.clone();
        self.loaded.events.publish(move |s| {
            s.pending_approvals.push(shown);
            if let Some(active) = s.active_run.as_mut() {
                active.status = RunStatus::Interrupted;
            }
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        // After the view shows the approval pending: a parked handle is held only while
        // it does (see `Loaded::active`).
        {
            let mut active = self.loaded.active.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(handle) = active.as_mut().filter(|h| h.run_id == self.run.id) {
                handle.interrupted = Some(approval.id.clone());
            }
        }
        self.env.arm_expiry(&approval);
        self.emit_stored(AgentEvent::ApprovalRequested { approval: Box::new(approval) }, None, None);
        Outcome::Interrupted
    }

    /// Commits the result a client reported for its tool's call: `tool_execution_start`
    /// (with the arguments it was called with), then, as for any call,
    /// `tool_execution_end` and the tool-result message, redacted. Nothing runs here.
    async fn client_result(
        &mut self,
        call: &Call,
        output: spool_protocol::approval::ClientOutput,
    ) -> Result<(), Outcome> {
        let start = AgentEvent::ToolExecutionStart {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            args: call.args.clone(),
        };
        self.emit(start, None);
        let text = crate::client_tools::output_text(&output);
        let output = if output.is_error { ToolOutput::error(text) } else { ToolOutput::ok(text) };
        self.finish_call(call, output, false).await
    }

    /// Replaces the session's todo list (`todo_write`): stored first, so a list anyone
    /// was shown survives a restart, then published as `todo_write` with the state.
    /// The model wrote the items: masked like everything else it says that is shown.
    pub(super) async fn replace_todos(&mut self, mut todos: Vec<hub::Todo>) -> Result<(), String> {
        for todo in &mut todos {
            todo.content = redact(&todo.content);
        }
        let store = &self.store;
        if let Err(e) = store.put_todos(&self.run.session_id, &self.run.owner_id, &todos).await {
            tracing::warn!(run = %self.run.id, error = %e, "could not save the todo list");
            return Err("todo_write: the todo list could not be saved; it is unchanged".into());
        }
        self.emit_stored(AgentEvent::TodoWrite { todos }, None, None);
        Ok(())
    }

    /// A successful tool call is a confirmed fact: record what it did and what it saw.
    pub(super) async fn remember_tool_fact(&mut self, call: &Call, result: &str) {
        let change = match self.tools.get(&call.name) {
            Some(tool) => tool.describe(&call.args),
            None => call.name.clone(),
        };
        let fact = redact(&context::tool_fact(&change, result));
        self.update_memory(|m| context::remember(m, &fact, FactSource::Tool, now_ms())).await;
    }

    /// Re-reads the memory, applies `change` and writes it back, so facts a person
    /// confirmed while the run was going are kept. On a storage error the run goes on
    /// with what it has; returns whether the change was saved.
    pub(super) async fn update_memory(&mut self, change: impl FnOnce(&mut SessionMemory)) -> bool {
        let store = &self.store;
        let mut memory = store.get_memory(&self.run.session_id).await.unwrap_or_else(|_| self.memory.clone());
        change(&mut memory);
        match store.put_memory(&self.run.session_id, &self.run.owner_id, &memory).await {
            Ok(()) => {
                self.memory = memory;
                true
            }
            Err(e) => {
                tracing::warn!(run = %self.run.id, error = %e, "could not save the session memory");
                false
            }
        }
    }
}

/// The approval a person is asked for `call`: the tool, its whole main argument, a
/// one-line summary, for a call that changes one file the preview of the change
/// against the file as `inspected` found it, for a command the patterns "always" may
/// allow (`alwaysOptions`, those the server's `rules` leave open), and for a tool from
/// a [`crate::ToolSource`] where it comes from (`source`). Everything shown is redacted.
///
/// `(ttl, wait)`: the server's approval TTL (zero: never) and the timeout of the rule
/// that asked. It expires after the rule's `timeout`, or the TTL; what the rule says
/// happens then is kept as the payload's `onTimeout` (see `Approvals::expire`). With
/// `onTimeout: "wait"` the rule's timeout only marks when a reminder is due
/// (`remindAt`) and the approval expires at the TTL.
pub(crate) fn new_approval(
    (ttl, wait): (std::time::Duration, RuleTimeout),
    rules: &[PermissionRule],
    tool: &dyn crate::Tool,
    run: &Run,
    call: &Call,
    inspected: Option<&crate::Inspected>,
    now: time::Millis,
) -> Approval {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let mut payload = serde_json::json!({
        "tool": call.name,
        // Whole, never cut: a person decides on exactly what will run, and the
        // end of a long command is where a `curl … | sh` hides.
        "argument": tool.main_argument(&call.args).map(|a| redact(&a)),
        "change": redact(&tool.describe(&call.args)),
        "reason": "this tool changes files or runs commands, and the permission rules say to ask",
    });
    if let Some(inspected) = inspected {
        payload["preview"] = redact(&inspected.preview).into();
    }
    if let Some(origin) = tool.origin() {
        // A tool that is not Spool's own: which server it comes from, its own name
        // there, and every argument (the rules judge them all, so the person sees them).
        payload["reason"] =
            format!("a tool of the MCP server {:?}, and the permission rules say to ask", origin.source).into();
        payload["source"] = serde_json::json!({
            "server": origin.source,
            "tool": origin.tool,
            "arguments": redact(&crate::canonical_json(&call.args)),
        });
    }
    if let Some(options) = tool.always_options(&call.args) {
        // Not redacted: a pattern must be the command's own text to match it later, and
        // the card shows the (redacted) argument beside it. What redaction would mask
        // is left out instead.
        let options: Vec<_> = spool_protocol::approval::offerable(rules, &call.name, options)
            .into_iter()
            .filter(|o| o.patterns.iter().all(|p| redact(p) == *p))
            .collect();
        payload["alwaysOptions"] = serde_json::to_value(options).expect("plain data serializes");
    }
    let ask = tool.asks(&call.args);
    if let Some(ask) = &ask {
        payload["reason"] = "the model asks you this; answer it to go on".into();
        for (key, value) in &ask.payload {
            // The model wrote it: masked like everything else a card shows.
            let masked = redact(&value.to_string());
            payload[key] = serde_json::from_str(&masked).unwrap_or(serde_json::Value::String(masked));
        }
    }
    let kind = ask.map_or(ApprovalKind::ConfirmAction, |a| a.kind);
    let global = if ttl <= 0 { Wait::Never } else { Wait::Secs(u64::try_from(ttl).unwrap_or(u64::MAX).div_ceil(1000)) };
    let expires_at = match (wait.on_timeout, wait.timeout) {
        (Some(OnTimeout::Wait), remind) => {
            // The reminder itself is the outbox's (issue 41's push and webhooks, not
            // built yet): until then the approval only records when it is due.
            if let Some(Wait::Secs(_)) = remind {
                payload["remindAt"] = remind.map(|w| w.expiry(now)).into();
            }
            ttl_expiry(now, ttl)
        }
        (_, Some(timeout)) => timeout.expiry(now),
        (_, None) => ttl_expiry(now, ttl),
    };
    if let Some(then) = wait.on_timeout {
        payload["onTimeout"] = then.as_str().into();
        // For the words the model (and the card) reads when it happens.
        payload["timeout"] = wait.timeout.unwrap_or(global).to_string().into();
    }
    let mut approval = pending_approval(run, (&call.id, &call.name), kind, payload, now, ttl);
    approval.expires_at = expires_at;
    approval
}

/// When an approval created `now` expires after `ttl` ms: never for a TTL of zero
/// (`approval_ttl_secs = 0`), and never later than [`NEVER_EXPIRES`].
pub(crate) fn ttl_expiry(now: time::Millis, ttl: i64) -> time::Millis {
    if ttl <= 0 { NEVER_EXPIRES } else { now.saturating_add(ttl).min(NEVER_EXPIRES) }
}

/// A pending approval of `run`'s call `(id, tool)`, created `now`, expiring after
/// `ttl` ms (never for 0): what a tool's own card and a running tool's live ask have in common.
pub(crate) fn pending_approval(
    run: &Run,
    (call_id, tool): (&str, &str),
    kind: ApprovalKind,
    payload: serde_json::Value,
    now: time::Millis,
    ttl: i64,
) -> Approval {
    Approval {
        id: ApprovalId::new(),
        run_id: run.id.clone(),
        session_id: run.session_id.clone(),
        owner_id: run.owner_id.clone(),
        tool_call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        kind,
        payload,
        status: ApprovalStatus::Pending,
        decision: None,
        message: None,
        actor: None,
        created_at: now,
        expires_at: ttl_expiry(now, ttl),
        resolved_at: None,
    }
}

/// What the model reads when it calls a tool its session's mode does not offer.
pub(super) fn unavailable(name: &str, mode: SessionMode) -> String {
    match mode {
        SessionMode::Plan => format!(
            "{name} is not available in plan mode: nothing may change until the person accepts a plan. \
             Look with the read-only tools, then call exit_plan with your plan."
        ),
        SessionMode::Agent => format!("{name} is only available in plan mode; this session is in agent mode"),
    }
}

/// The length of the longest end of `text` that is the start of a secret (but not a
/// whole one): live output holds it back until the next chunk says whether the secret
/// follows, so a secret split between two reads is redacted all the same.
pub(super) fn secret_prefix_len(text: &str, secrets: &[String]) -> usize {
    secrets
        .iter()
        .filter_map(|secret| {
            (1..secret.len().min(text.len() + 1))
                .rev()
                .find(|&k| secret.is_char_boundary(k) && text.ends_with(&secret[..k]))
        })
        .max()
        .unwrap_or(0)
}

/// The bytes of live output a stopped call's result keeps, half from its start and
/// half from its end: the same 50 KiB as `bash`'s own result, so a Stop does not give
/// the conversation a longer result than finishing would have.
const STOPPED_OUTPUT_BYTES: usize = 50 * 1024;

/// One call's live output on its way to the stream: what was sent, and the end held
/// back because it could be the start of a secret (see [`secret_prefix_len`]).
struct LiveOutput {
    tool_call_id: String,
    tool_name: String,
    sent: String,
    held: String,
    truncated: bool,
    secrets: Vec<String>,
}

impl LiveOutput {
    pub(super) fn new(tool_call_id: &str, tool_name: &str) -> Self {
        Self {
            tool_call_id: tool_call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            sent: String::new(),
            held: String::new(),
            truncated: false,
            secrets: secrets(),
        }
    }

    /// The result of a call the run's Stop cut short: it says so, and keeps what the
    /// call had printed (its start and end when that is long), so the card and the
    /// stored conversation still show it after a reload.
    pub(super) fn stopped_result(&self) -> String {
        const STOPPED: &str = "the run was aborted before the tool finished";
        if self.sent.is_empty() {
            return STOPPED.to_owned();
        }
        let capped = if self.truncated {
            format!(" (live output stops at {} KiB)", spool_protocol::event::LIVE_OUTPUT_CAP / 1024)
        } else {
            String::new()
        };
        format!("{STOPPED}; what it printed until then{capped}:\n{}", keep_ends(&self.sent, STOPPED_OUTPUT_BYTES))
    }
}

/// `text` if it is at most `max` bytes, else its first and last `max / 2` bytes (cut on
/// character boundaries) with a line saying how much was left out between them.
pub(super) fn keep_ends(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}\n… {} bytes of output omitted …\n{}", &text[..head], tail - head, &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_that_could_start_a_secret_is_held_back_and_nothing_else() {
        let secrets = vec!["sk-abcdef123".to_owned(), "pässwort-geheim".to_owned()];
        assert_eq!(secret_prefix_len("output sk-ab", &secrets), 5);
        assert_eq!(secret_prefix_len("output s", &secrets), 1);
        assert_eq!(secret_prefix_len("output\n", &secrets), 0);
        // A whole secret is redacted, not held; a prefix ends on a character boundary.
        assert_eq!(secret_prefix_len("sk-abcdef123", &secrets), 0);
        assert_eq!(secret_prefix_len("x pä", &secrets), "pä".len());
        assert_eq!(secret_prefix_len("", &secrets), 0);
    }

    #[test]
    fn a_stopped_calls_long_output_keeps_its_start_and_end() {
        assert_eq!(keep_ends("short", 10), "short");
        let text = format!("{}{}", "a".repeat(10), "é".repeat(10));
        let kept = keep_ends(&text, 10);
        assert_eq!(kept, "aaaaa\n… 21 bytes of output omitted …\néé");
    }
}
