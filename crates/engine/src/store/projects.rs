//! Projects: a user's registered directories, the root of every session, message, run
//! and approval under them (deleting one deletes all of those).

use super::error::StoreError;
use async_trait::async_trait;
use spool_protocol::*;

#[async_trait]
pub trait Projects: Send + Sync + 'static {
    /// Inserts a project. `Conflict` when the owner already registered that path.
    async fn insert_project(&self, project: &Project) -> Result<(), StoreError>;
    /// The owner's projects, oldest first.
    async fn list_projects(&self, owner: &UserId) -> Result<Vec<Project>, StoreError>;
    /// Every user's projects, oldest first: what a new registration is compared with,
    /// because a directory belongs to one user (see `crate::overlap`).
    async fn all_projects(&self) -> Result<Vec<Project>, StoreError>;
    /// Every project, of any owner, whose path is `path`, lies under it or holds it (by
    /// the text of the paths, which are canonical): what a prompt checks its project
    /// against, cheaply, when it starts a run.
    async fn projects_overlapping(&self, path: &str) -> Result<Vec<Project>, StoreError>;
    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError>;
    /// Writes `name` and `updated_at`.
    async fn update_project(&self, project: &Project) -> Result<(), StoreError>;
    /// Deletes the project with all its sessions, messages, runs and approvals. False if absent.
    async fn delete_project(&self, id: &ProjectId) -> Result<bool, StoreError>;
}
