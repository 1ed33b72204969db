//! The one error type of the client: the server refused (with its own code and
//! message), the server could not be reached, or its answer was not what the API says.

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error body (`{"error": {"code", "message"}}`).
    #[error("{status} {code}: {message}")]
    Api {
        status: reqwest::StatusCode,
        /// The stable machine-readable code (`not_found`, `session_busy`, …).
        code: String,
        message: String,
    },
    /// The request did not reach the server, or its answer was cut off.
    #[error("cannot reach the server: {0}")]
    Transport(#[from] reqwest::Error),
    /// The server's answer does not read as the API's type.
    #[error("unexpected answer ({status}): {detail}")]
    Unexpected { status: reqwest::StatusCode, detail: String },
    /// The base URL is not an http(s) URL.
    #[error("not a server URL: {0}")]
    BadUrl(String),
}

impl Error {
    /// The API's error code, when the server refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether trying again later may succeed (the server is down, busy or restarting),
    /// as opposed to a refusal that will not change (unknown session, bad token).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { status, .. } | Error::Unexpected { status, .. } => {
                status.is_server_error() || *status == reqwest::StatusCode::TOO_MANY_REQUESTS
            }
            Error::BadUrl(_) => false,
        }
    }
}
