//! Replacing a file's contents so that a crash at any moment leaves either the old file
//! or the new one, never a mix: the bytes go to a temporary file in the same directory,
//! are flushed to disk, and the temporary file is renamed over the target. A rename
//! within one directory is atomic on POSIX file systems; a temporary file anywhere else
//! could sit on another file system, where rename is a copy.
//!
//! Everything happens relative to the directory's descriptor, opened beneath the
//! project by [`crate::path`]: the temporary file is created there (`O_EXCL`, so never
//! through a link) and renamed within it, and a rename replaces a link rather than
//! following it. A directory swapped for a link after it was opened changes nothing.
//!
//! A crash before the rename can leave a stray `.NAME.XXXXXX.spool-tmp` beside the
//! target; that is the price of never showing a half-written one.

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::fd::BorrowedFd;

/// How much of the target's name goes into the temporary file's name, so a name near
/// the 255-byte limit still leaves room for the random part and the suffix.
const NAME_IN_TEMP_NAME_CHARS: usize = 64;
/// Names tried before giving up when each is taken (only ever a stray from a crash).
const TEMP_NAME_TRIES: usize = 100;

/// Writes `content` to `name` in `dir` atomically. `keep` is the mode of the file being
/// replaced; a new file gets the usual `0o666` less the umask, like any editor's.
///
/// Blocking: call it from `spawn_blocking`.
pub(crate) fn write_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    keep: Option<Permissions>,
) -> io::Result<()> {
    let short: String = name.to_string_lossy().chars().take(NAME_IN_TEMP_NAME_CHARS).collect();
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut tries = 0;
    let (temp_name, fd) = loop {
        let temp_name = format!(".{short}.{:016x}.spool-tmp", random());
        match rustix::fs::openat(dir, temp_name.as_str(), flags, Mode::from_raw_mode(0o666)) {
            Ok(fd) => break (temp_name, fd),
            Err(Errno::EXIST) if tries < TEMP_NAME_TRIES => tries += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let mut temp = File::from(fd);
    let written = (|| -> io::Result<()> {
        if let Some(mode) = keep {
            // `fchmod`, unlike the mode given at creation, is not narrowed by the umask.
            temp.set_permissions(mode)?;
        }
        temp.write_all(content)?;
        temp.sync_all()?;
        rustix::fs::renameat(dir, temp_name.as_str(), dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp_name.as_str(), AtFlags::empty());
    }
    written?;
    // Flushing the directory makes the rename itself survive a power cut. The new
    // contents are already in place either way, so a failure here is not reported.
    let _ = rustix::fs::fsync(dir);
    Ok(())
}

/// A random number for a temporary file's name: the standard library's hasher keys are
/// random per process and differ per `RandomState`; `O_EXCL` settles any clash.
fn random() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}
