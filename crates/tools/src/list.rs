//! The `list` tool: a directory's entries, one per line, sorted by name, directories
//! marked with a trailing `/` so the model can tell what to list next and what to read.
//!
//! Only the first 1,000 entries are shown, followed by a line saying how many were
//! left out: a `node_modules` listing would otherwise fill the model's context. All
//! names are still read and sorted first, so the entries shown do not depend on the
//! order the file system happens to return them in.

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::path;
use async_trait::async_trait;
use rustix::fs::{AtFlags, Dir, FileType, OFlags};
use serde::Deserialize;
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// At most this many entries are shown.
pub(crate) const MAX_ENTRIES: usize = 1_000;
/// How often (in entries) the listing loop checks for cancellation.
const CANCEL_CHECK_EVERY: usize = 1_024;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "list";

/// Lists a directory of the project.
#[derive(Clone, Copy, Debug, Default)]
pub struct List;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
}

#[async_trait]
impl Tool for List {
    /// It changes nothing, so plan mode offers it too.
    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument("list", args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change("list", args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: format!(
                "List the entries of a directory in the project, one per line, sorted by name; \
                 directories end with `/`. Shows at most {MAX_ENTRIES} entries."
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Directory to list, relative to the project root. Defaults to the root (\".\")."
                    }
                },
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: ListArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let requested = args.path.unwrap_or_else(|| ".".to_owned());
        let (scope, cancel) = (path::Scope::of(ctx), ctx.cancel.clone());
        run_blocking(move || list(&scope, &requested, &cancel)).await
    }
}

fn list(scope: &path::Scope, requested: &str, cancel: &CancellationToken) -> Result<String, ToolError> {
    let root = scope.open()?;
    // The directory is opened beneath the project and read through its descriptor, so
    // the names are those of the directory that was checked.
    let dir = path::open(&root, scope.data_dir(), requested)?;
    if !dir.meta.is_dir() {
        return Err(ToolError::NotDirectory(requested.to_owned()));
    }
    let io_err = |e: rustix::io::Errno| ToolError::io(requested)(e.into());
    let mut entries: Vec<(OsString, FileType)> = Vec::new();
    for (i, entry) in Dir::read_from(&dir.file).map_err(io_err)?.enumerate() {
        if i % CANCEL_CHECK_EVERY == 0 && cancel.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        let entry = entry.map_err(io_err)?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            // Some file systems do not say in the entry; ask without following a link.
            FileType::Unknown => rustix::fs::statat(&dir.file, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_or(FileType::Unknown, |stat| FileType::from_raw_mode(stat.st_mode)),
            kind => kind,
        };
        entries.push((name.to_owned(), kind));
    }
    if entries.is_empty() {
        return Ok("(empty directory)".to_owned());
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));

    let mut lines: Vec<String> = entries
        .iter()
        .take(MAX_ENTRIES)
        .map(|(name, kind)| {
            let mut line = crate::display_name(name);
            if is_dir(&root, &dir.rel.join(name), *kind) {
                line.push('/');
            }
            line
        })
        .collect();
    if entries.len() > MAX_ENTRIES {
        lines.push(format!("… {} more entries not shown", entries.len() - MAX_ENTRIES));
    }
    Ok(lines.join("\n"))
}

/// Whether an entry is a directory the model could list. A symlink counts when it
/// leads to a directory inside the project (the kernel follows it beneath the root);
/// one pointing outside is shown as a plain name, so the listing says nothing about
/// what lies beyond the root.
fn is_dir(root: &path::Root, rel: &Path, kind: FileType) -> bool {
    match kind {
        FileType::Directory => true,
        FileType::Symlink => path::open_rel(root, rel, OFlags::PATH | OFlags::DIRECTORY).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use std::fs;

    #[tokio::test]
    async fn lists_sorted_entries_with_directories_marked() {
        let (_dir, root) = test_project();
        fs::create_dir(root.join("src")).expect("mkdir");
        fs::write(root.join("src/lib.rs"), "").expect("write");
        fs::write(root.join("b.txt"), "b").expect("write");
        fs::write(root.join("a.txt"), "a").expect("write");
        fs::write(root.join(".hidden"), "").expect("write");
        std::os::unix::fs::symlink(root.join("src"), root.join("link")).expect("symlink");

        let out = List.call(serde_json::json!({}), &test_context(&root)).await;
        assert_eq!(out, ToolOutput::ok(".hidden\na.txt\nb.txt\nlink/\nsrc/"));

        let out = List.call(serde_json::json!({"path": "src"}), &test_context(&root)).await;
        assert_eq!(out, ToolOutput::ok("lib.rs"));
        // A bare call (null arguments) lists the root too.
        assert_eq!(
            List.call(serde_json::Value::Null, &test_context(&root)).await.text,
            ".hidden\na.txt\nb.txt\nlink/\nsrc/"
        );
    }

    #[tokio::test]
    async fn an_empty_directory_says_so() {
        let (_dir, root) = test_project();
        assert_eq!(List.call(serde_json::json!({}), &test_context(&root)).await, ToolOutput::ok("(empty directory)"));
    }

    #[tokio::test]
    async fn long_listings_are_capped_with_a_note() {
        let (_dir, root) = test_project();
        for i in 0..1_005 {
            fs::write(root.join(format!("f{i:04}")), "").expect("write");
        }
        let out = List.call(serde_json::json!({"path": "."}), &test_context(&root)).await;
        assert!(!out.is_error);
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), MAX_ENTRIES + 1);
        assert_eq!(lines[0], "f0000");
        assert_eq!(lines[999], "f0999");
        assert_eq!(lines[1000], "… 5 more entries not shown");
    }

    #[tokio::test]
    async fn outside_paths_are_refused_without_listing() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret-name"), "").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");

        for p in ["..", "escape", "/etc"] {
            let out = List.call(serde_json::json!({"path": p}), &test_context(&root)).await;
            assert!(out.is_error, "{p}");
            assert_eq!(out.text, format!("path {p:?} is outside the project directory"));
        }
        // The escaping link itself is listed, but not as a directory.
        assert_eq!(List.call(serde_json::json!({}), &test_context(&root)).await.text, "escape");
    }

    #[tokio::test]
    async fn bad_arguments_and_non_directories_are_tool_errors() {
        let (_dir, root) = test_project();
        fs::write(root.join("file.txt"), "x").expect("write");
        let cases = [
            (
                serde_json::json!({"path": 3}),
                "invalid arguments for list: invalid type: integer `3`, expected a string",
            ),
            (serde_json::json!("src"), "invalid arguments for list: expected a JSON object, got a string"),
            (serde_json::json!({"dir": "src"}), "invalid arguments for list: unknown field `dir`, expected `path`"),
            (serde_json::json!({"path": "file.txt"}), r#""file.txt" is not a directory"#),
            (serde_json::json!({"path": "nope"}), r#"no such file or directory: "nope""#),
        ];
        for (args, expected) in cases {
            assert_eq!(List.call(args, &test_context(&root)).await, ToolOutput::error(expected));
        }
    }

    #[tokio::test]
    async fn a_cancelled_run_stops_the_listing() {
        let (_dir, root) = test_project();
        fs::write(root.join("a"), "").expect("write");
        let ctx = test_context(&root);
        ctx.cancel.cancel();
        assert_eq!(List.call(serde_json::json!({}), &ctx).await, ToolOutput::error("aborted"));
    }
}
