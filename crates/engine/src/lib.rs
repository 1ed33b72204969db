//! The engine: sessions, runs, the agent loop, and `SessionEvents` (sequence, replay
//! buffer, fan-out). It defines the traits its collaborators implement — [`Store`],
//! [`Model`], [`Tool`] — and imports no web framework, database driver or HTTP client.

mod approvals;
pub mod attachments;
pub mod client_tools;
pub mod auth;
pub mod caps;
pub mod clock;
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
mod list_note;
pub mod lists;
pub mod metrics;
pub mod model;
pub mod models;
mod overlap;
mod per_user;
pub mod readiness;
mod reaper;
pub mod revert;
mod registry;
mod remote;
mod roots;
mod run;
mod run_env;
pub mod run_log;
mod run_sequence;
mod search;
pub mod search_slots;
pub mod secrets;
mod session;
pub mod snapshots;
pub mod store;
pub mod tool;
pub mod tool_source;
pub mod view;

pub use approvals::{DecisionInput, DecisionOutcome, DecisionTarget};
pub use clock::{Clock, ManualClock};
pub use cluster::{Cluster, ClusterMessage};
pub use engine::{
    DEFAULT_PAGE, Engine, EngineConfig, MAX_PAGE, MAX_QUEUED, MAX_STEERS, Projects, PromptInput, Runs, SessionPatch,
    SessionUse, Steered,
    Reverts, Sessions, SourceView, StreamPermit, Submitted, ToolSources,
};
pub use engine::PRESENCE_SETTLE;
pub use error::{EngineError, Result};
pub use events::{
    Ended, EventLimits, RunAfter, RunFrom, RunStart, SessionEvents, Start, Subscription, TypedSubscription, Viewer,
};
pub use framebus::{BusFailure, BusItem, FrameBus};
pub use git::{GitPolling, GitProbe};
pub use leases::LOCAL_NODE;
pub use lists::ListNotifier;
pub use model::{FileBytes, Inputs, Model, ModelError, ModelEvent, ModelRequest, ModelStream, ToolSpec};
pub use models::{ModelInfo, Models, Price};
pub use readiness::{Check, CheckState, Readiness};
pub use roots::WorkspaceRoots;
// The records the API answers with live in the protocol crate, where clients read them
// with the same definitions; the engine's callers keep finding them here.
pub use run_sequence::RunCount;
pub use search::{DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, MAX_SEARCH_QUERY, SearchHit, SearchPage};
pub use spool_protocol::api::{
    ApprovalPolicy, MessagePage, Multitask, OnDisconnect, PromptAccepted, PromptQueued, SessionDetail, SessionInfo,
};
pub use store::{
    DecidedCall, Draft, IdempotencyClaim, Lease, LeaseFence, Listener, LoginSession, QueueInsert, QueueLimits,
    QueuedPrompt, RuleRemoval, RunInsert, SessionMatch, Store, StoreError, Supersede,
};
pub use store::{
    ClaimedDelivery, Delivery, DeliveryClaim, DeliveryOutcome, DeliveryStatus, DisabledWebhook, StoredEvent,
};
pub use tool::{
    Ask, AskPerson, Inspected, LiveAnswer, LiveAsk, LiveAsker, ProgressChunk, ProgressReader, Resource, Sample,
    SampleError, SampleMessage, SampleModel, SampleRequest, Sampler, SandboxStatus, SourceState, SourceStatus,
    SourceTool, Tool, ToolContext, ToolOrigin, ToolOutput, ToolProgress, ToolRegistry, ToolScope, ToolSource,
};
pub use tool_source::{SOURCE_WAIT, SourceChoices, canonical_json, source_enabled};
