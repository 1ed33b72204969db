//! What every store method may fail with: the one error type all record kinds share.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was violated (for example a message index already taken).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database failed or returned data that does not decode.
    #[error("storage failure: {0}")]
    Backend(String),
    /// A write held to a lease's fence (see [`Nodes::fenced`](super::Nodes::fenced))
    /// found the lease taken over or given up: nothing was written, and the writer no
    /// longer runs the session.
    #[error("fenced: {0}")]
    Fenced(String),
}
