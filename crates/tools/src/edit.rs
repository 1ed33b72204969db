//! The `edit` tool: replace an exact piece of a text file.
//!
//! The model quotes the text to change (`oldString`), as `read` showed it, and the
//! text to put instead. It must match exactly once unless `replaceAll` says otherwise:
//! an edit that might land in the wrong place is refused with the number of matches,
//! so the model can quote more context. Every refusal leaves the file untouched, and a
//! successful edit replaces the file atomically ([`atomic::write_file`]), keeping its
//! mode.
//!
//! The file is read whole, so files over [`MAX_FILE_BYTES`] are refused, before and
//! after the edit, as `write` refuses them.
//!
//! Before a person approves an edit, [`Tool::inspect`] runs the same checks and the same
//! replacement without writing: the card shows the diff, or the error the edit would
//! end with, and the file's fingerprint is kept (see [`crate::inspect`]).

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::inspect::{self, Found};
use crate::{MAX_FILE_BYTES, atomic, path};
use async_trait::async_trait;
use serde::Deserialize;
use spool_engine::{Inspected, Tool, ToolContext, ToolOutput, ToolSpec};
use std::fs;
use std::io::Read as _;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "edit";

/// Replaces exact text in a file of the project.
#[derive(Clone, Copy, Debug, Default)]
pub struct Edit;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    replace_all: Option<bool>,
}

#[async_trait]
impl Tool for Edit {
    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument("edit", args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change("edit", args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Replace exact text in a file of the project. `oldString` must match the file \
                          exactly, whitespace and line endings included, and occur exactly once unless \
                          `replaceAll` is true. Read the file first and copy the text from it."
                .into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to edit, relative to the project root."
                    },
                    "oldString": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The exact text to replace."
                    },
                    "newString": {
                        "type": "string",
                        "description": "The text to put in its place; must differ from oldString."
                    },
                    "replaceAll": {
                        "type": "boolean",
                        "description": "Replace every occurrence instead of requiring exactly one. Defaults to false."
                    }
                },
                "required": ["path", "oldString", "newString"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: EditArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        if let Err(err) = args.check() {
            return err.into();
        }
        let scope = path::Scope::of(ctx);
        run_blocking(move || edit(&scope, &args)).await
    }

    async fn inspect(&self, args: &serde_json::Value, ctx: &ToolContext) -> Option<Inspected> {
        let args: EditArgs = parse_args(NAME, args.clone()).ok()?;
        let (scope, requested) = (path::Scope::of(ctx), args.path.clone());
        let look = move || {
            let requested = args.path.as_str();
            let found = Found::look(requested, || target(&scope, requested).map(|(_, file)| Some(file)));
            // The checks `edit` makes before it changes anything, in its order.
            let refused = |e: ToolError| inspect::failing(&e);
            let preview = match (args.check(), &found) {
                (Err(e), _) => refused(e),
                (_, Found::Unusable(e)) => inspect::failing(e),
                (_, Found::Absent) => refused(path::PathError::NotFound(requested.to_owned()).into()),
                (_, Found::Directory) => refused(ToolError::IsDirectory(requested.to_owned())),
                (_, Found::Special) => refused(ToolError::NotRegularFile(requested.to_owned())),
                (_, Found::Large { bytes, .. }) => refused(too_large(requested, *bytes)),
                (_, Found::Bytes(bytes)) => match replace(requested, bytes.clone(), &args) {
                    Ok((text, edited, _)) => {
                        let (now, after) = (format!("{requested} (now)"), format!("{requested} (after the edit)"));
                        inspect::diff(&now, &after, &text, &edited)
                    }
                    Err(e) => refused(e),
                },
            };
            found.inspected(requested, preview)
        };
        Some(inspect::off_thread(requested, look).await)
    }
}

impl EditArgs {
    /// What serde cannot check: an edit must name text, and change it.
    fn check(&self) -> Result<(), ToolError> {
        let reason = if self.old_string.is_empty() {
            "oldString must not be empty; use write to create a file"
        } else if self.old_string == self.new_string {
            "oldString and newString are the same, so the edit would change nothing"
        } else {
            return Ok(());
        };
        Err(ToolError::BadArguments { tool: NAME, reason: reason.to_owned() })
    }
}

/// Where the file to edit is (its directory, opened beneath the project, and name)
/// and the file itself, opened there without following a link.
fn target(scope: &path::Scope, requested: &str) -> Result<(path::WriteTarget, fs::File), ToolError> {
    let root = scope.open()?;
    let target = path::resolve_for_write(&root, scope.data_dir(), requested)?;
    match target.existing().map_err(ToolError::io(requested))? {
        Some(file) => Ok((target, file)),
        None => Err(path::PathError::NotFound(requested.to_owned()).into()),
    }
}

fn edit(scope: &path::Scope, args: &EditArgs) -> Result<ToolOutput, ToolError> {
    let requested = args.path.as_str();
    let (target, mut file) = target(scope, requested)?;
    let meta = file.metadata().map_err(ToolError::io(requested))?;
    if meta.is_dir() {
        return Err(ToolError::IsDirectory(requested.to_owned()));
    }
    if !meta.is_file() {
        return Err(ToolError::NotRegularFile(requested.to_owned()));
    }
    if meta.permissions().readonly() {
        return Err(ToolError::ReadOnly(requested.to_owned()));
    }
    // Checked before reading so a huge file is never loaded; `len` fits in memory
    // whenever it is under the cap.
    if meta.len() > MAX_FILE_BYTES as u64 {
        return Err(too_large(requested, meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file).take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(ToolError::io(requested))?;
    let (text, edited, count) = replace(requested, bytes, args)?;
    let (dir, name) = target.at();
    atomic::write_file(dir, name, edited.as_bytes(), Some(meta.permissions()))
        .map_err(ToolError::write_io(requested))?;
    let noun = if count == 1 { "occurrence" } else { "occurrences" };
    let out = ToolOutput::ok(format!("replaced {count} {noun} in {requested}"));
    Ok(match inspect::changed(NAME, requested, &Found::Bytes(text.into_bytes()), &edited) {
        Some(diff) => out.with_diff(diff),
        None => out,
    })
}

/// The edit applied to the file's bytes: (the text, the edited text, how many
/// occurrences were replaced), or why the edit is refused.
fn replace(requested: &str, bytes: Vec<u8>, args: &EditArgs) -> Result<(String, String, usize), ToolError> {
    let text = String::from_utf8(bytes).map_err(|_| ToolError::NotUtf8(requested.to_owned()))?;
    let count = text.matches(args.old_string.as_str()).count();
    if count == 0 {
        return Err(ToolError::OldStringNotFound(requested.to_owned()));
    }
    if count > 1 && !args.replace_all.unwrap_or(false) {
        return Err(ToolError::OldStringAmbiguous { path: requested.to_owned(), count });
    }
    let edited = text.replace(args.old_string.as_str(), &args.new_string);
    if edited.len() > MAX_FILE_BYTES {
        return Err(ToolError::TooLarge { path: requested.to_owned(), bytes: edited.len() });
    }
    Ok((text, edited, count))
}

fn too_large(requested: &str, bytes: u64) -> ToolError {
    ToolError::TooLarge { path: requested.to_owned(), bytes: usize::try_from(bytes).unwrap_or(usize::MAX) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::path::PathBuf;

    const TEXT: &str = "fn main() {\n    let x = 1;\n    let y = 1;\n    println!(\"{x} {y}\");\n}\n";

    /// A project holding `a.rs` with [`TEXT`].
    fn project() -> (tempfile::TempDir, PathBuf) {
        let (dir, root) = test_project();
        fs::write(root.join("a.rs"), TEXT).expect("write");
        (dir, root)
    }

    /// An output without its diff, which tests of their own check.
    fn said(out: ToolOutput) -> ToolOutput {
        ToolOutput { diff: None, ..out }
    }

    async fn edit_tool(root: &Path, args: serde_json::Value) -> ToolOutput {
        let ctx = test_context(root);
        Edit.call(args, &ctx).await
    }

    fn contents(root: &Path) -> String {
        fs::read_to_string(root.join("a.rs")).expect("read a.rs")
    }

    fn entries(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(root)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn replaces_a_unique_string() {
        let (_dir, root) = project();
        fs::set_permissions(root.join("a.rs"), fs::Permissions::from_mode(0o640)).expect("chmod");
        let out = edit_tool(&root, json!({"path": "a.rs", "oldString": "let x = 1;", "newString": "let x = 2;"})).await;
        assert_eq!(said(out), ToolOutput::ok("replaced 1 occurrence in a.rs"));
        assert_eq!(contents(&root), TEXT.replace("let x = 1;", "let x = 2;"));
        assert_eq!(fs::metadata(root.join("a.rs")).expect("stat").permissions().mode() & 0o777, 0o640);
        // The temporary file was renamed into place, not left behind.
        assert_eq!(entries(&root), ["a.rs"]);
    }

    #[tokio::test]
    async fn replace_all_replaces_every_occurrence() {
        let (_dir, root) = project();
        let args = json!({"path": "a.rs", "oldString": " = 1;", "newString": " = 42;", "replaceAll": true});
        assert_eq!(said(edit_tool(&root, args).await), ToolOutput::ok("replaced 2 occurrences in a.rs"));
        assert_eq!(contents(&root), TEXT.replace(" = 1;", " = 42;"));
        // replaceAll with a single match is fine too.
        let args = json!({"path": "a.rs", "oldString": "main", "newString": "start", "replaceAll": true});
        assert_eq!(said(edit_tool(&root, args).await), ToolOutput::ok("replaced 1 occurrence in a.rs"));
    }

    #[tokio::test]
    async fn refusals_leave_the_file_unchanged() {
        let (_dir, root) = project();
        let cases = [
            (
                json!({"path": "a.rs", "oldString": "let z", "newString": "let w"}),
                "oldString was not found in \"a.rs\"; it must match the file exactly, including whitespace, \
                 indentation and line endings (read the file and copy the text)",
            ),
            (
                json!({"path": "a.rs", "oldString": " = 1;", "newString": " = 2;"}),
                "oldString occurs 2 times in \"a.rs\"; include more surrounding text so it matches once, \
                 or set replaceAll to true to replace all 2",
            ),
            (
                json!({"path": "a.rs", "oldString": " = 1;", "newString": " = 2;", "replaceAll": false}),
                "oldString occurs 2 times in \"a.rs\"; include more surrounding text so it matches once, \
                 or set replaceAll to true to replace all 2",
            ),
            (
                json!({"path": "a.rs", "oldString": "", "newString": "x"}),
                "invalid arguments for edit: oldString must not be empty; use write to create a file",
            ),
            (
                json!({"path": "a.rs", "oldString": "main", "newString": "main"}),
                "invalid arguments for edit: oldString and newString are the same, so the edit would change nothing",
            ),
            (
                json!({"path": "missing.rs", "oldString": "a", "newString": "b"}),
                "no such file or directory: \"missing.rs\"",
            ),
            (
                json!({"path": "../a.rs", "oldString": "a", "newString": "b"}),
                "path \"../a.rs\" is outside the project directory",
            ),
            (
                json!({"path": ".", "oldString": "a", "newString": "b"}),
                "\".\" is a directory; use list to see its entries",
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(said(edit_tool(&root, args.clone()).await), ToolOutput::error(expected), "{args}");
            assert_eq!(contents(&root), TEXT, "{args}");
        }
        assert_eq!(entries(&root), ["a.rs"]);
    }

    #[tokio::test]
    async fn a_file_outside_behind_a_symlink_is_not_edited() {
        let (_dir, root) = project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("victim.txt"), "original").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).expect("symlink");
        let out =
            edit_tool(&root, json!({"path": "linkdir/victim.txt", "oldString": "original", "newString": "x"})).await;
        assert_eq!(out, ToolOutput::error("path \"linkdir/victim.txt\" is outside the project directory"));
        assert_eq!(fs::read_to_string(outside.path().join("victim.txt")).expect("read"), "original");
    }

    #[tokio::test]
    async fn non_utf8_files_are_refused() {
        let (_dir, root) = project();
        fs::write(root.join("bin"), [0xff, 0xfe, b'a']).expect("write");
        let out = edit_tool(&root, json!({"path": "bin", "oldString": "a", "newString": "b"})).await;
        assert_eq!(out, ToolOutput::error("\"bin\" is not UTF-8 text; edit only changes text files"));
        assert_eq!(fs::read(root.join("bin")).expect("read"), [0xff, 0xfe, b'a']);
    }

    #[tokio::test]
    async fn inspect_previews_the_edit_or_the_error_it_would_end_with_and_changes_nothing() {
        let (_dir, root) = project();
        let ctx = test_context(&root);
        let args = json!({"path": "a.rs", "oldString": "let x = 1;", "newString": "let x = 2;"});
        let seen = Edit.inspect(&args, &ctx).await.expect("an edit has a target");
        assert_eq!(seen.resource.path, "a.rs");
        assert!(seen.resource.fingerprint.starts_with("sha256:"), "{seen:?}");
        assert_eq!(
            seen.preview,
            "--- a.rs (now)\n+++ a.rs (after the edit)\n@@ -1,5 +1,5 @@\n fn main() {\n-    let x = 1;\n+    let x = 2;\n     \
             let y = 1;\n     println!(\"{x} {y}\");\n }\n"
        );
        assert_eq!(contents(&root), TEXT, "looking changes nothing");
        // The same file, the same fingerprint; another file, another one.
        assert_eq!(Edit.inspect(&args, &ctx).await.expect("again").resource, seen.resource);
        fs::write(root.join("a.rs"), TEXT.replace("let x", "let z")).expect("write");
        let changed = Edit.inspect(&args, &ctx).await.expect("changed");
        assert_ne!(changed.resource.fingerprint, seen.resource.fingerprint);
        assert_eq!(
            changed.preview,
            "The call would fail: oldString was not found in \"a.rs\"; it must match the file exactly, including \
             whitespace, indentation and line endings (read the file and copy the text)"
        );
        let missing = json!({"path": "gone.rs", "oldString": "a", "newString": "b"});
        let gone = Edit.inspect(&missing, &ctx).await.expect("a missing file is a target too");
        assert_eq!(gone.preview, "The call would fail: no such file or directory: \"gone.rs\"");
        assert!(Edit.inspect(&json!({"path": 3}), &ctx).await.is_none(), "no target to re-check");
    }

    #[tokio::test]
    async fn bad_arguments_are_tool_errors() {
        let (_dir, root) = project();
        for args in [
            json!({"path": "a.rs", "oldString": "x"}),
            json!({"path": "a.rs", "oldString": "x", "newString": "y", "replaceAll": "yes"}),
            json!({"path": "a.rs", "old_string": "x", "newString": "y"}),
            json!(null),
        ] {
            let out = edit_tool(&root, args.clone()).await;
            assert!(out.is_error, "{args}");
            assert!(out.text.starts_with("invalid arguments for edit: "), "{}", out.text);
        }
        assert_eq!(contents(&root), TEXT);
    }

    #[tokio::test]
    async fn an_edit_keeps_the_diff_of_what_it_changed() {
        let (_dir, root) = project();
        let args = json!({"path": "a.rs", "oldString": "let y = 1;", "newString": "let y = 2;"});
        let diff = edit_tool(&root, args).await.diff.expect("a diff");
        assert!(diff.starts_with("--- a.rs (before the edit)\n+++ a.rs (after the edit)\n@@ -1,5 +1,5 @@\n"), "{diff}");
        assert!(diff.contains("\n-    let y = 1;\n+    let y = 2;\n"), "{diff}");
        // A refused edit changed nothing and keeps no diff.
        let refused = edit_tool(&root, json!({"path": "a.rs", "oldString": "absent", "newString": "x"})).await;
        assert!(refused.is_error && refused.diff.is_none(), "{refused:?}");
    }
}
