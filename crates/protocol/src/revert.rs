//! Reverting a session to a message (issue 39): the turns from that user message on
//! leave the active path (kept as a branch, so an unrevert brings them back) and the
//! files the agent changed in them return to what they were before. These records say
//! what a revert will do (a preview), did, or what an unrevert did.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The largest conflict diff a report carries, in bytes; a longer one is cut and says so.
pub const REVERT_DIFF_CAP: usize = 64 * 1024;

/// What a revert (or an unrevert) does to the project's files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertReport {
    /// The user message the session goes back to (it and everything after it leave).
    pub index: u64,
    /// Files put back: written as they were, or deleted because they did not exist.
    pub restore: Vec<RevertFile>,
    /// Files the undone turns changed that something else changed since: left alone.
    pub conflicts: Vec<RevertConflict>,
    /// Files the undone turns may have changed that no snapshot recorded (too large,
    /// past a limit): left alone.
    pub uncovered: Vec<String>,
}

/// One file a revert puts back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertFile {
    /// The path relative to the project's directory, `/`-separated.
    pub path: String,
    pub action: RevertAction,
}

/// What happens to a file put back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum RevertAction {
    /// Its earlier contents (and mode) are written.
    Write,
    /// It did not exist then, so it is deleted.
    Delete,
}

/// A file left alone because someone else changed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertConflict {
    pub path: String,
    /// A unified diff of the file now against what the revert would have written, at
    /// most [`REVERT_DIFF_CAP`] bytes.
    pub diff: String,
}

/// A session's revert that `unrevert` can still undo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingRevert {
    /// The user message the session went back to.
    pub index: u64,
    /// The branch holding the turns that left (absent when there were none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    /// What the revert did.
    pub report: RevertReport,
    /// The snapshot (tree id) of the files just before the revert: what an unrevert
    /// puts back (absent when the revert had no snapshot to take).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// A unified diff of what the revert did to the files it put back (each file as it
    /// was just before the revert against what the revert wrote), at most
    /// [`REVERT_DIFF_CAP`] bytes in all; absent when it put back none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}
