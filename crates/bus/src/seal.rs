//! Every message a node writes to Redis carries an HMAC-SHA256 under the cluster's key,
//! and a node takes nothing from Redis that does not verify: Redis is shared ground that
//! more than Spool's nodes may reach (a command run by an agent on a node, in the
//! security review, wrote a `session.state` into a session's stream that the victim's
//! browser showed), so a frame read from it must prove a node wrote it.
//!
//! A sealed message is the 32-byte tag followed by the message as before. The tag covers
//! the message's *scope* — the Redis name it belongs to: a session's stream log, a hub
//! channel's log, the cluster channel — and its bytes, so a genuine frame of one session
//! cannot be replayed into another session, or a cluster message into a session. The
//! scope goes in length-prefixed, so no scope and body can be cut differently into the
//! same input.
//!
//! What the tag does not cover: the `<epoch>:<seq>` a frame is given inside Redis (the
//! publish script numbers frames atomically, and the key never goes to Redis), so one
//! who can write to Redis can still repeat an earlier genuine frame *of the same
//! session* at another seq, or delete frames; it cannot make up a frame or move one
//! between sessions. Keeping commands away from Redis is the sandbox's part.
//!
//! A message that fails verification is dropped as if it had been lost (the bus's gap
//! filling then reads the log, and a log entry that fails turns the listener's replay
//! into a snapshot), counted in [`ClusterKey::rejected`], and logged once per key: an
//! attacker who floods Redis must not flood the logs too.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes of a tag (HMAC-SHA256), at the front of every sealed message.
pub const TAG_LEN: usize = 32;
/// The shortest key accepted: 32 bytes, the hash's own size (`openssl rand -hex 32`
/// gives 64 characters).
pub const MIN_KEY_LEN: usize = 32;

/// The key every node of one deployment shares, with the count of messages it refused.
/// A cheap `Clone`; the bus and the cluster channel of one node share one, so the count
/// covers both. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct ClusterKey {
    shared: Arc<Shared>,
}

struct Shared {
    /// Keyed once; each tag clones it (a copy of the hash state, no re-keying).
    mac: Hmac<Sha256>,
    rejected: AtomicU64,
    warned: AtomicBool,
}

/// A key shorter than [`MIN_KEY_LEN`].
#[derive(Debug, thiserror::Error)]
#[error("the cluster key has {0} bytes; it needs at least {MIN_KEY_LEN} (e.g. `openssl rand -hex 32`)")]
pub struct KeyTooShort(pub usize);

impl ClusterKey {
    /// A key from its secret bytes (at least [`MIN_KEY_LEN`]).
    pub fn new(secret: &[u8]) -> Result<ClusterKey, KeyTooShort> {
        if secret.len() < MIN_KEY_LEN {
            return Err(KeyTooShort(secret.len()));
        }
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
        Ok(ClusterKey { shared: Arc::new(Shared { mac, rejected: AtomicU64::new(0), warned: AtomicBool::new(false) }) })
    }

    /// Fresh secret bytes for a new deployment's key: 32 random bytes.
    pub fn generate() -> Vec<u8> {
        use rand::RngCore;
        let mut secret = vec![0u8; MIN_KEY_LEN];
        rand::rng().fill_bytes(&mut secret);
        secret
    }

    /// Messages read from Redis that failed verification and were dropped, since start.
    pub fn rejected(&self) -> u64 {
        self.shared.rejected.load(Ordering::Relaxed)
    }

    fn keyed(&self, scope: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.shared.mac.clone();
        mac.update(&(scope.len() as u64).to_be_bytes());
        mac.update(scope.as_bytes());
        mac.update(body);
        mac
    }

    /// `body` with its tag in front, for `scope` (the Redis name it is written to).
    pub fn seal(&self, scope: &str, body: &[u8]) -> Bytes {
        let tag = self.keyed(scope, body).finalize().into_bytes();
        let mut sealed = Vec::with_capacity(TAG_LEN + body.len());
        sealed.extend_from_slice(&tag);
        sealed.extend_from_slice(body);
        Bytes::from(sealed)
    }

    /// The body of a message sealed for `scope` with this key; `None` (counted, and
    /// logged the first time) for anything else.
    pub fn open(&self, scope: &str, sealed: &Bytes) -> Option<Bytes> {
        if sealed.len() >= TAG_LEN {
            let (tag, body) = sealed.split_at(TAG_LEN);
            // `verify_slice` compares in constant time.
            if self.keyed(scope, body).verify_slice(tag).is_ok() {
                return Some(sealed.slice(TAG_LEN..));
            }
        }
        self.refused(scope);
        None
    }

    /// Counts (and the first time logs) a message that did not verify.
    pub(crate) fn refused(&self, scope: &str) {
        self.shared.rejected.fetch_add(1, Ordering::Relaxed);
        if !self.shared.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                scope,
                "dropped a message on the Redis bus that no node with this cluster key wrote (forged, or \
                 written by a node with another key); further ones are only counted \
                 (spool_bus_rejected_messages_total)"
            );
        }
    }
}

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ClusterKey {
        ClusterKey::new(&[byte; MIN_KEY_LEN]).expect("long enough")
    }

    #[test]
    fn a_sealed_message_opens_only_in_its_scope_under_its_key() {
        let (ours, theirs) = (key(1), key(2));
        let sealed = ours.seal("spool:{ses_a}:log", b"frame");
        assert_eq!(ours.open("spool:{ses_a}:log", &sealed).as_deref(), Some(&b"frame"[..]));
        assert_eq!(ours.open("spool:{ses_b}:log", &sealed), None, "another session");
        assert_eq!(theirs.open("spool:{ses_a}:log", &sealed), None, "another key");
        let mut altered = sealed.to_vec();
        *altered.last_mut().expect("not empty") ^= 1;
        assert_eq!(ours.open("spool:{ses_a}:log", &Bytes::from(altered)), None, "altered");
        assert_eq!(ours.open("spool:{ses_a}:log", &Bytes::from_static(b"[1,2,{}]")), None, "unsealed");
        assert_eq!(ours.rejected(), 3);
        assert_eq!(theirs.rejected(), 1);
    }

    #[test]
    fn scope_and_body_cannot_be_recut() {
        let k = key(3);
        let sealed = k.seal("ab", b"c");
        let body_tag = &sealed[..TAG_LEN];
        let recut = k.seal("a", b"bc");
        assert_ne!(body_tag, &recut[..TAG_LEN]);
    }

    #[test]
    fn short_keys_are_refused_and_never_shown() {
        assert!(ClusterKey::new(b"short").is_err());
        assert_eq!(format!("{:?}", key(4)), "ClusterKey(…)");
        assert_eq!(ClusterKey::generate().len(), MIN_KEY_LEN);
        assert_ne!(ClusterKey::generate(), ClusterKey::generate());
    }
}
