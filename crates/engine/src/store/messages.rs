//! Messages: a session's committed messages, each at its own index, appended and never
//! rewritten.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Messages: Send + Sync + 'static {
    /// Appends a committed message (with its parts). `Conflict` if the index is taken.
    async fn insert_message(
        &self,
        session: &SessionId,
        owner: &UserId,
        message: &IndexedMessage,
    ) -> Result<(), StoreError>;
    /// Up to `limit` messages with `index < before` (all when `before` is `None`),
    /// the latest ones, returned in ascending index order.
    async fn list_messages(
        &self,
        session: &SessionId,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<IndexedMessage>, StoreError>;
    /// Number of committed messages in the session.
    async fn count_messages(&self, session: &SessionId) -> Result<u64, StoreError>;
    /// The messages from the `rounds`-th last user message to the end, ascending
    /// (everything when the session has fewer user messages).
    async fn latest_rounds(&self, session: &SessionId, rounds: usize) -> Result<Vec<IndexedMessage>, StoreError>;
    /// Copies `from`'s messages with `index < before` into `to` (owned by `owner`) at the
    /// same indices, each with a new message id and its parts, in one transaction: a
    /// fork holds all of them or none. Returns how many were copied.
    async fn copy_messages(
        &self,
        from: &SessionId,
        to: &SessionId,
        owner: &UserId,
        before: u64,
    ) -> Result<u64, StoreError>;
}
