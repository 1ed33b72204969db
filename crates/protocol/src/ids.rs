//! Typed ids: a short prefix, `_`, then a ULID body in lower case.
//!
//! A ULID starts with the creation time, so ids sort by creation order as plain
//! strings (what `ORDER BY id` and cursors rely on) and are URL-safe. The prefix
//! makes a pasted id self-describing (`ses_…` is a session) and lets parsing reject
//! an id of the wrong kind before it reaches the store.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a string is not an id of the expected kind.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{value}` is not a valid {kind} id (expected `{prefix}_` followed by 26 characters)")]
pub struct IdError {
    pub kind: &'static str,
    pub prefix: &'static str,
    pub value: String,
}

/// One monotonic generator for the process: ids made in the same millisecond still sort
/// in creation order (a plain ULID's random part would order them by chance).
static GENERATOR: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());

fn next_body() -> String {
    let ulid = GENERATOR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .generate()
        // Only after 2^80 ids in one millisecond: fall back to a plain ULID.
        .unwrap_or_else(|_| ulid::Ulid::new());
    ulid.to_string().to_ascii_lowercase()
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new id, ordered after every id this process made before.
            pub fn new() -> Self {
                Self(format!("{}_{}", $prefix, next_body()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                let valid = s
                    .strip_prefix($prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|body| body.len() == 26 && body.bytes().all(|b| b.is_ascii_alphanumeric()));
                if valid {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(IdError { kind: $kind, prefix: $prefix, value: s.chars().take(64).collect() })
                }
            }
        }

        /// A string with the id's prefix: path parameters and fields carry the same shape.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(concat!("^", $prefix, "_[0-9A-Za-z]{26}$")))
                    .examples([concat!($prefix, "_01hzy3k8v0q9w7x5c2b4n6m8p0")])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

id_type!(/// A user: the owner of every other record.
    UserId, "usr", "user");
id_type!(/// A registered project directory.
    ProjectId, "prj", "project");
id_type!(/// One conversation.
    SessionId, "ses", "session");
id_type!(/// One message in a session.
    MessageId, "msg", "message");
id_type!(/// One prompt's execution.
    RunId, "run", "run");
id_type!(/// A pending human decision.
    ApprovalId, "per", "approval");
id_type!(/// A file a user uploaded or sent in a prompt (its bytes are a blob in the data
    /// directory, shared by every attachment with the same SHA-256).
    AttachmentId, "att", "attachment");
id_type!(/// An API token (its id; the secret itself is never stored).
    TokenId, "tok", "token");
id_type!(/// A browser login session (its id; the cookie's secret is never stored).
    LoginId, "lgn", "login session");
id_type!(/// One `SessionEvents` instance: a new one after every restart or reload.
    StreamId, "stm", "stream");
id_type!(/// One outbox event: a change told to systems and people outside a session (the
    /// `webhook-id` of every try at delivering it).
    EventId, "evt", "event");
id_type!(/// One outbox event on its way to one target (a webhook, a push subscription).
    DeliveryId, "dlv", "delivery");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sort_by_creation() {
        let a = SessionId::new();
        let b = SessionId::new();
        assert!(a.as_str().starts_with("ses_"));
        assert_eq!(a.as_str().len(), 30);
        assert_eq!(a.as_str().parse::<SessionId>().unwrap(), a);
        assert!(a < b, "ids sort in creation order, even within one millisecond");
    }

    #[test]
    fn wrong_prefix_or_length_is_rejected() {
        let s = SessionId::new();
        assert!(s.as_str().parse::<ProjectId>().is_err());
        assert!("ses_short".parse::<SessionId>().is_err());
        assert!("ses_01hzzzzzzzzzzzzzzzzzzzzz/x".parse::<SessionId>().is_err());
        assert!(serde_json::from_str::<RunId>("\"run_bad\"").is_err());
    }
}
