//! Users and bearer tokens.
//!
//! A token is `spool_` plus 43 URL-safe characters (32 random bytes); the store keeps
//! only its SHA-256. A high-entropy secret needs no slow hash: there is nothing to
//! brute-force that is cheaper than guessing the token itself.
//!
//! Auth is required as soon as one unrevoked token exists. `spool token create` may
//! run while a server is up, so the server re-checks the store at most once a second
//! instead of caching the answer forever.

use crate::Store;
use crate::engine::Engine;
use crate::error::{EngineError, Result};
use rand::RngCore;
use sha2::{Digest, Sha256};
use spool_protocol::time::now_ms;
use spool_protocol::{ApiToken, TokenId, UserId};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Prefix of every Spool token, so a leaked one is recognizable in logs and scanners.
pub const TOKEN_PREFIX: &str = "spool_";
const RECHECK_MS: i64 = 1_000;

/// The cached answer to "is auth required?".
#[derive(Default)]
pub(crate) struct AuthState {
    required: AtomicBool,
    checked_at: AtomicI64,
}

/// Lower-case hex SHA-256.
pub fn hash_token(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn new_secret() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    // Base64url without padding, written out by hand to avoid a dependency for 20 lines.
    let mut out = String::from(TOKEN_PREFIX);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Creates a token for `user_name` (the user is created on first use). Returns the
/// record and the secret, which is shown once and never stored. A free function over
/// the store, so `spool token create` works without starting an engine (which would
/// touch the runs of a server that is up).
pub async fn create_token(store: &dyn Store, user_name: &str) -> Result<(ApiToken, String)> {
    let name = user_name.trim();
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
        return Err(EngineError::invalid(
            "invalid_user",
            "a user name is 1 to 64 characters: letters, digits, '-', '_', '.', '@'",
        ));
    }
    let user_id = store.ensure_user(name).await?;
    let secret = new_secret();
    let token = ApiToken {
        id: TokenId::new(),
        user_id,
        user_name: name.to_owned(),
        hash: hash_token(&secret),
        created_at: now_ms(),
        revoked_at: None,
    };
    store.insert_token(&token).await?;
    Ok((token, secret))
}

/// Revokes a token; `NotFound` when there is no such unrevoked token.
pub async fn revoke_token(store: &dyn Store, id: &TokenId) -> Result<()> {
    if !store.revoke_token(id, now_ms()).await? {
        return Err(EngineError::NotFound("token"));
    }
    Ok(())
}

/// Whether any unrevoked token exists (so auth is on).
pub async fn any_token(store: &dyn Store) -> Result<bool> {
    Ok(store.list_tokens().await?.iter().any(|t| t.revoked_at.is_none()))
}

impl Engine {
    pub async fn create_token(&self, user_name: &str) -> Result<(ApiToken, String)> {
        let created = create_token(&*self.inner.store, user_name).await?;
        self.inner.auth.required.store(true, Ordering::SeqCst);
        Ok(created)
    }

    pub async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        Ok(self.inner.store.list_tokens().await?)
    }

    pub async fn revoke_token(&self, id: &TokenId) -> Result<()> {
        revoke_token(&*self.inner.store, id).await?;
        self.inner.auth.checked_at.store(0, Ordering::SeqCst);
        Ok(())
    }

    /// The user a bearer secret names, if it is a valid unrevoked token.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<UserId>> {
        if !secret.starts_with(TOKEN_PREFIX) || secret.len() > 128 {
            return Ok(None);
        }
        Ok(self.inner.store.find_token(&hash_token(secret)).await?.map(|t| t.user_id))
    }

    /// Whether requests must authenticate: true once any unrevoked token exists.
    pub async fn auth_required(&self) -> Result<bool> {
        let auth = &self.inner.auth;
        let now = now_ms();
        if now - auth.checked_at.load(Ordering::SeqCst) >= RECHECK_MS {
            auth.required.store(any_token(&*self.inner.store).await?, Ordering::SeqCst);
            auth.checked_at.store(now, Ordering::SeqCst);
        }
        Ok(auth.required.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_random_and_url_safe() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert!(a[TOKEN_PREFIX.len()..].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(hash_token("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
