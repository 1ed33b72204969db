//! The turn: one model call, streamed into the draft that becomes the assistant
//! message (`message_start`, `message_update`s, the end), with its checkpoints in the
//! store, and the housekeeping model calls beside it (compaction, the session title).

use super::*;

impl RunTask {
    /// `stream_model` inside a `model_call` span (a child of the run's): the model, the
    /// tokens the call counted, its retries and how it stopped, so a trace shows each
    /// call of a run and what it cost.
    pub(super) async fn stream_model_traced(&mut self) -> Result<(Message, bool), Outcome> {
        let span = tracing::info_span!(
            "model_call",
            model = tracing::field::Empty,
            input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            retries = 0u64,
            stop_reason = tracing::field::Empty,
        );
        let before = self.run.usage;
        let started = self.env.clock.now_ms();
        let streamed = tracing::Instrument::instrument(self.stream_model(), span.clone()).await;
        if let Ok((Message::Assistant { model, .. }, _)) = &streamed {
            self.env.metrics.model_call(model, self.env.clock.now_ms() - started);
        }
        let after = self.run.usage;
        span.record("input_tokens", after.input.saturating_sub(before.input));
        span.record("output_tokens", after.output.saturating_sub(before.output));
        match &streamed {
            Ok((Message::Assistant { stop_reason: Some(reason), .. }, aborted)) => {
                let reason = match serde_json::to_value(reason) {
                    _ if *aborted => "aborted".to_owned(),
                    Ok(serde_json::Value::String(name)) => name,
                    _ => format!("{reason:?}"),
                };
                span.record("stop_reason", reason);
            }
            Ok(_) => {}
            Err(_) => {
                span.record("stop_reason", "failed");
            }
        }
        streamed
    }

    /// Streams one assistant message. Returns it (ended, not yet committed) and whether
    /// the run was aborted while it streamed.
    pub(super) async fn stream_model(&mut self) -> Result<(Message, bool), Outcome> {
        let index = self.next_index;
        let choice = self.loaded.events.read(|s| s.session.model.clone());
        let entry = self.env.models.resolve(choice.as_deref()).clone();
        let model = entry.model.clone();
        tracing::Span::current().record("model", model.name());
        self.maybe_compact(&model).await;
        self.offer_tools().await;
        let mut request = context::assemble(
            &self.env.settings.system_prompt,
            &self.memory,
            self.verbatim().1,
            self.tools.specs_for(self.mode()),
        );
        let budget = self.env.settings.prompt_file_bytes;
        request.files =
            crate::attachments::load_files(self.env.blobs().as_ref(), &request.messages, model.inputs(), budget).await;
        let billing = Billing { price: entry.price, prompt_tokens: context::request_tokens(&request) };
        let mut draft = Draft::new(model.name(), now_ms(), billing);
        let start = draft.message().clone();
        self.draft_id = Some(MessageId::new());
        self.draft_chunks = 0;
        let mut checkpoints = Checkpoints::default();
        self.emit(AgentEvent::MessageStart { message: start }, Some(index));
        let cancel = self.handle.cancel.clone();
        // On the engine's clock, as the other durations in `/metrics` are.
        let call_started = self.env.clock.now_ms();
        let mut first_event = true;
        let opened = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = model.stream(request) => Some(r),
        };
        let mut stream = match opened {
            None => return Ok(self.end_draft(draft, StopReason::Aborted, None, true)),
            Some(Err(e)) => {
                let draft = self.end_draft(draft, StopReason::Error, Some(e.to_string()), false);
                self.model_error = Some(e.code);
                return Ok(draft);
            }
            Some(Ok(s)) => s,
        };
        loop {
            let due = checkpoints.due();
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    // A stop of the server is a failure the message itself tells.
                    return Ok(match self.handle.failed_as.get() {
                        Some(e) => {
                            let reason = format!("{} ({})", e.message, e.code);
                            self.end_draft(draft, StopReason::Error, Some(reason), true)
                        }
                        None => self.end_draft(draft, StopReason::Aborted, None, true),
                    });
                }
                () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                    self.save_draft(&mut draft).await;
                    checkpoints.written();
                    continue;
                }
                next = stream.next() => next,
            };
            // A model whose stream is always ready (the scripted one with no delay) would
            // otherwise publish its whole answer without yielding, and every subscriber
            // would wake to find itself far behind. Spending tokio's cooperative budget
            // yields every so often, so connections drain while the run streams.
            tokio::task::consume_budget().await;
            if first_event
                && matches!(
                    next,
                    Some(Ok(ModelEvent::Text(_) | ModelEvent::Thinking(_) | ModelEvent::ToolCallStart { .. }))
                )
            {
                first_event = false;
                self.env.metrics.first_token_after(self.env.clock.now_ms() - call_started);
            }
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    let draft = self.end_draft(draft, StopReason::Error, Some(e.to_string()), false);
                    self.model_error = Some(e.code);
                    return Ok(draft);
                }
                None => {
                    let reason = "the model stream ended without finishing".to_owned();
                    return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                }
            };
            let grew = match &event {
                ModelEvent::Text(t) | ModelEvent::Thinking(t) | ModelEvent::ToolCallArgs(t) => t.len(),
                ModelEvent::ToolCallStart { name, .. } => name.len().max(1),
                _ => 0,
            };
            if matches!(event, ModelEvent::Text(_) | ModelEvent::Thinking(_) | ModelEvent::ToolCallStart { .. }) {
                self.first_token();
            }
            match event {
                ModelEvent::Text(text) => draft.text(text, &mut |delta| self.update(delta)),
                ModelEvent::Thinking(text) => draft.thinking(text, &mut |delta| self.update(delta)),
                ModelEvent::ToolCallStart { id, name } => draft.tool_call(id, name, &mut |delta| self.update(delta)),
                ModelEvent::ToolCallArgs(text) => {
                    if draft.tool_args(text, &mut |delta| self.update(delta)).is_err() {
                        let reason = "the model sent tool arguments outside a tool call".to_owned();
                        return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                    }
                }
                ModelEvent::Usage(u) => draft.add_usage(u),
                ModelEvent::RetryStart { attempt, max_attempts, delay_ms, reason } => {
                    tracing::Span::current().record("retries", u64::from(attempt));
                    let event =
                        AgentEvent::AutoRetryStart { attempt, max_attempts, delay_ms, error_message: redact(&reason) };
                    self.emit(event, None);
                }
                ModelEvent::RetryEnd { attempt, success } => {
                    self.emit(AgentEvent::AutoRetryEnd { attempt, success }, None);
                }
                ModelEvent::Stop(reason) => {
                    let usage = draft.stop(reason, &mut |delta| self.update(delta));
                    self.run.usage.add(usage);
                    return Ok((draft.into_message(), false));
                }
            }
            if grew > 0 {
                let limit = self.env.settings.max_answer_bytes;
                if draft.streamed_bytes() > limit {
                    // Cut here, the answer so far kept (it is committed with the error):
                    // an answer without end would fill the store and every client.
                    self.model_error = Some("answer_too_large".into());
                    let reason = format!(
                        "the answer was cut at {} bytes: an answer may have at most {limit} bytes of text, \
                         reasoning and tool arguments (max_answer_bytes)",
                        draft.streamed_bytes()
                    );
                    return Ok(self.end_draft(draft, StopReason::Error, Some(reason), false));
                }
                let now = tokio::time::Instant::now();
                checkpoints.grew(grew, now);
                if checkpoints.should_write(now) {
                    self.save_draft(&mut draft).await;
                    checkpoints.written();
                }
            }
        }
    }

    /// Checkpoints the streaming message (see [`crate::drafts`]). A failed write is
    /// logged and the run goes on: the stream matters more than the checkpoint.
    /// Only what is new since the last checkpoint is written (appended); a failed
    /// write keeps it, to be written with the next.
    pub(super) async fn save_draft(&mut self, draft: &mut Draft) {
        let Some(id) = self.draft_id.clone() else { return };
        if draft.unsaved().is_empty() {
            return;
        }
        let saved = store::Draft {
            session_id: self.run.session_id.clone(),
            run_id: self.run.id.clone(),
            owner_id: self.run.owner_id.clone(),
            message: IndexedMessage { id, index: self.next_index, message: draft.start().clone() },
        };
        match self.store.append_draft(&saved, self.draft_chunks, draft.unsaved()).await {
            Ok(bytes) => {
                self.draft_stored = true;
                self.draft_chunks += 1;
                draft.saved();
                self.env.metrics.draft_bytes_written(bytes);
            }
            Err(e) => tracing::warn!(run = %self.run.id, error = %e, "could not checkpoint the streaming answer"),
        }
    }

    pub(super) fn first_token(&mut self) {
        if self.run.first_token_at.is_none() {
            self.run.first_token_at = Some(now_ms());
            self.emit_timing();
        }
    }

    /// Publishes one `message_update` the draft made; its fold applies it to the
    /// session state's copy of the draft (`view::apply_delta`, as the draft itself does).
    pub(super) fn update(&self, delta: StreamDelta) {
        self.emit(AgentEvent::MessageUpdate { assistant_message_event: delta }, Some(self.next_index));
    }

    /// Ends the draft with `reason`: what `stream_model` returns, `stopped` telling
    /// whether the run was stopped (rather than the model failing). What the cut call
    /// used (estimated where the provider did not say) counts in the run's usage.
    pub(super) fn end_draft(
        &mut self,
        mut draft: Draft,
        reason: StopReason,
        error: Option<String>,
        stopped: bool,
    ) -> (Message, bool) {
        // A provider's error may echo what it was sent (a key in a header, a secret in
        // the prompt): masked before the message is stored or streamed.
        let usage = draft.end(reason, error.map(|e| redact(&e)), &mut |delta| self.update(delta));
        self.run.usage.add(usage);
        (draft.into_message(), stopped)
    }

    /// Summarizes older turns when the verbatim history passes the context budget.
    /// A failed summary is reported and the run goes on with the raw history.
    pub(super) async fn maybe_compact(&mut self, model: &Arc<dyn Model>) {
        let (start, verbatim) = self.verbatim();
        let tokens = context::estimate_tokens(verbatim);
        if tokens <= self.env.settings.context_budget_tokens {
            return;
        }
        let Some(fold) = context::compaction_cut(verbatim) else {
            return;
        };
        // Absolute, as the memory keeps it; `fold` messages of the verbatim part go.
        let cut = start + fold as u64;
        self.emit(AgentEvent::CompactionStart { tokens_before: tokens }, None);
        let request = context::summary_request(&self.memory, &verbatim[..fold]);
        let summary = collect_text(model, request, &self.handle.cancel).await;
        let saved = match summary {
            Ok(text) if !text.trim().is_empty() => {
                self.update_memory(|m| {
                    m.summary = Some(text);
                    m.summarized_before = cut;
                })
                .await
            }
            Ok(_) | Err(_) => false,
        };
        let (summarized_before, tokens_after, success) = if saved {
            (cut, context::estimate_tokens(self.verbatim().1), true)
        } else {
            (self.memory.summarized_before, tokens, false)
        };
        self.emit(AgentEvent::CompactionEnd { summarized_before, tokens_after, success }, None);
    }

    /// Titles an untitled session after its first prompt, asynchronously: the model
    /// proposes a title while the run goes on; if it fails, the prompt's first line is
    /// the title. A title a person set in the meantime is kept.
    pub(super) fn spawn_title(&self) {
        if self.loaded.events.read(|s| s.session.title_set) {
            return;
        }
        let (env, loaded, prompt, run_id) =
            (self.env.clone(), self.loaded.clone(), self.prompt.clone(), self.run.id.clone());
        tokio::spawn(async move {
            let choice = loaded.events.read(|s| s.session.model.clone());
            let model = env.models.resolve(choice.as_deref()).model.clone();
            let never = CancellationToken::new();
            let proposed = collect_text(&model, context::title_request(&prompt), &never).await.ok();
            let title = proposed.as_deref().and_then(context::clean_title).unwrap_or_else(|| title_from(&prompt));
            let _record = loaded.record.lock().await;
            let mut session = loaded.events.read(|s| s.session.clone());
            if session.title_set {
                return;
            }
            session.title = title.clone();
            session.title_set = true;
            session.updated_at = now_ms();
            // Not held to the run's lease: the title often comes after a quick run has
            // settled and given the lease up. It is written once, only while the
            // session has none (a person's title, or one another node wrote, stays).
            if let Err(e) = env.store.update_session(&session).await {
                tracing::warn!(session = %session.id, error = %e, "could not save the session title");
                return;
            }
            loaded.events.publish_body(FrameBody::LoopEvent {
                run_id,
                message_index: None,
                message_id: None,
                event: AgentEvent::SessionTitle { title },
            });
            loaded.publish_session(session);
        });
    }
}

/// Runs a housekeeping model call (title, summary) to the end and returns its text.
pub(super) async fn collect_text(
    model: &Arc<dyn Model>,
    request: crate::ModelRequest,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let work = async {
        let mut stream = model.stream(request).await.map_err(|e| e.to_string())?;
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event.map_err(|e| e.to_string())? {
                ModelEvent::Text(t) => text.push_str(&t),
                ModelEvent::Stop(_) => return Ok(text),
                _ => {}
            }
        }
        Err("the model stream ended without finishing".to_owned())
    };
    tokio::select! {
        _ = cancel.cancelled() => Err("aborted".to_owned()),
        r = work => r,
    }
}
