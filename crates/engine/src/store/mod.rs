//! The `Store` trait: everything Spool keeps durably.
//!
//! The engine talks to storage only through this trait, so SQLite (the default) and
//! PostgreSQL (past one machine) are interchangeable and pass the same test suite.
//! Methods are plain CRUD plus the few conditional writes whose atomicity the product
//! depends on (one run per requestId, one message per index). Ownership checks live
//! in the engine; the store keeps the owner column on every record.
//!
//! `Store` is the sum of one trait per record kind, each in its own file with the
//! records it reads and writes: [`Users`], [`Credentials`], [`Projects`], [`Sessions`],
//! [`Messages`], [`Drafts`], [`Notes`], [`Runs`], [`Queue`], [`Approvals`],
//! [`Idempotency`], [`Nodes`], [`RunFrames`], [`StepSnapshots`] and [`Branches`]. A reader looking for what the store does with runs
//! opens `runs.rs`; a part of the engine that needs only one kind can take only that
//! kind. Anything implementing every kind is a `Store` (the blanket impl below), and
//! `Arc<dyn Store>` reaches every kind's methods with no import, because a trait
//! object's methods include its supertraits'. Calling them on a concrete store (a test's
//! `SqliteStore`) needs the kind in scope: [`prelude`] brings all of them.

mod approvals;
mod attachments;
mod branches;
mod credentials;
mod drafts;
mod error;
mod idempotency;
mod messages;
mod nodes;
mod notes;
mod outbox;
mod projects;
mod push;
mod queue;
mod reverts;
mod run_frames;
mod runs;
mod sessions;
mod step_snapshots;
mod users;

pub use approvals::{Approvals, DecidedCall, Supersede};
pub use attachments::{Attachment, Attachments};
pub use branches::Branches;
pub use credentials::{Credentials, LoginSession};
pub use drafts::{Draft, Drafts};
pub use error::StoreError;
pub use idempotency::{Idempotency, IdempotencyClaim};
pub use messages::Messages;
pub use nodes::{Lease, LeaseFence, Listener, Nodes};
pub use notes::Notes;
pub use outbox::{
    ClaimedDelivery, Delivery, DeliveryClaim, DeliveryOutcome, DeliveryStatus, DisabledWebhook, Outbox, StoredEvent,
};
pub use projects::Projects;
pub use push::{Push, PushSubscription};
pub use queue::{Queue, QueueInsert, QueueLimits, QueuedPrompt};
pub use reverts::{SessionRevert, SessionReverts};
pub use run_frames::{RunFrameChunk, RunFrames};
pub use runs::{RunInsert, Runs};
pub use sessions::{RuleRemoval, SessionMatch, Sessions};
pub use step_snapshots::{StepSnapshot, StepSnapshots};
pub use users::Users;

/// Everything Spool keeps durably: every record kind at once, what the engine holds as
/// `Arc<dyn Store>`.
pub trait Store:
    Users
    + Attachments
    + Credentials
    + Projects
    + Sessions
    + Messages
    + Drafts
    + Notes
    + Runs
    + Queue
    + Approvals
    + Idempotency
    + Nodes
    + RunFrames
    + StepSnapshots
    + Branches
    + SessionReverts
    + Push
    + Outbox
{
}

// Whatever implements every kind is a store; nothing implements `Store` by hand.
impl<T> Store for T where
    T: Users
        + Attachments
        + Credentials
        + Projects
        + Sessions
        + Messages
        + Drafts
        + Notes
        + Runs
        + Queue
        + Approvals
        + Idempotency
        + Nodes
        + RunFrames
        + StepSnapshots
        + Branches
        + SessionReverts
        + Push
        + Outbox
{
}

/// Every record kind's trait, for code that calls store methods on a concrete store or
/// a generic one (`use spool_engine::store::prelude::*`). Code holding a `dyn Store`
/// needs none of them.
pub mod prelude {
    pub use super::Attachments;
    pub use super::{
        Approvals, Branches, Credentials, Drafts, Idempotency, Messages, Nodes, Notes, Outbox, Projects, Queue, RunFrames,
        Push, Runs, SessionReverts, Sessions, StepSnapshots, Store, Users,
    };
}
