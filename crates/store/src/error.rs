//! Turning database failures and out-of-range values into [`StoreError`].
//!
//! The store never panics on what the database hands back: a driver error, a column
//! that does not decode, an id of the wrong shape or a number that does not fit all
//! become `Backend`. Only a violated uniqueness rule becomes `Conflict`, because that
//! is the one failure a caller is expected to act on (another writer got there first).

use spool_engine::StoreError;
use std::str::FromStr;

/// Maps a sqlx error: unique violations are `Conflict`, everything else `Backend`.
pub(crate) fn db_error(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(db.message().to_owned()),
        _ => StoreError::Backend(err.to_string()),
    }
}

/// A `u64` from the domain as SQLite's signed 64-bit integer.
pub(crate) fn to_db_int(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Backend(format!("{what} {value} does not fit in a database integer")))
}

/// A stored integer back as the domain's `u64`; negative means the row is corrupt.
pub(crate) fn from_db_int(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Backend(format!("stored {what} {value} is negative")))
}

/// Parses a stored id; a malformed one means the row was not written by this store.
pub(crate) fn parse_id<T>(value: &str) -> Result<T, StoreError>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e: T::Err| StoreError::Backend(format!("stored id is invalid: {e}")))
}
