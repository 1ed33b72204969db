//! Spool's HTTP side: the JSON API over the [`Engine`](spool_engine::Engine), the
//! native SSE session stream, and the accept loop that serves them.
//!
//! * [`router`] builds the API (`http/`, one file per resource) over an [`AppState`].
//! * [`serve`] is the accept loop (see `serve.rs` for why it is not `axum::serve`), over
//!   plain TCP or TLS ([`TlsConfig`], `tls.rs`).
//! * [`serve_state`] puts the two together with a graceful shutdown that also ends the
//!   engine's open streams; the binary and the tests start the server through it.
//!
//! Every error a client can see is an [`ApiError`]: JSON with a status and a `code`.

mod dialect;
mod error;
mod extract;
#[doc(hidden)]
pub mod fuzzing;
mod guard;
mod http;
mod markdown;
mod outbox;
mod revocation;
mod serve;
mod state;
mod tls;

pub use error::ApiError;
pub use extract::{Caller, CurrentUser};
pub use http::{openapi, router};
pub use serve::{ConnectionLimits, ConnectionToken, KILL_GRACE, SHUTDOWN_GRACE, serve, serve_with};
pub use outbox::OutboxConfig;
pub use state::{AppState, ServerConfig};
pub use tls::{MAX_PEM_FILE_BYTES, TlsConfig, TlsError};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the API for `state` on `listener` until `shutdown` is cancelled. On shutdown
/// the engine's open streams are closed, so SSE responses end instead of holding the
/// server up until [`SHUTDOWN_GRACE`].
pub async fn serve_state(listener: TcpListener, state: AppState, shutdown: CancellationToken) -> std::io::Result<()> {
    let engine = state.engine.clone();
    let limits =
        ConnectionLimits { header_timeout: state.config.header_timeout, max_connections: state.config.max_connections };
    let tls = state.config.tls.clone();
    // Recorded for `spool auth disable`; on a non-loopback address this also makes the
    // engine require auth for as long as it serves, whatever the store's flag says.
    let addr = listener.local_addr()?;
    if let Err(e) = engine.auth().announce_listener(addr).await {
        tracing::warn!(error = %e, "could not record this server's address in the store");
    }
    let closer = tokio::spawn({
        let (shutdown, engine) = (shutdown.clone(), engine.clone());
        async move {
            shutdown.cancelled().await;
            engine.close_streams();
        }
    });
    let dispatcher = outbox::start(&state, shutdown.clone());
    let metrics = Some(engine.metrics().clone());
    let result = serve_with(listener, router(state), shutdown, limits, tls, metrics).await;
    closer.abort();
    dispatcher.abort();
    engine.auth().withdraw_listener().await;
    result
}
