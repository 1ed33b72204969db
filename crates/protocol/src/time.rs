//! Timestamps are milliseconds since the Unix epoch (`i64`), the unit JavaScript's
//! `Date.now()` uses, so a browser can compare them without conversion.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current wall-clock time in milliseconds.
pub fn now_ms() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or(0)
}
