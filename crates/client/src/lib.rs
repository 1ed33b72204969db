//! `spool-client`: a typed async client for a Spool server.
//!
//! - [`Client`]: the REST calls a chat needs (projects, sessions, prompts, stop,
//!   approvals, snapshots), with an optional bearer token.
//! - [`SessionStream`] ([`Client::follow`]): a session's stream that recovers by itself
//!   as the browser client does — cursor resume, dedupe by seq, a snapshot after a gap
//!   or a new stream, backoff 1.5–30 s with jitter reset by any frame, a 45 s watchdog
//!   — and yields each event with the folded session state.
//!
//! The wire types are the server's own (`spool_protocol`, re-exported as [`protocol`]):
//! there is no second definition of any of them here.
//!
//! The README's "Clients" section has a whole example; `tests/client.rs` runs it.

mod error;
mod fold;
mod outcome;
mod rest;
mod stream;

pub use error::Error;
pub use outcome::{Finished, finished};
pub use rest::{Client, MAX_ANSWER_BYTES, Steered};
pub use spool_protocol as protocol;
pub use stream::{Event, SessionStream, StreamOptions, Update};
