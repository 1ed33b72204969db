//! Replacing a file's contents so that a crash at any moment leaves either the old file
//! or the new one, never a mix: the bytes go to a temporary file in the same directory,
//! are flushed to disk, and the temporary file is renamed over the target. A rename
//! within one directory is atomic on POSIX file systems; a temporary file anywhere else
//! could sit on another file system, where rename is a copy.
//!
//! A crash before the rename can leave a stray `.NAME.XXXXXX.spool-tmp` beside the
//! target; that is the price of never showing a half-written one.

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// How much of the target's name goes into the temporary file's name, so a name near
/// the 255-byte limit still leaves room for the random part and the suffix.
const NAME_IN_TEMP_NAME_CHARS: usize = 64;

/// Writes `content` to `target` atomically. `keep` is the mode of the file being
/// replaced; a new file gets the usual `0o666` less the umask, like any editor's.
///
/// Blocking: call it from `spawn_blocking`.
pub(crate) fn write_file(target: &Path, content: &[u8], keep: Option<Permissions>) -> io::Result<()> {
    let dir = target.parent().ok_or_else(|| io::Error::other("the path has no parent directory"))?;
    let name: String = target
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(NAME_IN_TEMP_NAME_CHARS).collect())
        .unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".spool-tmp")
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    if let Some(mode) = keep {
        // `fchmod`, unlike the mode given at creation, is not narrowed by the umask.
        temp.as_file().set_permissions(mode)?;
    }
    temp.write_all(content)?;
    temp.as_file().sync_all()?;
    // On failure the temporary file is deleted when the error drops it.
    temp.persist(target).map_err(|err| err.error)?;
    // Flushing the directory makes the rename itself survive a power cut. The new
    // contents are already in place either way, so a failure here is not reported.
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Creates the missing directories above `file`, outermost first. `fs::create_dir`
/// rather than `create_dir_all`: it fails on anything already there, a symlink
/// included, so a directory swapped for a link after the path was checked is not
/// followed.
pub(crate) fn create_parents(file: &Path) -> io::Result<()> {
    let Some(parent) = file.parent() else { return Ok(()) };
    let missing: Vec<&Path> = parent.ancestors().take_while(|dir| dir.symlink_metadata().is_err()).collect();
    for dir in missing.into_iter().rev() {
        fs::create_dir(dir)?;
    }
    Ok(())
}
