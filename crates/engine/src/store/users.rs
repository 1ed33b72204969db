//! Users: the names that own everything else. Created on first use and never removed,
//! so an id, once handed out, names the same person for as long as the store lives.

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Users: Send + Sync + 'static {
    /// Returns the id of the user with this name, creating it on first use.
    async fn ensure_user(&self, name: &str) -> Result<UserId, StoreError>;

    /// The id of the user named `name`, if there is one (nothing is created): whom a
    /// hub audience may name.
    async fn user_id(&self, name: &str) -> Result<Option<UserId>, StoreError>;

    /// The name of user `id` (`None` for an unknown id): what the hub shows as a
    /// message's author.
    async fn user_name(&self, id: &UserId) -> Result<Option<String>, StoreError>;
}
