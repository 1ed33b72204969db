//! Workspace tools: what a run may do to its project directory. Every tool resolves
//! paths through [`path::resolve`], which confines it to `ToolContext::root`, and turns
//! every failure into a `ToolOutput::error` the model can read, never a failed run.
//!
//! For now the tools are read-only: `list` (a directory's entries) and `read` (a text
//! file's lines). Their outputs are capped so one call cannot flood the conversation;
//! a capped output ends with a line saying what was left out and how to get it.
//!
//! File system work runs on tokio's blocking pool, one `spawn_blocking` per call, and
//! long loops check the run's cancellation token.

mod call;
mod error;
mod list;
pub mod path;
mod read;

pub use error::ToolError;
pub use list::List;
pub use read::Read;

use spool_engine::ToolRegistry;

/// The tools that only look: `list` and `read`.
pub fn read_only_tools() -> ToolRegistry {
    ToolRegistry::new().with(List).with(Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_tools_holds_list_and_read() {
        let names: Vec<String> = read_only_tools().specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["list", "read"]);
    }
}
