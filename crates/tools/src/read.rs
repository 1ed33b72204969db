//! The `read` tool: a range of lines of a text file.
//!
//! Lines come back exactly as they are in the file, line endings included and without
//! line-number prefixes, so the model can quote them verbatim (in an edit, later) and
//! reading a small file whole returns precisely its bytes. Bytes that are not UTF-8 are
//! shown as U+FFFD.
//!
//! Two limits keep one call from flooding the conversation: `limit` lines (2,000 by
//! default) and 50 KiB of output. When either cuts the file short, a last line starting
//! with `…` says so and gives the `offset` to continue from. A file with a NUL byte in
//! its first 8 KiB is taken for binary and refused, the usual heuristic (git, grep).
//!
//! The file is read as a stream: skipping to a late offset or meeting a huge line never
//! holds more than the output cap in memory.

use crate::call::{parse_args, run_blocking};
use crate::error::ToolError;
use crate::path;
use async_trait::async_trait;
use serde::Deserialize;
use spool_engine::{Tool, ToolContext, ToolOutput, ToolSpec};
use std::io::{BufRead, BufReader, Read as _, Seek, SeekFrom};
use tokio_util::sync::CancellationToken;

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "read";

/// Lines returned when the call gives no `limit`.
pub(crate) const DEFAULT_LIMIT: u64 = 2_000;
/// The most output one call returns, not counting the truncation note.
pub(crate) const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// How much of the file's start is searched for a NUL byte.
const BINARY_SNIFF_BYTES: u64 = 8 * 1024;
/// How often (in lines) skipping to the offset checks for cancellation.
const CANCEL_CHECK_EVERY: u64 = 4_096;

/// Reads lines of a text file in the project.
#[derive(Clone, Copy, Debug, Default)]
pub struct Read;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[async_trait]
impl Tool for Read {
    /// It changes nothing, so plan mode offers it too.
    fn available_in(&self, _mode: spool_protocol::SessionMode) -> bool {
        true
    }

    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        crate::main_argument("read", args)
    }

    fn describe(&self, args: &serde_json::Value) -> String {
        crate::describe_change("read", args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: format!(
                "Read a text file in the project. Returns its lines exactly as written (no line \
                 numbers), from `offset` for at most `limit` lines and {} KiB; a final line starting \
                 with `…` says when the output was cut and which offset to continue from.",
                MAX_OUTPUT_BYTES / 1024
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to read, relative to the project root."
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to return, counting from 1. Defaults to 1."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": format!("Most lines to return. Defaults to {DEFAULT_LIMIT}.")
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: ReadArgs = match parse_args(NAME, args) {
            Ok(args) => args,
            Err(err) => return err.into(),
        };
        let (offset, limit) = (args.offset.unwrap_or(1), args.limit.unwrap_or(DEFAULT_LIMIT));
        for (name, value) in [("offset", offset), ("limit", limit)] {
            if value == 0 {
                let reason = format!("{name} must be at least 1");
                return ToolError::BadArguments { tool: NAME, reason }.into();
            }
        }
        let (scope, cancel) = (path::Scope::of(ctx), ctx.cancel.clone());
        run_blocking(move || read(&scope, &args.path, offset, limit, &cancel)).await
    }
}

fn read(
    scope: &path::Scope,
    requested: &str,
    offset: u64,
    limit: u64,
    cancel: &CancellationToken,
) -> Result<String, ToolError> {
    let io_err = || ToolError::io(requested);
    // Opened beneath the project's directory, and judged by what was opened.
    let path::Opened { mut file, meta, .. } = path::open(&scope.open()?, scope.data_dir(), requested)?;
    if meta.is_dir() {
        return Err(ToolError::IsDirectory(requested.to_owned()));
    }
    // A FIFO or device inside the project could block the read forever.
    if !meta.is_file() {
        return Err(ToolError::NotRegularFile(requested.to_owned()));
    }

    let mut head = Vec::new();
    (&mut file).take(BINARY_SNIFF_BYTES).read_to_end(&mut head).map_err(io_err())?;
    if head.contains(&0) {
        return Err(ToolError::Binary(requested.to_owned()));
    }
    file.seek(SeekFrom::Start(0)).map_err(io_err())?;
    let mut reader = BufReader::new(file);

    let mut skipped = 0;
    while skipped + 1 < offset {
        if skipped % CANCEL_CHECK_EVERY == 0 && cancel.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        if reader.skip_until(b'\n').map_err(io_err())? == 0 {
            break;
        }
        skipped += 1;
    }
    let at_end = reader.fill_buf().map_err(io_err())?.is_empty();
    if at_end && offset > 1 {
        return Err(ToolError::OffsetPastEnd { path: requested.to_owned(), offset, lines: skipped });
    }
    if at_end {
        return Ok("(empty file)".to_owned());
    }

    let mut out = String::new();
    let mut shown: u64 = 0;
    let mut line = Vec::new();
    let note = loop {
        if shown == limit {
            let more = !reader.fill_buf().map_err(io_err())?.is_empty();
            break more.then(|| format!("… more lines follow; continue with offset {}", offset + shown));
        }
        let budget = MAX_OUTPUT_BYTES - out.len();
        line.clear();
        // One byte past the budget is enough to know the line does not fit; reading no
        // further keeps a single gigantic line from being loaded whole.
        let read = (&mut reader).take(budget as u64 + 1).read_until(b'\n', &mut line).map_err(io_err())?;
        if read == 0 {
            break None;
        }
        let text = String::from_utf8_lossy(&line);
        if text.len() <= budget {
            out.push_str(&text);
            shown += 1;
            continue;
        }
        if shown > 0 {
            let last = offset + shown - 1;
            break Some(format!("… output truncated at 50 KiB after line {last}; continue with offset {}", last + 1));
        }
        // The first line alone is over the cap: show as much of it as fits.
        out.push_str(&text[..floor_char_boundary(&text, budget)]);
        break Some(format!(
            "… line {offset} is longer than 50 KiB and was cut; the next line is offset {}",
            offset + 1
        ));
    };
    if let Some(note) = note {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&note);
    }
    Ok(out)
}

/// The largest index `<= at` that is a char boundary of `s` (`str::floor_char_boundary`
/// is not stable yet).
fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len())).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_context, test_project};
    use serde_json::json;
    use std::fs;
    use std::path::Path;

    async fn read_tool(root: &Path, args: serde_json::Value) -> ToolOutput {
        Read.call(args, &test_context(root)).await
    }

    fn numbered(n: u64) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[tokio::test]
    async fn reads_a_whole_file_exactly() {
        let (_dir, root) = test_project();
        let content = "héllo 🌍\r\nsecond\n\nlast without newline";
        fs::write(root.join("a.txt"), content).expect("write");
        assert_eq!(read_tool(&root, json!({"path": "a.txt"})).await, ToolOutput::ok(content));
    }

    #[tokio::test]
    async fn reads_a_range_of_lines_with_a_continuation_note() {
        let (_dir, root) = test_project();
        fs::write(root.join("n.txt"), numbered(10)).expect("write");
        assert_eq!(
            read_tool(&root, json!({"path": "n.txt", "offset": 3, "limit": 2})).await,
            ToolOutput::ok("line 3\nline 4\n… more lines follow; continue with offset 5")
        );
        // Reaching the end exactly at the limit adds no note.
        assert_eq!(
            read_tool(&root, json!({"path": "n.txt", "offset": 9, "limit": 2})).await,
            ToolOutput::ok("line 9\nline 10\n")
        );
        assert_eq!(read_tool(&root, json!({"path": "n.txt", "offset": 10})).await, ToolOutput::ok("line 10\n"));
    }

    #[tokio::test]
    async fn the_default_limit_is_2000_lines() {
        let (_dir, root) = test_project();
        fs::write(root.join("n.txt"), numbered(2_001)).expect("write");
        let out = read_tool(&root, json!({"path": "n.txt"})).await;
        assert!(!out.is_error);
        assert_eq!(out.text.lines().count(), 2_001);
        assert!(out.text.starts_with("line 1\n"));
        assert!(out.text.ends_with("line 2000\n… more lines follow; continue with offset 2001"));
    }

    #[tokio::test]
    async fn offsets_past_the_end_are_errors() {
        let (_dir, root) = test_project();
        fs::write(root.join("n.txt"), numbered(3)).expect("write");
        assert_eq!(
            read_tool(&root, json!({"path": "n.txt", "offset": 4})).await,
            ToolOutput::error(r#"offset 4 is past the end of "n.txt", which has 3 lines"#)
        );
        assert_eq!(
            read_tool(&root, json!({"path": "n.txt", "offset": 100})).await,
            ToolOutput::error(r#"offset 100 is past the end of "n.txt", which has 3 lines"#)
        );
        fs::write(root.join("empty"), "").expect("write");
        assert_eq!(read_tool(&root, json!({"path": "empty"})).await, ToolOutput::ok("(empty file)"));
    }

    #[tokio::test]
    async fn output_is_capped_at_50_kib_on_a_line_boundary() {
        let (_dir, root) = test_project();
        // 100-byte lines: 512 fit in 51,200 bytes exactly; the 513th does not.
        let line = format!("{}\n", "x".repeat(99));
        fs::write(root.join("big.txt"), line.repeat(1_000)).expect("write");
        let out = read_tool(&root, json!({"path": "big.txt"})).await;
        assert!(!out.is_error);
        let (body, note) = out.text.rsplit_once('\n').map(|(b, n)| (b.len() + 1, n)).expect("a note line");
        assert_eq!(body, MAX_OUTPUT_BYTES);
        assert_eq!(note, "… output truncated at 50 KiB after line 512; continue with offset 513");
    }

    #[tokio::test]
    async fn a_single_huge_line_is_cut_on_a_char_boundary() {
        let (_dir, root) = test_project();
        // 3-byte characters: 51,200 is not a multiple of 3, so the cut must round down.
        fs::write(root.join("wide.txt"), format!("{}\nnext\n", "€".repeat(20_000))).expect("write");
        let out = read_tool(&root, json!({"path": "wide.txt"})).await;
        assert!(!out.is_error);
        let (body, note) = out.text.split_once('\n').expect("a note line");
        assert_eq!(body, "€".repeat(MAX_OUTPUT_BYTES / 3));
        assert_eq!(note, "… line 1 is longer than 50 KiB and was cut; the next line is offset 2");
    }

    #[tokio::test]
    async fn binary_files_are_refused() {
        let (_dir, root) = test_project();
        fs::write(root.join("img.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").expect("write");
        assert_eq!(
            read_tool(&root, json!({"path": "img.png"})).await,
            ToolOutput::error(
                r#""img.png" looks like a binary file (it contains NUL bytes); read only shows text files"#
            )
        );
    }

    #[tokio::test]
    async fn outside_paths_are_refused_without_leaking_content() {
        let (_dir, root) = test_project();
        let outside = tempfile::tempdir().expect("temp dir");
        fs::write(outside.path().join("secret.txt"), "TOP-SECRET").expect("write");
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt")).expect("symlink");
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
        let via_parent =
            format!("../{}/secret.txt", outside.path().file_name().and_then(|n| n.to_str()).expect("utf-8 temp name"));
        let absolute = outside.path().join("secret.txt").to_str().expect("utf-8 temp path").to_owned();

        for p in [via_parent.as_str(), absolute.as_str(), "/etc/passwd", "link.txt", "escape/secret.txt", "../"] {
            let out = read_tool(&root, json!({"path": p})).await;
            assert!(out.is_error, "{p}");
            assert_eq!(out.text, format!("path {p:?} is outside the project directory"));
            assert!(!out.text.contains("TOP-SECRET") && !out.text.contains("root:"));
        }
    }

    #[tokio::test]
    async fn directories_missing_files_and_bad_arguments_are_tool_errors() {
        let (_dir, root) = test_project();
        fs::create_dir(root.join("src")).expect("mkdir");
        let cases = [
            (json!({"path": "src"}), r#""src" is a directory; use list to see its entries"#),
            (json!({"path": "."}), r#""." is a directory; use list to see its entries"#),
            (json!({"path": "missing.rs"}), r#"no such file or directory: "missing.rs""#),
            (json!({}), "invalid arguments for read: missing field `path`"),
            (serde_json::Value::Null, "invalid arguments for read: missing field `path`"),
            (json!({"path": 7}), "invalid arguments for read: invalid type: integer `7`, expected a string"),
            (
                json!({"path": "a", "offset": "2"}),
                r#"invalid arguments for read: invalid type: string "2", expected u64"#,
            ),
            (
                json!({"path": "a", "offset": -1}),
                "invalid arguments for read: invalid value: integer `-1`, expected u64",
            ),
            (json!({"path": "a", "offset": 0}), "invalid arguments for read: offset must be at least 1"),
            (json!({"path": "a", "limit": 0}), "invalid arguments for read: limit must be at least 1"),
            (json!(["a"]), "invalid arguments for read: expected a JSON object, got an array"),
        ];
        for (args, expected) in cases {
            assert_eq!(read_tool(&root, args.clone()).await, ToolOutput::error(expected), "{args}");
        }
    }

    #[tokio::test]
    async fn a_cancelled_run_stops_skipping() {
        let (_dir, root) = test_project();
        fs::write(root.join("n.txt"), numbered(10)).expect("write");
        let ctx = test_context(&root);
        ctx.cancel.cancel();
        assert_eq!(Read.call(json!({"path": "n.txt", "offset": 5}), &ctx).await, ToolOutput::error("aborted"));
    }
}
