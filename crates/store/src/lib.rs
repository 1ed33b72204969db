//! Spool's durable storage: the engine's [`Store`](spool_engine::Store) trait on SQLite
//! ([`SqliteStore`], the default: one file, no database server) and on PostgreSQL
//! ([`PgStore`], for several nodes sharing one database), both with sqlx.
//!
//! Each backend is a directory with one module per record kind holding that kind's
//! SQL, plain text with bound parameters (not sqlx's compile-time checked macros, which
//! would need a database at build time), and its own numbered migrations
//! (`migrations/` for SQLite, `migrations-pg/` for PostgreSQL), embedded in the binary
//! and applied on open. The SQL is written per backend because the dialects differ;
//! what means the same on both is shared: [`rows`] turns rows into records,
//! [`message_codec`] a message into rows and back, [`delegate`] maps the trait onto a
//! backend's modules, and [`error`] maps failures. Both pass one conformance suite
//! (`tests/support`).

mod delegate;
mod error;
mod message_codec;
mod pg;
mod rows;
mod sqlite;

pub use pg::PgStore;
pub use sqlite::SqliteStore;
