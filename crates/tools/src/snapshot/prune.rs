//! Pruning a shadow repository: libgit2 has no `git gc`, so the objects no snapshot
//! needs any more are found and deleted here.
//!
//! * **What is kept.** Every object reachable from a tree the caller names (the trees
//!   its records still point at), every blob the index holds, and the tree the index
//!   would write now. The index is the stat cache of the next snapshot: an unchanged
//!   file is not read again, and its cached subtrees are reused, so deleting one of
//!   the index's objects would make the next snapshot name an object that is gone.
//! * **The grace.** A loose object younger than `grace` is kept even when nothing
//!   names it: a snapshot's tree is written before its record reaches the store, and a
//!   revert saves a tree before its row is written.
//! * **Only loose objects.** Spool never packs these repositories, so objects live in
//!   `objects/xx/…` files; a pack (from a `git gc` someone ran by hand) is left alone.
//! * **Nothing half-known is deleted.** A named tree that cannot be walked (an object
//!   of it is missing or unreadable) stops the pass for that repository: what it needs
//!   cannot be told, so nothing goes. A named tree the repository never held (taken on
//!   another node) is skipped.
//!
//! A pass holds the project's lock, so no snapshot writes objects while it looks.

use super::{ShadowRepos, SnapshotError, open_or_create};
use git2::{ErrorCode, ObjectType, Oid, Repository};
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// What one pass removed from a repository.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Loose objects deleted.
    pub objects: u64,
    /// Their size on disk.
    pub bytes: u64,
}

impl ShadowRepos {
    /// The projects with a shadow repository here: the directories under the
    /// snapshots directory (none when it does not exist yet).
    pub fn projects(&self) -> Result<Vec<String>, SnapshotError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut projects = Vec::new();
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_dir()
                && let Some(name) = entry.file_name().to_str()
            {
                projects.push(name.to_owned());
            }
        }
        projects.sort();
        Ok(projects)
    }

    /// Deletes the loose objects of `project`'s repository that no tree in `keep`
    /// (nor the index) needs and that are older than `grace` (see the module docs).
    pub fn prune(&self, project: &str, keep: &[String], grace: Duration) -> Result<Pruned, SnapshotError> {
        let lock = self.lock(project);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let git_dir = self.git_dir(project);
        if !git_dir.join("HEAD").is_file() {
            return Ok(Pruned::default());
        }
        let repo = open_or_create(&git_dir)?;
        let needed = needed(&repo, keep)?;
        let cutoff = SystemTime::now().checked_sub(grace).unwrap_or(SystemTime::UNIX_EPOCH);
        delete_loose(&git_dir.join("objects"), &needed, cutoff)
    }

    /// Deletes `project`'s repository (its project was deleted).
    pub fn forget(&self, project: &str) -> Result<(), SnapshotError> {
        let lock = self.lock(project);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        match std::fs::remove_dir_all(self.git_dir(project)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// Every object the named trees and the index reach.
fn needed(repo: &Repository, keep: &[String]) -> Result<HashSet<Oid>, SnapshotError> {
    let mut needed = HashSet::new();
    let mut trees: Vec<Oid> = Vec::new();
    for name in keep {
        // A name that is not an object id, or a tree this repository never held,
        // needs nothing here.
        let Ok(id) = Oid::from_str(name) else { continue };
        match repo.find_tree(id) {
            Ok(_) => trees.push(id),
            Err(e) if e.code() == ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut index = repo.index()?;
    for entry in index.iter() {
        needed.insert(entry.id);
    }
    trees.push(index.write_tree()?);
    while let Some(id) = trees.pop() {
        if !needed.insert(id) {
            continue;
        }
        // A tree that cannot be read fails the pass: what it needs is unknown.
        let tree = repo.find_tree(id)?;
        for entry in tree.iter() {
            match entry.kind() {
                Some(ObjectType::Tree) => trees.push(entry.id()),
                Some(ObjectType::Blob) => {
                    needed.insert(entry.id());
                }
                // A gitlink names another repository's commit: nothing stored here.
                _ => {}
            }
        }
    }
    Ok(needed)
}

/// Deletes each `objects/xx/<38 hex>` file not in `needed` and last written before
/// `cutoff`.
fn delete_loose(objects: &Path, needed: &HashSet<Oid>, cutoff: SystemTime) -> Result<Pruned, SnapshotError> {
    let mut pruned = Pruned::default();
    for fan in std::fs::read_dir(objects)? {
        let fan = fan?;
        let Some(prefix) = fan.file_name().to_str().map(str::to_owned) else { continue };
        if prefix.len() != 2 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) || !fan.file_type()?.is_dir() {
            continue;
        }
        for object in std::fs::read_dir(fan.path())? {
            let object = object?;
            let Some(rest) = object.file_name().to_str().map(str::to_owned) else { continue };
            let Ok(id) = Oid::from_str(&format!("{prefix}{rest}")) else { continue };
            if rest.len() != 38 || needed.contains(&id) {
                continue;
            }
            let meta = object.metadata()?;
            if !meta.is_file() || meta.modified()? >= cutoff {
                continue;
            }
            std::fs::remove_file(object.path())?;
            pruned.objects += 1;
            pruned.bytes += meta.len();
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests;
