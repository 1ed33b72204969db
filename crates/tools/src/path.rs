//! Path confinement: the one place a tool turns a path the model wrote into a path on
//! disk. A path may be relative to the project root or absolute, but its canonical form
//! (symlinks followed, `..` resolved by the OS) must lie under the canonical root, or
//! the tool refuses it without opening it.
//!
//! Checking the canonical form rather than the text is what catches a symlink inside
//! the project that points outside it. For a path that does not exist, the answer is
//! decided by its nearest existing ancestor, so "no such file" is only ever said about
//! places inside the project and a model cannot probe what exists elsewhere.
//!
//! A tool that creates files asks [`resolve_for_write`] instead: the same rule, applied
//! to the deepest ancestor that exists, with the missing rest of the path taken as plain
//! names below it. `..` in that missing rest is worked out by hand (the OS cannot, as the
//! directories are not there yet) and the result checked again from the start.
//!
//! Spool's data directory (its database and the config file with provider keys) is out
//! of bounds even when it lies under the root: a path that resolves into it is refused
//! like one outside, without opening anything there. The engine refuses such projects
//! anyway; this keeps a project registered before that rule from reaching it.
//!
//! The check and the later open are two steps, so a process swapping a directory for a
//! symlink in between could still win the race; closing that needs `openat2` with
//! `RESOLVE_BENEATH`, which is Linux-only. The tools guard against the model's
//! mistakes, not against a hostile process already inside the project.

use std::io;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("path {0:?} is outside the project directory")]
    Outside(String),
    #[error("no such file or directory: {0:?}")]
    NotFound(String),
    #[error("cannot access {path:?}: {source}")]
    Inaccessible { path: String, source: io::Error },
    #[error("the project directory is not accessible: {0}")]
    Root(io::Error),
    #[error("path {0:?} goes through a symbolic link whose target does not exist")]
    BrokenLink(String),
    #[error("path {0:?} is inside Spool's data directory, which tools never touch")]
    DataDir(String),
}

/// The canonical path of `requested` if it lies under `root`.
///
/// Blocking: call it from `spawn_blocking`.
pub fn resolve(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    resolve_in(root, None, requested)
}

/// Like [`resolve`], and refused when it lands in `data_dir` (canonical).
pub fn resolve_in(root: &Path, data_dir: Option<&Path>, requested: &str) -> Result<PathBuf, PathError> {
    let root = canonical_root(root)?;
    // `join` with an absolute path yields that path, which is then checked like any other.
    let candidate = root.join(requested);
    let found = check(&root, &candidate, requested);
    let Some(data_dir) = data_dir else { return found };
    let lands = match &found {
        Ok(path) => path.starts_with(data_dir),
        // "No such file" is said only under the root: not about the data directory either.
        Err(PathError::NotFound(_) | PathError::Inaccessible { .. }) => {
            nearest_existing(&candidate).is_some_and(|(_, ancestor)| ancestor.starts_with(data_dir))
        }
        Err(_) => false,
    };
    if lands { Err(PathError::DataDir(requested.to_owned())) } else { found }
}

/// Where a tool may create or replace `requested`: its canonical path if it exists,
/// otherwise the path it will have once created, made of its deepest existing ancestor
/// (canonical, under `root`) followed by plain names. Every directory between that
/// ancestor and the file is missing, so creating them one by one cannot step outside.
///
/// Blocking: call it from `spawn_blocking`.
pub fn resolve_for_write(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    resolve_for_write_in(root, None, requested)
}

/// Like [`resolve_for_write`], and refused when the target is in `data_dir` (canonical).
pub fn resolve_for_write_in(root: &Path, data_dir: Option<&Path>, requested: &str) -> Result<PathBuf, PathError> {
    let root = canonical_root(root)?;
    match write_target(&root, &root.join(requested), requested) {
        Ok(target) if data_dir.is_some_and(|d| target.starts_with(d)) => Err(PathError::DataDir(requested.to_owned())),
        done => done,
    }
}

fn canonical_root(root: &Path) -> Result<PathBuf, PathError> {
    // The engine hands over a canonical root; canonicalising again costs one syscall
    // and keeps the `starts_with` comparison sound if a caller ever passes one that is
    // not (a temp dir behind a symlink, a trailing `..`).
    root.canonicalize().map_err(PathError::Root)
}

/// The canonical form of `candidate` if it exists under `root`; errors name `requested`.
fn check(root: &Path, candidate: &Path, requested: &str) -> Result<PathBuf, PathError> {
    match candidate.canonicalize() {
        Ok(canonical) if canonical.starts_with(root) => Ok(canonical),
        Ok(_) => Err(PathError::Outside(requested.to_owned())),
        Err(err) => match nearest_existing(candidate) {
            Some((_, ancestor)) if ancestor.starts_with(root) => Err(match err.kind() {
                io::ErrorKind::NotFound => PathError::NotFound(requested.to_owned()),
                _ => PathError::Inaccessible { path: requested.to_owned(), source: err },
            }),
            _ => Err(PathError::Outside(requested.to_owned())),
        },
    }
}

/// The deepest proper ancestor of `path` that exists, as written and canonical.
fn nearest_existing(path: &Path) -> Option<(&Path, PathBuf)> {
    path.ancestors().skip(1).find_map(|a| a.canonicalize().ok().map(|c| (a, c)))
}

fn write_target(root: &Path, candidate: &Path, requested: &str) -> Result<PathBuf, PathError> {
    match check(root, candidate, requested) {
        Err(PathError::NotFound(_)) => {}
        done => return done,
    }
    // `check` only says "not found" when the nearest existing ancestor lies under the
    // root, so that ancestor is where the new path starts.
    let (ancestor, canonical) = nearest_existing(candidate).ok_or_else(|| PathError::Outside(requested.to_owned()))?;
    if !canonical.starts_with(root) {
        return Err(PathError::Outside(requested.to_owned()));
    }
    let rest = candidate.strip_prefix(ancestor).expect("an ancestor is a prefix of its descendant");

    let mut target = canonical.clone();
    let mut went_up = false;
    for component in rest.components() {
        match component {
            Component::Normal(name) => target.push(name),
            Component::ParentDir => {
                went_up = true;
                target.pop();
            }
            // Nothing else can follow a prefix: roots and prefixes only start a path.
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    if went_up {
        // `missing/../x` can lead back into directories that exist, symlinks included,
        // so the path without `..` is judged afresh. It has no `..`, so this recurses once.
        return write_target(root, &target, requested);
    }
    // The first missing name can still be there as a symlink to nowhere (`canonicalize`
    // fails on it): creating through it would follow the link, wherever it points.
    let first = rest.components().next().map(|name| canonical.join(name));
    if first.is_some_and(|first| first.symlink_metadata().is_ok()) {
        return Err(PathError::BrokenLink(requested.to_owned()));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        fs::create_dir(root.join("src")).expect("mkdir");
        fs::write(root.join("src/main.rs"), "fn main() {}\n").expect("write");
        (dir, root)
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_dir, root) = project();
        assert_eq!(resolve(&root, ".").expect("root"), root);
        assert_eq!(resolve(&root, "").expect("root"), root);
        assert_eq!(resolve(&root, "src/../src/main.rs").expect("file"), root.join("src/main.rs"));
        let absolute = root.join("src/main.rs");
        assert_eq!(resolve(&root, absolute.to_str().expect("utf-8 temp path")).expect("file"), absolute);
    }

    #[test]
    fn paths_leaving_the_root_are_refused() {
        let (_dir, root) = project();
        for p in ["..", "../x", "src/../../x", "/etc/passwd", "/nonexistent/x"] {
            let err = resolve(&root, p).expect_err(p);
            assert_eq!(err.to_string(), format!("path {p:?} is outside the project directory"));
        }
    }

    #[test]
    fn a_sibling_directory_sharing_the_prefix_is_outside() {
        let (_dir, root) = project();
        let sibling = PathBuf::from(format!("{}-other", root.display()));
        fs::create_dir(&sibling).expect("mkdir sibling");
        let err = resolve(&root, sibling.to_str().expect("utf-8 temp path"));
        fs::remove_dir(&sibling).expect("clean up sibling");
        assert!(matches!(err, Err(PathError::Outside(_))), "{err:?}");
    }

    #[test]
    fn symlinks_are_judged_by_their_target() {
        let (_dir, root) = project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret"), "s3cret").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        std::os::unix::fs::symlink(root.join("src"), root.join("inner")).expect("symlink");

        assert!(matches!(resolve(&root, "escape/secret"), Err(PathError::Outside(_))));
        assert!(matches!(resolve(&root, "escape"), Err(PathError::Outside(_))));
        // Not existing behind an escaping link is still "outside", not "not found".
        assert!(matches!(resolve(&root, "escape/missing"), Err(PathError::Outside(_))));
        assert_eq!(resolve(&root, "inner/main.rs").expect("inner link"), root.join("src/main.rs"));
    }

    #[test]
    fn missing_paths_inside_are_reported_as_missing() {
        let (_dir, root) = project();
        let err = resolve(&root, "src/nope.rs").expect_err("missing");
        assert_eq!(err.to_string(), r#"no such file or directory: "src/nope.rs""#);
        assert!(matches!(resolve(&root, "a/b/c"), Err(PathError::NotFound(_))));
    }

    #[test]
    fn write_targets_are_existing_files_or_new_paths_inside() {
        let (_dir, root) = project();
        assert_eq!(resolve_for_write(&root, "src/main.rs").expect("existing"), root.join("src/main.rs"));
        assert_eq!(resolve_for_write(&root, "new/dir/f.rs").expect("new"), root.join("new/dir/f.rs"));
        assert_eq!(resolve_for_write(&root, "new/../src/lib.rs").expect("new"), root.join("src/lib.rs"));
        assert_eq!(resolve_for_write(&root, "a/./b/../c").expect("new"), root.join("a/c"));
        // Back through a missing directory onto an existing file.
        assert_eq!(resolve_for_write(&root, "x/../src/main.rs").expect("existing"), root.join("src/main.rs"));
    }

    #[test]
    fn write_targets_leaving_the_root_are_refused() {
        let (_dir, root) = project();
        let outside = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        // `missing/../escape/x` only reaches the link once `..` is worked out.
        for p in
            ["../x", "missing/../../x", "a/b/../../../x", "escape/x", "escape/new/x", "missing/../escape/x", "/tmp/x"]
        {
            let err = resolve_for_write(&root, p).expect_err(p);
            assert_eq!(err.to_string(), format!("path {p:?} is outside the project directory"));
        }
    }

    #[test]
    fn write_targets_through_a_dangling_link_are_refused() {
        let (_dir, root) = project();
        std::os::unix::fs::symlink("/nonexistent/spool-target", root.join("dangling")).expect("symlink");
        for p in ["dangling", "dangling/x", "new/../dangling"] {
            assert!(matches!(resolve_for_write(&root, p), Err(PathError::BrokenLink(_))), "{p}");
        }
    }
}
