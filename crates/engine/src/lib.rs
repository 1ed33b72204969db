//! The engine: sessions, runs, the agent loop, and `SessionEvents` (sequence, replay
//! buffer, fan-out). It defines the traits its collaborators implement — [`Store`],
//! [`Model`], [`Tool`] — and imports no web framework, database driver or HTTP client.

mod approvals;
pub mod auth;
pub mod cluster;
pub mod context;
mod draft;
mod drafts;
mod engine;
mod error;
pub mod events;
pub mod framebus;
pub mod git;
pub mod hub;
mod leases;
pub mod lists;
pub mod metrics;
pub mod model;
pub mod models;
mod queue;
pub mod readiness;
mod reaper;
mod registry;
mod remote;
mod roots;
mod run;
mod run_env;
mod run_sequence;
mod search;
mod session;
pub mod store;
pub mod tool;
pub mod view;

pub use approvals::{DecisionInput, DecisionOutcome, DecisionTarget};
pub use cluster::{Cluster, ClusterMessage};
pub use engine::{
    DEFAULT_PAGE, Engine, EngineConfig, MAX_PAGE, MessagePage, PromptAccepted, PromptInput, SessionDetail, SessionInfo,
    SessionPatch, StreamPermit,
};
pub use error::{EngineError, Result};
pub use events::{EventLimits, RunAfter, RunFrom, RunStart, SessionEvents, Start, Subscription, TypedSubscription};
pub use framebus::{BusFailure, BusItem, FrameBus};
pub use git::{GitPolling, GitProbe};
pub use leases::LOCAL_NODE;
pub use lists::ListNotifier;
pub use model::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, ToolSpec};
pub use models::{ModelInfo, Models, Price};
pub use queue::{MAX_QUEUED, PromptQueued, Submitted};
pub use readiness::{Check, CheckState, Readiness};
pub use roots::WorkspaceRoots;
pub use run::{ApprovalPolicy, OnDisconnect};
pub use run_sequence::RunCount;
pub use search::{DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, MAX_SEARCH_QUERY, SearchHit, SearchPage};
pub use store::{
    DecidedCall, Draft, IdempotencyClaim, Lease, Listener, LoginSession, QueueInsert, QueuedPrompt, RunInsert,
    SessionMatch, Store, StoreError, Supersede,
};
pub use tool::{
    Ask, Inspected, ProgressChunk, ProgressReader, Resource, SandboxStatus, Tool, ToolContext, ToolOutput,
    ToolProgress, ToolRegistry,
};
