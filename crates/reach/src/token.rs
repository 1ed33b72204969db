//! Decision tokens: what a notification's Approve and Deny buttons (and a webhook's
//! decision links) carry, so a tap decides without a login.
//!
//! A token is a bearer capability, so it is as narrow as it can be: bound to one
//! approval, one user and the source that carried it (`push:<subscription>` or
//! `webhook:<name>`), allowing only the decisions it lists, expiring with the approval
//! (at most a day), and good once (its random `n` is claimed under the idempotency
//! scope [`USED_SCOPE`] by the route that spends it). Its form:
//!
//! ```text
//! v1.<base64url(payload JSON)>.<base64url(HMAC-SHA256(key, "spool-decision-v1." + payload))>
//! ```
//!
//! The key is `server_keys.decision`, shared by every node; deleting that row voids
//! every token issued.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use spool_protocol::time::Millis;

/// The `server_keys` row of the HMAC key.
pub const KEY_NAME: &str = "decision";

/// The idempotency scope a spent token's nonce is claimed under.
pub const USED_SCOPE: &str = "decision-token";

/// The longest a token lives: a day, or less when its approval expires sooner.
pub const MAX_LIFETIME_MS: Millis = 24 * 60 * 60 * 1000;

/// For an approval that never expires: a week, so an old notification does not stay a
/// capability for ever.
pub const NEVER_EXPIRING_LIFETIME_MS: Millis = 7 * 24 * 60 * 60 * 1000;

const VERSION: &str = "v1";
/// Signed before the payload, so a MAC made for anything else with this key (nothing
/// else uses it today) never passes as a token.
const CONTEXT: &[u8] = b"spool-decision-v1.";

/// What a token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionClaims {
    /// The approval it decides.
    #[serde(rename = "a")]
    pub approval: String,
    /// The user it decides as (the approval's owner when it was issued).
    #[serde(rename = "u")]
    pub user: String,
    /// The decisions it allows: `once`, `reject`.
    #[serde(rename = "d")]
    pub decisions: Vec<String>,
    /// Where it was sent: `push:<subscription id>` or `webhook:<name>`. A token whose
    /// source is gone (the subscription deleted, the webhook removed) is revoked.
    #[serde(rename = "s")]
    pub source: String,
    /// 16 random bytes, base64url: what marks it used.
    #[serde(rename = "n")]
    pub nonce: String,
    /// Unix milliseconds after which it is refused.
    #[serde(rename = "e")]
    pub expires_at: Millis,
}

impl DecisionClaims {
    /// Claims for deciding `approval` as `user` through `source`, with a fresh nonce,
    /// expiring with the approval but within [`MAX_LIFETIME_MS`] of `now`.
    pub fn new(
        approval: &str,
        user: &str,
        decisions: &[&str],
        source: &str,
        approval_expires: Millis,
        now: Millis,
    ) -> Self {
        let cap = match approval_expires >= spool_protocol::NEVER_EXPIRES {
            true => now + NEVER_EXPIRING_LIFETIME_MS,
            false => now + MAX_LIFETIME_MS,
        };
        DecisionClaims {
            approval: approval.into(),
            user: user.into(),
            decisions: decisions.iter().map(|d| d.to_string()).collect(),
            source: source.into(),
            nonce: B64.encode(rand::random::<[u8; 16]>()),
            expires_at: approval_expires.min(cap),
        }
    }
}

/// Why a token was refused before anything about its approval was looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token, or not one signed with this key (forged, altered, or issued
    /// before the key was rotated).
    #[error("the token is not valid")]
    Invalid,
}

/// The HMAC key tokens are signed with.
#[derive(Clone)]
pub struct TokenKey(Vec<u8>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(…)")
    }
}

impl TokenKey {
    pub fn new(secret: Vec<u8>) -> TokenKey {
        TokenKey(secret)
    }

    /// 32 fresh random bytes, for the first node to store.
    pub fn fresh_secret() -> Vec<u8> {
        rand::random::<[u8; 32]>().to_vec()
    }

    /// The token for `claims`.
    pub fn sign(&self, claims: &DecisionClaims) -> String {
        let payload = B64.encode(serde_json::to_vec(claims).expect("plain data serializes"));
        let mac = self.mac(&payload).finalize().into_bytes();
        format!("{VERSION}.{payload}.{}", B64.encode(mac))
    }

    /// The claims of a token this key signed; its expiry is the caller's to check
    /// (an expired token is told apart from a forged one).
    pub fn verify(&self, token: &str) -> Result<DecisionClaims, TokenError> {
        let mut parts = token.trim().split('.');
        let (Some(VERSION), Some(payload), Some(mac), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Invalid);
        };
        let mac = B64.decode(mac).map_err(|_| TokenError::Invalid)?;
        // `verify_slice` compares in constant time.
        self.mac(payload).verify_slice(&mac).map_err(|_| TokenError::Invalid)?;
        let json = B64.decode(payload).map_err(|_| TokenError::Invalid)?;
        serde_json::from_slice(&json).map_err(|_| TokenError::Invalid)
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(CONTEXT);
        mac.update(payload.as_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> DecisionClaims {
        DecisionClaims::new("apr_1", "usr_1", &["once", "reject"], "push:psub_1", 10_000_000, 1_000)
    }

    #[test]
    fn a_signed_token_verifies_and_says_what_it_was_signed_with() {
        let key = TokenKey::new(TokenKey::fresh_secret());
        let claims = claims();
        assert_eq!(key.verify(&key.sign(&claims)), Ok(claims));
    }

    #[test]
    fn another_key_an_altered_payload_or_garbage_is_invalid() {
        let key = TokenKey::new(TokenKey::fresh_secret());
        let token = key.sign(&claims());
        assert_eq!(TokenKey::new(TokenKey::fresh_secret()).verify(&token), Err(TokenError::Invalid));
        let mut forged = claims();
        forged.user = "usr_2".into();
        let forged_payload = B64.encode(serde_json::to_vec(&forged).expect("json"));
        let mac = token.rsplit('.').next().expect("mac");
        assert_eq!(key.verify(&format!("v1.{forged_payload}.{mac}")), Err(TokenError::Invalid));
        for garbage in ["", "v1", "v1..", "v2.a.b", &format!("{token}.x")] {
            assert_eq!(key.verify(garbage), Err(TokenError::Invalid), "{garbage:?}");
        }
    }

    #[test]
    fn a_token_expires_with_its_approval_and_within_a_day() {
        let now = 1_000;
        assert_eq!(claims().expires_at, 10_000_000, "the approval's expiry, sooner than a day");
        let late = DecisionClaims::new("a", "u", &["once"], "push:p", now + 7 * MAX_LIFETIME_MS, now);
        assert_eq!(late.expires_at, now + MAX_LIFETIME_MS);
        let never = DecisionClaims::new("a", "u", &["once"], "push:p", spool_protocol::NEVER_EXPIRES, now);
        assert_eq!(never.expires_at, now + NEVER_EXPIRING_LIFETIME_MS);
        assert_ne!(claims().nonce, claims().nonce, "each token has its own nonce");
    }
}
