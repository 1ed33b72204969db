//! Spool's durable storage: the engine's [`Store`](spool_engine::Store) trait on SQLite
//! ([`SqliteStore`], the default: one file, no database server) and on PostgreSQL
//! ([`PgStore`], for several nodes sharing one database), both with sqlx.
//!
//! The SQL is written once for both databases, one module per record kind in `sql/`:
//! plain text with bound parameters (not sqlx's compile-time checked macros, which
//! would need a database at build time). Each backend directory (`sqlite/`, `pg/`)
//! holds its connection setup and a `dialect` module with what the two databases do
//! differently, and compiles the `sql/` modules into itself against it (`sql/mod.rs`
//! says why this shape). The schemas differ in column types, so each backend has its
//! own numbered migrations (`migrations/` for SQLite, `migrations-pg/` for PostgreSQL),
//! embedded in the binary and applied on open. Also shared: [`rows`] turns rows into
//! records, [`message_codec`] a message into rows and back, [`delegate`] maps the trait
//! onto a backend's modules, and [`error`] maps failures. Both pass one conformance
//! suite (`tests/support`).

mod delegate;
mod error;
mod message_codec;
mod pg;
mod rows;
mod sqlite;

pub use pg::PgStore;
pub use sqlite::SqliteStore;
