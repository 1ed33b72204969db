//! Workspace tools: what a run may do to its project directory. Every tool resolves
//! paths through [`path`], which confines it to `ToolContext::root`, and turns every
//! failure into a `ToolOutput::error` the model can read, never a failed run.
//!
//! `list`, `read`, `glob` and `grep` only look; the last two walk the project through
//! [`walk`], which honours `.gitignore` and never follows a link out of the root. `write` and `edit` change files, atomically, so a crash
//! never leaves one half-written; `bash` runs a command in the project directory with a
//! timeout, killing everything it started when the time is up or the run is aborted.
//! Outputs are capped so one call cannot flood the conversation; a capped output says
//! what was left out.
//!
//! File system work runs on tokio's blocking pool, one `spawn_blocking` per call, and
//! long loops check the run's cancellation token. [`main_argument`] and
//! [`describe_change`] tell the approval layer what a call is about before it runs;
//! `write` and `edit` also show the change against the file and fingerprint the file
//! ([`inspect`]), so an approval is re-checked against the file it was asked on.
//!
//! Two tools act on the session rather than the files: `question` asks the person, and
//! `todo_write` replaces the session's todo list. Beside the tools, [`git`] reads a
//! project's git state for the engine's git poller.

mod atomic;
mod bash;
mod call;
mod confined;
mod describe;
mod edit;
mod error;
mod exit_plan;
pub mod git;
mod glob;
mod grep;
mod inspect;
mod list;
pub mod path;
mod process;
mod question;
mod read;
mod sandbox;
mod shell;
pub mod snapshot;
mod todo;
mod walk;
mod write;

pub use bash::Bash;
pub use confined::{ConfinedChild, ConfinedCommand, ConfinedGuard, spawn_confined};
pub use describe::{SUMMARY_CHARS, describe_change, main_argument};
pub use edit::Edit;
pub use error::ToolError;
pub use exit_plan::ExitPlan;
pub use git::GitReader;
pub use glob::Glob;
pub use grep::Grep;
pub use list::List;
pub use question::Question;
pub use read::Read;
pub use sandbox::{BASE_ENV, SandboxSettings, Service as SandboxService, probe as probe_sandbox};
pub use shell::{always_options, command_subject};
pub use snapshot::{ShadowRepos, SnapshotLimits};
pub use todo::TodoWrite;
pub use write::Write;

use spool_engine::ToolRegistry;
use std::ffi::OsStr;

/// The largest file `write` creates and `edit` works on: 10 MiB.
pub const MAX_FILE_BYTES: usize = 10 * 1024 * 1024;

/// The tools that only look: `list`, `read`, `glob` and `grep`.
pub fn read_only_tools() -> ToolRegistry {
    ToolRegistry::new().with(List).with(Read).with(Glob).with(Grep)
}

/// Every workspace tool: the read-only ones, plus `write`, `edit` and `bash`, which
/// change things and so are the ones permission rules usually gate, `question`, which
/// asks the person, `todo_write`, which keeps the session's todo list, and `exit_plan`,
/// which hands a plan-mode session's plan to the person (offered only in plan mode).
/// `bash` runs in the default sandbox (scrubbed environment, Landlock where the kernel
/// has it).
pub fn workspace_tools() -> ToolRegistry {
    workspace_tools_with(SandboxSettings::default())
}

/// [`workspace_tools`] with the operator's sandbox settings for `bash`.
pub fn workspace_tools_with(sandbox: SandboxSettings) -> ToolRegistry {
    read_only_tools().with(Write).with(Edit).with(Bash::new(sandbox)).with(Question).with(TodoWrite).with(ExitPlan)
}

/// A file name or relative path as one line of output: non-UTF-8 bytes become U+FFFD,
/// and a name containing a newline or other control character is shown quoted and
/// escaped so it cannot break the one-entry-per-line format.
pub(crate) fn display_name(name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if name.chars().any(char::is_control) { format!("{name:?}") } else { name.into_owned() }
}

/// `n` bytes, in words: "1 byte", "12 bytes".
pub(crate) fn bytes(n: u64) -> String {
    if n == 1 { "1 byte".to_owned() } else { format!("{n} bytes") }
}

/// An empty project directory, canonical (the path every tool compares against), and
/// the guard that removes it: what the tools' unit tests work in.
#[cfg(test)]
fn test_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical temp dir");
    (dir, root)
}

/// A call's context in `root` and nothing else (no directory identity, data directory
/// or progress sink): what the tools' unit tests call with.
#[cfg(test)]
fn test_context(root: &std::path::Path) -> spool_engine::ToolContext {
    spool_engine::ToolContext {
        root: root.to_path_buf(),
        root_id: None,
        cancel: tokio_util::sync::CancellationToken::new(),
        data_dir: None,
        progress: Default::default(),
        asker: Default::default(),
        sampler: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use spool_engine::{ToolContext, ToolOutput};
    use spool_protocol::SessionMode;
    use tokio_util::sync::CancellationToken;

    /// Plan mode is the promise that nothing changes: the model is offered only the
    /// tools that look or ask, and `exit_plan`; agent mode offers everything else.
    #[test]
    fn plan_mode_offers_only_the_tools_that_change_nothing() {
        let names = |mode| workspace_tools().specs_for(mode).into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(SessionMode::Plan), ["exit_plan", "glob", "grep", "list", "question", "read", "todo_write"]);
        assert_eq!(
            names(SessionMode::Agent),
            ["bash", "edit", "glob", "grep", "list", "question", "read", "todo_write", "write"]
        );
    }

    #[test]
    fn read_only_tools_are_the_four_that_look() {
        let names: Vec<String> = read_only_tools().specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["glob", "grep", "list", "read"]);
    }

    #[test]
    fn workspace_tools_holds_all_nine_with_object_schemas() {
        let specs = workspace_tools().specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["bash", "edit", "exit_plan", "glob", "grep", "list", "question", "read", "todo_write", "write"]
        );
        for spec in &specs {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert_eq!(spec.parameters["additionalProperties"], false, "{}", spec.name);
            // Every required argument is described.
            for required in spec.parameters["required"].as_array().into_iter().flatten() {
                let name = required.as_str().expect("required names are strings");
                assert!(spec.parameters["properties"][name].is_object(), "{}.{name}", spec.name);
            }
        }
    }

    /// Arguments each tool accepts. Each is checked to be accepted before it is broken,
    /// so a refusal below is about the one thing changed.
    fn valid_args(tool: &str) -> Value {
        match tool {
            "bash" => json!({"command": "true", "timeout": 5}),
            "edit" => json!({"path": "a.txt", "oldString": "hello", "newString": "hi", "replaceAll": false}),
            "exit_plan" => json!({"plan": "1. Edit a.txt"}),
            "glob" => json!({"pattern": "*.txt", "path": "."}),
            "grep" => json!({"pattern": "h", "path": ".", "include": "*.txt", "ignoreCase": true}),
            "list" => json!({"path": "."}),
            "read" => json!({"path": "a.txt", "offset": 1, "limit": 5}),
            "write" => json!({"path": "b.txt", "content": "new"}),
            "todo_write" => json!({"todos": [{"content": "read a.txt", "status": "pending"}]}),
            other => panic!("no valid arguments written for {other}"),
        }
    }

    /// A value of a different type than `schema` asks for, and how serde names it.
    fn wrong_type(schema: &Value) -> (Value, &'static str) {
        match schema["type"].as_str() {
            Some("string") => (json!(42), "invalid type: integer `42`, expected a string"),
            Some("integer") => (json!("7"), r#"invalid type: string "7", expected u64"#),
            Some("boolean") => (json!("yes"), r#"invalid type: string "yes", expected a boolean"#),
            Some("array") => (json!("x"), r#"invalid type: string "x", expected a sequence"#),
            other => panic!("no wrong value written for type {other:?}"),
        }
    }

    /// Spool's data directory inside the project (a project registered before that was
    /// refused): no tool opens, lists, finds or changes anything in it, however the path
    /// is spelled, and the walks of `grep` and `glob` do not enter it.
    #[tokio::test]
    async fn no_tool_reaches_the_data_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let data = root.join(".spool");
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::write(root.join("src/a.txt"), "needle\n").expect("write");
        std::fs::write(data.join("config.toml"), "needle = \"sk-secret\"\n").expect("write");
        std::os::unix::fs::symlink(&data, root.join("lnk")).expect("symlink");
        std::os::unix::fs::symlink(data.join("config.toml"), root.join("flink")).expect("symlink");
        let ctx = ToolContext {
            root: root.clone(),
            root_id: None,
            cancel: CancellationToken::new(),
            data_dir: Some(data.clone()),
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        };
        let registry = workspace_tools();
        let call = |name: &str, args: Value| {
            let (tool, ctx) = (registry.get(name).expect("tool"), ctx.clone());
            async move { tool.call(args, &ctx).await }
        };

        assert_eq!(call("grep", json!({"pattern": "needle"})).await, ToolOutput::ok("src/a.txt:1: needle"));
        assert_eq!(call("grep", json!({"pattern": "needle", "path": "src/.."})).await.text, "src/a.txt:1: needle");
        let found = call("glob", json!({"pattern": "**/*"})).await;
        assert!(!found.text.contains("config.toml"), "{found:?}");
        for path in [".spool/config.toml", "lnk/config.toml", "src/../.spool/config.toml", ".spool/missing", "flink"] {
            let out = call("read", json!({"path": path})).await;
            let refused = format!("path {path:?} is inside Spool's data directory, which tools never touch");
            assert_eq!(out, ToolOutput::error(refused), "read {path}");
        }
        for (name, args) in [
            ("list", json!({"path": ".spool"})),
            ("list", json!({"path": "lnk"})),
            ("grep", json!({"pattern": "needle", "path": ".spool"})),
            ("glob", json!({"pattern": "*", "path": "lnk"})),
            ("write", json!({"path": ".spool/new.txt", "content": "x"})),
            ("write", json!({"path": "lnk/config.toml", "content": "x"})),
            ("edit", json!({"path": "flink", "oldString": "sk", "newString": "xx"})),
        ] {
            let out = call(name, args.clone()).await;
            assert!(out.is_error && out.text.contains("Spool's data directory"), "{name} {args}: {out:?}");
        }
        assert_eq!(std::fs::read_to_string(data.join("config.toml")).expect("read"), "needle = \"sk-secret\"\n");
        assert!(!data.join("new.txt").exists());
    }

    /// Every tool, driven from its own published schema: each argument given a value of
    /// the wrong type, each required argument left out, and an argument the schema does
    /// not know. Each must come back as a tool error the model can read, naming the
    /// tool and the problem, with nothing done (the file is unchanged, no `b.txt`).
    #[tokio::test]
    async fn arguments_against_the_schema_are_tool_errors_for_every_tool() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let ctx = ToolContext {
            root: root.clone(),
            root_id: None,
            cancel: CancellationToken::new(),
            data_dir: None,
            progress: Default::default(),
            asker: Default::default(),
            sampler: Default::default(),
        };
        let reset = || std::fs::write(root.join("a.txt"), "hello\n").expect("write");
        let registry = workspace_tools();
        let mut tried = 0;

        // `question` is checked before it asks (`Tool::check`, tested in question.rs);
        // its call reads only the answer a person filled in.
        for spec in registry.specs().into_iter().filter(|s| s.name != "question") {
            let tool = registry.get(&spec.name).expect("a listed tool is registered");
            let name = spec.name.as_str();
            let valid = valid_args(name);
            reset();
            let out = tool.call(valid.clone(), &ctx).await;
            assert!(!out.is_error, "{name} refused its valid arguments: {}", out.text);
            let _ = std::fs::remove_file(root.join("b.txt"));

            let properties = spec.parameters["properties"].as_object().expect("properties");
            let mut broken: Vec<(Value, String)> = Vec::new();
            for (property, schema) in properties {
                assert!(valid.get(property).is_some(), "valid_args({name}) leaves out {property}");
                let (value, reason) = wrong_type(schema);
                let mut args = valid.clone();
                args[property] = value;
                broken.push((args, reason.to_owned()));
            }
            for required in spec.parameters["required"].as_array().into_iter().flatten() {
                let required = required.as_str().expect("required names are strings");
                let mut args = valid.clone();
                args.as_object_mut().expect("an object").remove(required);
                broken.push((args, format!("missing field `{required}`")));
            }
            let mut args = valid.clone();
            args["verbose"] = json!(true);
            broken.push((args, "unknown field `verbose`".to_owned()));
            broken.push((json!([valid.clone()]), "expected a JSON object, got an array".to_owned()));

            for (args, reason) in broken {
                reset();
                let out = tool.call(args.clone(), &ctx).await;
                let expected = format!("invalid arguments for {name}: {reason}");
                assert!(out.is_error && out.text.starts_with(&expected), "{name} {args}: {out:?}, wanted {expected}");
                assert_eq!(std::fs::read_to_string(root.join("a.txt")).expect("read"), "hello\n", "{name} {args}");
                assert!(!root.join("b.txt").exists(), "{name} {args}");
                tried += 1;
            }
        }
        // 20 arguments of a wrong type, 11 required ones missing, 9 unknown, 9 non-objects.
        assert_eq!(tried, 49);
    }
}
