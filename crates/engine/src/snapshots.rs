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
//!
//! # Retention
//!
//! Every hour ([`PRUNE_EVERY`]) the engine deletes step records older than the
//! retention setting, then asks the recorder to delete, in each project's repository,
//! what no remaining record names (a step's trees, a pending revert's trees) and
//! what was written more than [`PRUNE_GRACE`] ago; a repository whose project is gone is
//! deleted whole. Deleting a project deletes its repository at once.

use crate::Store;
use crate::session::Loaded;
use crate::store::StepSnapshot;
use spool_protocol::time::now_ms;
use spool_protocol::{DirIdentity, ProjectId, Run};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often retention runs.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// How old an object nothing names must be before pruning deletes it: a snapshot's
/// tree is written before its record reaches the store, a revert's before its row.
pub const PRUNE_GRACE: Duration = Duration::from_secs(3600);
/// The step records' retention unless the server sets one.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

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

/// A file as a snapshot recorded it, without its bytes: what a revert compares.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileId {
    /// The content's id in the shadow repository (equal ids, equal bytes).
    pub blob: String,
    /// The git file mode (regular, executable or a link).
    pub mode: i32,
}

/// Records a project's files, reads them back and puts them back. Called on a
/// blocking thread.
pub trait Snapshotter: Send + Sync + 'static {
    /// Records the files under `root` (the directory of `project`, registered as
    /// `root_id`) and returns the tree's id. An `Err` says why nothing was recorded.
    fn snapshot(&self, project: &ProjectId, root: &Path, root_id: Option<DirIdentity>) -> Result<Snapshot, String>;

    /// The files tree `tree` of `project` holds, by path (`/`-separated), as identities.
    fn files(&self, project: &ProjectId, tree: &str) -> Result<crate::revert::Files<FileId>, String>;

    /// A unified diff of `path` as tree `from` holds it against tree `to` (an absent
    /// side is empty), at most `max_bytes` long.
    fn diff(&self, project: &ProjectId, path: &str, from: &str, to: &str, max_bytes: usize) -> Result<String, String>;

    /// Makes `path` under `root` what tree `tree` holds (its bytes and mode), or removes
    /// it when the tree has no such file. Never follows a link out of the project, and
    /// never writes through one: a link at `path` itself is replaced.
    fn restore(
        &self,
        project: &ProjectId,
        root: &Path,
        root_id: Option<DirIdentity>,
        tree: &str,
        path: &str,
    ) -> Result<(), String>;

    /// The projects this recorder holds snapshots of (what pruning visits).
    fn projects(&self) -> Result<Vec<ProjectId>, String> {
        Ok(Vec::new())
    }

    /// Deletes what `project`'s snapshots held that no tree in `keep` needs and that
    /// is older than `grace`; returns how many objects went.
    fn prune(&self, _project: &ProjectId, _keep: &[String], _grace: Duration) -> Result<u64, String> {
        Ok(0)
    }

    /// Deletes everything recorded for `project` (it was deleted).
    fn forget(&self, _project: &ProjectId) -> Result<(), String> {
        Ok(())
    }
}

/// Step snapshots on: the recorder (the engine's `EngineConfig::snapshots`), and the
/// node whose data directory it writes to.
#[derive(Clone)]
pub struct StepSnapshotting {
    snapshotter: Arc<dyn Snapshotter>,
    node_id: String,
    /// How long step records are kept; `None`: for ever.
    retention: Option<Duration>,
}

impl StepSnapshotting {
    /// Snapshots by `snapshotter`, their records kept [`DEFAULT_RETENTION`].
    pub fn new(snapshotter: Arc<dyn Snapshotter>) -> StepSnapshotting {
        StepSnapshotting { snapshotter, node_id: String::new(), retention: Some(DEFAULT_RETENTION) }
    }

    /// Keeps step records `retention` (`None`: for ever) instead.
    pub fn keeping(self, retention: Option<Duration>) -> StepSnapshotting {
        StepSnapshotting { retention, ..self }
    }

    pub(crate) fn on_node(self, node_id: String) -> StepSnapshotting {
        StepSnapshotting { node_id, ..self }
    }

    /// The recorder, for a revert that reads and restores what it recorded.
    pub(crate) fn snapshotter(&self) -> &Arc<dyn Snapshotter> {
        &self.snapshotter
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

impl StepSnapshotting {
    /// One retention pass at `now` (see the module docs): old records, then each
    /// repository. A failure is logged and the next pass tries again.
    pub async fn prune(&self, store: &dyn Store, now: spool_protocol::time::Millis) {
        if let Some(keep) = self.retention {
            match store.prune_step_snapshots(now.saturating_sub(crate::clock::millis(keep))).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned step snapshot records past their retention"),
                Err(error) => tracing::warn!(%error, "could not prune step snapshot records"),
            }
        }
        let recorder = self.snapshotter.clone();
        let projects = match tokio::task::spawn_blocking(move || recorder.projects()).await {
            Ok(Ok(projects)) => projects,
            Ok(Err(error)) => return tracing::warn!(%error, "could not list the snapshot repositories"),
            Err(error) => return tracing::warn!(%error, "the snapshot listing task failed"),
        };
        for project in projects {
            match store.get_project(&project).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    self.forget(&project).await;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%project, %error, "could not read a project to prune its snapshots");
                    continue;
                }
            }
            let keep = match store.snapshot_trees(&project).await {
                Ok(keep) => keep,
                Err(error) => {
                    tracing::warn!(%project, %error, "could not read which snapshots to keep");
                    continue;
                }
            };
            let (recorder, at) = (self.snapshotter.clone(), project.clone());
            match tokio::task::spawn_blocking(move || recorder.prune(&at, &keep, PRUNE_GRACE)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(objects)) => tracing::info!(%project, objects, "pruned snapshot objects no record needs"),
                Ok(Err(error)) => tracing::warn!(%project, %error, "could not prune the snapshot repository"),
                Err(error) => tracing::warn!(%project, %error, "the snapshot pruning task failed"),
            }
        }
    }

    /// Deletes what was recorded for `project` (deleted); a failure is logged.
    pub async fn forget(&self, project: &ProjectId) {
        let (recorder, at) = (self.snapshotter.clone(), project.clone());
        match tokio::task::spawn_blocking(move || recorder.forget(&at)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%project, %error, "could not delete a deleted project's snapshots"),
            Err(error) => tracing::warn!(%project, %error, "the snapshot deletion task failed"),
        }
    }
}

impl crate::Engine {
    /// Runs step-snapshot retention now and every [`PRUNE_EVERY`], when snapshots are on.
    pub(crate) fn spawn_snapshot_pruning(&self) {
        let Some(snapshots) = self.inner.config.snapshots.clone() else { return };
        self.spawn_every(PRUNE_EVERY, move |engine| {
            let snapshots = snapshots.clone();
            async move {
                let now = engine.inner.config.clock.now_ms();
                snapshots.prune(&*engine.inner.store, now).await;
            }
        });
    }
}

impl std::fmt::Debug for StepSnapshotting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepSnapshotting")
            .field("node_id", &self.node_id)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

/// Whether running `tool` may change the project's files: it is kept out of plan mode
/// (plan mode's promise is that nothing changes).
pub(crate) fn may_change_files(tool: &dyn crate::Tool) -> bool {
    !tool.available_in(spool_protocol::SessionMode::Plan)
}
