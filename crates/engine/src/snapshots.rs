//! Step snapshots: before the first and after the last call of a turn whose calls may
//! change files, the run records the project's files, so a later revert can put back
//! what the agent changed, including what a `bash` command changed (issue 39).
//!
//! The engine defines the recorder as a trait, like [`crate::GitProbe`], so it imports
//! no git library and tests can script it; `spool-tools` implements it with a shadow
//! repository per project in Spool's data directory (never the project's own `.git`,
//! and nothing is written into the project). A snapshot walks the work tree, so the
//! run takes it on the blocking pool; the recorder serializes snapshots of one
//! project itself.
//!
//! Which calls may change files: a tool not offered in plan mode (`write`, `edit`,
//! `bash`, and an MCP tool unless its server marks it read-only), the same line plan
//! mode draws.

use spool_protocol::{DirIdentity, ProjectId};
use std::path::Path;

/// Paths a snapshot left out that a record keeps by name; the rest are only counted.
pub const MAX_SKIPPED_LISTED: usize = 100;

/// One recorded state of a project's files.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The recorded tree's id in the project's shadow repository.
    pub tree: String,
    /// What the snapshot left out (too large, past a limit, a nested repository).
    pub skipped: Skipped,
}

/// Paths a snapshot left out: the first [`MAX_SKIPPED_LISTED`] by name, and how many
/// in all. A revert cannot restore them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    pub paths: Vec<String>,
    pub count: u64,
}

impl Skipped {
    /// Notes one more path left out.
    pub fn push(&mut self, path: String) {
        if self.paths.len() < MAX_SKIPPED_LISTED {
            self.paths.push(path);
        }
        self.count += 1;
    }
}

/// Records a project's files. Called on a blocking thread.
pub trait Snapshotter: Send + Sync + 'static {
    /// Records the files under `root` (the directory of `project`, registered as
    /// `root_id`) and returns the tree's id. An `Err` says why nothing was recorded.
    fn snapshot(&self, project: &ProjectId, root: &Path, root_id: Option<DirIdentity>) -> Result<Snapshot, String>;
}

/// Takes a snapshot on the blocking pool.
pub(crate) async fn take(
    snapshotter: std::sync::Arc<dyn Snapshotter>,
    project: ProjectId,
    root: std::path::PathBuf,
    root_id: Option<DirIdentity>,
) -> Result<Snapshot, String> {
    tokio::task::spawn_blocking(move || snapshotter.snapshot(&project, &root, root_id))
        .await
        .unwrap_or_else(|e| Err(format!("the snapshot task failed: {e}")))
}
