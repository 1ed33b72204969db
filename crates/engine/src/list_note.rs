//! What a list notification says: the typed [`Change`] that dialects naming changes
//! show, and the [`ListNote`] that carries one between nodes. A leaf of its own, so the
//! cluster seam (which carries notes) and the list notifier (which makes and delivers
//! them) both take it from here instead of from each other.

use serde::{Deserialize, Serialize};
use spool_protocol::{ProjectId, SessionId};

/// A typed account of what changed, for dialects that name the change (the WebSocket
/// hub's `channel.created` / `channel.deleted`, OpenCode's `session.updated`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Change {
    SessionCreated { session: SessionId, project: ProjectId },
    SessionChanged { session: SessionId, project: ProjectId },
    SessionDeleted { session: SessionId, project: ProjectId },
    ProjectChanged { project: ProjectId },
}

/// One notification as it travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ListNote {
    /// [`ListNotifier::sessions_changed`](crate::ListNotifier::sessions_changed): a list frame and no typed change.
    SessionsChanged { project: ProjectId },
    /// [`ListNotifier::change`](crate::ListNotifier::change): a typed change and the list frame it implies.
    Change { change: Change },
}
