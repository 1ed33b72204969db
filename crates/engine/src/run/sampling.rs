//! The run's answer to a tool that asks the session's model for a completion (an MCP
//! server's sampling request, where its entry allows it): one request to the model the
//! run uses, with the asker's system prompt and messages and no tools, its text
//! collected whole.
//!
//! The asker names a token limit; Spool caps it at [`SAMPLE_MAX_TOKENS`], so a server
//! cannot spend the person's budget on one long answer. The model interface takes no
//! output limit, so the cap is kept here: the answer is cut once its text passes the
//! limit at the engine's own estimate ([`BYTES_PER_TOKEN`]), which drops the stream
//! and with it the provider's request.
//!
//! What the request used counts in the run's usage (the run record), not in any
//! message's: the run adds it when the call that asked ends.

use super::*;
use crate::context::{BYTES_PER_TOKEN, estimate_tokens};
use crate::models::ModelEntry;
use crate::{ModelRequest, Sample, SampleError, SampleModel, SampleRequest};
use std::sync::Mutex;

/// The most tokens one sampling request may have the model write, whatever it asks.
pub(crate) const SAMPLE_MAX_TOKENS: u32 = 4096;

/// The run's model, lent to one tool call.
pub(super) struct RunSampler {
    model: ModelEntry,
    /// The run's stop: it ends an answer still streaming.
    cancel: CancellationToken,
    /// What the call's requests used so far. A std mutex: never held across an `.await`.
    used: Mutex<Usage>,
}

impl RunSampler {
    pub(super) fn new(model: ModelEntry, cancel: CancellationToken) -> RunSampler {
        RunSampler { model, cancel, used: Mutex::default() }
    }

    /// What the call's sampling requests used, priced at the model's price.
    pub(super) fn used(&self) -> Usage {
        *self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, mut usage: Usage) {
        usage.cost = self.model.price.map_or(0.0, |p| p.cost(&usage));
        self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(usage);
    }

    /// Streams the answer until it stops or passes `limit` tokens; what the provider
    /// reported it used, or an estimate where it reported nothing (a cut or failed
    /// answer), is counted either way.
    async fn collect(&self, request: ModelRequest, limit: u32) -> Result<Sample, SampleError> {
        let prompt_tokens = estimate_tokens(&request.messages);
        let byte_limit = limit as usize * BYTES_PER_TOKEN as usize;
        let mut text = String::new();
        let mut reported = Usage::default();
        let outcome = async {
            let mut stream = self.model.model.stream(request).await.map_err(|e| SampleError::Model(e.to_string()))?;
            while let Some(event) = stream.next().await {
                match event.map_err(|e| SampleError::Model(e.to_string()))? {
                    ModelEvent::Text(delta) => {
                        text.push_str(&delta);
                        if text.len() >= byte_limit {
                            let mut end = byte_limit.min(text.len());
                            while !text.is_char_boundary(end) {
                                end -= 1;
                            }
                            text.truncate(end);
                            return Ok(true);
                        }
                    }
                    ModelEvent::Usage(usage) => reported.add(usage),
                    ModelEvent::Stop(reason) => return Ok(reason == StopReason::Length),
                    // No tools were offered, and reasoning is not part of the answer.
                    _ => {}
                }
            }
            Err(SampleError::Model("the model stream ended without finishing".to_owned()))
        };
        let outcome = tokio::select! {
            outcome = outcome => outcome,
            () = self.cancel.cancelled() => Err(SampleError::Stopped),
        };
        let mut usage = reported;
        if usage.input == 0 && usage.output == 0 {
            let output = (text.len() as u64).div_ceil(BYTES_PER_TOKEN);
            usage = Usage { input: prompt_tokens, output, estimated: true, ..usage };
        }
        self.count(usage);
        let cut = outcome?;
        Ok(Sample { model: self.model.model.name(), text, cut })
    }
}

#[async_trait::async_trait]
impl SampleModel for RunSampler {
    async fn sample(&self, request: SampleRequest) -> Result<Sample, SampleError> {
        let SampleRequest { system, messages, max_tokens } = request;
        let messages = messages
            .into_iter()
            .map(|m| {
                let content = vec![Content::Text { text: m.text }];
                if m.assistant {
                    Message::Assistant {
                        content,
                        stop_reason: Some(StopReason::Stop),
                        usage: Usage::default(),
                        model: self.model.model.name(),
                        error_message: None,
                        timestamp: now_ms(),
                    }
                } else {
                    Message::User { content, timestamp: now_ms() }
                }
            })
            .collect();
        let request = ModelRequest { system, messages, tools: Vec::new(), files: Default::default() };
        self.collect(request, max_tokens.clamp(1, SAMPLE_MAX_TOKENS)).await
    }
}
