//! The session state projection, defined once in `spool_protocol::view` (clients fold
//! frames with the same functions) and re-exported here, where the run loop uses it.

pub use spool_protocol::view::*;
