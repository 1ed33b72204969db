//! Path confinement: the one place a tool turns a path the model wrote into an open
//! file. The project's directory is opened once per call ([`Root::open`]) with no
//! symbolic link allowed on the way (`RESOLVE_NO_SYMLINKS`) and, when the project's
//! registration kept it, checked to be the very directory that was registered (its
//! inode, see `DirIdentity::same_dir`): a project directory swapped for a link to
//! Spool's data directory, or for another user's project, is refused, not followed.
//!
//! Everything after that is found from that directory's descriptor, one name at a
//! time, the way the kernel resolves a path but holding each directory by its
//! descriptor: each step is an `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)` of one name relative to the last directory, so the kernel
//! refuses a name that became a link in between; `..` goes back to the descriptor it
//! came from and never above the root; a link is read and its target resolved in
//! turn, an absolute one only when it names a place under the root's path. Nothing is
//! checked by name and then opened by name again, so a process swapping a directory
//! for a link in a loop (`renameat2(RENAME_EXCHANGE)`) cannot slip a tool out between
//! two steps. (A single `openat2(RESOLVE_BENEATH)` of the whole path would refuse every
//! absolute link, even one pointing inside the project; resolving by hand keeps those.)
//!
//! A path may be relative to the project or absolute under it. "No such file" is only
//! ever said about places inside the project (a path leaving it is refused before
//! anything beyond is looked at), so a model cannot probe what exists elsewhere.
//!
//! A tool that creates files asks [`resolve_for_write`]: the deepest existing directory
//! on the way, its descriptor, and the names still missing (`missing/../x` is judged
//! afresh once `..` is worked out on the names). The missing directories are made one
//! at a time with `mkdirat` relative to the last and opened again with no link
//! followed; the file itself is replaced by a rename within its directory's descriptor
//! (`atomic.rs`), which never follows a link either. A link as the last name is
//! followed while it stays inside; one to nowhere is refused.
//!
//! Spool's data directory (its database and the config file with provider keys) is out
//! of bounds even when it lies under the root: what was found is named by its real
//! names from the root (no link among them), and refused when that lies in the data
//! directory. The engine refuses such projects anyway; this keeps a project registered
//! before that rule from reaching it. When the data directory is not under the root,
//! nothing beneath the root is in it.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use spool_protocol::DirIdentity;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
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
    #[error(
        "the project directory {path:?} {why} since it was registered, so the tools refuse it: delete the \
         project and register the directory again"
    )]
    Moved { path: String, why: &'static str },
}

/// How often an `openat2` the kernel asks to retry is retried: `EAGAIN` means a rename
/// elsewhere on the file system ran during a `..` lookup, and the kernel could not
/// prove the lookup stayed beneath the root.
const RETRIES: usize = 64;
/// Links followed by hand at the end of a path to write, like the kernel's own limit.
const MAX_LINKS: usize = 40;

/// What a call needs to open paths, taken from its context onto a blocking thread.
#[derive(Clone, Debug)]
pub(crate) struct Scope {
    root: PathBuf,
    root_id: Option<DirIdentity>,
    data_dir: Option<PathBuf>,
}

impl Scope {
    pub(crate) fn of(ctx: &spool_engine::ToolContext) -> Scope {
        Scope { root: ctx.root.clone(), root_id: ctx.root_id, data_dir: ctx.data_dir.clone() }
    }

    /// Opens and checks the project directory, once per call.
    pub(crate) fn open(&self) -> Result<Root, PathError> {
        Root::open(&self.root, self.root_id)
    }

    /// Spool's data directory, canonical.
    pub(crate) fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }
}

/// A project's directory, opened and checked: everything a tool opens is found from
/// this descriptor, never from the path again.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    /// Opens the project directory at `path` (absolute and canonical, as registered)
    /// with no symbolic link on the way, and refuses it unless it is the directory
    /// `expected` names (when known).
    ///
    /// Blocking, but a single `openat2` and `fstat`.
    pub fn open(path: &Path, expected: Option<DirIdentity>) -> Result<Root, PathError> {
        let moved = |why| PathError::Moved { path: path.display().to_string(), why };
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let fd = match openat2(rustix::fs::CWD, path, OFlags::RDONLY | OFlags::DIRECTORY, resolve) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(moved("has been replaced by a symbolic link (or a directory above it has)"));
            }
            Err(Errno::NOTDIR) => return Err(moved("is no longer a directory")),
            Err(e) => return Err(PathError::Root(e.into())),
        };
        if let Some(id) = expected {
            let stat = rustix::fs::fstat(&fd).map_err(|e| PathError::Root(e.into()))?;
            if !id.same_dir(DirIdentity { dev: stat.st_dev, ino: stat.st_ino }) {
                return Err(moved("has been replaced by another directory"));
            }
        }
        Ok(Root { fd, path: lexical(path) })
    }

    /// The directory's path, as registered.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A file or directory a tool opened for reading.
#[derive(Debug)]
pub struct Opened {
    /// Opened for reading, non-blocking (a FIFO inside the project cannot hang the tool).
    pub file: File,
    pub meta: std::fs::Metadata,
    /// Where it is, relative to the root, links inside followed: the real names.
    pub rel: PathBuf,
}

/// Opens `requested` beneath `root` for reading, refused when it leaves the root or lands
/// in `data_dir` (canonical).
///
/// Blocking: call it from `spawn_blocking`.
pub fn open(root: &Root, data_dir: Option<&Path>, requested: &str) -> Result<Opened, PathError> {
    let rel = relative(root, requested)?;
    let found = open_rel(root, &rel, OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|fail| refusal(root, data_dir, requested, fail))?;
    check_data_dir(root, data_dir, &found.rel, requested)?;
    let file = File::from(found.fd);
    let meta = file.metadata().map_err(|source| PathError::Inaccessible { path: requested.to_owned(), source })?;
    Ok(Opened { file, meta, rel: found.rel })
}

/// Something opened beneath the root, and where it is (links inside followed).
pub(crate) struct Beneath {
    pub fd: OwnedFd,
    pub rel: PathBuf,
}

/// Why a path could not be opened beneath the root.
#[derive(Debug)]
pub(crate) enum Fail {
    /// It leads out of the root (`..` above it, a link pointing elsewhere).
    Outside,
    /// It does not exist: `at` is where it would be (relative to the root).
    Missing {
        at: PathBuf,
    },
    Errno(Errno),
}

/// Opens `rel` (relative to the root; empty for the root) beneath the root with `flags`,
/// following links only while they stay inside.
pub(crate) fn open_rel(root: &Root, rel: &Path, flags: OFlags) -> Result<Beneath, Fail> {
    match resolve(root, rel, true)? {
        Resolved::Found { dir, mut names, last } => {
            let name = last.as_deref().unwrap_or(OsStr::new("."));
            let fd = openat2(dir.as_fd(), Path::new(name), flags, STEP).map_err(Fail::Errno)?;
            names.extend(last);
            Ok(Beneath { fd, rel: names.iter().collect() })
        }
        Resolved::Missing { names, rest, .. } => Err(Fail::Missing { at: names.iter().chain(&rest).collect() }),
    }
}

/// Refuses `rel` (real names, relative to the root) when it lies in `data_dir`, or the
/// root does. When the data directory is not under the root, nothing beneath the root
/// can be in it (links leading out are never followed), so the text decides.
pub(crate) fn check_data_dir(
    root: &Root,
    data_dir: Option<&Path>,
    rel: &Path,
    requested: &str,
) -> Result<(), PathError> {
    match overlapping(root, data_dir) {
        Some(data) if root.path.join(rel).starts_with(data) => Err(PathError::DataDir(requested.to_owned())),
        _ => Ok(()),
    }
}

/// Where a tool may create or replace `requested`: a directory opened beneath the
/// root, the directories still to make in it, and the file's name. Looking creates
/// nothing; [`WriteTarget::create_dirs`] does.
#[derive(Debug)]
pub struct WriteTarget {
    dir: OwnedFd,
    missing: Vec<OsString>,
    name: OsString,
    /// Where the file is, relative to the root: the real names.
    #[cfg_attr(not(test), expect(dead_code, reason = "the tests check where a write lands"))]
    rel: PathBuf,
}

/// Finds where `requested` is to be written beneath `root`, refused when it leaves the
/// root, goes through a link to nowhere, or lands in `data_dir` (canonical).
///
/// Blocking: call it from `spawn_blocking`.
pub fn resolve_for_write(root: &Root, data_dir: Option<&Path>, requested: &str) -> Result<WriteTarget, PathError> {
    resolve_target(root, data_dir, requested, true)
}

/// Like [`resolve_for_write`], but a link as the last name is the target itself, not
/// followed: a revert puts back the entry at the path, whatever is there now.
///
/// Blocking: call it from `spawn_blocking`.
pub(crate) fn resolve_entry_for_write(
    root: &Root,
    data_dir: Option<&Path>,
    requested: &str,
) -> Result<WriteTarget, PathError> {
    resolve_target(root, data_dir, requested, false)
}

fn resolve_target(
    root: &Root,
    data_dir: Option<&Path>,
    requested: &str,
    follow_last: bool,
) -> Result<WriteTarget, PathError> {
    let refused = |fail| refusal(root, data_dir, requested, fail);
    let mut resolved = resolve(root, &relative(root, requested)?, follow_last).map_err(refused)?;
    if let Resolved::Missing { names, rest, went_up: true, .. } = &resolved {
        // `missing/../x` can lead back into directories that exist, links included, so
        // the path without `..` is judged afresh. It has no `..`, so this happens once.
        let again: PathBuf = names.iter().chain(rest).collect();
        resolved = resolve(root, &again, follow_last).map_err(refused)?;
    }
    let (dir, at, missing, name): (_, PathBuf, _, _) = match resolved {
        Resolved::Found { dir, names, last } => {
            let name = last.unwrap_or_else(|| ".".into());
            let at: PathBuf = names.iter().chain([&name]).collect();
            (dir, at, Vec::new(), name)
        }
        Resolved::Missing { via_link: true, .. } => return Err(PathError::BrokenLink(requested.to_owned())),
        Resolved::Missing { dir, names, mut rest, .. } => {
            let at: PathBuf = names.iter().chain(&rest).collect();
            // `missing/..` is the directory it is in.
            let Some(name) = rest.pop() else { return Err(PathError::NotFound(requested.to_owned())) };
            (dir, at, rest, name)
        }
    };
    check_data_dir(root, data_dir, &at, requested)?;
    // Opened for reading this time, so the directory can be flushed after the rename.
    let dir = openat2(dir.as_fd(), Path::new("."), OFlags::RDONLY | OFlags::DIRECTORY, STEP)
        .map_err(|e| refused(Fail::Errno(e)))?;
    Ok(WriteTarget { dir, missing, name, rel: at })
}

impl WriteTarget {
    /// The directory the file is in (once [`Self::create_dirs`] ran) and its name.
    pub(crate) fn at(&self) -> (BorrowedFd<'_>, &OsStr) {
        (self.dir.as_fd(), &self.name)
    }

    /// Whether every directory on the way exists (nothing for [`Self::create_dirs`] to make).
    pub(crate) fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }

    /// The file there now, opened for reading without following a link; `None` when
    /// nothing is there.
    pub(crate) fn existing(&self) -> io::Result<Option<File>> {
        if !self.missing.is_empty() {
            return Ok(None);
        }
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        match rustix::fs::openat(&self.dir, self.name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the missing directories, outermost first, each relative to the one before
    /// and opened again with no link followed: one swapped for a link in between is
    /// refused, not followed.
    pub(crate) fn create_dirs(&mut self) -> io::Result<()> {
        for name in std::mem::take(&mut self.missing) {
            rustix::fs::mkdirat(&self.dir, name.as_os_str(), Mode::from_raw_mode(0o777))?;
            self.dir = openat2(self.dir.as_fd(), Path::new(&name), OFlags::RDONLY | OFlags::DIRECTORY, STEP)?;
        }
        Ok(())
    }
}

/// One step of a path being resolved.
enum Step {
    Up,
    /// A name, and whether it came from a link's target.
    Name(OsString, bool),
}

/// A path resolved beneath the root.
enum Resolved {
    /// It exists: the directory holding its last name (the path itself when `last` is
    /// `None`) and that directory's real names from the root.
    Found { dir: OwnedFd, names: Vec<OsString>, last: Option<OsString> },
    /// `rest[0]` does not exist in `dir`; `rest` is the path from there on (`..`
    /// worked out on the text), and `via_link` says whether a link led to it.
    Missing { dir: OwnedFd, names: Vec<OsString>, rest: Vec<OsString>, via_link: bool, went_up: bool },
}

/// Resolves `rel` beneath the root one name at a time, the way the kernel would, but
/// holding each directory by its descriptor: `..` goes back to the descriptor it came
/// from (never above the root), a link is read and its target resolved in turn (an
/// absolute one only if it names a place under the root's path), and each directory
/// is opened relative to the last with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
/// so a name swapped for a link between the look and the open is refused by the
/// kernel, and looked at again. `follow_last` says whether a link as the last name is
/// followed.
fn resolve(root: &Root, rel: &Path, follow_last: bool) -> Result<Resolved, Fail> {
    let mut steps = steps_of(rel, false);
    let top = openat2(root.as_fd(), Path::new("."), OFlags::PATH | OFlags::DIRECTORY, STEP).map_err(Fail::Errno)?;
    let mut dirs: Vec<OwnedFd> = vec![top];
    let mut names: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(step) = steps.pop_front() {
        let here = dirs.last().expect("the root is never left").as_fd();
        let (name, from_link) = match step {
            Step::Up if dirs.len() == 1 => return Err(Fail::Outside),
            Step::Up => {
                dirs.pop();
                names.pop();
                continue;
            }
            Step::Name(name, from_link) => (name, from_link),
        };
        let last = steps.is_empty();
        let stat = match rustix::fs::statat(here, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => {
                let (mut rest, mut went_up) = (vec![name], false);
                for step in steps {
                    match step {
                        Step::Name(name, _) => rest.push(name),
                        Step::Up => {
                            went_up = true;
                            // Above the missing name: out of the directories found.
                            if rest.pop().is_none() && names.pop().is_none() {
                                return Err(Fail::Outside);
                            }
                        }
                    }
                }
                let dir = dirs.pop().expect("the root is never left");
                return Ok(Resolved::Missing { dir, names, rest, via_link: from_link, went_up });
            }
            Err(e) => return Err(Fail::Errno(e)),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink if !last || follow_last => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Fail::Errno(Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(here, name.as_os_str(), Vec::new()).map_err(Fail::Errno)?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let target = if target.is_absolute() {
                    // Only a place under the root's path, which is then walked from the root.
                    let inside = target.strip_prefix(&root.path).map_err(|_| Fail::Outside)?.to_path_buf();
                    dirs.truncate(1);
                    names.clear();
                    inside
                } else {
                    target
                };
                for step in steps_of(&target, true).into_iter().rev() {
                    steps.push_front(step);
                }
            }
            FileType::Directory if !last => {
                match openat2(here, Path::new(&name), OFlags::PATH | OFlags::DIRECTORY, STEP) {
                    Ok(fd) => {
                        dirs.push(fd);
                        names.push(name);
                    }
                    // Swapped for a link or a file since the look: look again.
                    Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) if links < MAX_LINKS => {
                        links += 1;
                        steps.push_front(Step::Name(name, from_link));
                    }
                    Err(e) => return Err(Fail::Errno(e)),
                }
            }
            _ if !last => return Err(Fail::Errno(Errno::NOTDIR)),
            _ => {
                let dir = dirs.pop().expect("the root is never left");
                return Ok(Resolved::Found { dir, names, last: Some(name) });
            }
        }
    }
    let dir = dirs.pop().expect("the root is never left");
    Ok(Resolved::Found { dir, names, last: None })
}

/// The steps of `path`: names and `..`, with `.` and `/` left out.
fn steps_of(path: &Path, from_link: bool) -> VecDeque<Step> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(Step::Name(name.to_owned(), from_link)),
            Component::ParentDir => Some(Step::Up),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// One name opened relative to a directory's descriptor: the kernel refuses a link, a
/// `..` or a magic link, so the lookup cannot leave that directory.
const STEP: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);

fn openat2(dir: BorrowedFd<'_>, path: &Path, flags: OFlags, resolve: ResolveFlags) -> Result<OwnedFd, Errno> {
    // openat2 refuses flags that mean nothing with `O_PATH` (`EINVAL`), unlike openat.
    let flags =
        if flags.contains(OFlags::PATH) { flags | OFlags::CLOEXEC } else { flags | OFlags::CLOEXEC | OFlags::NOCTTY };
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
            Err(Errno::NOSYS) if resolve.contains(ResolveFlags::NO_SYMLINKS) => {
                return without_openat2(dir, path, flags);
            }
            done => return done,
        }
    }
}

/// What `openat2(RESOLVE_NO_SYMLINKS)` does, for kernels before 5.6 that lack it: one
/// name at a time, each opened with `O_NOFOLLOW` relative to the last (a link among
/// them is refused), from `/` for an absolute path. Every path this module hands it is
/// plain names (a `..` is refused rather than looked up); a name cannot be a `/proc`
/// magic link without a link on the way, so nothing else of `openat2` is needed.
fn without_openat2(dir: BorrowedFd<'_>, path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut at: Option<OwnedFd> = None;
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir => at = Some(rustix::fs::open("/", step, Mode::empty())?),
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return Err(Errno::XDEV),
        }
    }
    let last = names.pop().unwrap_or(OsStr::new("."));
    for name in names {
        let here = at.as_ref().map_or(dir, AsFd::as_fd);
        at = Some(rustix::fs::openat(here, name, step, Mode::empty())?);
    }
    let here = at.as_ref().map_or(dir, AsFd::as_fd);
    rustix::fs::openat(here, last, flags | OFlags::NOFOLLOW, Mode::empty())
}

/// The data directory, when it and the root overlap.
fn overlapping<'a>(root: &Root, data_dir: Option<&'a Path>) -> Option<&'a Path> {
    data_dir.filter(|d| d.starts_with(&root.path) || root.path.starts_with(d))
}

/// `requested` relative to the root, as written: an absolute path must name a place
/// under the root's path.
fn relative(root: &Root, requested: &str) -> Result<PathBuf, PathError> {
    let path = Path::new(requested);
    if !path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    path.strip_prefix(&root.path).map(Path::to_path_buf).map_err(|_| PathError::Outside(requested.to_owned()))
}

/// What a failed lookup tells the model.
fn refusal(root: &Root, data_dir: Option<&Path>, requested: &str, fail: Fail) -> PathError {
    match fail {
        Fail::Outside | Fail::Errno(Errno::XDEV) => PathError::Outside(requested.to_owned()),
        Fail::Missing { at } => match check_data_dir(root, data_dir, &at, requested) {
            Err(refused) => refused,
            Ok(()) => PathError::NotFound(requested.to_owned()),
        },
        Fail::Errno(e) => PathError::Inaccessible { path: requested.to_owned(), source: e.into() },
    }
}

/// `path` with `.` and `..` worked out on the text alone.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    fn project() -> (tempfile::TempDir, PathBuf, Root) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().canonicalize().expect("canonical temp dir");
        fs::create_dir(path.join("src")).expect("mkdir");
        fs::write(path.join("src/main.rs"), "fn main() {}\n").expect("write");
        let root = Root::open(&path, None).expect("open root");
        (dir, path, root)
    }

    fn opened(root: &Root, p: &str) -> Result<PathBuf, PathError> {
        open(root, None, p).map(|o| o.rel)
    }

    /// Where a write target lands, relative to the root, once its directories exist.
    fn write_rel(root: &Root, p: &str) -> Result<PathBuf, PathError> {
        resolve_for_write(root, None, p).map(|t| t.rel)
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_dir, path, root) = project();
        assert_eq!(opened(&root, ".").expect("root"), PathBuf::new());
        assert_eq!(opened(&root, "").expect("root"), PathBuf::new());
        assert_eq!(opened(&root, "src/../src/main.rs").expect("file"), Path::new("src/main.rs"));
        let absolute = path.join("src/main.rs");
        assert_eq!(opened(&root, absolute.to_str().expect("utf-8")).expect("file"), Path::new("src/main.rs"));
    }

    #[test]
    fn paths_leaving_the_root_are_refused() {
        let (_dir, _path, root) = project();
        for p in ["..", "../x", "src/../../x", "/etc/passwd", "/nonexistent/x"] {
            let err = opened(&root, p).expect_err(p);
            assert_eq!(err.to_string(), format!("path {p:?} is outside the project directory"));
        }
    }

    #[test]
    fn a_sibling_directory_sharing_the_prefix_is_outside() {
        let (_dir, path, root) = project();
        let sibling = PathBuf::from(format!("{}-other", path.display()));
        fs::create_dir(&sibling).expect("mkdir sibling");
        let err = opened(&root, sibling.to_str().expect("utf-8 temp path"));
        fs::remove_dir(&sibling).expect("clean up sibling");
        assert!(matches!(err, Err(PathError::Outside(_))), "{err:?}");
    }

    #[test]
    fn symlinks_are_judged_by_their_target() {
        let (_dir, path, root) = project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret"), "s3cret").expect("write");
        std::os::unix::fs::symlink(outside.path(), path.join("escape")).expect("symlink");
        std::os::unix::fs::symlink("../src", path.join("src/inner")).expect("symlink");

        assert!(matches!(opened(&root, "escape/secret"), Err(PathError::Outside(_))));
        assert!(matches!(opened(&root, "escape"), Err(PathError::Outside(_))));
        // Not existing behind an escaping link is still "outside", not "not found".
        assert!(matches!(opened(&root, "escape/missing"), Err(PathError::Outside(_))));
        assert_eq!(opened(&root, "src/inner/main.rs").expect("inner link"), Path::new("src/main.rs"));
    }

    #[test]
    fn missing_paths_inside_are_reported_as_missing() {
        let (_dir, _path, root) = project();
        let err = opened(&root, "src/nope.rs").expect_err("missing");
        assert_eq!(err.to_string(), r#"no such file or directory: "src/nope.rs""#);
        assert!(matches!(opened(&root, "a/b/c"), Err(PathError::NotFound(_))));
    }

    #[test]
    fn write_targets_are_existing_files_or_new_paths_inside() {
        let (_dir, _path, root) = project();
        assert_eq!(write_rel(&root, "src/main.rs").expect("existing"), Path::new("src/main.rs"));
        assert_eq!(write_rel(&root, "new/dir/f.rs").expect("new"), Path::new("new/dir/f.rs"));
        assert_eq!(write_rel(&root, "new/../src/lib.rs").expect("new"), Path::new("src/lib.rs"));
        assert_eq!(write_rel(&root, "a/./b/../c").expect("new"), Path::new("a/c"));
        // Back through a missing directory onto an existing file.
        assert_eq!(write_rel(&root, "x/../src/main.rs").expect("existing"), Path::new("src/main.rs"));
    }

    #[test]
    fn write_targets_leaving_the_root_are_refused() {
        let (_dir, path, root) = project();
        let outside = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(outside.path(), path.join("escape")).expect("symlink");
        std::os::unix::fs::symlink("../../x", path.join("src/up")).expect("symlink");
        // `missing/../escape/x` only reaches the link once `..` is worked out.
        for p in [
            "../x",
            "missing/../../x",
            "a/b/../../../x",
            "escape/x",
            "escape/new/x",
            "missing/../escape/x",
            "/tmp/x",
            "src/up",
        ] {
            let err = resolve_for_write(&root, None, p).expect_err(p);
            assert_eq!(err.to_string(), format!("path {p:?} is outside the project directory"));
        }
    }

    #[test]
    fn write_targets_through_a_dangling_link_are_refused() {
        let (_dir, path, root) = project();
        std::os::unix::fs::symlink("nowhere/yet", path.join("dangling")).expect("symlink");
        for p in ["dangling", "dangling/x", "new/../dangling"] {
            assert!(matches!(resolve_for_write(&root, None, p), Err(PathError::BrokenLink(_))), "{p}");
        }
        // One to nowhere outside is outside, whether or not its target exists.
        std::os::unix::fs::symlink("/nonexistent/spool-target", path.join("away")).expect("symlink");
        assert!(matches!(resolve_for_write(&root, None, "away"), Err(PathError::Outside(_))));
    }

    #[test]
    fn the_data_directory_under_the_root_is_refused_existing_or_not() {
        let (_dir, path, root) = project();
        let data = path.join("data");
        fs::create_dir(&data).expect("mkdir");
        fs::write(data.join("config.toml"), "key").expect("write");
        std::os::unix::fs::symlink("data", path.join("alias")).expect("symlink");
        for p in ["data/config.toml", "alias/config.toml", "data", "data/missing", "src/../data/config.toml"] {
            assert!(matches!(open(&root, Some(&data), p), Err(PathError::DataDir(_))), "{p}");
        }
        for p in ["data/config.toml", "alias/config.toml", "data/new/x", "alias/new"] {
            assert!(matches!(resolve_for_write(&root, Some(&data), p), Err(PathError::DataDir(_))), "{p}");
        }
        assert!(open(&root, Some(&data), "src/main.rs").is_ok());
    }

    #[test]
    fn without_openat2_links_are_refused_one_name_at_a_time() {
        let (_dir, path, root) = project();
        std::os::unix::fs::symlink("src", path.join("alias")).expect("symlink");
        let open = |p: &str, flags| without_openat2(root.as_fd(), Path::new(p), flags);
        assert!(open("src/main.rs", OFlags::RDONLY).is_ok());
        assert!(open(".", OFlags::RDONLY | OFlags::DIRECTORY).is_ok());
        assert_eq!(open("alias/main.rs", OFlags::RDONLY).err(), Some(Errno::NOTDIR));
        assert_eq!(open("alias", OFlags::RDONLY).err(), Some(Errno::LOOP));
        assert_eq!(open("src/../src/main.rs", OFlags::RDONLY).err(), Some(Errno::XDEV));
        let absolute = path.join("src/main.rs");
        assert!(without_openat2(rustix::fs::CWD, &absolute, OFlags::RDONLY).is_ok());
        let through = path.join("alias/main.rs");
        assert!(without_openat2(rustix::fs::CWD, &through, OFlags::RDONLY).is_err());
    }

    #[test]
    fn a_root_swapped_for_a_link_or_another_directory_is_refused() {
        let base = tempfile::tempdir().expect("temp dir");
        let base = base.path().canonicalize().expect("canonical");
        let (project, elsewhere) = (base.join("project"), base.join("elsewhere"));
        fs::create_dir(&project).expect("mkdir");
        fs::create_dir(&elsewhere).expect("mkdir");
        let meta = fs::metadata(&project).expect("stat");
        let id = DirIdentity { dev: meta.dev(), ino: meta.ino() };
        assert!(Root::open(&project, Some(id)).is_ok());

        // Moved away, not removed: a new directory could otherwise reuse its inode number.
        fs::rename(&project, base.join("moved")).expect("move away");
        std::os::unix::fs::symlink(&elsewhere, &project).expect("symlink");
        let err = Root::open(&project, Some(id)).expect_err("a link");
        assert!(err.to_string().contains("replaced by a symbolic link"), "{err}");
        // Without an identity kept, a link is still refused.
        assert!(matches!(Root::open(&project, None), Err(PathError::Moved { .. })));

        fs::remove_file(&project).expect("rm link");
        fs::create_dir(&project).expect("mkdir again");
        let err = Root::open(&project, Some(id)).expect_err("another directory");
        assert!(err.to_string().contains("replaced by another directory"), "{err}");
    }
}
