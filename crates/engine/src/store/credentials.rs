//! Credentials: API tokens, the browser login sessions made from them, and the sticky
//! flag that says whether auth is on. Only hashes are kept: the secrets themselves
//! leave the server once, when they are made.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Credentials: Send + Sync + 'static {
    /// Stores a new token (its hash) for a user.
    async fn insert_token(&self, token: &ApiToken) -> Result<(), StoreError>;
    /// The unrevoked token with this hash, if any.
    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>, StoreError>;
    /// Every token, revoked ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError>;
    /// Revokes a token; false if there is no such unrevoked token. Its login sessions
    /// stop working with it (`find_login` checks the token).
    async fn revoke_token(&self, id: &TokenId, at: time::Millis) -> Result<bool, StoreError>;

    /// Whether auth is on: set when the first token is created, cleared only by
    /// `spool auth disable`. False in a store that never had a token.
    async fn auth_enabled(&self) -> Result<bool, StoreError>;
    /// Sets the sticky auth flag.
    async fn set_auth_enabled(&self, enabled: bool, at: time::Millis) -> Result<(), StoreError>;
    /// Stores a new browser login session (the hash of its secret).
    async fn insert_login(&self, login: &LoginSession) -> Result<(), StoreError>;
    /// The login session with this secret hash if it is usable at `now`: not ended,
    /// not expired, and its token not revoked.
    async fn find_login(&self, hash: &str, now: time::Millis) -> Result<Option<LoginSession>, StoreError>;
    /// Ends a login session (logout); false when it had already ended or does not exist.
    async fn end_login(&self, id: &LoginId, at: time::Millis) -> Result<bool, StoreError>;
    /// The ids (token and login-session ids) of every credential that stopped working
    /// after `since`: tokens revoked and login sessions ended after it, and login
    /// sessions that expired in `(since, now]`. How running servers notice revocations
    /// made by another process or node, cheaply (indexed by time).
    async fn credentials_ended_since(&self, since: time::Millis, now: time::Millis) -> Result<Vec<String>, StoreError>;
}

/// A browser login: the cookie holds a random secret, the store its SHA-256, so a
/// logout or a revocation can end it server-side. It acts as `user_id` through
/// `token_id` and never outlives `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSession {
    pub id: LoginId,
    pub token_id: TokenId,
    pub user_id: UserId,
    /// Lower-case hex SHA-256 of the cookie's secret.
    pub hash: String,
    pub created_at: time::Millis,
    pub expires_at: time::Millis,
    pub ended_at: Option<time::Millis>,
}
