//! Reading a project's git state for the engine's git poller ([`GitReader`], the
//! engine's `GitProbe`), with libgit2 (the `git2` crate, built without network
//! features): no `git` process is started and no command output is parsed.
//!
//! What is read: the repository the project directory lies in (found upwards from it,
//! as `git` finds it); the checked-out branch and HEAD's abbreviated commit id; and the
//! work tree against HEAD's tree — staged and unstaged changes, plus untracked files
//! that are not ignored (their lines count as added) — limited to the project
//! directory when the project is a subdirectory of its repository. Submodules are not
//! looked into. A work tree configured elsewhere (`core.worktree`, which any command in
//! the project can set) is not followed out of the project: the directory holding the
//! repository is read instead, and the project's directory must still be the one
//! registered (`spool_protocol::DirIdentity`) before and after the reading.
//!
//! Bounded, because it runs every few seconds on every loaded session's project: lines
//! are counted for at most [`MAX_DIFF_FILES`] changed files and [`MAX_DIFF_BYTES`] of
//! their contents (then the reading says `truncated`), a file over [`MAX_BLOB_BYTES`]
//! counts as binary (no lines), and at most `MAX_LISTED_FILES` files are listed. The
//! limits are counts, not a clock, so one work tree reads the same at every tick and
//! a busy machine does not make the totals flicker. What stays unbounded is libgit2's
//! walk of the work tree itself (a stat per file); the poller runs each reading on the
//! blocking pool and never starts a project's next reading before its last finished,
//! so a huge tree slows only its own updates.

use git2::{Delta, DiffOptions, ErrorCode, Patch, Repository};
use spool_protocol::DirIdentity;
use spool_protocol::git::{FileChange, FileStatus, GitState, MAX_LISTED_FILES};
use std::path::{Path, PathBuf};

/// Most changed files whose lines one reading counts.
pub const MAX_DIFF_FILES: usize = 2_000;
/// Most bytes of changed files (their work-tree sizes) one reading diffs.
pub const MAX_DIFF_BYTES: u64 = 32 << 20;
/// Files larger than this are treated as binary: changed, but no lines counted.
pub const MAX_BLOB_BYTES: i64 = 2 << 20;

/// Reads git state with libgit2.
#[derive(Clone, Copy, Debug, Default)]
pub struct GitReader;

impl spool_engine::GitProbe for GitReader {
    fn read(&self, root: &Path, root_id: Option<DirIdentity>) -> Result<Option<GitState>, String> {
        // The project directory must be the one registered, before and after: libgit2
        // reads by path, and a reading taken while the directory was swapped for a link
        // is not reported.
        let checked = || crate::path::Root::open(root, root_id).map(drop).map_err(|e| e.to_string());
        checked()?;
        let state = read_state(root).map_err(|e| e.message().to_owned())?;
        checked()?;
        Ok(state)
    }
}

/// The work tree to read for a project at `root`: the repository's own when it holds
/// the project, else the directory holding the `.git` found above the project when
/// that does (a `core.worktree` pointing elsewhere is ignored); else none. Whatever a
/// command wrote into the repository's config, the reading never names files outside
/// the directory holding the project's repository, and is limited to the project.
fn work_tree(repo: &Repository, root: &Path) -> Option<PathBuf> {
    let root = root.canonicalize().ok()?;
    let holds = |dir: &Path| dir.canonicalize().ok().filter(|dir| root.starts_with(dir));
    if let Some(work) = repo.workdir().and_then(holds) {
        return Some(work);
    }
    let git_dir = repo.path();
    if git_dir.file_name() == Some(std::ffi::OsStr::new(".git")) { git_dir.parent().and_then(holds) } else { None }
}

/// The git state of the repository `root` lies in; `None` when it lies in none (or in a
/// bare repository, which has no work tree to differ).
pub fn read_state(root: &Path) -> Result<Option<GitState>, git2::Error> {
    let repo = match Repository::discover(root) {
        Ok(repo) => repo,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(workdir) = work_tree(&repo, root) else { return Ok(None) };
    if repo.workdir() != Some(workdir.as_path()) {
        // `core.worktree` (or a `.git` file) names a work tree that does not hold the
        // project: read the project's own instead, never the one configured.
        repo.set_workdir(&workdir, false)?;
    }
    let (branch, commit, tree) = match repo.head() {
        Ok(head) => {
            let branch = if head.is_branch() { head.shorthand().map(str::to_owned) } else { None };
            let commit = head.peel_to_commit()?;
            let short = commit.as_object().short_id()?.as_str().map(str::to_owned);
            (branch, short, Some(commit.tree()?))
        }
        // A repository without a commit yet: HEAD names the branch the first commit
        // will make, and every file is new.
        Err(e) if e.code() == ErrorCode::UnbornBranch || e.code() == ErrorCode::NotFound => {
            let head = repo.find_reference("HEAD")?;
            let branch = head.symbolic_target().map(|t| t.strip_prefix("refs/heads/").unwrap_or(t).to_owned());
            (branch, None, None)
        }
        Err(e) => return Err(e),
    };
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .ignore_submodules(true)
        .context_lines(0)
        .max_size(MAX_BLOB_BYTES);
    // A project inside a larger repository sees only its own directory's changes (and
    // libgit2 walks only that directory).
    let inside = root.canonicalize().ok().zip(Some(workdir));
    if let Some(prefix) = inside.as_ref().and_then(|(root, work)| root.strip_prefix(work).ok())
        && !prefix.as_os_str().is_empty()
    {
        options.pathspec(prefix).disable_pathspec_match(true);
    }
    let diff = repo.diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut options))?;
    let mut state = GitState { branch, commit, ..GitState::default() };
    let mut bytes = 0u64;
    for (index, delta) in diff.deltas().enumerate() {
        if index >= MAX_DIFF_FILES || bytes >= MAX_DIFF_BYTES {
            state.truncated = true;
            break;
        }
        bytes += delta.new_file().size().max(delta.old_file().size());
        let (additions, deletions) = match Patch::from_diff(&diff, index)? {
            Some(patch) => {
                let (_, added, deleted) = patch.line_stats()?;
                (added as u64, deleted as u64)
            }
            // Binary (or too large to diff): changed, without lines.
            None => (0, 0),
        };
        state.additions += additions;
        state.deletions += deletions;
        if state.files.len() == MAX_LISTED_FILES {
            state.truncated = true;
            continue;
        }
        let status = match delta.status() {
            Delta::Added | Delta::Untracked => FileStatus::Added,
            Delta::Deleted => FileStatus::Deleted,
            _ => FileStatus::Modified,
        };
        let file = if status == FileStatus::Deleted { delta.old_file() } else { delta.new_file() };
        let path = file.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        state.files.push(FileChange { path, status, additions, deletions });
    }
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A repository at `dir` with `files` committed on branch `main`.
    fn repo_with(dir: &Path, files: &[(&str, &str)]) -> Repository {
        let mut init = git2::RepositoryInitOptions::new();
        init.initial_head("main");
        let repo = Repository::init_opts(dir, &init).expect("init");
        for (path, text) in files {
            let full = dir.join(path);
            fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            fs::write(full, text).expect("write");
        }
        commit_all(&repo, "first");
        repo
    }

    fn commit_all(repo: &Repository, message: &str) {
        let mut index = repo.index().expect("index");
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).expect("add");
        index.write().expect("write index");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("find tree");
        let who = git2::Signature::now("Test", "test@example.com").expect("signature");
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        repo.commit(Some("HEAD"), &who, &who, message, &tree, &parents).expect("commit");
    }

    #[test]
    fn branch_commit_and_the_diff_against_head_with_new_files_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = repo_with(
            dir.path(),
            &[("a.txt", "one\ntwo\nthree\n"), ("gone.txt", "x\ny\n"), (".gitignore", "target/\n")],
        );
        let clean = read_state(dir.path()).expect("read").expect("a repository");
        let head = repo.head().expect("head").peel_to_commit().expect("commit").id().to_string();
        assert_eq!(clean.branch.as_deref(), Some("main"));
        assert!(head.starts_with(clean.commit.as_deref().expect("a commit")), "{clean:?} vs {head}");
        assert_eq!((clean.additions, clean.deletions, clean.files.len(), clean.truncated), (0, 0, 0, false));

        fs::write(dir.path().join("a.txt"), "one\n2\nthree\nfour\n").expect("edit");
        fs::remove_file(dir.path().join("gone.txt")).expect("delete");
        fs::create_dir_all(dir.path().join("src")).expect("mkdir");
        fs::write(dir.path().join("src/new.rs"), "fn main() {}\n\n").expect("new file");
        fs::create_dir_all(dir.path().join("target")).expect("mkdir");
        fs::write(dir.path().join("target/out.txt"), "ignored\n").expect("ignored file");
        let dirty = read_state(dir.path()).expect("read").expect("a repository");
        let files: Vec<(&str, FileStatus, u64, u64)> =
            dirty.files.iter().map(|f| (f.path.as_str(), f.status, f.additions, f.deletions)).collect();
        assert_eq!(
            files,
            [
                ("a.txt", FileStatus::Modified, 2, 1),
                ("gone.txt", FileStatus::Deleted, 0, 2),
                ("src/new.rs", FileStatus::Added, 2, 0)
            ]
        );
        assert_eq!((dirty.additions, dirty.deletions), (4, 3));

        // A project in a subdirectory sees its own changes only.
        let sub = read_state(&dir.path().join("src")).expect("read").expect("a repository");
        assert_eq!(sub.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["src/new.rs"]);
        assert_eq!((sub.additions, sub.deletions), (2, 0));

        // A new branch and a commit.
        commit_all(&repo, "second");
        let commit = repo.head().expect("head").peel_to_commit().expect("commit");
        repo.branch("feat/x", &commit, false).expect("branch");
        repo.set_head("refs/heads/feat/x").expect("checkout");
        let moved = read_state(dir.path()).expect("read").expect("a repository");
        assert_eq!(moved.branch.as_deref(), Some("feat/x"));
        assert_ne!(moved.commit, clean.commit);
        assert_eq!((moved.additions, moved.deletions), (0, 0), "everything is committed");
        // Detached: no branch.
        repo.set_head_detached(commit.id()).expect("detach");
        assert_eq!(read_state(dir.path()).expect("read").expect("a repository").branch, None);
    }

    #[test]
    fn a_fresh_repository_and_a_plain_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_state(dir.path()).expect("no repository is no error"), None);
        let mut init = git2::RepositoryInitOptions::new();
        init.initial_head("trunk");
        Repository::init_opts(dir.path(), &init).expect("init");
        fs::write(dir.path().join("a.txt"), "1\n2\n").expect("write");
        let fresh = read_state(dir.path()).expect("read").expect("a repository");
        assert_eq!((fresh.branch.as_deref(), fresh.commit.as_deref()), (Some("trunk"), None));
        assert_eq!((fresh.additions, fresh.deletions), (2, 0), "every file is new");
    }

    #[test]
    fn past_the_budget_the_totals_stop_and_say_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        repo_with(dir.path(), &[("keep.txt", "k\n")]);
        for i in 0..MAX_LISTED_FILES + 5 {
            fs::write(dir.path().join(format!("f{i:04}.txt")), "line\n").expect("write");
        }
        let many = read_state(dir.path()).expect("read").expect("a repository");
        assert_eq!(many.files.len(), MAX_LISTED_FILES);
        assert_eq!(many.additions, (MAX_LISTED_FILES + 5) as u64, "the totals count past the listed files");
        assert!(many.truncated);
    }

    #[test]
    fn a_work_tree_configured_outside_the_project_is_not_read() {
        let base = tempfile::tempdir().expect("temp dir");
        let (project, outside) = (base.path().join("project"), base.path().join("data"));
        fs::create_dir_all(&outside).expect("mkdir");
        fs::write(outside.join("config.toml"), "api_key = \"secret\"\nmore\n").expect("write");
        fs::write(outside.join("spool.db"), "rows\n").expect("write");
        fs::create_dir_all(&project).expect("mkdir");
        let repo = repo_with(&project, &[("mine.txt", "one\n")]);
        fs::write(project.join("new.txt"), "two\n").expect("write");
        // What a command in the project can do: point the repository's work tree at the
        // data directory.
        repo.config().expect("config").set_str("core.worktree", outside.to_str().expect("utf-8")).expect("set");
        drop(repo);

        let state = read_state(&project).expect("read").expect("a repository");
        let names: Vec<&str> = state.files.iter().map(|f| f.path.as_str()).collect();
        assert!(!names.iter().any(|n| n.contains("config.toml") || n.contains("spool.db")), "{names:?}");
        // The project's own work tree is what is read.
        assert_eq!(names, ["new.txt"]);
    }

    #[test]
    fn the_poller_reads_only_the_directory_registered() {
        use spool_engine::GitProbe;
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().expect("temp dir");
        let base = base.path().canonicalize().expect("canonical");
        let (project, other) = (base.join("project"), base.join("other"));
        repo_with(&project, &[("a.txt", "one\n")]);
        repo_with(&other, &[("secret.txt", "s\n")]);
        fs::write(other.join("other-only.txt"), "x\n").expect("write");
        let meta = fs::metadata(&project).expect("stat");
        let id = DirIdentity { dev: meta.dev(), ino: meta.ino() };
        assert!(GitReader.read(&project, Some(id)).expect("read").is_some());

        // Swapped for a link to another repository: refused, nothing of it named.
        fs::rename(&project, base.join("moved")).expect("move away");
        std::os::unix::fs::symlink(&other, &project).expect("symlink");
        let err = GitReader.read(&project, Some(id)).expect_err("a link");
        assert!(err.contains("symbolic link") && !err.contains("other-only"), "{err}");
    }
}
