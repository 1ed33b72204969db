//! Step snapshots with libgit2 ([`ShadowRepos`], the engine's `Snapshotter`): each
//! project gets a repository of its own under Spool's data directory
//! (`<data-dir>/snapshots/<project_id>/`), whose work tree is the project directory.
//!
//! * **Nothing in the project.** The repository is created bare and given its work
//!   tree only in memory (`set_workdir` without a gitlink), because libgit2 writes a
//!   `.git` file into a work tree named at creation. The project's own `.git` is
//!   never opened or entered.
//! * **What is recorded.** What `git add -A` would add: every file `.gitignore` (and
//!   the shadow repository's `info/exclude`) does not ignore, deleted files dropped,
//!   contents as bytes, the exec bit, links as links. The tree's id is the snapshot's
//!   id, so the same files give the same id. The persisted index is a stat cache: an
//!   unchanged file is not read again. The user's global git settings are
//!   overridden: no global excludes, no line-ending or filter conversion (the bytes in
//!   the tree are the bytes on disk, whatever `.gitattributes` says).
//! * **Bounded** ([`SnapshotLimits`]): a file over `max_file_bytes` is left out, and
//!   so is every new or changed file once `max_new_bytes` of them were added or the
//!   index holds `max_files`; nested repositories are left out too. What was left out
//!   is dropped from the tree (a stale copy would be restored as if current) and
//!   named in the snapshot's `skipped`.
//! * **One at a time per project.** The index is one file per repository, so
//!   snapshots of one project are serialized with a mutex (a std one: the work runs
//!   on a blocking thread and never awaits).
//! * **Pruned** ([`ShadowRepos::prune`], in `prune.rs`): the objects no remaining
//!   record needs are deleted, and a deleted project's repository with it.

use git2::{IndexAddOption, ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use spool_engine::snapshots::{FileId, Skipped, Snapshot, Snapshotter};
use spool_protocol::{DirIdentity, ProjectId};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What one snapshot may record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// A file larger than this is left out.
    pub max_file_bytes: u64,
    /// Most bytes of new or changed files one snapshot adds.
    pub max_new_bytes: u64,
    /// Most files one snapshot holds.
    pub max_files: usize,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        Self { max_file_bytes: 2 << 20, max_new_bytes: 64 << 20, max_files: 100_000 }
    }
}

/// A file as a snapshot recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedFile {
    /// The git file mode: `0o100644`, `0o100755` (executable) or `0o120000` (a link,
    /// whose target is `bytes`).
    pub mode: i32,
    pub bytes: Vec<u8>,
}

/// Why a snapshot could not be taken or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the project directory moved: {0}")]
    Moved(String),
    #[error("the snapshot repository failed: {0}")]
    Git(#[from] git2::Error),
    #[error("cannot prepare the snapshot repository: {0}")]
    Io(#[from] std::io::Error),
}

/// The shadow repositories of every project, under one directory.
pub struct ShadowRepos {
    dir: PathBuf,
    limits: SnapshotLimits,
    /// One lock per project (see the module docs).
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl ShadowRepos {
    /// Repositories under `dir` (`<data-dir>/snapshots`), created as needed.
    pub fn new(dir: impl Into<PathBuf>, limits: SnapshotLimits) -> ShadowRepos {
        ShadowRepos { dir: dir.into(), limits, locks: Mutex::new(HashMap::new()) }
    }

    fn lock(&self, project: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(project.to_owned()).or_default().clone()
    }

    fn git_dir(&self, project: &str) -> PathBuf {
        self.dir.join(project)
    }

    /// Records the files under `root` for `project` (see the module docs).
    pub fn take(&self, project: &str, root: &Path) -> Result<Snapshot, SnapshotError> {
        let lock = self.lock(project);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let repo = open_or_create(&self.git_dir(project))?;
        repo.set_workdir(root, false)?;
        record(&repo, root, self.limits)
    }

    /// The files a snapshot of `project` recorded, by path (`/`-separated).
    pub fn files(&self, project: &str, tree: &str) -> Result<BTreeMap<String, RecordedFile>, SnapshotError> {
        let repo = Repository::open_bare(self.git_dir(project))?;
        let tree = repo.find_tree(Oid::from_str(tree)?)?;
        let mut files = BTreeMap::new();
        let mut failed = None;
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(ObjectType::Blob) {
                return TreeWalkResult::Ok;
            }
            match repo.find_blob(entry.id()) {
                Ok(blob) => {
                    let path = format!("{dir}{}", String::from_utf8_lossy(entry.name_bytes()));
                    files.insert(path, RecordedFile { mode: entry.filemode(), bytes: blob.content().to_vec() });
                    TreeWalkResult::Ok
                }
                Err(e) => {
                    failed = Some(e);
                    TreeWalkResult::Abort
                }
            }
        })?;
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(files),
        }
    }

    /// The identities (blob id and mode) of the files a snapshot of `project` recorded.
    pub fn identities(&self, project: &str, tree: &str) -> Result<BTreeMap<String, FileId>, SnapshotError> {
        let repo = Repository::open_bare(self.git_dir(project))?;
        let tree = repo.find_tree(Oid::from_str(tree)?)?;
        let mut files = BTreeMap::new();
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(ObjectType::Blob) {
                let path = format!("{dir}{}", String::from_utf8_lossy(entry.name_bytes()));
                files.insert(path, FileId { blob: entry.id().to_string(), mode: entry.filemode() });
            }
            TreeWalkResult::Ok
        })?;
        Ok(files)
    }

    /// One file of a snapshot of `project`; `None` when the snapshot has no such file.
    pub fn file(&self, project: &str, tree: &str, path: &str) -> Result<Option<RecordedFile>, SnapshotError> {
        let repo = Repository::open_bare(self.git_dir(project))?;
        let tree = repo.find_tree(Oid::from_str(tree)?)?;
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) if entry.kind() == Some(ObjectType::Blob) => entry,
            Ok(_) => return Ok(None),
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let blob = repo.find_blob(entry.id())?;
        Ok(Some(RecordedFile { mode: entry.filemode(), bytes: blob.content().to_vec() }))
    }

    /// Puts `path` under the project's directory back as `tree` recorded it (see
    /// [`Snapshotter::restore`]): written through [`crate::atomic`] into a directory
    /// found by [`crate::path`], so nothing outside the project is reached.
    pub fn restore_file(
        &self,
        project: &str,
        root: &crate::path::Root,
        tree: &str,
        path: &str,
    ) -> Result<(), RestoreError> {
        let recorded = self.file(project, tree, path)?;
        // The snapshots themselves are never a place to write (the engine refuses a
        // project that holds the data directory; this keeps a stray one out too).
        let mut target = crate::path::resolve_entry_for_write(root, Some(&self.dir), path)?;
        let present = |target: &crate::path::WriteTarget| {
            let (dir, name) = target.at();
            match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => Ok(Some(rustix::fs::FileType::from_raw_mode(stat.st_mode))),
                Err(rustix::io::Errno::NOENT) => Ok(None),
                Err(e) => Err(std::io::Error::from(e)),
            }
        };
        let Some(recorded) = recorded else {
            if !target.is_complete() {
                return Ok(());
            }
            return match present(&target)? {
                None => Ok(()),
                Some(rustix::fs::FileType::Directory) => Err(RestoreError::Directory),
                Some(_) => {
                    let (dir, name) = target.at();
                    rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).map_err(std::io::Error::from)?;
                    Ok(())
                }
            };
        };
        target.create_dirs()?;
        let now = present(&target)?;
        if now == Some(rustix::fs::FileType::Directory) {
            return Err(RestoreError::Directory);
        }
        let (dir, name) = target.at();
        if recorded.mode == LINK_MODE {
            if now.is_some() {
                rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).map_err(std::io::Error::from)?;
            }
            let link_target = std::ffi::OsStr::from_bytes(&recorded.bytes);
            rustix::fs::symlinkat(link_target, dir, name).map_err(std::io::Error::from)?;
            return Ok(());
        }
        let executable = recorded.mode & 0o111 != 0;
        let mode = if executable { 0o755 } else { 0o644 };
        crate::atomic::write_file(dir, name, &recorded.bytes, Some(std::fs::Permissions::from_mode(mode)))?;
        Ok(())
    }

    /// A unified diff of `path` in tree `from` against tree `to`, cut at `max_bytes`.
    pub fn diff_file(
        &self,
        project: &str,
        path: &str,
        from: &str,
        to: &str,
        max_bytes: usize,
    ) -> Result<String, SnapshotError> {
        let old = self.file(project, from, path)?.map(|f| f.bytes).unwrap_or_default();
        let new = self.file(project, to, path)?.map(|f| f.bytes).unwrap_or_default();
        let (Ok(old), Ok(new)) = (std::str::from_utf8(&old), std::str::from_utf8(&new)) else {
            return Ok(format!("Binary file {path} differs\n"));
        };
        let diff = similar::TextDiff::configure().timeout(std::time::Duration::from_secs(1)).diff_lines(old, new);
        let text = diff
            .unified_diff()
            .context_radius(3)
            .header(&format!("{path} (now)"), &format!("{path} (reverted)"))
            .to_string();
        Ok(cut(text, max_bytes))
    }
}

/// The git mode of a symbolic link.
const LINK_MODE: i32 = 0o120000;

/// `text` cut to at most `max_bytes` at a line's end, saying so.
fn cut(mut text: String, max_bytes: usize) -> String {
    const NOTE: &str = "… the rest of the diff is not shown\n";
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes.saturating_sub(NOTE.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end = text[..end].rfind('\n').map_or(0, |at| at + 1);
    text.truncate(end);
    text.push_str(NOTE);
    text
}

/// Why a file could not be put back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
    #[error("a directory is there now")]
    Directory,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Snapshotter for ShadowRepos {
    fn snapshot(&self, project: &ProjectId, root: &Path, root_id: Option<DirIdentity>) -> Result<Snapshot, String> {
        // The project directory must be the one registered, before and after: libgit2
        // reads by path (as the git poller does).
        let checked = || crate::path::Root::open(root, root_id).map(drop).map_err(|e| e.to_string());
        checked()?;
        let snapshot = self.take(project.as_str(), root).map_err(|e| e.to_string())?;
        checked()?;
        Ok(snapshot)
    }

    fn projects(&self) -> Result<Vec<ProjectId>, String> {
        let names = ShadowRepos::projects(self).map_err(|e| e.to_string())?;
        // A directory that is not a project id is not Spool's: left alone.
        Ok(names.iter().filter_map(|name| name.parse().ok()).collect())
    }

    fn prune(&self, project: &ProjectId, keep: &[String], grace: std::time::Duration) -> Result<u64, String> {
        ShadowRepos::prune(self, project.as_str(), keep, grace).map(|p| p.objects).map_err(|e| e.to_string())
    }

    fn forget(&self, project: &ProjectId) -> Result<(), String> {
        ShadowRepos::forget(self, project.as_str()).map_err(|e| e.to_string())
    }

    fn files(&self, project: &ProjectId, tree: &str) -> Result<BTreeMap<String, FileId>, String> {
        self.identities(project.as_str(), tree).map_err(|e| e.to_string())
    }

    fn diff(&self, project: &ProjectId, path: &str, from: &str, to: &str, max_bytes: usize) -> Result<String, String> {
        self.diff_file(project.as_str(), path, from, to, max_bytes).map_err(|e| e.to_string())
    }

    fn restore(
        &self,
        project: &ProjectId,
        root: &Path,
        root_id: Option<DirIdentity>,
        tree: &str,
        path: &str,
    ) -> Result<(), String> {
        let root = crate::path::Root::open(root, root_id).map_err(|e| e.to_string())?;
        self.restore_file(project.as_str(), &root, tree, path).map_err(|e| e.to_string())
    }
}

/// Opens the shadow repository at `git_dir`, creating it (bare, its settings
/// isolated from the user's) the first time.
fn open_or_create(git_dir: &Path) -> Result<Repository, SnapshotError> {
    if git_dir.join("HEAD").is_file() {
        return Ok(Repository::open_bare(git_dir)?);
    }
    std::fs::create_dir_all(git_dir)?;
    let repo = Repository::init_bare(git_dir)?;
    let mut config = repo.config()?;
    // Repository settings win over global ones: no line-ending conversion, links and
    // the exec bit kept, and no global excludes file (a path that never exists).
    config.set_bool("core.autocrlf", false)?;
    config.set_bool("core.symlinks", true)?;
    config.set_bool("core.filemode", true)?;
    config.set_str("core.excludesFile", &git_dir.join("info/no-global-excludes").to_string_lossy())?;
    std::fs::create_dir_all(git_dir.join("info"))?;
    // Above every .gitattributes: no text conversion, no filter, no ident expansion.
    std::fs::write(git_dir.join("info/attributes"), "* -text -filter -ident\n")?;
    Ok(repo)
}

/// `git add -A` within the limits, then the tree.
fn record(repo: &Repository, root: &Path, limits: SnapshotLimits) -> Result<Snapshot, SnapshotError> {
    let mut index = repo.index()?;
    let known: HashMap<Vec<u8>, u32> = index.iter().map(|e| (e.path, e.file_size)).collect();
    let mut held = known.len();
    let mut new_bytes = 0u64;
    let mut skipped = Skipped::default();
    let mut left_out: Vec<PathBuf> = Vec::new();
    {
        // Called for every path that differs from the index: 0 adds (or drops a
        // deleted file), 1 leaves it out.
        let mut decide = |path: &Path, _spec: &[u8]| -> i32 {
            let Ok(meta) = std::fs::symlink_metadata(root.join(path)) else { return 0 };
            let shown = path.to_string_lossy().into_owned();
            let is_new = !known.contains_key(path.to_string_lossy().as_bytes());
            let size = if meta.is_file() { meta.len() } else { 0 };
            let over = meta.is_dir()
                || size > limits.max_file_bytes
                || new_bytes + size > limits.max_new_bytes
                || (is_new && held >= limits.max_files);
            if over {
                skipped.push(shown);
                left_out.push(path.to_path_buf());
                return 1;
            }
            new_bytes += size;
            held += usize::from(is_new);
            0
        };
        index.add_all(["*"], IndexAddOption::DEFAULT, Some(&mut decide))?;
    }
    // A file left out must not keep an older copy in the tree.
    for path in &left_out {
        if index.get_path(path, 0).is_some() {
            index.remove_path(path)?;
        }
    }
    index.write()?;
    let tree = index.write_tree()?;
    Ok(Snapshot { tree: tree.to_string(), skipped })
}

mod prune;
pub use prune::Pruned;

#[cfg(test)]
mod tests;
