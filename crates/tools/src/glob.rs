//! The `glob` tool: the files of the project whose path matches a glob pattern, such as
//! `**/*.rs` or `src/*.{ts,tsx}`.
//!
//! The pattern is matched against each file's path relative to the directory searched
//! (the root unless `path` says otherwise), with the usual rules: `*` and `?` stay
//! within one path segment, `**` spans any number of them, `{a,b}` is a choice. So
//! `*.rs` is the `.rs` files directly in that directory and `**/*.rs` those at any
//! depth. Only files are listed, not directories, and the walk is [`walk::files`]:
//! git-ignored files are left out and links never lead outside the root.
//!
//! Results are paths relative to the project root, ready to hand to `read`, newest
//! modification first: the files someone is working on are usually the ones wanted.
//! Equal times fall back to path order, so the listing is the same on every call. At
//! most 1,000 are shown; a last line says how many more matched. Every match is
//! collected before sorting, so the ones shown are truly the newest.

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::{path, walk};
use async_trait::async_trait;
use globset::GlobBuilder;
use serde::Deserialize;
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use std::cmp::Reverse;
use std::ops::ControlFlow;
use std::path::{Component, Path};
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "glob";
/// At most this many paths are shown.
pub(crate) const MAX_RESULTS: usize = 1_000;

/// Finds files of the project by a glob pattern on their paths.
#[derive(Clone, Copy, Debug, Default)]
pub struct Glob;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[async_trait]
impl Tool for Glob {
    /// It changes nothing, so plan mode offers it too.
    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument(NAME, args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change(NAME, args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: format!(
                "Find files in the project whose path matches a glob pattern, such as `**/*.rs` or \
                 `src/**/*.{{ts,tsx}}`. The pattern is matched against paths relative to `path`: `*` \
                 does not cross `/`, `**` does, so `*.rs` only matches files directly in `path`. \
                 Files ignored by .gitignore are left out. Returns paths relative to the project \
                 root, one per line, most recently modified first; at most {MAX_RESULTS}, with a \
                 last line saying how many more matched."
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Glob pattern matched against file paths relative to `path`, e.g. `**/*.rs`."
                    },
                    "path": {
                        "type": "string",
                        "description": "Directory to search in, relative to the project root. Defaults to the root (\".\")."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: GlobArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let requested = args.path.unwrap_or_else(|| ".".to_owned());
        let (scope, cancel) = (path::Scope::of(ctx), ctx.cancel.clone());
        run_blocking(move || glob(&scope, &args.pattern, &requested, &cancel)).await
    }
}

fn glob(scope: &path::Scope, pattern: &str, requested: &str, cancel: &CancellationToken) -> Result<String, ToolError> {
    let matcher = compile(pattern)?;
    let root = scope.open()?;
    let opened = path::open(&root, scope.data_dir(), requested)?;
    if !opened.meta.is_dir() {
        return Err(ToolError::NotDirectory(requested.to_owned()));
    }
    let dir = opened.rel.clone();

    let mut found: Vec<(Option<SystemTime>, String)> = Vec::new();
    walk::files(&root, &dir, scope.data_dir(), cancel, |file| {
        let Ok(relative) = file.rel.strip_prefix(&dir) else { return Ok(ControlFlow::Continue(())) };
        if matcher.is_match(relative) {
            found.push((file.meta.modified().ok(), walk::display_relative(&file.rel, Path::new(""))));
        }
        Ok(ControlFlow::Continue(()))
    })?;
    if found.is_empty() {
        return Ok("no files found".to_owned());
    }
    // Newest first; a file whose time cannot be read goes last (`None` < `Some`).
    found.sort_by(|a, b| Reverse(&a.0).cmp(&Reverse(&b.0)).then_with(|| a.1.cmp(&b.1)));

    let mut lines: Vec<&str> = found.iter().take(MAX_RESULTS).map(|(_, path)| path.as_str()).collect();
    let note;
    if found.len() > MAX_RESULTS {
        note = format!(
            "… {} more matching files not shown ({} in all); narrow the pattern or the path",
            found.len() - MAX_RESULTS,
            found.len()
        );
        lines.push(&note);
    }
    Ok(lines.join("\n"))
}

/// The matcher for `pattern`. A pattern that could only match outside the directory
/// searched (absolute, or climbing with `..`) is refused with a pointer to `path`, rather
/// than silently matching nothing.
fn compile(pattern: &str) -> Result<globset::GlobMatcher, ToolError> {
    let bad = |reason: String| ToolError::BadPattern { kind: "glob pattern", pattern: pattern.to_owned(), reason };
    if pattern.is_empty() {
        return Err(ToolError::BadArguments { tool: NAME, reason: "pattern must not be empty".to_owned() });
    }
    let leaves = Path::new(pattern).components().any(|c| matches!(c, Component::RootDir | Component::ParentDir));
    if leaves {
        return Err(bad(
            "patterns are matched against paths relative to the directory searched; put the directory in `path`"
                .to_owned(),
        ));
    }
    let glob = GlobBuilder::new(pattern).literal_separator(true).build().map_err(|e| bad(e.kind().to_string()))?;
    Ok(glob.compile_matcher())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use serde_json::json;
    use std::fs;
    use std::fs::File;
    use std::time::Duration;

    /// Writes `path` under `root` (making its directories), modified `age` seconds before
    /// a fixed moment, so the newest-first order is known and equal ages are equal times.
    fn file(root: &Path, path: &str, age: u64) {
        let full = root.join(path);
        fs::create_dir_all(full.parent().expect("a file has a parent")).expect("mkdir");
        fs::write(&full, path).expect("write");
        let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 - age);
        File::options().write(true).open(&full).and_then(|f| f.set_modified(when)).expect("set mtime");
    }

    async fn glob_tool(root: &Path, args: serde_json::Value) -> ToolOutput {
        Glob.call(args, &test_context(root)).await
    }

    #[tokio::test]
    async fn nested_patterns_match_relative_paths_newest_first() {
        let (_dir, root) = test_project();
        file(&root, "main.rs", 30);
        file(&root, "src/lib.rs", 10);
        file(&root, "src/deep/er/mod.rs", 20);
        file(&root, "src/notes.md", 0);
        file(&root, ".github/build.rs", 40);

        assert_eq!(
            glob_tool(&root, json!({"pattern": "**/*.rs"})).await,
            ToolOutput::ok("src/lib.rs\nsrc/deep/er/mod.rs\nmain.rs\n.github/build.rs")
        );
        // `*` stays within one segment.
        assert_eq!(glob_tool(&root, json!({"pattern": "*.rs"})).await, ToolOutput::ok("main.rs"));
        assert_eq!(glob_tool(&root, json!({"pattern": "src/*.rs"})).await, ToolOutput::ok("src/lib.rs"));
        assert_eq!(
            glob_tool(&root, json!({"pattern": "src/**/*.{rs,md}"})).await,
            ToolOutput::ok("src/notes.md\nsrc/lib.rs\nsrc/deep/er/mod.rs")
        );
        // Under `path`, the pattern is relative to it and results still to the root.
        assert_eq!(glob_tool(&root, json!({"pattern": "*.rs", "path": "src"})).await, ToolOutput::ok("src/lib.rs"));
        assert_eq!(
            glob_tool(&root, json!({"pattern": "**/mod.rs", "path": "src/deep"})).await,
            ToolOutput::ok("src/deep/er/mod.rs")
        );
        assert_eq!(glob_tool(&root, json!({"pattern": "**/*.py"})).await, ToolOutput::ok("no files found"));
    }

    #[tokio::test]
    async fn equal_times_fall_back_to_path_order() {
        let (_dir, root) = test_project();
        for name in ["b.txt", "c.txt", "a.txt"] {
            file(&root, name, 5);
        }
        assert_eq!(glob_tool(&root, json!({"pattern": "*.txt"})).await, ToolOutput::ok("a.txt\nb.txt\nc.txt"));
    }

    #[tokio::test]
    async fn gitignored_files_and_git_internals_are_not_listed() {
        let (_dir, root) = test_project();
        fs::write(root.join(".gitignore"), "target/\n*.log\n").expect("write");
        file(&root, "src/a.rs", 1);
        file(&root, "target/debug/gen.rs", 2);
        file(&root, "src/debug.log", 3);
        file(&root, ".git/hooks/x.rs", 4);
        file(&root, "src/.gitignore", 5);
        fs::write(root.join("src/.gitignore"), "local.rs\n").expect("write");
        file(&root, "src/local.rs", 6);

        assert_eq!(glob_tool(&root, json!({"pattern": "**/*.rs"})).await, ToolOutput::ok("src/a.rs"));
        assert_eq!(glob_tool(&root, json!({"pattern": "**/*.log"})).await, ToolOutput::ok("no files found"));
        // The root's .gitignore still applies when searching a subdirectory.
        assert_eq!(glob_tool(&root, json!({"pattern": "*", "path": "src"})).await.text, "src/.gitignore\nsrc/a.rs");
    }

    #[tokio::test]
    async fn links_never_lead_outside_the_root() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret.rs"), "").expect("write");
        file(&root, "src/a.rs", 1);
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        std::os::unix::fs::symlink(outside.path().join("secret.rs"), root.join("secret.rs")).expect("symlink");
        std::os::unix::fs::symlink(root.join("src/a.rs"), root.join("alias.rs")).expect("symlink");
        std::os::unix::fs::symlink(root.join("src"), root.join("loop")).expect("symlink");

        // A link to a file inside counts; links to outside and directory links do not.
        assert_eq!(glob_tool(&root, json!({"pattern": "**/*.rs"})).await, ToolOutput::ok("alias.rs\nsrc/a.rs"));
    }

    #[tokio::test]
    async fn more_than_1000_matches_end_with_a_note() {
        let (_dir, root) = test_project();
        for i in 0..1_003 {
            fs::write(root.join(format!("f{i:04}.txt")), "").expect("write");
        }
        let out = glob_tool(&root, json!({"pattern": "*.txt"})).await;
        assert!(!out.is_error);
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), MAX_RESULTS + 1);
        assert_eq!(
            lines[MAX_RESULTS],
            "… 3 more matching files not shown (1003 in all); narrow the pattern or the path"
        );
    }

    #[tokio::test]
    async fn outside_paths_bad_patterns_and_files_are_tool_errors() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        file(&root, "a.rs", 1);
        for p in ["..", "/etc", "escape"] {
            assert_eq!(
                glob_tool(&root, json!({"pattern": "*", "path": p})).await,
                ToolOutput::error(format!("path {p:?} is outside the project directory"))
            );
        }
        let relative =
            "patterns are matched against paths relative to the directory searched; put the directory in `path`";
        let cases = [
            (json!({"pattern": "a.rs", "path": "a.rs"}), r#""a.rs" is not a directory"#.to_owned()),
            (json!({"pattern": "../*"}), format!(r#"invalid glob pattern "../*": {relative}"#)),
            (json!({"pattern": "/etc/*"}), format!(r#"invalid glob pattern "/etc/*": {relative}"#)),
            (json!({"pattern": "src/{a,b"}), r#"invalid glob pattern "src/{a,b": unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"#.to_owned()),
            (json!({"pattern": ""}), "invalid arguments for glob: pattern must not be empty".to_owned()),
            (json!({"path": "."}), "invalid arguments for glob: missing field `pattern`".to_owned()),
        ];
        for (args, expected) in cases {
            assert_eq!(glob_tool(&root, args.clone()).await, ToolOutput::error(expected), "{args}");
        }
    }
}
