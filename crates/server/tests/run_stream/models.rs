//! Scripted models for the run-stream tests: runs whose tool calls come in a shape the
//! default scripted model does not make (two calls in one message; long talk between
//! calls).

use futures::StreamExt;
use serde_json::json;
use spool_engine::{Model, ModelError, ModelEvent, ModelRequest, ModelStream};
use spool_protocol::{Message, StopReason};
use std::time::Duration;

/// A model that announces two calls in one message — `bash` with the given command,
/// then `read` — and answers with one word once both results are in.
pub(super) struct TwoCalls {
    pub(super) command: String,
}

#[async_trait::async_trait]
impl Model for TwoCalls {
    fn name(&self) -> String {
        "two-calls".into()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let results = request.messages.iter().filter(|m| matches!(m, Message::ToolResult { .. })).count();
        let titling =
            request.system.as_deref().is_some_and(|s| s.starts_with(spool_engine::context::TITLE_INSTRUCTION));
        let events = if titling || results > 0 {
            vec![ModelEvent::Text("Done".into()), ModelEvent::Stop(StopReason::Stop)]
        } else {
            vec![
                ModelEvent::ToolCallStart { id: "call_bash".into(), name: "bash".into() },
                ModelEvent::ToolCallArgs(json!({"command": self.command}).to_string()),
                ModelEvent::ToolCallStart { id: "call_read".into(), name: "read".into() },
                ModelEvent::ToolCallArgs(json!({"path": "README.md"}).to_string()),
                ModelEvent::Stop(StopReason::ToolUse),
            ]
        };
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}
/// A model that talks and calls tools in one run: 700 words and a `read` call, after
/// its result 700 more words and another call, then 600 words — 2,000 words in all,
/// one per `delay`. Housekeeping calls (the title) get a short answer.
pub(super) struct Chatty {
    pub(super) delay: Duration,
}

#[async_trait::async_trait]
impl Model for Chatty {
    fn name(&self) -> String {
        "chatty".into()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let mut events = Vec::new();
        if request.system.as_deref().is_some_and(|s| s.starts_with(spool_engine::context::TITLE_INSTRUCTION)) {
            events.push(ModelEvent::Text("Chatty".into()));
            events.push(ModelEvent::Stop(StopReason::Stop));
            return Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed());
        }
        let results = request.messages.iter().filter(|m| matches!(m, Message::ToolResult { .. })).count();
        let (words, call) = match results {
            0 => (0..700, true),
            1 => (700..1400, true),
            _ => (1400..2000, false),
        };
        events.extend(words.map(|i| ModelEvent::Text(if i == 0 { "w0".into() } else { format!(" w{i}") })));
        if call {
            events.push(ModelEvent::ToolCallStart { id: format!("call_{results}"), name: "read".into() });
            events.push(ModelEvent::ToolCallArgs(json!({"path": "README.md"}).to_string()));
            events.push(ModelEvent::Stop(StopReason::ToolUse));
        } else {
            events.push(ModelEvent::Stop(StopReason::Stop));
        }
        let delay = self.delay;
        Ok(futures::stream::iter(events)
            .then(move |e| async move {
                tokio::time::sleep(delay).await;
                Ok(e)
            })
            .boxed())
    }
}
