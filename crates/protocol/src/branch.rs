//! Branches: the other versions of a session's turns (issue 39).
//!
//! Editing a user message or regenerating an answer does not rewrite history: the
//! turns from that message on are shelved as a numbered branch of the session, and the
//! new version takes their place on the active path. The active path is all a run, a
//! dialect or a history route sees; these records are how a client learns that other
//! versions exist and reads them.

use crate::time::Millis;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Why a branch was shelved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum BranchKind {
    /// A user message was edited: the new text took the turn's place.
    Edit,
    /// The answer to a user message was asked for again.
    Regenerate,
    /// The session was reverted to before the turn.
    Revert,
    /// Someone switched to another version of the turn; this was the one shown.
    Switch,
    /// A prompt sent with `multitask: "rollback"` cancelled the run answering the turn
    /// and took the turn's place.
    Rollback,
}

impl BranchKind {
    /// The name stored and sent for the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            BranchKind::Edit => "edit",
            BranchKind::Regenerate => "regenerate",
            BranchKind::Revert => "revert",
            BranchKind::Switch => "switch",
            BranchKind::Rollback => "rollback",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(name: &str) -> Option<BranchKind> {
        Some(match name {
            "edit" => BranchKind::Edit,
            "regenerate" => BranchKind::Regenerate,
            "revert" => BranchKind::Revert,
            "switch" => BranchKind::Switch,
            "rollback" => BranchKind::Rollback,
            _ => return None,
        })
    }
}

/// A shelved branch as `GET /api/sessions/:id/branches` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Branch {
    /// The branch's number within its session, from 1 (the active path has none).
    pub ordinal: u32,
    /// The index of the branch's first message: the turn it is a version of.
    pub fork_index: u64,
    pub kind: BranchKind,
    pub created_at: Millis,
    /// The first 200 characters of the branch's first user message's text.
    pub preview: String,
}

/// The versions of one user turn on the active path, for a switcher on that message
/// (‹ 2/3 ›).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantSet {
    /// The user message's index on the active path.
    pub index: u64,
    /// The 1-based position of the version shown (the active path's) in `versions`.
    pub position: u32,
    /// Every version in the order they were written: `null` is the active path's own,
    /// a number the ordinal of a shelved branch to switch to.
    pub versions: Vec<Option<u32>>,
}

/// How many characters of a branch's first user text its preview holds.
pub const BRANCH_PREVIEW_CHARS: usize = 200;
