//! What a tool call is about, in the two forms the approval layer needs: the main
//! argument that permission patterns match against (`read` of `src/*`, `bash` of
//! `git *`, `grep` of `password*`), and a one-line summary of the change for the card a human approves.
//!
//! Both read the raw arguments the model sent, which may be malformed: the call is
//! judged before the tool validates anything. A missing or mistyped main argument is
//! `None`, never a guess, so a pattern cannot match on a value the tool will not use.
//! Summaries shorten long strings to [`SUMMARY_CHARS`] characters with a `…`, so the
//! card stays one line; the full arguments are shown elsewhere.

use crate::{bash, bytes, edit, glob, grep, list, read, write};
use serde_json::Value;

/// How many characters of one string a summary shows.
pub const SUMMARY_CHARS: usize = 80;

/// The argument permission patterns match for `tool`: the path for `list`, `read`,
/// `write` and `edit` (`list` without one lists `"."`), the command line for `bash`, the
/// pattern for `glob` and `grep` (where they search is secondary to what they look for).
/// `None` for other tools and for arguments that are not what the tool expects.
pub fn main_argument(tool: &str, args: &Value) -> Option<String> {
    let string = |name: &str| args.get(name).and_then(Value::as_str).map(str::to_owned);
    match tool {
        list::NAME => match args.get("path") {
            None | Some(Value::Null) => Some(".".to_owned()),
            Some(_) => string("path"),
        },
        read::NAME | write::NAME | edit::NAME => string("path"),
        bash::NAME => string("command"),
        glob::NAME | grep::NAME => string("pattern"),
        _ => None,
    }
}

/// A short human summary of what the call will do, for an approval card:
/// `write a.txt (12 bytes)`, `edit a.txt: replace "foo" with "bar"`, `run: ls -la`.
pub fn describe_change(tool: &str, args: &Value) -> String {
    let string = |name: &str| args.get(name).and_then(Value::as_str);
    let path = || string("path").map_or_else(|| "(no path)".to_owned(), shorten);
    match tool {
        write::NAME => match string("content") {
            Some(content) => format!("write {} ({})", path(), bytes(content.len() as u64)),
            None => format!("write {}", path()),
        },
        edit::NAME => {
            let quoted = |name| string(name).map_or_else(|| "(missing)".to_owned(), |s| format!("{:?}", shorten(s)));
            let every = if args.get("replaceAll") == Some(&Value::Bool(true)) { " everywhere" } else { "" };
            format!("edit {}: replace {} with {}{every}", path(), quoted("oldString"), quoted("newString"))
        }
        bash::NAME => match string("command") {
            // One line on the card: a newline would hide what follows it.
            Some(command) => format!("run: {}", shorten(command).replace('\n', " ⏎ ")),
            None => "run: (no command)".to_owned(),
        },
        list::NAME => {
            format!("list {}", main_argument(tool, args).map_or_else(|| "(no path)".to_owned(), |p| shorten(&p)))
        }
        read::NAME => format!("read {}", path()),
        glob::NAME | grep::NAME => {
            let pattern = string("pattern").map_or_else(|| "(no pattern)".to_owned(), |p| format!("{:?}", shorten(p)));
            let mut line = format!("{tool} {pattern}");
            if let Some(path) = string("path") {
                line.push_str(&format!(" in {}", shorten(path)));
            }
            if let Some(include) = string("include") {
                line.push_str(&format!(", files {}", shorten(include)));
            }
            if args.get("ignoreCase") == Some(&Value::Bool(true)) {
                line.push_str(", ignoring case");
            }
            line
        }
        other => format!("{} {}", shorten(other), shorten(&args.to_string())),
    }
}

/// `text` cut to [`SUMMARY_CHARS`] characters, with `…` when it was cut.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn main_argument_is_the_path_or_the_command() {
        assert_eq!(main_argument("list", &json!({})), Some(".".into()));
        assert_eq!(main_argument("list", &json!(null)), Some(".".into()));
        assert_eq!(main_argument("list", &json!({"path": "src"})), Some("src".into()));
        assert_eq!(main_argument("read", &json!({"path": "a.rs", "offset": 3})), Some("a.rs".into()));
        assert_eq!(main_argument("write", &json!({"path": "a.txt", "content": "x"})), Some("a.txt".into()));
        let edit = json!({"path": "b.rs", "oldString": "a", "newString": "b"});
        assert_eq!(main_argument("edit", &edit), Some("b.rs".into()));
        assert_eq!(main_argument("bash", &json!({"command": "git status", "timeout": 5})), Some("git status".into()));
        assert_eq!(main_argument("glob", &json!({"pattern": "**/*.rs", "path": "src"})), Some("**/*.rs".into()));
        assert_eq!(main_argument("grep", &json!({"pattern": "TODO", "include": "*.rs"})), Some("TODO".into()));
    }

    #[test]
    fn main_argument_of_malformed_calls_and_other_tools_is_none() {
        assert_eq!(main_argument("list", &json!({"path": 3})), None);
        assert_eq!(main_argument("read", &json!({})), None);
        assert_eq!(main_argument("write", &json!("a.txt")), None);
        assert_eq!(main_argument("bash", &json!({"command": ["ls"]})), None);
        assert_eq!(main_argument("fetch", &json!({"path": "a"})), None);
        assert_eq!(main_argument("grep", &json!({"path": "src"})), None);
        assert_eq!(main_argument("glob", &json!({"pattern": 3})), None);
    }

    #[test]
    fn describes_each_change_on_one_line() {
        assert_eq!(
            describe_change("write", &json!({"path": "a.txt", "content": "hello world\n"})),
            "write a.txt (12 bytes)"
        );
        assert_eq!(
            describe_change("edit", &json!({"path": "a.txt", "oldString": "foo", "newString": "bar\n"})),
            r#"edit a.txt: replace "foo" with "bar\n""#
        );
        assert_eq!(
            describe_change("edit", &json!({"path": "a.txt", "oldString": "x", "newString": "y", "replaceAll": true})),
            r#"edit a.txt: replace "x" with "y" everywhere"#
        );
        assert_eq!(describe_change("bash", &json!({"command": "ls -la"})), "run: ls -la");
        assert_eq!(describe_change("bash", &json!({"command": "cd src\nmake"})), "run: cd src ⏎ make");
        assert_eq!(describe_change("list", &json!({})), "list .");
        assert_eq!(describe_change("read", &json!({"path": "a.rs"})), "read a.rs");
        assert_eq!(describe_change("glob", &json!({"pattern": "**/*.rs"})), r#"glob "**/*.rs""#);
        assert_eq!(describe_change("glob", &json!({"pattern": "*.md", "path": "docs"})), r#"glob "*.md" in docs"#);
        assert_eq!(
            describe_change("grep", &json!({"pattern": "todo", "path": "src", "include": "*.rs", "ignoreCase": true})),
            r#"grep "todo" in src, files *.rs, ignoring case"#
        );
        assert_eq!(describe_change("grep", &json!({})), "grep (no pattern)");
        assert_eq!(describe_change("fetch", &json!({"url": "x"})), r#"fetch {"url":"x"}"#);
    }

    #[test]
    fn malformed_calls_are_still_described() {
        assert_eq!(describe_change("write", &json!({"path": "a.txt"})), "write a.txt");
        assert_eq!(describe_change("write", &json!(null)), "write (no path)");
        assert_eq!(describe_change("edit", &json!({"path": "a"})), "edit a: replace (missing) with (missing)");
        assert_eq!(describe_change("bash", &json!({})), "run: (no command)");
    }

    #[test]
    fn long_strings_are_cut_at_80_characters_on_char_boundaries() {
        let long = "é".repeat(100);
        let cut = format!("{}…", "é".repeat(80));
        assert_eq!(describe_change("bash", &json!({"command": long})), format!("run: {cut}"));
        assert_eq!(
            describe_change("edit", &json!({"path": "a", "oldString": long, "newString": "b"})),
            format!("edit a: replace \"{cut}\" with \"b\"")
        );
        let exactly = "x".repeat(80);
        assert_eq!(describe_change("bash", &json!({"command": exactly})), format!("run: {exactly}"));
    }
}
