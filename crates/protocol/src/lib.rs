//! Spool's wire vocabulary, shared by every other crate.
//!
//! Everything here is plain data plus pure functions: ids, the domain records
//! (projects, sessions, messages, runs), the canonical agent events, the frames of
//! the native session stream, the SSE encoder/decoder and stream cursors. This crate
//! does no I/O and never imports tokio, so the engine, the store, the server and any
//! client (tests, benchmarks, a future CLI) agree on one definition of each shape.

pub mod api;
pub mod approval;
pub mod branch;
pub mod cursor;
pub mod domain;
pub mod event;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod git;
pub mod guardrails;
pub mod hub;
pub mod ids;
pub mod message;
pub mod reach;
pub mod presence;
pub mod revert;
pub mod sse;
pub mod time;
pub mod view;

pub use approval::{
    AlwaysOption, Approval, ApprovalKind, ApprovalStatus, CallSubject, Decision, LastApproval, NEVER_EXPIRES, OnTimeout,
    PermissionAction, PermissionRule, RuleTimeout, Verdict, Wait,
};
pub use branch::{BRANCH_PREVIEW_CHARS, Branch, BranchKind, VariantSet};
pub use cursor::Cursor;
pub use domain::*;
pub use event::{AgentEvent, SnapshotPhase, StreamDelta};
pub use frame::{Frame, FrameBody, SessionState};
pub use guardrails::Guardrails;
pub use ids::*;
pub use message::*;
pub use presence::{ClientKind, Presence};
pub use revert::{PendingRevert, REVERT_DIFF_CAP, RevertAction, RevertConflict, RevertFile, RevertReport};
