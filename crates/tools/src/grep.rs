//! The `grep` tool: the lines of the project's files that match a regular expression,
//! as `path:line: text`.
//!
//! The pattern is Rust `regex` syntax (no look-around or backreferences, so a search
//! takes time linear in the input whatever the pattern), matched against one line at a
//! time with its line ending removed, so `^` and `$` mean the line's start and end.
//! Matching works on bytes, so files that are not entirely UTF-8 are still searched;
//! lines are shown with any invalid bytes as U+FFFD.
//!
//! Files come from [`walk::files`] in path order (git-ignored ones left out, links never
//! leading outside the root), narrowed by `include`: a glob on the file name (`*.rs`),
//! or on the path relative to the directory searched when it holds a `/`. `path` may
//! also name a single file. A file with a NUL byte in its first 8 KiB is taken for
//! binary and skipped without a word, as grep does, unless it was the one file named.
//! Files that cannot be read are skipped too: a search reports what it found.
//!
//! Caps keep one call from flooding the conversation: each line is cut to 300
//! characters, and the search stops at 500 matches or 50 KiB of output, whichever comes
//! first, with a last line saying so. A line over 1 MiB (minified code, a data dump) is
//! only searched in its first MiB, so one such line cannot fill the memory.

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::{path, walk};
use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use regex::bytes::{Regex, RegexBuilder};
use rustix::fs::OFlags;
use serde::Deserialize;
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "grep";
/// The search stops after this many matching lines.
pub(crate) const MAX_MATCHES: usize = 500;
/// The most output one call returns, not counting the truncation note.
pub(crate) const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// Characters of a matching line shown before it is cut.
pub(crate) const MAX_LINE_CHARS: usize = 300;
/// Bytes of one line that are searched.
const MAX_LINE_BYTES: u64 = 1024 * 1024;
/// How much of a file's start is searched for a NUL byte.
const BINARY_SNIFF_BYTES: u64 = 8 * 1024;
/// Compiled regexes larger than this are refused: a pattern like `\w{1000}{1000}` would
/// otherwise take the memory of the server.
const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// Searches the contents of the project's files with a regular expression.
#[derive(Clone, Copy, Debug, Default)]
pub struct Grep;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GrepArgs {
    pattern: String,
    path: Option<String>,
    include: Option<String>,
    ignore_case: Option<bool>,
}

#[async_trait]
impl Tool for Grep {
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
                "Search the contents of the project's files for lines matching a regular expression \
                 (Rust regex syntax, one line at a time). Files ignored by .gitignore and binary files \
                 are skipped. Returns `path:line: text` lines in path order, paths relative to the \
                 project root, each cut to {MAX_LINE_CHARS} characters; stops after {MAX_MATCHES} \
                 matches or {} KiB with a last line saying so. Says `no matches` when nothing matched.",
                MAX_OUTPUT_BYTES / 1024
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Regular expression to search for, e.g. `fn\\s+main` or `TODO|FIXME`."
                    },
                    "path": {
                        "type": "string",
                        "description": "Directory or file to search, relative to the project root. Defaults to the root (\".\")."
                    },
                    "include": {
                        "type": "string",
                        "description": "Only search files whose name matches this glob, e.g. `*.rs` or `*.{ts,tsx}`; with a `/`, the glob is matched against the path relative to `path` instead."
                    },
                    "ignoreCase": {
                        "type": "boolean",
                        "description": "Match without regard to case. Defaults to false."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: GrepArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let (scope, cancel) = (path::Scope::of(ctx), ctx.cancel.clone());
        run_blocking(move || grep(&scope, &args, &cancel)).await
    }
}

fn grep(scope: &path::Scope, args: &GrepArgs, cancel: &CancellationToken) -> Result<String, ToolError> {
    if args.pattern.is_empty() {
        return Err(ToolError::BadArguments { tool: NAME, reason: "pattern must not be empty".to_owned() });
    }
    let regex = RegexBuilder::new(&args.pattern)
        .case_insensitive(args.ignore_case.unwrap_or(false))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ToolError::BadPattern { kind: "regex", pattern: args.pattern.clone(), reason: e.to_string() })?;
    let include = args.include.as_deref().map(Include::new).transpose()?;

    let requested = args.path.as_deref().unwrap_or(".");
    let root = scope.open()?;
    let opened = path::open(&root, scope.data_dir(), requested)?;
    let start = opened.rel.clone();

    let mut out = Output::default();
    if opened.meta.is_dir() {
        walk::files(&root, &start, scope.data_dir(), cancel, |file| {
            if include.as_ref().is_some_and(|include| !include.matches(&file.rel, &start)) {
                return Ok(ControlFlow::Continue(()));
            }
            let shown = walk::display_relative(&file.rel, Path::new(""));
            // Read only through a descriptor opened beneath the project: the walker's
            // path could have been redirected since it was listed.
            let opened = path::open_rel(&root, &file.rel, OFlags::RDONLY | OFlags::NONBLOCK)
                .map_err(|_| Skip::Unreadable(io::Error::other("it changed while the search ran")));
            // Unreadable and binary files are skipped: the search reports what it found.
            match opened.and_then(|found| search(found.fd.into(), &shown, &regex, &mut out, cancel)) {
                Ok(flow) => Ok(flow),
                Err(Skip::Aborted) => Err(ToolError::Aborted),
                Err(Skip::Binary | Skip::Unreadable(_)) => Ok(ControlFlow::Continue(())),
            }
        })?;
    } else if !opened.meta.is_file() {
        return Err(ToolError::NotRegularFile(requested.to_owned()));
    } else if include.as_ref().is_none_or(|include| include.matches(&start, Path::new(""))) {
        // One file, named by the model: saying why it was not searched beats `no matches`.
        let shown = walk::display_relative(&start, Path::new(""));
        match search(opened.file, &shown, &regex, &mut out, cancel) {
            Ok(_) => {}
            Err(Skip::Aborted) => return Err(ToolError::Aborted),
            Err(Skip::Binary) => return Err(ToolError::BinaryNotSearched(requested.to_owned())),
            Err(Skip::Unreadable(source)) => return Err(ToolError::Io { path: requested.to_owned(), source }),
        }
    }
    Ok(out.finish())
}

/// The `include` filter: a glob on file names, or on relative paths when it has a `/`.
struct Include {
    matcher: GlobMatcher,
    on_path: bool,
}

impl Include {
    fn new(glob: &str) -> Result<Self, ToolError> {
        let matcher = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::BadPattern {
                kind: "include glob",
                pattern: glob.to_owned(),
                reason: e.kind().to_string(),
            })?
            .compile_matcher();
        Ok(Self { matcher, on_path: glob.contains('/') })
    }

    /// Whether `file` is to be searched; `base` is the directory its path is relative to.
    fn matches(&self, file: &Path, base: &Path) -> bool {
        if self.on_path {
            self.matcher.is_match(file.strip_prefix(base).unwrap_or(file))
        } else {
            file.file_name().is_some_and(|name| self.matcher.is_match(name))
        }
    }
}

/// Why a file was not searched to its end.
enum Skip {
    Binary,
    Unreadable(io::Error),
    Aborted,
}

impl From<io::Error> for Skip {
    fn from(err: io::Error) -> Self {
        Skip::Unreadable(err)
    }
}

/// Adds the matching lines of `file` to `out`, named `shown`; breaks when `out` is full.
fn search(
    mut file: File,
    shown: &str,
    regex: &Regex,
    out: &mut Output,
    cancel: &CancellationToken,
) -> Result<ControlFlow<()>, Skip> {
    let mut head = Vec::new();
    (&mut file).take(BINARY_SNIFF_BYTES).read_to_end(&mut head)?;
    if head.contains(&0) {
        return Err(Skip::Binary);
    }
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::new(file);

    let mut line = Vec::new();
    let mut number: u64 = 0;
    loop {
        // An atomic load, cheap next to matching the line.
        if cancel.is_cancelled() {
            return Err(Skip::Aborted);
        }
        line.clear();
        let read = (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(ControlFlow::Continue(()));
        }
        number += 1;
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if read as u64 == MAX_LINE_BYTES {
            // The rest of an overlong line is not searched; the next line keeps its number.
            reader.skip_until(b'\n')?;
        }
        if regex.is_match(&line) && out.push(shown, number, &line).is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
}

/// The lines found so far, and the note that ends them if a cap was reached.
#[derive(Default)]
struct Output {
    text: String,
    matches: usize,
    note: Option<String>,
}

impl Output {
    /// Adds one match unless a cap is reached, in which case it notes so and breaks.
    /// The cap is noted when a match beyond it is found, so the note is only there when
    /// something was really left out.
    fn push(&mut self, shown: &str, number: u64, line: &[u8]) -> ControlFlow<()> {
        if self.matches == MAX_MATCHES {
            self.note = Some(format!(
                "… stopped after {MAX_MATCHES} matches; there are more: narrow the pattern, the path or include"
            ));
            return ControlFlow::Break(());
        }
        let entry = format!("{shown}:{number}: {}", cut(&String::from_utf8_lossy(line)));
        let separator = usize::from(!self.text.is_empty());
        if self.text.len() + separator + entry.len() > MAX_OUTPUT_BYTES {
            self.note = Some(format!(
                "… stopped at {} KiB of output after {} matches; there are more: narrow the pattern, the path or include",
                MAX_OUTPUT_BYTES / 1024,
                self.matches
            ));
            return ControlFlow::Break(());
        }
        if separator == 1 {
            self.text.push('\n');
        }
        self.text.push_str(&entry);
        self.matches += 1;
        ControlFlow::Continue(())
    }

    fn finish(self) -> String {
        match (self.matches, self.note) {
            (0, None) => "no matches".to_owned(),
            (_, None) => self.text,
            (_, Some(note)) => format!("{}\n{note}", self.text),
        }
    }
}

/// `line` cut to [`MAX_LINE_CHARS`] characters, with `…` when it was cut.
fn cut(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use serde_json::json;
    use std::fs;

    fn file(root: &Path, path: &str, content: impl AsRef<[u8]>) {
        let full = root.join(path);
        fs::create_dir_all(full.parent().expect("a file has a parent")).expect("mkdir");
        fs::write(full, content).expect("write");
    }

    async fn grep_tool(root: &Path, args: serde_json::Value) -> ToolOutput {
        Grep.call(args, &test_context(root)).await
    }

    #[tokio::test]
    async fn matching_lines_come_as_path_line_text_in_path_order() {
        let (_dir, root) = test_project();
        file(&root, "src/main.rs", "fn main() {\n    helper();\n}\n");
        file(&root, "src/a/helper.rs", "pub fn helper() {}\r\n// no match here\n");
        file(&root, "README.md", "Call helper() first.");
        assert_eq!(
            grep_tool(&root, json!({"pattern": r"helper\(\)"})).await,
            ToolOutput::ok(
                "README.md:1: Call helper() first.\nsrc/a/helper.rs:1: pub fn helper() {}\nsrc/main.rs:2:     helper();"
            )
        );
        // `^` and `$` are the line's ends, its `\r\n` left out.
        assert_eq!(
            grep_tool(&root, json!({"pattern": r"^pub.*\}$"})).await,
            ToolOutput::ok("src/a/helper.rs:1: pub fn helper() {}")
        );
        assert_eq!(grep_tool(&root, json!({"pattern": "nothing like this"})).await, ToolOutput::ok("no matches"));
    }

    #[tokio::test]
    async fn path_narrows_to_a_directory_or_one_file() {
        let (_dir, root) = test_project();
        file(&root, "a/x.txt", "needle\n");
        file(&root, "b/x.txt", "needle\n");
        assert_eq!(
            grep_tool(&root, json!({"pattern": "needle", "path": "b"})).await,
            ToolOutput::ok("b/x.txt:1: needle")
        );
        assert_eq!(
            grep_tool(&root, json!({"pattern": "needle", "path": "a/x.txt"})).await,
            ToolOutput::ok("a/x.txt:1: needle")
        );
    }

    #[tokio::test]
    async fn include_filters_on_names_or_relative_paths() {
        let (_dir, root) = test_project();
        file(&root, "src/lib.rs", "TODO rust\n");
        file(&root, "src/app.ts", "TODO ts\n");
        file(&root, "src/view.tsx", "TODO tsx\n");
        file(&root, "docs/notes.md", "TODO docs\n");
        let search = |include: &str| json!({"pattern": "TODO", "include": include});
        assert_eq!(grep_tool(&root, search("*.rs")).await, ToolOutput::ok("src/lib.rs:1: TODO rust"));
        assert_eq!(
            grep_tool(&root, search("*.{ts,tsx}")).await,
            ToolOutput::ok("src/app.ts:1: TODO ts\nsrc/view.tsx:1: TODO tsx")
        );
        assert_eq!(grep_tool(&root, search("docs/*")).await, ToolOutput::ok("docs/notes.md:1: TODO docs"));
        assert_eq!(grep_tool(&root, search("*.py")).await, ToolOutput::ok("no matches"));
        // A file named in `path` that the filter excludes is not searched.
        let out = grep_tool(&root, json!({"pattern": "TODO", "path": "src/lib.rs", "include": "*.md"})).await;
        assert_eq!(out, ToolOutput::ok("no matches"));
    }

    #[tokio::test]
    async fn ignore_case_is_off_unless_asked() {
        let (_dir, root) = test_project();
        file(&root, "a.txt", "Error one\nerror two\nERROR three\n");
        assert_eq!(grep_tool(&root, json!({"pattern": "error"})).await, ToolOutput::ok("a.txt:2: error two"));
        assert_eq!(
            grep_tool(&root, json!({"pattern": "error", "ignoreCase": true})).await,
            ToolOutput::ok("a.txt:1: Error one\na.txt:2: error two\na.txt:3: ERROR three")
        );
        assert_eq!(
            grep_tool(&root, json!({"pattern": "error", "ignoreCase": false})).await,
            ToolOutput::ok("a.txt:2: error two")
        );
    }

    #[tokio::test]
    async fn gitignored_files_are_not_searched() {
        let (_dir, root) = test_project();
        file(&root, ".gitignore", "target/\n*.log\n");
        file(&root, "src/a.rs", "secret_token\n");
        file(&root, "target/gen.rs", "secret_token\n");
        file(&root, "run.log", "secret_token\n");
        file(&root, ".git/config", "secret_token\n");
        file(&root, ".env.example", "secret_token=\n");
        assert_eq!(
            grep_tool(&root, json!({"pattern": "secret_token"})).await,
            ToolOutput::ok(".env.example:1: secret_token=\nsrc/a.rs:1: secret_token")
        );
        // Naming an ignored directory means looking in it, as in ripgrep.
        assert_eq!(
            grep_tool(&root, json!({"pattern": "secret_token", "path": "target"})).await,
            ToolOutput::ok("target/gen.rs:1: secret_token")
        );
    }

    #[tokio::test]
    async fn binary_files_are_skipped_silently_unless_named() {
        let (_dir, root) = test_project();
        file(&root, "img.bin", b"needle\0\x01\x02needle\n");
        file(&root, "text.txt", "needle\n");
        // Invalid UTF-8 without NUL is text, shown with U+FFFD.
        file(&root, "latin1.txt", b"caf\xe9 needle\n");
        assert_eq!(
            grep_tool(&root, json!({"pattern": "needle"})).await,
            ToolOutput::ok("latin1.txt:1: caf\u{fffd} needle\ntext.txt:1: needle")
        );
        assert_eq!(
            grep_tool(&root, json!({"pattern": "needle", "path": "img.bin"})).await,
            ToolOutput::error(
                r#""img.bin" looks like a binary file (it contains NUL bytes); grep only searches text files"#
            )
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut_at_300_characters() {
        let (_dir, root) = test_project();
        file(&root, "wide.txt", format!("needle {}\n", "é".repeat(400)));
        let out = grep_tool(&root, json!({"pattern": "needle"})).await;
        assert_eq!(out, ToolOutput::ok(format!("wide.txt:1: needle {}…", "é".repeat(MAX_LINE_CHARS - 7))));
    }

    #[tokio::test]
    async fn the_search_stops_at_500_matches_with_a_note() {
        let (_dir, root) = test_project();
        file(&root, "many.txt", "hit\n".repeat(MAX_MATCHES + 1));
        let out = grep_tool(&root, json!({"pattern": "hit"})).await;
        assert!(!out.is_error);
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), MAX_MATCHES + 1);
        assert_eq!(lines[MAX_MATCHES - 1], "many.txt:500: hit");
        assert_eq!(
            lines[MAX_MATCHES],
            "… stopped after 500 matches; there are more: narrow the pattern, the path or include"
        );
        // Exactly 500 is all of them: no note.
        file(&root, "many.txt", "hit\n".repeat(MAX_MATCHES));
        let out = grep_tool(&root, json!({"pattern": "hit"})).await;
        assert_eq!(out.text.lines().count(), MAX_MATCHES);
        assert!(!out.text.contains('…'));
    }

    #[tokio::test]
    async fn the_search_stops_at_50_kib_with_a_note() {
        let (_dir, root) = test_project();
        // Each output line is "big.txt:N: " plus 290 characters: about 200 fit in 50 KiB.
        file(&root, "big.txt", format!("{}\n", "x".repeat(290)).repeat(400));
        let out = grep_tool(&root, json!({"pattern": "x"})).await;
        assert!(!out.is_error);
        let (body, note) = out.text.rsplit_once('\n').expect("a note line");
        assert!(body.len() <= MAX_OUTPUT_BYTES && body.len() > MAX_OUTPUT_BYTES - 310, "{}", body.len());
        let shown = body.lines().count();
        assert!(shown < 400);
        assert_eq!(
            note,
            format!(
                "… stopped at 50 KiB of output after {shown} matches; there are more: narrow the pattern, the path or include"
            )
        );
    }

    #[tokio::test]
    async fn invalid_patterns_and_outside_paths_are_tool_errors() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret.txt"), "needle").expect("write");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt")).expect("symlink");
        file(&root, "a.txt", "needle\n");

        for p in ["..", "/etc", "escape", "escape/secret.txt", "link.txt"] {
            assert_eq!(
                grep_tool(&root, json!({"pattern": "needle", "path": p})).await,
                ToolOutput::error(format!("path {p:?} is outside the project directory"))
            );
        }
        // Links out of the root are not followed by the walk either.
        assert_eq!(grep_tool(&root, json!({"pattern": "needle"})).await, ToolOutput::ok("a.txt:1: needle"));

        let out = grep_tool(&root, json!({"pattern": "fn (main"})).await;
        assert!(out.is_error);
        assert!(out.text.starts_with(r#"invalid regex "fn (main": regex parse error:"#), "{}", out.text);
        assert!(out.text.contains("unclosed group"), "{}", out.text);
        let out = grep_tool(&root, json!({"pattern": "x", "include": "*.{rs"})).await;
        assert!(out.is_error);
        assert!(out.text.starts_with(r#"invalid include glob "*.{rs": unclosed alternate group"#), "{}", out.text);
        assert_eq!(
            grep_tool(&root, json!({"pattern": ""})).await,
            ToolOutput::error("invalid arguments for grep: pattern must not be empty")
        );
        assert_eq!(
            grep_tool(&root, json!({"pattern": "x", "path": "missing"})).await,
            ToolOutput::error(r#"no such file or directory: "missing""#)
        );
    }

    #[tokio::test]
    async fn a_cancelled_run_stops_the_search() {
        let (_dir, root) = test_project();
        file(&root, "a.txt", "needle\n");
        let ctx = test_context(&root);
        ctx.cancel.cancel();
        assert_eq!(Grep.call(json!({"pattern": "needle"}), &ctx).await, ToolOutput::error("aborted"));
    }
}
