//! A directory belongs to one user: a project may not be, hold, or lie inside a
//! directory another user registered, and with tokens a root that every user shares
//! (`--workspace-root`) is never a project itself.
//!
//! Why: the roots say where a user may register projects, but a root shared by several
//! users (`--workspace-root`, given to everyone) holds every user's projects side by
//! side. Without this, a user could register another user's project directory (or a
//! directory inside it, or one holding it, or the root itself) and have their own
//! tools write there. Sharing a directory on purpose is not a thing Spool has: an
//! operator who wants users kept apart gives each a root of their own (`[users.NAME]
//! roots`), and users who work on one tree register it once, as one user.
//!
//! Directories are compared both by canonical path and by device and inode, so a bind
//! mount or a second name for the same directory is caught as well as a path prefix.
//! Each comparison looks at the directory and all its ancestors. Registrations on this
//! node are serialized, so two users racing for one directory cannot both win; two
//! nodes of a cluster registering at the very same moment can (the store has no
//! constraint that sees overlap). Both refusals are 403s (`shared_root`,
//! `directory_taken`): a 409 would read as "you registered it already" to the
//! dialects that find the caller's own project on a conflict.

use crate::engine::Engine;
use crate::error::{EngineError, Result};
use spool_protocol::{Project, ProjectId, UserId};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A directory's identity on this machine.
type Identity = (u64, u64);

fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// What the new directory is compared with.
pub(crate) struct Claims {
    /// Other users' project directories, canonical as registered.
    pub others: Vec<PathBuf>,
    /// Roots that are not only the registering user's: a project may not be one, nor
    /// hold one (empty with auth off: there is one user).
    pub shared_roots: Vec<PathBuf>,
}

/// Whether `candidate` (canonical) may be registered, given `claims`. Blocking: it
/// reads the file system.
pub(crate) fn check(candidate: &Path, claims: &Claims) -> Result<()> {
    let shown = candidate.display();
    let own = identity(candidate);
    // The candidate and every directory above it, by identity.
    let above: HashSet<Identity> = candidate.ancestors().filter_map(identity).collect();
    // Whether `other` is the candidate or lies inside it: `other` or one of its
    // ancestors is the candidate, by path or by identity.
    let holds = |other: &Path| {
        other.starts_with(candidate) || own.is_some_and(|id| other.ancestors().any(|a| identity(a) == Some(id)))
    };
    // Whether the candidate lies inside `other` (or is it).
    let inside = |other: &Path| candidate.starts_with(other) || identity(other).is_some_and(|id| above.contains(&id));
    if claims.shared_roots.iter().any(|root| holds(root)) {
        return Err(EngineError::Forbidden {
            code: "shared_root",
            message: format!(
                "{shown:?} is, or holds, a project root that other users share: register a directory inside \
                 it instead (each project one user's own)"
            ),
        });
    }
    if claims.others.iter().any(|other| holds(other) || inside(other)) {
        return Err(EngineError::Forbidden {
            code: "directory_taken",
            message: format!(
                "{shown:?} is, holds, or lies inside a directory another user registered as a project; a \
                 directory belongs to one user: choose another, or ask the operator for a root of your own"
            ),
        });
    }
    Ok(())
}

impl Engine {
    /// Whether a user other than `owner` holds (or held) a token. Publisher tokens
    /// belong to `publisher:NAME` principals, which are not users.
    async fn another_token_holder(&self, owner: &UserId) -> Result<bool> {
        let tokens = self.store().list_tokens().await?;
        Ok(tokens.iter().any(|t| &t.user_id != owner && !t.user_name.starts_with(crate::auth::PUBLISHER_PREFIX)))
    }

    /// Refuses `canonical` as a project of `owner` when it overlaps another user's
    /// project or a shared root (see the module doc). The caller holds
    /// [`registering`](crate::engine::Inner::registering) until the project is stored.
    pub(crate) async fn check_claims(&self, owner: &UserId, canonical: &str, auth_on: bool) -> Result<()> {
        let others: Vec<PathBuf> = (self.store().all_projects().await?.into_iter())
            .filter(|p| &p.owner_id != owner)
            .map(|p| PathBuf::from(p.path))
            .collect();
        // A global root is shared once another user can use it: another project owner,
        // or another user holding a token (publishers are not users). A single user
        // behind a token may register the root itself (the usual one-person set-up);
        // whoever comes later cannot register inside that project (`directory_taken`).
        let global_shared = auth_on && (!others.is_empty() || self.another_token_holder(owner).await?);
        let shared_roots =
            if auth_on { self.inner.fence.roots_shared_with_others(owner, global_shared) } else { Vec::new() };
        let claims = Claims { others, shared_roots };
        let candidate = PathBuf::from(canonical);
        tokio::task::spawn_blocking(move || check(&candidate, &claims))
            .await
            .map_err(|e| EngineError::invalid("invalid_path", format!("checking the path failed: {e}")))?
    }
}

impl Engine {
    /// Refuses tools in `project` (a project of `owner`) when its directory overlaps a
    /// project another user registered earlier, or is a shared root: projects stored
    /// before these rules existed are judged again when a prompt starts a run, like
    /// projects outside the roots. The earlier registration keeps working. By the text
    /// of the canonical paths, which one indexed query answers.
    pub(crate) async fn check_claims_at_run(&self, owner: &UserId, project: &ProjectId, auth_on: bool) -> Result<()> {
        let Some(ours) = self.store().get_project(project).await? else { return Ok(()) };
        let earlier = |p: &Project| (p.created_at, p.id.as_str()) < (ours.created_at, ours.id.as_str());
        let overlapping = self.store().projects_overlapping(&ours.path).await?;
        if overlapping.iter().any(|p| &p.owner_id != owner && earlier(p)) {
            return Err(EngineError::Forbidden {
                code: "directory_taken",
                message: format!(
                    "this project's directory {:?} is, holds, or lies inside a directory another user registered \
                     first; a directory belongs to one user, so its tools are refused: delete this project",
                    ours.path
                ),
            });
        }
        // Another user's own roots only: a global root registered while its user was
        // alone stays theirs (a later user cannot register inside it, see above).
        let path = Path::new(&ours.path);
        if auth_on && self.inner.fence.roots_shared_with_others(owner, false).iter().any(|root| root.starts_with(path))
        {
            return Err(EngineError::Forbidden {
                code: "shared_root",
                message: format!(
                    "this project's directory {:?} is, or holds, a project root that other users share, so its \
                     tools are refused: delete this project and register a directory inside the root",
                    ours.path
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn code(r: Result<()>) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn overlap_by_path_and_by_identity() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        let (alice, bob) = (base.join("alice"), base.join("bob"));
        fs::create_dir_all(alice.join("inner")).expect("mkdir");
        fs::create_dir_all(&bob).expect("mkdir");
        let claims = Claims { others: vec![alice.clone()], shared_roots: vec![base.clone()] };
        assert_eq!(code(check(&alice, &claims)), "directory_taken");
        assert_eq!(code(check(&alice.join("inner"), &claims)), "directory_taken");
        assert_eq!(code(check(&base, &claims)), "shared_root");
        assert_eq!(code(check(&bob, &claims)), "ok");
        // The same directory under another name (as a bind mount gives it) is caught by
        // identity: a path whose text is not related to alice's but is her directory.
        std::os::unix::fs::symlink(&alice, base.join("alias")).expect("symlink");
        let alias = Claims { others: vec![base.join("alias")], shared_roots: vec![] };
        assert_eq!(code(check(&alice, &alias)), "directory_taken");
        assert_eq!(code(check(&alice.join("inner"), &alias)), "directory_taken");
        let alias_root = Claims { others: vec![], shared_roots: vec![base.join("alias")] };
        assert_eq!(code(check(&alice, &alias_root)), "shared_root");
        let nowhere = Claims { others: vec![base.join("gone")], shared_roots: vec![] };
        assert_eq!(code(check(&bob, &nowhere)), "ok", "a vanished project blocks only its own path");
    }
}
