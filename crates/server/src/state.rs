//! What every handler can reach: the engine, the server's own settings, and its
//! encode-once forms.

use crate::dialect::RunForms;
use crate::dialect::opencode::mapper::Mapper;
use crate::dialect::shared::Forms;
use crate::dialect::ws_hub::{HubForm, Streaming};
use spool_engine::Engine;
use std::sync::Arc;
use std::time::Duration;

/// Shared by all handlers. Cheap to clone: `Engine` is a handle around an `Arc`.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub config: ServerConfig,
    /// The run-following dialects' shared folds and encodings (`dialect/shared.rs`).
    pub forms: Arc<RunForms>,
    /// The session-following dialects' shared mappings and encodings.
    pub session_forms: Arc<SessionForms>,
    /// Web Push: the server's keys, browsers' subscriptions, decision tokens (issue 41).
    pub push: Arc<spool_reach::push::WebPush>,
}

impl AppState {
    pub fn new(engine: Engine, config: ServerConfig) -> Self {
        let push = spool_reach::push::WebPush::new(engine.store_handle(), config.push.clone());
        // `[push] when = "away"`: an ask is not pushed while a page that can answer it
        // is visible, on any node.
        let watching = engine.clone();
        push.set_presence(Arc::new(move |session| {
            let engine = watching.clone();
            Box::pin(async move { engine.has_visible_answerer(&session).await })
        }));
        Self { engine, config, forms: RunForms::new(), session_forms: Arc::default(), push }
    }
}

/// The encode-once forms ([`Forms`]) of the dialects that follow whole sessions: one set
/// per server, built with its state, so two servers in one process (tests, a cluster's
/// nodes) share no mapping.
#[derive(Default)]
pub struct SessionForms {
    /// The WebSocket hub's (`/api/ws`), one per session and `?streaming=` form.
    pub hub: Forms<Streaming, HubForm>,
    /// OpenCode's `/event` and `/global/event`, one per session, delta style
    /// (`legacy_deltas`) and directory.
    pub opencode: Forms<(bool, String), Mapper>,
}

/// Settings of the HTTP layer (the engine has its own `EngineConfig`).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Interval of the `heartbeat` event on SSE streams (seed 000: 15 s). The first one
    /// comes one interval after connecting.
    pub heartbeat: Duration,
    /// Largest request body accepted, in bytes; larger is a 413.
    pub max_body_bytes: usize,
    /// Mark the login cookie `Secure` (the server is behind TLS). Also set per request
    /// when a proxy says `X-Forwarded-Proto: https`, and always when `tls` is set.
    pub secure_cookies: bool,
    /// Host names served besides the loopback ones while auth is off (a reverse proxy's
    /// name; see `guard.rs`). `name` matches any port, `name:port` that port only.
    pub allowed_hosts: Vec<String>,
    /// How long a connection may take to send a request's headers, and how long an idle
    /// keep-alive connection stays open; then it is closed.
    pub header_timeout: Duration,
    /// Most open TCP connections; past it a connection gets one 503
    /// `too_many_connections` and is closed.
    pub max_connections: usize,
    /// How `bash` commands are confined, for `/api/health` (`None`: not reported).
    pub sandbox: Option<spool_engine::SandboxStatus>,
    /// Serve the UI's files from this directory instead of the copy embedded at build
    /// time (`--ui-dir web/app`: edit a module, reload the page, no rebuild).
    pub ui_dir: Option<std::path::PathBuf>,
    /// Serve HTTPS (HTTP/2 or HTTP/1.1 by ALPN) with this certificate instead of plain
    /// HTTP (`--tls-cert`/`--tls-key`).
    pub tls: Option<crate::TlsConfig>,
    /// The outbox's webhooks, retry schedule and extra channels (issue 41).
    pub outbox: crate::OutboxConfig,
    /// `[push]`: Web Push's contact, when to push, and (tests) insecure endpoints.
    pub push: spool_reach::push::PushConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(15),
            max_body_bytes: 1 << 20,
            secure_cookies: false,
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            sandbox: None,
            ui_dir: None,
            tls: None,
            outbox: crate::OutboxConfig::default(),
            push: spool_reach::push::PushConfig::default(),
        }
    }
}
