//! The git state of a session's project as the engine's git poller reads it: the branch,
//! the HEAD commit and how the work tree differs from HEAD. It travels in the
//! `session.git` frame when it changes (the WebSocket hub's `channel.updated`,
//! OpenCode's `session.diff`) and in `GET /api/sessions/:id` as last read.
//!
//! The diff is the work tree against HEAD's tree, staged or not, plus untracked files
//! that are not ignored (their lines count as added): what a person reviewing the
//! agent's work wants to see, new files included. It is bounded (see the poller), so
//! `truncated` says when the counts cover only part of the changed files.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Most changed files a [`GitState`] lists; the totals still count every file read.
pub const MAX_LISTED_FILES: usize = 200;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitState {
    /// The checked-out branch (`main`); `None` for a detached HEAD.
    pub branch: Option<String>,
    /// HEAD's commit, abbreviated as git abbreviates it (`dbd4bbd`); `None` before the
    /// first commit.
    pub commit: Option<String>,
    /// Lines added and removed in the work tree against HEAD.
    pub additions: u64,
    pub deletions: u64,
    /// The changed files, in path order, at most [`MAX_LISTED_FILES`].
    pub files: Vec<FileChange>,
    /// The diff went past the poller's budget (or the list past its limit): the totals
    /// cover the files looked at, and `files` is cut short.
    #[serde(default)]
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    /// Relative to the repository's work tree, `/`-separated.
    pub path: String,
    pub status: FileStatus,
    pub additions: u64,
    pub deletions: u64,
}

/// How a file differs from HEAD (a rename or a type change counts as `modified`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    Added,
    Deleted,
    Modified,
}

impl FileStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FileStatus::Added => "added",
            FileStatus::Deleted => "deleted",
            FileStatus::Modified => "modified",
        }
    }
}
