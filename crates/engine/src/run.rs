//! One run: the agent loop from an accepted prompt to a settled run.
//!
//! `model → tool calls → results → model` until the model stops without asking for
//! tools, the run is aborted, or something fails. Every step is published as a
//! `loop.event` and mirrored into the session state in the same step. Messages are
//! written to the store when they end (never per delta); the run record is written
//! when it settles, before the session reports itself idle, so a client that sees
//! `idle` can read the final run.

use crate::engine::{ActiveHandle, Engine, Loaded};
use crate::view::{self, apply_delta};
use crate::{ModelEvent, ModelRequest, ToolContext, ToolOutput};
use futures::StreamExt;
use spool_protocol::frame::{FrameBody, PromptTiming, ToolExecution, ToolStatus};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::sync::Arc;

/// How a run ended.
enum Outcome {
    Completed,
    Cancelled,
    Failed(RunError),
}

impl Outcome {
    fn status(&self) -> RunStatus {
        match self {
            Outcome::Completed => RunStatus::Completed,
            Outcome::Cancelled => RunStatus::Cancelled,
            Outcome::Failed(_) => RunStatus::Failed,
        }
    }
}

fn failure(code: &str, message: impl Into<String>) -> Outcome {
    Outcome::Failed(RunError { code: code.into(), message: message.into() })
}

/// The block of the draft that deltas currently extend.
#[derive(Clone, Copy, PartialEq)]
enum Block {
    None,
    Text,
    Thinking,
    ToolCall,
}

pub(crate) struct RunTask {
    engine: Engine,
    loaded: Arc<Loaded>,
    run: Run,
    prompt: String,
    handle: ActiveHandle,
    /// The whole conversation as the model sees it.
    conversation: Vec<Message>,
    /// Absolute index the next committed message takes.
    next_index: u64,
}

impl RunTask {
    pub fn new(engine: Engine, loaded: Arc<Loaded>, run: Run, prompt: String, handle: ActiveHandle) -> Self {
        let next_index = run.user_message_index;
        Self { engine, loaded, run, prompt, handle, conversation: Vec::new(), next_index }
    }

    pub async fn execute(mut self) {
        let outcome = self.drive().await;
        self.settle(outcome).await;
    }

    fn emit(&self, event: AgentEvent, message_index: Option<u64>, mutate: impl FnOnce(&mut frame::SessionState)) {
        let run_id = self.run.id.clone();
        self.loaded.events.publish(move |state| {
            mutate(state);
            Some(FrameBody::LoopEvent { run_id, message_index, event })
        });
    }

    fn timing(&self) -> PromptTiming {
        PromptTiming {
            user_message_index: self.run.user_message_index,
            started_at: self.run.created_at,
            first_token_at: self.run.first_token_at,
            ended_at: self.run.ended_at,
        }
    }

    fn emit_timing(&self) {
        let t = self.timing();
        let event = AgentEvent::PromptTiming {
            user_message_index: t.user_message_index,
            started_at: t.started_at,
            first_token_at: t.first_token_at,
            ended_at: t.ended_at,
        };
        self.emit(event, None, |s| view::set_timing(s, t));
    }

    /// Writes a finished message to the store and publishes its end.
    async fn commit(&mut self, message: Message) -> Result<(), Outcome> {
        let indexed = IndexedMessage { id: MessageId::new(), index: self.next_index, message };
        self.next_index += 1;
        self.engine
            .inner
            .store
            .insert_message(&self.run.session_id, &self.run.owner_id, &indexed)
            .await
            .map_err(|e| failure("storage_error", format!("could not save message {}: {e}", indexed.index)))?;
        self.conversation.push(indexed.message.clone());
        let index = indexed.index;
        self.emit(AgentEvent::MessageEnd { message: indexed.message.clone() }, Some(index), |s| {
            view::commit_message(s, indexed)
        });
        Ok(())
    }

    async fn drive(&mut self) -> Outcome {
        let store = self.engine.inner.store.clone();
        // The model sees the whole conversation; context management trims it later.
        match store.list_messages(&self.run.session_id, Some(self.next_index), u32::MAX).await {
            Ok(history) => self.conversation = history.into_iter().map(|m| m.message).collect(),
            Err(e) => return failure("storage_error", format!("could not load the conversation: {e}")),
        }
        self.emit(AgentEvent::AgentStart {}, None, |_| {});
        self.emit(AgentEvent::TurnStart {}, None, |_| {});
        let user = Message::user_text(self.prompt.clone(), self.run.created_at);
        self.emit(AgentEvent::MessageStart { message: user.clone() }, Some(self.next_index), |_| {});
        if let Err(outcome) = self.commit(user).await {
            return outcome;
        }
        self.emit_timing();
        self.maybe_title().await;

        let max_turns = self.engine.inner.config.max_turns;
        for turn in 0..max_turns {
            if turn > 0 {
                self.emit(AgentEvent::TurnStart {}, None, |_| {});
            }
            let (assistant, aborted) = match self.stream_model().await {
                Ok(r) => r,
                Err(outcome) => return outcome,
            };
            let calls: Vec<(String, String, serde_json::Value)> = assistant
                .content()
                .iter()
                .filter_map(|c| match c {
                    Content::ToolCall { id, name, arguments } => Some((id.clone(), name.clone(), arguments.clone())),
                    _ => None,
                })
                .collect();
            let error = match &assistant {
                Message::Assistant { stop_reason: Some(StopReason::Error), error_message, .. } => {
                    Some(error_message.clone().unwrap_or_else(|| "the model failed".into()))
                }
                _ => None,
            };
            if let Err(outcome) = self.commit(assistant).await {
                return outcome;
            }
            if aborted {
                return Outcome::Cancelled;
            }
            if let Some(message) = error {
                return failure("model_error", message);
            }
            if calls.is_empty() {
                self.emit(AgentEvent::TurnEnd {}, None, |_| {});
                return Outcome::Completed;
            }
            for (call_id, name, args) in calls {
                if let Err(outcome) = self.execute_tool(call_id, name, args).await {
                    return outcome;
                }
            }
            self.emit(AgentEvent::TurnEnd {}, None, |_| {});
        }
        failure("max_turns_exceeded", format!("the run made {max_turns} model calls without finishing"))
    }

    /// Streams one assistant message. Returns it (ended, not yet committed) and whether
    /// the run was aborted while it streamed.
    async fn stream_model(&mut self) -> Result<(Message, bool), Outcome> {
        let index = self.next_index;
        let model = self.engine.inner.model.clone();
        let mut draft = Message::Assistant {
            content: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            model: model.name(),
            error_message: None,
            timestamp: now_ms(),
        };
        let start = draft.clone();
        self.emit(AgentEvent::MessageStart { message: draft.clone() }, Some(index), move |s| {
            s.drafts.insert(index, start);
        });
        let request =
            ModelRequest { system: None, messages: self.conversation.clone(), tools: self.engine.inner.tools.specs() };
        let cancel = self.handle.cancel.clone();
        let opened = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = model.stream(request) => Some(r),
        };
        let mut stream = match opened {
            None => {
                self.end_draft(&mut draft, StopReason::Aborted, None);
                return Ok((draft, true));
            }
            Some(Err(e)) => {
                self.end_draft(&mut draft, StopReason::Error, Some(e.to_string()));
                return Ok((draft, false));
            }
            Some(Ok(s)) => s,
        };
        let mut block = Block::None;
        let mut block_len = 0usize;
        let mut usage = Usage::default();
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    self.close_block(&mut draft, block);
                    self.end_draft(&mut draft, StopReason::Aborted, None);
                    return Ok((draft, true));
                }
                next = stream.next() => next,
            };
            // A model whose stream is always ready (the scripted one with no delay) would
            // otherwise publish its whole answer without yielding, and every subscriber
            // would wake to find itself far behind. Spending tokio's cooperative budget
            // yields every so often, so connections drain while the run streams.
            tokio::task::consume_budget().await;
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    self.close_block(&mut draft, block);
                    self.end_draft(&mut draft, StopReason::Error, Some(e.to_string()));
                    return Ok((draft, false));
                }
                None => {
                    self.close_block(&mut draft, block);
                    self.end_draft(
                        &mut draft,
                        StopReason::Error,
                        Some("the model stream ended without finishing".into()),
                    );
                    return Ok((draft, false));
                }
            };
            match event {
                ModelEvent::Text(text) => {
                    self.first_token();
                    self.open_block(&mut draft, &mut block, &mut block_len, Block::Text, None);
                    let delta = StreamDelta::TextDelta {
                        content_index: content_len(&draft) - 1,
                        offset: block_len,
                        delta: text,
                    };
                    block_len += delta_len(&delta);
                    self.update(&mut draft, delta);
                }
                ModelEvent::Thinking(text) => {
                    self.first_token();
                    self.open_block(&mut draft, &mut block, &mut block_len, Block::Thinking, None);
                    let delta = StreamDelta::ThinkingDelta {
                        content_index: content_len(&draft) - 1,
                        offset: block_len,
                        delta: text,
                    };
                    block_len += delta_len(&delta);
                    self.update(&mut draft, delta);
                }
                ModelEvent::ToolCallStart { id, name } => {
                    self.first_token();
                    // Every tool call is its own block, even right after another one.
                    self.close_block(&mut draft, block);
                    block = Block::None;
                    self.open_block(&mut draft, &mut block, &mut block_len, Block::ToolCall, Some((id, name)));
                }
                ModelEvent::ToolCallArgs(text) => {
                    if block != Block::ToolCall {
                        self.close_block(&mut draft, block);
                        self.end_draft(
                            &mut draft,
                            StopReason::Error,
                            Some("the model sent tool arguments outside a tool call".into()),
                        );
                        return Ok((draft, false));
                    }
                    let delta = StreamDelta::ToolcallDelta {
                        content_index: content_len(&draft) - 1,
                        offset: block_len,
                        delta: text,
                    };
                    block_len += delta_len(&delta);
                    self.update(&mut draft, delta);
                }
                ModelEvent::Usage(u) => usage.add(u),
                ModelEvent::Stop(reason) => {
                    self.close_block(&mut draft, block);
                    if let Message::Assistant { usage: draft_usage, .. } = &mut draft {
                        *draft_usage = usage;
                    }
                    self.run.usage.add(usage);
                    self.end_draft(&mut draft, reason, None);
                    return Ok((draft, false));
                }
            }
        }
    }

    fn first_token(&mut self) {
        if self.run.first_token_at.is_none() {
            self.run.first_token_at = Some(now_ms());
            self.emit_timing();
        }
    }

    /// Publishes one `message_update` and applies it to both copies of the draft.
    fn update(&self, draft: &mut Message, delta: StreamDelta) {
        apply_delta(draft, &delta);
        let index = self.next_index;
        let applied = delta.clone();
        self.emit(AgentEvent::MessageUpdate { assistant_message_event: delta }, Some(index), move |s| {
            if let Some(d) = s.drafts.get_mut(&index) {
                apply_delta(d, &applied);
            }
        });
    }

    fn open_block(
        &self,
        draft: &mut Message,
        block: &mut Block,
        len: &mut usize,
        kind: Block,
        call: Option<(String, String)>,
    ) {
        if *block == kind {
            return;
        }
        self.close_block(draft, *block);
        let content_index = content_len(draft);
        let start = match (kind, call) {
            (Block::Thinking, _) => StreamDelta::ThinkingStart { content_index },
            (Block::ToolCall, Some((id, name))) => StreamDelta::ToolcallStart { content_index, id, name },
            _ => StreamDelta::TextStart { content_index },
        };
        self.update(draft, start);
        *block = kind;
        *len = 0;
    }

    fn close_block(&self, draft: &mut Message, block: Block) {
        let Some(content_index) = content_len(draft).checked_sub(1) else { return };
        let end = match block {
            Block::None => return,
            Block::Text => StreamDelta::TextEnd { content_index },
            Block::Thinking => StreamDelta::ThinkingEnd { content_index },
            Block::ToolCall => StreamDelta::ToolcallEnd { content_index },
        };
        self.update(draft, end);
    }

    fn end_draft(&self, draft: &mut Message, reason: StopReason, error: Option<String>) {
        if let Message::Assistant { error_message, .. } = draft {
            *error_message = error;
        }
        self.update(draft, StreamDelta::Done { stop_reason: reason });
    }

    async fn execute_tool(&mut self, call_id: String, name: String, args: serde_json::Value) -> Result<(), Outcome> {
        let exec = ToolExecution {
            tool_call_id: call_id.clone(),
            tool_name: name.clone(),
            args: args.clone(),
            status: ToolStatus::Running,
            result: None,
        };
        self.emit(
            AgentEvent::ToolExecutionStart {
                tool_call_id: call_id.clone(),
                tool_name: name.clone(),
                args: args.clone(),
            },
            None,
            move |s| {
                s.tool_executions.insert(exec.tool_call_id.clone(), exec);
            },
        );
        let cancel = self.handle.cancel.clone();
        let mut aborted = false;
        let output = match (self.engine.inner.tools.get(&name), &args) {
            (None, _) => ToolOutput::error(format!("unknown tool {name:?}")),
            (Some(_), args) if !args.is_object() => ToolOutput::error(format!(
                "invalid arguments for {name}: expected a JSON object, got {}",
                truncate(&args.to_string(), 200)
            )),
            (Some(tool), args) => {
                let ctx = ToolContext { root: self.loaded.root.clone(), cancel: cancel.clone() };
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => {
                        aborted = true;
                        ToolOutput::error("the run was aborted before the tool finished")
                    }
                    out = tool.call(args.clone(), &ctx) => out,
                }
            }
        };
        let (result, is_error) = (output.text, output.is_error);
        let status = if is_error { ToolStatus::Error } else { ToolStatus::Success };
        let shown = result.clone();
        let id = call_id.clone();
        self.emit(
            AgentEvent::ToolExecutionEnd {
                tool_call_id: call_id.clone(),
                tool_name: name.clone(),
                result: result.clone(),
                is_error,
            },
            None,
            move |s| {
                if let Some(e) = s.tool_executions.get_mut(&id) {
                    e.status = status;
                    e.result = Some(shown);
                }
            },
        );
        let message = Message::ToolResult {
            tool_call_id: call_id,
            tool_name: name,
            content: vec![Content::Text { text: result }],
            is_error,
            timestamp: now_ms(),
        };
        self.emit(AgentEvent::MessageStart { message: message.clone() }, Some(self.next_index), |_| {});
        self.commit(message).await?;
        if aborted { Err(Outcome::Cancelled) } else { Ok(()) }
    }

    /// Titles an untitled session from its first prompt.
    async fn maybe_title(&mut self) {
        let mut session = self.loaded.events.read(|s| s.session.clone());
        if session.title_set {
            return;
        }
        session.title = title_from(&self.prompt);
        session.title_set = true;
        session.updated_at = now_ms();
        if let Err(e) = self.engine.inner.store.update_session(&session).await {
            tracing::warn!(session = %session.id, error = %e, "could not save the session title");
            return;
        }
        let title = session.title.clone();
        self.emit(AgentEvent::SessionTitle { title }, None, |_| {});
        self.loaded.events.publish(move |s| {
            s.session = session;
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
    }

    async fn settle(mut self, outcome: Outcome) {
        let now = now_ms();
        self.run.status = outcome.status();
        self.run.ended_at = Some(now);
        self.run.updated_at = now;
        if let Outcome::Failed(error) = &outcome {
            tracing::warn!(run = %self.run.id, code = %error.code, message = %error.message, "run failed");
            self.run.error = Some(error.clone());
        }
        if let Err(e) = self.engine.inner.store.update_run(&self.run).await {
            tracing::error!(run = %self.run.id, error = %e, "could not save the settled run");
        }
        self.emit(AgentEvent::AgentEnd { status: self.run.status.as_str().into() }, None, |_| {});
        self.emit_timing();
        *self.loaded.active.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.loaded.events.publish(|s| {
            s.status = SessionStatus::Idle;
            s.active_run = None;
            s.drafts.clear();
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        self.emit(AgentEvent::AgentSettled {}, None, |_| {});
        self.handle.finished.cancel();
    }
}

fn content_len(message: &Message) -> usize {
    message.content().len()
}

fn delta_len(delta: &StreamDelta) -> usize {
    match delta {
        StreamDelta::TextDelta { delta, .. }
        | StreamDelta::ThinkingDelta { delta, .. }
        | StreamDelta::ToolcallDelta { delta, .. } => event::offset_len(delta),
        _ => 0,
    }
}

/// A title from the prompt's first line: at most 60 characters, with an ellipsis when cut.
fn title_from(prompt: &str) -> String {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("Untitled");
    truncate(line, 60)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}
