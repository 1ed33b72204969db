//! The `write` tool: create a file or replace one whole, creating missing directories
//! on the way.
//!
//! The target is found by [`path::resolve_for_write`], so a new file, and every
//! directory made for it, lies inside the project; a symlink inside the project is
//! followed only when its target is inside too. The contents land atomically
//! ([`atomic::write_file`]), and a replaced file keeps its mode, so rewriting a script
//! leaves it executable. A read-only file is refused rather than silently replaced,
//! as a shell redirect would refuse it.
//!
//! Content is capped at [`MAX_FILE_BYTES`]: the model cannot usefully write more in one
//! call, and a runaway generation should not fill the disk.
//!
//! Before a person approves a write, [`Tool::inspect`] shows the change as a diff against
//! the file as it is and fingerprints that file (see [`crate::inspect`]).

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::inspect::{self, Found};
use crate::{MAX_FILE_BYTES, atomic, bytes, path};
use async_trait::async_trait;
use serde::Deserialize;
use spool_engine::{Inspected, Tool, ToolContext, ToolOutput, ToolSpec};
use std::fs;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "write";

/// Creates or overwrites a file in the project.
#[derive(Clone, Copy, Debug, Default)]
pub struct Write;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for Write {
    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument("write", args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change("write", args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Create a file in the project, or replace an existing file's whole contents. \
                          Missing parent directories are created. At most 10 MiB. To change part of \
                          a file, use edit instead."
                .into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to write, relative to the project root."
                    },
                    "content": {
                        "type": "string",
                        "description": "The file's complete new contents."
                    }
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: WriteArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let scope = path::Scope::of(ctx);
        run_blocking(move || write(&scope, &args.path, &args.content)).await
    }

    async fn inspect(&self, args: &serde_json::Value, ctx: &ToolContext) -> Option<Inspected> {
        let args: WriteArgs = parse_args(NAME, args.clone()).ok()?;
        let (scope, requested) = (path::Scope::of(ctx), args.path.clone());
        let look = move || {
            let found = Found::look(&args.path, || existing(&scope, &args.path));
            let preview = match &found {
                // The checks `write` makes before it changes anything, in its order.
                _ if args.content.len() > MAX_FILE_BYTES => {
                    inspect::failing(&ToolError::TooLarge { path: args.path.clone(), bytes: args.content.len() })
                }
                _ if args.path.ends_with('/') => inspect::failing(&ToolError::WriteToDirectory(args.path.clone())),
                Found::Unusable(e) => inspect::failing(e),
                Found::Directory => inspect::failing(&ToolError::WriteToDirectory(args.path.clone())),
                Found::Special => inspect::failing(&ToolError::NotRegularFile(args.path.clone())),
                _ => inspect::replacing(NAME, &args.path, &found, &args.content),
            };
            found.inspected(&args.path, preview)
        };
        Some(inspect::off_thread(requested, look).await)
    }
}

/// The file `write` would replace, if there is one.
fn existing(scope: &path::Scope, requested: &str) -> Result<Option<fs::File>, ToolError> {
    let root = scope.open()?;
    path::resolve_for_write(&root, scope.data_dir(), requested)?.existing().map_err(ToolError::io(requested))
}

fn write(scope: &path::Scope, requested: &str, content: &str) -> Result<ToolOutput, ToolError> {
    if content.len() > MAX_FILE_BYTES {
        return Err(ToolError::TooLarge { path: requested.to_owned(), bytes: content.len() });
    }
    // `Path` forgets a trailing slash, which would turn `dir/` into a file named `dir`.
    if requested.ends_with('/') {
        return Err(ToolError::WriteToDirectory(requested.to_owned()));
    }
    let root = scope.open()?;
    let mut target = path::resolve_for_write(&root, scope.data_dir(), requested)?;
    // The file there now, opened without following a link: what is judged, diffed and
    // replaced is one and the same.
    let existing = target.existing().map_err(ToolError::io(requested))?;
    let previous = match &existing {
        Some(file) => match file.metadata().map_err(ToolError::io(requested))? {
            meta if meta.is_dir() => return Err(ToolError::WriteToDirectory(requested.to_owned())),
            meta if !meta.is_file() => return Err(ToolError::NotRegularFile(requested.to_owned())),
            meta if meta.permissions().readonly() => return Err(ToolError::ReadOnly(requested.to_owned())),
            meta => Some(meta),
        },
        None => None,
    };
    // The old text, for the diff the result keeps (a file over the size cap is not read).
    let found = match existing {
        Some(file) => Found::at(file, requested),
        None => Found::Absent,
    };
    if previous.is_none() {
        target.create_dirs().map_err(ToolError::write_io(requested))?;
    }
    let keep = previous.as_ref().map(|meta| meta.permissions());
    let (dir, name) = target.at();
    atomic::write_file(dir, name, content.as_bytes(), keep).map_err(ToolError::write_io(requested))?;
    let size = bytes(content.len() as u64);
    let line = match previous {
        None => format!("created {requested} ({size})"),
        Some(meta) => format!("overwrote {requested} ({size}, was {})", meta.len()),
    };
    let out = ToolOutput::ok(line);
    Ok(match inspect::changed(NAME, requested, &found, content) {
        Some(diff) => out.with_diff(diff),
        None => out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    /// An output without its diff, which tests of their own check.
    fn said(out: ToolOutput) -> ToolOutput {
        ToolOutput { diff: None, ..out }
    }

    async fn write_tool(root: &Path, args: serde_json::Value) -> ToolOutput {
        let ctx = test_context(root);
        Write.call(args, &ctx).await
    }

    /// Every entry under `dir`, relative to it, sorted: what a test compares to prove
    /// that nothing else was created (no stray temporary files, no directories).
    fn tree(dir: &Path) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for entry in fs::read_dir(dir).expect("read_dir") {
                let path = entry.expect("entry").path();
                out.push(path.strip_prefix(base).expect("under base").display().to_string());
                if path.symlink_metadata().expect("lstat").is_dir() {
                    walk(base, &path, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    #[tokio::test]
    async fn creates_a_new_file() {
        let (_dir, root) = test_project();
        let out = write_tool(&root, json!({"path": "a.txt", "content": "hello world\n"})).await;
        assert_eq!(said(out), ToolOutput::ok("created a.txt (12 bytes)"));
        assert_eq!(fs::read_to_string(root.join("a.txt")).expect("read"), "hello world\n");
        assert_eq!(tree(&root), ["a.txt"]);
    }

    #[tokio::test]
    async fn overwrites_an_existing_file_and_keeps_its_mode() {
        let (_dir, root) = test_project();
        let script = root.join("run.sh");
        fs::write(&script, "old\n").expect("write");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = write_tool(&root, json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})).await;
        assert_eq!(said(out), ToolOutput::ok("overwrote run.sh (18 bytes, was 4)"));
        assert_eq!(fs::read_to_string(&script).expect("read"), "#!/bin/sh\necho hi\n");
        assert_eq!(fs::metadata(&script).expect("stat").permissions().mode() & 0o777, 0o755);
        assert_eq!(tree(&root), ["run.sh"]);
    }

    #[tokio::test]
    async fn an_empty_file_and_a_single_byte_are_counted_right() {
        let (_dir, root) = test_project();
        assert_eq!(
            said(write_tool(&root, json!({"path": "e", "content": ""})).await),
            ToolOutput::ok("created e (0 bytes)")
        );
        assert_eq!(
            said(write_tool(&root, json!({"path": "e", "content": "é"})).await),
            ToolOutput::ok("overwrote e (2 bytes, was 0)")
        );
        assert_eq!(
            said(write_tool(&root, json!({"path": "o", "content": "x"})).await),
            ToolOutput::ok("created o (1 byte)")
        );
    }

    #[tokio::test]
    async fn creates_missing_parent_directories() {
        let (_dir, root) = test_project();
        let out = write_tool(&root, json!({"path": "src/deep/mod.rs", "content": "//! x\n"})).await;
        assert_eq!(said(out), ToolOutput::ok("created src/deep/mod.rs (6 bytes)"));
        assert_eq!(fs::read_to_string(root.join("src/deep/mod.rs")).expect("read"), "//! x\n");
        // `..` through directories that do not exist yet is worked out, not refused.
        let out = write_tool(&root, json!({"path": "new/../other/x.txt", "content": "y"})).await;
        assert_eq!(said(out), ToolOutput::ok("created new/../other/x.txt (1 byte)"));
        assert_eq!(tree(&root), ["other", "other/x.txt", "src", "src/deep", "src/deep/mod.rs"]);
    }

    #[tokio::test]
    async fn paths_outside_the_project_are_refused_and_nothing_is_written() {
        let (dir, root) = test_project();
        // The project is a subdirectory, so "outside" is a directory the test can watch.
        let project_root = root.join("project");
        fs::create_dir(&project_root).expect("mkdir");
        let elsewhere = root.join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        let absolute = elsewhere.join("abs.txt").display().to_string();
        for path in [
            "../escape.txt",
            "../elsewhere/x.txt",
            "missing/../../escape.txt",
            "a/b/../../../escape.txt",
            "../newdir/x.txt",
            absolute.as_str(),
        ] {
            let out = write_tool(&project_root, json!({"path": path, "content": "pwned"})).await;
            assert_eq!(out, ToolOutput::error(format!("path {path:?} is outside the project directory")), "{path}");
        }
        assert_eq!(tree(&root), ["elsewhere", "project"]);
        drop(dir);
    }

    #[tokio::test]
    async fn symlinks_leading_outside_are_refused() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("victim.txt"), "original").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).expect("symlink");
        std::os::unix::fs::symlink(outside.path().join("victim.txt"), root.join("linkfile")).expect("symlink");
        std::os::unix::fs::symlink(outside.path().join("nothing-yet"), root.join("away")).expect("symlink");
        std::os::unix::fs::symlink("nothing-yet", root.join("dangling")).expect("symlink");

        for path in [
            "linkdir/new.txt",
            "linkdir/sub/new.txt",
            "linkdir/victim.txt",
            "linkfile",
            "linkdir/../x",
            "away",
            "away/x",
        ] {
            let out = write_tool(&root, json!({"path": path, "content": "pwned"})).await;
            assert_eq!(out, ToolOutput::error(format!("path {path:?} is outside the project directory")), "{path}");
        }
        for path in ["dangling", "dangling/x.txt"] {
            let out = write_tool(&root, json!({"path": path, "content": "pwned"})).await;
            let expected = format!("path {path:?} goes through a symbolic link whose target does not exist");
            assert_eq!(out, ToolOutput::error(expected), "{path}");
        }
        assert_eq!(tree(outside.path()), ["victim.txt"]);
        assert_eq!(fs::read_to_string(outside.path().join("victim.txt")).expect("read"), "original");
        assert_eq!(tree(&root), ["away", "dangling", "linkdir", "linkfile"]);
    }

    #[tokio::test]
    async fn a_symlink_inside_the_project_writes_its_target() {
        let (_dir, root) = test_project();
        fs::create_dir(root.join("real")).expect("mkdir");
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).expect("symlink");
        let out = write_tool(&root, json!({"path": "alias/f.txt", "content": "via link"})).await;
        assert_eq!(said(out), ToolOutput::ok("created alias/f.txt (8 bytes)"));
        assert_eq!(fs::read_to_string(root.join("real/f.txt")).expect("read"), "via link");
        assert!(root.join("alias").symlink_metadata().expect("lstat").file_type().is_symlink());
    }

    #[tokio::test]
    async fn directories_and_read_only_files_are_refused() {
        let (_dir, root) = test_project();
        fs::create_dir(root.join("src")).expect("mkdir");
        for path in ["src", "src/", ".", "new/"] {
            let out = write_tool(&root, json!({"path": path, "content": "x"})).await;
            let expected = format!("{path:?} is a directory; give the path of a file");
            assert_eq!(out, ToolOutput::error(expected), "{path}");
        }
        let locked = root.join("locked.txt");
        fs::write(&locked, "keep").expect("write");
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o444)).expect("chmod");
        let out = write_tool(&root, json!({"path": "locked.txt", "content": "x"})).await;
        assert_eq!(out, ToolOutput::error(r#""locked.txt" is read-only; it was left unchanged"#));
        assert_eq!(fs::read_to_string(&locked).expect("read"), "keep");
        assert_eq!(tree(&root), ["locked.txt", "src"]);
    }

    #[tokio::test]
    async fn content_over_10_mib_is_refused() {
        let (_dir, root) = test_project();
        let content = "x".repeat(MAX_FILE_BYTES + 1);
        let out = write_tool(&root, json!({"path": "big.txt", "content": content})).await;
        assert_eq!(
            out,
            ToolOutput::error(r#""big.txt" would be 10485761 bytes; files over 10485760 bytes (10 MiB) are refused"#)
        );
        assert!(tree(&root).is_empty());
        let exactly = "x".repeat(MAX_FILE_BYTES);
        let out = write_tool(&root, json!({"path": "max.txt", "content": exactly})).await;
        assert_eq!(said(out), ToolOutput::ok("created max.txt (10485760 bytes)"));
    }

    #[tokio::test]
    async fn inspect_previews_the_write_against_the_file_as_it_is() {
        let (_dir, root) = test_project();
        let ctx = test_context(&root);
        let args = json!({"path": "n.txt", "content": "one\ntwo\n"});
        let new = Write.inspect(&args, &ctx).await.expect("a write has a target");
        assert_eq!(new.resource.fingerprint, "absent");
        assert_eq!(
            new.preview,
            "--- n.txt (does not exist yet)\n+++ n.txt (after the write)\n@@ -0,0 +1,2 @@\n+one\n+two\n"
        );
        assert!(tree(&root).is_empty(), "looking creates nothing");
        fs::write(root.join("n.txt"), "one\n").expect("write");
        let there = Write.inspect(&args, &ctx).await.expect("a write has a target");
        assert!(there.resource.fingerprint.starts_with("sha256:"), "{there:?}");
        assert_eq!(there.preview, "--- n.txt (now)\n+++ n.txt (after the write)\n@@ -1 +1,2 @@\n one\n+two\n");
        fs::write(root.join("bin"), [0xff, 0x00]).expect("write");
        let binary = Write.inspect(&json!({"path": "bin", "content": "x"}), &ctx).await.expect("target");
        assert_eq!(binary.preview, "bin holds 2 bytes that are not UTF-8 text; the write replaces them with 1 byte.");
        let outside = Write.inspect(&json!({"path": "../x", "content": "x"}), &ctx).await.expect("target");
        assert_eq!(outside.preview, r#"The call would fail: path "../x" is outside the project directory"#);
    }

    #[tokio::test]
    async fn bad_arguments_are_tool_errors() {
        let (_dir, root) = test_project();
        for args in [json!({"path": "a"}), json!({"content": "a"}), json!({"path": 1, "content": "a"}), json!("a")] {
            let out = write_tool(&root, args.clone()).await;
            assert!(out.is_error, "{args}");
            assert!(out.text.starts_with("invalid arguments for write: "), "{}", out.text);
        }
        assert!(tree(&root).is_empty());
    }

    #[tokio::test]
    async fn an_overwrite_keeps_the_diff_of_the_old_text_against_the_new() {
        let (_dir, root) = test_project();
        fs::write(root.join("notes.txt"), "one\ntwo\nthree\n").expect("seed");
        let out = write_tool(&root, json!({"path": "notes.txt", "content": "one\n2\nthree\n"})).await;
        assert_eq!(
            out.diff.as_deref(),
            Some(
                "--- notes.txt (before the write)\n+++ notes.txt (after the write)\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
            )
        );
        let created = write_tool(&root, json!({"path": "new.txt", "content": "hi\n"})).await;
        assert_eq!(
            created.diff.as_deref(),
            Some("--- new.txt (did not exist)\n+++ new.txt (after the write)\n@@ -0,0 +1 @@\n+hi\n")
        );
    }

    #[tokio::test]
    async fn a_huge_change_keeps_a_capped_diff_that_says_it_was_cut() {
        let (_dir, root) = test_project();
        let old: String = (0..20_000).map(|i| format!("old line {i}\n")).collect();
        fs::write(root.join("big.txt"), &old).expect("seed");
        let new: String = (0..20_000).map(|i| format!("new line {i}\n")).collect();
        let out = write_tool(&root, json!({"path": "big.txt", "content": new})).await;
        let diff = out.diff.expect("a diff");
        assert!(diff.len() <= spool_protocol::RESULT_DIFF_CAP, "{} bytes", diff.len());
        assert!(
            diff.ends_with("of the diff not shown (the call's arguments hold all of it)\n"),
            "{}",
            &diff[diff.len() - 200..]
        );
        // A file that is not text keeps no diff; the result line says what happened.
        fs::write(root.join("bin"), [0xff, 0xfe]).expect("seed");
        assert_eq!(write_tool(&root, json!({"path": "bin", "content": "x"})).await.diff, None);
    }
}
