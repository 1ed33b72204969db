//! `ToolError`: everything that can go wrong in a tool call. The tools return it
//! internally and convert it into a `ToolOutput::error` at the edge, because a tool
//! never fails the run: the message is for the model to read and act on, so each one
//! names the path as the model wrote it and, where it helps, what to do instead.

use crate::path::PathError;
use spool_engine::ToolOutput;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments for {tool}: {reason}")]
    BadArguments { tool: &'static str, reason: String },
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("{0:?} is a directory; use list to see its entries")]
    IsDirectory(String),
    #[error("{0:?} is not a directory")]
    NotDirectory(String),
    #[error("{0:?} is not a regular file")]
    NotRegularFile(String),
    #[error("{0:?} looks like a binary file (it contains NUL bytes); read only shows text files")]
    Binary(String),
    #[error("offset {offset} is past the end of {path:?}, which has {lines} lines")]
    OffsetPastEnd { path: String, offset: u64, lines: u64 },
    #[error("cannot read {path:?}: {source}")]
    Io { path: String, source: io::Error },
    #[error("the run was cancelled")]
    Cancelled,
    /// The blocking task panicked or was torn down by a shutting-down runtime.
    #[error("the tool failed unexpectedly: {0}")]
    Internal(String),
}

impl ToolError {
    /// An adapter for `map_err` on I/O done on behalf of `path`.
    pub(crate) fn io(path: &str) -> impl FnOnce(io::Error) -> ToolError + '_ {
        move |source| ToolError::Io { path: path.to_owned(), source }
    }
}

impl From<ToolError> for ToolOutput {
    fn from(err: ToolError) -> Self {
        ToolOutput::error(err.to_string())
    }
}
