//! The engine's error type: each case is something a client can act on, and the
//! server maps each to one HTTP status and a stable `code`.

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The thing does not exist, or belongs to another user (indistinguishable on purpose).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request is malformed or breaks a limit.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// The input is larger than allowed.
    #[error("{message}")]
    TooLarge { code: &'static str, message: String },
    /// The thing existed but is no longer usable (an expired approval).
    #[error("{message}")]
    Gone { code: &'static str, message: String },
    /// A per-user limit is reached (runs, streams).
    #[error("{message}")]
    TooMany { code: &'static str, message: String },
    /// The session already has an active run.
    #[error("the session already has an active run ({0}); abort it or wait for it to settle")]
    SessionBusy(String),
    /// The user may not do this to this thing (a project outside their roots).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// The request conflicts with existing state.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A service the node depends on is unreachable for now (the frame bus); retrying
    /// later may succeed.
    #[error("{message}")]
    Unavailable { code: &'static str, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl EngineError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        EngineError::Invalid { code, message: message.into() }
    }

    /// The stable machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::NotFound(_) => "not_found",
            EngineError::Invalid { code, .. }
            | EngineError::TooLarge { code, .. }
            | EngineError::Conflict { code, .. }
            | EngineError::Forbidden { code, .. }
            | EngineError::Gone { code, .. }
            | EngineError::TooMany { code, .. }
            | EngineError::Unavailable { code, .. } => code,
            EngineError::SessionBusy(_) => "session_busy",
            EngineError::Store(StoreError::Conflict(_)) => "conflict",
            EngineError::Store(StoreError::Backend(_)) => "storage_error",
            // Another node took the session's lease over while this one began a write
            // for it: the session is busy there.
            EngineError::Store(StoreError::Fenced(_)) => "session_busy",
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
