//! Web Push (RFC 8030, encrypted as RFC 8291 says, signed as RFC 8292 says): the
//! [`Channel`] for `push:<subscription>` targets, and what the HTTP routes need to
//! take a browser's subscription and to spend a decision token.
//!
//! A push tells the subscription's owner that an approval or a question waits for
//! them, or that one they were told of was decided. Its plaintext, [`PushMessage`], is
//! small (≤ 3 KiB; push services take 4 KiB bodies) and redacted: ids, the tool's name
//! and the card's redacted summary, never a call's arguments or a message's text. An
//! approval's push carries a decision token (see [`crate::token`]) for its Approve and
//! Deny buttons; a question's carries none (answering needs the page).
//!
//! The browser picks the endpoint, so it is untrusted: only `https`, never an IP
//! literal, and a resolver that drops loopback, private, link-local and shared
//! addresses at connect time (so a name that resolves inside the network reaches
//! nothing). `[push] allow_insecure_endpoints` lifts all of that, for tests with a
//! push service on loopback.

use crate::dispatch::{Attempt, Channel, OutboxEvent};
use crate::token::{DecisionClaims, TokenKey};
use crate::vapid::VapidKey;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use spool_engine::store::PushSubscription;
use spool_engine::{DeliveryStatus, Store};
use spool_protocol::time::Millis;
use spool_protocol::{ApprovalId, ApprovalStatus, SessionId, UserId};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The largest plaintext a push carries. RFC 8291 leaves 3993 bytes of a 4096-byte
/// record; a round number below it leaves room for what a service adds.
pub const MAX_MESSAGE_BYTES: usize = 3 * 1024;

/// The longest a push service is asked to hold a push (RFC 8030 `TTL`): four weeks,
/// what the big services keep at most.
pub const MAX_TTL_SECS: u64 = 28 * 24 * 60 * 60;

/// What a push's buttons may decide: approve this call once, or deny it.
pub const DECISIONS: [&str; 2] = ["once", "reject"];

/// `[push]` in `config.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushConfig {
    /// The VAPID `sub`: a `mailto:` or `https:` address a push service may write to
    /// about this server's pushes.
    pub contact: String,
    /// `away` (the default): an approval's push waits `delay_secs` and is sent only if
    /// it is still pending and nobody can see it (presence); `always`: sent at once.
    pub when: PushWhen,
    pub delay_secs: u64,
    /// Accept and send to `http://` endpoints and IP literals, private ones too. For
    /// tests whose push service listens on loopback; never in production.
    pub allow_insecure_endpoints: bool,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            contact: "mailto:spool@localhost".into(),
            when: PushWhen::Away,
            delay_secs: 10,
            allow_insecure_endpoints: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushWhen {
    Away,
    Always,
}

/// What a push's plaintext says (the service worker reads it). `kind` is `approval`,
/// `question` or `resolved`; `url` opens the session; `token` and `actions` come with
/// an approval only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushMessage {
    pub v: u8,
    pub kind: String,
    pub approval_id: String,
    pub session_id: String,
    pub title: String,
    pub body: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The decisions the token allows, as `POST /api/decision-tokens/decide` names
    /// them (`once`, `reject`): the worker shows a button for each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

/// A browser's `PushSubscription.toJSON()`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionJson {
    pub endpoint: String,
    pub keys: SubscriptionKeys,
    /// Sent by some browsers; not used.
    #[serde(default)]
    pub expiration_time: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct SubscriptionKeys {
    pub p256dh: String,
    pub auth: String,
}

/// Why a subscription or an endpoint is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("the endpoint is not a URL")]
    NotAUrl,
    #[error("the endpoint must be an https URL")]
    NotHttps,
    #[error("the endpoint may not be an IP address")]
    IpLiteral,
    #[error("the subscription's keys are not a P-256 public key and a 16-byte auth secret")]
    BadKeys,
}

/// How a token fared before its approval was looked at, in the order they are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    /// Signed with this deployment's key, not expired, its source still there.
    Valid(DecisionClaims),
    /// Not a token signed with the current key.
    Invalid,
    Expired,
    /// The subscription (or webhook) it was sent through is gone.
    Revoked,
}

/// Web Push for one server: its keys (loaded from `server_keys` on first use, shared
/// by every node), the subscriptions in the store, and the HTTP client that sends.
pub struct WebPush {
    store: Arc<dyn Store>,
    config: PushConfig,
    client: reqwest::Client,
    keys: tokio::sync::OnceCell<Keys>,
    /// The webhooks a decision link may come from (`webhook:<name>`): configured by the
    /// webhooks' side; a token from one that is no longer configured is revoked.
    webhooks: std::sync::RwLock<Vec<String>>,
    /// Whether someone could see a session right now (presence); `None` until it is
    /// wired: then `when = "away"` sends anyway.
    watched: std::sync::RwLock<Option<Presence>>,
}

/// Asks whether a session has a visible answerer (see [`WebPush::set_presence`]).
pub type Presence =
    Arc<dyn Fn(SessionId) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send + Sync>;

struct Keys {
    vapid: VapidKey,
    tokens: TokenKey,
}

impl WebPush {
    pub fn new(store: Arc<dyn Store>, config: PushConfig) -> Arc<WebPush> {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .https_only(!config.allow_insecure_endpoints)
            // A push service answers at once; 3xx is a failure, never followed (the
            // target must stay the one checked).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("Spool/", env!("CARGO_PKG_VERSION")));
        let client = match config.allow_insecure_endpoints {
            true => client.no_proxy(),
            false => client.dns_resolver(Arc::new(PublicOnly)),
        };
        let client = client.build().expect("the push client's settings are valid");
        Arc::new(WebPush {
            store,
            config,
            client,
            keys: tokio::sync::OnceCell::new(),
            webhooks: Default::default(),
            watched: Default::default(),
        })
    }

    pub fn config(&self) -> &PushConfig {
        &self.config
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The webhooks a decision link may come from.
    pub fn set_webhook_sources(&self, names: Vec<String>) {
        *self.webhooks.write().expect("not poisoned") = names;
    }

    /// Tells pushes under `when = "away"` whether a session has a visible answerer.
    pub fn set_presence(&self, watched: Presence) {
        *self.watched.write().expect("not poisoned") = Some(watched);
    }

    async fn keys(&self) -> anyhow::Result<&Keys> {
        self.keys
            .get_or_try_init(|| async {
                let now = spool_protocol::time::now_ms();
                let fresh = VapidKey::generate().to_pkcs8();
                let vapid = VapidKey::from_pkcs8(&self.store.server_key(crate::vapid::KEY_NAME, &fresh, now).await?)?;
                let fresh = TokenKey::fresh_secret();
                let tokens = TokenKey::new(self.store.server_key(crate::token::KEY_NAME, &fresh, now).await?);
                Ok(Keys { vapid, tokens })
            })
            .await
    }

    /// The public key browsers subscribe with (`applicationServerKey`).
    pub async fn public_key(&self) -> anyhow::Result<String> {
        Ok(self.keys().await?.vapid.public_key())
    }

    /// Checks an endpoint the way every send checks it again.
    pub fn check_endpoint(&self, endpoint: &str) -> Result<reqwest::Url, EndpointError> {
        let url: reqwest::Url = endpoint.parse().map_err(|_| EndpointError::NotAUrl)?;
        if self.config.allow_insecure_endpoints {
            return match url.scheme() {
                "https" | "http" => Ok(url),
                _ => Err(EndpointError::NotHttps),
            };
        }
        if url.scheme() != "https" {
            return Err(EndpointError::NotHttps);
        }
        match url.host() {
            Some(url::Host::Domain(_)) => Ok(url),
            Some(_) => Err(EndpointError::IpLiteral),
            None => Err(EndpointError::NotAUrl),
        }
    }

    /// Stores a browser's subscription for `owner`, made with credential `login`.
    pub async fn subscribe(
        &self,
        owner: &UserId,
        login: Option<String>,
        json: &SubscriptionJson,
        user_agent: Option<String>,
    ) -> anyhow::Result<Result<PushSubscription, EndpointError>> {
        if let Err(e) = self.check_endpoint(&json.endpoint) {
            return Ok(Err(e));
        }
        if browser_keys(&json.keys.p256dh, &json.keys.auth).is_none() {
            return Ok(Err(EndpointError::BadKeys));
        }
        let subscription = PushSubscription {
            id: format!("psub_{}", ulid::Ulid::new().to_string().to_lowercase()),
            owner_id: owner.clone(),
            login_id: login,
            endpoint: json.endpoint.clone(),
            p256dh: json.keys.p256dh.clone(),
            auth: json.keys.auth.clone(),
            user_agent: user_agent.map(|ua| ua.chars().take(200).collect()),
            created_at: spool_protocol::time::now_ms(),
            last_ok_at: None,
            failures: 0,
        };
        Ok(Ok(self.store.save_push_subscription(&subscription).await?))
    }

    /// A token for deciding `approval` as `user` from subscription `psub`.
    pub async fn mint_token(
        &self,
        approval: &str,
        user: &str,
        source: &str,
        approval_expires: Millis,
        now: Millis,
    ) -> anyhow::Result<String> {
        let claims = DecisionClaims::new(approval, user, &DECISIONS, source, approval_expires, now);
        Ok(self.keys().await?.tokens.sign(&claims))
    }

    /// The first checks of a decision token, in order: its signature, its expiry, its
    /// source. The rest (decision allowed, caller, single use, the approval) are the
    /// route's.
    pub async fn check_token(&self, token: &str, now: Millis) -> anyhow::Result<TokenCheck> {
        let Ok(claims) = self.keys().await?.tokens.verify(token) else { return Ok(TokenCheck::Invalid) };
        if now >= claims.expires_at {
            return Ok(TokenCheck::Expired);
        }
        let live = match claims.source.split_once(':') {
            Some(("push", id)) => {
                self.store.get_push_subscription(id).await?.is_some_and(|s| s.owner_id.as_str() == claims.user)
            }
            Some(("webhook", name)) => self.webhooks.read().expect("not poisoned").iter().any(|w| w == name),
            _ => false,
        };
        Ok(if live { TokenCheck::Valid(claims) } else { TokenCheck::Revoked })
    }

    /// One try at sending `message` to `subscription`. A 404 or 410 (the browser
    /// unsubscribed) deletes the subscription.
    pub async fn send(
        &self,
        subscription: &PushSubscription,
        message: &PushMessage,
        ttl_secs: u64,
        urgency: &str,
    ) -> Attempt {
        let url = match self.check_endpoint(&subscription.endpoint) {
            Ok(url) => url,
            Err(e) => return Attempt::Dead { status: None, reason: e.to_string() },
        };
        let Some((ua_public, auth)) = browser_keys(&subscription.p256dh, &subscription.auth) else {
            return Attempt::Dead { status: None, reason: EndpointError::BadKeys.to_string() };
        };
        let plaintext = serde_json::to_vec(message).expect("plain data serializes");
        if plaintext.len() > MAX_MESSAGE_BYTES {
            return Attempt::Dead { status: None, reason: format!("the message is {} bytes", plaintext.len()) };
        }
        let body = match web_push_native::encrypt(plaintext, &ua_public, &auth) {
            Ok(body) => body,
            Err(e) => return Attempt::Dead { status: None, reason: format!("encrypting: {e}") },
        };
        let keys = match self.keys().await {
            Ok(keys) => keys,
            Err(e) => return Attempt::Retry { status: None, error: format!("reading the keys: {e:#}"), after: None },
        };
        let now_secs = (spool_protocol::time::now_ms() / 1000) as u64;
        let request = self
            .client
            .post(url.clone())
            .header("TTL", ttl_secs.min(MAX_TTL_SECS).to_string())
            .header("Urgency", urgency)
            .header("Topic", topic(&message.approval_id))
            .header("Content-Encoding", "aes128gcm")
            .header("Content-Type", "application/octet-stream")
            .header("Authorization", keys.vapid.authorization(&url, &self.config.contact, now_secs))
            .body(body);
        let now = spool_protocol::time::now_ms();
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                let _ = self.store.record_push_attempt(&subscription.id, false, now).await;
                return Attempt::Retry { status: None, error: error_chain(&e), after: None };
            }
        };
        let status = response.status().as_u16();
        let retry_after = crate::dispatch::retry_after(response.headers());
        let ok = (200..300).contains(&status);
        if status == 404 || status == 410 {
            // The browser unsubscribed or the service dropped it: nothing will ever
            // reach it again, and its tokens are revoked with it.
            if let Err(e) = self.store.delete_push_subscription(&subscription.id).await {
                tracing::warn!(error = %e, "deleting a gone push subscription");
            }
            return Attempt::Dead { status: Some(status), reason: "subscription_gone".into() };
        }
        let _ = self.store.record_push_attempt(&subscription.id, ok, now).await;
        match status {
            _ if ok => Attempt::Delivered { status },
            429 | 500..=599 => Attempt::Retry {
                status: Some(status),
                error: format!("push service said {status}"),
                after: retry_after,
            },
            _ => Attempt::Dead { status: Some(status), reason: format!("push service refused with {status}") },
        }
    }

    /// The message and token for `event` sent to `subscription`, or why there is none
    /// to send any more.
    async fn message_for(
        &self,
        event: &OutboxEvent,
        subscription: &PushSubscription,
    ) -> anyhow::Result<Result<(PushMessage, u64), String>> {
        let Some(approval_id) = event.approval.clone().or_else(|| text(&event.data, "approvalId")) else {
            return Ok(Err("the event names no approval".into()));
        };
        let session_id = event.session.clone().or_else(|| text(&event.data, "sessionId")).unwrap_or_default();
        let now = spool_protocol::time::now_ms();
        let url = format!("/#/s/{session_id}");
        let summary = text(&event.data, "summary").unwrap_or_default();
        let tool = text(&event.data, "tool").unwrap_or_else(|| "a tool".into());
        let message = |kind: &str, title: String, body: String| PushMessage {
            v: 1,
            kind: kind.into(),
            approval_id: approval_id.clone(),
            session_id: session_id.clone(),
            title,
            body,
            url: url.clone(),
            token: None,
            actions: Vec::new(),
        };
        if event.kind == "approval.resolved" {
            let status = text(&event.data, "status").unwrap_or_else(|| "resolved".into());
            let body = match status.as_str() {
                "resolved" => match text(&event.data, "decision").as_deref() {
                    Some("reject") => "Denied".to_string(),
                    Some("output") => "Answered".into(),
                    _ => "Approved".into(),
                },
                "expired" => "Nobody answered in time".into(),
                other => other.to_string(),
            };
            return Ok(Ok((message("resolved", format!("Decided: {tool}"), body), 24 * 60 * 60)));
        }
        // A request or question: only while it still waits.
        let approval_id_typed: ApprovalId = match approval_id.parse() {
            Ok(id) => id,
            Err(_) => return Ok(Err("the event's approval id does not parse".into())),
        };
        let Some((approval, _)) = self.store.get_approval(&approval_id_typed).await? else {
            return Ok(Err("the approval is gone".into()));
        };
        if approval.status != ApprovalStatus::Pending {
            return Ok(Err("already decided".into()));
        }
        let ttl = ((approval.expires_at - now).max(0) / 1000) as u64;
        let body = if summary.is_empty() { spool_protocol::reach::summary(&approval) } else { summary };
        if event.kind == "question.asked" {
            return Ok(Ok((message("question", format!("{tool} asks you"), body), ttl)));
        }
        let mut message = message("approval", format!("Approve {tool}?"), body);
        let source = format!("push:{}", subscription.id);
        message.token =
            Some(self.mint_token(&approval_id, approval.owner_id.as_str(), &source, approval.expires_at, now).await?);
        message.actions = DECISIONS.iter().map(|d| d.to_string()).collect();
        Ok(Ok((message, ttl)))
    }

    /// A test push to one subscription, to see notifications work.
    pub async fn send_test(&self, subscription: &PushSubscription) -> Attempt {
        let message = PushMessage {
            v: 1,
            kind: "test".into(),
            approval_id: String::new(),
            session_id: String::new(),
            title: "Spool notifications work".into(),
            body: "This browser will be told when an approval waits for you.".into(),
            url: "/".into(),
            token: None,
            actions: Vec::new(),
        };
        self.send(subscription, &message, 60, "normal").await
    }

    /// Why the decision `event` is not pushed to `target`, if it is not: a browser is
    /// told of a decision only when it was told of the ask. Under `away` most asks are
    /// never pushed (someone at the page answered, or it was decided within the delay),
    /// and a "Decided" for one of those would be the very interruption `away` spares
    /// (the worker must show something for every push). An ask still being tried holds
    /// its decision back until it is settled, so the decision replaces what came.
    async fn untold(&self, event: &OutboxEvent, target: &str) -> Option<Attempt> {
        let id = event.approval.clone().or_else(|| text(&event.data, "approvalId"))?;
        let Ok(approval) = id.parse::<ApprovalId>() else {
            return Some(Attempt::Skipped { reason: "the event's approval id does not parse".into() });
        };
        match self.store.ask_delivery(&approval, target).await {
            Ok(Some(ask)) if ask.status == DeliveryStatus::Delivered => None,
            Ok(Some(ask)) if ask.status == DeliveryStatus::Pending && ask.attempts > 0 => {
                Some(Attempt::Retry { status: None, error: "its ask is still being pushed".into(), after: None })
            }
            Ok(_) => Some(Attempt::Skipped { reason: "this browser was not told of the ask".into() }),
            Err(e) => Some(Attempt::Retry { status: None, error: e.to_string(), after: None }),
        }
    }

    async fn watched(&self, session: &str) -> bool {
        let watched = self.watched.read().expect("not poisoned").clone();
        match (watched, session.parse::<SessionId>()) {
            (Some(watched), Ok(session)) => watched(session).await,
            _ => false,
        }
    }
}

/// The [`Channel`] for `push:<subscription>` targets.
pub struct PushChannel(pub Arc<WebPush>);

const PUSHED: [&str; 3] = ["approval.requested", "question.asked", "approval.resolved"];

#[async_trait::async_trait]
impl Channel for PushChannel {
    fn prefix(&self) -> &'static str {
        "push:"
    }

    async fn targets(&self, event: &OutboxEvent) -> anyhow::Result<Vec<(String, Millis)>> {
        if !PUSHED.contains(&event.kind.as_str()) || event.data.get("client") == Some(&serde_json::Value::Bool(true)) {
            return Ok(Vec::new());
        }
        let owner: UserId = event.owner.parse().map_err(|e| anyhow::anyhow!("the event's owner: {e}"))?;
        // An ask waits a little under `away`, so a person at the page answers first.
        let delay = match (self.0.config.when, event.kind.as_str()) {
            (PushWhen::Away, "approval.requested" | "question.asked") => self.0.config.delay_secs as Millis * 1000,
            _ => 0,
        };
        let subscriptions = self.0.store.push_subscriptions(&owner).await?;
        Ok(subscriptions.into_iter().map(|s| (format!("push:{}", s.id), event.created_at + delay)).collect())
    }

    async fn deliver(&self, event: &OutboxEvent, target: &str, _attempt: u32) -> Attempt {
        let Some(id) = target.strip_prefix("push:") else {
            return Attempt::Dead { status: None, reason: format!("not a push target: {target}") };
        };
        let subscription = match self.0.store.get_push_subscription(id).await {
            Ok(Some(subscription)) => subscription,
            Ok(None) => return Attempt::Skipped { reason: "the subscription is gone".into() },
            Err(e) => return Attempt::Retry { status: None, error: e.to_string(), after: None },
        };
        let asks = event.kind != "approval.resolved";
        if asks && self.0.config.when == PushWhen::Away {
            let session = event.session.clone().or_else(|| text(&event.data, "sessionId")).unwrap_or_default();
            if self.0.watched(&session).await {
                return Attempt::Skipped { reason: "someone is watching the session".into() };
            }
        }
        if !asks && let Some(skip) = self.0.untold(event, target).await {
            return skip;
        }
        match self.0.message_for(event, &subscription).await {
            Ok(Ok((message, ttl))) => {
                self.0.send(&subscription, &message, ttl, if asks { "high" } else { "normal" }).await
            }
            Ok(Err(reason)) => Attempt::Skipped { reason },
            Err(e) => Attempt::Retry { status: None, error: format!("{e:#}"), after: None },
        }
    }
}

/// RFC 8030 `Topic` for an approval: a newer push with the same topic replaces an
/// undelivered one, so "decided" replaces a waiting ask. At most 32 base64url
/// characters: the start of the id's SHA-256.
pub fn topic(approval_id: &str) -> String {
    B64.encode(Sha256::digest(approval_id.as_bytes()))[..32].to_string()
}

/// An error and its causes, one after another: reqwest's own text names only the URL,
/// the cause (a refused address, a TLS failure) is further down.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn text(data: &serde_json::Value, key: &str) -> Option<String> {
    data.get(key).and_then(serde_json::Value::as_str).map(str::to_owned)
}

/// A subscription's keys, if they are a P-256 point and a 16-byte secret.
fn browser_keys(p256dh: &str, auth: &str) -> Option<(p256::PublicKey, web_push_native::Auth)> {
    let public = p256::PublicKey::from_sec1_bytes(&B64.decode(p256dh.trim_end_matches('=')).ok()?).ok()?;
    let auth = B64.decode(auth.trim_end_matches('=')).ok()?;
    (auth.len() == 16).then(|| (public, web_push_native::Auth::clone_from_slice(&auth)))
}

/// A resolver that keeps only public addresses: a push endpoint's name that resolves
/// to loopback, a private network, link-local or shared address space reaches nothing.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(format!("{host} resolves to no public address").into());
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether an address is on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (a == 100 && (64..128).contains(&b))
                // Benchmarking, 198.18.0.0/15, and reserved, 240.0.0.0/4.
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local fc00::/7 and link-local fe80::/10.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(private.parse().expect("ip")), "{private}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(public.parse().expect("ip")), "{public}");
        }
    }

    #[test]
    fn a_topic_is_32_base64url_characters() {
        let t = topic("apr_01h");
        assert_eq!(t.len(), 32);
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(t, topic("apr_01h"));
    }
}
