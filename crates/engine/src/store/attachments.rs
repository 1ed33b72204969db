//! Attachments (issue 42): one row per use of a stored file by a user. The bytes are a
//! blob in the data directory, named by their SHA-256 (see [`crate::attachments`]); the
//! rows say who may read them and which session holds them.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Attachments: Send + Sync + 'static {
    async fn insert_attachment(&self, attachment: &Attachment) -> Result<(), StoreError>;
    /// One attachment by id, whoever owns it (the engine checks the owner).
    async fn get_attachment(&self, id: &AttachmentId) -> Result<Option<Attachment>, StoreError>;
    /// Binds an unbound attachment to `session`; `false` when it is not unbound (gone,
    /// or already bound, perhaps by a prompt racing this one).
    async fn bind_attachment(&self, id: &AttachmentId, session: &SessionId) -> Result<bool, StoreError>;
    /// Deletes one attachment row; `false` when it was not there.
    async fn delete_attachment(&self, id: &AttachmentId) -> Result<bool, StoreError>;
    /// Deletes an attachment only while it is unbound (an upload no prompt used); `false`
    /// when it is bound (perhaps by a prompt racing this) or gone.
    async fn delete_unbound_attachment(&self, id: &AttachmentId) -> Result<bool, StoreError>;
    /// Deletes every unbound attachment created before `before` (uploads never sent);
    /// the SHA-256 of each row deleted, for the engine to release their blobs.
    async fn delete_unbound_attachments_before(&self, before: time::Millis) -> Result<Vec<String>, StoreError>;
    /// Bytes of every attachment row `owner` holds (a blob shared by two rows counts twice).
    async fn attachment_bytes(&self, owner: &UserId) -> Result<u64, StoreError>;
    /// The SHA-256 of every attachment bound to `session`: the blobs its deletion may free.
    async fn session_attachment_shas(&self, session: &SessionId) -> Result<Vec<String>, StoreError>;
    /// Whether any row still names the blob `sha256`.
    async fn blob_in_use(&self, sha256: &str) -> Result<bool, StoreError>;
}

/// A stored file as one user holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    pub id: AttachmentId,
    pub owner_id: UserId,
    /// The session a prompt bound it to; `None` for an upload not sent yet.
    pub session_id: Option<SessionId>,
    pub sha256: String,
    pub size: u64,
    pub media_type: String,
    pub name: String,
    pub created_at: time::Millis,
}
