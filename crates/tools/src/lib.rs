//! Workspace tools: what a run may do to its project directory. Every tool resolves
//! paths through [`path`], which confines it to `ToolContext::root`, and turns every
//! failure into a `ToolOutput::error` the model can read, never a failed run.
//!
//! `list` and `read` only look. `write` and `edit` change files, atomically, so a crash
//! never leaves one half-written; `bash` runs a command in the project directory with a
//! timeout, killing everything it started when the time is up or the run is aborted.
//! Outputs are capped so one call cannot flood the conversation; a capped output says
//! what was left out.
//!
//! File system work runs on tokio's blocking pool, one `spawn_blocking` per call, and
//! long loops check the run's cancellation token. [`main_argument`] and
//! [`describe_change`] tell the approval layer what a call is about before it runs.

mod atomic;
mod bash;
mod call;
mod describe;
mod edit;
mod error;
mod list;
pub mod path;
mod read;
mod write;

pub use bash::Bash;
pub use describe::{SUMMARY_CHARS, describe_change, main_argument};
pub use edit::Edit;
pub use error::ToolError;
pub use list::List;
pub use read::Read;
pub use write::Write;

use spool_engine::ToolRegistry;

/// The largest file `write` creates and `edit` works on: 10 MiB.
pub const MAX_FILE_BYTES: usize = 10 * 1024 * 1024;

/// The tools that only look: `list` and `read`.
pub fn read_only_tools() -> ToolRegistry {
    ToolRegistry::new().with(List).with(Read)
}

/// Every workspace tool: `list` and `read`, plus `write`, `edit` and `bash`, which
/// change things and so are the ones permission rules usually gate.
pub fn workspace_tools() -> ToolRegistry {
    ToolRegistry::new().with(List).with(Read).with(Write).with(Edit).with(Bash)
}

/// `n` bytes, in words: "1 byte", "12 bytes".
pub(crate) fn bytes(n: u64) -> String {
    if n == 1 { "1 byte".to_owned() } else { format!("{n} bytes") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_tools_holds_list_and_read() {
        let names: Vec<String> = read_only_tools().specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["list", "read"]);
    }

    #[test]
    fn workspace_tools_holds_all_five_with_object_schemas() {
        let specs = workspace_tools().specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["bash", "edit", "list", "read", "write"]);
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
}
