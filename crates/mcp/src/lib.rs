//! Spool's Model Context Protocol client (issue 38): the `[[mcp]]` entries of
//! config.toml, parsed and checked ([`config`]); a server's tools offered to the model
//! ([`McpSource`]: `source` → `connection` → `tool`, results through `render`), over
//! stdio (a sandboxed child) or Streamable HTTP (`http`), with restarts pushed back
//! and broken servers given up (`health`); what Spool answers a server (`handler`);
//! and the TLS set-up the HTTP transport needs ([`install_crypto_provider`]).

pub mod config;
mod connection;
mod handler;
mod health;
mod http;
mod render;
mod source;
mod tool;

pub use config::{BearerToken, ConfigError, HttpServer, McpEntry, McpServerConfig, StdioServer, Transport, servers};
pub use health::Lifecycle;
pub use source::McpSource;

/// Makes ring the process's TLS crypto provider. rmcp's HTTP client is built on
/// reqwest with rustls but no provider of its own (aws-lc-rs, reqwest's choice, needs
/// cmake and a long C build), so without this its first HTTPS client panics. Call it
/// once at start-up, before any client is built; a second call changes nothing.
pub fn install_crypto_provider() {
    // Err only when a provider is installed already, which is all this asks for.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use rmcp::transport::StreamableHttpClientTransport;
    use spool_test_support::in_own_process;

    /// rmcp builds its reqwest client (rustls, no provider of its own) on the spot and
    /// panics without a provider installed; with ring installed it builds. In a process
    /// of its own: the provider is process-wide and installed only once.
    #[tokio::test]
    async fn an_https_client_needs_the_provider_and_builds_with_it() {
        if !in_own_process("tests::an_https_client_needs_the_provider_and_builds_with_it", &[]) {
            return;
        }
        let without = std::panic::catch_unwind(|| StreamableHttpClientTransport::from_uri("https://127.0.0.1:9/mcp"));
        assert!(without.is_err(), "built without a provider: the test no longer shows why one is installed");
        super::install_crypto_provider();
        super::install_crypto_provider();
        let _transport = StreamableHttpClientTransport::from_uri("https://127.0.0.1:9/mcp");
    }
}
