//! The outbox's dispatcher, run beside the HTTP server on every node (issue 41).
//!
//! Started by [`serve_state`](crate::serve_state), so the binary and the tests' servers
//! run it alike, and stopped with the server. Its channels are the configured
//! webhooks and whatever [`OutboxConfig::channels`] adds (Web Push registers there).
//! It wakes whenever the engine announces a list change (a session created, a run
//! parked, decided or settled: the changes that write events), else every second.

use crate::AppState;
use spool_reach::dispatch::{Channel, DispatchSettings, Dispatcher};
use spool_reach::webhook::{WebhookChannel, WebhookEndpoint};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the outbox sends through, and how.
#[derive(Clone, Default)]
pub struct OutboxConfig {
    /// `[[webhook]]`: the receivers of Standard Webhooks.
    pub webhooks: Vec<WebhookEndpoint>,
    /// `[webhooks] retry_secs` and the drain's other settings.
    pub dispatch: DispatchSettings,
    /// More ways out, beside the webhooks.
    pub channels: Vec<Arc<dyn Channel>>,
}

impl std::fmt::Debug for OutboxConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxConfig")
            .field("webhooks", &self.webhooks)
            .field("dispatch", &self.dispatch)
            .field("channels", &self.channels.iter().map(|c| c.prefix()).collect::<Vec<_>>())
            .finish()
    }
}

/// Every channel of this server: the webhooks', then the others.
fn channels(state: &AppState) -> Vec<Arc<dyn Channel>> {
    let config = &state.config.outbox;
    let mut channels: Vec<Arc<dyn Channel>> = Vec::new();
    if !config.webhooks.is_empty() {
        match WebhookChannel::new(config.webhooks.clone(), state.engine.store_handle()) {
            Ok(webhooks) => channels.push(Arc::new(webhooks)),
            Err(error) => tracing::error!(error = %format!("{error:#}"), "webhooks are off: no HTTP client"),
        }
    }
    // Web Push: always on; it sends only to the browsers that subscribed.
    channels.push(Arc::new(spool_reach::push::PushChannel(state.push.clone())));
    channels.extend(config.channels.iter().cloned());
    channels
}

/// Starts the dispatcher; it stops when `shutdown` is cancelled.
pub(crate) fn start(state: &AppState, shutdown: CancellationToken) -> JoinHandle<()> {
    let engine = &state.engine;
    let dispatcher =
        Dispatcher::new(engine.store_handle(), engine.node_id(), channels(state), state.config.outbox.dispatch.clone());
    let waker = dispatcher.waker();
    let mut changes = engine.lists().watch_all();
    let watching = tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match changes.recv().await {
                Ok(_) | Err(RecvError::Lagged(_)) => waker.notify_one(),
                Err(RecvError::Closed) => return,
            }
        }
    });
    tokio::spawn(async move {
        dispatcher.run(shutdown.cancelled_owned()).await;
        watching.abort();
    })
}
