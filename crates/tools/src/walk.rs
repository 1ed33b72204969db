//! The walk `glob` and `grep` share: every file under a directory of the project that
//! git would not ignore, in path order, through ripgrep's walker (the `ignore` crate).
//!
//! `.gitignore`, `.ignore`, `.git/info/exclude` and the user's global git excludes are
//! honoured whether or not the project is a git repository, since a project copied
//! without its `.git` still means its `.gitignore`. As in ripgrep, ignore files in the
//! directories above the one walked count too (a subdirectory is filtered by the root's
//! `.gitignore`, a project inside a larger repository by that repository's), and a
//! directory named explicitly is walked even when it is ignored itself: asking for
//! `target` means wanting to look in it. Hidden files are included, since `.github/` or
//! `.env.example` are part of a project, but `.git` directories are not.
//!
//! Symbolic links are never followed into directories, so a walk cannot loop. A link
//! to a file counts when its target is a regular file inside the root; one pointing
//! elsewhere is skipped. The walker itself reads directories by path, which a process
//! swapping a directory for a link could redirect, so nothing it yields is trusted as
//! is: every entry is opened again beneath the project's directory descriptor
//! ([`path::open_rel`], `RESOLVE_BENEATH`) and skipped unless that works, and a file's
//! contents are only ever read through such a descriptor. A name from outside the root
//! is never shown or read. Entries the walker cannot read (a directory without
//! permission) are skipped, and so is Spool's data directory when it lies under the
//! walk: a search over the project must never open the live database (reading it from
//! inside the server drops SQLite's locks) or the config file with provider keys.

use crate::error::ToolError;
use crate::path::{self, Root};
use ignore::WalkBuilder;
use rustix::fs::OFlags;
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// A file the walk found.
pub(crate) struct Found {
    /// Where the walk met it, relative to the root (never through a directory link):
    /// what [`path::open_rel`] opens it by.
    pub rel: PathBuf,
    /// The file's metadata, of the link's target for a link.
    pub meta: fs::Metadata,
}

/// Calls `visit` with every file under `dir` (relative to `root`, as the kernel found
/// it), in path order, until it breaks, never entering `data_dir` (canonical). Checks
/// `cancel` before each entry.
pub(crate) fn files(
    root: &Root,
    dir: &Path,
    data_dir: Option<&Path>,
    cancel: &CancellationToken,
    mut visit: impl FnMut(Found) -> Result<ControlFlow<()>, ToolError>,
) -> Result<(), ToolError> {
    let skip = data_dir.map(Path::to_path_buf);
    let walk = WalkBuilder::new(root.path().join(dir))
        .hidden(false)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            let git = entry.file_name() == ".git" && entry.file_type().is_some_and(|t| t.is_dir());
            // The walk starts at a canonical directory and never follows a directory
            // link, so an entry's path is canonical up to its own name.
            !git && !skip.as_ref().is_some_and(|d| entry.path().starts_with(d))
        })
        .build();
    for entry in walk {
        if cancel.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        let Ok(entry) = entry else { continue };
        let Some(file_type) = entry.file_type() else { continue };
        if !file_type.is_file() && !file_type.is_symlink() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root.path()).map(Path::to_path_buf) else { continue };
        let Some(meta) = verified(root, data_dir, &rel) else { continue };
        if visit(Found { rel, meta })?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The metadata of the regular file at `rel`, opened beneath the root (a link followed
/// only while it stays inside), if it is one and not in the data directory.
fn verified(root: &Root, data_dir: Option<&Path>, rel: &Path) -> Option<fs::Metadata> {
    let found = path::open_rel(root, rel, OFlags::PATH).ok()?;
    path::check_data_dir(root, data_dir, &found.rel, "").ok()?;
    fs::File::from(found.fd).metadata().ok().filter(fs::Metadata::is_file)
}

/// `path` relative to `base` as one line of output, `/`-separated, escaped by
/// [`crate::display_name`] when it holds a control character.
pub(crate) fn display_relative(path: &Path, base: &Path) -> String {
    let relative = path.strip_prefix(base).unwrap_or(path);
    crate::display_name(relative.as_os_str())
}
