//! The durable records: projects, sessions and runs, as the API returns them and the
//! store keeps them. Field names are camelCase on the wire.

use crate::ids::*;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A registered directory that a session's tools act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub id: ProjectId,
    pub owner_id: UserId,
    pub name: String,
    /// Canonical absolute path, resolved once at registration.
    pub path: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Which directory `path` named when it was registered. Never on the wire: the
    /// tools refuse the project once `path` leads anywhere else (a symlink swapped in,
    /// another directory moved there). `None` for projects registered before it was kept.
    #[serde(skip)]
    pub dir: Option<DirIdentity>,
}

/// A directory's identity on this machine: its device and inode numbers. A path can be
/// made to lead elsewhere; the pair cannot, as long as the directory exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DirIdentity {
    pub dev: u64,
    pub ino: u64,
}

impl DirIdentity {
    /// Whether the directory `found` at the registered path (opened with no symbolic
    /// link on the way) is the one registered. The inode decides: a directory
    /// renamed into the path keeps its own inode, and one made anew in the same place
    /// is where the project was anyway. The device number does not decide, because it
    /// changes without the directory changing: a container's overlay or a network
    /// file system gets a new one when mounted again, and each node of a cluster sees
    /// a shared directory under its own.
    pub fn same_dir(&self, found: DirIdentity) -> bool {
        self.ino == found.ino
    }
}

/// Whether a session has an active run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Idle,
    Busy,
}

/// How a session's runs may act. In `plan` mode the model gets only the tools that
/// change nothing (read, list, glob, grep, question, todo_write) and `exit_plan`, which
/// asks the person to accept its plan; accepting switches the session to `agent`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionMode {
    #[default]
    Agent,
    Plan,
}

impl SessionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Agent => "agent",
            SessionMode::Plan => "plan",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "agent" => Some(SessionMode::Agent),
            "plan" => Some(SessionMode::Plan),
            _ => None,
        }
    }
}

/// One conversation in a project.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: SessionId,
    pub project_id: ProjectId,
    pub owner_id: UserId,
    pub title: String,
    /// True once a title was set by a person or derived from the first prompt; an
    /// untitled session gets its title from the first prompt.
    pub title_set: bool,
    pub archived: bool,
    /// This session's own permission rules, checked after the server's (so they win).
    #[serde(default)]
    pub permissions: Vec<crate::approval::PermissionRule>,
    /// The configured model this session uses; `None` means the server's default.
    #[serde(default)]
    pub model: Option<String>,
    /// `agent` (the default) or `plan` (see [`SessionMode`]).
    #[serde(default)]
    pub mode: SessionMode,
    /// The highest message index a person has read (a durable read receipt).
    #[serde(default)]
    pub read_index: Option<u64>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// Where a run is in its life: `running → interrupted ⇄ running → completed | failed | cancelled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Interrupted,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// A settled run never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "running" => RunStatus::Running,
            "interrupted" => RunStatus::Interrupted,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }
}

/// Token counts reported by the model, and what they cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Output tokens spent on reasoning (included in `output` where the provider counts so).
    #[serde(default)]
    pub reasoning: u64,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write: u64,
    /// Cost in US dollars from the configured price table (0 when the model has no price).
    #[serde(default)]
    pub cost: f64,
    /// Some counts are Spool's estimate, not the provider's: a model call stopped or
    /// failed mid-answer, before the provider reported what it used. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Adds `other`; a sum with an estimated part is an estimate.
    pub fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.reasoning += other.reasoning;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.cost += other.cost;
        self.estimated |= other.estimated;
    }
}

/// Why a run failed: a stable machine code plus a human message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunError {
    pub code: String,
    pub message: String,
}

/// One prompt's execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub id: RunId,
    pub session_id: SessionId,
    pub owner_id: UserId,
    /// The client's idempotency key: the same requestId in one session is the same run.
    pub request_id: String,
    pub status: RunStatus,
    /// Absolute index of the user message that started the run.
    pub user_message_index: u64,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub first_token_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub usage: Usage,
    pub error: Option<RunError>,
}

/// Where a confirmed fact came from. Facts are never written from the model's own
/// guesses: only from a tool call that succeeded, or from a person saying so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FactSource {
    Tool,
    User,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fact {
    pub text: String,
    pub source: FactSource,
    pub at: Millis,
}

/// What a session remembers beyond its raw messages: confirmed facts, and the summary
/// of the turns that compaction folded away (messages with `index < summarized_before`
/// are represented by `summary` in model calls; the store still holds them all).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionMemory {
    #[serde(default)]
    pub facts: Vec<Fact>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub summarized_before: u64,
}

/// A bearer token as the store keeps it: the SHA-256 of the secret, never the secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    pub id: TokenId,
    pub user_id: UserId,
    pub user_name: String,
    /// Lower-case hex SHA-256 of the secret.
    #[serde(skip_serializing)]
    pub hash: String,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}
