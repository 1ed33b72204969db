//! The engine: sessions, runs, the agent loop, and `SessionEvents` (sequence, replay
//! buffer, fan-out). It defines the traits its collaborators implement — [`Store`],
//! [`Model`], [`Tool`] — and imports no web framework, database driver or HTTP client.

pub mod model;
pub mod store;
pub mod tool;

pub use model::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, ToolSpec};
pub use store::{RunInsert, Store, StoreError};
pub use tool::{Tool, ToolContext, ToolOutput, ToolRegistry};
