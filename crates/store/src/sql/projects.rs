//! Projects: registered directories, one per owner and path.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows;
use spool_engine::StoreError;
use spool_protocol::{Project, ProjectId, UserId};

pub(crate) async fn insert(pool: &Pool, project: &Project) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO projects (id, owner_id, name, path, created_at, updated_at, dir_dev, dir_ino)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(project.id.as_str())
    .bind(project.owner_id.as_str())
    .bind(&project.name)
    .bind(&project.path)
    .bind(project.created_at)
    .bind(project.updated_at)
    // Both columns are signed 64-bit: the numbers are kept bit for bit.
    .bind(project.dir.map(|d| d.dev as i64))
    .bind(project.dir.map(|d| d.ino as i64))
    .execute(pool)
    .await
    .map_err(|e| match db_error(e) {
        StoreError::Conflict(_) => StoreError::Conflict(format!("project {} is already registered", project.path)),
        other => other,
    })?;
    Ok(())
}

/// Oldest first. The id breaks ties between projects created in the same millisecond;
/// ids sort by creation time, so the order stays oldest first.
pub(crate) async fn list(pool: &Pool, owner: &UserId) -> Result<Vec<Project>, StoreError> {
    sqlx::query(
        "SELECT id, owner_id, name, path, created_at, updated_at, dir_dev, dir_ino FROM projects
         WHERE owner_id = $1 ORDER BY created_at, id",
    )
    .bind(owner.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::project)
    .collect()
}

/// Every owner's projects, oldest first (registration compares a new directory with
/// them; a directory belongs to one user).
pub(crate) async fn all(pool: &Pool) -> Result<Vec<Project>, StoreError> {
    sqlx::query(
        "SELECT id, owner_id, name, path, created_at, updated_at, dir_dev, dir_ino FROM projects
         ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::project)
    .collect()
}

/// Projects at `path`, under it or above it: equal, or one path followed by `/` starts
/// the other (`substr`, not `LIKE`, so `%` and `_` in a path are just characters).
pub(crate) async fn overlapping(pool: &Pool, path: &str) -> Result<Vec<Project>, StoreError> {
    sqlx::query(
        "SELECT id, owner_id, name, path, created_at, updated_at, dir_dev, dir_ino FROM projects
         WHERE path = $1 OR substr(path, 1, length($1) + 1) = $1 || '/'
            OR substr($1, 1, length(path) + 1) = path || '/'
         ORDER BY created_at, id",
    )
    .bind(path)
    .fetch_all(pool)
    .await
    .map_err(db_error)?
    .iter()
    .map(rows::project)
    .collect()
}

pub(crate) async fn get(pool: &Pool, id: &ProjectId) -> Result<Option<Project>, StoreError> {
    sqlx::query("SELECT id, owner_id, name, path, created_at, updated_at, dir_dev, dir_ino FROM projects WHERE id = $1")
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
        .map_err(db_error)?
        .as_ref()
        .map(rows::project)
        .transpose()
}

pub(crate) async fn update(pool: &Pool, project: &Project) -> Result<(), StoreError> {
    sqlx::query("UPDATE projects SET name = $1, updated_at = $2 WHERE id = $3")
        .bind(&project.name)
        .bind(project.updated_at)
        .bind(project.id.as_str())
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Sessions, and through them messages, parts, runs and the rest, go with the project
/// by `ON DELETE CASCADE`, inside this one statement.
pub(crate) async fn delete(pool: &Pool, id: &ProjectId) -> Result<bool, StoreError> {
    let done =
        sqlx::query("DELETE FROM projects WHERE id = $1").bind(id.as_str()).execute(pool).await.map_err(db_error)?;
    Ok(done.rows_affected() > 0)
}
