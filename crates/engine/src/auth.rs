//! Users, bearer tokens, browser login sessions, and the rule that keeps auth on.
//!
//! A token is `spool_` plus 43 URL-safe characters (32 random bytes); the store keeps
//! only its SHA-256. A high-entropy secret needs no slow hash: there is nothing to
//! brute-force that is cheaper than guessing the token itself.
//!
//! Auth is sticky: creating the first token sets a durable flag in the store, and only
//! `spool auth disable` clears it ([`disable_auth`], refused while a server serves on a
//! non-loopback address). Revoking every token therefore locks everyone out instead of
//! opening the server. A server that itself listens on a non-loopback address never
//! serves with auth off, whatever the flag says (it fails closed). `spool token …` and
//! `spool auth …` write the store from another process, so the server re-reads the
//! flag at most once a second instead of caching it forever.
//!
//! Browsers never hold a token: `POST /api/login` trades one for a login session, a
//! random secret whose SHA-256 the store keeps with the token, the user and an expiry.
//! Logout ends it; revoking the token ends all of its login sessions.
//!
//! Open streams are cut when their credential stops working: each stream registers a
//! kill token under the credential it was opened with ([`Auth::watch_credential`]),
//! and a watcher polls the store twice a second for tokens revoked and login sessions
//! ended since its last look — by this process, the CLI or another node — and fires
//! their kill tokens.
//!
//! A **publisher token** (`spool token create --publisher NAME`) belongs to the
//! principal `publisher:NAME`, a user record no person can be (user names cannot hold
//! `:`): it may publish hub events and nothing else. [`Auth::authenticate_token`]
//! refuses it, so it can read no session and call no other data route, nor be traded
//! for a browser login; [`Auth::authenticate_principal`] tells the two kinds apart for
//! the publish route.
//!
//! All of this is one owned service, [`Auth`]: it holds the store and its own state and
//! knows nothing of sessions or runs. The engine owns one and hands it out
//! ([`Engine::auth`](crate::Engine::auth)).

use crate::Store;
use crate::error::{EngineError, Result};
use crate::store::{Listener, LoginSession};
use rand::RngCore;
use sha2::{Digest, Sha256};
// The wall clock, not the engine's `Clock` (see `clock.rs`): credentials are stamped
// and compared across processes — `spool token revoke`, `spool auth disable` and
// listener heartbeats are written by other processes and nodes with their own wall
// clocks, and a browser counts its login cookie's Max-Age on its own — so a clock one
// engine alone moved would disagree with every other reader. Nor does any test wait
// on it: a login lasts a week.
use spool_protocol::time::now_ms;
use spool_protocol::{ApiToken, LoginId, TokenId, UserId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Prefix of every Spool token, so a leaked one is recognizable in logs and scanners.
pub const TOKEN_PREFIX: &str = "spool_";
/// Prefix of a login session's secret (the cookie value): never taken for a token.
pub const LOGIN_PREFIX: &str = "spoollogin_";
/// How long a browser login lasts before the token must be entered again.
pub const LOGIN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a server looks for credentials revoked elsewhere: a revoked credential's
/// streams close within this (plus the connection's kill grace).
pub const REVOCATION_POLL: Duration = Duration::from_millis(500);
/// Each look re-reads this far back: a revocation stamped by a process whose clock is
/// a little behind, or committed late, is still seen, and a stream registered just
/// after its credential was cut (authenticated a moment before) is cut too.
const REVOCATION_LOOKBACK_MS: i64 = 5_000;
/// How often a serving node refreshes its listener record.
pub const LISTENER_HEARTBEAT: Duration = Duration::from_secs(5);
/// A listener record older than this belongs to a server that is gone (crashed).
pub const LISTENER_STALE_MS: i64 = 20_000;
const RECHECK_MS: i64 = 1_000;

/// What a request authenticated with, so its streams can be cut when that stops working.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// Auth is off: the local user; nothing to revoke.
    Local,
    /// A bearer token.
    Token(TokenId),
    /// A browser login session, which dies with its token too.
    Login { id: LoginId, token: TokenId },
}

impl Credential {
    /// The ids whose end cuts this credential's streams.
    fn keys(&self) -> Vec<String> {
        match self {
            Credential::Local => Vec::new(),
            Credential::Token(token) => vec![token.to_string()],
            Credential::Login { id, token } => vec![id.to_string(), token.to_string()],
        }
    }
}

/// Authentication and credentials: tokens, login sessions, the sticky "auth required"
/// flag (cached), the streams to cut per credential, and this node's listener record.
pub struct Auth {
    store: Arc<dyn Store>,
    /// This node's name in its listener record.
    node_id: String,
    required: AtomicBool,
    checked_at: AtomicI64,
    /// Set when this server listens on a non-loopback address: auth stays required.
    public: AtomicBool,
    watches: Arc<Mutex<Watches>>,
    /// Stops the listener heartbeat when the server stops serving.
    listener: Mutex<Option<(String, CancellationToken)>>,
}

/// Kill tokens of open streams by credential id. A std mutex: never held across an await.
#[derive(Default)]
struct Watches {
    next: u64,
    by_key: HashMap<String, HashMap<u64, CancellationToken>>,
}

/// Keeps a stream's kill token registered under its credential; dropping it (the
/// stream ended) unregisters it.
#[must_use = "the registration ends when this is dropped"]
pub struct CredentialWatch {
    watches: Arc<Mutex<Watches>>,
    keys: Vec<String>,
    id: u64,
}

impl Drop for CredentialWatch {
    fn drop(&mut self) {
        let mut watches = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        for key in &self.keys {
            if let Some(tokens) = watches.by_key.get_mut(key) {
                tokens.remove(&self.id);
                if tokens.is_empty() {
                    watches.by_key.remove(key);
                }
            }
        }
    }
}

/// Lower-case hex SHA-256.
pub fn hash_token(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn new_secret(prefix: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    // Base64url without padding, written out by hand to avoid a dependency for 20 lines.
    let mut out = String::from(prefix);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The user-name prefix of publisher principals (see the module doc).
pub const PUBLISHER_PREFIX: &str = "publisher:";

/// Who a bearer token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// A user: may use every data route for their own records.
    User { user: UserId, credential: Credential },
    /// A publisher (by its name, without the prefix): may publish hub events only.
    Publisher { name: String, credential: Credential },
}

fn check_name(name: &str, code: &'static str, what: &str) -> Result<()> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
        return Err(EngineError::invalid(
            code,
            format!("a {what} name is 1 to 64 characters: letters, digits, '-', '_', '.', '@'"),
        ));
    }
    Ok(())
}

/// Creates a publisher token for `name` (see the module doc): like a user's, it turns
/// auth on, and only its hash is stored.
pub async fn create_publisher_token(store: &dyn Store, name: &str) -> Result<(ApiToken, String)> {
    let name = name.trim();
    check_name(name, "invalid_publisher", "publisher")?;
    issue(store, &format!("{PUBLISHER_PREFIX}{name}")).await
}

/// Creates a token for `user_name` (the user is created on first use). Returns the
/// record and the secret, which is shown once and never stored. A free function over
/// the store, so `spool token create` works without starting an engine (which would
/// touch the runs of a server that is up). Auth is switched on first, so a failure
/// in between leaves auth on rather than a token that does not count.
pub async fn create_token(store: &dyn Store, user_name: &str) -> Result<(ApiToken, String)> {
    let name = user_name.trim();
    check_name(name, "invalid_user", "user")?;
    issue(store, name).await
}

async fn issue(store: &dyn Store, name: &str) -> Result<(ApiToken, String)> {
    let user_id = store.ensure_user(name).await?;
    let secret = new_secret(TOKEN_PREFIX);
    let token = ApiToken {
        id: TokenId::new(),
        user_id,
        user_name: name.to_owned(),
        hash: hash_token(&secret),
        created_at: now_ms(),
        revoked_at: None,
    };
    store.set_auth_enabled(true, token.created_at).await?;
    store.insert_token(&token).await?;
    Ok((token, secret))
}

/// Revokes a token; `NotFound` when there is no such unrevoked token. Auth stays on.
/// Servers notice within [`REVOCATION_POLL`] and close the token's streams.
pub async fn revoke_token(store: &dyn Store, id: &TokenId) -> Result<()> {
    if !store.revoke_token(id, now_ms()).await? {
        return Err(EngineError::NotFound("token"));
    }
    // The browsers subscribed to Web Push with it, or with its logins, are told
    // nothing more (and their notifications' decision tokens stop working).
    store.delete_push_subscriptions_of(id.as_str()).await?;
    Ok(())
}

/// Whether any unrevoked token exists.
pub async fn any_token(store: &dyn Store) -> Result<bool> {
    Ok(store.list_tokens().await?.iter().any(|t| t.revoked_at.is_none()))
}

/// The servers that serve on a non-loopback address now (their record is fresh).
pub async fn public_listeners(store: &dyn Store) -> Result<Vec<Listener>> {
    let fresh_after = now_ms() - LISTENER_STALE_MS;
    Ok(store.listeners().await?.into_iter().filter(|l| l.public && l.updated_at > fresh_after).collect())
}

/// Turns auth off (`spool auth disable`): refused with `Conflict` while any server
/// serves on a non-loopback address, which would then be open to the network.
pub async fn disable_auth(store: &dyn Store) -> Result<()> {
    let public = public_listeners(store).await?;
    if let Some(listener) = public.first() {
        return Err(EngineError::Conflict {
            code: "public_listener",
            message: format!(
                "a server (node {:?}) serves on {}, a non-loopback address; stop it or move it to a loopback \
                 address before turning auth off",
                listener.node_id, listener.addr
            ),
        });
    }
    store.set_auth_enabled(false, now_ms()).await?;
    Ok(())
}

impl Auth {
    pub(crate) fn new(store: Arc<dyn Store>, node_id: String) -> Arc<Self> {
        Arc::new(Auth {
            store,
            node_id,
            required: AtomicBool::default(),
            checked_at: AtomicI64::default(),
            public: AtomicBool::default(),
            watches: Arc::default(),
            listener: Mutex::default(),
        })
    }

    pub async fn create_token(&self, user_name: &str) -> Result<(ApiToken, String)> {
        let created = create_token(&*self.store, user_name).await?;
        self.required.store(true, Ordering::SeqCst);
        Ok(created)
    }

    pub async fn create_publisher_token(&self, name: &str) -> Result<(ApiToken, String)> {
        let created = create_publisher_token(&*self.store, name).await?;
        self.required.store(true, Ordering::SeqCst);
        Ok(created)
    }

    pub async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        Ok(self.store.list_tokens().await?)
    }

    /// Revokes a token and closes its streams on this node at once (other nodes
    /// notice through the store).
    pub async fn revoke_token(&self, id: &TokenId) -> Result<()> {
        revoke_token(&*self.store, id).await?;
        self.cut_credential(id.as_str());
        Ok(())
    }

    /// The user a bearer secret names, if it is a valid unrevoked token.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<UserId>> {
        Ok(self.authenticate_token(secret).await?.map(|(user, _)| user))
    }

    /// The user and credential of a bearer secret, if it is a valid unrevoked token of
    /// a user. A publisher token is refused (`Forbidden`): it may only publish.
    pub async fn authenticate_token(&self, secret: &str) -> Result<Option<(UserId, Credential)>> {
        match self.authenticate_principal(secret).await? {
            None => Ok(None),
            Some(Principal::User { user, credential }) => Ok(Some((user, credential))),
            Some(Principal::Publisher { .. }) => Err(EngineError::Forbidden {
                code: "publisher_token",
                message: "a publisher token can only publish hub events (POST /api/hub/events)".into(),
            }),
        }
    }

    /// Who a bearer secret names, if it is a valid unrevoked token.
    pub async fn authenticate_principal(&self, secret: &str) -> Result<Option<Principal>> {
        if !secret.starts_with(TOKEN_PREFIX) || secret.len() > 128 {
            return Ok(None);
        }
        let Some(token) = self.store.find_token(&hash_token(secret)).await? else { return Ok(None) };
        let credential = Credential::Token(token.id);
        Ok(Some(match token.user_name.strip_prefix(PUBLISHER_PREFIX) {
            Some(name) => Principal::Publisher { name: name.to_owned(), credential },
            None => Principal::User { user: token.user_id, credential },
        }))
    }

    /// The user and credential of a login cookie's secret, if its login session is
    /// usable: not ended, not expired, its token not revoked.
    pub async fn authenticate_login(&self, secret: &str) -> Result<Option<(UserId, Credential)>> {
        if !secret.starts_with(LOGIN_PREFIX) || secret.len() > 128 {
            return Ok(None);
        }
        let login = self.store.find_login(&hash_token(secret), now_ms()).await?;
        Ok(login.map(|l| (l.user_id, Credential::Login { id: l.id, token: l.token_id })))
    }

    /// Trades a token for a new login session: returns the user and the session's
    /// secret (for the cookie; only its hash is stored), or `None` for a bad token.
    pub async fn login(&self, token_secret: &str) -> Result<Option<(UserId, String)>> {
        let Some((user, Credential::Token(token))) = self.authenticate_token(token_secret).await? else {
            return Ok(None);
        };
        let secret = new_secret(LOGIN_PREFIX);
        let now = now_ms();
        let ttl = i64::try_from(LOGIN_TTL.as_millis()).expect("the login lifetime fits in i64 milliseconds");
        let login = LoginSession {
            id: LoginId::new(),
            token_id: token,
            user_id: user.clone(),
            hash: hash_token(&secret),
            created_at: now,
            expires_at: now + ttl,
            ended_at: None,
        };
        self.store.insert_login(&login).await?;
        Ok(Some((user, secret)))
    }

    /// Ends the login session a cookie's secret names (logout) and closes its streams
    /// on this node at once. False when it was not a usable login session.
    pub async fn logout(&self, secret: &str) -> Result<bool> {
        let Some((_, Credential::Login { id, .. })) = self.authenticate_login(secret).await? else {
            return Ok(false);
        };
        let ended = self.store.end_login(&id, now_ms()).await?;
        // This browser's Web Push subscription goes with its login.
        self.store.delete_push_subscriptions_of(id.as_str()).await?;
        self.cut_credential(id.as_str());
        Ok(ended)
    }

    /// Whether requests must authenticate: the store's sticky flag (re-read at most
    /// once a second), and always while this server listens on a public address.
    ///
    /// When the store cannot be read, the last answer it gave stands (and a call a
    /// second later asks again): the flag only ever goes from off to on, which takes a
    /// working store, and failing here would turn every request, `/api/health` and
    /// `/api/ready` included, into a 500 while the database is away. Before the store
    /// has answered once there is no last answer, and the error is returned.
    pub async fn auth_required(&self) -> Result<bool> {
        let auth = self;
        if auth.public.load(Ordering::SeqCst) {
            return Ok(true);
        }
        let now = now_ms();
        let checked_at = auth.checked_at.load(Ordering::SeqCst);
        // Once the first answer is in, one request a second re-reads it (the one that
        // moves `checked_at`) and the others keep the last answer meanwhile: thousands
        // of streams opening at once (the clients of a lost node coming back) each
        // re-reading it queued ahead of everything else for the store's few connections,
        // a run's writes among them (issue 43).
        let ours = now - checked_at >= RECHECK_MS
            && (checked_at == 0
                || auth.checked_at.compare_exchange(checked_at, now, Ordering::SeqCst, Ordering::SeqCst).is_ok());
        if ours {
            match self.store.auth_enabled().await {
                Ok(required) => {
                    auth.required.store(required, Ordering::SeqCst);
                    auth.checked_at.store(now, Ordering::SeqCst);
                }
                Err(e) if checked_at > 0 => {
                    tracing::warn!(error = %e, "could not re-read whether auth is on; keeping the last answer");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(auth.required.load(Ordering::SeqCst))
    }

    /// Registers a stream's kill token under the credential it was opened with: the
    /// token fires when the credential is revoked or ended, here or elsewhere. Keep
    /// the returned guard for as long as the stream lives.
    pub fn watch_credential(&self, credential: &Credential, kill: CancellationToken) -> CredentialWatch {
        let watches = self.watches.clone();
        let keys = credential.keys();
        let mut state = watches.lock().unwrap_or_else(|p| p.into_inner());
        state.next += 1;
        let id = state.next;
        for key in &keys {
            state.by_key.entry(key.clone()).or_default().insert(id, kill.clone());
        }
        drop(state);
        CredentialWatch { watches, keys, id }
    }

    /// Fires the kill tokens of every stream opened with credential `key`.
    fn cut_credential(&self, key: &str) {
        let tokens = {
            let mut watches = self.watches.lock().unwrap_or_else(|p| p.into_inner());
            watches.by_key.remove(key)
        };
        for token in tokens.into_iter().flat_map(HashMap::into_values) {
            token.cancel();
        }
    }

    /// Watches the store for credentials that stopped working and cuts their streams.
    /// Holds only a weak reference, so it ends with the engine.
    pub(crate) fn spawn_revocation_watch(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REVOCATION_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = now_ms();
            loop {
                tick.tick().await;
                let Some(auth) = weak.upgrade() else { return };
                let now = now_ms();
                let idle = auth.watches.lock().unwrap_or_else(|p| p.into_inner()).by_key.is_empty();
                if idle {
                    // No stream to cut; the look-back still covers one registered now.
                    last = now;
                    continue;
                }
                match auth.store.credentials_ended_since(last - REVOCATION_LOOKBACK_MS, now).await {
                    Ok(ended) => {
                        for id in ended {
                            auth.cut_credential(&id);
                        }
                        last = now;
                    }
                    Err(e) => tracing::warn!(error = %e, "could not look for revoked credentials"),
                }
            }
        });
    }

    /// Records that this node serves on `addr` and keeps the record fresh until
    /// [`withdraw_listener`](Self::withdraw_listener). On a non-loopback address auth
    /// is required from now on, whatever the store's flag says.
    pub async fn announce_listener(self: &Arc<Self>, addr: SocketAddr) -> Result<()> {
        let public = !addr.ip().is_loopback();
        if public {
            self.public.store(true, Ordering::SeqCst);
        }
        let node = self.node_id.clone();
        let record = Listener { node_id: node.clone(), addr: addr.to_string(), public, updated_at: now_ms() };
        self.store.record_listener(&record).await?;
        let stop = CancellationToken::new();
        let previous = self.listener.lock().unwrap_or_else(|p| p.into_inner()).replace((node, stop.clone()));
        if let Some((_, previous)) = previous {
            previous.cancel();
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(LISTENER_HEARTBEAT);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(auth) = weak.upgrade() else { return };
                let record = Listener { updated_at: now_ms(), ..record.clone() };
                if let Err(e) = auth.store.record_listener(&record).await {
                    tracing::warn!(error = %e, "could not refresh this server's listener record");
                }
            }
        });
        Ok(())
    }

    /// Forgets this node's listener record (it stopped serving).
    pub async fn withdraw_listener(&self) {
        let taken = self.listener.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((node, stop)) = taken {
            stop.cancel();
            if let Err(e) = self.store.remove_listener(&node).await {
                tracing::warn!(error = %e, "could not remove this server's listener record");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_long_random_and_url_safe() {
        let (a, b) = (new_secret(TOKEN_PREFIX), new_secret(TOKEN_PREFIX));
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert!(a[TOKEN_PREFIX.len()..].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(hash_token("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(!new_secret(LOGIN_PREFIX).starts_with(TOKEN_PREFIX), "a login secret is never taken for a token");
    }
}
