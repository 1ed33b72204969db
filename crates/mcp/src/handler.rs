//! What Spool answers when a server asks it something, and what it does with the
//! server's notifications, for one connection.
//!
//! Most of it belongs to the tool call in flight: a progress notification becomes a
//! line of the call's live output and restarts its deadline; an elicitation (form
//! mode) is put to the person through the call's [`LiveAsker`] while the call waits.
//! [`Handler::begin_call`] makes a call the one the server's messages go to, for as
//! long as the returned [`CallScope`] lives.
//!
//! Which call a message belongs to: over stdio JSON-RPC nothing ties a server's
//! request to the call it serves, and rmcp hands each call a progress token of its own
//! choosing that the caller never sees. So messages go to the most recent call. That
//! is exact in practice: a connection serves one session, and a session's run calls
//! its tools one after another, so one call is in flight at a time.
//!
//! Sampling (a server asking for a completion of Spool's model) is refused with a
//! clear error naming the config key unless the server's entry allows it. Where it is
//! allowed, the request goes through the current call's [`Sampler`] to the model its
//! run uses: text messages only (images, audio and tool use are refused, as Spool
//! declared none of them), the server's system prompt, no tools; its temperature,
//! stop sequences and model preferences are not followed. With no call in flight
//! there is no run to lend a model, and the request is refused.
//! `tools/list_changed` is noted so the next turn lists the server's tools again.

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorCode, ErrorData,
    Implementation, ProgressNotificationParam, ProtocolVersion,
};
// Sampling is deprecated by the spec (SEP-2577), which rmcp marks; Spool still has to
// answer servers that ask for it.
#[allow(deprecated)]
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, Role, SamplingMessage, SamplingMessageContentBlock,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::{Value, json};
use spool_engine::{LiveAnswer, LiveAsk, LiveAsker, SampleError, SampleMessage, SampleRequest, Sampler, ToolProgress};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A connection's handler; clones share one state.
#[derive(Clone, Debug)]
pub(crate) struct Handler {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The server's configured name: who asks, on the person's card and in errors.
    server: String,
    /// Whether the server's entry allows sampling (`sampling = true`).
    sampling: bool,
    /// The server said its tools changed since they were last listed.
    stale: AtomicBool,
    /// The calls in flight, the most recent last. A std mutex: never held across an
    /// `.await`.
    calls: Mutex<Vec<Arc<CallSlot>>>,
}

/// What the handler knows of one call in flight.
#[derive(Debug)]
struct CallSlot {
    progress: ToolProgress,
    asker: LiveAsker,
    sampler: Sampler,
    activity: watch::Sender<Activity>,
    /// Cancelled when the call ends: an ask still waiting on the person is withdrawn.
    ended: CancellationToken,
}

/// Signs of life of a call, which its deadline watches.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Activity {
    /// How many progress notifications, asks and sampling requests begun and answered
    /// it has seen.
    pub(crate) beats: u64,
    /// Asks waiting on the person, and sampling requests on the run's model, now: the
    /// deadline stands still meanwhile, since Spool, not the server, is taking time.
    pub(crate) asking: usize,
}

/// A call in flight, as the handler knows it; dropping it ends the call there.
pub(crate) struct CallScope {
    handler: Handler,
    slot: Arc<CallSlot>,
}

impl CallScope {
    /// The call's signs of life (see [`Activity`]).
    pub(crate) fn activity(&self) -> watch::Receiver<Activity> {
        self.slot.activity.subscribe()
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        self.slot.ended.cancel();
        let mut calls = self.handler.shared.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.retain(|slot| !Arc::ptr_eq(slot, &self.slot));
    }
}

impl Handler {
    pub(crate) fn new(server: &str, sampling: bool) -> Handler {
        let shared =
            Shared { server: server.to_owned(), sampling, stale: AtomicBool::new(false), calls: Mutex::default() };
        Handler { shared: Arc::new(shared) }
    }

    /// Whether the server said its tools changed since the last call; clears it.
    pub(crate) fn take_stale(&self) -> bool {
        self.shared.stale.swap(false, Ordering::SeqCst)
    }

    /// Whether a call is in flight (the source closes only idle connections).
    pub(crate) fn busy(&self) -> bool {
        !self.shared.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }

    /// Makes a call the one the server's progress, asks and sampling requests go to,
    /// until the scope drops.
    pub(crate) fn begin_call(&self, progress: ToolProgress, asker: LiveAsker, sampler: Sampler) -> CallScope {
        let (activity, _) = watch::channel(Activity::default());
        let slot = Arc::new(CallSlot { progress, asker, sampler, activity, ended: CancellationToken::new() });
        let mut calls = self.shared.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push(slot.clone());
        drop(calls);
        CallScope { handler: self.clone(), slot }
    }

    /// The call the server's messages go to: the most recent one (see the module's doc).
    fn current(&self) -> Option<Arc<CallSlot>> {
        let calls = self.shared.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.last().cloned()
    }

    /// Puts a form to the person through the current call; `Cancel` when no call is
    /// in flight, the call ends first, or the server withdraws the request.
    async fn ask(&self, message: String, schema: Value, withdrawn: CancellationToken) -> ElicitResult {
        let Some(call) = self.current() else { return ElicitResult::new(ElicitationAction::Cancel) };
        let ask = LiveAsk { source: self.shared.server.clone(), message, schema };
        call.activity.send_modify(|a| {
            a.asking += 1;
            a.beats += 1;
        });
        let answer = tokio::select! {
            answer = call.asker.ask(ask) => answer,
            () = call.ended.cancelled() => LiveAnswer::Cancel,
            () = withdrawn.cancelled() => LiveAnswer::Cancel,
        };
        call.activity.send_modify(|a| {
            a.asking -= 1;
            a.beats += 1;
        });
        match answer {
            LiveAnswer::Accept(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
            LiveAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            LiveAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        }
    }

    /// Has the current call's run answer a sampling request with its model.
    #[allow(deprecated)]
    async fn sample(
        &self,
        request: SampleRequest,
        withdrawn: CancellationToken,
    ) -> Result<CreateMessageResult, String> {
        let server = &self.shared.server;
        let Some(call) = self.current() else {
            return Err(format!(
                "Spool answers sampling requests from MCP server {server:?} only while one of its tool calls runs (no \
                 run is there to lend its model)"
            ));
        };
        call.activity.send_modify(|a| {
            a.asking += 1;
            a.beats += 1;
        });
        let answer = tokio::select! {
            answer = call.sampler.sample(request) => answer,
            () = call.ended.cancelled() => Err(SampleError::Stopped),
            () = withdrawn.cancelled() => Err(SampleError::Stopped),
        };
        call.activity.send_modify(|a| {
            a.asking -= 1;
            a.beats += 1;
        });
        let sample = answer.map_err(|e| format!("Spool's model did not answer the sampling request: {e}"))?;
        let stop = if sample.cut {
            CreateMessageResult::STOP_REASON_END_MAX_TOKEN
        } else {
            CreateMessageResult::STOP_REASON_END_TURN
        };
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text(sample.text), sample.model).with_stop_reason(stop))
    }
}

/// A sampling request as the run's model takes it; what it cannot take is an error
/// for the server.
#[allow(deprecated)]
fn sample_request(params: CreateMessageRequestParams) -> Result<SampleRequest, String> {
    if params.tools.as_ref().is_some_and(|tools| !tools.is_empty()) {
        return Err("Spool's sampling offers the model no tools (it declared no sampling.tools)".to_owned());
    }
    let mut messages = Vec::with_capacity(params.messages.len());
    for message in params.messages {
        let mut text = String::new();
        for block in message.content.into_vec() {
            match block {
                SamplingMessageContentBlock::Text(block) => text.push_str(&block.text),
                SamplingMessageContentBlock::Image(_) => {
                    return Err("Spool's sampling takes text only: a message holds an image".to_owned());
                }
                SamplingMessageContentBlock::Audio(_) => {
                    return Err("Spool's sampling takes text only: a message holds audio".to_owned());
                }
                _ => {
                    return Err(
                        "Spool's sampling takes text only: a message holds tool use or a tool result".to_owned()
                    );
                }
            }
        }
        messages.push(SampleMessage { assistant: message.role == Role::Assistant, text });
    }
    if messages.is_empty() {
        return Err("the sampling request has no messages".to_owned());
    }
    Ok(SampleRequest { system: params.system_prompt, messages, max_tokens: params.max_tokens })
}

/// A progress notification as a line of live output: `progress 3/10: message`.
fn progress_line(params: &ProgressNotificationParam) -> String {
    // f64's Display writes 3.0 as "3", so whole counts read as counts.
    let mut line = format!("progress {}", params.progress);
    if let Some(total) = params.total {
        line.push_str(&format!("/{total}"));
    }
    if let Some(message) = params.message.as_deref().filter(|m| !m.is_empty()) {
        line.push_str(&format!(": {message}"));
    }
    line.push('\n');
    line
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Form elicitation always (a call in flight has someone to ask, or the ask is
        // cancelled); URL mode never, since Spool opens no browser for the person.
        // Sampling only where the entry allows it, so a server that respects
        // capabilities does not offer tools that need it.
        let mut capabilities = json!({"elicitation": {"form": {}}});
        if self.shared.sampling {
            capabilities["sampling"] = json!({});
        }
        let capabilities: ClientCapabilities =
            serde_json::from_value(capabilities).expect("the capabilities above are well-formed");
        // The newest version that still has an `initialize` handshake, which is the one
        // this client runs: rmcp's default names 2026-07-28 in it, a version whose
        // lifecycle has no `initialize`, and servers of the 2025 versions (the
        // conformance harness among them) take that for a mismatch.
        ClientConfig::new(capabilities, Implementation::new("spool", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.stale.store(true, Ordering::SeqCst);
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let Some(call) = self.current() else { return };
        call.progress.report(progress_line(&params).as_bytes());
        call.activity.send_modify(|a| a.beats += 1);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match request {
            ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } => {
                let schema = serde_json::to_value(&requested_schema)
                    .map_err(|e| ErrorData::internal_error(format!("the requested schema: {e}"), None))?;
                Ok(self.ask(message, schema, context.ct).await)
            }
            // URL mode, or a mode newer than this client: not declared, so refused.
            _ => Err(ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                "Spool answers form elicitation only (it declared no other mode): ask with a form instead",
                None,
            )),
        }
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let server = &self.shared.server;
        if !self.shared.sampling {
            let message = format!(
                "sampling is not allowed for MCP server {server:?}: its [[mcp]] entry in config.toml does not set \
                 sampling = true"
            );
            return Err(ErrorData::new(ErrorCode::INVALID_REQUEST, message, None));
        }
        let request = sample_request(params).map_err(|e| ErrorData::new(ErrorCode::INVALID_PARAMS, e, None))?;
        self.sample(request, context.ct).await.map_err(|e| ErrorData::new(ErrorCode::INVALID_REQUEST, e, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(progress: f64, total: Option<f64>, message: Option<&str>) -> ProgressNotificationParam {
        let mut params: ProgressNotificationParam =
            serde_json::from_value(json!({"progressToken": 1, "progress": progress})).expect("params");
        params.total = total;
        params.message = message.map(str::to_owned);
        params
    }

    #[test]
    fn progress_reads_as_a_line_of_counts() {
        assert_eq!(progress_line(&progress(3.0, Some(10.0), Some("copying"))), "progress 3/10: copying\n");
        assert_eq!(progress_line(&progress(0.5, None, None)), "progress 0.5\n");
    }

    /// The most recent call gets the server's messages; once it ends, the one before.
    #[tokio::test]
    async fn progress_goes_to_the_most_recent_call_in_flight() {
        let handler = Handler::new("s", false);
        let (first, mut first_out) = ToolProgress::channel();
        let (second, mut second_out) = ToolProgress::channel();
        let outer = handler.begin_call(first, LiveAsker::default(), Sampler::default());
        let inner = handler.begin_call(second, LiveAsker::default(), Sampler::default());
        handler.current().expect("a call").progress.report(b"x");
        assert_eq!(second_out.rest().text, "x");
        drop(inner);
        handler.current().expect("a call").progress.report(b"y");
        assert_eq!(first_out.rest().text, "y");
        drop(outer);
        assert!(handler.current().is_none());
    }

    #[allow(deprecated)]
    fn sampling(messages: Value) -> CreateMessageRequestParams {
        serde_json::from_value(json!({"messages": messages, "maxTokens": 10})).expect("params")
    }

    /// Images and audio are refused by name; text passes with its role.
    #[test]
    fn a_sampling_request_takes_text_only() {
        let image = json!([{"role": "user", "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}}]);
        let refused = sample_request(sampling(image)).expect_err("an image");
        assert!(refused.contains("text only: a message holds an image"), "{refused}");
        let text = json!([
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {"role": "assistant", "content": {"type": "text", "text": "hello"}},
        ]);
        let request = sample_request(sampling(text)).expect("text");
        let roles: Vec<(bool, &str)> = request.messages.iter().map(|m| (m.assistant, m.text.as_str())).collect();
        assert_eq!(roles, [(false, "hi"), (true, "hello")]);
        assert_eq!(request.max_tokens, 10);
    }

    /// With no call in flight no run can lend its model: the request is refused.
    #[tokio::test]
    async fn sampling_with_no_call_in_flight_is_refused() {
        let handler = Handler::new("s", true);
        let request = SampleRequest { system: None, messages: Vec::new(), max_tokens: 1 };
        let refused = handler.sample(request, CancellationToken::new()).await.expect_err("no call");
        assert!(refused.contains("only while one of its tool calls runs"), "{refused}");
    }

    /// With no call in flight there is no one to ask: the server hears `cancel`.
    #[tokio::test]
    async fn an_ask_with_no_call_in_flight_is_cancelled() {
        let handler = Handler::new("s", false);
        let result = handler.ask("name?".into(), json!({"type": "object"}), CancellationToken::new()).await;
        assert_eq!(result.action, ElicitationAction::Cancel);
    }
}
