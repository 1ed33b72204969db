//! Projects: registered directories, one per owner and path.

use crate::error::db_error;
use crate::rows;
use spool_engine::StoreError;
use spool_protocol::{Project, ProjectId, UserId};
use sqlx::SqlitePool;

pub(crate) async fn insert(pool: &SqlitePool, project: &Project) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO projects (id, owner_id, name, path, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)")
        .bind(project.id.as_str())
        .bind(project.owner_id.as_str())
        .bind(&project.name)
        .bind(&project.path)
        .bind(project.created_at)
        .bind(project.updated_at)
        .execute(pool)
        .await
        .map_err(|e| match db_error(e) {
            StoreError::Conflict(_) => StoreError::Conflict(format!("project {} is already registered", project.path)),
            other => other,
        })?;
    Ok(())
}

pub(crate) async fn list(pool: &SqlitePool, owner: &UserId) -> Result<Vec<Project>, StoreError> {
    // The id breaks ties between projects created in the same millisecond; ids sort
    // by creation time, so the order stays oldest first.
    sqlx::query(
        "SELECT id, owner_id, name, path, created_at, updated_at FROM projects
         WHERE owner_id = ? ORDER BY created_at, id",
    )
    .bind(owner.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::project)
    .collect()
}

pub(crate) async fn get(pool: &SqlitePool, id: &ProjectId) -> Result<Option<Project>, StoreError> {
    sqlx::query("SELECT id, owner_id, name, path, created_at, updated_at FROM projects WHERE id = ?")
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::project)
        .transpose()
}

pub(crate) async fn update(pool: &SqlitePool, project: &Project) -> Result<(), StoreError> {
    sqlx::query("UPDATE projects SET name = ?, updated_at = ? WHERE id = ?")
        .bind(&project.name)
        .bind(project.updated_at)
        .bind(project.id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Sessions, and through them messages, parts and runs, go with the project by
/// `ON DELETE CASCADE`, inside this one statement.
pub(crate) async fn delete(pool: &SqlitePool, id: &ProjectId) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM projects WHERE id = ?").bind(id.as_str()).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}
