//! Webhooks as Standard Webhooks 1.0 sends them: a [`Channel`] for `webhook:<name>`.
//!
//! Each try is a `POST` of `{"type", "timestamp", "data"}` with three headers:
//! `webhook-id` (the event's id, the same on every try: the receiver's idempotency
//! key), `webhook-timestamp` (unix seconds of *this* try) and `webhook-signature`
//! (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, one per secret while a
//! secret is being rotated, space-separated). A 2xx is delivered; a redirect is a
//! failure (never followed: the signed request goes where it was configured to go);
//! 410 Gone disables the endpoint until an operator enables it; anything else, or no
//! answer within the endpoint's timeout, is tried again on the schedule, sooner only
//! if the receiver's `Retry-After` allows.
//!
//! Webhook URLs come from the operator's config, so they are trusted as given (unlike
//! Web Push endpoints, which a browser picks).

use crate::dispatch::{Attempt, Channel, OutboxEvent};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use spool_engine::Store;
use spool_protocol::time::Millis;
use std::sync::Arc;
use std::time::Duration;

/// The target prefix of webhooks.
pub const PREFIX: &str = "webhook:";

/// How long a receiver may take by default (the spec advises 15–30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// One configured receiver (`[[webhook]]`).
#[derive(Clone)]
pub struct WebhookEndpoint {
    pub name: String,
    pub url: reqwest::Url,
    /// The signing keys: the bytes of each `whsec_…` secret, the newest first.
    pub keys: Vec<Vec<u8>>,
    /// The event types sent; empty: all.
    pub events: Vec<String>,
    /// Only events of these users (names); `None`: everyone's.
    pub users: Option<Vec<String>>,
    pub timeout: Duration,
}

impl std::fmt::Debug for WebhookEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("WebhookEndpoint")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("events", &self.events)
            .field("users", &self.users)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The key of a Standard Webhooks secret: `whsec_` then base64 of 24 to 64 bytes.
pub fn parse_secret(secret: &str) -> Result<Vec<u8>, String> {
    let Some(encoded) = secret.trim().strip_prefix("whsec_") else {
        return Err("a webhook secret starts with whsec_ (then base64 of 24 to 64 random bytes)".into());
    };
    let key = BASE64.decode(encoded).map_err(|e| format!("the part after whsec_ is not base64: {e}"))?;
    if !(24..=64).contains(&key.len()) {
        return Err(format!("a webhook secret holds 24 to 64 bytes, this one {}", key.len()));
    }
    Ok(key)
}

/// The `webhook-signature` of one try: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`
/// for each key, space-separated.
pub fn signature(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The body of an event: `{"type", "timestamp" (RFC 3339, when the change happened), "data"}`.
pub fn body(event: &OutboxEvent) -> Vec<u8> {
    let timestamp = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(event.created_at) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok());
    let body = serde_json::json!({"type": event.kind, "timestamp": timestamp, "data": event.data});
    serde_json::to_vec(&body).expect("JSON serializes")
}

/// The webhooks of `[[webhook]]`, as one channel.
pub struct WebhookChannel {
    endpoints: Vec<WebhookEndpoint>,
    store: Arc<dyn Store>,
    client: reqwest::Client,
}

impl WebhookChannel {
    pub fn new(endpoints: Vec<WebhookEndpoint>, store: Arc<dyn Store>) -> anyhow::Result<WebhookChannel> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("spool/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebhookChannel { endpoints, store, client })
    }

    fn endpoint(&self, target: &str) -> Option<&WebhookEndpoint> {
        let name = target.strip_prefix(PREFIX)?;
        self.endpoints.iter().find(|e| e.name == name)
    }

    async fn disabled(&self, name: &str) -> anyhow::Result<bool> {
        Ok(self.store.disabled_webhooks().await?.iter().any(|d| d.name == name))
    }

    /// Whether `endpoint` takes events of `owner` (a user id).
    async fn serves(&self, endpoint: &WebhookEndpoint, owner: &str) -> anyhow::Result<bool> {
        let Some(users) = &endpoint.users else { return Ok(true) };
        for name in users {
            if self.store.user_id(name).await?.is_some_and(|id| id.as_str() == owner) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[async_trait::async_trait]
impl Channel for WebhookChannel {
    fn prefix(&self) -> &'static str {
        PREFIX
    }

    async fn targets(&self, event: &OutboxEvent) -> anyhow::Result<Vec<(String, Millis)>> {
        let now = spool_protocol::time::now_ms();
        let mut targets = Vec::new();
        for endpoint in &self.endpoints {
            let wanted = endpoint.events.is_empty() || endpoint.events.iter().any(|e| e == &event.kind || e == "*");
            if wanted && self.serves(endpoint, &event.owner).await? && !self.disabled(&endpoint.name).await? {
                targets.push((format!("{PREFIX}{}", endpoint.name), now));
            }
        }
        Ok(targets)
    }

    async fn deliver(&self, event: &OutboxEvent, target: &str, _attempt: u32) -> Attempt {
        let Some(endpoint) = self.endpoint(target) else {
            return Attempt::Dead { status: None, reason: format!("{target} is not configured") };
        };
        match self.disabled(&endpoint.name).await {
            Ok(true) => return Attempt::Skipped { reason: "the endpoint is disabled (it answered 410 Gone)".into() },
            Ok(false) => {}
            Err(e) => return Attempt::Retry { status: None, error: format!("{e:#}"), after: None },
        }
        let body = body(event);
        let timestamp = spool_protocol::time::now_ms() / 1000;
        let request = self
            .client
            .post(endpoint.url.clone())
            .timeout(endpoint.timeout)
            .header("content-type", "application/json")
            .header("webhook-id", &event.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature(&endpoint.keys, &event.id, timestamp, &body))
            .body(body);
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                let error =
                    if e.is_timeout() { format!("no answer within {:?}", endpoint.timeout) } else { e.to_string() };
                return Attempt::Retry { status: None, error, after: None };
            }
        };
        let status = response.status().as_u16();
        let retry_after = crate::dispatch::retry_after(response.headers());
        match status {
            200..=299 => Attempt::Delivered { status },
            410 => {
                let reason = "the receiver answered 410 Gone";
                if let Err(error) =
                    self.store.disable_webhook(&endpoint.name, reason, spool_protocol::time::now_ms()).await
                {
                    tracing::warn!(webhook = %endpoint.name, %error, "could not record the webhook disabled");
                }
                tracing::warn!(webhook = %endpoint.name, "webhook disabled: its receiver answered 410 Gone");
                Attempt::Dead { status: Some(status), reason: reason.into() }
            }
            300..=399 => Attempt::Retry {
                status: Some(status),
                error: format!("HTTP {status}: redirects are not followed"),
                after: retry_after,
            },
            _ => Attempt::Retry { status: Some(status), error: format!("HTTP {status}"), after: retry_after },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_specs() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = parse_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let body = br#"{"test": 2432232314}"#;
        let signed = signature(&[key], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_secret_must_be_whsec_and_long_enough() {
        assert!(parse_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(parse_secret("whsec_c2hvcnQ=").is_err());
    }
}
