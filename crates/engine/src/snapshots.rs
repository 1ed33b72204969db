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

use crate::Store;
use crate::session::Loaded;
use crate::store::StepSnapshot;
use spool_protocol::time::now_ms;
use spool_protocol::{DirIdentity, ProjectId, Run};
use std::path::Path;
use std::sync::Arc;

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

/// Step snapshots on: the recorder (the engine's `EngineConfig::snapshots`), and the
/// node whose data directory it writes to.
#[derive(Clone)]
pub struct StepSnapshotting {
    snapshotter: Arc<dyn Snapshotter>,
    node_id: String,
}

impl StepSnapshotting {
    pub fn new(snapshotter: Arc<dyn Snapshotter>) -> StepSnapshotting {
        StepSnapshotting { snapshotter, node_id: String::new() }
    }

    pub(crate) fn on_node(self, node_id: String) -> StepSnapshotting {
        StepSnapshotting { node_id, ..self }
    }

    /// Records the files of the session's project, on the blocking pool. A failure is
    /// logged and leaves the step without a snapshot: the run goes on.
    async fn take(&self, loaded: &Loaded) -> Option<Snapshot> {
        let project = loaded.events.read(|s| s.session.project_id.clone());
        let (snapshotter, root, root_id) = (self.snapshotter.clone(), loaded.root.clone(), loaded.root_id);
        let at = project.clone();
        let taken = tokio::task::spawn_blocking(move || snapshotter.snapshot(&at, &root, root_id))
            .await
            .unwrap_or_else(|e| Err(format!("the snapshot task failed: {e}")));
        match taken {
            Ok(snapshot) => Some(snapshot),
            Err(error) => {
                tracing::warn!(%project, %error, "cannot take a step snapshot; the step goes on without one");
                None
            }
        }
    }

    /// The `before` snapshot of turn `turn`, whose calls are in the assistant message at
    /// `message_index`: taken and recorded; returns the tree's id.
    pub(crate) async fn before(
        &self,
        store: &dyn Store,
        loaded: &Loaded,
        run: &Run,
        turn: usize,
        message_index: u64,
    ) -> Option<String> {
        let snapshot = self.take(loaded).await?;
        let step = StepSnapshot {
            run_id: run.id.clone(),
            turn: u32::try_from(turn).unwrap_or(u32::MAX),
            session_id: run.session_id.clone(),
            owner_id: run.owner_id.clone(),
            project_id: loaded.events.read(|s| s.session.project_id.clone()),
            message_index,
            before_tree: snapshot.tree.clone(),
            before_skipped: snapshot.skipped,
            after_tree: None,
            after_skipped: None,
            node_id: self.node_id.clone(),
            created_at: now_ms(),
        };
        if let Err(error) = store.insert_step_snapshot(&step).await {
            tracing::warn!(run = %run.id, %error, "cannot record a step snapshot");
            return None;
        }
        Some(snapshot.tree)
    }

    /// The `after` snapshot of turn `turn`: taken and recorded beside its `before`;
    /// returns the tree's id and the step's message index (`None` when the step has no
    /// `before`, or the snapshot failed).
    pub(crate) async fn after(
        &self,
        store: &dyn Store,
        loaded: &Loaded,
        run: &Run,
        turn: usize,
    ) -> Option<(String, u64)> {
        let snapshot = self.take(loaded).await?;
        let turn = u32::try_from(turn).unwrap_or(u32::MAX);
        match store.finish_step_snapshot(&run.id, turn, &snapshot.tree, &snapshot.skipped).await {
            Ok(index) => index.map(|i| (snapshot.tree, i)),
            Err(error) => {
                tracing::warn!(run = %run.id, %error, "cannot record a step snapshot");
                None
            }
        }
    }
}

impl std::fmt::Debug for StepSnapshotting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepSnapshotting").field("node_id", &self.node_id).finish_non_exhaustive()
    }
}

/// Whether running `tool` may change the project's files: it is kept out of plan mode
/// (plan mode's promise is that nothing changes).
pub(crate) fn may_change_files(tool: &dyn crate::Tool) -> bool {
    !tool.available_in(spool_protocol::SessionMode::Plan)
}
