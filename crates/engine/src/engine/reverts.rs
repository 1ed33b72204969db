//! Reverting a session to a user message, and undoing that (issue 39).
//!
//! A revert to user message `k` does two things. The files: the step snapshots of the
//! turns from `k` on are planned against a fresh snapshot of the files now
//! ([`crate::revert::plan`]), and every file those steps changed and nothing else
//! touched since goes back to what it was before the first of them (a file they
//! created is deleted); a file someone else changed is a conflict, reported with its
//! diff and left alone. The messages: the turns from `k` on are shelved as a branch of
//! kind `revert` ([`crate::store::Branches::shelve`]), so the model's next request no
//! longer holds them. The record of both ([`crate::store::SessionRevert`]) is what
//! [`Reverts::unrevert`] reads to put the files back as they were just before the
//! revert (again, only those still as the revert left them) and the turns back on the
//! path.
//!
//! A prompt after a revert makes it final: once the session holds a message at `k`
//! again, the record is stale, treated as absent and deleted when next read; the
//! shelved turns stay as a version of that turn.
//!
//! Both refuse while the session is busy (a run going or parked, prompts queued): a
//! run would change the files and the history under them. The files are read and
//! written on the blocking pool through the recorder ([`crate::snapshots::Snapshotter`]),
//! whose writes never follow a link out of the project. With step snapshots off, a
//! revert moves only the turns and its report lists no file. The snapshots are on the
//! node that took them: a revert elsewhere is refused (`snapshots_elsewhere`).

use super::*;
use crate::revert::{Files, StepFiles, Target};
use crate::snapshots::{FileId, Snapshotter};
use crate::store::SessionRevert;
use spool_protocol::{
    BranchKind, PendingRevert, REVERT_DIFF_CAP, RevertAction, RevertConflict, RevertFile, RevertReport,
};
use std::collections::BTreeSet;

/// `engine.reverts()`: previews, reverts and unreverts a session's files and turns.
#[derive(Clone, Copy)]
pub struct Reverts<'a> {
    pub(crate) engine: &'a Engine,
}

/// What a pending revert's record keeps (its `state`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct RevertState {
    /// The tree of the files just before the revert, which unrevert puts back (`None`
    /// when the revert had no file to restore, so none was taken).
    pre: Option<String>,
    /// The tree the restored files came from: what each held right after the revert.
    target: Option<String>,
    /// What the revert did.
    report: RevertReport,
    /// A diff of what it did to the files it put back (absent in records written before
    /// it was kept).
    #[serde(default)]
    diff: Option<String>,
}

impl RevertState {
    /// The pending revert as every view shows it.
    fn pending(self, record: &SessionRevert) -> PendingRevert {
        PendingRevert {
            index: record.message_index,
            ordinal: record.ordinal,
            report: self.report,
            snapshot: self.pre,
            diff: self.diff,
        }
    }
}

/// A revert worked out and not yet applied.
struct Planned {
    report: RevertReport,
    /// The snapshot of the files now.
    pre: Option<String>,
    /// The first undone step's `before` tree.
    target: Option<String>,
}

/// Where a session's files are and who reads and writes them.
struct ProjectFiles {
    recorder: Arc<dyn Snapshotter>,
    project: ProjectId,
    root: PathBuf,
    root_id: Option<DirIdentity>,
    /// The node whose data directory holds the recorder's trees.
    node: String,
}

impl ProjectFiles {
    /// Runs `f` with the recorder on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Snapshotter, &ProjectId) -> Result<T, String> + Send + 'static,
    ) -> Result<T> {
        let (recorder, project) = (self.recorder.clone(), self.project.clone());
        let done = tokio::task::spawn_blocking(move || f(&*recorder, &project))
            .await
            .unwrap_or_else(|e| Err(format!("the snapshot task failed: {e}")));
        done.map_err(|message| {
            tracing::warn!(project = %self.project, error = %message, "cannot read or restore a snapshot");
            EngineError::Unavailable {
                code: "snapshot_failed",
                message: format!("the file snapshots failed: {message}"),
            }
        })
    }

    /// A snapshot of the files now; returns its tree and the paths it left out.
    async fn take(&self) -> Result<(String, BTreeSet<String>)> {
        let (root, root_id) = (self.root.clone(), self.root_id);
        let taken = self.blocking(move |r, project| r.snapshot(project, &root, root_id)).await?;
        Ok((taken.tree, taken.skipped.paths.into_iter().collect()))
    }

    async fn files(&self, tree: &str) -> Result<Files<FileId>> {
        let tree = tree.to_owned();
        self.blocking(move |r, project| r.files(project, &tree)).await
    }

    /// A conflict's diff: `path` in `now` against `target`.
    async fn conflict(&self, path: String, now: &str, target: &str) -> Result<RevertConflict> {
        let (at, now, target) = (path.clone(), now.to_owned(), target.to_owned());
        let diff = self.blocking(move |r, project| r.diff(project, &at, &now, &target, REVERT_DIFF_CAP)).await?;
        Ok(RevertConflict { path, diff })
    }

    /// One unified diff of `paths` from tree `from` to tree `to`, at most
    /// [`REVERT_DIFF_CAP`] bytes: a file past the cap is named, not shown. `None` when
    /// there is no path.
    async fn diff(&self, paths: Vec<String>, from: &str, to: &str) -> Result<Option<String>> {
        if paths.is_empty() {
            return Ok(None);
        }
        let (from, to) = (from.to_owned(), to.to_owned());
        let text = self
            .blocking(move |r, project| {
                let mut text = String::new();
                for (n, path) in paths.iter().enumerate() {
                    let room = REVERT_DIFF_CAP.saturating_sub(text.len());
                    let left = paths.len() - n;
                    let note = format!("… {left} more file(s) not shown\n");
                    if room <= note.len() {
                        text.push_str(&note);
                        break;
                    }
                    text.push_str(&r.diff(project, path, &from, &to, room - note.len())?);
                }
                Ok(text)
            })
            .await?;
        Ok(Some(text))
    }

    /// Puts `path` back as `tree` holds it; the error says why it could not.
    async fn restore(&self, tree: &str, path: &str) -> Result<(), String> {
        let (root, root_id, tree, path) = (self.root.clone(), self.root_id, tree.to_owned(), path.to_owned());
        let (recorder, project) = (self.recorder.clone(), self.project.clone());
        tokio::task::spawn_blocking(move || recorder.restore(&project, &root, root_id, &tree, &path))
            .await
            .unwrap_or_else(|e| Err(format!("the restore task failed: {e}")))
    }
}

impl Reverts<'_> {
    /// What a revert to user message `index` would do to the files; nothing changes
    /// (but a snapshot of the files now is recorded, to compare with).
    pub async fn preview(&self, owner: &UserId, id: &SessionId, index: u64) -> Result<RevertReport> {
        let loaded = self.engine.load(owner, id).await?;
        self.engine.user_message_at(id, index).await?;
        Ok(self.plan(&loaded, id, index).await?.report)
    }

    /// Reverts the session to user message `index`: the files the turns from there on
    /// changed go back (conflicts left alone), the turns leave the active path as a
    /// branch, and the revert waits for an unrevert until the next prompt. Answers what
    /// it did to the files. `session_busy` while a run is going or parked.
    pub async fn revert(&self, owner: &UserId, id: &SessionId, index: u64) -> Result<RevertReport> {
        let loaded = self.engine.load(owner, id).await?;
        self.check_files_allowed(owner, &loaded).await?;
        let _control = loaded.control.lock().await;
        let _lease = self.engine.quiet_session(&loaded, id).await?;
        self.engine.user_message_at(id, index).await?;
        let store = self.engine.store();
        let Planned { mut report, pre, target } = self.plan(&loaded, id, index).await?;
        if let (Some(files), Some(target)) = (self.files_of(&loaded), &target) {
            let mut restored = Vec::with_capacity(report.restore.len());
            for file in std::mem::take(&mut report.restore) {
                match files.restore(target, &file.path).await {
                    Ok(()) => restored.push(file),
                    Err(error) => {
                        tracing::warn!(session = %id, path = %file.path, %error, "cannot put a file back");
                        let diff = format!("the file could not be put back: {error}\n");
                        report.conflicts.push(RevertConflict { path: file.path, diff });
                    }
                }
            }
            report.restore = restored;
        }
        let diff = match (self.files_of(&loaded), &pre, &target) {
            (Some(files), Some(pre), Some(target)) => {
                let paths = report.restore.iter().map(|f| f.path.clone()).collect();
                files.diff(paths, pre, target).await?
            }
            _ => None,
        };
        let ordinal = store.shelve(id, index, BranchKind::Revert).await?;
        let state = RevertState { pre, target, report: report.clone(), diff };
        let record = SessionRevert {
            session_id: id.clone(),
            owner_id: owner.clone(),
            message_index: index,
            ordinal,
            state: serde_json::to_value(&state).expect("a revert's state serializes"),
            created_at: now_ms(),
        };
        store.put_session_revert(&record).await?;
        self.engine.republish_stored(&loaded, id).await?;
        tracing::info!(session = %id, index, restored = report.restore.len(), conflicts = report.conflicts.len(), "reverted");
        Ok(report)
    }

    /// Undoes the session's pending revert: each file it put back and nobody changed
    /// since returns to what it held just before the revert (the others are conflicts,
    /// left alone), and the turns come back on the path. `nothing_to_unrevert` when
    /// there is no pending revert (none, or a prompt made it final).
    pub async fn unrevert(&self, owner: &UserId, id: &SessionId) -> Result<RevertReport> {
        let loaded = self.engine.load(owner, id).await?;
        self.check_files_allowed(owner, &loaded).await?;
        let _control = loaded.control.lock().await;
        let _lease = self.engine.quiet_session(&loaded, id).await?;
        let Some((record, state)) = self.pending_record(id).await? else {
            return Err(EngineError::Conflict {
                code: "nothing_to_unrevert",
                message: "the session has no revert to undo (a prompt after a revert makes it final)".into(),
            });
        };
        let mut report = RevertReport { index: record.message_index, ..RevertReport::default() };
        if let (Some(files), Some(pre), Some(target)) = (self.files_of(&loaded), &state.pre, &state.target)
            && !state.report.restore.is_empty()
        {
            let (now, _) = files.take().await?;
            let (now_files, target_files, pre_files) =
                (files.files(&now).await?, files.files(target).await?, files.files(pre).await?);
            for file in &state.report.restore {
                let path = &file.path;
                if now_files.get(path) != target_files.get(path) {
                    report.conflicts.push(files.conflict(path.clone(), &now, pre).await?);
                    continue;
                }
                if now_files.get(path) == pre_files.get(path) {
                    continue;
                }
                let action = match pre_files.contains_key(path) {
                    true => RevertAction::Write,
                    false => RevertAction::Delete,
                };
                match files.restore(pre, path).await {
                    Ok(()) => report.restore.push(RevertFile { path: path.clone(), action }),
                    Err(error) => {
                        tracing::warn!(session = %id, %path, %error, "cannot put a file back");
                        let diff = format!("the file could not be put back: {error}\n");
                        report.conflicts.push(RevertConflict { path: path.clone(), diff });
                    }
                }
            }
        }
        let store = self.engine.store();
        if let Some(ordinal) = record.ordinal {
            store.unshelve(id, ordinal).await?;
        }
        store.delete_session_revert(id).await?;
        self.engine.republish_stored(&loaded, id).await?;
        tracing::info!(session = %id, restored = report.restore.len(), conflicts = report.conflicts.len(), "unreverted");
        Ok(report)
    }

    /// The session's revert that `unrevert` would undo, if any.
    pub async fn pending(&self, owner: &UserId, id: &SessionId) -> Result<Option<PendingRevert>> {
        self.engine.owned_session(owner, id).await?;
        self.pending_of(id).await
    }

    /// The pending revert of session `id`, owner unchecked: what the stored view shows.
    pub(crate) async fn pending_of(&self, id: &SessionId) -> Result<Option<PendingRevert>> {
        Ok(self.pending_record(id).await?.map(|(record, state)| state.pending(&record)))
    }

    /// The pending reverts of the project's sessions, by session, in one read: what a
    /// list of sessions shows beside each. A stale record is left out (and left for
    /// [`Reverts::pending`] to delete).
    pub async fn pending_in(
        &self,
        owner: &UserId,
        project: &ProjectId,
    ) -> Result<std::collections::HashMap<SessionId, PendingRevert>> {
        let project = self.engine.projects().get(owner, project).await?;
        let records = self.engine.store().pending_session_reverts(&project.id).await?;
        Ok(records
            .into_iter()
            .filter_map(|record| {
                let state = serde_json::from_value::<RevertState>(record.state.clone()).ok()?;
                Some((record.session_id.clone(), state.pending(&record)))
            })
            .collect())
    }

    /// The pending revert's record and state; a stale one (the session holds a message
    /// at its index again) is deleted and counts as none.
    async fn pending_record(&self, id: &SessionId) -> Result<Option<(SessionRevert, RevertState)>> {
        let store = self.engine.store();
        let Some(record) = store.session_revert(id).await? else { return Ok(None) };
        let stale = store.count_messages(id).await? > record.message_index;
        let state = serde_json::from_value::<RevertState>(record.state.clone());
        match state {
            Ok(state) if !stale => Ok(Some((record, state))),
            Ok(_) => {
                store.delete_session_revert(id).await?;
                Ok(None)
            }
            Err(error) => {
                tracing::warn!(session = %id, %error, "a pending revert's state does not parse; dropped");
                store.delete_session_revert(id).await?;
                Ok(None)
            }
        }
    }

    /// The same checks a run makes before it touches the project's directory.
    async fn check_files_allowed(&self, owner: &UserId, loaded: &Loaded) -> Result<()> {
        let engine = self.engine;
        let auth_on = engine.inner.auth.auth_required().await?;
        engine.inner.fence.check_existing(owner, auth_on, &loaded.root)?;
        let project = loaded.events.read(|s| s.session.project_id.clone());
        engine.check_claims_at_run(owner, &project, auth_on).await?;
        crate::roots::check_identity(&loaded.root, loaded.root_id)
    }

    /// The session's files, when step snapshots are on.
    fn files_of(&self, loaded: &Loaded) -> Option<ProjectFiles> {
        let snapshots = self.engine.inner.config.snapshots.as_ref()?;
        Some(ProjectFiles {
            recorder: snapshots.snapshotter().clone(),
            project: loaded.events.read(|s| s.session.project_id.clone()),
            root: loaded.root.clone(),
            root_id: loaded.root_id,
            node: self.engine.inner.config.node_id.clone(),
        })
    }

    /// Plans the revert to `index` (see the module docs).
    async fn plan(&self, loaded: &Loaded, id: &SessionId, index: u64) -> Result<Planned> {
        let empty = RevertReport { index, ..RevertReport::default() };
        let nothing = Planned { report: empty.clone(), pre: None, target: None };
        let steps: Vec<_> = self
            .engine
            .store()
            .list_step_snapshots(id)
            .await?
            .into_iter()
            .filter(|s| s.message_index >= index)
            .collect();
        let Some(files) = self.files_of(loaded) else { return Ok(nothing) };
        let Some(first) = steps.first() else { return Ok(nothing) };
        if let Some(elsewhere) = steps.iter().find(|s| s.node_id != files.node) {
            return Err(EngineError::Conflict {
                code: "snapshots_elsewhere",
                message: format!("the file snapshots of these turns are on node {}; revert there", elsewhere.node_id),
            });
        }
        let (now, now_skipped) = files.take().await?;
        let mut recorded = Vec::with_capacity(steps.len());
        for step in &steps {
            let mut skipped: BTreeSet<String> = step.before_skipped.paths.iter().cloned().collect();
            if let Some(after) = &step.after_skipped {
                skipped.extend(after.paths.iter().cloned());
            }
            let after = match &step.after_tree {
                Some(tree) => Some(files.files(tree).await?),
                None => None,
            };
            recorded.push(StepFiles { before: files.files(&step.before_tree).await?, after, skipped });
        }
        let now_files = files.files(&now).await?;
        let mut plan = crate::revert::plan(&recorded, &now_files);
        // A file the snapshot of now left out is not known as it is: never overwritten.
        for path in now_skipped {
            if plan.restore.remove(&path).is_some() || plan.conflicts.remove(&path) {
                plan.uncovered.insert(path);
            }
        }
        let target = first.before_tree.clone();
        let mut report = empty;
        for (path, to) in plan.restore {
            let action = match to {
                Target::Write(_) => RevertAction::Write,
                Target::Delete => RevertAction::Delete,
            };
            report.restore.push(RevertFile { path, action });
        }
        for path in plan.conflicts {
            report.conflicts.push(files.conflict(path, &now, &target).await?);
        }
        report.uncovered = plan.uncovered.into_iter().collect();
        Ok(Planned { report, pre: Some(now), target: Some(target) })
    }
}
