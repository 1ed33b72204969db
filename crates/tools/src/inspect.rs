//! What `write` and `edit` would change, looked at when an approval is asked and again
//! when it is approved (see `spool_engine::Tool::inspect`): a fingerprint of the target
//! file, which the approval keeps, and a preview of the change for the person deciding.
//!
//! The fingerprint says what the tool would find at the path:
//! * `sha256:<hex>` of the file's bytes, or `absent` when there is no file yet;
//! * `large:<bytes>:<mtime ns>` for a file over [`MAX_FILE_BYTES`], which is never read
//!   whole: its size and modification time stand for its content. `edit` refuses such a
//!   file anyway, and `write` replaces it without reading it; what could slip through is
//!   a same-size rewrite within one timestamp tick, on a file too large to show;
//! * `directory`, `special` (not a regular file) or `unusable:<reason>` (a path outside
//!   the project, a file that cannot be read): the call would fail, and a different
//!   reason is a change too.
//!
//! The preview is a unified diff of the file as it is now against what the call would
//! make of it, cut after [`PREVIEW_LINES`] lines or [`PREVIEW_BYTES`] bytes with a line
//! saying how much was left out (a frame carries the card to every client, and the
//! arguments hold the full text). When the call would fail — an `edit` whose `oldString`
//! no longer matches — the preview is the error the call would end with.
//!
//! After a successful call the same kind of diff, of the file just before against
//! after, goes with the result ([`changed`]), with a larger cap: the stored result
//! keeps it so a finished card shows the change after a reload as well.

use crate::MAX_FILE_BYTES;
use crate::error::ToolError;
use sha2::{Digest, Sha256};
use similar::udiff::UnifiedHunkHeader;
use similar::{ChangeTag, TextDiff};
use spool_engine::{Inspected, Resource};
use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::time::{Duration, UNIX_EPOCH};

/// At most this many lines of diff in a preview.
pub const PREVIEW_LINES: usize = 400;
/// At most this many bytes of diff in a preview.
pub const PREVIEW_BYTES: usize = 32 * 1024;
/// Lines of unchanged text shown around each change.
const CONTEXT: usize = 3;
/// A line diff of two large, very different files gives up finding the smallest diff
/// after this long and shows a larger, still correct one.
const DIFF_TIME: Duration = Duration::from_secs(1);

/// What a tool finds at a resolved path.
#[derive(Debug)]
pub(crate) enum Found {
    Absent,
    Directory,
    /// Not a regular file: a socket, a device, a FIFO.
    Special,
    Bytes(Vec<u8>),
    /// Over [`MAX_FILE_BYTES`]: not read.
    Large {
        bytes: u64,
        modified_ns: u128,
    },
    /// The path is refused, or the file cannot be read: the call would fail with this.
    Unusable(ToolError),
}

impl Found {
    /// Looks at `requested`, opened by `open` (the tool's own rule for its paths;
    /// `None` when nothing is there).
    pub(crate) fn look(requested: &str, open: impl FnOnce() -> Result<Option<fs::File>, ToolError>) -> Found {
        match open() {
            Ok(Some(file)) => Found::at(file, requested),
            Ok(None) => Found::Absent,
            Err(e) => Found::Unusable(e),
        }
    }

    /// What `file` holds; the file opened is the one judged, whatever its path does now.
    pub(crate) fn at(file: fs::File, requested: &str) -> Found {
        let meta = match file.metadata() {
            Ok(meta) => meta,
            Err(e) => return Found::Unusable(ToolError::io(requested)(e)),
        };
        if meta.is_dir() {
            return Found::Directory;
        }
        if !meta.is_file() {
            return Found::Special;
        }
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Found::large(&meta);
        }
        // Bounded even if the file grows between the stat and the read.
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        let read = (&file).take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes);
        match read {
            Err(e) => Found::Unusable(ToolError::io(requested)(e)),
            Ok(_) if bytes.len() > MAX_FILE_BYTES => file
                .metadata()
                .map_or_else(|e| Found::Unusable(ToolError::io(requested)(e)), |meta| Found::large(&meta)),
            Ok(_) => Found::Bytes(bytes),
        }
    }

    fn large(meta: &fs::Metadata) -> Found {
        let modified_ns =
            meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
        Found::Large { bytes: meta.len(), modified_ns }
    }

    pub(crate) fn fingerprint(&self) -> String {
        match self {
            Found::Absent => "absent".into(),
            Found::Directory => "directory".into(),
            Found::Special => "special".into(),
            Found::Bytes(bytes) => {
                let digest = Sha256::digest(bytes);
                let mut hex = String::with_capacity(7 + 64);
                hex.push_str("sha256:");
                for b in digest {
                    let _ = write!(hex, "{b:02x}");
                }
                hex
            }
            Found::Large { bytes, modified_ns } => format!("large:{bytes}:{modified_ns}"),
            Found::Unusable(e) => format!("unusable:{e}"),
        }
    }

    /// The resource and preview for a call on `requested`.
    pub(crate) fn inspected(&self, requested: &str, preview: String) -> Inspected {
        Inspected { resource: Resource { path: requested.to_owned(), fingerprint: self.fingerprint() }, preview }
    }
}

/// Runs `look` on tokio's blocking pool: it reads a whole file. If it cannot finish (a
/// panic, a runtime shutting down), the file counts as unusable, never as unchanged, so
/// a decision that needed the look asks again instead of acting blind.
pub(crate) async fn off_thread(requested: String, look: impl FnOnce() -> Inspected + Send + 'static) -> Inspected {
    match tokio::task::spawn_blocking(look).await {
        Ok(inspected) => inspected,
        Err(join) => {
            let error = ToolError::Internal(join.to_string());
            let preview = failing(&error);
            Found::Unusable(error).inspected(&requested, preview)
        }
    }
}

/// The preview of a call that would fail.
pub(crate) fn failing(error: &ToolError) -> String {
    format!("The call would fail: {error}")
}

/// The preview of replacing the whole of `found` with `new`, as `tool` would.
pub(crate) fn replacing(tool: &str, requested: &str, found: &Found, new: &str) -> String {
    let now = match found {
        Found::Absent => "",
        Found::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                return format!(
                    "{requested} holds {} that are not UTF-8 text; the {tool} replaces them with {}.",
                    crate::bytes(bytes.len() as u64),
                    crate::bytes(new.len() as u64)
                );
            }
        },
        Found::Large { bytes, .. } => {
            return format!(
                "{requested} holds {}, too many to show; the {tool} replaces them with {}.",
                crate::bytes(*bytes),
                crate::bytes(new.len() as u64)
            );
        }
        // The tools refuse these before changing anything; they say why themselves.
        Found::Directory | Found::Special | Found::Unusable(_) => "",
    };
    let before = match found {
        Found::Absent => format!("{requested} (does not exist yet)"),
        _ => format!("{requested} (now)"),
    };
    diff(&before, &format!("{requested} (after the {tool})"), now, new)
}

/// A unified diff of `old` against `new`, cut at [`PREVIEW_LINES`] / [`PREVIEW_BYTES`].
pub(crate) fn diff(old_name: &str, new_name: &str, old: &str, new: &str) -> String {
    diff_within(old_name, new_name, old, new, PREVIEW_LINES, PREVIEW_BYTES)
}

/// What a successful `write` or `edit` (`tool`) changed, for its stored result: the
/// diff of `found` (the file just before the call) against `new`, cut at
/// [`RESULT_DIFF_LINES`] / [`spool_protocol::RESULT_DIFF_CAP`]. `None` when the old
/// text cannot be shown as text (not UTF-8, too large to have been read): the result
/// line says what happened.
pub(crate) fn changed(tool: &str, requested: &str, found: &Found, new: &str) -> Option<String> {
    let (old, before) = match found {
        Found::Absent => ("", format!("{requested} (did not exist)")),
        Found::Bytes(bytes) => (std::str::from_utf8(bytes).ok()?, format!("{requested} (before the {tool})")),
        _ => return None,
    };
    let after = format!("{requested} (after the {tool})");
    // The note saying how much was left out comes on top of the budget, within the cap.
    let budget = spool_protocol::RESULT_DIFF_CAP - MORE_NOTE_BYTES;
    Some(diff_within(&before, &after, old, new, RESULT_DIFF_LINES, budget))
}

/// At most this many lines of diff in a stored result.
pub const RESULT_DIFF_LINES: usize = 2000;
/// Room kept under a cap for the closing "… N more lines" note.
const MORE_NOTE_BYTES: usize = 128;

fn diff_within(old_name: &str, new_name: &str, old: &str, new: &str, max_lines: usize, max_bytes: usize) -> String {
    let diff = TextDiff::configure().timeout(DIFF_TIME).diff_lines(old, new);
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let (mut lines, mut left_out) = (0usize, 0usize);
    let groups = diff.grouped_ops(CONTEXT);
    if groups.is_empty() {
        out.push_str("(no change)\n");
        return out;
    }
    for group in &groups {
        let header = format!("{}\n", UnifiedHunkHeader::new(group));
        let mut changes = group.iter().flat_map(|op| diff.iter_changes(op));
        if lines < max_lines && out.len() + header.len() <= max_bytes {
            out.push_str(&header);
            lines += 1;
        } else {
            left_out += 1;
        }
        for change in &mut changes {
            let sign = match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            };
            let mut line = format!("{sign}{}", change.value());
            if change.missing_newline() {
                line.push_str("\n\\ No newline at end of file\n");
            }
            if left_out == 0 && lines < max_lines && out.len() + line.len() <= max_bytes {
                out.push_str(&line);
                lines += 1;
            } else {
                left_out += 1;
            }
        }
    }
    if left_out > 0 {
        let s = if left_out == 1 { "" } else { "s" };
        let _ = writeln!(out, "… {left_out} more line{s} of the diff not shown (the call's arguments hold all of it)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path;

    #[test]
    fn fingerprints_name_what_is_there() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        let look = |p: &str| {
            let open = || {
                let root = path::Root::open(&root, None)?;
                path::resolve_for_write(&root, None, p)?.existing().map_err(ToolError::io(p))
            };
            Found::look(p, open).fingerprint()
        };
        assert_eq!(look("a.txt"), "absent");
        fs::write(root.join("a.txt"), "abc").expect("write");
        // sha256("abc"), the FIPS 180-2 test vector.
        assert_eq!(look("a.txt"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        fs::create_dir(root.join("d")).expect("mkdir");
        assert_eq!(look("d"), "directory");
        assert_eq!(look("../x"), r#"unusable:path "../x" is outside the project directory"#);
        fs::write(root.join("big"), vec![b'x'; MAX_FILE_BYTES + 1]).expect("write");
        assert!(look("big").starts_with(&format!("large:{}:", MAX_FILE_BYTES + 1)), "{}", look("big"));
    }

    #[test]
    fn a_diff_shows_each_change_with_context() {
        let old = "one\ntwo\nthree\n";
        let new = "one\n2\nthree\n";
        assert_eq!(
            diff("a (now)", "a (after)", old, new),
            "--- a (now)\n+++ a (after)\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        );
        assert_eq!(
            diff("a", "b", "x", "y"),
            "--- a\n+++ b\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"
        );
        assert_eq!(diff("a", "b", "same\n", "same\n"), "--- a\n+++ b\n(no change)\n");
    }

    #[test]
    fn a_long_diff_is_cut_and_says_so() {
        let new: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let shown = diff("a", "b", "", &new);
        assert_eq!(shown.lines().count(), 2 + PREVIEW_LINES + 1, "{shown}");
        assert!(shown.ends_with("… 601 more lines of the diff not shown (the call's arguments hold all of it)\n"));
        let wide = "x".repeat(PREVIEW_BYTES);
        let shown = diff("a", "b", "", &format!("{wide}\n"));
        assert!(shown.len() < PREVIEW_BYTES + 200, "{}", shown.len());
        assert!(shown.ends_with("… 1 more line of the diff not shown (the call's arguments hold all of it)\n"));
    }
}
