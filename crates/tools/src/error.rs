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
    #[error("{0:?} is a directory; give the path of a file")]
    WriteToDirectory(String),
    #[error("{0:?} is not a directory")]
    NotDirectory(String),
    #[error("{0:?} is not a regular file")]
    NotRegularFile(String),
    #[error("{0:?} is read-only; it was left unchanged")]
    ReadOnly(String),
    #[error("{0:?} looks like a binary file (it contains NUL bytes); read only shows text files")]
    Binary(String),
    #[error("{0:?} looks like a binary file (it contains NUL bytes); grep only searches text files")]
    BinaryNotSearched(String),
    /// A regex or glob the model wrote that cannot be used; `reason` says why.
    #[error("invalid {kind} {pattern:?}: {reason}")]
    BadPattern { kind: &'static str, pattern: String, reason: String },
    #[error("{0:?} is not UTF-8 text; edit only changes text files")]
    NotUtf8(String),
    #[error("{path:?} would be {bytes} bytes; files over {limit} bytes (10 MiB) are refused", limit = crate::MAX_FILE_BYTES)]
    TooLarge { path: String, bytes: usize },
    #[error(
        "oldString was not found in {0:?}; it must match the file exactly, including whitespace, \
         indentation and line endings (read the file and copy the text)"
    )]
    OldStringNotFound(String),
    #[error(
        "oldString occurs {count} times in {path:?}; include more surrounding text so it matches \
         once, or set replaceAll to true to replace all {count}"
    )]
    OldStringAmbiguous { path: String, count: usize },
    #[error("offset {offset} is past the end of {path:?}, which has {lines} lines")]
    OffsetPastEnd { path: String, offset: u64, lines: u64 },
    #[error("cannot read {path:?}: {source}")]
    Io { path: String, source: io::Error },
    #[error("cannot write {path:?}: {source}; it was left unchanged")]
    WriteIo { path: String, source: io::Error },
    #[error("cannot start the shell: {0}")]
    Spawn(io::Error),
    /// The command ran past its timeout; `output` is what it printed until then.
    #[error("timed out after {seconds} s; the command and every process it started were killed\n{output}")]
    TimedOut { seconds: u64, output: String },
    /// The run was aborted while the tool worked.
    #[error("aborted")]
    Aborted,
    /// The blocking task panicked or was torn down by a shutting-down runtime.
    #[error("the tool failed unexpectedly: {0}")]
    Internal(String),
}

impl ToolError {
    /// An adapter for `map_err` on I/O done on behalf of `path`.
    pub(crate) fn io(path: &str) -> impl FnOnce(io::Error) -> ToolError + '_ {
        move |source| ToolError::Io { path: path.to_owned(), source }
    }

    /// Like [`ToolError::io`], for I/O that changes `path`.
    pub(crate) fn write_io(path: &str) -> impl FnOnce(io::Error) -> ToolError + '_ {
        move |source| ToolError::WriteIo { path: path.to_owned(), source }
    }
}

impl From<ToolError> for ToolOutput {
    fn from(err: ToolError) -> Self {
        ToolOutput::error(err.to_string())
    }
}
