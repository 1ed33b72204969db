//! Spool's durable storage on SQLite: [`SqliteStore`] implements the engine's
//! [`Store`](spool_engine::Store) trait with sqlx.
//!
//! SQLite is the default because a single-machine deployment then needs no database
//! server: one file, opened in WAL mode so readers never wait for the writer. The
//! schema lives in numbered files under `migrations/`, embedded in the binary and
//! applied on open, so a store file is always at the schema this code expects.
//! Queries are plain SQL with bound parameters (not sqlx's compile-time checked
//! macros, which would need a database at build time), one module per record kind;
//! `message_codec` holds the only non-obvious mapping, a message to rows and back.

mod approvals;
mod error;
mod idempotency;
mod memory;
mod message_codec;
mod messages;
mod projects;
mod runs;
mod sessions;
mod sqlite;
mod store;
mod tokens;
mod users;

pub use sqlite::SqliteStore;
