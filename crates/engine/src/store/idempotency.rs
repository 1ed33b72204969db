//! Idempotency keys: the first request with a key does the work and keeps its answer
//! byte for byte; a retry with the same key gets that answer instead of a second run.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Idempotency: Send + Sync + 'static {
    /// Reserves an idempotency key (unique per `scope` and `key`). The first caller gets
    /// `Claimed` and must later `complete_idempotency`; later callers get the kept
    /// answer, or `InProgress` while the first is still working.
    async fn claim_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: time::Millis,
    ) -> Result<IdempotencyClaim, StoreError>;
    /// Stores the answer for a claimed key, once, byte for byte: `Conflict` when the
    /// key has no open claim or already has an answer.
    async fn complete_idempotency(&self, scope: &str, key: &str, answer: &str) -> Result<(), StoreError>;
    /// Releases a claimed key whose request failed before it had a response to keep, so
    /// a retry can run it again.
    async fn release_idempotency(&self, scope: &str, key: &str) -> Result<(), StoreError>;
    /// Releases every claim still without a response that was made before
    /// `made_before`: claims whose request died with its process (a kill between claim
    /// and response). Returns the `(scope, key)` pairs released, so each can be logged.
    async fn release_open_claims(&self, made_before: time::Millis) -> Result<Vec<(String, String)>, StoreError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyClaim {
    Claimed,
    InProgress,
    /// The answer the first request kept (opaque to the store).
    Done(String),
}
