//! Web Push (issue 41): the browsers that asked to be told when something waits for
//! their person, and the secrets every node of a deployment shares (the VAPID key pair
//! that signs pushes, the key of decision tokens).

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Push: Send + Sync + 'static {
    /// The shared secret named `name`, stored once: the first caller's `fresh` is kept
    /// and every caller, then and later, on any node, gets the one kept.
    async fn server_key(&self, name: &str, fresh: &[u8], now: time::Millis) -> Result<Vec<u8>, StoreError>;
    /// Forgets the secret named `name` (rotation: the next `server_key` stores a new one).
    async fn delete_server_key(&self, name: &str) -> Result<bool, StoreError>;

    /// Stores a browser's subscription, or — its endpoint already known — updates that
    /// row's owner, keys and credential in place, keeping its id. Returns the row kept.
    async fn save_push_subscription(&self, subscription: &PushSubscription) -> Result<PushSubscription, StoreError>;
    /// One subscription by id, whoever owns it.
    async fn get_push_subscription(&self, id: &str) -> Result<Option<PushSubscription>, StoreError>;
    /// The owner's subscriptions, oldest first.
    async fn push_subscriptions(&self, owner: &UserId) -> Result<Vec<PushSubscription>, StoreError>;
    /// Removes one; false when it was not there.
    async fn delete_push_subscription(&self, id: &str) -> Result<bool, StoreError>;
    /// Removes those a credential made: a login session's (logout), or a token's and
    /// its login sessions' (revocation).
    async fn delete_push_subscriptions_of(&self, login_id: &str) -> Result<u64, StoreError>;
    /// Records a try: a success sets `last_ok_at` and clears `failures`, a failure
    /// counts one more.
    async fn record_push_attempt(&self, id: &str, ok: bool, at: time::Millis) -> Result<(), StoreError>;
}

/// A browser's push subscription (`PushSubscription.toJSON()` plus who made it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSubscription {
    /// `psub_<ulid>`.
    pub id: String,
    pub owner_id: UserId,
    /// The credential it was made with, if any (none while auth is off).
    pub login_id: Option<String>,
    /// The push service's URL for this browser (RFC 8030), chosen by the browser.
    pub endpoint: String,
    /// The browser's P-256 public key, base64url (RFC 8291 `ua_public`).
    pub p256dh: String,
    /// The browser's 16-byte auth secret, base64url.
    pub auth: String,
    pub user_agent: Option<String>,
    pub created_at: time::Millis,
    pub last_ok_at: Option<time::Millis>,
    pub failures: u32,
}
