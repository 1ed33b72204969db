//! What a Streamable HTTP server needs before rmcp can connect to it: the transport's
//! settings, with the bearer token read now (at connect time, so a rotated token is
//! picked up by the next connection and nothing holds it longer than a connection
//! does), and the server's address as operators may see it.
//!
//! The token never leaves this module except inside rmcp's transport: errors name the
//! variable or the file it comes from, and [`redact`] takes it out of any error text
//! that echoes a request back.

use crate::config::{BearerToken, HttpServer};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use std::collections::HashMap;

/// The transport's settings for `server`, and the token it carries (for [`redact`]).
/// Fails, naming where the token should have come from, when it cannot be read or is
/// empty: a server that wants a token would only answer 401 without one.
pub(crate) fn transport_config(
    server: &HttpServer,
) -> Result<(StreamableHttpClientTransportConfig, Option<String>), String> {
    let token = server.bearer.as_ref().map(read_token).transpose()?;
    let mut headers = HashMap::new();
    for (name, value) in &server.headers {
        // The config check parsed both with these same parsers; a failure here means
        // the check and this code drifted apart, which the error says.
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("header {name:?} is invalid"))?;
        let value = http::HeaderValue::from_str(value).map_err(|_| format!("header {name}'s value is invalid"))?;
        headers.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str()).custom_headers(headers);
    if let Some(token) = &token {
        // rmcp sends it as `Authorization: Bearer <token>`.
        config = config.auth_header(token.clone());
    }
    Ok((config, token))
}

/// The token from its environment variable or file (trimmed: files end in a newline).
fn read_token(source: &BearerToken) -> Result<String, String> {
    let (token, from) = match source {
        BearerToken::Env(name) => {
            let value = std::env::var(name).map_err(|e| match e {
                std::env::VarError::NotPresent => format!("bearer_token_env {name} is not set"),
                std::env::VarError::NotUnicode(_) => format!("bearer_token_env {name} is not valid UTF-8"),
            })?;
            (value, format!("bearer_token_env {name}"))
        }
        BearerToken::File(path) => {
            let value = std::fs::read_to_string(path)
                .map_err(|e| format!("bearer_token_file {} cannot be read: {e}", path.display()))?;
            (value, format!("bearer_token_file {}", path.display()))
        }
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("{from} is empty"));
    }
    if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        // Not the value itself: the point is never to show it.
        return Err(format!("{from} holds characters a header cannot carry"));
    }
    // Masked from now on wherever a run shows text, like a secret in Spool's own
    // environment: a tool that echoes what it was sent must not show it.
    spool_engine::secrets::remember([("MCP_BEARER_TOKEN", token)]);
    Ok(token.to_owned())
}

/// What an error text about one HTTP server must not show: its bearer token, and its
/// URL as configured where that differs from the shown one (a query may hold a key,
/// and reqwest's errors name the URL they failed on). A last guard for error texts
/// built from what a server or a library echoed back.
#[derive(Clone, Debug)]
pub(crate) struct Scrub {
    token: Option<String>,
    url: String,
    shown: String,
}

impl Scrub {
    pub(crate) fn new(server: &HttpServer, token: Option<String>) -> Scrub {
        Scrub { token, url: server.url.as_str().to_owned(), shown: shown_url(&server.url) }
    }

    pub(crate) fn apply(&self, text: String) -> String {
        let mut text = without_type_names(&text);
        if self.url != self.shown && text.contains(&self.url) {
            text = text.replace(&self.url, &self.shown);
        }
        match &self.token {
            Some(token) if text.contains(token.as_str()) => text.replace(token.as_str(), "[token]"),
            _ => text,
        }
    }
}

/// `text` without the Rust type names rmcp's transport errors carry in brackets
/// (`Transport [rmcp::transport::worker::WorkerTransport<…>] error`): the person
/// reading a failure reason needs reqwest's part, not the generic types around it.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(" [rmcp::") {
        out.push_str(&rest[..start]);
        // The bracket's match, counting the brackets nested in the type's name.
        let mut depth = 0usize;
        let end = rest[start + 1..].char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(start + 1 + i + 1)
        });
        match end {
            Some(end) => rest = &rest[end..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The server's URL as status shows it: no query or fragment (where some servers take
/// keys), and no credentials (the config refuses them; this does not rely on it).
pub(crate) fn shown_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn server(bearer: Option<BearerToken>) -> HttpServer {
        HttpServer {
            url: url::Url::parse("http://127.0.0.1:9/mcp").expect("url"),
            headers: [("X-Team".to_owned(), "core".to_owned())].into(),
            bearer,
        }
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("spool-mcp-http-{name}-{}", std::process::id()));
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_token_file_is_read_trimmed_and_headers_are_set() {
        let path = temp_file("ok", "sk-file-token\n");
        let (config, token) = transport_config(&server(Some(BearerToken::File(path.clone())))).expect("read");
        assert_eq!(token.as_deref(), Some("sk-file-token"));
        assert_eq!(config.auth_header.as_deref(), Some("sk-file-token"));
        assert_eq!(config.custom_headers[&http::HeaderName::from_static("x-team")], "core");
        let (config, token) = transport_config(&server(None)).expect("no token");
        assert!(token.is_none() && config.auth_header.is_none());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_missing_or_empty_token_names_its_source_never_a_value() {
        let missing = PathBuf::from("/nonexistent/spool-token");
        let err = transport_config(&server(Some(BearerToken::File(missing)))).expect_err("missing");
        assert!(err.starts_with("bearer_token_file /nonexistent/spool-token cannot be read"), "{err}");
        let empty = temp_file("empty", " \n");
        let err = transport_config(&server(Some(BearerToken::File(empty.clone())))).expect_err("empty");
        assert_eq!(err, format!("bearer_token_file {} is empty", empty.display()));
        let _ = std::fs::remove_file(empty);
        let bad = temp_file("bad", "sk-line\nbreak");
        let err = transport_config(&server(Some(BearerToken::File(bad.clone())))).expect_err("newline inside");
        assert!(err.ends_with("holds characters a header cannot carry") && !err.contains("sk-line"), "{err}");
        let _ = std::fs::remove_file(bad);
        let unset = BearerToken::Env("SPOOL_TEST_SURELY_UNSET_TOKEN".into());
        let err = transport_config(&server(Some(unset))).expect_err("unset");
        assert_eq!(err, "bearer_token_env SPOOL_TEST_SURELY_UNSET_TOKEN is not set");
    }

    #[test]
    fn shown_urls_drop_queries_and_credentials_and_errors_drop_tokens() {
        let url = url::Url::parse("https://user:pw@mcp.example.com/mcp?key=sk-1#frag").expect("url");
        assert_eq!(shown_url(&url), "https://mcp.example.com/mcp");
        let server = HttpServer { url, headers: Default::default(), bearer: None };
        let scrub = Scrub::new(&server, Some("tok-1".into()));
        let echoed = "error sending request for url (https://user:pw@mcp.example.com/mcp?key=sk-1#frag): tok-1 refused";
        assert_eq!(
            scrub.apply(echoed.into()),
            "error sending request for url (https://mcp.example.com/mcp): [token] refused"
        );
        assert_eq!(Scrub::new(&server, None).apply("fine".into()), "fine");
        let rmcp = "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] \
                    error: Client error: refused";
        assert_eq!(
            Scrub::new(&server, None).apply(rmcp.into()),
            "Send message error Transport error: Client error: refused"
        );
    }
}
